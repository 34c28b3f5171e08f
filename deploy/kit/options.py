"""The options several `deploy` commands share (the model, the container, transform jobs, the
name, --no-wait, --keep-on-failure) and what the commands make of them (role, model source,
notes). No boto3 here: `deploy.kit.cli` loads it for `--help`."""

import argparse
import os
from typing import TYPE_CHECKING

from vllm_sagemaker.core.execution_parameters import DEFAULT_CONCURRENCY, DEFAULT_PAYLOAD_MB
from vllm_sagemaker.deploy.base.calls import KEEP_OPTION
from vllm_sagemaker.deploy.base.say import say as say
from vllm_sagemaker.deploy.image.build import REPOSITORY
from vllm_sagemaker.deploy.kit.checks import NAME_CHARACTERS, longest_name
from vllm_sagemaker.deploy.kit.plans.instances import gpu_count, image_engine
from vllm_sagemaker.deploy.kit.plans.model import ROLE_PLACEHOLDER, ROLE_VARIABLE, ModelSource

if TYPE_CHECKING:
    from vllm_sagemaker.deploy.base.reads import Reads


def add_name(parser: argparse.ArgumentParser, command: str, names: str) -> None:
    parser.add_argument(
        "--name",
        required=True,
        help=f"{names}: {NAME_CHARACTERS}, at most {longest_name(command)} characters",
    )


def add_model(parser: argparse.ArgumentParser, prefix_allowed: bool, required: bool = True) -> None:
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


def add_container(
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


def add_transforms(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-payload-mb",
        type=int,
        default=DEFAULT_PAYLOAD_MB,
        metavar="MB",
        help="the largest mini-batch SageMaker sends (1-100; times "
        "--max-concurrent-transforms at most 100)",
    )
    parser.add_argument(
        "--max-concurrent-transforms",
        type=int,
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help="mini-batches in flight per instance (0: SageMaker asks the container)",
    )


def add_keep_on_failure(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        KEEP_OPTION,
        action="store_true",
        help=f"when the run fails, keep {what} it created, to look into (by default a failed run "
        "removes what it created, and says so)",
    )


def add_no_wait(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--no-wait", action="store_true", help=f"return once it is created, without waiting {what}"
    )


def role(args: argparse.Namespace, reads: "Reads") -> str:
    """--role, else $SAGEMAKER_ROLE_ARN; else (a dry run) a placeholder, said with the plan."""
    given = args.role or os.environ.get(ROLE_VARIABLE)
    if given:
        return given
    reads.assumed.append(
        f"no --role and no {ROLE_VARIABLE}, so the plan shows {ROLE_PLACEHOLDER} for the "
        f"execution role; the real run needs --role ARN or {ROLE_VARIABLE}"
    )
    return ROLE_PLACEHOLDER


def source(args: argparse.Namespace) -> ModelSource:
    return ModelSource(args.model_id, args.model_data, args.model_prefix, args.stream_weights)


def instance_note(instance_type: str) -> list[str]:
    """What a plan on `instance_type` tells of it."""
    if image_engine(instance_type) == "cpu":
        return [
            f"CPU instance {instance_type}: the cpu image; the kit sets no tensor parallelism "
            "and no GPU inference AMI"
        ]
    return []


def transform_note(instance_type: str) -> list[str]:
    """What a transform job's plan on `instance_type` tells of it."""
    if gpu_count(instance_type):
        return [
            "note: this image (vLLM 0.32, built for a CUDA newer than 12.2) does not start on "
            "NVIDIA driver 470, which transform jobs on ml.g4dn and ml.g5 get by default; on "
            "driver 535 it may with --env VLLM_ENABLE_CUDA_COMPATIBILITY=1 --env "
            "VLLM_WORKER_MULTIPROC_METHOD=spawn (untested); for GPU batch work use an endpoint "
            "and `vllm-sagemaker batch --sagemaker-endpoint` (docs/deploy.md, Batch Transform on "
            "GPU)"
        ]
    return []
