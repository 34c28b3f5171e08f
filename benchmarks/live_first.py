"""What a live request meets while a batch runs, today's code and another revision side by side,
and plain vLLM with priority scheduling beside them, in one run.

Live traffic: Poisson arrivals of streaming 8-token chats (`/invocations` on our servers,
`/v1/chat/completions` on plain vLLM); each request's first token (first body byte) and total
time. Batch: 32-token chat lines through `/v1/batches` on our servers; on plain vLLM, a client
keeping `--vllm-inflight` such chats in flight at priority 10 (its batch). For every server and
live rate (`--rates`), three phases:

- idle: live traffic alone (`--idle-seconds`), what requests that overlap no batch meet;
- transient: the batch runs alone for `--alone-seconds` from its first answered line (longer
  than the 10 s after which the batch has the whole window again), then live traffic starts
  for `--seconds`: what a user meets when traffic returns to a server busy with a batch;
- steady: live traffic starts with the batch and runs beside it for `--seconds`.

Every live request of the transient and steady phases overlaps the batch (it is cancelled only
after the last one ends). The batch's throughput while live traffic runs is compared with its
throughput alone (lines answered per second, from the batch's request counts; for vLLM, from its
client). The live traffic's threads run at a higher CPU priority than the servers (they stand
for users on other machines: on 2 cores their own scheduling delays were up to 1.4 s and are not
the server's); the servers, and plain vLLM's batch client, run at the default priority. Beside
every phase, the stall witness (`benchmarks.witness`) says whether the machine itself stalled.

    .venv/bin/python -m benchmarks.live_first [--before 864584e] [--rates 0.5 2 8]
        [--servers before now step-only vllm] [--plot docs/img/live-first.svg]
"""

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
import openai

from benchmarks import autogroup
from benchmarks.batch_runner import write_file
from benchmarks.plot import Point, scatter
from benchmarks.startup import worktree
from benchmarks.witness import Seen, Witness
from tests.support import model_factory, processes, servers, waiting
from vllm_sagemaker.container.env_args import LIVE_FIRST_SCHEDULER

ENGINE = {"SM_VLLM_MAX_NUM_SEQS": "256", "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096"}
BATCH_TOKENS = 32
LIVE_TOKENS = 8
BATCH_PRIORITY = 10
CLIENT_NICE = -10
# Our servers by name: the settings each adds. "before" runs the `--before` revision;
# "step-only" is this tree's live-first engine step without the window's yielding (the whole
# window under live traffic), to see what the window still adds; "now-8" is this tree with at
# most 8 batch lines in flight, near the batch throughput plain vLLM reaches with 256 on 2
# cores, so the two meet at about equal batch throughput; "no-preload" is this tree without
# vLLM's CPU libraries (tcmalloc, Intel OpenMP) preloaded.
OURS = {
    "before": {},
    "now": {},
    "step-only": {
        "SAGEMAKER_BATCH_YIELD": "false",
        "SM_VLLM_SCHEDULER_CLS": LIVE_FIRST_SCHEDULER,
    },
    "now-8": {"SAGEMAKER_BATCH_MAX_INFLIGHT": "8"},
    "no-preload": {"SAGEMAKER_CPU_PRELOAD": "false"},
}


def live_body(stream_path: str) -> bytes:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": LIVE_TOKENS,
        "min_tokens": LIVE_TOKENS,
        "stream": True,
    }
    if stream_path == "/v1/chat/completions":
        body["model"] = "chat"
    return json.dumps(body).encode()


@dataclass(frozen=True)
class Stamps:
    """One streamed request on the machine-wide monotonic clock."""

    status: int
    sent: float
    first_byte: float
    done: float


def streamed(url: str, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> Stamps:
    """POST `body` and read the answer: when it was sent, when its first body byte came (the
    first token of a stream), when it ended. Plain `http.client` on the caller's thread: a new
    `httpx` client per request (an SSL context each) stalled the client itself for seconds."""
    address = httpx.URL(url)
    connection = http.client.HTTPConnection(address.host, address.port, timeout=600)
    sent = time.monotonic()
    try:
        connection.request(
            "POST", path, body, {"Content-Type": "application/json", **(headers or {})}
        )
        reply = connection.getresponse()
        reply.read(1)
        first_byte = time.monotonic()
        reply.read()
    finally:
        connection.close()
    return Stamps(reply.status, sent, first_byte, time.monotonic())


@dataclass
class Tail:
    p50: float
    p95: float
    p99: float
    count: int

    @classmethod
    def of(cls, seconds: list[float]) -> "Tail":
        ordered = sorted(seconds) or [float("nan")]

        def at(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

        return cls(at(0.5), at(0.95), at(0.99), len(seconds))


@dataclass
class LiveTraffic:
    """Poisson arrivals at `rate`/s until stopped; each request's first-byte and total time."""

    url: str
    path: str
    rate: float
    seed: int = 7
    first: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    # Statuses of the answers that were not 200, and how many of each.
    failures: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._driver = threading.Thread(target=self._drive)
        self._random = random.Random(self.seed)
        self._body = live_body(self.path)

    def _one(self) -> None:
        stamps = streamed(self.url, self.path, self._body)
        if stamps.status == 200:
            self.first.append(stamps.first_byte - stamps.sent)
            self.total.append(stamps.done - stamps.sent)
        else:
            self.failures[stamps.status] += 1

    def _drive(self) -> None:
        # Linux keeps a nice value per thread, and threads inherit their creator's: this one and
        # the requests it starts run above the servers, the rest of the client does not.
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), CLIENT_NICE)
        while not self._stop.wait(self._random.expovariate(self.rate)):
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


