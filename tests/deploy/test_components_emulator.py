"""The stand-in for SageMaker's inference components refuses what AWS refuses, with AWS's error
codes as boto3 shows them, walks AWS's states, and answers moto's resources beside its own (the
words of its service-model check: test_service_model_words.py)."""

import uuid
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.deploy.test_service_model_words import INVALID, NULL_NAME, STATUS_PATH
from tests.support.aws import moto_endpoint
from tests.support.components.autoscaling import COPIES
from tests.support.components.common import State

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def client(service: str) -> Any:
    """boto3's client, without its own checks of parameters: the emulator's are tested."""
    return boto3.client(service, config=Config(parameter_validation=False))


def refusal(call: Callable[..., Any], **params: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as raised:
        call(**params)
    error = raised.value.response["Error"]
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return error["Code"], error["Message"]


def variant(least: int = 1, status: str = "ENABLED", model: str | None = None) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "VariantName": "AllTraffic",
        "InstanceType": "ml.g5.12xlarge",
        "InitialInstanceCount": 1,
        "ManagedInstanceScaling": {
            "Status": status,
            "MinInstanceCount": least,
            "MaxInstanceCount": 2,
        },
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
    }
    if model:
        shown["ModelName"] = model
    return shown


def model(sagemaker: Any) -> str:
    name = unique("model")
    sagemaker.create_model(
        ModelName=name, PrimaryContainer={"Image": "vllm-sagemaker:test"}, ExecutionRoleArn=ROLE
    )
    return name


def endpoint(sagemaker: Any, least: int = 1) -> str:
    """An endpoint for components, InService."""
    name = unique("ics")
    sagemaker.create_endpoint_config(
        EndpointConfigName=name, ProductionVariants=[variant(least)], ExecutionRoleArn=ROLE
    )
    sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=name)
    statuses = [sagemaker.describe_endpoint(EndpointName=name)["EndpointStatus"] for _ in "12"]
    assert statuses == ["Creating", "InService"]
    return name


def component_params(name: str, on: str, model_name: str, copies: int = 1) -> dict[str, Any]:
    return {
        "InferenceComponentName": name,
        "EndpointName": on,
        "VariantName": "AllTraffic",
        "Specification": {
            "ModelName": model_name,
            "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 1024},
        },
        "RuntimeConfig": {"CopyCount": copies},
    }


def component(sagemaker: Any, on: str, copies: int = 1) -> str:
    name = unique("ic")
    sagemaker.create_inference_component(**component_params(name, on, model(sagemaker), copies))
    return name


def target(name: str, **more: Any) -> dict[str, Any]:
    return {
        "ServiceNamespace": "sagemaker",
        "ResourceId": f"inference-component/{name}",
        "ScalableDimension": COPIES,
        **more,
    }


TRACKING = {
    "PolicyType": "TargetTrackingScaling",
    "TargetTrackingScalingPolicyConfiguration": {
        "TargetValue": 5.0,
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"
        },
    },
}


def test_requests_outside_the_service_model_are_refused_as_aws_refuses_them(
    components: State,
) -> None:
    sagemaker = client("sagemaker")
    code, message = refusal(sagemaker.create_inference_component, InferenceComponentName="c")
    assert (code, message) == ("ValidationException", INVALID + NULL_NAME)
    code, message = refusal(
        sagemaker.create_inference_component,
        **component_params("bad_name", "e", "m"),
    )
    assert code == "ValidationException"
    assert "at 'inferenceComponentName' failed to satisfy constraint: Member must satisfy " in (
        message
    )
    code, message = refusal(
        sagemaker.create_inference_component, **component_params("c", "e", "m", copies=-1)
    )
    assert code == "ValidationException"
    assert "Value '-1' at 'runtimeConfig.copyCount'" in message
    code, message = refusal(
        sagemaker.create_endpoint_config,
        EndpointConfigName="e",
        ProductionVariants=[variant(status="ON")],
        ExecutionRoleArn=ROLE,
    )
    assert code == "ValidationException"
    assert f"Value 'ON' at '{STATUS_PATH}'" in message
    assert components.configs == {}
    assert components.operations()[:2] == ["CreateInferenceComponent"] * 2


