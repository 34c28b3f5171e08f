"""`deploy component`: put a model on an endpoint as an inference component (several share one
endpoint's instances, each with its own GPUs, cores, memory and copies), making the endpoint
when it does not exist; update a component that exists; with --scale-to-zero, let its copies
(and the endpoint's instances) go to zero while idle. A failed run removes what it created
unless --keep-on-failure."""

import argparse
from functools import partial
from typing import Any

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.command import Check, given
from vllm_sagemaker.deploy.base.errors import ClientError, Problem, stop_at
from vllm_sagemaker.deploy.base.plan import Plan, Step, Wait
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.kit import checks, options
from vllm_sagemaker.deploy.kit.image_checks import image_region_problem
from vllm_sagemaker.deploy.kit.options import instance_note, role, source
from vllm_sagemaker.deploy.kit.plans import component, scaling
from vllm_sagemaker.deploy.kit.plans.component import Component
from vllm_sagemaker.deploy.kit.plans.endpoint import (
    MODEL_DOWNLOAD_S,
    STARTUP_HEALTH_CHECK_S,
    Instances,
)
from vllm_sagemaker.deploy.kit.plans.images import default_image
from vllm_sagemaker.deploy.kit.plans.instances import gpu_count
from vllm_sagemaker.deploy.kit.plans.model import create_model
from vllm_sagemaker.deploy.kit.plans.names import version, versioned
from vllm_sagemaker.deploy.kit.plans.rollback import undo_beside

SUMMARY = "put a model on an endpoint as an inference component"
DESCRIPTION = (
    "Put a model on the endpoint --endpoint as the inference component --name, with the GPUs, "
    "CPU cores, memory and copies it is given: several components share one endpoint's "
    "instances. The endpoint is made first when it does not exist (give --instance-type); a "
    "component of that name is updated instead, to a new model named NAME-<UTC time>. Calls "
    "reach it with `deploy invoke --component NAME`."
)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint",
        required=True,
        metavar="NAME",
        help="the endpoint the component runs on; made when it does not exist (with "
        "--instance-type)",
    )
    options.add_name(parser, "component", "the component and its model")
    options.add_model(parser, True)
    options.add_container(parser, required=False, image_default=True)
    parser.add_argument(
        "--instances",
        metavar="MIN:MAX",
        help="with --instance-type, for an endpoint the run makes: its instances, which "
        "SageMaker adds and removes as its components need (default 1:1; with "
        "--scale-to-zero 0:1)",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="the GPUs each copy gets, which its tensor parallelism spans (default 1 on a GPU "
        "instance); at most the instance type's",
    )
    parser.add_argument(
        "--cpus", type=float, metavar="N", help="the CPU cores each copy gets (default: none set)"
    )
    parser.add_argument(
        "--memory",
        type=int,
        default=component.DEFAULT_MEMORY_MB,
        metavar="MB",
        help=f"the memory each copy reserves (default {component.DEFAULT_MEMORY_MB})",
    )
    parser.add_argument(
        "--copies",
        type=int,
        default=1,
        metavar="K",
        help="copies of the model to run (default 1; 0 only with --scale-to-zero)",
    )
    least, most = component.TIMEOUT_RANGE
    parser.add_argument(
        "--startup-timeout",
        type=int,
        default=STARTUP_HEALTH_CHECK_S,
        metavar="S",
        help=f"seconds a copy has to answer /ping ({least}-{most}, default "
        f"{STARTUP_HEALTH_CHECK_S})",
    )
    parser.add_argument(
        "--download-timeout",
        type=int,
        default=MODEL_DOWNLOAD_S,
        metavar="S",
        help=f"seconds a copy has to download the model ({least}-{most}, default "
        f"{MODEL_DOWNLOAD_S})",
    )
    parser.add_argument(
        "--scale-to-zero",
        action="store_true",
        help="let the copies go to 0 while idle (Application Auto Scaling tracks "
        f"{component.INVOCATIONS_PER_COPY}) and start one when a call finds none (a CloudWatch "
        f"alarm on {component.NO_CAPACITY} fires a step policy); such a call fails, and the "
        "copy takes minutes to come (an instance when none is free, then the model's load)",
    )
    parser.add_argument(
        "--max-copies",
        type=int,
        metavar="N",
        help="with --scale-to-zero: the most copies it scales to (default --copies, at least 1)",
    )
    parser.add_argument(
        "--target",
        dest="target_value",
        type=float,
        metavar="N",
        help="with --scale-to-zero: the invocations a minute each copy is kept at (default "
        f"{component.DEFAULT_TARGET:g})",
    )
    options.add_no_wait(
        parser, "for the component to be InService (an endpoint the run makes is waited for)"
    )
    options.add_keep_on_failure(
        parser, "the endpoint, its config, the model, the component and its scaling"
    )


