"""Cold start on SageMaker Serverless Inference, measured in its sandbox: the CPU image run as
tests/image/test_serverless.py runs it (any uid, read-only root, no /dev/shm, memory as a hard cap,
one CPU), the embedder at 2048 MB and the tiny chat model at 6144 MB.

For each, side by side in one run, runs alternating A B B A:
- A: the image as built (vLLM's model-class facts built in, `container/modelinfos.py`);
- B: the same image with those facts hidden (an empty tmpfs over them), as before they were.

Each run prints the seconds from `podman run` to /ping 200 and where they went, read off the
log's timestamps: the container and `serve` (to serve's first line), the API server's imports
(to vLLM's arguments line), the model's config and class (to "Resolved architecture"), the
engine core's start (its process and imports, to its first line), the model's load and KV cache
(to "init engine"), the server's start (to "Application startup complete"); then the peak
memory after 16 requests against the cap.

    make image
    .venv/bin/python -m benchmarks.serverless [--runs 2]
"""

import argparse
import datetime
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from benchmarks.image import wait_ping
from tests.support import containers, model_factory
from tests.support.servers import free_port
from vllm_sagemaker.container.modelinfos import PREBUILT

MIB = 1024**2
# Where the time goes: each phase ends at the first log line holding its marker.
PHASES = (
    ("container and serve", "serve: "),
    ("API server imports", "non-default args"),
    ("model config and class", "Resolved architecture"),
    ("engine core start", "Initializing a V1 LLM engine"),
    ("model load and KV cache", "init engine (profile, create kv cache"),
    ("server start", "Application startup complete"),
)
# B hides the built-in facts under an empty tmpfs (podman copies the image's files into a
# tmpfs unless told not to).
SIDES = {"built in": [], "hidden": ["--tmpfs", f"{PREBUILT}:rw,mode=1777,notmpcopyup"]}
PEAK_FILES = ("/sys/fs/cgroup/memory.peak", "/sys/fs/cgroup/memory/memory.max_usage_in_bytes")


def stamp(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time with nanoseconds (podman's)."""
    day, _, rest = text.replace("T", " ").partition(" ")
    clock = rest.split()[0].rstrip("Z")
    whole, _, fraction = clock.partition(".")
    moment = datetime.datetime.fromisoformat(f"{day} {whole}+00:00")
    return moment.timestamp() + float(f"0.{fraction or 0}")


def phases(log: str, started: float) -> list[float]:
    """The end of each phase, in seconds since `started` (NaN where its line is missing)."""
    ends = []
    lines = [line.partition(" ") for line in log.splitlines()]
    for _, marker in PHASES:
        found = next((stamp(when) for when, _, text in lines if marker in text), float("nan"))
        ends.append(found - started)
    return ends


@contextmanager
def cold_start(
    model: Path, memory_mb: int, side: list[str]
) -> Iterator[tuple[containers.Container, list[float]]]:
    """The image started in the sandbox, and [phase ends..., /ping 200] in seconds."""
    port = free_port()
    options = [*containers.serverless_sandbox(memory_mb), *side]
    started = time.time()
    with containers.running(
        model, containers.serverless_env(), port=port, options=options
    ) as container:
        wait_ping(container.url, lambda: bool(container.state()["Running"]))
        ready = time.time() - started
        done = containers.podman("logs", "-t", container.name)
        yield container, [*phases(done.stdout + done.stderr, started), ready]


def peak_mib(name: str) -> float:
    script = "; ".join(f"cat {path} 2>/dev/null" for path in PEAK_FILES)
    done = containers.podman("exec", name, "sh", "-c", script)
    return int(done.stdout.split()[0]) / MIB


def load(url: str, kind: str) -> None:
    for i in range(16):
        if kind == "embed":
            body: dict[str, object] = {"input": [f"Sentence {i} about a cat"]}
        else:
            body = {"messages": [{"role": "user", "content": f"Hi {i}"}], "max_tokens": 32}
        answer = httpx.post(url + "/invocations", json=body, timeout=60)
        answer.raise_for_status()


def measure(model: Path, kind: str, memory_mb: int, runs: int) -> None:
    results: dict[str, list[list[float]]] = {side: [] for side in SIDES}
    peaks: dict[str, list[float]] = {side: [] for side in SIDES}
    order = [*SIDES, *reversed(SIDES)] * runs
    for side in order:
        with cold_start(model, memory_mb, SIDES[side]) as (container, ends):
            load(container.url, kind)
            results[side].append(ends)
            peaks[side].append(peak_mib(container.name))
    print(f"\n{kind} at {memory_mb} MB, one CPU ({len(order) // 2} runs a side, medians)")
    print(f"{'phase ends at (s)':28}" + "".join(f"{side:>12}" for side in SIDES))
    for index, label in enumerate([*(name for name, _ in PHASES), "/ping 200"]):
        row = [statistics.median(run[index] for run in results[side]) for side in SIDES]
        print(f"{label:28}" + "".join(f"{value:12.1f}" for value in row))
    slowest = {side: max(run[-1] for run in results[side]) for side in SIDES}
    print(f"{'/ping 200, slowest run':28}" + "".join(f"{slowest[s]:12.1f}" for s in SIDES))
    print(
        f"{'peak memory (MiB)':28}"
        + "".join(f"{statistics.median(peaks[side]):12.0f}" for side in SIDES)
        + f"   of {memory_mb} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="A B B A rounds per model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        made = model_factory.make_chat_model(Path(scratch) / "made" / "tiny-llama")
        chat = model_factory.copy_with_mode(made, Path(scratch), 0o644)
        measure(model_factory.embedder_path(), "embed", 2048, args.runs)
        measure(chat, "chat", 6144, args.runs)


if __name__ == "__main__":
    main()
