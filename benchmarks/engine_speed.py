"""Every batch path beside vLLM's offline engine (`vllm.LLM`), on the same model, engine limits
and lines, in one run. Each pair runs ABBA (ours, the engine's, the engine's, ours), so what
drifts over the run falls on both sides; the ratio is the engine's seconds over ours (1.00:
as fast as `vllm.LLM`, above: faster).

1. `vllm-sagemaker batch --model` against a script that reads the same file into `LLM.chat`
   (`LLM.embed`) and writes the answers: whole process, engine start included.
2. The server's `/v1/batches` against `LLM.chat` (`LLM.embed`) on a running engine: steady
   state, the batch from `in_progress` to `completed` against the engine call alone.
3. A Batch Transform job through a running container (`vllm-sagemaker transform`, MultiRecord,
   6 MB mini-batches) against `LLM.generate` (`LLM.embed`) on the same prompts: the job
   against the engine call alone, and the job's invocations as the server logged them (what a
   SageMaker job spends in the container, without our local runner's own start).

Beside each: the engine's counters over the run (`steps`, and the prompt and generated tokens
it ran per step: a queue that runs dry shows as more steps with fewer tokens each) and the CPU
seconds of each side's processes (the engine core's included), so a gap says whether it is
the engine waiting or the front end working.

    .venv/bin/python -m benchmarks.engine_speed [--lines 12000] [--records 4000] [--tokens 32]
        [--kinds chat embed] [--paths whole batches transform] [--env NAME=VALUE ...]

`--env` adds settings to the server's environment (`batch --model`'s engine and the running
container alike), e.g. `SAGEMAKER_BATCH_YIELD=false` to see what the batch window costs.
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import openai
import psutil

from tests.support import model_factory, servers

ENGINE = {"max_num_seqs": 256, "max_num_batched_tokens": 4096, "enforce_eager": True}
SERVE_ARGS = ["--max-num-seqs", "256", "--max-num-batched-tokens", "4096", "--enforce-eager"]
SERVER_ENV = {"SM_VLLM_MAX_NUM_SEQS": "256", "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096"}
VLLM_SAGEMAKER = str(Path(sys.executable).with_name("vllm-sagemaker"))
ENV = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
OFFLINE = [sys.executable, "-m", "benchmarks.offline_engine"]
INVOCATION_MS = re.compile(r"^.*\binvocation id=.* ms=([0-9.]+)$", re.MULTILINE)


@dataclass
class Side:
    """One side's runs: seconds, CPU seconds and engine counters of each."""

    seconds: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    counters: list[dict[str, float]] = field(default_factory=list)

    def add(self, seconds: float, cpu_s: float, counters: dict[str, float]) -> None:
        self.seconds.append(seconds)
        self.cpu_s.append(cpu_s)
        self.counters.append(counters)

    def per_step(self) -> str:
        steps = sum(c.get("steps", 0) for c in self.counters)
        tokens = sum(
            c.get("vllm:generation_tokens", 0) + c.get("vllm:prompt_tokens", 0)
            for c in self.counters
        )
        if not steps:
            return "-"
        return f"{steps / len(self.counters):.0f} steps, {tokens / steps:.0f} tok/step"


