"""Ends the sessions a test process started once that test process is gone, however it ended
(a normal exit, Ctrl-C, a CI time-out, `kill -9`).

Every process a test starts leads a session of its own, whose id is its pid; what it starts
stays in that session, also in process groups of its own (as `serve` runs vLLM). Run as
`python tests/support/reaper.py`, in a session of its own so a signal to the test process's
group does
not reach it. It reads `+SID` (a session to end) and `-SID` (a session already ended) from
stdin, one a line; end of input means the test process is gone. Then the leading group of every
session still listed gets SIGTERM (so `serve` stops vLLM in order), and every process of the
session gets SIGKILL if anything in it outlives `GRACE_S`.

It imports nothing of the project, so it runs whatever state the checkout is in.
"""

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable

GRACE_S = 10.0
POLL_S = 0.1


def session_members(sid: int) -> list[int]:
    """The processes of the session (zombies included), from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # Fields after the command's closing parenthesis: state, ppid, pgrp, session.
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid:
            members.append(int(entry))
    return members


def kill_session(sid: int) -> None:
    """SIGKILL to every process of the session."""
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def end_sessions(sessions: set[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM to every session's leading group, then SIGKILL to every process of the sessions
    with a process left after `grace_s`."""
    for sid in sessions:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = {sid for sid in sessions if session_members(sid)}
    while alive and time.monotonic() < deadline:
        time.sleep(POLL_S)
        alive = {sid for sid in alive if session_members(sid)}
    for sid in alive:
        kill_session(sid)


def read_sessions(lines: Iterable[str]) -> set[int]:
    """The sessions still to end once the input ends."""
    sessions: set[int] = set()
    for line in lines:
        sign, sid = line[:1], int(line[1:])
        if sign == "+":
            sessions.add(sid)
        else:
            sessions.discard(sid)
    return sessions


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_sessions(read_sessions(sys.stdin))


if __name__ == "__main__":
    main()
