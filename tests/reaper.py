"""Ends the process groups a test process started once that test process is gone, however it
ended (a normal exit, Ctrl-C, a CI time-out, `kill -9`).

Run as `python tests/reaper.py`, in a session of its own so a signal to the test process's group
does not reach it. It reads `+PGID` (a group to end) and `-PGID` (a group already ended) from
stdin, one a line; end of input means the test process is gone. Then every group still listed
gets SIGTERM, and SIGKILL if anything in it outlives `GRACE_S`.

It imports nothing of the project, so it runs whatever state the checkout is in.
"""

import os
import signal
import sys
import time
from collections.abc import Iterable

GRACE_S = 10.0
POLL_S = 0.1


def signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to the group; False when nothing of it is left."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def end_groups(groups: set[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM to every group, then SIGKILL to those with a process left after `grace_s`."""
    alive = {pgid for pgid in groups if signal_group(pgid, signal.SIGTERM)}
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(POLL_S)
        alive = {pgid for pgid in alive if signal_group(pgid, 0)}
    for pgid in alive:
        signal_group(pgid, signal.SIGKILL)


def read_groups(lines: Iterable[str]) -> set[int]:
    """The groups still to end once the input ends."""
    groups: set[int] = set()
    for line in lines:
        sign, pgid = line[:1], int(line[1:])
        if sign == "+":
            groups.add(pgid)
        else:
            groups.discard(pgid)
    return groups


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_groups(read_groups(sys.stdin))


if __name__ == "__main__":
    main()