def line_files(kind: str, root: Path, lines: int, tokens: int, name: str = "") -> tuple[Path, Path]:
    """A batch file of `lines` lines and a Transform input of the same requests' bodies."""
    name = name or kind
    batch, records = root / f"{name}-batch.jsonl", root / f"{name}-records" / "in.jsonl"
    records.parent.mkdir(exist_ok=True)
    with batch.open("w") as out, records.open("w") as bodies:
        for i in range(lines):
            if kind == "chat":
                url = "/v1/chat/completions"
                body: dict = {
                    "messages": [{"role": "user", "content": f"Tell me about number {i}"}],
                    "max_tokens": tokens,
                    "min_tokens": tokens,
                }
                record = {"prompt": f"Tell me about number {i}", "max_tokens": tokens,
                          "min_tokens": tokens}  # fmt: skip
            else:
                url = "/v1/embeddings"
                body = record = {"input": f"A sentence about the number {i} and what it means"}
            out.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": url,
                                  "body": body}) + "\n")  # fmt: skip
            bodies.write(json.dumps(record) + "\n")
    return batch, records


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tree_cpu_s(pid: int) -> float:
    """CPU seconds so far of a process and its descendants."""
    top = psutil.Process(pid)
    total = 0.0
    for process in [top, *top.children(recursive=True)]:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def whole_process(command: list[str], output: Path, lines: int) -> tuple[float, float]:
    """Run a command to its end: (wall seconds, CPU seconds of its whole tree)."""
    output.unlink(missing_ok=True)
    cpu, started = children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, env=ENV, capture_output=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{command[:4]} failed:\n{done.stderr.decode()[-3000:]}")
    written = sum(1 for _ in output.open())
    assert written == lines, f"{command[:3]} wrote {written} lines of {lines}"
    return seconds, children_cpu_s() - cpu


