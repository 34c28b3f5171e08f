"""`deploy component`'s rules and scale to zero: the endpoint made for components, a component's
call (created, or updated to a new model), its GPUs against the instance type's, copies and
instances that cannot scale back from 0, the wake of a component and of an async endpoint (a
step policy and the alarm that fires it, armed with the policy's ARN), and what a failed run
takes back of them."""

from typing import Any

import pytest

from vllm_sagemaker.deploy.base.calls import Call, Undo
from vllm_sagemaker.deploy.kit.plans import component, scaling
from vllm_sagemaker.deploy.kit.plans.component import Component
from vllm_sagemaker.deploy.kit.plans.rollback import undo

ROLE = "arn:aws:iam::123456789012:role/sagemaker"
ARN = "arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:1:resource/x:policyName/y"


def test_an_endpoint_for_components_has_no_model_and_scales_its_instances() -> None:
    config, endpoint = component.endpoint_calls("shared", "ml.g5.12xlarge", 0, 2, ROLE)
    (variant,) = config.params["ProductionVariants"]
    assert "ModelName" not in variant
    assert variant["InitialInstanceCount"] == 1
    assert variant["ManagedInstanceScaling"] == {
        "Status": "ENABLED",
        "MinInstanceCount": 0,
        "MaxInstanceCount": 2,
    }
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert variant["InferenceAmiVersion"]
    assert config.params["ExecutionRoleArn"] == ROLE
    assert endpoint.params["EndpointConfigName"] == "shared"
    (cpu_variant,) = component.endpoint_calls("c", "ml.c7i.4xlarge", 1, 1, ROLE)[0].params[
        "ProductionVariants"
    ]
    assert "InferenceAmiVersion" not in cpu_variant


def test_a_component_gets_what_it_is_given_and_an_update_names_no_endpoint() -> None:
    given = Component("chat", "shared", gpus=2, cpus=4.0, memory_mb=8192, copies=3)
    created = component.component_call(given, "chat", exists=False)
    assert created.operation == "CreateInferenceComponent"
    assert (created.params["EndpointName"], created.params["VariantName"]) == (
        "shared",
        scaling.VARIANT,
    )
    spec = created.params["Specification"]
    assert spec["ModelName"] == "chat"
    assert spec["ComputeResourceRequirements"] == {
        "MinMemoryRequiredInMb": 8192,
        "NumberOfAcceleratorDevicesRequired": 2,
        "NumberOfCpuCoresRequired": 4.0,
    }
    assert created.params["RuntimeConfig"] == {"CopyCount": 3}
    updated = component.component_call(given, "chat-20260101-000000", exists=True)
    assert updated.operation == "UpdateInferenceComponent"
    assert "EndpointName" not in updated.params and "Tags" not in updated.params
    assert updated.params["Specification"]["ModelName"] == "chat-20260101-000000"
    bare = component.component_call(Component("embed", "shared"), "embed", False)
    assert bare.params["Specification"]["ComputeResourceRequirements"] == {
        "MinMemoryRequiredInMb": component.DEFAULT_MEMORY_MB
    }


@pytest.mark.parametrize(
    ("env", "gpus", "size"),
    [
        ({}, 4, "4"),
        ({}, 1, None),
        ({}, None, None),
        ({"SM_VLLM_TENSOR_PARALLEL_SIZE": "2"}, 4, "2"),
    ],
)
def test_tensor_parallelism_spans_the_components_gpus(
    env: dict[str, str], gpus: int | None, size: str | None
) -> None:
    assert component.component_env(env, gpus).get("SM_VLLM_TENSOR_PARALLEL_SIZE") == size


@pytest.mark.parametrize(
    ("gpus", "instance_type", "problem"),
    [
        (4, "ml.g5.12xlarge", None),
        (None, "ml.c7i.4xlarge", None),
        (1, "ml.g6.2xlarge", None),
        (2, "ml.g6.2xlarge", "--gpus 2: ml.g6.2xlarge has 1 GPU; give at most 1"),
        (1, "ml.c7i.4xlarge", "--gpus 1: ml.c7i.4xlarge has no GPU"),
        (16, "ml.g7.48xlarge", None),  # a family the kit does not size is AWS's to refuse
        (2, None, None),  # an endpoint that exists: checked once its type is read
    ],
)
def test_gpus_problem(gpus: int | None, instance_type: str | None, problem: str | None) -> None:
    found = component.gpus_problem(gpus, instance_type)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(
    ("copies", "zero", "problem"),
    [
        (1, False, None),
        (0, True, None),
        (0, False, "--copies 0: a component without copies serves nothing"),
        (-1, True, "--copies -1: must be 0 or more"),
    ],
)
def test_copies_problem(copies: int, zero: bool, problem: str | None) -> None:
    found = component.copies_problem(copies, zero)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(
    ("value", "zero", "problem"),
    [
        ("1:2", False, None),
        ("0:2", True, None),
        ("0:2", False, "add --scale-to-zero"),
        ("2:1", True, "MIN 2 is more than MAX 1"),
        ("0:0", True, "MAX must be 1 or more"),
        ("2", True, "give MIN:MAX"),
    ],
)
def test_instances_problem(value: str, zero: bool, problem: str | None) -> None:
    found = component.instances_problem(value, zero)
    assert (found is None) if problem is None else (found is not None and problem in found)


