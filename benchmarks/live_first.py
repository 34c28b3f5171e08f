"""Live traffic first, measured at the tail: real-time latency beside a running batch, and what
the real-time traffic costs the batch, with the admission controller and without it.

Live traffic: Poisson arrivals of 8-token chat requests through `/invocations`. Batch: chat lines
of 32 tokens, through (a) `/v1/batches` and (b) `vllm-sagemaker batch --endpoint`, on a server
whose batch work yields (the default) and on one where it does not (`SAGEMAKER_BATCH_YIELD=false`),
and on servers with a fixed window and no yield at 2 requests/s (`--windows`: the trade-off curve
the controller moves on), all started in this run. For each arrival rate it prints live
p50/p95/p99 against the same traffic on the idle server, and the batch's lines/s against the
batch alone.

    .venv/bin/python -m benchmarks.live_first [--lines 3000] [--rates 0.5 2 8] [--windows 8 32 128]
        [--servers controller ...] [--ways /v1/batches ...] [--plot docs/img/live-first.svg]

`--servers` and `--ways` keep only the named servers and ways of running the batch (a shorter
run, e.g. to compare two versions of the controller). `--plot` also draws live p99 against the
batch's kept throughput, one point per setting and rate, with the command and the machine.
"""

import argparse
import http.client
import json
import os
import platform
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

from benchmarks.batch_runner import VLLM_SAGEMAKER, write_file
from benchmarks.batches_api import run_batch_api
from benchmarks.plot import Point, scatter
from tests import model_factory, servers

SERVER_ENV = {"SM_VLLM_MAX_NUM_SEQS": "256", "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096"}
LIVE_BODY = json.dumps(
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "min_tokens": 8}
)
JSON = {"Content-Type": "application/json"}
BATCH_TOKENS = 32
WARM_UP_LINES = 300
CURVE_RATE = 2.0
WAYS = ("/v1/batches", "batch --endpoint")


@dataclass
class Tail:
    p50: float
    p95: float
    p99: float

    @classmethod
    def of(cls, seconds: list[float]) -> "Tail":
        ordered = sorted(seconds)

        def at(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

        return cls(at(0.5), at(0.95), at(0.99))


class LiveTraffic:
    """Poisson arrivals of short chats at `rate` per second until stopped; latencies kept.

    Each request is a plain `http.client` call on a thread of its own: a new `httpx` client per
    request (an SSL context each, in this process's GIL) showed 5-10 s stalls of its own that the
    server never saw (its log timed the same requests at most 0.7 s)."""

    def __init__(self, url: str, rate: float, seed: int = 7) -> None:
        self.host, self.port = httpx.URL(url).host, httpx.URL(url).port
        self.rate, self.random = rate, random.Random(seed)
        self.latencies: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._driver = threading.Thread(target=self._drive)

    def _one(self) -> None:
        started = time.perf_counter()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=300)
        try:
            connection.request("POST", "/invocations", LIVE_BODY, JSON)
            reply = connection.getresponse()
            reply.read()
        finally:
            connection.close()
        if reply.status == 200:
            self.latencies.append(time.perf_counter() - started)
        else:
            self.failures += 1

    def _drive(self) -> None:
        while not self._stop.wait(self.random.expovariate(self.rate)):
            thread = threading.Thread(target=self._one)
            thread.start()
            self._threads.append(thread)

    def __enter__(self) -> "LiveTraffic":
        self._driver.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._driver.join()
        for thread in self._threads:
            thread.join()


def batch_api(server: servers.Server, source: Path) -> float:
    """Seconds from create to completed of a /v1/batches batch of `source`."""
    return run_batch_api(openai.OpenAI(base_url=server.url + "/v1", api_key="none"), source)[1]


def batch_runner(server: servers.Server, source: Path, out: Path) -> float:
    """Seconds `vllm-sagemaker batch --endpoint` takes for `source` against `server`."""
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    command = [VLLM_SAGEMAKER, "batch", "-i", str(source), "-o", str(out), "--endpoint", server.url]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def idle_tail(url: str, rate: float, seconds: float) -> Tail:
    with LiveTraffic(url, rate) as live:
        time.sleep(seconds)
    return Tail.of(live.latencies)


def measure(
    server: servers.Server, run: Callable[[], float], rates: list[float]
) -> list[tuple[float, Tail, float]]:
    """(rate, live tail during the batch, batch seconds) per rate; first the batch alone."""
    rows = [(0.0, Tail(0, 0, 0), run())]
    for rate in rates:
        with LiveTraffic(server.url, rate) as live:
            seconds = run()
        rows.append((rate, Tail.of(live.latencies), seconds))
    return rows


@dataclass(frozen=True)
class Setup:
    """One server of the run: its extra environment, the live rates and the ways a batch runs."""

    env: dict[str, str]
    rates: list[float]
    ways: tuple[str, ...]


