"""`deploy endpoint`'s scaling options (--autoscale, --scale-on, --target). No boto3 here:
`deploy.kit.cli` loads it for `--help`."""

import argparse

from vllm_sagemaker.deploy.kit.plans.scaling import (
    CONCURRENCY,
    CONCURRENCY_METRIC,
    DEFAULT_TARGETS,
    SCALE_ON,
    WAITING,
)
from vllm_sagemaker.handler.core import cloudwatch


def add_scaling_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--autoscale",
        metavar="MIN:MAX",
        help="scale the variant between MIN and MAX instances (MIN 1 or more) with Application "
        "Auto Scaling and a target-tracking policy, registered once the endpoint is InService; "
        "an update without it leaves a standing policy as it is",
    )
    parser.add_argument(
        "--scale-on",
        choices=SCALE_ON,
        help=f"{CONCURRENCY} (the default): the requests in each instance's container, "
        f"SageMaker's own metric every 10 s ({CONCURRENCY_METRIC}); {WAITING}: the requests "
        f"waiting in vLLM's queue ({cloudwatch.REQUESTS_WAITING}, from the container's EMF "
        f"documents, so it sets {cloudwatch.METRICS_VARIABLE}={cloudwatch.METRICS_ON})",
    )
    parser.add_argument(
        "--target",
        dest="scale_target",
        type=float,
        metavar="N",
        help="the value the policy keeps its metric at, averaged over the instances (default "
        + ", ".join(f"{value:g} for {metric}" for metric, value in DEFAULT_TARGETS.items())
        + ")",
    )
