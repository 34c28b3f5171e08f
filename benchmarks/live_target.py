"""What the live target trades: live requests' first-token p95 and the batch's throughput beside
them, over targets and live rates, with this tree's rules and (ABBA) an older revision's.

For each target (`default`: the server's own, twice the idle p95; `Nx`:
SAGEMAKER_LIVE_LATENCY_RATIO=N; `Nms`: SAGEMAKER_LIVE_LATENCY_SLO=N) the servers start with it;
at targets in `--abba` the `--before` revision's server runs beside this tree's. For each live
rate, each server first meets live traffic alone (`--idle-seconds`: the idle tail, and the
baseline a server learns), then runs phases of a `/v1/batches` batch of 32-token chat lines:
the batch alone for `--alone-seconds` once no live request has come for the server's quiet
spell (its rate alone, the whole window), then Poisson live traffic of streamed 8-token chats
(`benchmarks.live_traffic`) beside it for `--seconds`. At the rates in
`--abba-rates` the phases go before, now, now, before (`--rounds` times) and each server's
are pooled. Each row: the live first-token tail, its ratio to the idle p95, the target the
server held to (its `/metrics`) and whether the p95 met it, the batch's lines/s beside live
traffic and alone in the same phase, the window and the preemptions at the phase's end, the
stall witness, and each phase's first live request (the first after a batch-only spell).

    .venv/bin/python -m benchmarks.live_target --autogroup off [--before a09b1be]
        [--targets default 250ms 1.5x 3x] [--rates 2 0.5 4] [--abba default 250ms]
        [--abba-rates 2] [--rounds 1] [--seconds 60] [--markdown PATH]
"""

import argparse
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import autogroup
from benchmarks.batch_load import BATCH_TOKENS, ServerBatch
from benchmarks.bench import bench
from benchmarks.live_first import our_server
from benchmarks.live_first_phases import Tail, during
from benchmarks.live_traffic import LIVE_TOKENS, LiveTraffic
from benchmarks.startup import worktree
from benchmarks.witness import Witness
from tests.support import servers, waiting
from vllm_sagemaker.handler.batches.admission import rules as admission

PREEMPTIONS = "vllm_sagemaker:batch_preemptions_total"
QUIET_S = admission.Settings(full=1).quiet_s


def target_env(spelled: str) -> dict[str, str]:
    """The server's settings for a target as `--targets` spells it."""
    try:
        if spelled == "default":
            return {}
        if spelled.endswith("ms"):
            return {"SAGEMAKER_LIVE_LATENCY_SLO": str(int(spelled[:-2]))}
        if spelled.endswith("x"):
            return {"SAGEMAKER_LIVE_LATENCY_RATIO": str(float(spelled[:-1]))}
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{spelled!r}: default, a ratio like 1.5x, or like 250ms")


def target_arg(spelled: str) -> str:
    """`--targets` and `--abba`'s type: the target as spelled, once known to be one."""
    target_env(spelled)
    return spelled


@dataclass
class Row:
    target: str
    rate: float
    server: str
    idle: Tail
    # When the server's last live request ended.
    live_ended: float
    first: list[float] = field(default_factory=list)
    # Each phase's first live request, after the batch ran alone.
    opening: list[float] = field(default_factory=list)
    beside: list[float] = field(default_factory=list)
    alone: list[float] = field(default_factory=list)
    held_s: float = 0.0
    window: float = 0.0
    preempted: float = 0.0
    stalls: int = 0
    worst_s: float = 0.0

    def cells(self) -> list[str]:
        tail = Tail.of(self.first)
        lines, alone = sum(self.beside) / len(self.beside), sum(self.alone) / len(self.alone)
        kept = f"{lines / alone:.0%}" if alone else "-"
        met = "unknown" if not self.held_s else "yes" if tail.p95 <= self.held_s else "NO"
        return [
            self.target, f"{self.rate:g}", self.server, f"{self.held_s * 1000:.0f}",
            str(tail.count), " / ".join(f"{q * 1000:.0f}" for q in (tail.p50, tail.p95, tail.p99)),
            f"{self.idle.p95 * 1000:.0f}", f"{tail.p95 / self.idle.p95:.2f}", met,
            f"{lines:.0f} of {alone:.0f} ({kept})", f"{self.window:.0f}",
            f"{self.preempted:.0f}", f"{self.stalls} / {self.worst_s * 1000:.0f}",
            " ".join(f"{s * 1000:.0f}" for s in self.opening),
        ]  # fmt: skip


