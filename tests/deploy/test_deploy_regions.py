"""Which AWS region `vllm-sagemaker deploy` works in, against moto: AWS_REGION alone reaches
every command, --region reaches every client, and no region is one line naming where to give
one."""

import json
import os
import subprocess
from pathlib import Path

import boto3
import pytest

from tests.deploy.deploying import CHECKOUT, IMAGE, ROLE, fake_builders, model_options
from tests.support import cli, processes
from vllm_sagemaker.deploy.base import region


def region_env(aws: dict[str, str], **regions: str) -> dict[str, str]:
    """The moto environment with `regions` (AWS_REGION=..., AWS_DEFAULT_REGION=...) only."""
    env = {k: v for k, v in {**os.environ, **aws}.items() if k not in region.REGION_VARIABLES}
    return {**env, **regions}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return processes.run([cli.VLLM_SAGEMAKER, "deploy", *args], env=env, text=True)


def test_aws_region_alone_works_for_every_command(aws: dict[str, str], tmp_path: Path) -> None:
    """No AWS_DEFAULT_REGION, the only variable boto3 reads: every command still reaches (moto)
    AWS, real runs and the dry runs that must read alike."""
    env = {**region_env(aws, AWS_REGION="us-east-1"), "SAGEMAKER_ROLE_ARN": ROLE}
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="region-data")
    s3.put_object(Bucket="region-data", Key="in/a.jsonl", Body=b'{"prompt": "a"}\n')
    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "a"}}
    s3.put_object(Bucket="region-data", Key="batch.jsonl", Body=json.dumps(line).encode())
    builders_env = fake_builders(tmp_path, "docker")
    batch = [
        *cli.options(input_file="s3://region-data/batch.jsonl", output_file="s3://region-data/o"),
        *cli.options(work_prefix="s3://region-data/work/"),
    ]
    for args in (
        ["image", "--repository", "region-repo", "--context", CHECKOUT],
        ["endpoint", *model_options("region-llm", "ml.p3.2xlarge"), "--no-wait"],
        [
            "transform",
            *model_options("region-job", "ml.p3.2xlarge"),
            *cli.options(input="s3://region-data/in/", output="s3://region-data/out/"),
            "--no-wait",
        ],
        ["batch", *model_options("region-batch", "ml.p3.2xlarge"), *batch, "--dry-run"],
        ["invoke", "--name", "region-llm", "--body", "{}"],
        ["delete", "--name", "region-llm", "--dry-run"],
        ["delete", "--name", "region-llm"],
    ):
        done = run({**env, **builders_env} if args[0] == "image" else env, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "cannot read" not in done.stderr, (args, done.stderr)


def test_region_reaches_every_client(aws: dict[str, str]) -> None:
    """--region wins over the variables: the endpoint is made in that region, and read there."""
    env = {**region_env(aws, AWS_DEFAULT_REGION="us-east-1"), "SAGEMAKER_ROLE_ARN": ROLE}
    west_image = IMAGE.replace("us-east-1", "eu-west-1")  # SageMaker pulls from its region
    options = cli.options(
        name="region-west", image=west_image, model_id="org/m", instance_type="ml.p3.2xlarge"
    )
    made = run(env, "endpoint", *options, "--region", "eu-west-1")
    assert made.returncode == 0, made.stderr
    west = boto3.client("sagemaker", region_name="eu-west-1")
    assert west.describe_endpoint(EndpointName="region-west")["EndpointStatus"] == "InService"
    east = boto3.client("sagemaker", region_name="us-east-1")
    assert "region-west" not in [e["EndpointName"] for e in east.list_endpoints()["Endpoints"]]
    deleted = run(env, "delete", "--name", "region-west", "--region", "eu-west-1")
    assert deleted.returncode == 0, deleted.stderr
    assert west.list_endpoints()["Endpoints"] == []


def test_no_region_is_one_line_naming_where_to_give_one(aws: dict[str, str]) -> None:
    done = run(region_env(aws), "delete", "--name", "llm")
    assert done.returncode == 1
    (told,) = done.stderr.splitlines()
    assert told.startswith("deploy: cannot read DescribeEndpoint: no AWS region: give --region")
    assert "AWS_REGION" in told and "AWS_DEFAULT_REGION" in told


@pytest.mark.parametrize("where", ["--region", "AWS_REGION", "profile"])
def test_an_image_in_another_regions_ecr_is_refused_before_aws(
    aws: dict[str, str], tmp_path: Path, where: str
) -> None:
    """SageMaker pulls images from its own region's ECR only: an us-east-1 image for a run in
    eu-west-1, whichever way the region was chosen (the AWS profile's too), is one line and
    exit status 2, before any call (the endpoint points at nothing that answers)."""
    config = tmp_path / "config"
    config.write_text("[profile west]\nregion = eu-west-1\n")
    env = {
        **region_env(aws),
        "SAGEMAKER_ROLE_ARN": ROLE,
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        **({"AWS_REGION": "eu-west-1"} if where == "AWS_REGION" else {}),
        **({"AWS_CONFIG_FILE": str(config), "AWS_PROFILE": "west"} if where == "profile" else {}),
    }
    given = ["--region", "eu-west-1"] if where == "--region" else []
    for command in (
        ["endpoint", *model_options("elsewhere", "ml.g5.2xlarge")],
        ["transform", *model_options("elsewhere", "ml.g5.2xlarge")],
    ):
        if command[0] == "transform":
            command += ["--input", "s3://b-in/in/", "--output", "s3://b-in/out/"]
        for dry_run in (["--dry-run"], []):
            done = run(env, *command, *given, *dry_run)
            assert (done.returncode, done.stdout) == (2, ""), done.stderr
            assert done.stderr.splitlines() == [
                f"deploy: --image {IMAGE}: it is in ECR in us-east-1, and this run deploys to "
                "eu-west-1, where SageMaker cannot pull it (only from its own region): give "
                "--region us-east-1, or push the image to eu-west-1 (`vllm-sagemaker deploy "
                "image --region eu-west-1`)"
            ]
