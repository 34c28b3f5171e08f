"""SageMaker's health check under full load: how long `GET /ping` takes while the engine is kept
busy, side by side with vLLM's own `GET /health` on the same server at the same moments.

SageMaker fails an instance whose /ping takes longer than 2 s (or answers anything but 200), and
replaces it after a few failures: a busy server must never look like a dead one. Like SageMaker's
health checker, every probe opens its own connection, from a thread of its own; the load is
`--clients` chat requests of 200 tokens kept in flight for the whole measurement.

    .venv/bin/python -m benchmarks.ping_under_load [--clients 48] [--probes 60]
"""

import argparse
import asyncio
import http.client
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.live_first_phases import Tail
from tests.support import model_factory, servers

LOAD_BODY = {"prompt": "The quick brown", "max_tokens": 200, "ignore_eos": True}
PATHS = ("/ping", "/health")


def probe(port: int, path: str) -> tuple[float, int]:
    """Seconds and status of one GET on a new connection."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    return time.perf_counter() - started, response.status


def probes(port: int, count: int) -> dict[str, list[tuple[float, int]]]:
    """`count` rounds of one probe per path, 0.1 s apart, in alternating order."""
    found: dict[str, list[tuple[float, int]]] = {path: [] for path in PATHS}
    for round_ in range(count):
        for path in PATHS if round_ % 2 else PATHS[::-1]:
            found[path].append(probe(port, path))
        time.sleep(0.1)
    return found


async def under_load(server: servers.Server, clients: int, count: int) -> dict:
    """Probe while `clients` requests stay in flight; starts once the first load answer is in."""
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        done = threading.Event()
        answered = asyncio.Event()

        async def keep_busy() -> None:
            while not done.is_set():
                (await client.post("/invocations", json=LOAD_BODY)).raise_for_status()
                answered.set()

        load = [asyncio.create_task(keep_busy()) for _ in range(clients)]
        await answered.wait()
        try:
            return await asyncio.to_thread(probes, server.port, count)
        finally:
            done.set()
            await asyncio.gather(*load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=48)
    parser.add_argument("--probes", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = model_factory.make_chat_model(root / "chat")
        with servers.running({"chat": model}, root) as running:
            server = running["chat"]
            idle = probes(server.port, 10)
            loaded = asyncio.run(under_load(server, args.clients, args.probes))
    print(f"GET probes on new connections; tiny Llama, 2 cores, {args.clients} clients busy")
    print(f"{'path':8} {'load':5} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7} non-200")
    for name, measured in (("idle", idle), ("busy", loaded)):
        for path in PATHS:
            seconds = [elapsed for elapsed, _ in measured[path]]
            tail = Tail.of(seconds)
            failures = sum(status != 200 for _, status in measured[path])
            print(
                f"{path:8} {name:5} {tail.p50 * 1000:7.0f} {tail.p95 * 1000:7.0f} "
                f"{tail.p99 * 1000:7.0f} {max(seconds) * 1000:7.0f} {failures:7d}"
            )


if __name__ == "__main__":
    main()
