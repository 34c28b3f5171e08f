"""`deploy endpoint --autoscale` against moto: the run leaves a scalable target MIN-MAX and one
target-tracking policy on the endpoint's variant, its dry run none; an update's dry run plans to
replace them; `deploy delete` deregisters the endpoint's own and leaves another endpoint's."""

import json

import boto3
import pytest

from tests.deploy.deploying import model_options
from tests.deploy.recording import dry_then_real, identity, recorded, run, state, writes
from vllm_sagemaker.deploy.kit.plans import scaling

AAS = "application-autoscaling"


def _targets() -> dict[str, tuple[int, int]]:
    answer = boto3.client(AAS).describe_scalable_targets(ServiceNamespace="sagemaker")
    return {
        t["ResourceId"]: (t["MinCapacity"], t["MaxCapacity"]) for t in answer["ScalableTargets"]
    }


def _policies(endpoint: str) -> list[dict[str, object]]:
    resource = scaling.resource_id(endpoint)
    answer = boto3.client(AAS).describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=resource
    )
    return [p for p in answer["ScalingPolicies"] if p["ResourceId"] == resource]


def test_autoscale_then_delete(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    created = dry_then_real(
        capsys,
        "deploy",
        "endpoint",
        *model_options("as-chat", "ml.g4dn.xlarge"),
        "--autoscale",
        "1:4",
    )
    resource = "endpoint/as-chat/variant/AllTraffic"
    assert created[-2:] == [
        (AAS, "RegisterScalableTarget", resource),
        (AAS, "PutScalingPolicy", resource),
    ]
    assert _targets()[resource] == (1, 4)
    (policy,) = _policies("as-chat")
    assert policy["PolicyType"] == "TargetTrackingScaling"
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    }
    model = boto3.client("sagemaker").describe_model(ModelName="as-chat")
    environment = model["PrimaryContainer"]["Environment"]
    assert environment["SAGEMAKER_METRICS_ENDPOINT_NAME"] == "as-chat"
    assert "SAGEMAKER_METRICS" not in environment

    # Another endpoint, scaled on the container's queue, whose name starts with this one's.
    options = model_options("as-chat-prod", "ml.g4dn.xlarge")
    status, _, err = run(
        capsys, "deploy", "endpoint", *options, "--autoscale", "2:6", "--scale-on", "waiting"
    )
    assert status == 0, err
    (queue,) = _policies("as-chat-prod")
    metric = queue["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]
    assert metric["MetricName"] == "RequestsWaiting" and metric["Namespace"] == "vLLM/SageMaker"
    model = boto3.client("sagemaker").describe_model(ModelName="as-chat-prod")
    assert model["PrimaryContainer"]["Environment"]["SAGEMAKER_METRICS"] == "cloudwatch"

    deleted = dry_then_real(capsys, "deploy", "delete", "--name", "as-chat")
    assert deleted[:3] == [
        ("sagemaker", "DeleteEndpoint", "as-chat"),
        (AAS, "DeleteScalingPolicy", resource),
        (AAS, "DeregisterScalableTarget", resource),
    ]
    assert resource not in _targets() and _policies("as-chat") == []
    assert _targets()["endpoint/as-chat-prod/variant/AllTraffic"] == (2, 6)
    assert len(_policies("as-chat-prod")) == 1
    assert run(capsys, "deploy", "delete", "--name", "as-chat-prod")[0] == 0
    assert "endpoint/as-chat-prod/variant/AllTraffic" not in _targets()


def test_an_update_replaces_the_policy_or_leaves_it(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """moto has no UpdateEndpoint: an update is checked as its dry run's plan. With --autoscale
    it registers the target again and puts the policy of the same name (which replaces it);
    without, it plans no scaling call and leaves the standing ones."""
    arguments = ("deploy", "endpoint", *model_options("as-up", "ml.g4dn.xlarge"))
    assert run(capsys, *arguments, "--autoscale", "1:2")[0] == 0
    before = state()
    for extra, scaled in (
        (["--autoscale", "2:3", "--scale-on", "waiting", "--target", "4"], True),
        ([], False),
    ):
        with recorded() as calls:
            status, out, err = run(capsys, *arguments, *extra, "--dry-run")
        assert status == 0, err
        assert writes(calls) == [] and state() == before
        planned = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
        resource = "endpoint/as-up/variant/AllTraffic"
        expected = [(AAS, "RegisterScalableTarget", resource), (AAS, "PutScalingPolicy", resource)]
        assert (planned[-2:] == expected) == scaled
        assert planned[2] == ("sagemaker", "UpdateEndpoint", "as-up")
        if scaled:
            policy = json.loads(out)[-1]["params"]
            assert policy["PolicyName"] == scaling.POLICY
            assert policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 4
    assert run(capsys, "deploy", "delete", "--name", "as-up")[0] == 0


def test_a_refused_range_is_one_line_before_aws(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = state()
    with recorded() as calls:
        status, _, err = run(
            capsys,
            "deploy",
            "endpoint",
            *model_options("as-bad", "ml.g4dn.xlarge"),
            "--autoscale",
            "3:1",
        )
    assert (status, err) == (2, "deploy: --autoscale 3:1: MIN 3 is more than MAX 1\n")
    assert calls == [] and state() == before
