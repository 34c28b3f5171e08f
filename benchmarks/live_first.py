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

This module starts the servers and runs the benchmark; the load it drives is in
`benchmarks.live_traffic` and `benchmarks.batch_load`, the measurement of each phase in
`benchmarks.live_first_phases`, the table and plot in `benchmarks.live_first_report`.

    .venv/bin/python -m benchmarks.live_first [--before 864584e] [--rates 0.5 2 8]
        [--servers before now step-only vllm] [--plot docs/img/live-first.svg]
"""

import argparse
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import httpx

from benchmarks import autogroup
from benchmarks.batch_load import BATCH_TOKENS, Batch, ClientBatch, ServerBatch
from benchmarks.bench import bench
from benchmarks.live_first_phases import Row, phases
from benchmarks.live_first_report import plot, report
from benchmarks.live_traffic import LIVE_TOKENS
from benchmarks.startup import worktree
from tests import FOLDERS
from tests.support import processes, servers, waiting
from vllm_sagemaker.container.env_args import LIVE_FIRST_SCHEDULER

ENGINE = {"SM_VLLM_MAX_NUM_SEQS": "256", "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096"}


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
def our_server(
    name: str, model: Path, root: Path, tree: Path | None, extra: Mapping[str, str] | None = None
) -> Iterator[servers.Server]:
    """`serve` of this tree, or of an older revision's worktree (through PYTHONPATH: a view
    `vllm_sagemaker/` of its three folders comes before the installed one), with the
    variant's settings (`OURS`) and `extra`."""
    env = {
        **ENGINE,
        **OURS[name],
        **(extra or {}),
        "SAGEMAKER_BATCH_STORE": str(root / f"{name}-store"),
    }
    if tree is not None:
        view = root / f"{name}-view" / "vllm_sagemaker"
        view.mkdir(parents=True)
        for folder in FOLDERS:
            (view / folder).symlink_to(tree / folder)
        env["PYTHONPATH"] = str(view.parent)
    server = servers.start(name, model, root, **env)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


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
    with bench(args.autogroup, args.lines, BATCH_TOKENS) as setup:
        root, model, source, witness = setup.root, setup.model, setup.source, setup.witness
        print(f"live chats of {LIVE_TOKENS} (streamed), {args.seconds:g} s of them a phase")
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
