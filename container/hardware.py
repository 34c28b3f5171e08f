"""What the machine offers the engine: visible GPUs, the memory free, and the threads of vLLM's
CPU worker under a CPU quota. The KV cache that fits the memory is
`container.memory`'s."""

import math
import os
import re
from collections.abc import Mapping, Sequence

from vllm_sagemaker.container.system import IN_PROCESS_VAR

OMP_BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"
OMP_THREADS_VAR = "OMP_NUM_THREADS"
# How CUDA_VISIBLE_DEVICES names a GPU, or a MIG instance of one, by UUID.
GPU_UUID_PREFIXES = ("GPU-", "MIG-")


def visible_gpu_count(env: Mapping[str, str], dev_entries: Sequence[str]) -> int:
    """The GPUs CUDA will show the server: the /dev/nvidiaN devices the container was given,
    narrowed by CUDA_VISIBLE_DEVICES when it is set.

    SageMaker sets no GPU-count variable for hosting, and an inference component is given some of
    its instance's GPUs, so the count is read off the container, never the instance type. NVIDIA's
    container toolkit gives a container the GPUs of NVIDIA_VISIBLE_DEVICES (indices, GPU-/MIG-
    UUIDs, `all`; `none`, `void` or empty for none) as their own device files (GPUs 4 and 5 of
    eight are /dev/nvidia4 and /dev/nvidia5), which CUDA numbers from 0; /dev/nvidiactl,
    /dev/nvidia-uvm and /dev/nvidia-caps are not GPUs. The variable itself is not read: the
    toolkit acts on it outside the container, and images carry their own (`all` in CUDA's).
    CUDA_VISIBLE_DEVICES, read as CUDA reads it: GPUs by number (0 to the count seen, less one)
    or by UUID, in order up to the first that is neither (`-1` hides every GPU, empty too); a GPU
    named twice hides them all."""
    seen = len([e for e in dev_entries if re.fullmatch(r"nvidia\d+", e)])
    chosen = env.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return seen
    named: list[str] = []
    for entry in (part.strip() for part in chosen.split(",")):
        if not (entry.startswith(GPU_UUID_PREFIXES) or (entry.isdigit() and int(entry) < seen)):
            break
        if entry in named:
            return 0
        named.append(entry)
    return min(len(named), seen)


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
    """The OpenMP threads of vLLM's CPU worker when the container's CPU quota is below the CPUs
    it sees (its affinity, the host's under a quota): more threads than the quota allows stall
    each other at every barrier. One thread per whole CPU of the quota, less one for the API
    server and the engine core, at least one. `env` is the engine's environment: where its worker
    runs in the engine core's process (VLLM_ENABLE_V1_MULTIPROCESSING other than 1: vLLM's
    single-process executor, which binds nothing, and OpenMP starts a thread per CPU seen), the
    count as OMP_NUM_THREADS unless the user set it; where vLLM starts the worker's process, the
    CPUs it binds them to (VLLM_CPU_OMP_THREADS_BIND, vLLM's automatic binding leaving one CPU
    for the rest) unless the user chose. Nothing on a GPU machine."""
    if visible_gpus or quota_cpus is None:
        return {}
    threads = max(1, math.floor(quota_cpus) - 1)
    if env.get(IN_PROCESS_VAR, "1") != "1":
        if OMP_THREADS_VAR in env or threads >= len(allowed):
            return {}
        return {OMP_THREADS_VAR: str(threads)}
    if OMP_BIND_VAR in env or threads >= len(allowed) - 1:
        return {}
    return {OMP_BIND_VAR: ",".join(str(cpu) for cpu in sorted(allowed)[:threads])}


def omp_thread_count(added: Mapping[str, str]) -> int | None:
    """How many threads `omp_threads_env`'s variables give the worker (None: none of them)."""
    if OMP_THREADS_VAR in added:
        return int(added[OMP_THREADS_VAR])
    if OMP_BIND_VAR in added:
        return len(added[OMP_BIND_VAR].split(","))
    return None


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity; every CPU where that cannot be read)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))