def setups(args: argparse.Namespace) -> dict[str, Setup]:
    """The controller (the default) and no yield, at every rate both ways; then fixed windows
    without yield at 2 requests/s (the trade-off curve the controller moves on)."""
    both = WAYS
    no_yield = {"SAGEMAKER_BATCH_YIELD": "false"}
    found = {
        "controller": Setup({}, args.rates, both),
        "no yield": Setup(no_yield, args.rates, both),
    }
    for window in args.windows:
        inflight = {**no_yield, "SAGEMAKER_BATCH_MAX_INFLIGHT": str(window)}
        found[f"window {window}"] = Setup(inflight, [CURVE_RATE], ("/v1/batches",))
    return {
        name: Setup(setup.env, setup.rates, tuple(w for w in setup.ways if w in args.ways))
        for name, setup in found.items()
        if args.servers is None or name in args.servers
    }


def report(
    name: str, way: str, rate: float, tail: Tail, idle: Tail, lines_s: float, alone: float
) -> Point:
    """Print one row; the point it makes on the plot."""
    print(
        f"{name:11} {way:17} {rate:6.1f} {tail.p50 * 1000:7.0f} {tail.p95 * 1000:7.0f} "
        f"{tail.p99 * 1000:7.0f} {tail.p50 / idle.p50:6.2f} {tail.p95 / idle.p95:6.2f} "
        f"{tail.p99 / idle.p99:6.2f} {lines_s:8.1f} {lines_s / alone:5.0%}"
    )
    return Point(f"{name}, {way}", lines_s / alone * 100, tail.p99 * 1000, f"{rate:g}/s")


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return f"{os.cpu_count()} x {model}"


def plot(path: Path, points: list[Point]) -> None:
    command = "python -m benchmarks.live_first " + shlex.join(sys.argv[1:])
    notes = [command, f"{machine()}, {time.strftime('%Y-%m-%d')}"]
    title = "Live p99 latency against the batch throughput kept (a point per setting, live rate)"
    x_label = "batch throughput kept, % of the batch alone"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(scatter(points, title, x_label, "live p99 ms", notes))
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--rates", type=float, nargs="+", default=[0.5, 2.0, 8.0])
    parser.add_argument("--windows", type=int, nargs="*", default=[8, 32, 128])
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--servers", nargs="+", help="e.g. controller 'no yield' 'window 8'")
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    parser.add_argument("--plot", type=Path, help="write the SVG plot here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = model_factory.make_chat_model(root / "chat")
        source = root / "in.jsonl"
        write_file(source, args.lines, BATCH_TOKENS)
        # A server's first batch is slower (first prompts, first sizes): it is not measured.
        warm_up = root / "warm-up.jsonl"
        write_file(warm_up, WARM_UP_LINES, BATCH_TOKENS)
        planned = setups(args)
        env = {
            name: {**SERVER_ENV, **setup.env, "SAGEMAKER_BATCH_STORE": str(root / f"store{i}")}
            for i, (name, setup) in enumerate(planned.items())
        }
        print(
            f"{args.lines} chat lines x {BATCH_TOKENS} tokens beside Poisson live chats of 8 "
            "tokens; tiny Llama, 2 cores, 256 seqs"
        )
        print(
            f"{'server':11} {'batch via':17} {'live/s':>6} {'p50 ms':>7} {'p95 ms':>7} "
            f"{'p99 ms':>7} {'p50 x':>6} {'p95 x':>6} {'p99 x':>6} {'lines/s':>8} {'kept':>5}"
        )
        points: list[Point] = []
        with servers.running(dict.fromkeys(env, model), root, env) as running:
            for name, server in running.items():
                setup = planned[name]
                batch_api(server, warm_up)
                idle = {
                    rate: idle_tail(server.url, rate, args.idle_seconds) for rate in setup.rates
                }
                for rate, tail in idle.items():
                    print(
                        f"{name:11} {'(idle)':17} {rate:6.1f} {tail.p50 * 1000:7.0f} "
                        f"{tail.p95 * 1000:7.0f} {tail.p99 * 1000:7.0f}"
                    )
                ways = {
                    "/v1/batches": lambda s=server: batch_api(s, source),
                    "batch --endpoint": lambda s=server: batch_runner(s, source, root / "o.jsonl"),
                }
                for way in setup.ways:
                    rows = measure(server, ways[way], setup.rates)
                    alone = args.lines / rows[0][2]
                    print(f"{name:11} {way:17} {'-':>6} {'':47} {alone:8.1f} {'100%':>5}")
                    for rate, tail, seconds in rows[1:]:
                        points.append(
                            report(name, way, rate, tail, idle[rate], args.lines / seconds, alone)
                        )
                preempted = server.metric("vllm_sagemaker:batch_preemptions_total")
                throttled = server.metric("vllm_sagemaker:batch_throttled_total")
                print(f"{name:11} preempted {preempted:.0f} lines, throttled {throttled:.0f} calls")
        if args.plot:
            plot(args.plot, points)


if __name__ == "__main__":
    main()
