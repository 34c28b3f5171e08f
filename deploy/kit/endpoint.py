"""`deploy endpoint`: create (or update) a real-time, async or serverless endpoint, wait until it
is InService and, with --autoscale, put its variant under Application Auto Scaling; a failed run
removes what it created unless --keep-on-failure."""

import argparse
from functools import partial
from typing import Any

from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.core.config import SERVERLESS_MARKER, SERVERLESS_MEMORY_SIZES_MB
from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.command import Check, given
from vllm_sagemaker.deploy.base.errors import ClientError, Problem, stop_at
from vllm_sagemaker.deploy.base.plan import Plan, Step, Wait
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.kit import checks, options
from vllm_sagemaker.deploy.kit.image_checks import image_region_problem, wrong_image_problem
from vllm_sagemaker.deploy.kit.options import instance_note, role, source
from vllm_sagemaker.deploy.kit.plans import scaling, serverless
from vllm_sagemaker.deploy.kit.plans.endpoint import (
    DEFAULT_INSTANCE_COUNT,
    Instances,
    endpoint_calls,
    update_warnings,
)
from vllm_sagemaker.deploy.kit.plans.images import default_image
from vllm_sagemaker.deploy.kit.plans.names import version
from vllm_sagemaker.deploy.kit.plans.rollback import undo_beside
from vllm_sagemaker.deploy.kit.plans.scaling import (
    CONCURRENCY,
    CONCURRENCY_METRIC,
    DEFAULT_TARGETS,
    SCALE_ON,
    WAITING,
    Scaling,
    metrics_env,
    owned_by,
    parsed_range,
    replaced,
    scaling_calls,
    standing,
)
from vllm_sagemaker.deploy.kit.plans.serverless import Serverless, update_problem

SUMMARY = "create (or update) a SageMaker endpoint"
DESCRIPTION = (
    "Create a real-time (or, with --async-output, async) endpoint on instances, or a "
    "serverless one (--serverless): a model, an endpoint config and the endpoint, then wait "
    "until it is InService. An endpoint of that name is updated instead, to a new model and "
    "config named NAME-<UTC time> (AWS refuses to update an endpoint on instances to "
    "serverless)."
)


def add_options(parser: argparse.ArgumentParser) -> None:
    options.add_name(parser, "endpoint", "the endpoint, its config and its model")
    options.add_model(parser, True)
    options.add_container(parser, image_default=True, serverless=True)
    parser.add_argument(
        "--instance-count",
        type=int,
        metavar="N",
        help=f"instances behind it (default {DEFAULT_INSTANCE_COUNT})",
    )
    least, most = serverless.CONCURRENCY
    parser.add_argument(
        "--serverless",
        metavar=serverless.FORM,
        help="make a serverless endpoint (SageMaker Serverless Inference: CPUs only, billed per "
        "request, none while idle) instead of one on instances: MEMORY_MB of memory per copy ("
        + ", ".join(str(size) for size in SERVERLESS_MEMORY_SIZES_MB)
        + f"), at most MAX_CONCURRENCY invocations at once ({least}-{most}, default "
        f"{serverless.DEFAULT_MAX_CONCURRENCY}); the cpu image, and {SERVERLESS_MARKER}=true in "
        "the model's environment",
    )
    parser.add_argument(
        "--provisioned-concurrency",
        type=int,
        metavar="N",
        help="with --serverless: keep N copies warm (at most MAX_CONCURRENCY), billed while "
        "idle, so the first invocations wait for no cold start",
    )
    parser.add_argument(
        "--async-output",
        metavar="S3_PREFIX",
        help="make it an async endpoint that writes its answers under this prefix",
    )
    parser.add_argument(
        "--autoscale",
        metavar="MIN:MAX",
        help="scale the variant between MIN and MAX instances with Application Auto Scaling and "
        "a target-tracking policy, registered once the endpoint is InService; an update without "
        "it leaves a standing policy as it is. MIN 0 (async endpoints only): the policy tracks "
        f"the backlog per instance ({scaling.BACKLOG}, default --target "
        f"{scaling.DEFAULT_BACKLOG:g}) and a CloudWatch alarm on "
        f"{scaling.BACKLOG_WITHOUT_CAPACITY} starts an instance when requests wait with none",
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
        dest="target_value",
        type=float,
        metavar="N",
        help="the value the policy keeps its metric at, averaged over the instances (default "
        + ", ".join(f"{value:g} for {metric}" for metric, value in DEFAULT_TARGETS.items())
        + ")",
    )
    options.add_no_wait(parser, "for InService")
    options.add_keep_on_failure(parser, "the model, endpoint config and endpoint")


def instance_mode_problem(value: str | None, instance_type: str | None) -> Problem | None:
    if value is None and instance_type is None:
        why = "deploy endpoint needs one, as --instance-type ml.g5.2xlarge or --serverless 2048"
        return Problem("--instance-type or --serverless", why)
    return None


