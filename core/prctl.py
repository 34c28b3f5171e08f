"""Linux's per-process settings through prctl(2) and arch_prctl(2): a child that is stopped
when its parent ends, a parent that adopts its children's orphans (no-ops on systems without
prctl), and the raw arch_prctl call that asks for x86 CPU state such as AMX tile data
(`handler.engine.amx`)."""

import ctypes
import errno
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
SYS_ARCH_PRCTL = 158  # x86-64 Linux


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if sys.platform == "linux":
        _libc().prctl(option, value, 0, 0, 0)


def arch_prctl(code: int, argument: "ctypes._CArgObject | ctypes.c_ulong") -> int:
    """arch_prctl(2) on x86-64 Linux (`argument`: a value, or a pointer for the GET codes): 0,
    or the errno of its failure."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(code), argument) == 0:
        return 0
    return ctypes.get_errno() or errno.EINVAL


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
