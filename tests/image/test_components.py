"""The CPU image run as one copy of an inference component (../shared/reference/
sagemaker-platform.md §5.5): SageMaker runs each copy as its own container, `IMAGE serve` with
the model read-only and 64 MB of /dev/shm, the cores and memory the component is given
(NumberOfCpuCoresRequired, MinMemoryRequiredInMb) as its cgroup's CPU quota and memory cap,
while `nproc` and /proc/meminfo still show the instance's. No Serverless marker.

`make test` builds the image first (`make image`); these tests run what it built.
"""

import json
from pathlib import Path

from tests.support import containers
from vllm_sagemaker.container import memory

# What the component is given: one core of the suite's machines' two, and 3 GB of their 23.
CPUS = 1
MEMORY_MB = 3072
COMPONENT = [
    "--cpus",
    str(CPUS),
    "--memory",
    f"{MEMORY_MB}m",
    "--memory-swap",
    f"{MEMORY_MB}m",
    "--shm-size",
    "64m",
]


def test_a_copy_uses_the_cores_and_memory_its_component_is_given(
    models: dict[str, Path],
) -> None:
    """The KV cache is sized from the 3 GB cap (a quarter of it, where the machine's free memory
    would give GiBs), the engine runs one thread for its one core (not one per CPU of the
    machine), and a completion is answered."""
    with containers.running(models["chat"], {}, options=COMPONENT) as container:
        container.wait_ready()
        completion = {"prompt": "Hello", "max_tokens": 4, "min_tokens": 4}
        status, body = container.inside("/invocations", completion)
        assert status == 200, body
        assert json.loads(body)["usage"]["completion_tokens"] == 4
        assert container.stop() == 0, container.logs()[-4000:]
        log = container.logs()
    kv_mib = int(MEMORY_MB * memory.KV_CACHE_SHARE)
    assert (
        f"serve: the container's memory is capped at {MEMORY_MB:,} MiB (its cgroup), so the KV "
        f"cache gets {kv_mib:,} MiB"
    ) in log, log
    # The engine's own word for the KV cache it made, in GiB.
    assert f"Explicitly set ({round(kv_mib / 1024, 2)}/" in log, log
    # 64 MB of /dev/shm: the worker runs in the engine core's process, one OpenMP thread for
    # the one core, from the engine's start (vLLM says when torch started with more).
    assert "(VLLM_ENABLE_V1_MULTIPROCESSING=0)" in log, log
    assert (
        f"serve: the container's CPU quota is {CPUS} CPUs, so vLLM's CPU worker runs 1 thread(s) "
        "(OMP_NUM_THREADS=1)"
    ) in log, log
    assert "Reducing Torch threads from" not in log, log
