"""Linux's per-process settings through prctl(2) that keep no process behind its parent: a
child that is stopped when its parent ends, and a parent that adopts its children's orphans.
On systems without prctl both are no-ops."""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def die_with_parent(parent: int) -> None:
    """Run in a child before its program starts: SIGTERM it when `parent` ends, however it ends
    (the setting survives the exec). A child whose parent is already gone exits at once."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def adopt_orphans() -> None:
    """Become the parent of every process this one's descendants leave behind (a subreaper), so
    this process sees them exit and reaps them, as a container's PID 1 does anyway."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
