"""`vllm-sagemaker batch --model` against vLLM's run_batch, one after the other, on the same
chat file and model: wall time (engine start included), lines per second and peak memory of the
whole process tree and of the front process. Then the runner alone with `--endpoint` at each
size, to show its own memory stays flat as the file grows.

    .venv/bin/python -m benchmarks.batch_runner [--lines 1000 20000] [--tokens 32]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.support import model_factory, servers

# Both tools get the same engine limits (their CPU defaults differ).
ENGINE_ARGS = ["--max-num-seqs", "256", "--max-num-batched-tokens", "4096"]
VLLM_SAGEMAKER = str(Path(sys.executable).with_name("vllm-sagemaker"))


@dataclass
class Run:
    seconds: float
    front_mb: float
    tree_mb: float


def write_file(path: Path, lines: int, tokens: int) -> None:
    with path.open("w") as out:
        for i in range(lines):
            body = {
                "messages": [{"role": "user", "content": f"Tell me about number {i}"}],
                "max_tokens": tokens,
                "min_tokens": tokens,
            }
            record = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**record, "body": body}) + "\n")


def measured(command: list[str], env: dict[str, str]) -> Run:
    """Run `command`, sampling the RSS of it and its descendants every 0.1 s."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    front = tree = 0
    watched = psutil.Process(process.pid)
    done = threading.Event()

    def sample() -> None:
        nonlocal front, tree
        while not done.is_set():
            try:
                mine = watched.memory_info().rss
                family = mine + sum(c.memory_info().rss for c in watched.children(recursive=True))
            except psutil.Error:
                break
            front, tree = max(front, mine), max(tree, family)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, stderr = process.communicate()
    done.set()
    sampler.join()
    if process.returncode:
        raise RuntimeError(f"{command[:4]} failed:\n{stderr.decode()[-3000:]}")
    return Run(time.perf_counter() - started, front / 2**20, tree / 2**20)


def count(path: Path) -> int:
    return sum(1 for _ in path.open())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[1000, 20000])
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = model_factory.make_chat_model(root / "chat")
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
        print(f"chat lines x {args.tokens} tokens, tiny Llama, engine {' '.join(ENGINE_ARGS)}")
        print(
            f"{'tool':32} {'lines':>6} {'wall s':>7} {'lines/s':>8} {'front MB':>9} {'tree MB':>8}"
        )
        for lines in args.lines:
            source = root / f"in-{lines}.jsonl"
            write_file(source, lines, args.tokens)
            tools = {
                "vllm-sagemaker batch --model": [
                    VLLM_SAGEMAKER, "batch", "-i", str(source), "-o", str(root / "ours.jsonl"),
                    "--model", str(model), *ENGINE_ARGS,
                ],
                "vllm run_batch": [
                    sys.executable, "-m", "vllm.entrypoints.launchers.run_batch", "-i",
                    str(source), "-o", str(root / "theirs.jsonl"), "--model", str(model),
                    *ENGINE_ARGS,
                ],
            }  # fmt: skip
            for name, command in tools.items():
                run = measured(command, env)
                output = root / ("ours.jsonl" if "sagemaker" in name else "theirs.jsonl")
                assert count(output) == lines, f"{name} wrote {count(output)} lines"
                print(
                    f"{name:32} {lines:6} {run.seconds:7.1f} {lines / run.seconds:8.1f} "
                    f"{run.front_mb:9.0f} {run.tree_mb:8.0f}"
                )
        with servers.running(
            {"chat": model}, root, {"chat": {"SM_VLLM_MAX_NUM_SEQS": "256"}}
        ) as running:
            for lines in args.lines:
                source = root / f"in-{lines}.jsonl"
                url = running["chat"].url
                output = str(root / "endpoint.jsonl")
                command = [
                    VLLM_SAGEMAKER,
                    "batch",
                    "-i",
                    str(source),
                    "-o",
                    output,
                    "--endpoint",
                    url,
                ]
                run = measured(command, env)
                print(
                    f"{'batch --endpoint (runner only)':32} {lines:6} {run.seconds:7.1f} "
                    f"{lines / run.seconds:8.1f} {run.front_mb:9.0f} {run.tree_mb:8.0f}"
                )


if __name__ == "__main__":
    main()