class Offline:
    """`benchmarks.offline_engine` running one engine, answering one command at a time."""

    def __init__(self, model: Path) -> None:
        self.process = subprocess.Popen(
            [*OFFLINE, str(model), json.dumps(ENGINE)],
            env=ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("READY"):
                return
        raise RuntimeError("the offline engine did not start")

    def run(self, command: str, source: Path, target: Path) -> tuple[float, float, dict]:
        assert self.process.stdin is not None and self.process.stdout is not None
        cpu = tree_cpu_s(self.process.pid)
        self.process.stdin.write(f"{command} {source} {target}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        while not line.startswith("RESULT "):
            if not line:
                raise RuntimeError("the offline engine exited")
            line = self.process.stdout.readline()
        answer = json.loads(line.removeprefix("RESULT "))
        return answer["seconds"], tree_cpu_s(self.process.pid) - cpu, answer["counters"]

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


def measured_on(server: servers.Server, run: Callable[[], float]) -> tuple[float, float, dict]:
    """`run` on the server: its seconds, the server's CPU seconds and engine counters over it."""
    before, cpu = engine_counters(server), tree_cpu_s(server.process.pid)
    seconds = run()
    after = engine_counters(server)
    counters = {name: after[name] - before[name] for name in after}
    return seconds, tree_cpu_s(server.process.pid) - cpu, counters


def batches_api(server: servers.Server, source: Path, endpoint: str, lines: int) -> float:
    """Upload, create, then the seconds from `in_progress` to `completed` (polled every 0.1 s,
    as a client would)."""
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    uploaded = sdk.files.create(file=source.open("rb"), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=uploaded.id,
        endpoint=endpoint,
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
    return seconds


def invocation_seconds(log: str) -> float:
    """The seconds of the invocations a server logged (`invocation ... ms=N`), added up: the
    job's time in the container, without the transform process around it."""
    return sum(float(ms) for ms in INVOCATION_MS.findall(log)) / 1000


def transform(
    server: servers.Server, records: Path, output: Path, count: int, served: list[float]
) -> float:
    """A MultiRecord Batch Transform job of `records` through the running container: the job's
    seconds (the `transform` process's whole run); its invocations' seconds go to `served`."""
    logged = server.log_path.stat().st_size
    started = time.perf_counter()
    subprocess.run(
        [VLLM_SAGEMAKER, "transform", "--endpoint", server.url, "--input", str(records.parent),
         "--output", str(output), "--content-type", "application/jsonlines", "--split-type",
         "Line", "--batch-strategy", "MultiRecord", "--max-payload-mb", "6"],
        env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    answers = [json.loads(line) for line in (output / "in.jsonl.out").open()]
    assert len(answers) == count and all("error" not in a for a in answers), answers[:2]
    with server.log_path.open(errors="replace") as log:
        log.seek(logged)
        served.append(invocation_seconds(log.read()))
    return seconds


def abba(ours: Callable[[], tuple], theirs: Callable[[], tuple]) -> tuple[Side, Side]:
    sides = Side(), Side()
    for which in (0, 1, 1, 0):
        sides[which].add(*(ours if which == 0 else theirs)())
    return sides


def row(name: str, ours: Side, theirs: Side, lines: int) -> str:
    ratio = sum(theirs.seconds) / sum(ours.seconds)
    fmt = " / ".join
    return (
        f"{name:34} {fmt(f'{s:.1f}' for s in ours.seconds):>11} "
        f"{fmt(f'{s:.1f}' for s in theirs.seconds):>11} {ratio:6.2f}x "
        f"{lines * 2 / sum(ours.seconds):7.0f} {lines * 2 / sum(theirs.seconds):7.0f}  "
        f"{sum(ours.cpu_s) / 2:6.1f} {sum(theirs.cpu_s) / 2:6.1f}  "
        f"{ours.per_step():>24} | {theirs.per_step()}"
    )


def header(kind: str, lines: int, records: int, tokens: int) -> None:
    what = f"x {tokens} generated tokens, tiny Llama" if kind == "chat" else "all-MiniLM-L6-v2"
    print(f"\n{kind}: {lines} batch lines / {records} Transform records {what}, engine {ENGINE}")
    print(
        f"{'path (ours vs vllm.LLM)':34} {'ours s':>11} {'LLM s':>11} {'ratio':>7} "
        f"{'ours/s':>7} {'LLM/s':>7}  {'CPU s':>6} {'LLM':>6}  {'engine (ours | LLM)':>24}"
    )


def bench_kind(kind: str, root: Path, model: Path, args: argparse.Namespace) -> None:
    call = {"chat": "chat", "embed": "embed"}[kind]
    batch, _ = line_files(kind, root, args.lines, args.tokens)
    _, records = line_files(kind, root, args.records, args.tokens, kind + "-t")
    header(kind, args.lines, args.records, args.tokens)
    out = root / f"{kind}-out.jsonl"
    ours_whole = [VLLM_SAGEMAKER, "batch", "-i", str(batch), "-o", str(out), "--model",
                  str(model), *SERVE_ARGS]  # fmt: skip
    theirs_whole = [*OFFLINE, str(model), json.dumps(ENGINE), call, str(batch), str(out)]
    if "whole" in args.paths:
        sides = abba(
            lambda: (*whole_process(ours_whole, out, args.lines), {}),
            lambda: (*whole_process(theirs_whole, out, args.lines), {}),
        )
        print(row("batch --model (whole process)", *sides, args.lines), flush=True)
    if "batches" not in args.paths and "transform" not in args.paths:
        return
    offline = Offline(model)
    try:
        with servers.running({kind: model}, root, {kind: SERVER_ENV}) as running:
            server = running[kind]
            endpoint = "/v1/chat/completions" if kind == "chat" else "/v1/embeddings"
            if "batches" in args.paths:
                sides = abba(
                    lambda: measured_on(
                        server, lambda: batches_api(server, batch, endpoint, args.lines)
                    ),
                    lambda: offline.run(call, batch, out),
                )
                print(row("/v1/batches (steady state)", *sides, args.lines), flush=True)
            if "transform" not in args.paths:
                return
            targets = {"chat": "generate", "embed": "embed"}
            served: list[float] = []
            ours, theirs = abba(
                lambda: measured_on(
                    server,
                    lambda: transform(
                        server, records, root / f"{kind}-t-out", args.records, served
                    ),
                ),
                lambda: offline.run(targets[kind], records, out),
            )
            print(row("transform (job vs engine call)", ours, theirs, args.records))
            inside = Side(served, ours.cpu_s, ours.counters)
            print(row("  its /invocations in the server", inside, theirs, args.records))
    finally:
        offline.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=12000)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--kinds", nargs="+", default=["chat", "embed"])
    parser.add_argument("--paths", nargs="+", default=["whole", "batches", "transform"])
    parser.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    ENV.update(pair.split("=", 1) for pair in args.env)
    SERVER_ENV.update(pair.split("=", 1) for pair in args.env)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = {"chat": lambda: model_factory.make_chat_model(root / "model"),
                  "embed": model_factory.embedder_path}  # fmt: skip
        for kind in args.kinds:
            bench_kind(kind, root, models[kind](), args)


if __name__ == "__main__":
    main()
