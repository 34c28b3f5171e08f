"""AMX tile data for vLLM's CPU kernels: asked for in every vLLM process, before any kernel runs.

Linux lets a process execute AMX tile instructions only once it has asked for the tile data
state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); without the grant the first tile
instruction kills it with SIGILL. The grant is per process, and `exec` clears it: vLLM's CPU
workers are spawned (a fresh interpreter), so each must ask for itself.

vLLM's CPU attention takes its AMX kernel for bf16 wherever the CPU has AMX
(`cpu_attn.py: _get_attn_isa`), and that kernel never asks: only oneDNN does, the first time it
decides whether to use AMX. For the small bf16 weights of a small model, vLLM's linear layers
reach oneDNN only for steps of more than 4 tokens (sgl-kernel's `can_use_brgemm`); with the
model's warm-up skipped (`--enforce-eager`), a first step of 4 tokens or fewer ran the AMX
attention before anything had asked, and the worker died of SIGILL (issue 37). Asking at start
removes the race whatever the model, the dtype or the first request.

The package registers `register` as a vLLM general plugin (entry point `vllm.general_plugins`,
vLLM's public seam, loaded in the engine core and in every worker before the model). Each
process logs one `amx` line: `tiles=granted`, `tiles=none` (this CPU or kernel offers no tile
data), or `tiles=refused` with the reason, which is an error: the engine will die of SIGILL on
its first AMX kernel.
"""

import ctypes
import os
import platform
import sys
from dataclasses import dataclass

from vllm_sagemaker.core import prctl
from vllm_sagemaker.handler.process.logs import logfmt, logger

ARCH_GET_XCOMP_SUPP = 0x1021
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
XTILEDATA = 1 << XFEATURE_XTILEDATA
# What to do when the kernel refuses: vLLM's own AMX kernels run only for bf16.
REFUSED_ADVICE = "set SM_VLLM_DTYPE=float16 to keep vLLM's CPU kernels off AMX"


@dataclass(frozen=True)
class TileData:
    """What this process knows of AMX tile data: offered by the CPU and kernel, permitted to
    this process, and the errno of a request the kernel refused (0 when none was refused)."""

    offered: bool
    permitted: bool
    refused: int = 0


def needs_request(state: TileData) -> bool:
    """Ask for tile data when the kernel offers it and this process may not use it yet."""
    return state.offered and not state.permitted


def report(state: TileData) -> tuple[bool, str]:
    """The log line for the state after the request: (is it an error, the line)."""
    if not state.offered:
        return False, logfmt("amx", tiles="none")
    if state.permitted:
        return False, logfmt("amx", tiles="granted")
    reason = os.strerror(state.refused) if state.refused else "not permitted"
    return True, logfmt("amx", tiles="refused", reason=reason, advice=REFUSED_ADVICE)


def _features(code: int) -> int:
    """The xfeature mask ARCH_GET_XCOMP_SUPP or ARCH_GET_XCOMP_PERM reads (0 on failure)."""
    mask = ctypes.c_ulong(0)
    return mask.value if prctl.arch_prctl(code, ctypes.byref(mask)) == 0 else 0


def read() -> TileData:
    """This process's tile data state (none offered off x86-64 Linux)."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return TileData(offered=False, permitted=False)
    return TileData(
        offered=bool(_features(ARCH_GET_XCOMP_SUPP) & XTILEDATA),
        permitted=bool(_features(ARCH_GET_XCOMP_PERM) & XTILEDATA),
    )


def grant() -> TileData:
    """Ask for tile data where it is offered and not yet permitted; the state afterwards."""
    state = read()
    if not needs_request(state):
        return state
    refused = prctl.arch_prctl(ARCH_REQ_XCOMP_PERM, ctypes.c_ulong(XFEATURE_XTILEDATA))
    after = read()
    return TileData(after.offered, after.permitted, 0 if after.permitted else refused)


def register() -> None:
    """vLLM's general-plugin hook: grant this process tile data and log the outcome."""
    error, line = report(grant())
    (logger.error if error else logger.info)(line)
