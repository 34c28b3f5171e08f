"""What /invocations adds over calling vLLM's route directly, on the same server.

For each body, /invocations and the direct route are called alternately (so drift and noise hit
both alike), N times each over one keep-alive connection, and the medians are compared:
- a one-line embedding (the cheapest request, where overhead shows most), on all-MiniLM-L6-v2;
- a short chat (8 tokens), on the tiny Llama.

    .venv/bin/python -m benchmarks.invocations_overhead [-n 400]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.support import model_factory, servers


def timed(client: httpx.Client, path: str, body: dict) -> float:
    started = time.perf_counter()
    response = client.post(path, json=body)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


def compare(server: servers.Server, route: str, body: dict, rounds: int) -> tuple[float, float]:
    """Median seconds of (direct, /invocations) over `rounds` alternating pairs."""
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
    return statistics.median(direct), statistics.median(routed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--rounds", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = {
            "embed": model_factory.embedder_path(),
            "chat": model_factory.make_chat_model(root / "chat"),
        }
        with servers.running(models, root) as running:
            cases = [
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
            print(f"{'case':24} {'direct ms':>10} {'/invocations ms':>16} {'ratio':>7}")
            for name, server, route, body in cases:
                direct, routed = compare(server, route, body, args.rounds)
                print(
                    f"{name:24} {direct * 1000:10.3f} {routed * 1000:16.3f} {routed / direct:7.3f}"
                )


if __name__ == "__main__":
    main()
