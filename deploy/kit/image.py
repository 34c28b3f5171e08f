"""`deploy image`: make the ECR repository if it is missing, log in, build the CPU or GPU image
and push it with docker, buildah or podman, print its URI; a failure removes a repository the
run created, unless --keep-on-failure."""

import argparse
import base64
import subprocess
from collections.abc import Sequence
from pathlib import Path

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.command import Check, given
from vllm_sagemaker.deploy.base.errors import ClientError, UsageError, stop_at
from vllm_sagemaker.deploy.base.plan import Make, Plan, Step
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.image import build, builders
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.image_checks import (
    context_problem,
    engine_tag_problem,
    image_name_problem,
    repository_problem,
    tag_problem,
)
from vllm_sagemaker.deploy.kit.options import add_keep_on_failure, say
from vllm_sagemaker.deploy.kit.plans.names import TAGS
from vllm_sagemaker.deploy.kit.plans.rollback import undo

SUMMARY = "build the CPU or GPU image and push it to ECR"
DESCRIPTION = (
    "Create the ECR repository when it is missing, then log in to ECR, build the image "
    "(--target: the Dockerfile's ENGINE) and push it, with docker, buildah or podman; prints the "
    "image URI to give --image (the builder's own output goes to stderr). Needs one of those "
    "builders and a checkout of this repository (the build context)."
)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        dest="engine",
        choices=build.ENGINES,
        default="gpu",
        help="gpu: vLLM's CUDA build, for GPU instances; cpu: vLLM's CPU build, for CPU instances",
    )
    parser.add_argument("--repository", default=build.REPOSITORY, help="the ECR repository")
    parser.add_argument("--tag", help="the image's tag (default: the target, cpu or gpu)")
    parser.add_argument(
        "--context", default=".", help="the build context: the checkout's root, with the Dockerfile"
    )
    parser.add_argument(
        "--builder",
        choices=builders.BUILDERS,
        help="the tool that logs in, builds and pushes (default: docker when a Docker engine "
        "answers, else buildah, else podman, the first on PATH)",
    )
    add_keep_on_failure(parser, "the ECR repository")


REPOSITORY = Check("repository", repository_problem)
TAG = Check("tag", given(tag_problem))
ENGINE_TAG = Check("tag engine", given(engine_tag_problem))
CONTEXT = Check("context", context_problem)
CHECKS = (checks.REGION, REPOSITORY, TAG, ENGINE_TAG, CONTEXT)


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    choice = builders.on_this_machine(args.builder)
    if choice.tool is None:
        raise UsageError(choice.why)
    tool = choice.tool
    region = run_region()
    if region:
        stop_at(image_name_problem(args.repository, region))
    reads.note(f"builder: {choice.why}")
    tag = args.tag or build.default_tag(args.engine)
    describe = Call("ecr", "DescribeRepositories", {"repositoryNames": [args.repository]})
    found = reads.describe(describe, f"the plan assumes repository {args.repository} is missing")
    create = Call("ecr", "CreateRepository", {"repositoryName": args.repository, "tags": TAGS})

    def commands(repository_uri: str, registry: str, user: str) -> list[list[str]]:
        uri = f"{repository_uri}:{tag}"
        spec = build.Build(args.engine, uri, Path(args.context))
        return [
            builders.login(tool, registry, user),
            build.command(tool, spec),
            builders.push(tool, uri),
        ]

    def build_and_push(calls: Sequence[Call], make: Make) -> None:
        answers = make(list(calls))
        repository = answers[0]["repository"] if answers else (found or {})["repositories"][0]
        (auth,) = make([Call("ecr", "GetAuthorizationToken", {})])
        token = auth["authorizationData"][0]
        user, password = base64.b64decode(token["authorizationToken"]).decode().split(":", 1)
        registry = builders.registry_host(token["proxyEndpoint"])
        login, *rest = commands(repository["repositoryUri"], registry, user)
        _run_builder(login, password)
        for command in rest:
            _run_builder(command)
        print(f"{repository['repositoryUri']}:{tag}")

    shown = found["repositories"][0]["repositoryUri"] if found else f"<registry>/{args.repository}"
    registry = shown.split("/", 1)[0]
    then = [f"then: {build.shown(c)}" for c in commands(shown, registry, builders.ECR_USER)]
    return Plan(
        (Step(() if found else (create,), make=build_and_push),),
        undo=undo,
        keep_on_failure=args.keep_on_failure,
        then=tuple(then),
    )


def _run_builder(command: list[str], stdin: str | None = None) -> None:
    """Run a builder's command with its output on stderr (stdout holds only the image URI)."""
    say(f"running: {build.shown(command)}")
    try:
        subprocess.run(
            command,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            stdout=2,  # stderr's file descriptor
            text=True,
            check=True,
        )
    except OSError as error:  # the builder went from PATH, or cannot run
        raise ClientError(f"{command[0]} could not start: {error.strerror}") from error
