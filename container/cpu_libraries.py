"""vLLM's CPU guide, applied by `serve`: tcmalloc and Intel OpenMP preloaded into the CPU engine.

vLLM's CPU installation guide and its own CPU image set
`LD_PRELOAD=<libtcmalloc_minimal.so.4>:<libiomp5.so>`, and vLLM's CPU worker warns at every start
when either is missing. `serve` does the same on a machine without GPUs, with the libraries it
finds: tcmalloc from the system (Debian's `libtcmalloc-minimal4`), Intel OpenMP from the Python
environment (the `intel-openmp` package vLLM's CPU build installs; x86 only). Libraries the user
preloads already are kept and not added twice; SAGEMAKER_CPU_PRELOAD=false leaves LD_PRELOAD as
it is. Measured in docs/operations.md ("The CPU engine's libraries").
"""

import os
import platform
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vllm_sagemaker.core.environment import CPU_PRELOAD_VAR, cpu_preload

TCMALLOC = "libtcmalloc_minimal.so.4"
IOMP = "libiomp5.so"
PRELOAD = "LD_PRELOAD"


@dataclass(frozen=True)
class Found:
    """Where the libraries are on this machine (None: not found); `x86` when Intel OpenMP
    applies (vLLM preloads it on x86 only)."""

    tcmalloc: str | None
    iomp: str | None
    x86: bool


def preload(
    env: Mapping[str, str], visible_gpus: int, found: Found
) -> tuple[dict[str, str], list[str]]:
    """LD_PRELOAD for the CPU engine (nothing on a GPU machine or with the switch off), and one
    line for each library it should have and cannot find."""
    if visible_gpus or not cpu_preload(env):
        return {}, []
    given = env.get(PRELOAD, "")
    wanted = [("tcmalloc", "libtcmalloc", found.tcmalloc, "libtcmalloc-minimal4 (Debian, Ubuntu)")]
    if found.x86:
        wanted.append(("Intel OpenMP", "libiomp", found.iomp, "pip install intel-openmp"))
    added, missing = [], []
    for name, marker, path, install in wanted:
        if marker in given:
            continue
        if path is None:
            missing.append(
                f"{name} not found, so vLLM's CPU engine runs without it ({install} adds it; "
                f"{CPU_PRELOAD_VAR}=false silences this)"
            )
        else:
            added.append(path)
    if not added:
        return {}, missing
    return {PRELOAD: ":".join([*added, *filter(None, [given])])}, missing


def find(library_dirs: Sequence[str], prefixes: Sequence[str]) -> Found:
    """Look for tcmalloc in `library_dirs` and Intel OpenMP in each prefix's `lib/`."""

    def first(paths: Sequence[str]) -> str | None:
        return next((path for path in paths if os.path.isfile(path)), None)

    return Found(
        tcmalloc=first([os.path.join(d, TCMALLOC) for d in library_dirs]),
        iomp=first([os.path.join(p, "lib", IOMP) for p in prefixes]),
        x86=platform.machine().lower() in ("x86_64", "amd64"),
    )


def on_this_machine() -> Found:
    """The libraries of this machine: the system's library folders and this Python's prefix."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [f"/usr/lib/{multiarch}", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
    return find(dirs, list(dict.fromkeys([sys.prefix, sys.base_prefix])))
