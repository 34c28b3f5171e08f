"""Every process a test starts (servers, moto, the `vllm-sagemaker` command) starts here, in a
session of its own that dies with the test process (`serve` runs vLLM in another process group
of that session).

Each session is registered with `tests/support/reaper.py`, which this module starts the first
time it
is needed; when the test process is gone, however it ended, the reaper ends every session still
registered (SIGTERM, then SIGKILL), so no engine outlives a killed test run.
"""

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from tests.support import reaper

REAPER: Final = Path(__file__).with_name("reaper.py")


class _Registry:
    """The pipe to the reaper: `+SID` registers a session, `-SID` forgets it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reaper: subprocess.Popen[bytes] | None = None

    def _send(self, line: str) -> None:
        with self._lock:
            if self._reaper is None:
                self._reaper = subprocess.Popen(
                    [sys.executable, str(REAPER)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,
                )
            assert self._reaper.stdin is not None
            self._reaper.stdin.write(line.encode() + b"\n")
            self._reaper.stdin.flush()

    def add(self, sid: int) -> None:
        self._send(f"+{sid}")

    def forget(self, sid: int) -> None:
        self._send(f"-{sid}")


_registry = _Registry()


def spawn(args: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(args, **popen)` in a new session that dies with this process."""
    process = subprocess.Popen(args, start_new_session=True, **popen)
    _registry.add(process.pid)
    return process


def kill(process: subprocess.Popen[Any]) -> int:
    """SIGKILL to the whole session (the process and all it started); its exit status."""
    reaper.kill_session(process.pid)
    returncode = process.wait()
    _registry.forget(process.pid)
    return returncode


def stop(process: subprocess.Popen[Any], timeout: float = 60) -> int:
    """SIGTERM (as SageMaker and Kubernetes stop a container), then SIGKILL to whatever is left
    of the session; the exit status of the process (-9 if it outlived `timeout`)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)
    exited = process.poll()
    killed = kill(process)
    return killed if exited is None else exited


def run(
    args: Sequence[str], stdin: bytes | str | None = None, timeout: float = 900, **popen: Any
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(args, capture_output=True)` in a session that dies with this process;
    the whole session is killed if the call fails or outlives `timeout`."""
    process = spawn(
        args,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )
    try:
        stdout, stderr = process.communicate(stdin, timeout)
    finally:
        kill(process)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
