"""`deploy component` against moto and the inference-component stand-in beside it
(tests/support/components/): two components on one endpoint made for them, an
update, scale to zero (the alarm armed with the step policy's ARN), a failed run taken back, and
`deploy delete` of one component and of the endpoint; each dry run writes nothing and the real
run makes exactly the printed writes. An async endpoint scales from 0 (`--autoscale 0:N`)."""

import json

import boto3
import pytest

from tests.deploy.deploying import IMAGE, model_options
from tests.deploy.recording import dry_then_real, recorded, run, state, writes
from tests.support.aws import moto_endpoint
from tests.support.components.common import State
from vllm_sagemaker.deploy.base import run as base_run
from vllm_sagemaker.deploy.kit.plans import scaling

AAS = "application-autoscaling"
SM = "sagemaker"


def component(endpoint: str, name: str, *extra: str) -> list[str]:
    return [
        *("deploy", "component", "--endpoint", endpoint, "--name", name),
        *("--image", IMAGE, "--model-id", "org/m", *extra),
    ]


def test_an_async_endpoint_scales_from_zero(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    options = model_options("az-jobs", "ml.g4dn.xlarge")
    written = dry_then_real(
        capsys,
        *("deploy", "endpoint", *options, "--async-output", "s3://az-bucket/out/"),
        *("--autoscale", "0:2"),
    )
    resource = "endpoint/az-jobs/variant/AllTraffic"
    assert written[-4:] == [
        (AAS, "RegisterScalableTarget", resource),
        (AAS, "PutScalingPolicy", resource),
        (AAS, "PutScalingPolicy", resource),
        ("cloudwatch", "PutMetricAlarm", ""),
    ]
    policies = boto3.client(AAS).describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=resource
    )["ScalingPolicies"]
    step = next(p for p in policies if p["PolicyName"] == scaling.WAKE_POLICY)
    (alarm,) = boto3.client("cloudwatch").describe_alarms(
        AlarmNames=[scaling.alarm_name(scaling.variant("az-jobs"))]
    )["MetricAlarms"]
    assert alarm["MetricName"] == "HasBacklogWithoutCapacity"
    assert alarm["AlarmActions"] == [step["PolicyARN"]]
    deleted = dry_then_real(capsys, "deploy", "delete", "--name", "az-jobs")
    assert ("cloudwatch", "DeleteAlarms", "") in deleted
    assert (
        boto3.client("cloudwatch").describe_alarms(AlarmNames=[alarm["AlarmName"]])["MetricAlarms"]
        == []
    )


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            ["--instance-type", "ml.g5.12xlarge", "--gpus", "8"],
            "deploy: --gpus 8: ml.g5.12xlarge has 4 GPUs; give at most 4, or an endpoint on an "
            "instance type with more\n",
        ),
        (
            ["--instance-type", "ml.g5.2xlarge", "--copies", "0"],
            "deploy: --copies 0: a component without copies serves nothing and nothing would "
            "start one; add --scale-to-zero (a call then starts a copy) or give 1 or more\n",
        ),
        (
            ["--instance-type", "ml.g5.2xlarge", "--instances", "0:1"],
            "deploy: --instances 0:1: an endpoint reaches 0 instances only when its components "
            "scale to zero copies: add --scale-to-zero, or give MIN 1 or more\n",
        ),
        (
            ["--instance-type", "ml.g5.2xlarge", "--scale-to-zero", "--no-wait"],
            "deploy: --scale-to-zero: the copies are registered once the component is "
            "InService; leave out --no-wait\n",
        ),
    ],
)
def test_refused_before_aws(
    role: str, capsys: pytest.CaptureFixture[str], extra: list[str], line: str
) -> None:
    before = state()
    with recorded() as calls:
        status, _, err = run(capsys, *component("refused", "chat", *extra))
    assert (status, err) == (2, line)
    assert calls == [] and state() == before


