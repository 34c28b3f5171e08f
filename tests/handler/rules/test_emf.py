"""The CloudWatch metrics' rules as tables: from two snapshots of Prometheus samples to one EMF
document, each checked against the EMF specification (`tests.support.emf_spec`), and the
SAGEMAKER_METRICS* settings `serve` and `deploy --env` refuse."""

import json
import math
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.support import emf_spec
from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.core.environment import environment_problems
from vllm_sagemaker.core.metrics_settings import MetricsSettings
from vllm_sagemaker.handler.batches.admission import metrics as admission_metrics
from vllm_sagemaker.handler.metrics import emf
from vllm_sagemaker.handler.process import lifecycle

TTFT = "vllm:time_to_first_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
INF = math.inf
DIMENSIONS = {"EndpointName": "my-endpoint", "VariantName": "AllTraffic"}
# Two API-server processes' samples, as the multiprocess collector gives them (one series each
# for counters; vLLM's gauges one per engine).
IDLE = emf.Snapshot(
    1_700_000_000.0,
    {
        "vllm:num_requests_running": [0.0],
        "vllm:num_requests_waiting": [0.0],
        "vllm:kv_cache_usage_perc": [0.0],
        "vllm:prompt_tokens_total": [100.0, 50.0],
        "vllm:generation_tokens_total": [1000.0, 0.0],
        "vllm_sagemaker:batch_lines_done_total": [7.0, 3.0],
        "vllm_sagemaker:batch_runs": [0.0, 0.0],
        "vllm_sagemaker:batch_throttled_total": [0.0, 0.0],
        "vllm_sagemaker:batch_preemptions_total": [2.0, 0.0],
        "vllm_sagemaker:server_restarts": [1.0, 1.0],
    },
    {
        TTFT: {0.01: 4.0, 0.1: 6.0, 1.0: 6.0, INF: 6.0},
        E2E: {0.5: 1.0, 5.0: 6.0, INF: 6.0},
    },
)
BUSY = emf.Snapshot(
    1_700_000_010.0,
    {
        "vllm:num_requests_running": [3.0],
        "vllm:num_requests_waiting": [2.0],
        "vllm:kv_cache_usage_perc": [0.25],
        "vllm:prompt_tokens_total": [150.0, 150.0],
        "vllm:generation_tokens_total": [1400.0, 600.0],
        "vllm_sagemaker:batch_lines_done_total": [17.0, 8.0],
        "vllm_sagemaker:batch_runs": [1.0, 1.0],
        "vllm_sagemaker:batch_throttled_total": [0.0, 4.0],
        "vllm_sagemaker:batch_preemptions_total": [2.0, 1.0],
        "vllm_sagemaker:server_restarts": [1.0, 1.0],
    },
    {
        TTFT: {0.01: 5.0, 0.1: 8.0, 1.0: 9.0, INF: 10.0},
        E2E: {0.5: 1.0, 5.0: 6.0, INF: 6.0},
    },
)


