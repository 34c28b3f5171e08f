"""The container's own limits, as its cgroup holds them: memory as a hard cap, CPUs as a quota,
and how often the kernel's OOM killer has struck inside it.

A container sees the host's memory in /proc/meminfo and the host's CPUs in `nproc` and
`os.cpu_count()`; what it may use is only in its cgroup (`--memory`, `--cpus`; SageMaker
Serverless Inference gives each container its share this way). cgroup v2 (`memory.max`,
`cpu.max`, `memory.events`) and v1 (`memory.limit_in_bytes`, `cpu.cfs_quota_us`,
`memory.oom_control`) are both read. The parsers are pure; `read` does the I/O.
"""

from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit number.
V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class Limits:
    """What the cgroup allows: memory in bytes and CPUs (None: no limit), the memory in use now,
    and the OOM kills so far."""

    memory_bytes: int | None = None
    memory_used_bytes: int = 0
    cpus: float | None = None
    oom_kills: int = 0


def memory_limit(text: str) -> int | None:
    """`memory.max` (v2) or `memory.limit_in_bytes` (v1): the cap in bytes, None for none."""
    value = text.strip()
    if not value.isdigit():
        return None
    limit = int(value)
    return None if limit >= V1_UNLIMITED else limit


def cpu_limit(quota: str, period: str | None = None) -> float | None:
    """CPUs from `cpu.max` (v2: "QUOTA PERIOD", QUOTA "max" for none), or from v1's
    `cpu.cfs_quota_us` (-1 for none) and `cpu.cfs_period_us`."""
    fields = quota.split()
    if period is None and len(fields) == 2:
        fields, period = fields[:1], fields[1]
    if len(fields) != 1 or period is None:
        return None
    try:
        share, length = int(fields[0]), int(period)
    except ValueError:
        return None
    return share / length if share > 0 and length > 0 else None


def oom_kills(events: str) -> int:
    """The `oom_kill` count of `memory.events` (v2) or `memory.oom_control` (v1)."""
    for line in events.splitlines():
        name, _, count = line.partition(" ")
        if name == "oom_kill" and count.strip().isdigit():
            return int(count)
    return 0


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


def read(root: Path = ROOT) -> Limits:
    """The limits of the cgroup this process is in (no limits where none can be read)."""
    v2 = _text(root / "memory.max") is not None or _text(root / "cpu.max") is not None
    names = (
        ("memory.max", "memory.current", "memory.events", "cpu.max", None)
        if v2
        else (
            "memory/memory.limit_in_bytes",
            "memory/memory.usage_in_bytes",
            "memory/memory.oom_control",
            "cpu/cpu.cfs_quota_us",
            "cpu/cpu.cfs_period_us",
        )
    )
    limit, used, events, quota, period = (_text(root / name) if name else None for name in names)
    return Limits(
        memory_bytes=memory_limit(limit or ""),
        memory_used_bytes=int(used) if used and used.strip().isdigit() else 0,
        cpus=cpu_limit(quota or "", period),
        oom_kills=oom_kills(events or ""),
    )
