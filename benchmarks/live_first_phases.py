"""The measurement of `benchmarks.live_first`: the idle, transient and steady phases at one
live rate, each a row of first-token and total-time tails, the batch's lines/s beside live traffic
and alone, and what the stall witness saw."""

import argparse
import time
from collections import Counter
from dataclasses import dataclass

from benchmarks.batch_load import Batch
from benchmarks.live_traffic import LiveTraffic
from benchmarks.witness import Seen, Witness
from tests.support import waiting


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
