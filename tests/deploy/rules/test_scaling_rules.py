"""`deploy endpoint --autoscale`'s rules: the options refused before AWS, the container's metric
settings, the two calls per metric, which standing targets and policies are an endpoint's (never
another's, `chat-prod` beside `chat`), and what a failed run takes back of them."""

from typing import Any

import pytest

from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.deploy.base.calls import Call, Undo
from vllm_sagemaker.deploy.kit.plans import scaling
from vllm_sagemaker.deploy.kit.plans.rollback import undo, undo_beside

AAS = "application-autoscaling"
TARGET = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": "endpoint/chat/variant/AllTraffic",
    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
}


ASYNC = "s3://bucket/async/"
ZERO_REAL_TIME = (
    "--autoscale 0:4: a real-time endpoint keeps at least 1 instance (give MIN 1 or more); an "
    "async endpoint (--async-output) scales to 0, and so do inference components (`deploy "
    "component --scale-to-zero`)"
)


@pytest.mark.parametrize(
    ("value", "async_output", "problem"),
    [
        ("1:4", None, None),
        ("2:2", None, None),
        (" 1:4 ", None, None),
        ("0:4", None, ZERO_REAL_TIME),
        ("0:4", ASYNC, None),
        ("0:0", ASYNC, "--autoscale 0:0: MAX must be 1 or more"),
        ("4:1", None, "--autoscale 4:1: MIN 4 is more than MAX 1"),
        ("4", None, "--autoscale '4': give MIN:MAX, the fewest and most instances, as 1:4"),
        ("1-4", None, "--autoscale '1-4': give MIN:MAX, the fewest and most instances, as 1:4"),
        ("-1:4", ASYNC, "--autoscale '-1:4': give MIN:MAX, the fewest and most instances, as 1:4"),
    ],
)
def test_autoscale_problem(value: str, async_output: str | None, problem: str | None) -> None:
    assert scaling.autoscale_problem(value, async_output) == problem


@pytest.mark.parametrize(
    ("autoscale", "scale_on", "target", "no_wait", "problem"),
    [
        (None, None, None, False, None),
        (None, None, None, True, None),
        ("1:4", "waiting", 3.0, False, None),
        (None, "waiting", None, False, "--scale-on and --target set --autoscale's policy"),
        (None, None, 3.0, False, "--scale-on and --target set --autoscale's policy"),
        ("1:4", None, None, True, "--autoscale: the variant is registered once the endpoint"),
    ],
)
def test_scaling_problem(
    autoscale: str | None, scale_on: str | None, target: float | None, no_wait: bool, problem: str
) -> None:
    found = scaling.scaling_problem(autoscale, scale_on, target, no_wait)
    assert (found is None) if problem is None else (found or "").startswith(problem)


@pytest.mark.parametrize(
    ("scale_on", "env", "refused"),
    [
        ("waiting", {}, False),
        ("waiting", {"SAGEMAKER_METRICS": "cloudwatch"}, False),
        ("waiting", {"SAGEMAKER_METRICS": ""}, True),
        ("waiting", {"SAGEMAKER_METRICS": " "}, True),
        ("concurrency", {"SAGEMAKER_METRICS": ""}, False),
        (None, {"SAGEMAKER_METRICS": ""}, False),
    ],
)
def test_waiting_needs_the_emf_documents(
    scale_on: str | None, env: dict[str, str], refused: bool
) -> None:
    assert (scaling.waiting_env_problem(scale_on, env) is not None) == refused


@pytest.mark.parametrize(
    ("env", "asked", "expected"),
    [
        (
            {},
            None,
            {cloudwatch.ENDPOINT_VARIABLE: "chat", cloudwatch.VARIANT_VARIABLE: "AllTraffic"},
        ),
        (
            {},
            scaling.Scaling(1, 4, "waiting"),
            {
                cloudwatch.ENDPOINT_VARIABLE: "chat",
                cloudwatch.VARIANT_VARIABLE: "AllTraffic",
                cloudwatch.METRICS_VARIABLE: "cloudwatch",
            },
        ),
        (
            {cloudwatch.ENDPOINT_VARIABLE: "prod"},
            scaling.Scaling(1, 4, "concurrency"),
            {cloudwatch.ENDPOINT_VARIABLE: "prod", cloudwatch.VARIANT_VARIABLE: "AllTraffic"},
        ),
    ],
)
def test_metrics_env(
    env: dict[str, str], asked: scaling.Scaling | None, expected: dict[str, str]
) -> None:
    assert scaling.metrics_env(env, "chat", asked) == expected


