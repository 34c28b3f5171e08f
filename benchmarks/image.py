"""The CPU image's budget, side by side in one run: its size; start-up to /ping 200 against `serve`
from the venv on the same model; the embedder's idle memory; the image with a compiler (the model
compiled by inductor) against the default without one (eager); the engine in one process (what 64
MB of /dev/shm gets) against vLLM's worker process (what a larger /dev/shm gets).

Every container runs as SageMaker runs it (tests/support/containers.py: `IMAGE serve`, the model
read-only, configuration by environment). Runs alternate A B B A; each line prints both sides, with
the stall witness (benchmarks/witness.py) over each throughput phase.

    make image   # and, for the compiled side, the image with g++ and Python's headers:
    .venv/bin/python -m tests.support.make_image --tag vllm-sagemaker:cpu-compiler \\
        --build-arg "CPU_EXTRA_PACKAGES=g++ python3-dev"
    .venv/bin/python -m benchmarks.image [--runs 2] [--requests 64] [--tokens 64]
"""

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import psutil

from benchmarks.witness import Witness
from tests.support import containers, model_factory, servers
from tests.support.containers import ENGINE_ENV
from tests.support.make_image import GB
from tests.support.servers import START_TIMEOUT_S

COMPILER_IMAGE = containers.IMAGE + "-compiler"


