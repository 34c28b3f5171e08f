"""`deploy endpoint`, `invoke`, `token` and `image` write only what they say: every botocore
call of each, recorded against moto; the dry run only reads, the real run writes what it printed
(an update, which moto cannot make, is checked as the dry run's plan)."""

import json
from pathlib import Path

import boto3
import pytest

from tests.deploy.deploying import (
    CHECKOUT,
    IMAGE,
    fake_builders,
    model_options,
    put_image,
    recorded_calls,
)
from tests.deploy.recording import dry_then_real, identity, recorded, run, state, writes


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


def test_an_update_warns_of_an_endpoint_the_kit_did_not_make(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An endpoint made by hand (no created-by tag): its update's dry run says so."""
    sagemaker = boto3.client("sagemaker")
    container = {"Image": IMAGE}
    sagemaker.create_model(ModelName="rec-hand", PrimaryContainer=container, ExecutionRoleArn=role)
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": "rec-hand",
        "InstanceType": "ml.g4dn.xlarge",
        "InitialInstanceCount": 1,
    }
    sagemaker.create_endpoint_config(EndpointConfigName="rec-hand", ProductionVariants=[variant])
    sagemaker.create_endpoint(EndpointName="rec-hand", EndpointConfigName="rec-hand")
    options = model_options("rec-hand", "ml.g4dn.xlarge")
    status, _, err = run(capsys, "deploy", "endpoint", *options, "--dry-run")
    assert status == 0, err
    assert (
        "deploy: warning: endpoint rec-hand has no created-by tag (the kit did not make it)" in err
    )
    scaled = model_options("rec-kit", "ml.g4dn.xlarge", autoscale="1:2")
    assert run(capsys, "deploy", "endpoint", *scaled)[0] == 0
    status, _, err = run(capsys, "deploy", "endpoint", *scaled, "--dry-run")
    assert status == 0 and "warning" not in err, err
    moved = model_options("rec-kit", "ml.m5.xlarge")
    status, _, err = run(capsys, "deploy", "endpoint", *moved, "--dry-run")
    assert status == 0, err
    assert (
        "deploy: warning: variant AllTraffic of rec-kit scales (Application Auto Scaling) on "
        "ml.g4dn.xlarge, and SageMaker fails an update that changes its instance type to "
        "ml.m5.xlarge" in err
    )


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
