"""Does a workload stall the whole machine? Each workload runs for a while beside the stall
witness (`benchmarks.witness`), one after the other in one run, with the kernel's counters over
the same window: what the witness saw, the workload's lines/s, and per second the host's steal
time, context switches, TLB shootdowns and other cross-core calls, page faults (minor and
major), and direct reclaim and compaction stalls.

Workloads (`--workloads`, in this order by default):
- `busy`: two processes that spin (the control: CPU load alone);
- `offline`: vLLM's offline engine, `vllm.LLM.generate`, on `--lines` prompts at once;
- `vllm`: vLLM's own server, driven over HTTP at `--pace` lines/s with 256 chats in flight;
- `server`: our server, a `/v1/batches` batch of `--lines` lines;
- `runner`: `vllm-sagemaker batch --model`, our server started by the client runner.

All on the tiny test Llama, 256 sequences, 32-token answers. `--env NAME=VALUE` goes to every
engine (e.g. `LD_PRELOAD=...`), so one setting can be tried on all of them.

    .venv/bin/python -m benchmarks.stalls [--seconds 60] [--lines 20000] [--pace 230]
        [--workloads busy offline vllm server runner] [--env NAME=VALUE ...]
"""

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import openai

from benchmarks import autogroup
from benchmarks.batch_load import BATCH_TOKENS, ClientBatch
from benchmarks.batch_runner import ENGINE_ARGS, VLLM_SAGEMAKER
from benchmarks.bench import bench
from benchmarks.live_first import ENGINE, plain_vllm
from benchmarks.witness import Seen, Witness
from tests.support import servers, waiting

COUNTERS = (
    ("steal ms", "steal"),
    ("ctx sw", "ctxt"),
    ("TLB", "TLB"),
    ("calls", "CAL"),
    ("faults", "pgfault"),
    ("major", "pgmajfault"),
    ("reclaim", "allocstall"),
    ("compact", "compact_stall"),
)
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def counters() -> dict[str, float]:
    """The machine's counters now: from /proc/stat, /proc/interrupts and /proc/vmstat."""
    found: dict[str, float] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        fields = line.split()
        if fields[0] == "cpu":
            found["steal"] = int(fields[8]) * TICK_MS
        elif fields[0] == "ctxt":
            found["ctxt"] = int(fields[1])
    for line in Path("/proc/interrupts").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] in ("TLB:", "CAL:"):
            found[fields[0][:-1]] = sum(int(f) for f in fields[1:] if f.isdigit())
    for line in Path("/proc/vmstat").read_text().splitlines():
        name, value = line.split()
        if name in ("pgfault", "pgmajfault", "compact_stall"):
            found[name] = int(value)
        elif name.startswith("allocstall"):
            found["allocstall"] = found.get("allocstall", 0) + int(value)
    return found


@dataclass
class Window:
    """A workload's measured window: what the witness saw, lines/s, counters per second."""

    name: str
    seconds: float
    lines_s: float
    seen: Seen
    rates: dict[str, float]


@contextlib.contextmanager
def measured(name: str, witness: Witness, answered: Callable[[], int]) -> Iterator[list[Window]]:
    """Measure the body's window; `answered` counts the workload's lines so far."""
    found: list[Window] = []
    before, lines, started = counters(), answered(), time.monotonic()
    yield found
    after, seconds = counters(), time.monotonic() - started
    rates = {key: (after.get(key, 0) - before.get(key, 0)) / seconds for _, key in COUNTERS}
    lines_s = (answered() - lines) / seconds
    found.append(Window(name, seconds, lines_s, witness.between(started, time.monotonic()), rates))


def busy(seconds: float, witness: Witness) -> Window:
    spin = "import time\nend = time.monotonic() + {0}\nwhile time.monotonic() < end: pass"
    with measured("busy", witness, lambda: 0) as found:
        spinners = [
            subprocess.Popen([sys.executable, "-c", spin.format(seconds)]) for _ in range(2)
        ]
        for spinner in spinners:
            spinner.wait()
    return found[0]


OFFLINE = """
import sys, time
from vllm import LLM, SamplingParams
llm = LLM(sys.argv[1], max_num_seqs=256, max_num_batched_tokens=4096, enforce_eager=True)
prompts = [f"Tell me about number {i}" for i in range(int(sys.argv[2]))]
params = SamplingParams(max_tokens=32, min_tokens=32)
print("generating", flush=True)
started = time.monotonic()
llm.generate(prompts, params, use_tqdm=False)
print("generated", time.monotonic() - started, flush=True)
"""


