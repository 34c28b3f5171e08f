"""The stall witness: an independent process that only sleeps, 50 ms at a time, and notes every
time it woke up late, and how much of that it spent runnable on a run queue. A latency figure
counts only beside a witness that saw no stall: when the machine delays a sleeper that does no
work (the kernel's scheduler across sessions, a virtual machine's host), it delays the client
and the server as much, and no result of the server's own scheduling explains it.

    with Witness() as witness:
        started = time.monotonic()
        ...  # a phase
        seen = witness.between(started, time.monotonic())
        print(seen)  # "witness: 0 stalls, worst 3 ms"

The witness runs at the default CPU priority (nice 0) whatever its parent runs at, and stamps
its wake-ups with the machine-wide monotonic clock, so its stalls line up with any other
process's stamps. Run alone, it prints its stalls as they happen:

    .venv/bin/python -m benchmarks.witness [--seconds 60]
"""

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO

NAP_S = 0.05
# Later than this is a stall: longer than any scheduling delay of a runnable process on an
# idle-enough machine, and short of what a live request's tail is measured in.
STALL_S = 0.2
# Wake-ups later than this are reported to the parent (the worst of a phase).
NOTED_S = 0.005


@dataclass(frozen=True)
class Seen:
    """What the witness saw over a window: its stalls, and its latest wake-up."""

    stalls: int
    worst_s: float
    # How much of the worst wake-up the witness spent runnable on a run queue.
    worst_queued_s: float = 0.0

    @property
    def stalled(self) -> bool:
        return self.stalls > 0

    def __str__(self) -> str:
        mark = "  STALLED: figures beside it include the machine's delay" if self.stalled else ""
        worst = f"worst {self.worst_s * 1000:.0f} ms ({self.worst_queued_s * 1000:.0f} queued)"
        return f"witness: {self.stalls} stalls, {worst}{mark}"


class Witness:
    """The witness process, and the late wake-ups it reported, as (woke at, how late, how much
    of that on a run queue)."""

    def __init__(self) -> None:
        self.late: list[tuple[float, float, float]] = []
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> "Witness":
        self._process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.witness", "--report"],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        stdout = self._process.stdout
        assert stdout is not None
        self._reader = threading.Thread(target=self._read, args=(stdout,), daemon=True)
        self._reader.start()
        return self

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            woke, late, queued = (float(field) for field in line.split())
            self.late.append((woke, late, queued))

    def __exit__(self, *_: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()
        if self._reader is not None:
            self._reader.join()

    def between(self, start: float, end: float) -> Seen:
        """What the witness saw from `start` to `end` (monotonic seconds): a stall counts when
        the nap it delayed overlaps the window."""
        within = [
            (late, queued)
            for woke, late, queued in list(self.late)
            if woke >= start and woke - late <= end
        ]
        stalls = [(late, queued) for late, queued in within if late > STALL_S]
        worst = max(within, default=(0.0, 0.0))
        return Seen(len(stalls), worst[0], worst[1])


def queued_s() -> float:
    """How long this thread has waited on a run queue, runnable but not running, in all (the
    kernel's schedstat): a late wake-up that waited there lost the CPU to other work; one that
    did not was woken late (the timer, or the virtual CPU itself was not running)."""
    with open("/proc/thread-self/schedstat", encoding="ascii") as schedstat:
        return int(schedstat.read().split()[1]) / 1e9


def watch(seconds: float | None, report: bool) -> None:
    """Sleep `NAP_S` at a time; print each wake-up later than `NOTED_S` (as `woke late queued`
    for a parent with `report`, in words otherwise)."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    end = None if seconds is None else time.monotonic() + seconds
    stalls, worst = 0, 0.0
    while end is None or time.monotonic() < end:
        asleep, queued = time.monotonic(), queued_s()
        time.sleep(NAP_S)
        woke = time.monotonic()
        late, queued = woke - asleep - NAP_S, queued_s() - queued
        if late <= NOTED_S:
            continue
        if report:
            print(f"{woke:.4f} {late:.4f} {queued:.4f}", flush=True)
        elif late > STALL_S:
            stalls, worst = stalls + 1, max(worst, late)
            print(f"stall: woke {late * 1000:.0f} ms late, {queued * 1000:.0f} ms of it queued")
    print(f"witness: {stalls} stalls over {STALL_S * 1000:.0f} ms, worst {worst * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, help="watch this long (default: until stopped)")
    parser.add_argument("--report", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        watch(args.seconds, args.report)


if __name__ == "__main__":
    main()
