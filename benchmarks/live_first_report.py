"""The report of `benchmarks.live_first`: a table row per phase, its first-token times against
the idle phase's, and the plot of first-token p95 against the batch's throughput."""

import os
import shlex
import sys
import time
from pathlib import Path

from benchmarks.live_first_phases import Row, Tail
from benchmarks.plot import Point, scatter


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