def offline(model: Path, lines: int, witness: Witness, env: dict[str, str]) -> Window:
    """vLLM's offline engine: the window is `generate` alone (the engine's start is not in it)."""
    process = subprocess.Popen(
        [sys.executable, "-c", OFFLINE, str(model), str(lines)],
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("generating"):
            break
    done = [0]
    with measured("offline", witness, lambda: done[0]) as found:
        for line in process.stdout:
            if line.startswith("generated"):
                done[0] = lines
    if process.wait():
        raise RuntimeError(f"the offline engine exited with {process.returncode}")
    return found[0]


def plain(model: Path, root: Path, seconds: float, pace: float, witness: Witness) -> Window:
    with plain_vllm(model, root) as url:
        batch = ClientBatch(url, 256)
        batch.pace = pace
        batch.start()
        try:
            waiting.until(lambda: batch.answered() > 0, 600, "plain vLLM answered nothing", 0.2)
            with measured("vllm", witness, batch.answered) as found:
                time.sleep(seconds)
        finally:
            batch.stop()
    return found[0]


def ours(
    model: Path, root: Path, source: Path, seconds: float, witness: Witness, env: dict[str, str]
) -> Window:
    store = {"SAGEMAKER_BATCH_STORE": str(root / "stalls-store")}
    with servers.running({"ours": model}, root, {"ours": {**ENGINE, **store, **env}}) as running:
        sdk = openai.OpenAI(base_url=running["ours"].url + "/v1", api_key="none")
        uploaded = sdk.files.create(file=source.open("rb"), purpose="batch")
        batch = sdk.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )

        def answered() -> int:
            counts = sdk.batches.retrieve(batch.id).request_counts
            return 0 if counts is None else counts.completed + counts.failed

        waiting.until(lambda: answered() > 0, 600, "our server answered nothing", 0.2)
        with measured("server", witness, answered) as found:
            time.sleep(seconds)
        sdk.batches.cancel(batch.id)
    return found[0]


def runner(
    model: Path, root: Path, source: Path, seconds: float, witness: Witness, env: dict[str, str]
) -> Window:
    """`batch --model`: the window starts at its first output line and ends `seconds` later."""
    output = root / "runner.jsonl"
    output.unlink(missing_ok=True)
    command = [VLLM_SAGEMAKER, "batch", "-i", str(source), "-o", str(output)]
    process = subprocess.Popen(
        [*command, "--model", str(model), *ENGINE_ARGS],
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def answered() -> int:
        with contextlib.suppress(FileNotFoundError), output.open("rb") as lines:
            return sum(1 for _ in lines)
        return 0

    try:
        waiting.until(lambda: answered() > 0, 900, "batch --model answered nothing", 0.2)
        with measured("runner", witness, answered) as found:
            time.sleep(seconds)
    finally:
        process.terminate()
        process.wait()
    return found[0]


def report(windows: list[Window]) -> None:
    heads = " ".join(f"{head:>9}" for head, _ in COUNTERS)
    print(f"{'workload':9} {'s':>4} {'lines/s':>7} | per second: {heads} | witness")
    for w in windows:
        cells = " ".join(f"{w.rates[key]:9.0f}" for _, key in COUNTERS)
        print(f"{w.name:9} {w.seconds:4.0f} {w.lines_s:7.0f} | {'':12}{cells} | {w.seen}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="each workload's window")
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--pace", type=float, default=230.0, help="plain vLLM's lines/s")
    kinds = ["busy", "offline", "vllm", "server", "runner"]
    parser.add_argument("--workloads", nargs="+", default=kinds, choices=kinds)
    parser.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for every engine")
    autogroup.add_argument(parser)
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    windows: list[Window] = []
    with bench(args.autogroup, args.lines, BATCH_TOKENS) as setup:
        root, model, source, witness = setup.root, setup.model, setup.source, setup.witness
        print(f"env {env}")
        for kind in args.workloads:
            if kind == "busy":
                window = busy(args.seconds, witness)
            elif kind == "offline":
                window = offline(model, args.lines, witness, env)
            elif kind == "vllm":
                window = plain(model, root, args.seconds, args.pace, witness)
            elif kind == "server":
                window = ours(model, root, source, args.seconds, witness, env)
            else:
                window = runner(model, root, source, args.seconds, witness, env)
            report([window])
            windows.append(window)
    print("\npython -m benchmarks.stalls " + shlex.join(sys.argv[1:]))
    report(windows)


if __name__ == "__main__":
    main()
