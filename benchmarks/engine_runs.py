"""One run of each side `benchmarks.engine_speed` compares, and what it measures of it: the
request kinds and their input files, our paths on a running container (`/v1/batches`, a Batch
Transform job, `batch --model`), vLLM's offline engine (`benchmarks.offline_engine`), and the
CPU of each side's front end (vLLM's API-server processes; the `vllm.LLM` process)."""

import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil

from tests.support import processes, servers

ENGINE = {"max_num_seqs": 256, "max_num_batched_tokens": 4096, "enforce_eager": True}
SERVE_ARGS = ["--max-num-seqs", "256", "--max-num-batched-tokens", "4096", "--enforce-eager"]
SERVER_ENV = {"SM_VLLM_MAX_NUM_SEQS": "256", "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096"}
VLLM_SAGEMAKER = str(Path(sys.executable).with_name("vllm-sagemaker"))
ENV = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
OFFLINE = [sys.executable, "-m", "benchmarks.offline_engine"]
INVOCATION_MS = re.compile(r"^.*\binvocation id=.* ms=([0-9.]+)$", re.MULTILINE)
# The environment variable and the custom attribute that send records the old way, through
# vLLM's HTTP routes in-process (core/dispatch.py).
DISPATCH_VAR, ROUTE_ATTRIBUTE = "SAGEMAKER_RECORD_DISPATCH", "dispatch=route"
# `vllm-sagemaker transform`, with a custom attribute on every call when one is given (the
# command has no option for them): the same client, the same runs, one header more.
TRANSFORM = """
import sys
from vllm_sagemaker.deploy.transform.job import TransformJob
attribute = sys.argv.pop(1)
if attribute:
    headers = TransformJob.headers
    TransformJob.headers = lambda job: {
        **headers(job), "X-Amzn-SageMaker-Custom-Attributes": attribute
    }
from vllm_sagemaker.container.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Kind:
    """A request kind: its route, its model, and the `vllm.LLM` call it is held to."""

    name: str
    model: str
    url: str
    call: str

    def body(self, i: int, tokens: int) -> dict[str, Any]:
        length = {"max_tokens": tokens, "min_tokens": tokens}
        if self.name == "chat":
            return {
                "messages": [{"role": "user", "content": f"Tell me about number {i}"}],
                **length,
            }
        if self.name == "completion":
            return {"prompt": f"Tell me about number {i}", **length}
        return {"input": f"A sentence about the number {i} and what it means"}


KINDS = {
    "chat": Kind("chat", "llama", "/v1/chat/completions", "chat"),
    "completion": Kind("completion", "llama", "/v1/completions", "generate"),
    "embed": Kind("embed", "embedder", "/v1/embeddings", "embed"),
}


def line_files(kind: Kind, root: Path, lines: int, tokens: int, name: str) -> tuple[Path, Path]:
    """A batch file of `lines` lines and a Transform input of the same requests' bodies (a
    chat record holds `messages`, a completion record a `prompt`)."""
    batch, records = root / f"{name}-batch.jsonl", root / f"{name}-records" / "in.jsonl"
    records.parent.mkdir(exist_ok=True)
    with batch.open("w") as out, records.open("w") as bodies:
        for i in range(lines):
            body = kind.body(i, tokens)
            line = {"custom_id": f"r{i}", "method": "POST", "url": kind.url, "body": body}
            out.write(json.dumps(line) + "\n")
            bodies.write(json.dumps(body) + "\n")
    return batch, records


@dataclass(frozen=True)
class Run:
    """One run of one side: its seconds, the CPU seconds of all its processes and of its front
    end alone (None when not told apart), the engine's counters over it, and for a Transform
    job the seconds of its invocations as the server logged them."""

    seconds: float
    cpu_s: float
    front_cpu_s: float | None
    counters: dict[str, float]
    served_s: float | None = None


def cpu_s(processes: Iterable[psutil.Process]) -> float:
    """CPU seconds so far of these processes (their own threads, no children)."""
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def tree_cpu_s(pid: int) -> float:
    """CPU seconds so far of a process and its descendants."""
    top = psutil.Process(pid)
    return cpu_s([top, *top.children(recursive=True)])


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _title(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return " ".join(process.cmdline())
    return ""


def api_servers(server: servers.Server, count: int) -> list[psutil.Process]:
    """vLLM's API-server processes of a running `serve`: with `--api-server-count` 2 or more,
    those titled `VLLM::APIServer_N`; with one, the process running vLLM's CLI (`serve`'s
    child, or `serve` itself when it execs vLLM), which is then the API server. Never the
    engine core (`VLLM::EngineCore`), its worker, the supervisor (`serve`) nor, with several,
    the process that started them."""
    family = server.family()
    found = [p for p in family if "VLLM::APIServer" in _title(p)]
    if not found:
        found = [p for p in family if "vllm_sagemaker.container.vllm_cli" in _title(p)]
    assert len(found) == count, f"{server.name}: {len(found)} API servers, not {count}"
    return found


def whole_process(command: list[str], output: Path, lines: int, env: dict[str, str]) -> Run:
    """Run a command to its end: its seconds and the CPU seconds of its whole tree."""
    output.unlink(missing_ok=True)
    cpu, started = children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, env={**ENV, **env}, capture_output=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{command[:4]} failed:\n{done.stderr.decode()[-3000:]}")
    written = sum(1 for _ in output.open())
    assert written == lines, f"{command[:3]} wrote {written} lines of {lines}"
    return Run(seconds, children_cpu_s() - cpu, None, {})


class Offline:
    """`benchmarks.offline_engine` running one engine, answering one command at a time. Its
    own process is `vllm.LLM`'s front end (the engine core runs in a child), which also reads
    the input and writes the answers."""

    def __init__(self, model: Path) -> None:
        self.process = processes.spawn(
            [*OFFLINE, str(model), json.dumps(ENGINE)],
            env=ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("READY"):
                self.front = psutil.Process(self.process.pid)
                return
        raise RuntimeError("the offline engine did not start")

    def run(self, command: str, source: Path, target: Path) -> Run:
        assert self.process.stdin is not None and self.process.stdout is not None
        cpu, front = tree_cpu_s(self.process.pid), cpu_s([self.front])
        self.process.stdin.write(f"{command} {source} {target}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        while not line.startswith("RESULT "):
            if not line:
                raise RuntimeError("the offline engine exited")
            line = self.process.stdout.readline()
        front = cpu_s([self.front]) - front
        answer = json.loads(line.removeprefix("RESULT "))
        return Run(answer["seconds"], tree_cpu_s(self.process.pid) - cpu, front, answer["counters"])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(120)


def engine_counters(server: servers.Server) -> dict[str, float]:
    text = server.metrics()
    return {
        "vllm:generation_tokens": servers.metric_value(text, "vllm:generation_tokens_total"),
        "vllm:prompt_tokens": servers.metric_value(text, "vllm:prompt_tokens_total"),
        "steps": servers.metric_value(text, "vllm:iteration_tokens_total_count"),
    }


def measured_on(
    server: servers.Server,
    fronts: list[psutil.Process],
    run: Callable[[], tuple[float, float | None]],
) -> Run:
    """`run` on the server (its seconds, and the seconds its invocations logged or None): the
    CPU seconds over it of the server's whole tree and of its API servers (`fronts`), and the
    engine's counters."""
    before = engine_counters(server)
    cpu, front = tree_cpu_s(server.process.pid), cpu_s(fronts)
    seconds, served = run()
    front, cpu = cpu_s(fronts) - front, tree_cpu_s(server.process.pid) - cpu
    after = engine_counters(server)
    counters = {name: after[name] - before[name] for name in after}
    return Run(seconds, cpu, front, counters, served)