def test_concurrency_calls() -> None:
    register, policy = scaling.scaling_calls("chat", scaling.Scaling(1, 4), {})
    assert register == Call(
        AAS, "RegisterScalableTarget", {**TARGET, "MinCapacity": 1, "MaxCapacity": 4}
    )
    assert policy.operation == "PutScalingPolicy"
    assert policy.params["PolicyType"] == "TargetTrackingScaling"
    assert policy.params["TargetTrackingScalingPolicyConfiguration"] == {
        "TargetValue": scaling.DEFAULT_TARGETS["concurrency"],
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
        },
    }


def test_waiting_calls_name_the_containers_metric() -> None:
    env = scaling.metrics_env(
        {cloudwatch.NAMESPACE_VARIABLE: "Mine"}, "chat", scaling.Scaling(2, 6, "waiting", 3.5)
    )
    _, policy = scaling.scaling_calls("chat", scaling.Scaling(2, 6, "waiting", 3.5), env)
    assert policy.params["TargetTrackingScalingPolicyConfiguration"] == {
        "TargetValue": 3.5,
        "CustomizedMetricSpecification": {
            "MetricName": cloudwatch.REQUESTS_WAITING,
            "Namespace": "Mine",
            "Dimensions": [
                {"Name": "EndpointName", "Value": "chat"},
                {"Name": "VariantName", "Value": "AllTraffic"},
            ],
            "Statistic": "Average",
            "Unit": "Count",
        },
    }


def _standing(resource: str, **extra: Any) -> dict[str, Any]:
    return {**TARGET, "ResourceId": resource, **extra}


def test_deletions_are_the_endpoints_only() -> None:
    mine = _standing("endpoint/chat/variant/AllTraffic")
    other_variant = _standing("endpoint/chat/variant/Blue")
    theirs = _standing("endpoint/chat-prod/variant/AllTraffic")
    policies = [
        {**mine, "PolicyName": "p"},
        {**theirs, "PolicyName": "p"},
        {**other_variant, "PolicyName": "users"},
    ]
    calls = scaling.scaling_deletions(
        scaling.owned_by("chat"), [mine, theirs, other_variant], policies
    )
    assert [(c.operation, c.params["ResourceId"], c.params.get("PolicyName")) for c in calls] == [
        ("DeleteScalingPolicy", "endpoint/chat/variant/AllTraffic", "p"),
        ("DeleteScalingPolicy", "endpoint/chat/variant/Blue", "users"),
        ("DeregisterScalableTarget", "endpoint/chat/variant/AllTraffic", None),
        ("DeregisterScalableTarget", "endpoint/chat/variant/Blue", None),
    ]
    assert (
        scaling.scaling_deletions(
            scaling.owned_by("chat-prod"), [mine], [{**mine, "PolicyName": "p"}]
        )
        == []
    )


def test_a_failed_run_takes_back_what_it_created_and_leaves_what_it_replaced() -> None:
    register, policy = scaling.scaling_calls("chat", scaling.Scaling(1, 4), {})
    assert undo(register) == Undo(
        "scalable target endpoint/chat/variant/AllTraffic",
        Call(AAS, "DeregisterScalableTarget", TARGET),
    )
    assert undo(policy) == Undo(
        f"scaling policy {scaling.POLICY} of endpoint/chat/variant/AllTraffic",
        Call(AAS, "DeleteScalingPolicy", {"PolicyName": scaling.POLICY, **TARGET}),
    )
    # An update whose target stood already, but not the kit's policy.
    held = scaling.replaced([register, policy], [TARGET], [{**TARGET, "PolicyName": "users"}])
    assert held == [register]
    rule = undo_beside(held)
    assert rule(register) == Undo("scalable target endpoint/chat/variant/AllTraffic")
    assert rule(policy) == undo(policy)