def test_an_endpoint_for_components_needs_awss_rules(components: State) -> None:
    sagemaker = client("sagemaker")
    name = unique("ics")
    code, message = refusal(
        sagemaker.create_endpoint_config,
        EndpointConfigName=name,
        ProductionVariants=[variant(least=0, status="DISABLED")],
        ExecutionRoleArn=ROLE,
    )
    assert (code, "MinInstanceCount 0" in message) == ("ValidationException", True)
    code, message = refusal(
        sagemaker.create_endpoint_config, EndpointConfigName=name, ProductionVariants=[variant()]
    )
    assert (code, "ExecutionRoleArn" in message) == ("ValidationException", True)
    code, message = refusal(
        sagemaker.create_endpoint_config,
        EndpointConfigName=name,
        ProductionVariants=[variant(model=model(sagemaker))],
    )
    assert (code, message) == (
        "ValidationException",
        "ManagedInstanceScaling is only supported for inference component endpoints.",
    )
    assert name not in components.configs
    with pytest.raises(ClientError):
        sagemaker.describe_endpoint_config(EndpointConfigName=name)


def test_a_component_needs_an_endpoint_for_components(components: State) -> None:
    sagemaker = client("sagemaker")
    model_name = model(sagemaker)
    code, message = refusal(
        sagemaker.create_inference_component,
        **component_params("c", "nowhere", model_name),
    )
    assert code == "ValidationException"
    assert message.startswith('Could not find endpoint "arn:aws:sagemaker:us-east-1:')
    with moto_endpoint("models") as with_models:
        code, message = refusal(
            sagemaker.create_inference_component,
            **component_params("c", with_models, model_name),
        )
    assert code == "ValidationException"
    assert f"Endpoint {with_models} has models" in message
    on = endpoint(sagemaker)
    code, message = refusal(
        sagemaker.create_inference_component, **component_params("c", on, "no-such-model")
    )
    assert (code, message.startswith('Could not find model "')) == ("ValidationException", True)
    assert components.components == {}


def test_an_endpoint_and_its_component_walk_creating_to_in_service(components: State) -> None:
    sagemaker = client("sagemaker")
    name = unique("ics")
    sagemaker.create_endpoint_config(
        EndpointConfigName=name, ProductionVariants=[variant(least=0)], ExecutionRoleArn=ROLE
    )
    sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=name)
    assert sagemaker.describe_endpoint(EndpointName=name)["EndpointStatus"] == "Creating"
    code, message = refusal(
        sagemaker.create_inference_component, **component_params("c", name, model(sagemaker))
    )
    assert (code, "Creating" in message) == ("ValidationException", True)
    described = sagemaker.describe_endpoint(EndpointName=name)
    assert described["EndpointStatus"] == "InService"
    assert described["ProductionVariants"][0]["ManagedInstanceScaling"] == {
        "Status": "ENABLED",
        "MinInstanceCount": 0,
        "MaxInstanceCount": 2,
    }
    assert described["ProductionVariants"][0]["CurrentInstanceCount"] == 1

    ic = component(sagemaker, name, copies=2)
    first = sagemaker.describe_inference_component(InferenceComponentName=ic)
    assert first["InferenceComponentStatus"] == "Creating"
    assert first["RuntimeConfig"] == {"DesiredCopyCount": 2, "CurrentCopyCount": 0}
    second = sagemaker.describe_inference_component(InferenceComponentName=ic)
    assert second["InferenceComponentStatus"] == "InService"
    assert second["RuntimeConfig"] == {"DesiredCopyCount": 2, "CurrentCopyCount": 2}
    listed = sagemaker.list_inference_components(EndpointNameEquals=name)["InferenceComponents"]
    assert [item["InferenceComponentName"] for item in listed] == [ic]

    sagemaker.update_inference_component_runtime_config(
        InferenceComponentName=ic, DesiredRuntimeConfig={"CopyCount": 0}
    )
    assert components.copies(ic) == 0
    statuses = [
        sagemaker.describe_inference_component(InferenceComponentName=ic)[
            "InferenceComponentStatus"
        ]
        for _ in range(2)
    ]
    assert statuses == ["Updating", "InService"]

    code, message = refusal(sagemaker.delete_endpoint, EndpointName=name)
    assert (code, ic in message) == ("ValidationException", True)
    sagemaker.delete_inference_component(InferenceComponentName=ic)
    status = sagemaker.describe_inference_component(InferenceComponentName=ic)
    assert status["InferenceComponentStatus"] == "Deleting"
    code, message = refusal(sagemaker.describe_inference_component, InferenceComponentName=ic)
    assert code == "ValidationException"
    assert message.startswith('Could not find inference component "arn:aws:sagemaker:')
    sagemaker.delete_endpoint(EndpointName=name)
    sagemaker.delete_endpoint_config(EndpointConfigName=name)
    assert name not in components.endpoints and name not in components.configs


