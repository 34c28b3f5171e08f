"""`deploy` writes only what it says: every botocore call of a command, recorded against moto.

A dry run may read (Describe, List, Get, Head) and leaves SageMaker, S3 and ECR as they were;
the real run makes exactly the writes the dry run printed, in order. `deploy delete` removes a
name's endpoint and the kit's versions of it, never another deployment that shares a prefix.
"""

import contextlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from tests.deploy.test_deploy import (
    CHECKOUT,
    IMAGE,
    ROLE,
    fake_builders,
    model_options,
    put_image,
    recorded_calls,
)
from tests.deploy.test_fleet import fleet_args
from vllm_sagemaker.container import cli
from vllm_sagemaker.deploy.base import storage

# The parameter that names what a call touches, first found first.
_TARGETS = (
    "EndpointName",
    "TransformJobName",
    "EndpointConfigName",
    "ModelName",
    "repositoryName",
    "Key",
)
# Operations that only read: all a dry run may call.
_READS = ("Describe", "List", "Get", "Head")
# What differs between two runs of one plan: the update's version and the async body's name.
_VOLATILE = re.compile(r"\d{8}-\d{6}|[0-9a-f]{32}")


def identity(service: str, operation: str, params: dict[str, Any]) -> tuple[str, str, str]:
    """A call as (service, operation, what it touches), the run's volatile parts blanked."""
    target = next((str(params[key]) for key in _TARGETS if key in params), "")
    return service, operation, _VOLATILE.sub("*", target)


@contextlib.contextmanager
def recorded() -> Iterator[list[tuple[str, str, str]]]:
    """Every call boto3 makes in this process while the block runs, in order."""
    calls: list[tuple[str, str, str]] = []

    def record(event_name: str, params: dict[str, Any], **_: Any) -> None:
        _, service, operation = event_name.split(".")
        calls.append(identity(service, operation, params))

    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("provide-client-params.*.*", record)
    storage.s3_client.cache_clear()
    try:
        yield calls
    finally:
        boto3.DEFAULT_SESSION = None
        storage.s3_client.cache_clear()


def writes(calls: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [call for call in calls if not call[1].startswith(_READS)]


def state() -> dict[str, Any]:
    """What SageMaker, S3 and ECR hold: names, and every object's ETag."""
    s3 = boto3.client("s3")
    sagemaker = boto3.client("sagemaker")
    objects = sorted(
        (bucket["Name"], item["Key"], item["ETag"])
        for bucket in s3.list_buckets()["Buckets"]
        for item in s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", [])
    )
    return {
        "objects": objects,
        "endpoints": sorted(e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]),
        "configs": sorted(
            c["EndpointConfigName"] for c in sagemaker.list_endpoint_configs()["EndpointConfigs"]
        ),
        "models": sorted(m["ModelName"] for m in sagemaker.list_models()["Models"]),
        "jobs": sorted(
            j["TransformJobName"] for j in sagemaker.list_transform_jobs()["TransformJobSummaries"]
        ),
        "repositories": sorted(
            r["repositoryName"] for r in boto3.client("ecr").describe_repositories()["repositories"]
        ),
    }


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`vllm-sagemaker ARGS` in this process: exit status, stdout, stderr."""
    try:
        status = cli.main(list(args))
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return status, out, err


def dry_then_real(capsys: pytest.CaptureFixture[str], *args: str) -> list[tuple[str, str, str]]:
    """Run the command with --dry-run, then for real; assert the dry run wrote nothing and left
    AWS as it was, and the real run made exactly the printed writes, in order. The writes."""
    before = state()
    with recorded() as dry_calls:
        status, out, err = run(capsys, *args, "--dry-run")
    assert status == 0, err
    assert writes(dry_calls) == []
    assert state() == before
    printed = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
    with recorded() as real_calls:
        status, _, err = run(capsys, *args)
    assert status == 0, err
    assert writes(real_calls) == printed
    return printed


@pytest.fixture
def role(monkeypatch: pytest.MonkeyPatch, aws: dict[str, str]) -> str:
    monkeypatch.setenv("SAGEMAKER_ROLE_ARN", ROLE)
    return ROLE


def test_endpoint_new_then_delete(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    created = dry_then_real(
        capsys, "deploy", "endpoint", "--no-wait", *model_options("rec", "ml.g4dn.xlarge")
    )
    assert [op for _, op, _ in created] == ["CreateModel", "CreateEndpointConfig", "CreateEndpoint"]
    deleted = dry_then_real(capsys, "deploy", "delete", "--name", "rec")
    assert deleted == [
        ("sagemaker", "DeleteEndpoint", "rec"),
        ("sagemaker", "DeleteEndpointConfig", "rec"),
        ("sagemaker", "DeleteModel", "rec"),
    ]


def test_an_existing_endpoint_plans_an_update(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """moto has no UpdateEndpoint: the update is checked as the dry run's plan, from its reads."""
    arguments = ("deploy", "endpoint", "--no-wait", *model_options("rec-up", "ml.g4dn.xlarge"))
    assert run(capsys, *arguments)[0] == 0
    before = state()
    with recorded() as calls:
        status, out, err = run(capsys, *arguments, "--dry-run")
    assert status == 0, err
    assert writes(calls) == [] and state() == before
    planned = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
    assert planned == [
        ("sagemaker", "CreateModel", "rec-up-*"),
        ("sagemaker", "CreateEndpointConfig", "rec-up-*"),
        ("sagemaker", "UpdateEndpoint", "rec-up"),
    ]
    assert "rec-up exists; the run updates it" in err