def ping_ok(url: str) -> bool:
    try:
        return httpx.get(url + "/ping", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_ping(url: str, alive: Callable[[], bool]) -> float:
    """Seconds until /ping answers 200 (fails when the server is gone)."""
    started = time.monotonic()
    while not ping_ok(url):
        if not alive():
            raise RuntimeError(f"the server at {url} is gone")
        if time.monotonic() - started > START_TIMEOUT_S:
            raise RuntimeError(f"the server at {url} did not answer /ping")
        time.sleep(0.2)
    return time.monotonic() - started


@contextlib.contextmanager
def venv_server(model: Path, logs: Path, env: Mapping[str, str]) -> Iterator[tuple[str, float]]:
    """`serve` from the venv (the suite's way): its URL and its seconds to /ping 200."""
    server = servers.start("venv", model, logs, **env)
    try:
        yield server.url, wait_ping(server.url, lambda: server.process.poll() is None)
    finally:
        server.stop()


@contextlib.contextmanager
def image_server(
    model: Path, env: Mapping[str, str], image: str = containers.IMAGE, shm: str | None = None
) -> Iterator[tuple[str, float]]:
    """The image as SageMaker runs it, on the host's network: its URL and seconds to /ping."""
    port = servers.free_port()
    options = ["--shm-size", shm] if shm else []
    with containers.running(model, env, port=port, options=options, image=image) as container:
        # The clock starts before `podman run` returns: the container's own start counts.
        started = container.started
        wait_ping(container.url, lambda: bool(container.state()["Running"]))
        yield container.url, time.monotonic() - started


def image_size(image: str) -> str:
    found = json.loads(containers.podman("image", "inspect", image).stdout)
    return f"{found[0]['Size'] / GB:.2f} GB" if found else "not built"


def memory_mib(container: containers.Container) -> float:
    """Memory the container's processes hold alone (USS), in MiB: PID 1 and all under it."""
    top = psutil.Process(int(container.state()["Pid"]))
    return sum(p.memory_full_info().uss for p in [top, *top.children(recursive=True)]) / 1024**2


async def _generate(url: str, requests: int, tokens: int) -> None:
    async with httpx.AsyncClient(timeout=600) as client:
        body = {"max_tokens": tokens, "min_tokens": tokens}
        answers = await asyncio.gather(
            *(
                client.post(url + "/invocations", json={"prompt": f"Story {i}:", **body})
                for i in range(requests)
            )
        )
    assert all(answer.status_code == 200 for answer in answers)


def throughput(url: str, requests: int, tokens: int, witness: Witness) -> tuple[float, str]:
    """Tokens per second over `requests` completions of `tokens` tokens sent at once, and the
    line to print, with the witness over the same window."""
    asyncio.run(_generate(url, 4, 4))
    started = time.monotonic()
    asyncio.run(_generate(url, requests, tokens))
    ended = time.monotonic()
    rate = requests * tokens / (ended - started)
    return rate, f"{rate:7.0f} tokens/s [{witness.between(started, ended)}]"


def abba(runs: int) -> list[int]:
    """0 1 1 0 0 1 1 0 ...: which side runs at each turn."""
    return [(turn + turn // 2) % 2 for turn in range(2 * runs)]


def side_by_side(
    title: str,
    runs: int,
    sides: Mapping[str, Callable[[], AbstractContextManager[tuple[str, float]]]],
    measure: Callable[[str], tuple[float, str]] | None,
) -> None:
    """Start each side in ABBA order; print its start-up and, with `measure`, what it measures,
    then the medians of both sides and their ratio (second / first)."""
    names = list(sides)
    starts: dict[str, list[float]] = {name: [] for name in names}
    rates: dict[str, list[float]] = {name: [] for name in names}
    print(f"\n## {title}")
    for turn in abba(runs):
        name = names[turn]
        said = ""
        with sides[name]() as (url, seconds):
            starts[name].append(seconds)
            if measure:
                rate, said = measure(url)
                rates[name].append(rate)
        print(f"{name:>28}: /ping 200 after {seconds:5.1f} s  {said}", flush=True)
    for what, values, unit in (("start-up", starts, "s"), ("tokens/s", rates, "")):
        if not all(values.values()):
            continue
        first, second = (statistics.median(values[name]) for name in names)
        print(
            f"{what}, median: {names[0]} {first:.1f}{unit}, {names[1]} {second:.1f}{unit}, "
            f"ratio {second / first:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each side (ABBA)")
    parser.add_argument("--requests", type=int, default=64, help="completions sent at once")
    parser.add_argument("--tokens", type=int, default=64, help="tokens each completion makes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, Witness() as witness:
        root = Path(scratch)
        chat = model_factory.make_chat_model(root / "tiny-llama")
        embedder = model_factory.embedder_path()
        print(
            f"image sizes: {containers.IMAGE} {image_size(containers.IMAGE)}, "
            f"{COMPILER_IMAGE} {image_size(COMPILER_IMAGE)}"
        )

        def measure(url: str) -> tuple[float, str]:
            return throughput(url, args.requests, args.tokens, witness)

        side_by_side(
            "start-up to /ping 200, the embedder: serve from the venv against the image",
            args.runs,
            {
                "venv serve": lambda: venv_server(embedder, root, ENGINE_ENV),
                "image": lambda: image_server(embedder, ENGINE_ENV),
            },
            None,
        )
        port = servers.free_port()
        with containers.running(embedder, ENGINE_ENV, port=port) as container:
            wait_ping(container.url, lambda: bool(container.state()["Running"]))
            httpx.post(container.url + "/invocations", json={"input": ["warm up"]}, timeout=60)
            memory = memory_mib(container)
            print(f"\nthe embedder's idle memory in the image: {memory:.0f} MiB (USS)")
        side_by_side(
            "the tiny chat model: no compiler (eager, the default) against g++ (compiled)",
            args.runs,
            {
                "image, eager": lambda: image_server(chat, ENGINE_ENV),
                "image with g++, compiled": lambda: image_server(
                    chat, ENGINE_ENV, image=COMPILER_IMAGE
                ),
            },
            measure,
        )
        side_by_side(
            "the tiny chat model: one process (64 MB /dev/shm) against a worker (2 GB /dev/shm)",
            args.runs,
            {
                "image, one process": lambda: image_server(chat, ENGINE_ENV),
                "image, worker process": lambda: image_server(chat, ENGINE_ENV, shm="2g"),
            },
            measure,
        )


if __name__ == "__main__":
    main()
