"""What a failed deploy takes back: the rule from each call a run made to the call that deletes
what it created (a Create only; never an update, a deletion or a read; a write stays, named),
the line that says so, and the summary of a fleet whose lines did not all run."""

from typing import Any

import pytest

from tests.deploy.deploying import IMAGE, ROLE
from vllm_sagemaker.deploy.base.calls import Call, Undo
from vllm_sagemaker.deploy.base.error_answers import AwsError
from vllm_sagemaker.deploy.base.results import Summary
from vllm_sagemaker.deploy.base.run import call_failed, described, rollback_line
from vllm_sagemaker.deploy.kit.plans.endpoint import Instances, endpoint_calls
from vllm_sagemaker.deploy.kit.plans.model import ModelSource
from vllm_sagemaker.deploy.kit.plans.rollback import touched, undo

SAGEMAKER = "sagemaker"
ON_G5 = Instances("ml.g5.2xlarge")
ENDPOINT = endpoint_calls("llm", IMAGE, ModelSource("org/m"), ON_G5, {}, ROLE)
UPDATE = endpoint_calls(
    "llm", IMAGE, ModelSource("org/m"), ON_G5, {}, ROLE, version="20260101-000000"
)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            ENDPOINT[0],
            Undo("model llm", Call(SAGEMAKER, "DeleteModel", {"ModelName": "llm"})),
        ),
        (
            ENDPOINT[1],
            Undo(
                "endpoint config llm",
                Call(SAGEMAKER, "DeleteEndpointConfig", {"EndpointConfigName": "llm"}),
                ("model llm",),
            ),
        ),
        (
            ENDPOINT[2],
            Undo(
                "endpoint llm",
                Call(SAGEMAKER, "DeleteEndpoint", {"EndpointName": "llm"}),
                ("endpoint config llm",),
            ),
        ),
        (
            UPDATE[0],
            Undo(
                "model llm-20260101-000000",
                Call(SAGEMAKER, "DeleteModel", {"ModelName": "llm-20260101-000000"}),
            ),
        ),
        # An update switched a live endpoint: it stays, with what the endpoint now runs on.
        (
            UPDATE[2],
            Undo(
                "endpoint llm runs on llm-20260101-000000 now (UpdateEndpoint was made)",
                None,
                ("endpoint config llm-20260101-000000",),
            ),
        ),
        (
            Call("ecr", "CreateRepository", {"repositoryName": "vllm", "tags": []}),
            Undo(
                "ECR repository vllm", Call("ecr", "DeleteRepository", {"repositoryName": "vllm"})
            ),
        ),
        # A write may have replaced what was there: it stays, named.
        (
            Call("s3", "PutObject", {"Bucket": "b", "Key": "out-parts/j/a.part-00000.jsonl"}),
            Undo("s3://b/out-parts/j/a.part-00000.jsonl"),
        ),
        (Call("file", "Write", {"Path": "/w/fleet.json", "Body": b""}), Undo("/w/fleet.json")),
        # Deletions and reads leave nothing to take back.
        (Call("s3", "DeleteObject", {"Bucket": "b", "Key": "k"}), None),
        (Call(SAGEMAKER, "DeleteModel", {"ModelName": "llm"}), None),
        (Call("ecr", "GetAuthorizationToken", {}), None),
        # A job cannot be deleted; a plan makes it last.
        (Call(SAGEMAKER, "CreateTransformJob", {"TransformJobName": "j", "ModelName": "m"}), None),
    ],
)
def test_what_a_failed_run_takes_back(call: Call, expected: Undo | None) -> None:
    assert undo(call) == expected


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (ENDPOINT[2], "endpoint llm"),
        (
            Call(SAGEMAKER, "CreateTransformJob", {"TransformJobName": "j", "ModelName": "m"}),
            "transform job j",
        ),
        (Call(SAGEMAKER, "DeleteEndpointConfig", {"EndpointConfigName": "c"}), "endpoint config c"),
        (Call("s3", "PutObject", {"Bucket": "b", "Key": "k"}), "s3://b/k"),
    ],
)
def test_how_a_line_names_what_a_call_touches(call: Call, name: str) -> None:
    assert touched(call) == name


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (("CreateModel failed: X", []), "CreateModel failed: X"),
        (("F", ["model m"]), "F; removed model m"),
        (("F", ["endpoint config c", "model m"]), "F; removed endpoint config c and model m"),
        (
            ("F", ["endpoint e", "endpoint config c", "model m"]),
            "F; removed endpoint e, endpoint config c and model m",
        ),
        (("F", ["model m"], [], [], True), "F; kept model m (--keep-on-failure)"),
        (
            ("F", ["model m"], [("endpoint config c", "AWS refused DeleteEndpointConfig: X")]),
            "F; removed model m; could not remove endpoint config c (AWS refused "
            "DeleteEndpointConfig: X)",
        ),
        (("F", [], [], ["s3://b/1"]), "F; what it wrote stays: s3://b/1"),
        (
            ("F", [], [], [], False, ["endpoint e runs on c now"], ["endpoint config c"]),
            "F; endpoint e runs on c now; kept endpoint config c (in use)",
        ),
        (
            ("F", ["model m"], [], ["s3://b/1", "s3://b/2", "s3://b/3", "s3://b/4"]),
            "F; removed model m; what it wrote stays: s3://b/1, s3://b/2 and 2 more",
        ),
    ],
)
def test_the_line_of_a_failed_run(arguments: tuple[Any, ...], line: str) -> None:
    assert rollback_line(*arguments) == line


def test_the_line_of_a_call_that_failed() -> None:
    call = ENDPOINT[1]
    assert (
        call_failed(call, AwsError("CreateEndpointConfig", "ValidationException: bad type"))
        == "CreateEndpointConfig failed: ValidationException: bad type"
    )
    assert call_failed(call, "cannot reach AWS") == "CreateEndpointConfig failed: cannot reach AWS"


def test_what_a_wait_names() -> None:
    assert described(Call(SAGEMAKER, "DescribeEndpoint", {"EndpointName": "llm"})) == "endpoint llm"
    assert (
        described(Call(SAGEMAKER, "DescribeTransformJob", {"TransformJobName": "j"}))
        == "transform job j"
    )


def test_lines_that_did_not_run_are_not_answered() -> None:
    """`deploy batch`'s lines whose jobs failed got no answer: said apart from the answered."""
    summary = Summary()
    for _ in range(3):
        summary.skip("their jobs failed")
    summary.skip("their jobs did not start")
    assert summary.counts() == (
        "0 lines answered (0 succeeded, 0 failed), 3 lines not run (their jobs failed), 1 lines "
        "not run (their jobs did not start), 0 prompt + 0 completion tokens"
    )