HEADER = [
    "target", "live/s", "server", "target ms", "n", "first token p50 / p95 / p99 ms",
    "idle p95 ms", "p95 / idle p95", "p95 within target", "batch lines/s beside, alone (kept)",
    "window at end", "preempted", "witness stalls / worst ms",
    "first request after the batch alone, ms",
]  # fmt: skip


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    return "\n".join([*lines, *("| " + " | ".join(row.cells()) + " |" for row in rows)])


def phase(server: servers.Server, batch: ServerBatch, row: Row, args: argparse.Namespace,
          witness: Witness) -> None:  # fmt: skip
    """The batch alone, then beside live traffic at the row's rate, into `row`."""
    preempted = server.metric(PREEMPTIONS)
    started = time.monotonic()
    batch.start()
    try:
        waiting.until(lambda: batch.answered() > 0, 600, "the batch never started", 0.2)
        # Alone means the whole window: no live request for the server's quiet spell.
        time.sleep(max(0.0, row.live_ended + QUIET_S + 1 - time.monotonic()))
        row.alone.append(during(batch, args.alone_seconds))
        with LiveTraffic(server.url, "/invocations", row.rate, seed=len(row.beside) + 7) as live:
            row.beside.append(during(batch, args.seconds))
        row.live_ended = time.monotonic()
        row.first += live.first
        row.opening += [] if (opening := live.opening_s()) is None else [opening]
        row.held_s = server.metric("vllm_sagemaker:live_latency_target_seconds")
        row.window = server.metric("vllm_sagemaker:batch_window")
        row.preempted += server.metric(PREEMPTIONS) - preempted
    finally:
        batch.stop()
    seen = witness.between(started, time.monotonic())
    row.stalls += seen.stalls
    row.worst_s = max(row.worst_s, seen.worst_s)


@contextlib.contextmanager
def started(names: list[str], target: str, model: Path, root: Path, before: str
            ) -> Iterator[dict[str, servers.Server]]:  # fmt: skip
    """This tree's server ("now") and, when asked, the older revision's, with the target."""
    with contextlib.ExitStack() as stack:
        found = {}
        for name in names:
            tree = stack.enter_context(worktree(before)) if name == "before" else None
            home = root / f"{target}-{name}"
            home.mkdir()
            found[name] = stack.enter_context(
                our_server(name, model, home, tree, target_env(target))
            )
        yield found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="a09b1be", help="the revision to compare with")
    parser.add_argument(
        "--targets", type=target_arg, nargs="+", default=["default", "250ms", "1.5x", "3x"]
    )
    parser.add_argument("--rates", type=float, nargs="+", default=[2.0, 0.5, 4.0])
    parser.add_argument("--abba", type=target_arg, nargs="*", default=["default", "250ms"])
    parser.add_argument("--abba-rates", type=float, nargs="*", default=[2.0])
    parser.add_argument("--lines", type=int, default=40000, help="lines of each batch")
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument("--alone-seconds", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=60.0, help="live traffic per phase")
    parser.add_argument(
        "--rounds", type=int, default=1, help="ABBA rounds (before, now, now, before)"
    )
    parser.add_argument("--markdown", type=Path)
    autogroup.add_argument(parser)
    args = parser.parse_args()
    rows: list[Row] = []
    with bench(args.autogroup, args.lines, BATCH_TOKENS) as setup:
        root, model, source, witness = setup.root, setup.model, setup.source, setup.witness
        print(f"live chats of {LIVE_TOKENS} (streamed), {args.seconds:g} s of them a phase")
        for target in args.targets:
            names = ["before", "now"] if target in args.abba else ["now"]
            with started(names, target, model, root, args.before) as running:
                batches = {name: ServerBatch(s.url, source) for name, s in running.items()}
                for rate in args.rates:
                    here: dict[str, Row] = {}
                    for name, server in running.items():
                        with LiveTraffic(server.url, "/invocations", rate) as idle:
                            time.sleep(args.idle_seconds)
                        here[name] = Row(target, rate, name, Tail.of(idle.first), time.monotonic())
                    order = ["now"]
                    if len(names) > 1 and rate in args.abba_rates:
                        order = ["before", "now", "now", "before"] * args.rounds
                    for name in order:
                        phase(running[name], batches[name], here[name], args, witness)
                    for name in dict.fromkeys(order):
                        rows.append(here[name])
                        print("| " + " | ".join(here[name].cells()) + " |", flush=True)
        print("\n" + markdown(rows))
        if args.markdown:
            args.markdown.write_text(markdown(rows) + "\n")


if __name__ == "__main__":
    main()