ASYNC_OUTPUT = Check("async_output", given(partial(checks.s3_problem, "--async-output")))
SERVERLESS = Check("serverless", given(serverless.serverless_problem))
PROVISIONED = Check("serverless provisioned_concurrency", serverless.provisioned_problem)
INSTANCES_OR_SERVERLESS = Check("serverless instance_type", instance_mode_problem)
SERVERLESS_CONFLICT = Check(
    " ".join(dest for dest, _, _ in serverless.CONFLICTS),
    serverless.conflict_problem,
    when="serverless",
)
SERVERLESS_IMAGE = Check(
    "image",
    given(partial(wrong_image_problem, wanted="cpu", why="Serverless Inference has no GPU")),
    when="serverless",
)
SERVERLESS_PREFIX = Check(
    "model_prefix stream_weights",
    partial(checks.copied_prefix_problem, "Serverless Inference", "serverless endpoints"),
    when="serverless",
)
AUTOSCALE = Check("autoscale async_output", given(scaling.autoscale_problem))
SCALING = Check("autoscale scale_on target_value no_wait", scaling.scaling_problem)
SCALE_ON_WAITING = Check("scale_on environment", scaling.waiting_env_problem)
TARGET_VALUE = Check("target_value", given(partial(checks.positive_problem, "--target")))
CHECKS = (
    *(checks.REGION, checks.NAME, *checks.MODEL, ASYNC_OUTPUT),
    *(SERVERLESS, PROVISIONED, INSTANCES_OR_SERVERLESS, SERVERLESS_CONFLICT),
    *(SERVERLESS_IMAGE, SERVERLESS_PREFIX, *checks.INSTANCES, checks.INSTANCE_COUNT),
    *(*checks.CONTAINER, SCALING, SCALE_ON_WAITING, AUTOSCALE, TARGET_VALUE, checks.ROLE),
)


def hosting(args: argparse.Namespace) -> Instances | Serverless:
    """Where the endpoint runs: serverless, or on --instance-type (checked before: `checks`)."""
    found = args.serverless and serverless.parsed(args.serverless, args.provisioned_concurrency)
    count = DEFAULT_INSTANCE_COUNT if args.instance_count is None else args.instance_count
    return found or Instances(args.instance_type, count)


def update_checked(
    reads: Reads, name: str, existing: dict[str, Any], where: Instances | Serverless, scales: bool
) -> tuple[list[Any], list[Any]]:
    """Stop when the endpoint `name` on instances is asked to be serverless (AWS refuses that);
    say what the update warns of; its scalable targets and policies (read when it `scales` or
    changes an instance type)."""
    config_name = {"EndpointConfigName": existing["EndpointConfigName"]}
    config = Call("sagemaker", "DescribeEndpointConfig", config_name)
    current = reads.describe(config) or {}
    problem = update_problem(name, current) if isinstance(where, Serverless) else None
    if problem:
        raise ClientError(problem)
    variants = current.get("ProductionVariants", [])
    wanted = where.instance_type
    moved = any(variant.get("InstanceType", wanted) != wanted for variant in variants)
    targets, policies = standing(reads, owned_by(name)) if scales or moved else ([], [])
    tags = reads.describe(Call("sagemaker", "ListTags", {"ResourceArn": existing["EndpointArn"]}))
    scaled = [target["ResourceId"] for target in targets]
    reads.notes += update_warnings(name, (tags or {}).get("Tags", []), variants, scaled, where)
    return targets, policies


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    if args.image:
        stop_at(image_region_problem(args.image, run_region()))
    where = hosting(args)
    describe = Call("sagemaker", "DescribeEndpoint", {"EndpointName": args.name})
    refused = (
        " (or stops if it runs on instances: AWS refuses to update one to serverless)"
        if isinstance(where, Serverless)
        else ""
    )
    existing = reads.describe(
        describe,
        f"the plan assumes endpoint {args.name} does not exist; if it does, the run creates a "
        f"model and config named {args.name}-<UTC time> and calls UpdateEndpoint instead" + refused,
    )
    # --autoscale, --scale-on and --target, checked before (`checks`).
    found = parsed_range(args.autoscale) if args.autoscale else None
    asked = Scaling(*found, args.scale_on or CONCURRENCY, args.target_value) if found else None
    held = update_checked(reads, args.name, existing, where, bool(asked)) if existing else ([], [])
    waking = [scaling.variant(args.name)] if existing and asked and asked.least == 0 else []
    alarms = scaling.standing_alarms(reads, waking)
    image = args.image or default_image(reads, where)
    if isinstance(where, Serverless):
        reads.note(
            f"serverless endpoint ({where}): the cpu image, and {SERVERLESS_MARKER}=true in the "
            "model's environment (the container keeps to Serverless Inference's 4 MB bodies and "
            "60 s invocations)"
        )
    else:
        reads.notes += instance_note(where.instance_type)
    updated = version() if existing else None
    if updated:
        reads.note(f"{args.name} exists; the run updates it to version {updated}")
    env = metrics_env(checks.env_from_pairs(args.env), args.name, asked)
    calls = endpoint_calls(
        args.name, image, source(args), where, env, role(args, reads), args.async_output, updated
    )
    scaled = scaling_calls(args.name, asked, env) if asked else []
    # An update's target and policy may stand already: the run replaces them, and a failed run
    # leaves what it replaced.
    kept = replaced(scaled, *held, alarms)
    return Plan(
        # Application Auto Scaling registers a variant of an endpoint InService only.
        (Step(tuple(calls), Wait(describe, "EndpointStatus")), scaling.step(scaled)),
        undo=undo_beside(kept),
        keep_on_failure=args.keep_on_failure,
        no_wait=args.no_wait,
    )
