"""How long the commands take to start: `vllm-sagemaker --help`, and `serve` from its start to
the exec of vLLM, side by side with another revision of this repository (`--before REV`).

SageMaker starts `serve` on every cold start and every engine restart, and a laptop user runs
`vllm-sagemaker` for every deploy command, so what they load before doing anything is paid each
time. Each run is a fresh interpreter; `serve`'s exec of vLLM is replaced by an exit, so the time
is spawn -> exec (or, when `serve` supervises vLLM, spawn -> the start of vLLM's process). The
time from `serve` to vLLM answering, and to vLLM answering again after its engine died, is
`benchmarks/restart.py`'s. The older revision runs from a git worktree with its own entry
points (read from its pyproject.toml) and this venv's packages.

    .venv/bin/python -m benchmarks.startup [--runs 20] [--before a4ac411]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Replaces the exec of vLLM (and the start of its process, when `serve` supervises it) with a
# report of what `serve` loaded, then exits.
STOP_AT_EXEC = """
import json, os, subprocess, sys
def _stop(*args, **kwargs):
    heavy = sorted({m.split('.')[0] for m in sys.modules} & {'boto3', 'httpx', 'tqdm', 'starlette'})
    print(json.dumps({'modules': len(sys.modules), 'heavy': heavy}))
    sys.stdout.flush()
    os._exit(0)
os.execve = _stop
subprocess.Popen = _stop
"""


def entry_code(tree: Path, script: str, argv: list[str]) -> str:
    """Python that runs a console script of the tree's pyproject.toml with `argv`."""
    target = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"][script]
    module, function = target.split(":")
    return (
        f"{STOP_AT_EXEC}\nimport sys\nfrom {module} import {function}\n"
        f"sys.argv = {[script, *argv]!r}\nsys.exit({function}())"
    )


def timed(code: str, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/", check=True
    )
    return time.perf_counter() - started, done.stdout


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as parent:
        path = Path(parent) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(path), rev],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=True
            )


def quantiles(samples: list[float]) -> str:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return f"median {statistics.median(samples) * 1000:6.0f} ms  p95 {cuts[94] * 1000:6.0f} ms"


def measure(trees: dict[str, tuple[Path, dict[str, str]]], runs: int) -> None:
    model = {"SM_VLLM_MODEL": "org/model", "SAGEMAKER_MODEL_DIR": tempfile.mkdtemp()}
    cases = {
        "vllm-sagemaker --help": ("vllm-sagemaker", ["--help"], {}),
        "serve (start -> exec of vLLM)": ("serve", [], model),
    }
    for case, (script, argv, extra_env) in cases.items():
        print(case)
        medians = {}
        for name, (tree, env) in trees.items():
            code = entry_code(tree, script, argv)
            samples, report = [], ""
            # Alternate nothing else in between: each run is one fresh interpreter.
            for _ in range(runs):
                seconds, out = timed(code, {**env, **extra_env})
                samples.append(seconds)
                report = out.strip().splitlines()[-1] if script == "serve" else ""
            medians[name] = statistics.median(samples)
            loaded = json.loads(report) if report else None
            print(f"  {name:>8}: {quantiles(samples)}" + (f"  {loaded}" if loaded else ""))
        if len(medians) == 2:
            before, after = medians.values()
            print(f"  after / before (median): {after / before:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--before", help="a revision to measure side by side, e.g. a4ac411")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    trees = {"now": (ROOT, env)}
    if args.before is None:
        measure(trees, args.runs)
        return
    with worktree(args.before) as old:
        measure({"before": (old, {**env, "PYTHONPATH": str(old)}), **trees}, args.runs)


if __name__ == "__main__":
    main()
