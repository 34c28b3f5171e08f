"""The `deploy` command as the deploy tests run it: a run as a user runs it, its dry-run plan,
stand-in container builders on PATH, an image pushed to (moto's) ECR, and the names they share.

Not a test module: the deploy tests, and the pure rules under rules/, import these from here.
"""

import argparse
import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import boto3

from tests import ROOT
from tests.support import cli
from vllm_sagemaker.deploy.kit import cli as deploy_cli

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-sagemaker:latest"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


# boto3 with no credentials and nothing listening where it would call.
NO_AWS = {
    "AWS_ACCESS_KEY_ID": "",
    "AWS_SECRET_ACCESS_KEY": "",
    "AWS_SESSION_TOKEN": "",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
}


def deploy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = cli.run("deploy", *args, env=env)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def parsed(*args: str) -> argparse.Namespace:
    """`deploy ARGS` as the CLI parses them, for the checks."""
    parser = argparse.ArgumentParser()
    deploy_cli.add_arguments(parser)
    return parser.parse_args(list(args))


def model_options(name: str, instance_type: str, **extra: str) -> list[str]:
    """The options every endpoint and transform command needs, plus `extra`."""
    return cli.options(
        name=name, image=IMAGE, model_id="org/model", instance_type=instance_type, **extra
    )


def plan(*args: str) -> list[dict[str, Any]]:
    """The calls a dry run prints where AWS cannot be read (it says what it assumed)."""
    done = deploy(*args, "--dry-run", env=NO_AWS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def fake_builders(
    directory: Path, *tools: str, docker_info: int = 0, failing: str = ""
) -> dict[str, str]:
    """Recording stand-ins for the builders `tools` (docker, buildah, podman) in `directory`,
    which becomes the whole PATH (so no real builder is found): each appends `TOOL ARGS` to
    `directory/calls`, and `login` also what it read on stdin to `directory/stdin`; `docker
    info` exits `docker_info`; the subcommand `failing` exits 3. The environment to run with."""
    directory.mkdir(exist_ok=True)
    for tool in tools:
        script = directory / tool
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{tool} $*" >> {directory}/calls\n'
            f'[ "$1" = login ] && /bin/cat > {directory}/stdin\n'
            f'[ "$1" = info ] && exit {docker_info}\n'
            f'[ "$1" = "{failing}" ] && exit 3\n'
            "exit 0\n"
        )
        script.chmod(0o755)
    return {"PATH": str(directory)}


def recorded_calls(directory: Path) -> list[str]:
    calls = directory / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


# The build context the image commands are given: this checkout (it holds the Dockerfile).
CHECKOUT = str(ROOT)


def put_image(repository: str, tag: str) -> str:
    """An image tagged `tag` in ECR's `repository` (created when missing), as a push leaves it;
    its URI."""
    ecr = boto3.client("ecr")
    try:
        found = ecr.describe_repositories(repositoryNames=[repository])["repositories"][0]
    except ecr.exceptions.RepositoryNotFoundException:
        found = ecr.create_repository(repositoryName=repository)["repository"]
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}
    with contextlib.suppress(ecr.exceptions.ImageAlreadyExistsException):
        ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag=tag)
    return f"{found['repositoryUri']}:{tag}"


ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-sagemaker"
ENDPOINT = ["endpoint", *cli.options(image=IMAGE, model_id="org/m", instance_type="ml.g5.2xlarge")]
