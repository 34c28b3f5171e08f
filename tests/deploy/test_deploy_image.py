"""`vllm-sagemaker deploy image`: which builder runs (docker, buildah, podman), exactly the
login, build and push it runs, and a failing builder as one line; recording stand-ins for the
builders, ECR in moto."""

import base64
import json
from pathlib import Path

import boto3
import pytest

from tests.deploy.deploying import CHECKOUT, NO_AWS, deploy, fake_builders, recorded_calls


def test_image_logs_in_builds_and_pushes(aws: dict[str, str], tmp_path: Path) -> None:
    """Docker cannot run here: a recording script stands in for the docker CLI only; its engine
    answers `docker info`, so docker is the builder."""
    env = fake_builders(tmp_path, "docker")
    done = deploy(
        "image", "--repository", "vllm-sagemaker", "--tag", "v1", "--context", CHECKOUT, env=env
    )
    assert done.returncode == 0, done.stderr
    uri = done.stdout.strip()
    assert uri.endswith("/vllm-sagemaker:v1")
    info, login, build, push = recorded_calls(tmp_path)
    assert info == "docker info"
    registry = uri.split("/")[0]
    assert login == f"docker login --username AWS --password-stdin {registry}"
    assert build == f"docker build --build-arg ENGINE=gpu -t {uri} {CHECKOUT}"
    assert push == f"docker push {uri}"
    repositories = boto3.client("ecr").describe_repositories()["repositories"]
    assert "vllm-sagemaker" in [r["repositoryName"] for r in repositories]


def test_the_cpu_image_with_buildah(aws: dict[str, str], tmp_path: Path) -> None:
    """`--target cpu --builder buildah`: exactly login, build and push, with ECR's password on
    login's stdin; stdout is the URI alone. The dry run after it shows the same commands and
    runs none."""
    env = fake_builders(tmp_path, "buildah")
    args = ("image", "--target", "cpu", "--builder", "buildah", "--context", CHECKOUT)
    done = deploy(*args, env=env)
    assert done.returncode == 0, done.stderr
    repository = boto3.client("ecr").describe_repositories(repositoryNames=["vllm-sagemaker"])
    uri = repository["repositories"][0]["repositoryUri"] + ":cpu"
    assert done.stdout == uri + "\n"
    registry = uri.split("/")[0]
    commands = [
        f"buildah login --username AWS --password-stdin {registry}",
        f"buildah bud --layers --build-arg ENGINE=cpu -t {uri} {CHECKOUT}",
        f"buildah push {uri}",
    ]
    assert recorded_calls(tmp_path) == commands
    token = boto3.client("ecr").get_authorization_token()["authorizationData"][0]
    password = base64.b64decode(token["authorizationToken"]).decode().split(":", 1)[1]
    assert (tmp_path / "stdin").read_text() == password
    assert "deploy: builder: buildah, as --builder asks" in done.stderr.splitlines()

    (tmp_path / "calls").unlink()
    dry = deploy(*args, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == []  # the repository is there: no AWS write either
    assert recorded_calls(tmp_path) == []
    shown = [line.removeprefix("deploy: then: ") for line in dry.stderr.splitlines()]
    assert shown[-3:] == commands


@pytest.mark.parametrize(
    ("tools", "docker_info", "chosen"),
    [
        (("docker", "buildah", "podman"), 0, "docker, whose engine answers"),
        (("docker", "buildah", "podman"), 1, "buildah, as no Docker engine answers `docker info`"),
        (("docker", "podman"), 1, "podman, as no Docker engine answers `docker info`"),
        (("podman",), 0, "podman, as no docker on PATH"),
    ],
)
def test_which_builder_runs(
    tmp_path: Path, tools: tuple[str, ...], docker_info: int, chosen: str
) -> None:
    """Without --builder: docker when its engine answers, else buildah, else podman."""
    env = {**NO_AWS, **fake_builders(tmp_path, *tools, docker_info=docker_info)}
    done = deploy("image", "--context", CHECKOUT, "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"deploy: builder: {chosen}"
    tool = chosen.split(",")[0]
    assert lines[-2].startswith(f"deploy: then: {tool} b")
    assert "ENGINE=gpu -t '<registry>/vllm-sagemaker:gpu'" in lines[-2]
    assert [call for call in recorded_calls(tmp_path) if call != "docker info"] == []


def test_a_failing_builder_is_one_line(aws: dict[str, str], tmp_path: Path) -> None:
    env = fake_builders(tmp_path, "podman", failing="build")
    done = deploy(
        "image", "--target", "cpu", "--repository", "failing-build", "--context", CHECKOUT, env=env
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and done.stdout == ""
    build = recorded_calls(tmp_path)[-1]
    assert build.startswith("podman build --layers --build-arg ENGINE=cpu -t ")
    # The repository this run created goes with it (tests/deploy/test_rollback.py).
    assert done.stderr.splitlines()[-1] == (
        f"deploy: {build} failed with exit status 3; removed ECR repository failing-build"
    )
