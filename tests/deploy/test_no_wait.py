"""`--no-wait` returns at once and says what it made and the AWS CLI command that checks it."""

import boto3
import pytest

from tests.deploy.deploying import model_options
from tests.deploy.recording import run
from tests.support.aws import REGION


def test_endpoint_no_wait_says_how_to_check(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(
        capsys, "deploy", "endpoint", "--no-wait", *model_options("nw-e", "ml.g4dn.xlarge")
    )
    assert status == 0, err
    assert err.splitlines()[-1] == (
        "deploy: endpoint nw-e goes on in SageMaker (--no-wait); check it with aws sagemaker "
        f"describe-endpoint --endpoint-name nw-e --region {REGION}"
    )


def test_transform_no_wait_says_how_to_check(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="nw-t")
    boto3.client("s3").put_object(Bucket="nw-t", Key="in/a.jsonl", Body=b'{"prompt": "p"}\n')
    options = model_options(
        "nw-t", "ml.g4dn.xlarge", input="s3://nw-t/in/", output="s3://nw-t/out/"
    )
    status, out, err = run(capsys, "deploy", "transform", "--no-wait", *options)
    assert (status, out) == (0, ""), err
    assert err.splitlines()[-1] == (
        "deploy: transform job nw-t goes on in SageMaker (--no-wait); check it with aws sagemaker "
        f"describe-transform-job --transform-job-name nw-t --region {REGION}"
    )
