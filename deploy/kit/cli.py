"""`vllm-sagemaker deploy ...`: the commands' options, the checks before any AWS call
(`deploy.kit.checks`) and the dispatch to `deploy.kit.<command>`. No boto3 here (`--help` stays
quick)."""

import argparse
import os
from collections.abc import Callable
from importlib import import_module

from vllm_sagemaker.deploy.base import profile, region
from vllm_sagemaker.deploy.base.calls import KEEP_OPTION, POLL_S
from vllm_sagemaker.deploy.base.invoke import add_api_key_argument
from vllm_sagemaker.deploy.image.build import ENGINES, REPOSITORY
from vllm_sagemaker.deploy.image.builders import BUILDERS
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.options import say
from vllm_sagemaker.deploy.kit.plans.endpoint import DEFAULT_INSTANCE_COUNT
from vllm_sagemaker.deploy.kit.plans.model import ROLE_VARIABLE
from vllm_sagemaker.deploy.kit.plans.shards import DEFAULT_SHARD_LINES
from vllm_sagemaker.deploy.kit.scaling_options import add_scaling_options
from vllm_sagemaker.deploy.kit.serverless_options import add_serverless_options

EXIT_STATUS = (
    "Exit status: 0 when done, 1 when AWS or the run failed, 2 when an option is refused "
    "(checked before any AWS call, in a dry run too)."
)


def main(args: argparse.Namespace) -> int:
    """Check the options (the first problem is refused; warnings are said), point boto3 at the
    region, run the command."""
    for warning in checks.check(args, os.environ):
        say(f"warning: {warning}")
    region.use_region(args.region, os.environ)
    return dispatch(args.deploy_command)(args)


def dispatch(name: str) -> Callable[[argparse.Namespace], int]:
    """What the `deploy` subcommand `name` does: `deploy.kit.<name>.main`, loaded (with boto3)
    only now."""
    main: Callable[[argparse.Namespace], int] = import_module(
        f"vllm_sagemaker.deploy.kit.{name}"
    ).main
    return main


def _model_options(
    parser: argparse.ArgumentParser, prefix_allowed: bool, required: bool = True
) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument(
        "--model-id",
        help="a Hugging Face model id the container downloads at start (HF_MODEL_ID)",
    )
    source.add_argument(
        "--model-data",
        metavar="S3_TAR_GZ",
        help="s3://bucket/.../model.tar.gz, which SageMaker unpacks into /opt/ml/model",
    )
    source.add_argument(
        "--model-prefix",
        metavar="S3_PREFIX",
        help="an uncompressed S3 prefix"
        + ("" if prefix_allowed else " (only with --stream-weights)"),
    )
    parser.add_argument(
        "--stream-weights",
        action="store_true",
        help="with --model-prefix: the container streams the weights from S3 to the engine "
        "(vLLM's Run:ai streamer) instead of SageMaker downloading them before start",
    )


def _container_options(
    parser: argparse.ArgumentParser,
    required: bool = True,
    image_default: bool = False,
    serverless: bool = False,
) -> None:
    """The image, the instances and the model's environment and role; with `image_default`,
    --image may be left out, and with `serverless`, --instance-type (for --serverless)."""
    parser.add_argument(
        "--image",
        required=required and not image_default,
        metavar="ECR_URI",
        help="the image in ECR: <account>.dkr.ecr.<region>.amazonaws.com/<repository>[:tag] "
        "(what `deploy image` prints); a tag naming the wrong image for the instance type "
        "(:gpu on a CPU instance, :cpu on a GPU one) is refused"
        + (
            f"; default: the one the instance type takes, {REPOSITORY}:cpu or :gpu, from ECR in "
            "the region (what `deploy image --target cpu|gpu` pushes)"
            if image_default
            else ""
        )
        + (
            "; with --serverless, a tag naming the gpu image is refused and the default is :cpu"
            if serverless
            else ""
        ),
    )
    parser.add_argument(
        "--instance-type",
        required=required and not serverless,
        metavar="TYPE",
        help="ml.<family>.<size>: a GPU type such as ml.g5.12xlarge takes the gpu image "
        "(tensor parallelism spans its GPUs), a CPU type such as ml.c7i.8xlarge the cpu image"
        + ("; give this or --serverless" if serverless else ""),
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a variable of the container's environment (SM_VLLM_*, SAGEMAKER_*; repeat for "
        "more); a value `serve` would refuse is refused here",
    )
    parser.add_argument(
        "--role",
        metavar="ARN",
        help=f"the execution role SageMaker runs the model as (default ${ROLE_VARIABLE})",
    )