class Batch(Protocol):
    """A batch that runs until stopped, and how many of its lines are answered."""

    def start(self) -> None: ...

    def answered(self) -> int: ...

    def stop(self) -> None: ...


class ServerBatch:
    """A `/v1/batches` batch of `source` on one of our servers."""

    def __init__(self, url: str, source: Path) -> None:
        self.sdk = openai.OpenAI(base_url=url + "/v1", api_key="none")
        self.file_id = self.sdk.files.create(file=source.open("rb"), purpose="batch").id
        self.id = ""

    def start(self) -> None:
        self.id = self.sdk.batches.create(
            input_file_id=self.file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id

    def answered(self) -> int:
        counts = self.sdk.batches.retrieve(self.id).request_counts
        return 0 if counts is None else counts.completed + counts.failed

    def stop(self) -> None:
        self.sdk.batches.cancel(self.id)
        waiting.until(
            lambda: self.sdk.batches.retrieve(self.id).status == "cancelled", 600, "not cancelled"
        )


class ClientBatch:
    """Plain vLLM's batch: a client sending 32-token chats at priority 10, at most `inflight` at
    a time: back to back (`pace` None), or `pace` lines a second (open loop, so it drives the
    batch throughput another server reached, as far as vLLM keeps up)."""

    def __init__(self, url: str, inflight: int) -> None:
        self.url, self.inflight = url, inflight
        self.pace: float | None = None
        self.done = 0
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    async def _line(self, client: httpx.AsyncClient, number: int) -> None:
        """One line, sent until it is answered or the batch stops."""
        body = {
            "model": "chat",
            "messages": [{"role": "user", "content": f"Tell me about number {number}"}],
            "max_tokens": BATCH_TOKENS,
            "min_tokens": BATCH_TOKENS,
            "priority": BATCH_PRIORITY,
        }
        while not self._stopping.is_set():
            try:
                reply = await client.post("/v1/chat/completions", json=body)
            except httpx.TransportError:
                # vLLM's server resets some of 256 connections opened at once: send again.
                continue
            if reply.status_code == 200:
                self.done += 1
            return

    async def _back_to_back(self, client: httpx.AsyncClient, number: int) -> None:
        while not self._stopping.is_set():
            await self._line(client, number)

    async def _paced(self, client: httpx.AsyncClient, pace: float) -> None:
        slots = asyncio.Semaphore(self.inflight)
        running: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        due = loop.time()

        async def one(number: int) -> None:
            try:
                await self._line(client, number)
            finally:
                slots.release()

        number = 0
        while not self._stopping.is_set():
            await asyncio.sleep(max(0.0, due - loop.time()))
            due += 1 / pace
            await slots.acquire()
            task = asyncio.create_task(one(number))
            running.add(task)
            task.add_done_callback(running.discard)
            number += 1
        await asyncio.gather(*running)

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=self.inflight)
        async with httpx.AsyncClient(base_url=self.url, timeout=600, limits=limits) as client:
            if self.pace is not None:
                await self._paced(client, self.pace)
                return
            await asyncio.gather(*(self._back_to_back(client, n) for n in range(self.inflight)))

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(),))
        self._thread.start()

    def answered(self) -> int:
        return self.done

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()


