"""The Batches API side by side with the other ways to run the same batch, and what a running
batch does to real-time latency.

1. Throughput: the same chat lines through `/v1/batches` (create to completed) and through
   `vllm-sagemaker batch --endpoint` on the same server, and through vLLM's `run_batch` (which
   starts its own engine: its wall time includes that start, printed beside it). Peak RSS of the
   server's process tree (of run_batch's tree for run_batch).
2. Latency: the median of short real-time chat requests with no batch, while a batch runs on this
   server (lower engine priority, window that yields), and while a batch runs on a server where
   it does not yield (SAGEMAKER_BATCH_YIELD=false, FCFS scheduling).

    .venv/bin/python -m benchmarks.batches_api [--lines 3000] [--tokens 16] [--probes 20]
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import psutil

from benchmarks.batch_runner import ENGINE_ARGS, VLLM_SAGEMAKER, measured, write_file
from tests.support import model_factory, servers

SERVER_ENV = {"SM_VLLM_MAX_NUM_SEQS": "256", "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096"}


@contextmanager
def peak_rss(pid: int) -> Iterator[list[float]]:
    """Sample the RSS (MB) of `pid` and its descendants every 0.1 s; the peak is in the list."""
    peak = [0.0]
    done = threading.Event()
    process = psutil.Process(pid)

    def sample() -> None:
        while not done.is_set():
            try:
                family = [process, *process.children(recursive=True)]
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in family) / 2**20)
            except psutil.Error:
                pass
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


def run_batch_api(sdk: openai.OpenAI, source: Path) -> tuple[str, float]:
    """Upload, then create -> completed; (batch id, seconds from create to completed)."""
    uploaded = sdk.files.create(file=source.open("rb"), purpose="batch")
    started = time.perf_counter()
    batch = sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while batch.status not in ("completed", "failed", "cancelled", "expired"):
        time.sleep(0.1)
        batch = sdk.batches.retrieve(batch.id)
    seconds = time.perf_counter() - started
    assert batch.status == "completed" and batch.request_counts, batch
    assert batch.request_counts.completed == batch.request_counts.total, batch.request_counts
    return batch.id, seconds


def probe_latency(url: str, count: int) -> float:
    """The median seconds of `count` short chat requests, one after another."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    times = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for _ in range(count):
            started = time.perf_counter()
            client.post("/v1/chat/completions", json=body).raise_for_status()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def latency_during_batch(server: servers.Server, source: Path, probes: int) -> float:
    """Median probe latency while a batch of `source` runs on `server` (probes start once the
    batch is in progress)."""
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    uploaded = sdk.files.create(file=source.open("rb"), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while (batch.request_counts is None or batch.request_counts.completed < 50) and (
        batch.status != "completed"
    ):
        time.sleep(0.1)
        batch = sdk.batches.retrieve(batch.id)
    median = probe_latency(server.url, probes)
    assert sdk.batches.retrieve(batch.id).status == "in_progress", "the batch ended first"
    sdk.batches.cancel(batch.id)
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--probes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = model_factory.make_chat_model(root / "chat")
        source, busy = root / "in.jsonl", root / "busy.jsonl"
        write_file(source, args.lines, args.tokens)
        # The batch the latency probes run beside: long enough to outlast them on either server.
        write_file(busy, args.lines * 4, args.tokens)
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
        print(f"{args.lines} chat lines x {args.tokens} tokens, tiny Llama, 256 seqs")
        rows: dict[str, tuple[float, float]] = {}
        yielding = {**SERVER_ENV, "SAGEMAKER_BATCH_STORE": str(root / "store")}
        with servers.running({"chat": model}, root, {"chat": yielding}) as running:
            server = running["chat"]
            sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
            with peak_rss(server.process.pid) as peak:
                _, seconds = run_batch_api(sdk, source)
            rows["/v1/batches (create->completed)"] = (seconds, peak[0])
            with peak_rss(server.process.pid) as peak:
                command = [
                    VLLM_SAGEMAKER, "batch", "-i", str(source), "-o", str(root / "out.jsonl"),
                    "--endpoint", server.url,
                ]  # fmt: skip
                run = measured(command, env)
            rows["vllm-sagemaker batch --endpoint"] = (run.seconds, peak[0])
            idle = probe_latency(server.url, args.probes)
            during = latency_during_batch(server, busy, args.probes)
        start = time.perf_counter()
        run = measured(
            [
                sys.executable,
                "-m",
                "vllm.entrypoints.launchers.run_batch",
                "-i",
                str(source),
                "-o",
                str(root / "theirs.jsonl"),
                "--model",
                str(model),
                *ENGINE_ARGS,
            ],
            env,
        )
        rows["vllm run_batch (incl. engine start)"] = (time.perf_counter() - start, run.tree_mb)
        greedy = {
            **SERVER_ENV,
            "SAGEMAKER_BATCH_STORE": str(root / "store-greedy"),
            "SAGEMAKER_BATCH_YIELD": "false",
            "SM_VLLM_SCHEDULING_POLICY": "fcfs",
        }
        started = time.perf_counter()
        with servers.running({"greedy": model}, root, {"greedy": greedy}) as running:
            engine_start = time.perf_counter() - started
            not_yielding = latency_during_batch(running["greedy"], busy, args.probes)
        ours = rows["/v1/batches (create->completed)"][0]
        print(f"\n{'how':38} {'wall s':>7} {'lines/s':>8} {'peak MB':>8} {'vs /v1/batches':>15}")
        for name, (seconds, mb) in rows.items():
            print(
                f"{name:38} {seconds:7.1f} {args.lines / seconds:8.1f} {mb:8.0f} "
                f"{seconds / ours:14.2f}x"
            )
        print(f"(a server start, for comparison with run_batch: {engine_start:.1f} s)")
        print(f"\nreal-time chat latency, median of {args.probes} requests of 8 tokens:")
        print(f"  idle server                      {idle * 1000:8.1f} ms  1.00x")
        print(f"  during a batch (yields)          {during * 1000:8.1f} ms  {during / idle:.2f}x")
        print(
            f"  during a batch that does not yield {not_yielding * 1000:6.1f} ms  "
            f"{not_yielding / idle:.2f}x"
        )


if __name__ == "__main__":
    main()