def _transform_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-payload-mb",
        type=int,
        default=1,
        metavar="MB",
        help="the largest mini-batch SageMaker sends (1-100; times "
        "--max-concurrent-transforms at most 100)",
    )
    parser.add_argument(
        "--max-concurrent-transforms",
        type=int,
        default=2,
        metavar="N",
        help="mini-batches in flight per instance (0: SageMaker asks the container)",
    )


def _fleet_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-i", "--input-file", metavar="INPUT", help="the OpenAI batch file: a path or s3:// URL"
    )
    parser.add_argument(
        "-o", "--output-file", metavar="OUTPUT", help="where the answers go: a path or s3:// URL"
    )
    parser.add_argument("--error-file", metavar="PATH", help="failed lines go here")
    parser.add_argument(
        "--work-prefix",
        required=True,
        metavar="PREFIX",
        help="s3:// prefix (a directory with --local) for shards, outputs and fleet.json",
    )
    parser.add_argument(
        "--shard-lines",
        type=int,
        default=DEFAULT_SHARD_LINES,
        metavar="N",
        help=f"at most N lines per shard (default {DEFAULT_SHARD_LINES})",
    )
    parser.add_argument(
        "--instance-price", type=float, metavar="USD", help="price of one instance-hour"
    )
    parser.add_argument(
        "--cancel", action="store_true", help="start no new job for this --work-prefix"
    )
    parser.add_argument(
        "--local",
        nargs="+",
        metavar="URL",
        help="run the shards with the local transform runner against these containers",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=POLL_S,
        metavar="S",
        help=f"how often transform jobs are polled (default {POLL_S:g})",
    )


def _name(parser: argparse.ArgumentParser, command: str, names: str) -> None:
    parser.add_argument(
        "--name",
        required=True,
        help=f"{names}: {checks.NAME_CHARACTERS}, at most "
        f"{checks.longest_name(command)} characters",
    )


def _keep_on_failure(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        KEEP_OPTION,
        action="store_true",
        help=f"when the run fails, keep {what} it created, to look into (by default a failed run "
        "removes what it created, and says so)",
    )


