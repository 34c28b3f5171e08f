"""`deploy dashboard`'s body: every widget draws metrics that exist (the container's, in
`core.cloudwatch`'s table, or SageMaker's own), of this endpoint only, with the
percentiles of the latencies, in the namespace and dimensions the container's environment
gives its EMF documents; a serverless variant's, what SageMaker publishes of one (cold starts,
memory, concurrency used), none of an instance's."""

import json
from typing import Any

import pytest

from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.deploy.kit.plans import dashboard


def _lines(body: dict[str, Any]) -> list[list[Any]]:
    return [line for widget in body["widgets"] for line in widget["properties"]["metrics"]]


@pytest.mark.parametrize(
    ("env", "namespace", "reported"),
    [
        ({}, cloudwatch.DEFAULT_NAMESPACE, cloudwatch.DEFAULT_ENDPOINT),
        (
            {cloudwatch.NAMESPACE_VARIABLE: "Team/LLM", cloudwatch.ENDPOINT_VARIABLE: "chat"},
            "Team/LLM",
            "chat",
        ),
    ],
)
def test_every_metric_exists_and_names_the_endpoint(
    env: dict[str, str], namespace: str, reported: str
) -> None:
    body = dashboard.dashboard_body("eu-west-1", "chat", "AllTraffic", env)
    assert json.loads(json.dumps(body)) == body
    known = {
        dashboard.PLATFORM: dashboard.PLATFORM_METRICS,
        dashboard.INSTANCES: dashboard.INSTANCE_METRICS,
        namespace: cloudwatch.UNITS,
    }
    for widget in body["widgets"]:
        properties = widget["properties"]
        assert widget["type"] == "metric" and properties["region"] == "eu-west-1"
        assert properties["metrics"], properties["title"]
    for line in _lines(body):
        space, name, *pairs, options = line
        assert name in known[space], line
        dimensions = dict(zip(pairs[::2], pairs[1::2], strict=True))
        endpoint = reported if space == namespace else "chat"
        assert dimensions == {"EndpointName": endpoint, "VariantName": "AllTraffic"}, line
        assert options["stat"] and options["label"]
    drawn = {(line[0], line[1], line[-1]["stat"]) for line in _lines(body)}
    for name in (cloudwatch.TIME_TO_FIRST_TOKEN, cloudwatch.END_TO_END_LATENCY):
        assert {(namespace, name, p) for p in ("p50", "p95", "p99")} <= drawn
    assert {(dashboard.PLATFORM, "ModelLatency", p) for p in ("p50", "p95", "p99")} <= drawn
    ours = {line[1] for line in _lines(body) if line[0] == namespace}
    assert {
        cloudwatch.REQUESTS_RUNNING,
        cloudwatch.REQUESTS_WAITING,
        cloudwatch.KV_CACHE_USAGE,
        cloudwatch.PROMPT_TOKENS_PER_SECOND,
        cloudwatch.GENERATION_TOKENS_PER_SECOND,
    } <= ours
    assert (dashboard.INSTANCES, "CPUUtilization", "SampleCount") in drawn  # instances


SERVERLESS = {"MemorySizeInMB": 2048, "MaxConcurrency": 5}
PROVISIONED = {**SERVERLESS, "ProvisionedConcurrency": 2}


# What SageMaker publishes of a serverless variant beside invocations and latency (its memory
# under INSTANCES): cold starts, the concurrency used and, with ProvisionedConcurrency, the warm
# copies'. No CPU, GPU nor ConcurrentRequestsPerModel ("Monitor a serverless endpoint").
SERVERLESS_METRICS = {
    **dict.fromkeys(("ModelSetupTime", "OverheadLatency"), "Microseconds"),
    "ServerlessConcurrentExecutionsUtilization": "None",
}
PROVISIONED_METRICS = {
    "ServerlessProvisionedConcurrencyUtilization": "None",
    "ServerlessProvisionedConcurrencyInvocations": "Count",
    "ServerlessProvisionedConcurrencySpilloverInvocations": "Count",
}


@pytest.mark.parametrize("config", [SERVERLESS, PROVISIONED])
def test_a_serverless_variant_draws_what_sagemaker_publishes_of_one(
    config: dict[str, int],
) -> None:
    """Cold starts, memory and the concurrency used (and the warm copies' with provisioned
    concurrency); nothing SageMaker does not publish for serverless variants: no instance count,
    CPU or GPU, no ConcurrentRequestsPerModel. The container's own metrics stay."""
    body = dashboard.dashboard_body("eu-west-1", "emb", "AllTraffic", {}, config)
    provisioned = "ProvisionedConcurrency" in config
    known = {
        dashboard.PLATFORM: {
            **dashboard.PLATFORM_METRICS,
            **SERVERLESS_METRICS,
            **(PROVISIONED_METRICS if provisioned else {}),
        },
        dashboard.INSTANCES: {"MemoryUtilization": "Percent"},
        cloudwatch.DEFAULT_NAMESPACE: cloudwatch.UNITS,
    }
    drawn = {(line[0], line[1]) for line in _lines(body)}
    assert drawn <= {(space, name) for space, names in known.items() for name in names}
    assert {(dashboard.PLATFORM, name) for name in SERVERLESS_METRICS} <= drawn
    assert (dashboard.INSTANCES, "MemoryUtilization") in drawn
    assert (dashboard.PLATFORM, "ConcurrentRequestsPerModel") not in drawn
    warm = {(dashboard.PLATFORM, name) for name in PROVISIONED_METRICS}
    assert (warm <= drawn) is provisioned and (warm & drawn == set()) is not provisioned
    ours = {line[1] for line in _lines(body) if line[0] == cloudwatch.DEFAULT_NAMESPACE}
    assert {cloudwatch.TIME_TO_FIRST_TOKEN, cloudwatch.KV_CACHE_USAGE} <= ours


@pytest.mark.parametrize("config", [None, SERVERLESS, PROVISIONED])
def test_widgets_do_not_overlap(config: dict[str, int] | None) -> None:
    body = dashboard.dashboard_body("us-east-1", "chat", "AllTraffic", {}, config)
    cells = [(w["x"], w["y"]) for w in body["widgets"]]
    assert len(set(cells)) == len(cells)
    assert all(w["x"] + w["width"] <= 24 for w in body["widgets"])


@pytest.mark.parametrize(
    ("env", "warned"),
    [({}, True), ({"SAGEMAKER_METRICS": " "}, True), ({"SAGEMAKER_METRICS": "cloudwatch"}, False)],
)
def test_a_container_without_metrics_is_warned_of(env: dict[str, str], warned: bool) -> None:
    assert (dashboard.metrics_warning("llm", env) is not None) == warned
