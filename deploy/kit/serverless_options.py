"""`deploy endpoint`'s serverless options (--serverless, --provisioned-concurrency). No boto3
here: `deploy.kit.cli` loads it for `--help`."""

import argparse

from vllm_sagemaker.deploy.kit.plans.serverless import (
    CONCURRENCY,
    DEFAULT_MAX_CONCURRENCY,
    FORM,
    Serverless,
    parsed,
)
from vllm_sagemaker.handler.core.config import SERVERLESS_MARKER, SERVERLESS_MEMORY_SIZES_MB


def add_serverless_options(parser: argparse.ArgumentParser) -> None:
    least, most = CONCURRENCY
    parser.add_argument(
        "--serverless",
        metavar=FORM,
        help="make a serverless endpoint (SageMaker Serverless Inference: CPUs only, billed per "
        "request, none while idle) instead of one on instances: MEMORY_MB of memory per copy ("
        + ", ".join(str(size) for size in SERVERLESS_MEMORY_SIZES_MB)
        + f"), at most MAX_CONCURRENCY invocations at once ({least}-{most}, default "
        f"{DEFAULT_MAX_CONCURRENCY}); the cpu image, and {SERVERLESS_MARKER}=true in the "
        "model's environment",
    )
    parser.add_argument(
        "--provisioned-concurrency",
        type=int,
        metavar="N",
        help="with --serverless: keep N copies warm (at most MAX_CONCURRENCY), billed while "
        "idle, so the first invocations wait for no cold start",
    )


def serverless(args: argparse.Namespace) -> Serverless | None:
    """What --serverless and --provisioned-concurrency ask for (checked before: `checks`);
    None for an endpoint on instances."""
    if args.serverless is None:
        return None
    return parsed(args.serverless, args.provisioned_concurrency)