def zero_problem(
    scale_to_zero: bool, max_copies: int | None, target: float | None, no_wait: bool
) -> Problem | None:
    if not scale_to_zero and (max_copies is not None or target is not None):
        why = "set --scale-to-zero's scaling: give --scale-to-zero too"
        return Problem("--max-copies and --target", why, sep=" ")
    if scale_to_zero and no_wait:
        why = "the copies are registered once the component is InService; leave out --no-wait"
        return Problem("--scale-to-zero", why)
    return None


def made_problem(
    instance_type: str | None, instances: str | None, scale_to_zero: bool
) -> Problem | None:
    if instances is None:
        return None
    if instance_type is None:
        return Problem(
            "--instances", "it sizes an endpoint the run makes; give --instance-type too"
        )
    return component.instances_problem(instances, scale_to_zero)


def timeout_problem(option: str, value: int) -> Problem | None:
    return checks.range_problem(option, value, *component.TIMEOUT_RANGE)


ENDPOINT = Check("endpoint", component.endpoint_problem)
GPUS = Check("gpus instance_type", component.gpus_problem)
COPIES = Check("copies scale_to_zero", component.copies_problem)
TENSOR_PARALLEL = Check("environment gpus", component.copy_tensor_parallel_problem)
INSTANCE_RANGE = Check("instance_type instances scale_to_zero", made_problem)
ZERO = Check("scale_to_zero max_copies target_value no_wait", zero_problem)
NUMBERS = (
    Check("gpus", given(partial(checks.range_problem, "--gpus", least=1))),
    Check("cpus", given(partial(checks.positive_problem, "--cpus"))),
    Check("memory", partial(checks.range_problem, "--memory", least=1)),
    Check("max_copies", given(partial(checks.range_problem, "--max-copies", least=1))),
    Check("target_value", given(partial(checks.positive_problem, "--target"))),
    Check("startup_timeout", partial(timeout_problem, "--startup-timeout")),
    Check("download_timeout", partial(timeout_problem, "--download-timeout")),
)
CHECKS = (
    *(checks.REGION, checks.NAME, ENDPOINT, *checks.MODEL, *checks.INSTANCES),
    *(INSTANCE_RANGE, GPUS, COPIES, ZERO, *NUMBERS, *checks.CONTAINER, TENSOR_PARALLEL),
    checks.ROLE,
)