def _by(calls: list[Call], operation: str, kind: str = "") -> dict[str, Any]:
    return next(
        call.params
        for call in calls
        if call.operation == operation and kind in str(call.params.get("PolicyType", ""))
    )


def test_a_component_scales_to_zero_and_an_alarm_wakes_it() -> None:
    calls = component.zero_calls("chat", 4, None)
    target = {
        "ServiceNamespace": "sagemaker",
        "ResourceId": "inference-component/chat",
        "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount",
    }
    assert _by(calls, "RegisterScalableTarget") == {**target, "MinCapacity": 0, "MaxCapacity": 4}
    tracking = _by(calls, "PutScalingPolicy", "TargetTracking")
    assert tracking["TargetTrackingScalingPolicyConfiguration"] == {
        "TargetValue": component.DEFAULT_TARGET,
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"
        },
    }
    step = _by(calls, "PutScalingPolicy", "StepScaling")
    assert step["StepScalingPolicyConfiguration"]["StepAdjustments"] == [
        {"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1}
    ]
    alarm = _by(calls, "PutMetricAlarm")
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        "AWS/SageMaker",
        "NoCapacityInvocationFailures",
    )
    assert alarm["Dimensions"] == [{"Name": "InferenceComponentName", "Value": "chat"}]
    assert alarm["AlarmActions"] == [scaling.WAKE_ARN]
    assert calls[-1].operation == "PutMetricAlarm"


def test_an_async_endpoint_from_zero_tracks_its_backlog_and_wakes_on_it() -> None:
    calls = scaling.scaling_calls("jobs", scaling.Scaling(0, 2), {})
    assert _by(calls, "RegisterScalableTarget")["MinCapacity"] == 0
    tracking = _by(calls, "PutScalingPolicy", "TargetTracking")[
        "TargetTrackingScalingPolicyConfiguration"
    ]
    assert tracking["TargetValue"] == scaling.DEFAULT_BACKLOG
    metric = tracking["CustomizedMetricSpecification"]
    assert (metric["MetricName"], metric["Dimensions"]) == (
        "ApproximateBacklogSizePerInstance",
        [{"Name": "EndpointName", "Value": "jobs"}],
    )
    alarm = _by(calls, "PutMetricAlarm")
    assert alarm["MetricName"] == "HasBacklogWithoutCapacity"
    assert alarm["Dimensions"] == [{"Name": "EndpointName", "Value": "jobs"}]
    assert [c.operation for c in scaling.scaling_calls("jobs", scaling.Scaling(1, 2), {})] == [
        "RegisterScalableTarget",
        "PutScalingPolicy",
    ]


def test_the_alarm_is_put_last_with_the_step_policys_arn() -> None:
    calls = component.zero_calls("chat", 2, 3.0)
    made: list[list[Call]] = []

    def make(batch: list[Call]) -> list[dict[str, Any]]:
        made.append(batch)
        return [
            {"PolicyARN": ARN} if c.params.get("PolicyName") == scaling.WAKE_POLICY else {}
            for c in batch
        ]

    scaling.apply(calls, make)
    puts, (alarm,) = made
    assert [c.operation for c in puts] == [
        "RegisterScalableTarget",
        "PutScalingPolicy",
        "PutScalingPolicy",
    ]
    assert alarm.params["AlarmActions"] == [ARN]
    assert alarm.params["AlarmName"] == scaling.alarm_name(component.copies_of("chat"))


def test_a_failed_run_takes_back_a_component_and_its_alarm() -> None:
    given = Component("chat", "shared")
    created = component.component_call(given, "chat", exists=False)
    assert undo(created) == Undo(
        "inference component chat",
        Call("sagemaker", "DeleteInferenceComponent", {"InferenceComponentName": "chat"}),
        ("model chat", "endpoint shared"),
    )
    updated = undo(component.component_call(given, "chat-v2", exists=True))
    assert updated is not None and updated.call is None and updated.uses == ("model chat-v2",)
    alarm = component.zero_calls("chat", 1, None)[-1]
    found = undo(alarm)
    assert found is not None and found.call == Call(
        "cloudwatch", "DeleteAlarms", {"AlarmNames": [alarm.params["AlarmName"]]}
    )
    config = undo(component.endpoint_calls("shared", "ml.g5.2xlarge", 1, 1, ROLE)[0])
    assert config is not None and config.uses == ()
