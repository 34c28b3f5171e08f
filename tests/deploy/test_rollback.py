"""A deploy that fails removes what it created in that run, as CloudFormation rolls back a stack,
and says so in one line (exit status 1); what was there before stays; `--keep-on-failure` keeps
it all, and the line says what was kept. Against moto: a call moto itself refuses (an instance
type it does not know), and answers botocore is given in place of moto's (a quota, an endpoint
that ended Failed)."""

import itertools
import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.deploy.deploying import CHECKOUT, deploy, fake_builders, model_options, recorded_calls
from tests.deploy.recording import Answer, answered, answering, run, state

# An instance type SageMaker takes and moto's CreateEndpointConfig refuses (its list is of 2020).
UNKNOWN_TO_MOTO = "ml.g6.xlarge"
# The start of moto's refusal of it, as the line quotes it.
REFUSED = "deploy: CreateEndpointConfig failed: ValidationException: Value 'ml.g6.xlarge' at "


def models() -> list[str]:
    return [m["ModelName"] for m in boto3.client("sagemaker").list_models()["Models"]]


def repositories() -> list[str]:
    return [
        r["repositoryName"] for r in boto3.client("ecr").describe_repositories()["repositories"]
    ]


def test_a_failed_config_removes_the_model_it_created(role: str) -> None:
    done = deploy("endpoint", *model_options("rb-config", UNKNOWN_TO_MOTO))
    assert (done.returncode, done.stdout) == (1, "")
    assert "Traceback" not in done.stderr
    told = done.stderr.splitlines()[-1]
    assert told.startswith(REFUSED) and told.endswith("; removed model rb-config"), told
    assert "rb-config" not in models()
    assert "rb-config" not in state()["configs"]


def test_keep_on_failure_keeps_it_and_says_so(role: str) -> None:
    done = deploy("endpoint", *model_options("rb-kept", UNKNOWN_TO_MOTO), "--keep-on-failure")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    told = done.stderr.splitlines()[-1]
    assert told.startswith(REFUSED)
    assert told.endswith("; kept model rb-kept (--keep-on-failure)"), told
    assert "rb-kept" in models()
    assert deploy("delete", "--name", "rb-kept").returncode == 0


def test_a_failed_update_removes_only_its_new_version(role: str) -> None:
    """The endpoint stood before: its model, config and endpoint stay; the version the failed
    update made goes."""
    first = deploy("endpoint", "--no-wait", *model_options("rb-up", "ml.g4dn.xlarge"))
    assert first.returncode == 0, first.stderr
    before = state()
    done = deploy("endpoint", *model_options("rb-up", UNKNOWN_TO_MOTO))
    assert done.returncode == 1
    told = done.stderr.splitlines()[-1]
    assert told.startswith(REFUSED) and "; removed model rb-up-2" in told, told
    assert state() == before
    assert deploy("delete", "--name", "rb-up").returncode == 0