def hosting(reads: Reads, name: str, existing: dict[str, Any]) -> tuple[str, int]:
    """The instance type of the endpoint `name`, which must be one for components, and the
    fewest instances its managed instance scaling keeps."""
    config_name = existing["EndpointConfigName"]
    read = Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": config_name})
    variants = (reads.describe(read) or {}).get("ProductionVariants", [])
    if not variants:
        raise ClientError(
            f"endpoint {name}: its config {config_name} has no variant to put a component on"
        )
    if any(v.get("ModelName") for v in variants):
        raise ClientError(
            f"endpoint {name} runs a model on its variant, not inference components (it was "
            "made by `deploy endpoint` or another tool): give another --endpoint, which the run "
            "makes for components"
        )
    least = variants[0].get("ManagedInstanceScaling", {}).get("MinInstanceCount", 1)
    return str(variants[0].get("InstanceType", "")), int(least)


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    if args.image:
        stop_at(image_region_problem(args.image, run_region()))
    endpoint = Call("sagemaker", "DescribeEndpoint", {"EndpointName": args.endpoint})
    existing = reads.describe(
        endpoint,
        f"the plan assumes endpoint {args.endpoint} does not exist; if it does, the run puts "
        "the component on it (or stops if it runs a model, not components)",
    )
    made: list[Call] = []
    execution_role = role(args, reads)
    if existing:
        instance_type, least = hosting(reads, args.endpoint, existing)
        stop_at(component.gpus_problem(args.gpus, instance_type))
        for given, option in (
            (args.instance_type, "--instance-type"),
            (args.instances, "--instances"),
        ):
            if given:
                reads.note(
                    f"endpoint {args.endpoint} exists on {instance_type}; {option} is not used"
                )
        if args.scale_to_zero and least:
            reads.note(
                f"endpoint {args.endpoint} keeps at least {least} instance(s) (its managed "
                "instance scaling): the component's copies go to zero, its instances do not"
            )
    elif args.instance_type is None:
        where = run_region() or "<region>"
        raise ClientError(
            f"endpoint {args.endpoint} does not exist in {where}: give --instance-type (and "
            "--instances MIN:MAX) to make it for components"
        )
    else:
        instance_type = args.instance_type
        reads.notes += instance_note(instance_type)
        least, most = scaling.parsed_range(args.instances or "") or (
            (0 if args.scale_to_zero else 1),
            1,
        )
        made = component.endpoint_calls(args.endpoint, instance_type, least, most, execution_role)
    read = Call("sagemaker", "DescribeInferenceComponent", {"InferenceComponentName": args.name})
    held = reads.describe(
        read,
        f"the plan assumes no component {args.name} exists; if one does, the run updates it to a "
        f"new model named {args.name}-<UTC time>",
    )
    if held and held.get("EndpointName") != args.endpoint:
        raise ClientError(
            f"component {args.name} runs on endpoint {held.get('EndpointName')}, not "
            f"{args.endpoint}: give another --name, or delete it first"
        )
    updated = version() if held else None
    if updated:
        reads.note(
            f"component {args.name} exists; the run updates it to model {args.name}-{updated}"
        )
    model_name = versioned(args.name, updated) if updated else args.name
    gpus = args.gpus or (1 if gpu_count(instance_type) else None)
    given = Component(
        args.name,
        args.endpoint,
        gpus,
        args.cpus,
        args.memory,
        args.copies,
        args.startup_timeout,
        args.download_timeout,
    )
    image = args.image or default_image(reads, Instances(instance_type))
    env = scaling.metrics_env(checks.env_from_pairs(args.env), args.endpoint, None)
    model = create_model(
        model_name, image, source(args), component.component_env(env, gpus), execution_role
    )
    placed = [model, component.component_call(given, model_name, bool(held))]
    scaled = (
        component.zero_calls(args.name, args.max_copies or max(args.copies, 1), args.target_value)
        if args.scale_to_zero
        else []
    )
    target = component.copies_of(args.name)
    standing = scaling.standing(reads, target.holds) if held and scaled else ([], [])
    alarms = scaling.standing_alarms(reads, [target] if held and scaled else [])
    kept = scaling.replaced(scaled, *standing, alarms)
    # SageMaker places components on an endpoint InService only.
    made_step = (Step(tuple(made), Wait(endpoint, "EndpointStatus")),) if made else ()
    placing = Step(tuple(placed), Wait(read, "InferenceComponentStatus"))
    return Plan(
        (*made_step, placing, scaling.step(scaled)),
        undo=undo_beside(kept),
        keep_on_failure=args.keep_on_failure,
        no_wait=args.no_wait,
    )
