"""Which container builder `deploy image` runs: docker when its engine answers `docker info`,
else buildah, else podman (no daemon), the first on PATH, unless `--builder` names one; and the
ECR login and push, the same for the three."""

import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vllm_sagemaker.deploy.base.errors import Problem
from vllm_sagemaker.deploy.image.build import DAEMONLESS

BUILDERS = ("docker", *DAEMONLESS)
# How long `docker info` may take to say whether an engine answers.
DOCKER_INFO_S = 30.0
# ECR's user name for the password GetAuthorizationToken gives.
ECR_USER = "AWS"


@dataclass(frozen=True)
class Choice:
    """The builder to run (None: none is usable) and why, or the problem, as one line."""

    tool: str | None
    why: str


def choose(
    asked: str | None, on_path: Mapping[str, bool], docker_answers: Callable[[], bool]
) -> Choice:
    """The builder for `--builder asked`; `docker_answers` runs only when docker may be chosen."""
    if asked is not None:
        if not on_path.get(asked):
            why = (
                f"no {asked} on PATH; install it, or leave out --builder to use whichever of "
                "docker, buildah and podman is here"
            )
            return Choice(None, Problem("--builder", why, asked))
        if asked == "docker" and not docker_answers():
            why = (
                "no Docker engine answers `docker info`; start one, or build with --builder "
                "buildah or --builder podman"
            )
            return Choice(None, Problem("--builder", why, asked))
        return Choice(asked, f"{asked}, as --builder asks")
    if on_path.get("docker") and docker_answers():
        return Choice("docker", "docker, whose engine answers")
    no_engine = (
        "no Docker engine answers `docker info`" if on_path.get("docker") else "no docker on PATH"
    )
    for tool in BUILDERS[1:]:
        if on_path.get(tool):
            return Choice(tool, f"{tool}, as {no_engine}")
    return Choice(
        None,
        f"deploy image needs a container builder: {no_engine}, and neither buildah nor podman "
        "is on PATH; start Docker, or install buildah or podman (they need no daemon)",
    )


def on_this_machine(asked: str | None) -> Choice:
    """`choose` over this machine's PATH, asking `docker info` when it has to."""

    def docker_answers() -> bool:
        quiet = subprocess.DEVNULL
        try:
            done = subprocess.run(
                ["docker", "info"], stdin=quiet, stdout=quiet, stderr=quiet, timeout=DOCKER_INFO_S
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0

    return choose(
        asked, {tool: shutil.which(tool) is not None for tool in BUILDERS}, docker_answers
    )


def registry_host(proxy_endpoint: str) -> str:
    """`https://123456789012.dkr.ecr.us-east-1.amazonaws.com` -> the host name `login` takes."""
    return proxy_endpoint.split("://", 1)[-1].rstrip("/")


def login(tool: str, registry: str, user: str = ECR_USER) -> list[str]:
    """Logging `tool` in to `registry`; the password goes on stdin."""
    return [tool, "login", "--username", user, "--password-stdin", registry]


def push(tool: str, image: str) -> list[str]:
    return [tool, "push", image]
