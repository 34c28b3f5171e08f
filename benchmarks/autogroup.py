"""Linux's autogroup scheduling, which a latency benchmark on a small machine must account for.

With `kernel.sched_autogroup_enabled=1` (the default of most distributions' kernels) the CPU is
shared between sessions first and between threads within a session second. A benchmark's
servers run in sessions of their own (`tests.support.processes`), so its client, its servers and the
stall witness are separate groups, and a thread of one group woken on a core where its group
has had little load waits on the run queue for up to seconds (measured in `docs/operations.md`:
the witness waited 2.9 s, all of it runnable, beside plain vLLM and its client; with autogroup
off, never more than 5 ms). Benchmarks print the setting and can turn it off for their run.
"""

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

SYSCTL = Path("/proc/sys/kernel/sched_autogroup_enabled")
CHOICES = ("keep", "on", "off")


def current() -> str:
    """'on', 'off', or 'absent' (a kernel without autogroup)."""
    try:
        return "on" if SYSCTL.read_text().strip() == "1" else "off"
    except OSError:
        return "absent"


@contextlib.contextmanager
def autogroup(wanted: str) -> Iterator[str]:
    """Autogroup as `wanted` ('keep' leaves it) for the body, restored after; yields the
    setting the body runs with. Changing it takes root."""
    before = current()
    if wanted == "keep" or before in (wanted, "absent"):
        yield before
        return
    try:
        SYSCTL.write_text("1" if wanted == "on" else "0")
    except OSError as error:
        message = f"--autogroup {wanted}: cannot write {SYSCTL} ({error}); run as root"
        raise SystemExit(message) from None
    # A benchmark stopped with SIGTERM (kill, timeout) puts the setting back too.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        yield wanted
    finally:
        signal.signal(signal.SIGTERM, previous)
        SYSCTL.write_text("1" if before == "on" else "0")


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--autogroup",
        choices=CHOICES,
        default="keep",
        help="the kernel's autogroup scheduling for the run (on, off: takes root; restored after)",
    )


def described(setting: str) -> str:
    if setting == "on":
        return (
            "autogroup on: the client, the servers and the witness share the CPU as separate "
            "groups (see benchmarks/autogroup.py)"
        )
    return f"autogroup {setting}"