def test_copies_scale_only_once_registered(components: State) -> None:
    sagemaker, scaling = client("sagemaker"), client("application-autoscaling")
    code, message = refusal(
        scaling.register_scalable_target, **target("absent", MinCapacity=0, MaxCapacity=1)
    )
    assert code == "ValidationException"
    ic = component(sagemaker, endpoint(sagemaker))
    code, message = refusal(scaling.put_scaling_policy, PolicyName="p", **target(ic), **TRACKING)
    assert (code, message) == (
        "ObjectNotFoundException",
        "No scalable target registered for service namespace: sagemaker, resource ID: "
        f"inference-component/{ic}, scalable dimension: {COPIES}",
    )
    scaling.register_scalable_target(**target(ic, MinCapacity=0, MaxCapacity=3))
    answer = scaling.put_scaling_policy(PolicyName="p", **target(ic), **TRACKING)
    assert answer["PolicyARN"].startswith("arn:aws:autoscaling:us-east-1:123456789012:")
    assert answer["PolicyARN"].endswith(
        f":resource/sagemaker/inference-component/{ic}:policyName/p"
    )
    assert len(answer["Alarms"]) == 2
    step = {
        "PolicyType": "StepScaling",
        "StepScalingPolicyConfiguration": {
            "AdjustmentType": "ChangeInCapacity",
            "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
        },
    }
    assert "Alarms" not in scaling.put_scaling_policy(PolicyName="wake", **target(ic), **step)
    policies = scaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    assert {p["PolicyName"] for p in policies if p["ResourceId"].endswith(ic)} == {"p", "wake"}
    scaling.delete_scaling_policy(PolicyName="p", **target(ic))
    code, _ = refusal(scaling.delete_scaling_policy, PolicyName="p", **target(ic))
    assert code == "ObjectNotFoundException"
    scaling.deregister_scalable_target(**target(ic))
    assert components.targets == {} and components.policies == {}
    code, _ = refusal(scaling.deregister_scalable_target, **target(ic))
    assert code == "ObjectNotFoundException"


def test_moto_resources_are_answered_beside_the_emulators(components: State) -> None:
    sagemaker, scaling = client("sagemaker"), client("application-autoscaling")
    ours = endpoint(sagemaker)
    ic = component(sagemaker, ours)
    scaling.register_scalable_target(**target(ic, MinCapacity=1, MaxCapacity=2))
    with moto_endpoint("models") as theirs:
        variant_target = {
            "ServiceNamespace": "sagemaker",
            "ResourceId": f"endpoint/{theirs}/variant/AllTraffic",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        }
        scaling.register_scalable_target(**variant_target, MinCapacity=1, MaxCapacity=2)
        names = [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]
        assert {ours, theirs} <= set(names)
        configs = sagemaker.list_endpoint_configs()["EndpointConfigs"]
        assert {ours, theirs} <= {c["EndpointConfigName"] for c in configs}
        assert sagemaker.describe_endpoint(EndpointName=theirs)["EndpointStatus"] == "InService"
        targets = scaling.describe_scalable_targets(ServiceNamespace="sagemaker")
        resources = {t["ResourceId"] for t in targets["ScalableTargets"]}
        assert {variant_target["ResourceId"], f"inference-component/{ic}"} <= resources
        only = scaling.describe_scalable_targets(
            ServiceNamespace="sagemaker", ScalableDimension=COPIES
        )
        assert [t["ResourceId"] for t in only["ScalableTargets"]] == [f"inference-component/{ic}"]
        scaling.deregister_scalable_target(**variant_target)
    arn = sagemaker.describe_endpoint(EndpointName=ours)["EndpointArn"]
    sagemaker.add_tags(ResourceArn=arn, Tags=[{"Key": "made-by", "Value": "test"}])
    assert sagemaker.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "made-by", "Value": "test"}]


def test_a_call_fails_once_when_the_test_asks(components: State) -> None:
    sagemaker = client("sagemaker")
    on = endpoint(sagemaker)
    components.fail_next("CreateInferenceComponent", "ResourceLimitExceeded", "no capacity")
    params = component_params(unique("ic"), on, model(sagemaker))
    code, message = refusal(sagemaker.create_inference_component, **params)
    assert (code, message) == ("ResourceLimitExceeded", "no capacity")
    assert components.components == {}
    sagemaker.create_inference_component(**params)
    assert list(components.components) == [params["InferenceComponentName"]]
    created = [p for op, p in components.calls if op == "CreateInferenceComponent"]
    assert created == [params, params]