@dataclass
class Row:
    server: str
    phase: str
    rate: float
    first: Tail
    total: Tail
    # Live answers that were not 200, by status (the tails count only the 200s).
    failures: Counter[int]
    # What the stall witness saw over the phase (the batch alone included).
    seen: Seen
    # The batch's lines/s beside live traffic, and alone (None for the idle phase).
    lines_s: float | None = None
    alone_s: float | None = None

    @classmethod
    def of(
        cls,
        server: str,
        phase: str,
        rate: float,
        live: LiveTraffic,
        seen: Seen,
        lines_s: float | None = None,
        alone_s: float | None = None,
    ) -> "Row":
        first, total = Tail.of(live.first), Tail.of(live.total)
        return cls(server, phase, rate, first, total, live.failures, seen, lines_s, alone_s)

    @property
    def kept(self) -> float | None:
        return None if self.lines_s is None or not self.alone_s else self.lines_s / self.alone_s


def during(batch: Batch, seconds: float) -> float:
    """Lines answered per second over the next `seconds`."""
    before, started = batch.answered(), time.perf_counter()
    time.sleep(seconds)
    return (batch.answered() - before) / (time.perf_counter() - started)


def phases(
    name: str,
    url: str,
    path: str,
    batch: Batch,
    rate: float,
    args: argparse.Namespace,
    witness: Witness,
) -> list[Row]:
    """Idle, transient and steady at one live rate, each with what the witness saw over it."""
    started = time.monotonic()
    with LiveTraffic(url, path, rate) as idle:
        time.sleep(args.idle_seconds)
    rows = [Row.of(name, "idle", rate, idle, witness.between(started, time.monotonic()))]
    started = time.monotonic()
    batch.start()
    try:
        waiting.until(lambda: batch.answered() > 0, 600, "the batch never started", 0.2)
        alone = during(batch, args.alone_seconds)
        with LiveTraffic(url, path, rate) as live:
            kept = during(batch, args.seconds)
    finally:
        batch.stop()
    seen = witness.between(started, time.monotonic())
    rows.append(Row.of(name, "transient", rate, live, seen, kept, alone))
    started = time.monotonic()
    batch.start()
    try:
        with LiveTraffic(url, path, rate) as live:
            kept = during(batch, args.seconds)
    finally:
        batch.stop()
    seen = witness.between(started, time.monotonic())
    rows.append(Row.of(name, "steady", rate, live, seen, kept, alone))
    return rows


def ms(tail: Tail) -> str:
    return f"{tail.p50 * 1000:7.0f} {tail.p95 * 1000:7.0f} {tail.p99 * 1000:7.0f}"


def report(rows: list[Row]) -> None:
    print(
        f"{'server':9} {'phase':9} {'live/s':>6} {'n':>4} | first token ms: {'p50':>5} {'p95':>7} "
        f"{'p99':>7} | total ms: {'p50':>4} {'p95':>7} {'p99':>7} | x idle p50 p95 | batch lines/s"
        " | witness: stalls worst ms | not 200"
    )
    idle = {(r.server, r.rate): r for r in rows if r.phase == "idle"}
    for row in rows:
        base = idle[(row.server, row.rate)].first
        kept = (
            "" if row.kept is None else f"{row.lines_s:5.0f} of {row.alone_s:4.0f} {row.kept:4.0%}"
        )
        failed = " ".join(f"{status}: {n}" for status, n in sorted(row.failures.items()))
        stalled = "STALLED" if row.seen.stalled else ""
        witness = f"{row.seen.stalls:3d} {row.seen.worst_s * 1000:6.0f} {stalled:7}"
        print(
            f"{row.server:9} {row.phase:9} {row.rate:6.1f} {row.first.count:4d} | "
            f"{ms(row.first):>31} | {ms(row.total):>26} | "
            f"{row.first.p50 / base.p50:5.2f} {row.first.p95 / base.p95:5.2f} | {kept:17} | "
            f"{witness} | {failed}",
            flush=True,
        )


