"""A local moto server standing in for AWS (S3, SageMaker, ECR): nothing reaches real AWS."""

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx

from tests.support import processes, waiting
from tests.support.servers import free_port

MOTO_SERVER = str(Path(sys.executable).with_name("moto_server"))
REGION = "us-east-1"


def aws_env(endpoint: str) -> dict[str, str]:
    """What a boto3 client (ours or the user's) needs to talk to the moto server only."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


@contextlib.contextmanager
def moto_server(log_path: Path) -> Iterator[str]:
    """Start `moto_server` on a free port of 127.0.0.1; yield its URL; stop it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = processes.spawn(
            [MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
        )

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(log_path.read_text())
        try:
            httpx.get(url + "/moto-api/", timeout=2)
        except httpx.HTTPError:
            return False
        return True

    try:
        waiting.until(answers, 60, lambda: f"moto never answered:\n{log_path.read_text()}", 0.2)
        yield url
    finally:
        processes.stop(process, 30)


def upload_dir(directory: Path, bucket: str, prefix: str) -> str:
    """Every file of `directory` under s3://bucket/prefix/ (bucket created); the prefix's URI."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    for path in sorted(directory.iterdir()):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"{prefix}/{path.name}")
    return f"s3://{bucket}/{prefix}/"


@contextlib.contextmanager
def moto_endpoint(prefix: str) -> Iterator[str]:
    """An InService endpoint in moto (model, config and endpoint of one new name starting with
    `prefix`), for commands that look it up; yields its name, deletes all three after."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    sagemaker = boto3.client("sagemaker")
    sagemaker.create_model(
        ModelName=name,
        PrimaryContainer={"Image": "vllm-sagemaker:test"},
        ExecutionRoleArn="arn:aws:iam::123456789012:role/sagemaker",
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": name,
        "InstanceType": "ml.g4dn.xlarge",
        "InitialInstanceCount": 1,
    }
    sagemaker.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant])
    sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=name)
    try:
        yield name
    finally:
        sagemaker.delete_endpoint(EndpointName=name)
        sagemaker.delete_endpoint_config(EndpointConfigName=name)
        sagemaker.delete_model(ModelName=name)