def test_a_failed_update_keeps_what_the_switched_endpoint_runs_on(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """UpdateEndpoint was made (moto has none: it is answered), then the scaling failed: the
    endpoint runs on the new version, so its config and model stay, and the line says so."""
    assert (
        run(capsys, "deploy", "endpoint", "--no-wait", *model_options("rb-on", "ml.m5.xlarge"))[0]
        == 0
    )
    before = state()

    def refused(params: dict[str, Any], **_: Any) -> Answer:
        return answered({"Error": {"Code": "ValidationException", "Message": "no"}}, 400)

    with answering("UpdateEndpoint", lambda params: answered({"EndpointArn": "arn"})):
        assert boto3.DEFAULT_SESSION is not None
        boto3.DEFAULT_SESSION.events.register(
            "before-call.application-auto-scaling.RegisterScalableTarget", refused
        )
        options = model_options("rb-on", "ml.m5.xlarge", autoscale="1:2")
        status, _, err = run(capsys, "deploy", "endpoint", *options)
    assert status == 1 and "Traceback" not in err
    after = state()
    (version,) = set(after["configs"]) - set(before["configs"])
    assert set(after["models"]) - set(before["models"]) == {version}
    told = err.splitlines()[-1]
    assert told.startswith("deploy: RegisterScalableTarget failed: ") and told.endswith(
        f"; endpoint rb-on runs on {version} now (UpdateEndpoint was made); kept endpoint config "
        f"{version} and model {version} (in use)"
    ), told


def test_an_endpoint_that_ends_failed_is_removed(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plan's read finds no endpoint (moto answers); the wait is told Failed: the endpoint,
    its config and its model go, newest first."""
    asked = itertools.count()

    def failed(params: dict[str, Any]) -> Answer | None:
        if next(asked) == 0:
            return None
        return answered(
            {"EndpointName": "rb-failed", "EndpointStatus": "Failed", "FailureReason": "no /ping"}
        )

    with answering("DescribeEndpoint", failed):
        status, out, err = run(
            capsys, "deploy", "endpoint", *model_options("rb-failed", "ml.g4dn.xlarge")
        )
    assert (status, out) == (1, "")
    assert err.splitlines()[-2:] == [
        "deploy: endpoint rb-failed: Failed",
        "deploy: endpoint rb-failed: Failed: no /ping; removed endpoint rb-failed, endpoint "
        "config rb-failed and model rb-failed",
    ]
    after = state()
    assert "rb-failed" not in after["endpoints"] + after["configs"] + after["models"]


def test_a_refused_transform_job_removes_its_model_and_names_the_shards_it_wrote(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The account's quota refuses CreateTransformJob: the model the run created goes; the
    shards it wrote stay (a PutObject cannot be told from one that replaced an object), named."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="rb-jobs")
    lines = b"".join(json.dumps({"prompt": f"p{i}"}).encode() + b"\n" for i in range(9))
    s3.put_object(Bucket="rb-jobs", Key="in/a.jsonl", Body=lines)
    options = model_options(
        "rb-job",
        "ml.g4dn.xlarge",
        instance_count="3",
        input="s3://rb-jobs/in/",
        output="s3://rb-jobs/out/",
    )

    def quota(params: dict[str, Any]) -> Answer:
        error = {"Code": "ResourceLimitExceeded", "Message": "quota is 0 instances"}
        return answered({"Error": error}, 400)

    with answering("CreateTransformJob", quota):
        status, _, err = run(capsys, "deploy", "transform", *options)
    assert status == 1 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "deploy: CreateTransformJob failed: ResourceLimitExceeded: quota is 0 instances; "
        "removed model rb-job; what it wrote stays: "
        "s3://rb-jobs/out-parts/rb-job/a.part-00000.jsonl, "
        "s3://rb-jobs/out-parts/rb-job/a.part-00001.jsonl and 1 more"
    )
    assert "rb-job" not in models()


@pytest.mark.parametrize(("existed", "keep"), [(False, False), (True, False), (False, True)])
def test_a_failed_build_removes_the_repository_it_created(
    aws: dict[str, str], tmp_path: Path, existed: bool, keep: bool
) -> None:
    """The builder fails after the run created the repository: it goes (unless
    --keep-on-failure); a repository that was there before stays and is not named."""
    repository = f"rb-image-{int(existed)}{int(keep)}"
    if existed:
        boto3.client("ecr").create_repository(repositoryName=repository)
    env = fake_builders(tmp_path, "podman", failing="build")
    options = ["--target", "cpu", "--repository", repository, "--context", CHECKOUT]
    done = deploy("image", *options, *(["--keep-on-failure"] if keep else []), env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert "Traceback" not in done.stderr
    build = recorded_calls(tmp_path)[-1]
    failed = f"deploy: {build} failed with exit status 3"
    told = done.stderr.splitlines()[-1]
    if existed:
        assert told == failed
    elif keep:
        assert told == f"{failed}; kept ECR repository {repository} (--keep-on-failure)"
    else:
        assert told == f"{failed}; removed ECR repository {repository}"
    assert (repository in repositories()) == (existed or keep)