def put_lines(bucket: str, key: str, count: int, start: int = 0) -> list[bytes]:
    lines = [json.dumps({"prompt": f"p{i}"}).encode() for i in range(start, start + count)]
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"\n".join(lines) + b"\n")
    return lines


def keys(bucket: str, prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def body(bucket: str, key: str) -> bytes:
    return bytes(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def transform(name: str, instances: int) -> tuple[str, ...]:
    return (
        "deploy",
        "transform",
        *model_options(
            name,
            "ml.g4dn.xlarge",
            instance_count=str(instances),
            input="s3://rec-split/in/",
            output="s3://rec-split/out/",
        ),
    )


def test_transform_split_is_the_jobs_own(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Parts go beside the output under the job's name, never into the input; a later job with
    fewer files reads only its own parts, and what an earlier attempt left there is removed."""
    boto3.client("s3").create_bucket(Bucket="rec-split")
    first = put_lines("rec-split", "in/a.jsonl", 7) + put_lines("rec-split", "in/b.jsonl", 5, 7)
    planned = dry_then_real(capsys, *transform("rec-one", 4))
    parts = keys("rec-split", "out-parts/rec-one/")
    assert planned == [
        *(("s3", "PutObject", key) for key in parts),
        ("sagemaker", "CreateModel", "rec-one"),
        ("sagemaker", "CreateTransformJob", "rec-one"),
    ]
    assert len(parts) >= 4
    assert keys("rec-split", "in/") == ["in/a.jsonl", "in/b.jsonl"]
    assert b"".join(body("rec-split", k) for k in parts).splitlines() == first

    boto3.client("s3").delete_object(Bucket="rec-split", Key="in/b.jsonl")
    boto3.client("s3").put_object(
        Bucket="rec-split", Key="out-parts/rec-two/a.part-00009.jsonl", Body=b"{}\n"
    )
    planned = dry_then_real(capsys, *transform("rec-two", 3))
    assert planned[0] == ("s3", "DeleteObject", "out-parts/rec-two/a.part-00009.jsonl")
    job = boto3.client("sagemaker").describe_transform_job(TransformJobName="rec-two")
    prefix = job["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"]
    assert prefix == "s3://rec-split/out-parts/rec-two/"
    second = keys("rec-split", "out-parts/rec-two/")
    assert len(second) == 3
    assert b"".join(body("rec-split", k) for k in second).splitlines() == first[:7]


def test_transform_refuses_a_taken_name(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="rec-taken")
    put_lines("rec-taken", "in/a.jsonl", 2)
    arguments = model_options(
        "rec-taken", "ml.g4dn.xlarge", input="s3://rec-taken/in/", output="s3://rec-taken/out/"
    )
    assert run(capsys, "deploy", "transform", *arguments)[0] == 0
    before = state()
    status, _, err = run(capsys, "deploy", "transform", *arguments)
    assert status == 1
    assert "a transform job named rec-taken exists" in err
    assert state() == before


def test_invoke_sync_and_async(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert dry_then_real(capsys, "deploy", "invoke", "--name", "any", "--body", "{}") == [
        ("sagemaker-runtime", "InvokeEndpoint", "any")
    ]
    boto3.client("s3").create_bucket(Bucket="rec-async")
    options = model_options("rec-async", "ml.g4dn.xlarge", async_output="s3://rec-async/out/")
    assert run(capsys, "deploy", "endpoint", "--no-wait", *options)[0] == 0
    arguments = ("deploy", "invoke", "--name", "rec-async", "--async", "--body", '{"prompt": "hi"}')
    assert dry_then_real(capsys, *arguments) == [
        ("s3", "PutObject", "out/inputs/*.json"),
        ("sagemaker-runtime", "InvokeEndpointAsync", "rec-async"),
    ]


def test_token_reads_and_never_writes(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`deploy token` makes its token locally: dry or real, one DescribeEndpoint and no write."""
    options = model_options("rec-token", "ml.g4dn.xlarge")
    assert run(capsys, "deploy", "endpoint", "--no-wait", *options)[0] == 0
    before = state()
    for dry in (["--dry-run"], []):
        with recorded() as calls:
            status, out, err = run(capsys, "deploy", "token", "--name", "rec-token", *dry)
        assert status == 0, err
        assert [call[1] for call in calls] == ["DescribeEndpoint"]
        assert out.startswith("export OPENAI_BASE_URL=") and out.count("\n") == 2 - len(dry)
    assert state() == before


def test_batch_dry_runs_write_nothing(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fleet's dry run and a cancel's dry run; the real cancel writes what was printed."""
    arguments = fleet_args("rec-fleet", tmp_path)
    before = state()
    with recorded() as calls:
        status, out, err = run(capsys, "deploy", "batch", *arguments, "--dry-run")
    assert status == 0, err
    assert writes(calls) == [] and state() == before
    planned = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
    assert [op for _, op, _ in planned] == (
        ["PutObject"] * 4 + ["CreateModel"] + ["CreateTransformJob"] * 3 + ["PutObject"] * 2
    )
    cancel = ("deploy", "batch", "--cancel", "--name", "x", "--work-prefix", "s3://rec-fleet/work/")
    assert dry_then_real(capsys, *cancel) == [("s3", "PutObject", "work/cancel")]
    status, out, err = run(capsys, "deploy", "batch", *arguments, "--dry-run")
    assert status == 0, err
    planned = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
    assert planned[4:6] == [
        ("s3", "DeleteObject", "work/cancel"),
        ("sagemaker", "CreateModel", "rec-fleet"),
    ]


@pytest.mark.parametrize("builder", ["docker", "buildah"])
def test_image_dry_run_writes_nothing(
    aws: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    builder: str,
) -> None:
    """No builder can run here: a script that accepts every command stands in for it, alone on
    PATH. The dry run runs no builder command either."""
    for name, value in fake_builders(tmp_path, builder).items():
        monkeypatch.setenv(name, value)
    repository = f"rec-image-{builder}"
    arguments = ("deploy", "image", "--repository", repository, "--context", CHECKOUT)
    arguments += ("--target", "cpu")
    assert dry_then_real(capsys, *arguments) == [("ecr", "CreateRepository", repository)]
    ran = recorded_calls(tmp_path)
    assert [call.split()[1] for call in ran if call != "docker info"] == [
        "login",
        "bud" if builder == "buildah" else "build",
        "push",
    ]
    (tmp_path / "calls").unlink()
    before = state()
    with recorded() as calls:
        assert run(capsys, *arguments, "--dry-run")[0] == 0
    assert writes(calls) == [] and state() == before
    assert [call for call in recorded_calls(tmp_path) if call != "docker info"] == []


def test_an_endpoint_without_image_only_reads_ecr(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The image `deploy image` pushed is found with reads (DescribeRepositories,
    DescribeImages); the dry run writes nothing, the real run what it printed."""
    uri = put_image("vllm-sagemaker", "cpu")
    options = ("--name", "rec-cpu", "--model-id", "org/m", "--instance-type", "ml.c5.2xlarge")
    with recorded() as calls:
        assert run(capsys, "deploy", "endpoint", *options, "--dry-run")[0] == 0
    assert [call for call in calls if call[0] == "ecr"] == [
        ("ecr", "DescribeRepositories", ""),
        ("ecr", "DescribeImages", "vllm-sagemaker"),
    ]
    created = dry_then_real(capsys, "deploy", "endpoint", "--no-wait", *options)
    assert [op for _, op, _ in created] == ["CreateModel", "CreateEndpointConfig", "CreateEndpoint"]
    model = boto3.client("sagemaker").describe_model(ModelName="rec-cpu")
    assert model["PrimaryContainer"]["Image"] == uri
    assert dry_then_real(capsys, "deploy", "delete", "--name", "rec-cpu")


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

    def refuse(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if json.loads(params["body"]).get("ModelName") != "rec-fail":
            return None
        error = {"Code": "AccessDeniedException", "Message": "not allowed"}
        return AWSResponse("", 403, {}, None), {
            "Error": error,
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }

    with recorded():
        assert boto3.DEFAULT_SESSION is not None
        boto3.DEFAULT_SESSION.events.register("before-call.sagemaker.DeleteModel", refuse)
        status, _, err = run(capsys, "deploy", "delete", "--name", "rec-fail")
    assert status == 1
    assert "DeleteModel failed" in err and "not allowed" in err
    after = state()
    assert "rec-fail" not in after["endpoints"]
    assert [m for m in after["models"] if m.startswith("rec-fail")] == ["rec-fail"]


def test_batch_refuses_another_model_of_its_name(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deploy batch --name N` where N names an endpoint's model with another model id: one line
    naming the difference and --name; nothing written."""
    endpoint = model_options("rec-shared", "ml.g4dn.xlarge")
    assert run(capsys, "deploy", "endpoint", "--no-wait", *endpoint)[0] == 0
    arguments = fleet_args("rec-shared", tmp_path)
    arguments[arguments.index("--model-id") + 1] = "org/other"
    before = state()
    for dry in ([], ["--dry-run"]):
        status, out, err = run(capsys, "deploy", "batch", *arguments, *dry)
        assert status == 1 and out == ""
        assert err.splitlines()[-1].startswith(
            "deploy: a model named rec-shared exists and differs"
        )
        assert "org/other" in err and "--name" in err
    assert state() == before


def test_batch_reuses_the_same_model(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An endpoint's model that is the model `deploy batch` would create is used, not made again."""
    endpoint = model_options("rec-same", "ml.g4dn.xlarge")
    assert run(capsys, "deploy", "endpoint", "--no-wait", *endpoint)[0] == 0
    status, out, err = run(
        capsys, "deploy", "batch", *fleet_args("rec-same", tmp_path), "--dry-run"
    )
    assert status == 0, err
    assert "model rec-same exists as asked" in err
    assert "CreateModel" not in [c["operation"] for c in json.loads(out)]


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


@pytest.mark.parametrize(
    ("output", "planted", "refusal"),
    [
        ("s3://rec-overlap/in/results/", None, "overlaps --input s3://rec-overlap/in/"),
        ("s3://rec-overlap/out/", "out-parts/rec-planted/notes.txt", "which no cut wrote"),
    ],
)
def test_transform_split_refuses_to_mix_data(
    role: str, capsys: pytest.CaptureFixture[str], output: str, planted: str | None, refusal: str
) -> None:
    """Parts that would land inside the input, or beside an object the split did not write
    (the job would read it), stop the command before anything is written."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="rec-overlap")
    put_lines("rec-overlap", "in/a.jsonl", 4)
    if planted:
        s3.put_object(Bucket="rec-overlap", Key=planted, Body=b"mine")
    name = "rec-planted" if planted else "rec-inside"
    arguments = model_options(
        name, "ml.g4dn.xlarge", instance_count="2", input="s3://rec-overlap/in/", output=output
    )
    before = state()
    for dry in (["--dry-run"], []):
        status, out, err = run(capsys, "deploy", "transform", *arguments, *dry)
        assert status == 1 and out == ""
        assert refusal in err.splitlines()[-1]
    assert state() == before
