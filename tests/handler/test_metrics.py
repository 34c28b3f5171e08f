"""The CloudWatch metrics: EMF documents on the server's stdout with SAGEMAKER_METRICS=cloudwatch.

The platform server writes them every 5 s from its two API-server processes (tests/conftest.py);
its documents are checked against the EMF specification (`tests.support.emf_spec`) and must
move under load. The single writer and the sums across processes are checked without an engine
too, on Prometheus's own multiprocess files.
"""

import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, multiprocess

from tests.conftest import PLATFORM_ENV
from tests.support import emf_spec, processes, servers, waiting
from tests.support.servers import Server
from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.handler.metrics import samples, writer

INTERVAL_MS = int(PLATFORM_ENV[cloudwatch.INTERVAL_VARIABLE]) * 1000
LOAD = {
    "messages": [{"role": "user", "content": "Count to a hundred."}],
    "max_tokens": 48,
    "ignore_eos": True,
}
# One API-server process's metrics, as vLLM and the handler register them.
ONE_PROCESS = """
import sys
from prometheus_client import Counter, Gauge, Histogram
tokens = Counter("vllm:generation_tokens", "", ["engine"])
tokens.labels("0").inc(int(sys.argv[1]))
waiting = Gauge("vllm:num_requests_waiting", "", ["engine"], multiprocess_mode="mostrecent")
waiting.labels("0").set(int(sys.argv[2]))
from vllm_sagemaker.handler.process.lifecycle import RESTARTS
RESTARTS.set(2)
ttft = Histogram("vllm:time_to_first_token_seconds", "", ["engine"], buckets=[0.1, 1.0])
for _ in range(int(sys.argv[1])):
    ttft.labels("0").observe(0.05)
"""


def documents(server: Server) -> list[dict[str, Any]]:
    return emf_spec.documents(server.log_path.read_text(errors="replace"))


@contextmanager
def load(server: Server, clients: int = 4) -> Iterator[None]:
    """Chat requests from `clients` threads, one after another, until the block ends."""
    stop = threading.Event()

    def chat() -> None:
        with httpx.Client(base_url=server.url, timeout=300) as client:
            while not stop.is_set():
                answer = client.post("/invocations", json=LOAD)
                assert answer.status_code == 200, answer.text

    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(chat) for _ in range(clients)]
        try:
            yield
        finally:
            stop.set()
            for future in futures:
                future.result()


def first_after(server: Server, seen: int, check: Callable[[dict[str, Any]], bool]) -> dict:
    """The first document written after the first `seen` that passes `check`."""
    return waiting.until(
        lambda: next((d for d in documents(server)[seen:] if check(d)), None),
        600,
        lambda: f"no such EMF document among {documents(server)[seen:]}",
        1,
    )


def test_emf_documents_from_a_real_engine_move_with_the_load(platform_server: Server) -> None:
    waiting.until(lambda: documents(platform_server), 600, "no EMF document in the log", 1)
    seen = len(documents(platform_server))
    with load(platform_server):
        busy = first_after(
            platform_server,
            seen,
            lambda d: (
                d.get(cloudwatch.GENERATION_TOKENS_PER_SECOND, 0) > 0
                and d.get(cloudwatch.PROMPT_TOKENS_PER_SECOND, 0) > 0
                and cloudwatch.TIME_TO_FIRST_TOKEN in d
                and cloudwatch.END_TO_END_LATENCY in d
            ),
        )
        first_after(platform_server, seen, lambda d: d.get(cloudwatch.KV_CACHE_USAGE, 0) > 0)
        first_after(platform_server, seen, lambda d: d.get(cloudwatch.REQUESTS_RUNNING, 0) > 0)
    assert busy[cloudwatch.TIME_TO_FIRST_TOKEN]["Count"] > 0
    written = documents(platform_server)
    for document in written:
        assert emf_spec.problems(document) == []
        assert document["EndpointName"] == PLATFORM_ENV[cloudwatch.ENDPOINT_VARIABLE]
        assert document["VariantName"] == cloudwatch.DEFAULT_VARIANT
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == PLATFORM_ENV[cloudwatch.NAMESPACE_VARIABLE]
        for name in (
            cloudwatch.REQUESTS_RUNNING,
            cloudwatch.REQUESTS_WAITING,
            cloudwatch.KV_CACHE_USAGE,
            cloudwatch.ENGINE_RESTARTS,
        ):
            assert name in document
    # One writer for both API-server processes: an interval at least between two documents
    # (two writers would interleave theirs).
    stamps = [document["_aws"]["Timestamp"] for document in written]
    assert all(b - a >= INTERVAL_MS - 100 for a, b in itertools.pairwise(stamps))


def test_one_process_writes_until_it_lets_go(tmp_path: Path) -> None:
    first, second = writer.WriterLock(str(tmp_path)), writer.WriterLock(str(tmp_path))
    assert first.held()
    assert not second.held()
    assert first.held(), "it keeps it"
    first.release()
    assert second.held()
    assert writer.WriterLock(None).held(), "one API-server process always writes"


def test_a_snapshot_adds_up_every_api_server_process(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for tokens, waiting_now in ((3, 1), (4, 0)):
        done = processes.run(
            [sys.executable, "-c", ONE_PROCESS, str(tokens), str(waiting_now)], env=env
        )
        assert done.returncode == 0, done.stderr
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    snapshot = samples.snapshot(registry)
    assert sum(snapshot.series["vllm:generation_tokens_total"]) == 7
    assert snapshot.series["vllm_sagemaker:server_restarts"] == [2.0], "one, not one a process"
    assert len(snapshot.series["vllm:num_requests_waiting"]) == 1, "the most recent value"
    assert snapshot.buckets["vllm:time_to_first_token_seconds"] == {0.1: 7, 1.0: 7, float("inf"): 7}


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {cloudwatch.METRICS_VARIABLE: "on"},
            "serve: SAGEMAKER_METRICS must be 'cloudwatch' or unset, got 'on'",
        ),
        (
            {cloudwatch.METRICS_VARIABLE: "cloudwatch", cloudwatch.INTERVAL_VARIABLE: "1m"},
            "serve: SAGEMAKER_METRICS_INTERVAL_SECONDS must be a whole number > 0, got '1m'",
        ),
    ],
)
def test_a_bad_metrics_setting_stops_serve_with_one_line(env: dict[str, str], line: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SM_VLLM_", "SAGEMAKER_"))}
    result = processes.run(
        [servers.SERVE, "serve"], env={**clean, "SM_VLLM_MODEL": "/m", **env}, text=True
    )
    assert (result.returncode, result.stderr.splitlines()) == (2, [line])