@contextlib.contextmanager
def plain_vllm(model: Path, log_dir: Path) -> Iterator[str]:
    """vLLM's own server, priority scheduling, the same engine settings as ours (started
    through `container.vllm_cli`, vLLM's CLI as `serve` runs it: the `vllm` script of the CPU
    build cannot find its own version)."""
    port = servers.free_port()
    command = [
        sys.executable, "-m", "vllm_sagemaker.container.vllm_cli", "serve", str(model),
        "--port", str(port),
        "--served-model-name", "chat", "--scheduling-policy", "priority", "--enforce-eager",
        "--max-num-seqs", ENGINE["SM_VLLM_MAX_NUM_SEQS"],
        "--max-num-batched-tokens", ENGINE["SM_VLLM_MAX_NUM_BATCHED_TOKENS"],
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    with (log_dir / "vllm.log").open("wb") as log:
        process = processes.spawn(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"plain vLLM exited with {process.returncode}: see {log_dir}")
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        waiting.until(ready, servers.START_TIMEOUT_S, "plain vLLM not ready", 1)
        yield url
    finally:
        processes.stop(process)


@contextlib.contextmanager
def our_server(name: str, model: Path, root: Path, tree: Path | None) -> Iterator[servers.Server]:
    """`serve` of this tree, or of an older revision's worktree (through PYTHONPATH: a view
    `vllm_sagemaker/` of its three folders comes before the installed one), with the
    variant's settings (`OURS`)."""
    env = {**ENGINE, **OURS[name], "SAGEMAKER_BATCH_STORE": str(root / f"{name}-store")}
    if tree is not None:
        view = root / f"{name}-view" / "vllm_sagemaker"
        view.mkdir(parents=True)
        for folder in ("container", "handler", "deploy"):
            (view / folder).symlink_to(tree / folder)
        env["PYTHONPATH"] = str(view.parent)
    server = servers.start(name, model, root, **env)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def plot(path: Path, rows: list[Row]) -> None:
    points = [
        Point(f"{r.server}, {r.phase}", r.lines_s, r.first.p95 * 1000, f"{r.rate:g}/s")
        for r in rows
        if r.lines_s is not None
    ]
    command = "python -m benchmarks.live_first " + shlex.join(sys.argv[1:])
    title = (
        "Live first-token p95 against the batch's throughput beside it (a point per phase, rate)"
    )
    notes = [command, f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        scatter(points, title, "batch lines/s beside live traffic", "first token p95 ms", notes)
    )
    print(f"plot: {path}")


def client_pace(asked: str, rows: list[Row], rate: float) -> float | None:
    """Lines/s for plain vLLM's batch client (None: back to back)."""
    if asked == "max":
        return None
    if asked != "match":
        return float(asked)
    ours = [r.lines_s for r in rows if r.rate == rate and r.phase == "steady" and r.lines_s]
    return round(ours[0], 1) if ours else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="864584e", help="the revision to compare with")
    parser.add_argument("--rates", type=float, nargs="+", default=[0.5, 2.0, 8.0])
    parser.add_argument(
        "--servers", nargs="+", default=["before", "now", "vllm"], choices=[*OURS, "vllm"]
    )
    parser.add_argument("--lines", type=int, default=40000, help="lines of each batch")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--alone-seconds", type=float, default=12.0)
    parser.add_argument("--seconds", type=float, default=30.0, help="live traffic per phase")
    parser.add_argument("--vllm-inflight", type=int, default=256)
    parser.add_argument(
        "--vllm-pace",
        default="match",
        help="plain vLLM's batch client, lines/s: 'match' (what the first of our servers kept "
        "beside live traffic at the same rate, steady phase), 'max' (back to back) or a number",
    )
    parser.add_argument("--plot", type=Path)
    autogroup.add_argument(parser)
    args = parser.parse_args()
    rows: list[Row] = []
    with (
        autogroup.autogroup(args.autogroup) as grouping,
        tempfile.TemporaryDirectory() as tmp,
        Witness() as witness,
    ):
        print(autogroup.described(grouping))
        root = Path(tmp)
        model = model_factory.make_chat_model(root / "chat")
        source = root / "batch.jsonl"
        write_file(source, args.lines, BATCH_TOKENS)
        print(
            f"tiny Llama, {os.cpu_count()} cores, 256 seqs; batch lines of {BATCH_TOKENS} tokens, "
            f"live chats of {LIVE_TOKENS} (streamed); {args.seconds:g} s of live traffic a phase"
        )
        for name in args.servers:
            runs: Callable[[], contextlib.AbstractContextManager[tuple[str, str, Batch]]]
            if name == "vllm":

                @contextlib.contextmanager
                def runs() -> Iterator[tuple[str, str, Batch]]:
                    with plain_vllm(model, root) as url:
                        yield url, "/v1/chat/completions", ClientBatch(url, args.vllm_inflight)

            else:

                @contextlib.contextmanager
                def runs(name: str = name) -> Iterator[tuple[str, str, Batch]]:
                    with contextlib.ExitStack() as stack:
                        tree = (
                            stack.enter_context(worktree(args.before)) if name == "before" else None
                        )
                        server = stack.enter_context(our_server(name, model, root, tree))
                        yield server.url, "/invocations", ServerBatch(server.url, source)

            with runs() as (url, path, batch):
                for rate in args.rates:
                    if isinstance(batch, ClientBatch):
                        batch.pace = client_pace(args.vllm_pace, rows, rate)
                        print(f"plain vLLM's batch client at {batch.pace or 'max'} lines/s")
                    found = phases(name, url, path, batch, rate, args, witness)
                    report(found)
                    rows += found
        print("\nall rows")
        report(rows)
        if args.plot:
            plot(args.plot, rows)


if __name__ == "__main__":
    main()
