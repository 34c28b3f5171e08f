"""`deploy endpoint`: create (or update) a real-time, async or serverless endpoint, wait until it
is InService and, with --autoscale, put its variant under Application Auto Scaling; a failed run
removes what it created unless --keep-on-failure."""

import argparse
from typing import Any

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.errors import ClientError, Refused, refuse
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.base.run import Rollback, execute, not_waited, wait_for
from vllm_sagemaker.deploy.image import build
from vllm_sagemaker.deploy.kit.checks import env_from_pairs
from vllm_sagemaker.deploy.kit.image_checks import image_region_problem
from vllm_sagemaker.deploy.kit.options import instance_note, role, say, serverless_note, source
from vllm_sagemaker.deploy.kit.plans.endpoint import (
    DEFAULT_INSTANCE_COUNT,
    Instances,
    endpoint_calls,
    update_warnings,
)
from vllm_sagemaker.deploy.kit.plans.instances import image_target
from vllm_sagemaker.deploy.kit.plans.names import version
from vllm_sagemaker.deploy.kit.plans.rollback import undo_beside
from vllm_sagemaker.deploy.kit.plans.scaling import (
    CONCURRENCY,
    Scaling,
    metrics_env,
    parsed_range,
    replaced,
    scaling_calls,
    standing,
)
from vllm_sagemaker.deploy.kit.plans.serverless import Serverless, update_problem
from vllm_sagemaker.deploy.kit.serverless_options import serverless


def default_image(reads: Reads, hosted: Instances | Serverless) -> str:
    """The image for an endpoint given no --image: `deploy image --target T`'s (cpu on
    Serverless), which ECR must hold in the region (a dry run that cannot read ECR assumes it
    does)."""
    instance_type = None if isinstance(hosted, Serverless) else hosted.instance_type
    target = image_target(instance_type) if instance_type else "cpu"
    if target is None:  # refused before (checks.no_image_problem)
        raise Refused(f"--image: not given, and {instance_type} takes no image the kit knows")
    repository, tag = build.REPOSITORY, build.default_tag(target)
    first = f"run `vllm-sagemaker deploy image --target {target}` first, or give --image"
    assumed = len(reads.assumed)
    found = reads.describe(
        Call("ecr", "DescribeRepositories", {"repositoryNames": [repository]}),
        f"the plan assumes ECR holds {repository}:{tag} (what `deploy image --target "
        f"{target}` pushes)",
    )
    if len(reads.assumed) > assumed:
        return f"<account>.dkr.ecr.<region>.amazonaws.com/{repository}:{tag}"
    where = run_region()
    if found is None:
        raise ClientError(
            f"no --image given, and ECR holds no repository {repository} in {where}: " + first
        )
    images = Call(
        "ecr", "DescribeImages", {"repositoryName": repository, "imageIds": [{"imageTag": tag}]}
    )
    if reads.describe(images) is None:
        raise ClientError(
            f"no --image given, and ECR's {repository} in {where} holds no image tagged {tag}: "
            + first
        )
    uri = f"{found['repositories'][0]['repositoryUri']}:{tag}"
    say(f"image: {uri} (no --image given)")
    return uri


def hosting(args: argparse.Namespace) -> Instances | Serverless:
    """Where the endpoint runs: serverless, or on --instance-type (checked before: `checks`)."""
    found = serverless(args)
    if found is not None:
        return found
    count = DEFAULT_INSTANCE_COUNT if args.instance_count is None else args.instance_count
    return Instances(args.instance_type, count)


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
    wanted = where.instance_type if isinstance(where, Instances) else None
    moved = any(variant.get("InstanceType", wanted) != wanted for variant in variants)
    targets, policies = standing(reads, name) if scales or moved else ([], [])
    tags = reads.describe(Call("sagemaker", "ListTags", {"ResourceArn": existing["EndpointArn"]}))
    scaled = [target["ResourceId"] for target in targets]
    for line in update_warnings(name, (tags or {}).get("Tags", []), variants, scaled, where):
        say(line)
    return targets, policies


def main(args: argparse.Namespace) -> int:
    if args.image:
        refuse(image_region_problem(args.image, run_region()))
    reads = Reads(args.dry_run)
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
    asked = Scaling(*found, args.scale_on or CONCURRENCY, args.scale_target) if found else None
    held = update_checked(reads, args.name, existing, where, bool(asked)) if existing else ([], [])
    image = args.image or default_image(reads, where)
    if isinstance(where, Serverless):
        serverless_note(where)
    else:
        instance_note(where.instance_type)
    updated = version() if existing else None
    if updated:
        say(f"{args.name} exists; the run updates it to version {updated}")
    env = metrics_env(env_from_pairs(args.env), args.name, asked)
    calls = endpoint_calls(
        args.name, image, source(args), where, env, role(args, reads), args.async_output, updated
    )
    scaled = scaling_calls(args.name, asked, env) if asked else []
    # An update's target and policy may stand already: the run replaces them, and a failed run
    # leaves what it replaced.
    kept = replaced(scaled, *held)
    if args.dry_run:
        execute(calls + scaled, True, reads.assumed)
        return 0
    with Rollback(undo_beside(kept), args.keep_on_failure) as rollback:
        execute(calls, False, rollback=rollback)
        if args.no_wait:
            not_waited(describe)
        else:
            wait_for(describe, "EndpointStatus", {"InService"}, {"Failed"})
        # Application Auto Scaling registers a variant of an endpoint InService only.
        execute(scaled, False, rollback=rollback)
    return 0
