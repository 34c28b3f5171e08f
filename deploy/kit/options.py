"""What the `deploy` commands make of the options they share (role, model source, notes), and
`say` (`deploy.base.say`'s). No boto3 here: `deploy.kit.cli` loads it for `--help`."""

import argparse
import os
from typing import TYPE_CHECKING

from vllm_sagemaker.deploy.base.say import say as say
from vllm_sagemaker.deploy.kit.plans.instances import gpu_count, image_target
from vllm_sagemaker.deploy.kit.plans.model import ROLE_PLACEHOLDER, ROLE_VARIABLE, ModelSource
from vllm_sagemaker.deploy.kit.plans.serverless import Serverless
from vllm_sagemaker.handler.core.config import SERVERLESS_MARKER

if TYPE_CHECKING:
    from vllm_sagemaker.deploy.base.reads import Reads


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


def instance_note(instance_type: str) -> None:
    if image_target(instance_type) == "cpu":
        say(
            f"CPU instance {instance_type}: the cpu image; the kit sets no tensor parallelism "
            "and no GPU inference AMI"
        )


def serverless_note(serverless: Serverless) -> None:
    say(
        f"serverless endpoint ({serverless}): the cpu image, and {SERVERLESS_MARKER}=true in the "
        "model's environment (the container keeps to Serverless Inference's 4 MB bodies and 60 s "
        "invocations)"
    )


def transform_note(instance_type: str) -> None:
    if gpu_count(instance_type):
        say(
            "note: this image (vLLM 0.32, built for a CUDA newer than 12.2) does not start on "
            "NVIDIA driver 470, which transform jobs on ml.g4dn and ml.g5 get by default; on "
            "driver 535 it may with --env VLLM_ENABLE_CUDA_COMPATIBILITY=1 --env "
            "VLLM_WORKER_MULTIPROC_METHOD=spawn (untested); for GPU batch work use an endpoint "
            "and `vllm-sagemaker batch --sagemaker-endpoint` (docs/deploy.md, Batch Transform on "
            "GPU)"
        )