def batches_api(
    server: servers.Server, source: Path, endpoint: str, lines: int
) -> tuple[float, None]:
    """Upload, create, then the seconds from `in_progress` to `completed` (polled every 0.1 s,
    as a client would)."""
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    uploaded = sdk.files.create(file=source.open("rb"), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=uploaded.id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
    )
    started = None
    while batch.status not in ("completed", "failed", "cancelled", "expired"):
        time.sleep(0.1)
        batch = sdk.batches.retrieve(batch.id)
        if started is None and batch.status != "validating":
            started = time.perf_counter()
    seconds = time.perf_counter() - (started or time.perf_counter())
    counts = batch.request_counts
    assert batch.status == "completed" and counts and counts.completed == lines, batch
    return seconds, None


def invocation_seconds(log: str) -> float:
    """The seconds of the invocations a server logged (`invocation ... ms=N`), added up: the
    job's time in the container, without the transform process around it."""
    return sum(float(ms) for ms in INVOCATION_MS.findall(log)) / 1000


def transform(
    server: servers.Server, records: Path, output: Path, count: int, attribute: str
) -> tuple[float, float]:
    """A MultiRecord Batch Transform job of `records` (6 MB mini-batches) through the running
    container, every call with the custom attribute `attribute` (none when empty): the job's
    seconds (the `transform` process's whole run) and its invocations' seconds in the server."""
    logged = server.log_path.stat().st_size
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", TRANSFORM, attribute, "transform", "--endpoint", server.url,
         "--input", str(records.parent), "--output", str(output), "--content-type",
         "application/jsonlines", "--split-type", "Line", "--batch-strategy", "MultiRecord",
         "--max-payload-mb", "6"],
        env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    answers = [json.loads(line) for line in (output / "in.jsonl.out").open()]
    assert len(answers) == count and all("error" not in a for a in answers), answers[:2]
    with server.log_path.open(errors="replace") as log:
        log.seek(logged)
        return seconds, invocation_seconds(log.read())


def warm(server: servers.Server, records: Path) -> None:
    """A Transform input's records through the server in one call, each way, so that no side's
    first measured run pays what a fresh server pays once."""
    with records.open("rb") as source:
        body = source.read()
    for attribute in ("", ROUTE_ATTRIBUTE):
        headers = {"Content-Type": "application/jsonlines"}
        if attribute:
            headers["X-Amzn-SageMaker-Custom-Attributes"] = attribute
        answer = httpx.post(server.url + "/invocations", content=body, headers=headers, timeout=600)
        assert answer.status_code == 200, answer.text[:500]
