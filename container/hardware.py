"""What the machine offers the engine: visible GPUs, the memory free, and the CPUs vLLM's CPU
worker binds its threads to under a CPU quota. The KV cache that fits the memory is
`container.memory`'s."""

import math
import os
import re
from collections.abc import Mapping, Sequence

OMP_BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"


def visible_gpu_count(env: Mapping[str, str], dev_entries: Sequence[str]) -> int:
    """GPUs the server may use: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN devices.

    SageMaker sets no GPU-count variable for hosting, so the count is read off the machine.
    """
    if "CUDA_VISIBLE_DEVICES" in env:
        return len([d for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()])
    return len([e for e in dev_entries if re.fullmatch(r"nvidia\d+", e)])


def mem_available_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else the physical memory size."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return mem_total_bytes()


def mem_total_bytes() -> int:
    """The machine's physical memory (what /proc/meminfo shows as MemTotal)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def dev_entries() -> list[str]:
    """The names in /dev (where NVIDIA GPUs show up as nvidia0, nvidia1, ...)."""
    try:
        return os.listdir("/dev")
    except OSError:
        return []


def omp_threads_env(
    env: Mapping[str, str], visible_gpus: int, quota_cpus: float | None, allowed: Sequence[int]
) -> dict[str, str]:
    """The CPUs vLLM's CPU worker binds its OpenMP threads to when the container's CPU quota is
    below the CPUs it sees: vLLM's automatic binding counts the CPUs in its affinity (the
    host's, under a quota), and more threads than the quota allows stall each other at every
    barrier. One thread per whole CPU of the quota, less one for the API server and the engine
    core (as vLLM reserves one), at least one; nothing on a GPU machine or when the user chose
    (VLLM_CPU_OMP_THREADS_BIND)."""
    if visible_gpus or quota_cpus is None or OMP_BIND_VAR in env:
        return {}
    threads = max(1, math.floor(quota_cpus) - 1)
    if threads >= len(allowed) - 1:
        return {}
    return {OMP_BIND_VAR: ",".join(str(cpu) for cpu in sorted(allowed)[:threads])}


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity; every CPU where that cannot be read)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))