def metrics_of(document: dict[str, Any]) -> dict[str, Any]:
    names = [m["Name"] for m in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    return {name: document[name] for name in names}


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        pytest.param(
            IDLE,
            BUSY,
            {
                "RequestsRunning": 3.0,
                "RequestsWaiting": 2.0,
                "KVCacheUsage": 25.0,
                # One more first token in each bucket: up to 10 ms, 100 ms and 1 s, and one
                # above 1 s, counted at the largest finite bound.
                "TimeToFirstToken": {
                    "Values": [10.0, 100.0, 1000.0],
                    "Counts": [1, 1, 2],
                    "Max": 1000.0,
                    "Min": 10.0,
                    "Count": 4,
                    "Sum": 2110.0,
                },
                "PromptTokensPerSecond": 15.0,
                "GenerationTokensPerSecond": 100.0,
                "BatchLinesDone": 15.0,
                "BatchesInProgress": 2.0,
                "BatchRequestsThrottled": 4.0,
                "BatchLinesPreempted": 1.0,
                "EngineRestarts": 1.0,
            },
            id="load: gauges as they stand, counters over the interval, sums over processes",
        ),
        pytest.param(
            BUSY,
            emf.Snapshot(BUSY.at_s + 5, BUSY.series, BUSY.buckets),
            {
                "RequestsRunning": 3.0,
                "RequestsWaiting": 2.0,
                "KVCacheUsage": 25.0,
                "PromptTokensPerSecond": 0.0,
                "GenerationTokensPerSecond": 0.0,
                "BatchLinesDone": 0.0,
                "BatchesInProgress": 2.0,
                "BatchRequestsThrottled": 0.0,
                "BatchLinesPreempted": 0.0,
                "EngineRestarts": 1.0,
            },
            id="nothing finished: no latencies, counters at zero",
        ),
        pytest.param(
            BUSY,
            emf.Snapshot(
                BUSY.at_s + 2,
                {"vllm:generation_tokens_total": [40.0], "vllm:kv_cache_usage_perc": [0.5, 0.75]},
                {TTFT: {0.1: 3.0, INF: 3.0}},
            ),
            {
                "RequestsRunning": 0.0,
                "RequestsWaiting": 0.0,
                "KVCacheUsage": 75.0,
                "TimeToFirstToken": {
                    "Values": [100.0],
                    "Counts": [3],
                    "Max": 100.0,
                    "Min": 100.0,
                    "Count": 3,
                    "Sum": 300.0,
                },
                "GenerationTokensPerSecond": 20.0,
            },
            id="counters that went down started again; the fullest engine's cache; no batches; "
            "engine gauges without a sample are idle",
        ),
        pytest.param(
            emf.Snapshot(BUSY.at_s),
            emf.Snapshot(BUSY.at_s, {"vllm:prompt_tokens_total": [9.0]}),
            {
                "RequestsRunning": 0.0,
                "RequestsWaiting": 0.0,
                "KVCacheUsage": 0.0,
                "PromptTokensPerSecond": 0.0,
            },
            id="no time passed: no rate; before the engine's first report, its gauges are idle",
        ),
        pytest.param(
            emf.Snapshot(IDLE.at_s),
            emf.Snapshot(BUSY.at_s),
            {"RequestsRunning": 0.0, "RequestsWaiting": 0.0, "KVCacheUsage": 0.0},
            id="an empty registry: only the engine's gauges, idle",
        ),
    ],
)
def test_a_document_from_two_snapshots(
    previous: emf.Snapshot, current: emf.Snapshot, expected: dict[str, Any]
) -> None:
    document = emf.document(previous, current, "vLLM/SageMaker", DIMENSIONS)
    assert emf_spec.problems(json.loads(json.dumps(document))) == []
    assert metrics_of(document) == expected
    assert document["_aws"]["Timestamp"] == int(current.at_s * 1000)
    assert document["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "vLLM/SageMaker"
    assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["EndpointName", "VariantName"]
    ]
    assert {k: document[k] for k in DIMENSIONS} == DIMENSIONS


def test_every_metric_has_a_cloudwatch_unit_and_a_rule() -> None:
    assert {m.name for m in emf.METRICS} == set(cloudwatch.UNITS)
    assert set(cloudwatch.UNITS.values()) <= emf_spec.UNITS


def test_the_handlers_samples_are_the_ones_it_registers() -> None:
    """A renamed Prometheus metric of ours would drop its CloudWatch metric without a word."""
    assert admission_metrics.LINES_DONE and lifecycle.RESTARTS
    registered = {sample.name for family in REGISTRY.collect() for sample in family.samples}
    ours = {m.sample for m in emf.METRICS if m.sample.startswith("vllm_sagemaker:")}
    assert ours <= registered


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        ({}, {0.5: 0.0, INF: 0.0}, None),
        ({0.5: 2.0, INF: 3.0}, {0.5: 2.0, INF: 3.0}, None),
        ({}, {0.5: 2.0, INF: 3.0}, ([500.0], [3])),
        ({}, {0.005: 1.0, 0.5: 1.0, 2.5: 4.0, INF: 4.0}, ([5.0, 2500.0], [1, 3])),
        ({0.5: 5.0, INF: 9.0}, {0.5: 1.0, INF: 1.0}, ([500.0], [1])),
        ({}, {INF: 3.0}, None),
    ],
    ids=["empty", "nothing added", "+Inf at the last bound", "only buckets that grew", "reset",
         "no finite bound"],
)  # fmt: skip
def test_values_and_counts_from_buckets(
    previous: dict[float, float],
    current: dict[float, float],
    expected: tuple[list[float], list[int]] | None,
) -> None:
    found = emf.values_counts(previous, current)
    assert (found and (found["Values"], found["Counts"])) == expected


