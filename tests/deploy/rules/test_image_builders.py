"""Which builder `deploy image` chooses (docker, buildah, podman) and why, asking `docker info`
only when it matters; the login and push commands; a failed command as one line."""

import subprocess
from collections.abc import Callable

import pytest

from vllm_sagemaker.deploy.base import errors
from vllm_sagemaker.deploy.image import builders


def never() -> bool:
    raise AssertionError("docker info was asked when it did not matter")


@pytest.mark.parametrize(
    ("asked", "on_path", "answers", "tool", "why"),
    [
        (None, {"docker", "buildah", "podman"}, True, "docker", "docker, whose engine answers"),
        (None, {"docker", "buildah", "podman"}, False, "buildah", "buildah, as no Docker engine"),
        (None, {"docker", "podman"}, False, "podman", "podman, as no Docker engine answers"),
        (None, {"buildah", "podman"}, never, "buildah", "buildah, as no docker on PATH"),
        (None, {"podman"}, never, "podman", "podman, as no docker on PATH"),
        (None, set(), never, None, "deploy image needs a container builder: no docker on PATH"),
        (None, {"docker"}, False, None, "deploy image needs a container builder: no Docker engine"),
        ("buildah", {"docker", "buildah"}, never, "buildah", "buildah, as --builder asks"),
        ("podman", {"podman"}, never, "podman", "podman, as --builder asks"),
        ("docker", {"docker"}, True, "docker", "docker, as --builder asks"),
        ("docker", {"docker", "buildah"}, False, None, "--builder docker: no Docker engine"),
        ("docker", {"buildah"}, never, None, "--builder docker: no docker on PATH"),
        ("podman", {"docker", "buildah"}, never, None, "--builder podman: no podman on PATH"),
    ],
)
def test_which_builder(
    asked: str | None,
    on_path: set[str],
    answers: bool | Callable[[], bool],
    tool: str | None,
    why: str,
) -> None:
    """docker when its engine answers, else buildah, else podman; `docker info` is asked only
    when docker is on PATH and could be the one."""
    docker_answers = answers if callable(answers) else lambda: answers
    found = {name: name in on_path for name in builders.BUILDERS}
    choice = builders.choose(asked, found, docker_answers)
    assert choice.tool == tool
    assert choice.why.startswith(why), choice.why


@pytest.mark.parametrize(
    ("tool", "proxy", "login"),
    [
        (
            "buildah",
            "https://123456789012.dkr.ecr.us-east-1.amazonaws.com",
            "buildah login --username AWS --password-stdin 123456789012.dkr.ecr.us-east-1."
            "amazonaws.com",
        ),
        (
            "docker",
            "https://123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/",
            "docker login --username AWS --password-stdin 123456789012.dkr.ecr.cn-north-1."
            "amazonaws.com.cn",
        ),
    ],
)
def test_login_and_push_commands(tool: str, proxy: str, login: str) -> None:
    registry = builders.registry_host(proxy)
    assert " ".join(builders.login(tool, registry)) == login
    assert builders.push(tool, f"{registry}/r:cpu") == [tool, "push", f"{registry}/r:cpu"]


def test_a_failed_command_is_one_line() -> None:
    failed = subprocess.CalledProcessError(3, ["buildah", "bud", "-t", "a b:cpu", "."])
    assert errors.line_of(failed) == "buildah bud -t 'a b:cpu' . failed with exit status 3"
