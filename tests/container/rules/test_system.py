"""What the CPU engine needs of its system (container/system.py), as a table of cases."""

import pytest

from vllm_sagemaker.container import system
from vllm_sagemaker.container.system import MIB, System

GOOD = System(missing_libraries=(), compiler=True, shm_free_bytes=8 * 1024 * MIB)
SMALL_SHM = 62 * MIB


@pytest.mark.parametrize(
    ("env", "args", "gpus", "facts", "expected_args", "expected_env", "problem"),
    [
        # A machine with everything: nothing added.
        ({}, [], 0, GOOD, [], {}, None),
        # GPUs: the GPU image brings what vLLM needs; nothing is checked.
        ({}, [], 1, System(("libnuma.so.1",), False, 0), [], {}, None),
        # No compiler: the model runs eager, and torch.compile's two small sites too.
        (
            {},
            [],
            0,
            System((), False, GOOD.shm_free_bytes),
            ["--enforce-eager"],
            {"TORCHDYNAMO_DISABLE": "1"},
            None,
        ),
        # ... the user's own --enforce-eager and TORCHDYNAMO_DISABLE are kept as given.
        (
            {"TORCHDYNAMO_DISABLE": "0"},
            ["--enforce-eager"],
            0,
            System((), False, GOOD.shm_free_bytes),
            [],
            {},
            None,
        ),
        # 64 MB of /dev/shm, one worker: the model runs in the engine core's process.
        (
            {},
            [],
            0,
            System((), True, SMALL_SHM),
            [],
            {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
            None,
        ),
        # ... unless the user chose how vLLM runs its workers.
        ({"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, [], 0, System((), True, SMALL_SHM), [], {}, None),
        (
            {},
            ["--distributed-executor-backend", "mp"],
            0,
            System((), True, SMALL_SHM),
            [],
            {},
            None,
        ),
        # No /dev/shm at all, or none this user may write (Serverless Inference may give none):
        # the model runs in the engine core's process.
        ({}, [], 0, System((), True, None), [], {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, None),
        # ... unless the user chose.
        ({"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, [], 0, System((), True, None), [], {}, None),
        # Two CPU workers cannot do without it.
        (
            {},
            ["-tp", "2"],
            0,
            System((), True, None),
            [],
            {},
            "/dev/shm cannot be written; vLLM's multiprocess executor needs 640 MiB for 2 CPU "
            "workers: give the container more shared memory (docker run --shm-size), or run one "
            "worker",
        ),
        # HOME cannot be written (a read-only root, any uid): the caches go to the temporary
        # directory.
        (
            {"HOME": "/"},
            [],
            0,
            System((), True, GOOD.shm_free_bytes, home_instead="/tmp"),
            [],
            {"HOME": "/tmp"},
            None,
        ),
        # Two CPU workers need the queues: a problem, naming --shm-size.
        (
            {},
            ["--tensor-parallel-size", "2"],
            0,
            System((), True, SMALL_SHM),
            [],
            {},
            "/dev/shm has 62 MiB free; vLLM's multiprocess executor needs 640 MiB for 2 CPU "
            "workers: give the container more shared memory (docker run --shm-size), or run one "
            "worker",
        ),
        # A library the image lacks: a problem naming Debian's package.
        (
            {},
            [],
            0,
            System(("libnuma.so.1",), True, GOOD.shm_free_bytes),
            [],
            {},
            "vLLM's CPU engine needs libnuma.so.1, which the loader cannot find: install libnuma1 "
            "(Debian, Ubuntu)",
        ),
        (
            {},
            [],
            0,
            System(("libfoo.so.2",), True, GOOD.shm_free_bytes),
            [],
            {},
            "vLLM's CPU engine needs libfoo.so.2, which the loader cannot find: install the "
            "package with it",
        ),
    ],
)
def test_needs(
    env: dict[str, str],
    args: list[str],
    gpus: int,
    facts: System,
    expected_args: list[str],
    expected_env: dict[str, str],
    problem: str | None,
) -> None:
    needs = system.needs(env, args, gpus, facts)
    assert needs.args == expected_args
    assert needs.env == expected_env
    assert needs.problems == ([problem] if problem else [])
    # Every setting added is said in the log, and nothing else is.
    assert len(needs.notes) == bool(expected_args or "TORCHDYNAMO_DISABLE" in expected_env) + (
        "VLLM_ENABLE_V1_MULTIPROCESSING" in expected_env
    ) + ("HOME" in expected_env)
    for added in [*expected_args, *expected_env]:
        assert any(added in note for note in needs.notes), added


@pytest.mark.parametrize(
    ("env", "world", "mib"),
    [
        ({}, 1, 400),
        ({}, 2, 640),
        ({"VLLM_MQ_MAX_CHUNK_BYTES_MB": "4"}, 1, 280),
        ({"VLLM_MQ_MAX_CHUNK_BYTES_MB": "x"}, 1, 400),
    ],
)
def test_queue_bytes(env: dict[str, str], world: int, mib: int) -> None:
    assert system.queue_bytes(env, world) == mib * MIB


@pytest.mark.parametrize(
    ("args", "size"),
    [
        ([], 1),
        (["--tensor-parallel-size", "2"], 2),
        (["-tp", "2", "--pipeline-parallel-size=3"], 6),
        (["--tensor-parallel-size", "auto"], 1),
    ],
)
def test_world_size(args: list[str], size: int) -> None:
    assert system.world_size(args) == size


LDD = """/v/vllm/_C.abi3.so:
\tlinux-vdso.so.1 (0x00007f4844b7c000)
\tlibnuma.so.1 => not found
\tlibc10.so => not found
\tlibtorch.so => not found
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f4842200000)
/v/vllm/_C_AVX2.abi3.so:
\tlibnuma.so.1 => not found
\tlibc10.so => not found
"""


def test_missing_libraries_leave_out_what_torch_loads() -> None:
    assert system.missing_libraries(LDD, ["libc10.so", "libtorch.so"]) == ["libnuma.so.1"]
    assert system.missing_libraries(LDD.replace("not found", "/lib/x.so"), []) == []