def _no_wait(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--no-wait", action="store_true", help=f"return once it is created, without waiting {what}"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="deploy_command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dry-run",
        action="store_true",
        help="read what decides the plan, print the calls a real run makes as JSON, write nothing",
    )
    common.add_argument(
        "--region",
        help="the AWS region (default: $AWS_REGION, else $AWS_DEFAULT_REGION, else the AWS "
        "profile's)",
    )
    profile.add_profile_argument(common)

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name, parents=[common], help=summary, description=f"{description} {EXIT_STATUS}"
        )

    build = command(
        "image",
        "build the CPU or GPU image and push it to ECR",
        "Create the ECR repository when it is missing, then log in to ECR, build the image "
        "(--target: the Dockerfile's ENGINE) and push it, with docker, buildah or podman; "
        "prints the image URI to give --image (the builder's own output goes to stderr). Needs "
        "one of those builders and a checkout of this repository (the build context).",
    )
    build.add_argument(
        "--target",
        choices=ENGINES,
        default="gpu",
        help="gpu: vLLM's CUDA build, for GPU instances; cpu: vLLM's CPU build, for CPU instances",
    )
    build.add_argument("--repository", default=REPOSITORY, help="the ECR repository")
    build.add_argument("--tag", help="the image's tag (default: the target, cpu or gpu)")
    build.add_argument(
        "--context", default=".", help="the build context: the checkout's root, with the Dockerfile"
    )
    build.add_argument(
        "--builder",
        choices=BUILDERS,
        help="the tool that logs in, builds and pushes (default: docker when a Docker engine "
        "answers, else buildah, else podman, the first on PATH)",
    )
    _keep_on_failure(build, "the ECR repository")

    hosted = command(
        "endpoint",
        "create (or update) a SageMaker endpoint",
        "Create a real-time (or, with --async-output, async) endpoint on instances, or a "
        "serverless one (--serverless): a model, an endpoint config and the endpoint, then wait "
        "until it is InService. An endpoint of that name is updated instead, to a new model and "
        "config named NAME-<UTC time> (AWS refuses to update an endpoint on instances to "
        "serverless).",
    )
    _name(hosted, "endpoint", "the endpoint, its config and its model")
    _model_options(hosted, True)
    _container_options(hosted, image_default=True, serverless=True)
    hosted.add_argument(
        "--instance-count",
        type=int,
        metavar="N",
        help=f"instances behind it (default {DEFAULT_INSTANCE_COUNT})",
    )
    add_serverless_options(hosted)
    hosted.add_argument(
        "--async-output",
        metavar="S3_PREFIX",
        help="make it an async endpoint that writes its answers under this prefix",
    )
    add_scaling_options(hosted)
    _no_wait(hosted, "for InService")
    _keep_on_failure(hosted, "the model, endpoint config and endpoint")

    job = command(
        "transform",
        "run a Batch Transform job over JSON Lines",
        "Run a Batch Transform job over the JSON Lines files under --input (cut into shards "
        "when there are fewer files than instances); wait for it and print where each file's "
        "answers are.",
    )
    _name(job, "transform", "the transform job and its model")
    _model_options(job, False)
    job.add_argument(
        "--input", required=True, metavar="S3_PREFIX", help="the JSON Lines files to transform"
    )
    job.add_argument("--output", required=True, metavar="S3_PREFIX", help="where the .out files go")
    _container_options(job)
    job.add_argument(
        "--instance-count", type=int, default=1, metavar="N", help="instances of the job"
    )
    _transform_options(job)
    job.add_argument(
        "--join-source",
        choices=["Input", "None"],
        default="None",
        help="Input: each answer line also holds its input record",
    )
    _no_wait(job, "for the job to end")
    _keep_on_failure(job, "the model")

    fleet_job = command(
        "batch",
        "run an OpenAI batch file on a fleet of Batch Transform instances",
        "Run an OpenAI batch file on transform jobs, one instance each, --instance-count at a "
        "time (or on running containers with --local): the file is checked and cut into "
        "shards under --work-prefix, and the answers are merged in input order. Running the "
        "same command again finishes what an earlier run left.",
    )
    _name(fleet_job, "batch", "the model, and the jobs NAME-<shard>-<attempt>")
    _model_options(fleet_job, False, required=False)
    _container_options(fleet_job, required=False)
    fleet_job.add_argument(
        "--instance-count",
        type=int,
        default=1,
        metavar="N",
        help="transform jobs (one instance each) at once",
    )
    _transform_options(fleet_job)
    _fleet_options(fleet_job)
    add_api_key_argument(fleet_job, " (with --local)")

    call = command(
        "invoke",
        "call an endpoint",
        "Send one JSON request to an endpoint and print its answer (or stream it, or, for an "
        "async endpoint, print where the answer will appear).",
    )
    _name(call, "invoke", "the endpoint")
    call.add_argument("--body", required=True, help="the request: JSON, or @file holding it")
    mode = call.add_mutually_exclusive_group()
    mode.add_argument("--stream", action="store_true", help="print tokens as they arrive")
    mode.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="async endpoint: upload the body, print the S3 location of the answer",
    )

    call.add_argument(
        "--openai",
        action="store_true",
        help="send the body to the endpoint's OpenAI-compatible path (/openai/v1/chat/"
        "completions) with a bearer token, as an OpenAI client does, instead of InvokeEndpoint",
    )

    tokens = command(
        "token",
        "print what an OpenAI client needs to call an endpoint",
        "Make a bearer token for the endpoint's OpenAI-compatible path from your AWS credentials "
        "(as the SageMaker SDK's generate_token does: a SigV4 signature, made locally), check "
        "that the endpoint exists, and print OPENAI_BASE_URL and OPENAI_API_KEY as lines a "
        "shell can eval. Calling with the token needs the IAM actions "
        "sagemaker:CallWithBearerToken and sagemaker:InvokeEndpoint.",
    )
    _name(tokens, "token", "the endpoint")
    tokens.add_argument(
        "--expires",
        default="12h",
        help="how long the token is good for: 12h, 90m, 600s (at most 12 h, and never past "
        "your credentials' own expiry); default 12h",
    )
    tokens.add_argument(
        "--json", action="store_true", help="print {base_url, api_key, expires_at} as JSON"
    )

    remove = command(
        "delete",
        "delete what deploy created",
        "Delete the endpoint NAME and every endpoint config and model named NAME or "
        "NAME-<UTC time>; nothing else.",
    )
    _name(remove, "delete", "the endpoint to delete, with its configs and models")

    board = command(
        "dashboard",
        "write a CloudWatch dashboard for an endpoint",
        "Write (or replace) the CloudWatch dashboard NAME for the endpoint NAME: SageMaker's "
        "metrics of it (invocations, model latency, CPU and GPU use, instances; for a "
        "serverless endpoint cold starts, memory and concurrency used) beside the "
        "container's own (time to first token and end-to-end latency p50/p95/p99, requests "
        "running and waiting, KV cache use, tokens per second), which it writes with "
        "SAGEMAKER_METRICS=cloudwatch.",
    )
    _name(board, "dashboard", "the endpoint, and its dashboard")
