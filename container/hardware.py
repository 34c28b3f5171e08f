"""What the machine offers the engine: visible GPUs, and CPU-engine settings that fit memory."""

import os
import re
from collections.abc import Mapping, Sequence

GIB = 1024**3
KV_CACHE_SHARE = 0.25
KV_CACHE_MAX_GIB = 64


def visible_gpu_count(env: Mapping[str, str], dev_entries: Sequence[str]) -> int:
    """GPUs the server may use: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN devices.

    SageMaker sets no GPU-count variable for hosting, so the count is read off the machine.
    """
    if "CUDA_VISIBLE_DEVICES" in env:
        return len([d for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()])
    return len([e for e in dev_entries if re.fullmatch(r"nvidia\d+", e)])


def default_kv_cache_gib(mem_available_bytes: int) -> int:
    """A quarter of the memory available now, in whole GiB, at least 1 and at most 64.

    The CPU engine allocates its KV cache up front and refuses to start when the default
    memory fraction does not fit what is free, so serve picks a size that does.
    """
    share = int(mem_available_bytes * KV_CACHE_SHARE // GIB)
    return max(1, min(KV_CACHE_MAX_GIB, share))


def engine_env(
    env: Mapping[str, str], visible_gpus: int, mem_available_bytes: int
) -> dict[str, str]:
    """Variables to add for the engine: on a machine without GPUs, a KV cache that fits,
    unless one is sized already (vLLM's legacy variable, or `--kv-cache-memory-bytes` through
    SM_VLLM_KV_CACHE_MEMORY_BYTES, which the legacy variable would override)."""
    sized = env.get("VLLM_CPU_KVCACHE_SPACE") or env.get("SM_VLLM_KV_CACHE_MEMORY_BYTES")
    if visible_gpus or sized:
        return {}
    return {"VLLM_CPU_KVCACHE_SPACE": str(default_kv_cache_gib(mem_available_bytes))}


def mem_available_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else the physical memory size."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def dev_entries() -> list[str]:
    """The names in /dev (where NVIDIA GPUs show up as nvidia0, nvidia1, ...)."""
    try:
        return os.listdir("/dev")
    except OSError:
        return []
