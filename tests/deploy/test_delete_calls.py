"""`deploy delete` removes a name's endpoint and the kit's versions of it, never another
deployment that shares a prefix nor a config another endpoint uses; a refused deletion is one line
and exit status 1. Every botocore call recorded against moto: the real run writes what the dry run
printed."""

import json
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from tests.deploy.deploying import IMAGE, ROLE, model_options
from tests.deploy.recording import (
    Answer,
    answered,
    answering,
    identity,
    recorded,
    run,
    state,
    writes,
)


def version_of(name: str, when: str, image: str = IMAGE) -> None:
    """A model and endpoint config named `name-when`, as an update by the kit makes them."""
    sagemaker = boto3.client("sagemaker")
    versioned = f"{name}-{when}"
    sagemaker.create_model(
        ModelName=versioned, PrimaryContainer={"Image": image}, ExecutionRoleArn=ROLE
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": versioned,
        "InstanceType": "ml.g4dn.xlarge",
        "InitialInstanceCount": 1,
    }
    sagemaker.create_endpoint_config(EndpointConfigName=versioned, ProductionVariants=[variant])


def test_delete_removes_only_its_own(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`chat` deployed twice (moto has no UpdateEndpoint, so the second version is made as the
    update makes it) beside `chat-prod` and its own version: only chat's go."""
    for name in ("chat", "chat-prod"):
        assert (
            run(capsys, "deploy", "endpoint", "--no-wait", *model_options(name, "ml.g4dn.xlarge"))[
                0
            ]
            == 0
        )
    version_of("chat", "20250101-000000")
    version_of("chat-prod", "20250101-000000")
    before = state()
    status, out, err = run(capsys, "deploy", "delete", "--name", "chat", "--dry-run")
    assert status == 0, err
    assert state() == before
    expected = [
        ("sagemaker", "DeleteEndpoint", "chat"),
        ("sagemaker", "DeleteEndpointConfig", "chat"),
        ("sagemaker", "DeleteEndpointConfig", "chat-*"),
        ("sagemaker", "DeleteModel", "chat"),
        ("sagemaker", "DeleteModel", "chat-*"),
    ]
    printed = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
    assert sorted(printed) == sorted(expected)
    with recorded() as calls:
        assert run(capsys, "deploy", "delete", "--name", "chat")[0] == 0
    assert writes(calls) == printed
    after = state()
    assert "chat" not in after["endpoints"] and "chat-prod" in after["endpoints"]
    assert [c for c in after["configs"] if c.startswith("chat")] == [
        "chat-prod",
        "chat-prod-20250101-000000",
    ]
    assert [m for m in after["models"] if m.startswith("chat")] == [
        "chat-prod",
        "chat-prod-20250101-000000",
    ]
    status, _, err = run(capsys, "deploy", "delete", "--name", "chat")
    assert status == 1 and "nothing to delete" in err


def test_a_failed_delete_exits_1(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    """AWS refuses one DeleteModel (an answer botocore is given in place of moto's): the other
    deletions still happen, the failure is one line, the status is 1."""
    assert (
        run(
            capsys, "deploy", "endpoint", "--no-wait", *model_options("rec-fail", "ml.g4dn.xlarge")
        )[0]
        == 0
    )
    version_of("rec-fail", "20250101-000000")

    def stop_at(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if json.loads(params["body"]).get("ModelName") != "rec-fail":
            return None
        error = {"Code": "AccessDeniedException", "Message": "not allowed"}
        return AWSResponse("", 403, {}, None), {
            "Error": error,
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }

    with recorded():
        assert boto3.DEFAULT_SESSION is not None
        boto3.DEFAULT_SESSION.events.register("before-call.sagemaker.DeleteModel", stop_at)
        status, _, err = run(capsys, "deploy", "delete", "--name", "rec-fail")
    assert status == 1
    assert "DeleteModel failed" in err and "not allowed" in err
    after = state()
    assert "rec-fail" not in after["endpoints"]
    assert [m for m in after["models"] if m.startswith("rec-fail")] == ["rec-fail"]


def test_delete_keeps_a_config_of_another_name(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An endpoint pointed at a config of another name: the endpoint goes, that config and its
    model stay, and the command says so."""
    assert (
        run(
            capsys, "deploy", "endpoint", "--no-wait", *model_options("rec-other", "ml.g4dn.xlarge")
        )[0]
        == 0
    )
    boto3.client("sagemaker").create_endpoint(
        EndpointName="rec-mine", EndpointConfigName="rec-other"
    )
    status, out, err = run(capsys, "deploy", "delete", "--name", "rec-mine", "--dry-run")
    assert status == 0, err
    assert [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)] == [
        ("sagemaker", "DeleteEndpoint", "rec-mine")
    ]
    assert "keeps endpoint config rec-other: endpoint rec-mine uses it" in err
    assert "keeps model rec-other" in err
    assert run(capsys, "deploy", "delete", "--name", "rec-mine")[0] == 0
    after = state()
    assert "rec-other" in after["configs"] and "rec-other" in after["models"]


def test_delete_keeps_a_version_another_endpoint_runs_on(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another endpoint was pointed at one of `rec-v`'s versions: that config and its model stay,
    said; the rest of `rec-v` goes."""
    options = model_options("rec-v", "ml.g4dn.xlarge")
    assert run(capsys, "deploy", "endpoint", "--no-wait", *options)[0] == 0
    version_of("rec-v", "20250101-000000")
    boto3.client("sagemaker").create_endpoint(
        EndpointName="rec-other-v", EndpointConfigName="rec-v-20250101-000000"
    )
    status, _, err = run(capsys, "deploy", "delete", "--name", "rec-v")
    assert status == 0, err
    assert "keeps endpoint config rec-v-20250101-000000: endpoint rec-other-v runs on it" in err
    assert "keeps model rec-v-20250101-000000: endpoint rec-other-v runs on it" in err
    after = state()
    assert [c for c in after["configs"] if c.startswith("rec-v")] == ["rec-v-20250101-000000"]
    assert [m for m in after["models"] if m.startswith("rec-v")] == ["rec-v-20250101-000000"]


def test_a_refused_endpoint_deletion_keeps_its_scaling(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The endpoint goes first: when AWS refuses it, the endpoint keeps scaling and nothing else
    is deleted; the one line says so (exit status 1)."""
    options = model_options("rec-scaled", "ml.g4dn.xlarge", autoscale="1:2")
    assert run(capsys, "deploy", "endpoint", *options)[0] == 0
    before = state()

    def stop_at(params: dict[str, Any]) -> Answer:
        return answered({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, 403)

    with answering("DeleteEndpoint", stop_at):
        status, _, err = run(capsys, "deploy", "delete", "--name", "rec-scaled")
    assert status == 1
    told = err.splitlines()[-1]
    assert told.startswith("deploy: DeleteEndpoint failed: ") and told.endswith(
        "; its scaling, endpoint configs and models are kept while it stands"
    ), told
    assert state() == before
    status, out, _ = run(capsys, "deploy", "delete", "--name", "rec-scaled", "--dry-run")
    assert [c["operation"] for c in json.loads(out)][:3] == [
        "DeleteEndpoint",
        "DeleteScalingPolicy",
        "DeregisterScalableTarget",
    ]
    assert run(capsys, "deploy", "delete", "--name", "rec-scaled")[0] == 0
    assert state()["scalable_targets"] == [
        t for t in before["scalable_targets"] if "rec-scaled" not in t[0]
    ]


def test_nothing_to_delete_names_the_region(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "deploy", "delete", "--name", "rec-none")
    assert (status, err.splitlines()[-1]) == (
        1,
        "deploy: nothing to delete in us-east-1: no endpoint, endpoint config or model named "
        "rec-none or rec-none-<UTC time>",
    )
