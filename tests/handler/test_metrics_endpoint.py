"""`/metrics` as SageMaker's detailed observability scrapes it: the server's port, no key while an
API key guards inference, vLLM's series and ours in one exposition; with several API-server
processes each of ours once, combined as Prometheus's multiprocess mode defines (counters add
up, a gauge as its `multiprocess_mode` says).

The cross-encoder's server holds an API key (one API-server process), the platform server runs
two (tests/conftest.py); several processes' files are also read without an engine.
"""

import os
import re
import sys
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from tests.conftest import AUTH, PLATFORM_ENV
from tests.support import processes, waiting
from tests.support.servers import Server
from vllm_sagemaker.core.config import BatchApiSettings

WINDOW = "vllm_sagemaker:batch_window"
RECORDS = "vllm_sagemaker:invocation_records_total"
# Ours (the admission controller's, the restarts, the records answered) and vLLM's own, which
# AWS's dashboards read.
OURS = (
    WINDOW,
    "vllm_sagemaker:batch_running",
    "vllm_sagemaker:live_latency_seconds",
    "vllm_sagemaker:live_latency_p95_seconds",
    "vllm_sagemaker:live_latency_target_seconds",
    "vllm_sagemaker:batch_runs",
    "vllm_sagemaker:server_restarts",
    RECORDS,
)
VLLMS = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")
# One API-server process of the handler: its window, live p95 and records as given.
ONE_PROCESS = """
import sys
from vllm_sagemaker.handler.batches.admission import metrics
from vllm_sagemaker.handler.metrics import gauges
from vllm_sagemaker.handler.process.lifecycle import RESTARTS
from vllm_sagemaker.handler.sagemaker import progress

window, tail = int(sys.argv[1]), float(sys.argv[2])
gauges.follow(metrics.WINDOW, lambda: window)
gauges.follow(metrics.LIVE_TAIL, lambda: tail)
gauges.refresh()
RESTARTS.set(1)
progress.RECORDS.labels(progress.OK).inc(window)
"""


def series(text: str, name: str) -> dict[str, float]:
    """The samples of `name` in an exposition: {labels as written: value}."""
    pattern = rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$"
    return {labels: float(value) for labels, value in re.findall(pattern, text, re.MULTILINE)}


def types(text: str) -> list[str]:
    """Every family's name, once per `# TYPE` line."""
    return re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE)


def scrape(server: Server) -> str:
    """/metrics as SageMaker's scraper asks for it: GET, no credentials."""
    answer = httpx.get(server.url + "/metrics", timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.text


def test_processes_files_give_each_of_ours_once(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for window, tail in ((8, 0.5), (4, 2.0)):
        done = processes.run(
            [sys.executable, "-c", ONE_PROCESS, str(window), str(tail)], env=env, text=True
        )
        assert done.returncode == 0, done.stderr
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    text = generate_latest(registry).decode()
    assert series(text, WINDOW) == {"": 12.0}, "the slots of both processes"
    assert series(text, "vllm_sagemaker:live_latency_p95_seconds") == {"": 2.0}, "the slowest"
    assert series(text, "vllm_sagemaker:server_restarts") == {"": 1.0}
    assert series(text, RECORDS) == {'{outcome="ok"}': 12.0, '{outcome="error"}': 0.0}
    ours = [name for name in types(text) if name.startswith("vllm_sagemaker:")]
    assert len(ours) == len(set(ours))


def test_metrics_open_without_the_key_and_nothing_else(score_server: Server) -> None:
    text = scrape(score_server)
    for name in (*OURS, *VLLMS):
        assert series(text, name), f"{name} not on /metrics"
    assert httpx.head(score_server.url + "/metrics", timeout=60).status_code == 200
    for method, path in (
        ("POST", "/metrics"),
        ("DELETE", "/metrics"),
        ("GET", "/metrics/"),
        ("POST", "/invocations"),
        ("POST", "/tokenize"),
        ("GET", "/v1/models"),
        ("GET", "/v1/files"),
    ):
        refused = httpx.request(method, score_server.url + path, json={}, timeout=60)
        assert refused.status_code == 401, (method, path, refused.text)
    assert httpx.get(score_server.url + "/v1/models", headers=AUTH).status_code == 200


def test_records_answered_count_by_outcome(score_server: Server) -> None:
    def counted() -> dict[str, float]:
        return series(scrape(score_server), RECORDS)

    before = counted()
    records = b'{"query": "cat", "documents": ["a cat sits"]}\n{not json\n'
    answer = httpx.post(
        score_server.url + "/invocations",
        content=records,
        headers={**AUTH, "Content-Type": "application/jsonlines"},
        timeout=300,
    )
    assert answer.status_code == 200, answer.text
    after = counted()
    assert after['{outcome="ok"}'] - before['{outcome="ok"}'] == 1
    assert after['{outcome="error"}'] - before['{outcome="error"}'] == 1


def test_two_api_servers_show_each_of_ours_once(platform_server: Server) -> None:
    """Whichever process answers an invocation or a scrape, the records add up, and the window
    is both processes' (each whole after a quiet spell), written by each process for /metrics."""
    invocations = 4
    before = series(scrape(platform_server), RECORDS)['{outcome="ok"}']
    for _ in range(invocations):
        answer = httpx.post(
            platform_server.url + "/invocations",
            json={"prompt": "Hello", "max_tokens": 2},
            timeout=300,
        )
        assert answer.status_code == 200, answer.text
    text = scrape(platform_server)
    assert series(text, RECORDS)['{outcome="ok"}'] - before == invocations
    for name in (*OURS, *VLLMS):
        assert series(text, name), f"{name} not on /metrics"
    ours = [name for name in types(text) if name.startswith("vllm_sagemaker:")]
    assert len(ours) == len(set(ours)), ours
    for name in OURS:
        if name != RECORDS:
            assert list(series(text, name)) == [""], f"{name}: one series, no pid label"
    both = 2 * BatchApiSettings.from_env(PLATFORM_ENV).max_inflight
    waiting.until(
        lambda: series(scrape(platform_server), WINDOW) == {"": both},
        600,
        lambda: f"batch window {series(scrape(platform_server), WINDOW)}, not {both}",
        1,
    )