def test_at_most_100_values_however_many_buckets() -> None:
    bounds = [i / 1000 for i in range(1, 251)]
    current = {bound: float(i + 1) for i, bound in enumerate(bounds)} | {INF: 250.0}
    found = emf.values_counts({}, current)
    assert found is not None
    assert len(found["Values"]) <= 100 and found["Count"] == 250
    assert found["Max"] == 250.0
    assert emf_spec.value_problems("x", found) == []


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({}, "no _aws metadata object"),
        (
            {"_aws": {"Timestamp": 1_700_000_000, "CloudWatchMetrics": []}},
            "Timestamp is not epoch milliseconds: 1700000000",
        ),
        (
            {"_aws": {"Timestamp": 1.7e12, "CloudWatchMetrics": []}},
            "Timestamp is not a whole number of epoch milliseconds: 1700000000000.0",
        ),
        (
            {
                "_aws": {
                    "Timestamp": 1_700_000_000_000,
                    "CloudWatchMetrics": [
                        {"Namespace": "n", "Dimensions": [["E"]], "Metrics": [{"Name": "M"}]}
                    ],
                },
                "E": "e",
            },
            "metric 'M' has no member in the document",
        ),
        (
            {
                "_aws": {
                    "Timestamp": 1_700_000_000_000,
                    "CloudWatchMetrics": [
                        {"Namespace": "n", "Dimensions": [["E"]], "Metrics": [{"Name": "M"}]}
                    ],
                },
                "M": 1,
            },
            "dimension 'E' has no string member in the document",
        ),
        (
            {
                "_aws": {
                    "Timestamp": 1_700_000_000_000,
                    "CloudWatchMetrics": [
                        {"Namespace": "n", "Metrics": [{"Name": "M", "Unit": "Tokens"}]}
                    ],
                },
                "M": "7",
            },
            "M: 'Tokens' is not a CloudWatch unit",
        ),
        (
            {
                "_aws": {
                    "Timestamp": 1_700_000_000_000,
                    "CloudWatchMetrics": [
                        {"Namespace": "n", "Metrics": [{"Name": f"M{i}"} for i in range(101)]}
                    ],
                },
                **{f"M{i}": i for i in range(101)},
            },
            "Metrics is not an array of <= 100",
        ),
    ],
    ids=["no _aws", "seconds", "float", "metric missing", "dimension missing", "unit", "101"],
)
def test_the_spec_check_catches_what_cloudwatch_drops(document: dict, problem: str) -> None:
    """The check itself: each broken document is caught."""
    assert problem in emf_spec.problems(document)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, MetricsSettings(False, 60, "vLLM/SageMaker", "local", "AllTraffic")),
        (
            {
                "SAGEMAKER_METRICS": "CloudWatch",
                "SAGEMAKER_METRICS_INTERVAL_SECONDS": "5",
                "SAGEMAKER_METRICS_NAMESPACE": "Team/LLM serving",
                "SAGEMAKER_METRICS_ENDPOINT_NAME": "my-endpoint",
                "SAGEMAKER_METRICS_VARIANT_NAME": "blue",
            },
            MetricsSettings(True, 5, "Team/LLM serving", "my-endpoint", "blue"),
        ),
        ({"SAGEMAKER_METRICS": " ", "SAGEMAKER_METRICS_ENDPOINT_NAME": ""}, None),
    ],
)
def test_metrics_settings(env: dict[str, str], expected: MetricsSettings | None) -> None:
    settings = MetricsSettings.from_env(env)
    assert settings == (expected or MetricsSettings.from_env({}))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SAGEMAKER_METRICS": "prometheus"},
            "SAGEMAKER_METRICS must be 'cloudwatch' or unset, got 'prometheus'",
        ),
        (
            {"SAGEMAKER_METRICS_INTERVAL_SECONDS": "0"},
            "SAGEMAKER_METRICS_INTERVAL_SECONDS must be a whole number > 0, got '0'",
        ),
        (
            {"SAGEMAKER_METRICS_INTERVAL_SECONDS": "1.5"},
            "SAGEMAKER_METRICS_INTERVAL_SECONDS must be a whole number > 0, got '1.5'",
        ),
        (
            {"SAGEMAKER_METRICS_NAMESPACE": "AWS/SageMaker"},
            "SAGEMAKER_METRICS_NAMESPACE must be a CloudWatch namespace (1-255 letters, digits "
            "and . - _ / # : or spaces, not starting with AWS/), got 'AWS/SageMaker'",
        ),
        ({"SAGEMAKER_METRICS_NAMESPACE": "a" * 256}, "SAGEMAKER_METRICS_NAMESPACE must be"),
        ({"SAGEMAKER_METRICS_NAMESPACE": "vLLM|prod"}, "SAGEMAKER_METRICS_NAMESPACE must be"),
        (
            {"SAGEMAKER_METRICS_VARIANT_NAME": "é"},
            "SAGEMAKER_METRICS_VARIANT_NAME must be 1-1024 ASCII characters (a CloudWatch "
            "dimension value), got 'é'",
        ),
    ],
)
def test_a_bad_metrics_setting_is_one_line_for_serve_and_deploy(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        MetricsSettings.from_env(env)
    assert str(refused.value).startswith(message)
    assert environment_problems(env, None) == [str(refused.value)]
