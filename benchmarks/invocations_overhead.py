"""What /invocations adds over calling vLLM's route directly, on the same server.

For each body, /invocations and the direct route are called alternately (ABBA pairs, so drift
and noise hit both alike), N times each over one keep-alive connection, and their medians and
p95s are compared (ratio: /invocations over the direct route, at each):
- a one-line embedding (the cheapest request, where overhead shows most), on all-MiniLM-L6-v2;
- a short chat (8 tokens), on the tiny Llama.

A real-time request reaches vLLM through its HTTP route in-process whatever
SAGEMAKER_RECORD_DISPATCH says (core/dispatch.py): only records of multi-record bodies
and batch lines take its serving objects. Beside each case, the stall witness
(`benchmarks.witness`): a tail measured while the machine stalled is the machine's.

    .venv/bin/python -m benchmarks.invocations_overhead [-n 400] [--markdown PATH]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.witness import Seen, Witness
from tests.support import model_factory, servers

HEADER = [
    "case", "direct ms p50 / p95", "/invocations ms p50 / p95", "ratio p50", "ratio p95",
    "pairs", "witness",
]  # fmt: skip


def timed(client: httpx.Client, path: str, body: dict) -> float:
    started = time.perf_counter()
    response = client.post(path, json=body)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[94]


def compare(
    server: servers.Server, route: str, body: dict, rounds: int
) -> tuple[list[float], list[float]]:
    """Seconds of each call (direct, /invocations) over `rounds` alternating pairs."""
    direct: list[float] = []
    routed: list[float] = []
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for _ in range(20):
            timed(client, route, body)
            timed(client, "/invocations", body)
        for i in range(rounds):
            pair = [(direct, route), (routed, "/invocations")]
            for samples, path in pair if i % 2 == 0 else reversed(pair):
                samples.append(timed(client, path, body))
    return direct, routed


def cells(name: str, direct: list[float], routed: list[float], seen: Seen) -> list[str]:
    def both(samples: list[float]) -> str:
        return f"{statistics.median(samples) * 1000:.2f} / {p95(samples) * 1000:.2f}"

    return [
        name, both(direct), both(routed),
        f"{statistics.median(routed) / statistics.median(direct):.3f}",
        f"{p95(routed) / p95(direct):.3f}", str(len(direct)), str(seen),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--rounds", type=int, default=400)
    parser.add_argument("--markdown", type=Path, help="also write the table here, as markdown")
    args = parser.parse_args()
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp, Witness() as witness:
        root = Path(tmp)
        models = {
            "embed": model_factory.embedder_path(),
            "chat": model_factory.make_chat_model(root / "chat"),
        }
        with servers.running(models, root) as running:
            cases: list[tuple[str, servers.Server, str, dict]] = [
                ("one-line embedding", running["embed"], "/v1/embeddings", {"input": "hello"}),
                (
                    "short chat (8 tokens)",
                    running["chat"],
                    "/v1/chat/completions",
                    {
                        "messages": [{"role": "user", "content": "Hello"}],
                        "max_tokens": 8,
                        "temperature": 0,
                        "ignore_eos": True,
                    },
                ),
            ]
            print(f"{'case':22} {'direct p50 / p95 ms':>20} {'/invocations':>16} "
                  f"{'p50 x':>6} {'p95 x':>6}  witness")  # fmt: skip
            for name, server, route, body in cases:
                started = time.monotonic()
                direct, routed = compare(server, route, body, args.rounds)
                row = cells(name, direct, routed, witness.between(started, time.monotonic()))
                rows.append(row)
                print(f"{row[0]:22} {row[1]:>20} {row[2]:>16} {row[3]:>6} {row[4]:>6}  {row[6]}")
    table = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    print("\n" + "\n".join(table))
    if args.markdown:
        args.markdown.write_text("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
