"""The container's limits as its cgroup holds them (container/cgroup.py), v1 and v2."""

from pathlib import Path

import pytest

from vllm_sagemaker.container import cgroup
from vllm_sagemaker.container.cgroup import Limits

GIB = 1024**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2147483648\n", 2 * GIB),
        ("max\n", None),
        ("9223372036854771712\n", None),
        ("", None),
    ],
)
def test_memory_limit(text: str, expected: int | None) -> None:
    assert cgroup.memory_limit(text) == expected


@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [
        ("100000 100000\n", None, 1.0),
        ("150000 100000\n", None, 1.5),
        ("max 100000\n", None, None),
        ("50000\n", "100000\n", 0.5),
        ("-1\n", "100000\n", None),
        ("", None, None),
    ],
)
def test_cpu_limit(quota: str, period: str | None, expected: float | None) -> None:
    assert cgroup.cpu_limit(quota, period) == expected


def test_oom_kills() -> None:
    assert cgroup.oom_kills("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n") == 2
    assert cgroup.oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n") == 1
    assert cgroup.oom_kills("") == 0


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {
                "memory.max": "2147483648",
                "memory.current": "1000",
                "memory.events": "oom_kill 1",
                "cpu.max": "100000 100000",
            },
            Limits(2 * GIB, 1000, 1.0, 1),
        ),
        (
            {
                "memory/memory.limit_in_bytes": "6442450944",
                "memory/memory.usage_in_bytes": "5",
                "memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
                "cpu/cpu.cfs_quota_us": "200000",
                "cpu/cpu.cfs_period_us": "100000",
            },
            Limits(6 * GIB, 5, 2.0, 0),
        ),
        ({}, Limits()),
    ],
)
def test_read_v2_and_v1(files: dict[str, str], expected: Limits, tmp_path: Path) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup.read(tmp_path) == expected