def test_zero_instances_need_an_async_endpoint_or_components(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with recorded() as calls:
        status, _, err = run(
            capsys,
            *("deploy", "endpoint", *model_options("rt", "ml.g4dn.xlarge"), "--autoscale", "0:2"),
        )
    assert status == 2 and "a real-time endpoint keeps at least 1 instance" in err
    assert err.count("\n") == 1 and calls == []


@pytest.fixture
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in's states move on at each read: no need to wait 15 s between them."""
    monkeypatch.setattr(base_run, "POLL_S", 0.01)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    status, out, err = run(capsys, *args, "--dry-run")
    assert status == 0, err
    plan: list[dict[str, object]] = json.loads(out)
    return plan


def test_two_components_on_one_endpoint_an_update_and_delete(
    role: str, components: State, quick_polls: None, capsys: pytest.CaptureFixture[str]
) -> None:
    made = dry_then_real(
        capsys, *component("shared", "chat", "--instance-type", "ml.g5.12xlarge", "--gpus", "2")
    )
    assert made == [
        (SM, "CreateEndpointConfig", "shared"),
        (SM, "CreateEndpoint", "shared"),
        (SM, "CreateModel", "chat"),
        (SM, "CreateInferenceComponent", "chat"),
    ]
    sagemaker = boto3.client(SM)
    chat = sagemaker.describe_inference_component(InferenceComponentName="chat")
    assert chat["InferenceComponentStatus"] == "InService"
    assert (
        chat["Specification"]["ComputeResourceRequirements"]["NumberOfAcceleratorDevicesRequired"]
        == 2
    )
    environment = sagemaker.describe_model(ModelName="chat")["PrimaryContainer"]["Environment"]
    assert environment["SM_VLLM_TENSOR_PARALLEL_SIZE"] == "2"

    # A second component on the endpoint that now exists: no --instance-type needed.
    added = dry_then_real(capsys, *component("shared", "embed", "--copies", "2"))
    assert added == [(SM, "CreateModel", "embed"), (SM, "CreateInferenceComponent", "embed")]
    listed = sagemaker.list_inference_components(EndpointNameEquals="shared")
    assert sorted(c["InferenceComponentName"] for c in listed["InferenceComponents"]) == [
        "chat",
        "embed",
    ]

    # More GPUs than the endpoint's instance type has: refused once its type is read.
    status, _, err = run(capsys, *component("shared", "big", "--gpus", "8"))
    assert (status, err.count("\n")) == (2, 1) and "ml.g5.12xlarge has 4 GPUs" in err

    updated = dry_then_real(capsys, *component("shared", "chat", "--gpus", "2", "--copies", "2"))
    assert [(s, o) for s, o, _ in updated] == [
        (SM, "CreateModel"),
        (SM, "UpdateInferenceComponent"),
    ]
    chat = sagemaker.describe_inference_component(InferenceComponentName="chat")
    assert chat["Specification"]["ModelName"].startswith("chat-")

    one = dry_then_real(capsys, "deploy", "delete", "--name", "shared", "--component", "embed")
    assert one == [(SM, "DeleteInferenceComponent", "embed"), (SM, "DeleteModel", "embed")]
    everything = dry_then_real(capsys, "deploy", "delete", "--name", "shared")
    assert [(s, o) for s, o, _ in everything] == [
        (SM, "DeleteInferenceComponent"),
        (SM, "DeleteModel"),
        (SM, "DeleteModel"),
        (SM, "DeleteEndpoint"),
        (SM, "DeleteEndpointConfig"),
    ]
    assert (
        sagemaker.list_inference_components(EndpointNameEquals="shared")["InferenceComponents"]
        == []
    )
    assert "shared" not in state()["endpoints"]


def test_scale_to_zero_arms_its_alarm_and_delete_removes_it(
    role: str, components: State, quick_polls: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = component(
        "idle", "sleepy", "--instance-type", "ml.g5.2xlarge", "--scale-to-zero", "--copies", "0"
    )
    plan = _plan(capsys, *args, "--max-copies", "2")
    config = plan[0]["params"]
    assert isinstance(config, dict)
    assert config["ProductionVariants"][0]["ManagedInstanceScaling"]["MinInstanceCount"] == 0
    assert plan[-1]["params"]["AlarmActions"] == [scaling.WAKE_ARN]  # type: ignore[index]
    made = dry_then_real(capsys, *args, "--max-copies", "2")
    resource = "inference-component/sleepy"
    assert made[-4:] == [
        (AAS, "RegisterScalableTarget", resource),
        (AAS, "PutScalingPolicy", resource),
        (AAS, "PutScalingPolicy", resource),
        ("cloudwatch", "PutMetricAlarm", ""),
    ]
    (target,) = [
        t
        for t in boto3.client(AAS).describe_scalable_targets(ServiceNamespace="sagemaker")[
            "ScalableTargets"
        ]
        if t["ResourceId"] == resource
    ]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (0, 2)
    policies = boto3.client(AAS).describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=resource
    )["ScalingPolicies"]
    step = next(p for p in policies if p["PolicyName"] == scaling.WAKE_POLICY)
    name = scaling.alarm_name(
        scaling.Scalable(resource, "sagemaker:inference-component:DesiredCopyCount")
    )
    (alarm,) = boto3.client("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"]
    assert alarm["MetricName"] == "NoCapacityInvocationFailures"
    assert alarm["Dimensions"] == [{"Name": "InferenceComponentName", "Value": "sleepy"}]
    assert alarm["AlarmActions"] == [step["PolicyARN"]]

    deleted = dry_then_real(capsys, "deploy", "delete", "--name", "idle")
    assert deleted[:5] == [
        (SM, "DeleteInferenceComponent", "sleepy"),
        (AAS, "DeleteScalingPolicy", resource),
        (AAS, "DeleteScalingPolicy", resource),
        (AAS, "DeregisterScalableTarget", resource),
        ("cloudwatch", "DeleteAlarms", ""),
    ]
    assert boto3.client("cloudwatch").describe_alarms(AlarmNames=[name])["MetricAlarms"] == []
    assert "idle" not in state()["endpoints"]


def test_a_failed_run_takes_back_what_it_made(
    role: str, components: State, quick_polls: None, capsys: pytest.CaptureFixture[str]
) -> None:
    before = state()
    components.fail_next("PutScalingPolicy", "ValidationException", "the policy was refused")
    args = component("undone", "gone", "--instance-type", "ml.g5.2xlarge", "--scale-to-zero")
    status, _, err = run(capsys, *args)
    *waits, line = err.splitlines()
    assert status == 1 and "deploy: inference component gone: waiting until it is deleted" in waits
    assert line.startswith("deploy: PutScalingPolicy failed: ") and "the policy was refused" in line
    assert line.endswith(
        "; removed scalable target inference-component/gone, inference component gone, model "
        "gone, endpoint undone and endpoint config undone"
    )
    assert state() == before
    assert "gone" not in components.components and "undone" not in components.endpoints


def test_a_component_on_an_endpoint_running_a_model_is_refused_before_any_write(
    role: str, components: State, capsys: pytest.CaptureFixture[str]
) -> None:
    with moto_endpoint("ic-model") as name, recorded() as calls:
        status, _, err = run(capsys, *component(name, "chat"))
    assert status == 1 and err.count("\n") == 1
    assert f"endpoint {name} runs a model on its variant, not inference components" in err
    assert writes(calls) == []


def test_no_wait_returns_once_the_component_is_made(
    role: str, components: State, quick_polls: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = component("nw", "quick", "--instance-type", "ml.g5.2xlarge", "--no-wait")
    status, _, err = run(capsys, *args)
    assert status == 0, err
    assert err.splitlines()[-1] == (
        "deploy: inference component quick goes on in SageMaker (--no-wait); check it with aws "
        "sagemaker describe-inference-component --inference-component-name quick --region "
        "us-east-1"
    )
    assert "quick" in components.components
    assert run(capsys, "deploy", "delete", "--name", "nw")[0] == 0
    assert "quick" not in components.components


def test_delete_keeps_the_models_others_run(
    role: str, components: State, quick_polls: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A component's model is never deleted with an endpoint of its name, nor a model an
    endpoint runs with a component of its name; an endpoint and its component of one name
    delete that model once."""
    with moto_endpoint("kept") as served:
        status, _, err = run(
            capsys, *component("kept-host", "kept-chat", "--instance-type", "ml.g5.2xlarge")
        )
        assert status == 0, err
        status, _, err = run(
            capsys, "deploy", "delete", "--name", "nowhere", "--component", served, "--dry-run"
        )
        assert status == 1 and "nothing to delete" in err, err
        status, out, err = run(capsys, "deploy", "delete", "--name", "kept-chat", "--dry-run")
        assert status == 1 and "nothing to delete" in err, (out, err)
        assert "keeps model kept-chat: inference component kept-chat runs on it" in err
        assert run(capsys, "deploy", "delete", "--name", "kept-host")[0] == 0
    status, _, err = run(capsys, *component("same", "same", "--instance-type", "ml.g5.2xlarge"))
    assert status == 0, err
    deleted = dry_then_real(capsys, "deploy", "delete", "--name", "same")
    assert deleted.count((SM, "DeleteModel", "same")) == 1
