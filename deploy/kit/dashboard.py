"""`deploy dashboard`: write (or replace) the CloudWatch dashboard NAME for the endpoint NAME
from its variant and its model's environment; a dry run that cannot read them assumes what
`deploy endpoint` makes, and says so."""

import argparse
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.errors import ClientError
from vllm_sagemaker.deploy.base.plan import Plan, Step
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.options import add_name, say
from vllm_sagemaker.deploy.kit.plans.dashboard import (
    dashboard_body,
    dashboard_call,
    metrics_warning,
)
from vllm_sagemaker.deploy.kit.plans.scaling import VARIANT, metrics_env

SUMMARY = "write a CloudWatch dashboard for an endpoint"
DESCRIPTION = (
    "Write (or replace) the CloudWatch dashboard NAME for the endpoint NAME: SageMaker's metrics "
    "of it (invocations, model latency, CPU and GPU use, instances; for a serverless endpoint "
    "cold starts, memory and concurrency used) beside the container's own (time to first token "
    "and end-to-end latency p50/p95/p99, requests running and waiting, KV cache use, tokens per "
    "second), which it writes with SAGEMAKER_METRICS=cloudwatch."
)
CHECKS = (checks.REGION, checks.NAME)


def add_options(parser: argparse.ArgumentParser) -> None:
    add_name(parser, "dashboard", "the endpoint, and its dashboard")


@dataclass(frozen=True)
class Drawn:
    """What the dashboard draws of an endpoint: its first variant, its ServerlessConfig (None:
    on instances) and its model's environment."""

    variant: str
    serverless: dict[str, Any] | None
    env: dict[str, str]


def container_of(reads: Reads, name: str) -> Drawn | None:
    """The endpoint's first variant and its model's environment (assumed, in a dry run that
    cannot read them); None when there is no endpoint `name`."""
    assumed = len(reads.assumed)
    endpoint = reads.describe(
        Call("sagemaker", "DescribeEndpoint", {"EndpointName": name}),
        f"the plan assumes endpoint {name} exists as `deploy endpoint` makes it (variant "
        f"{VARIANT} on instances, its metrics under EndpointName {name})",
    )
    if len(reads.assumed) > assumed:
        return Drawn(VARIANT, None, metrics_env({}, name, None))
    if endpoint is None:
        return None
    config_name = {"EndpointConfigName": endpoint["EndpointConfigName"]}
    config = reads.describe(Call("sagemaker", "DescribeEndpointConfig", config_name))
    variants: list[dict[str, Any]] = (config or {}).get("ProductionVariants") or [{}]
    first = variants[0]
    model = (
        reads.describe(Call("sagemaker", "DescribeModel", {"ModelName": first["ModelName"]}))
        if "ModelName" in first
        else None
    )
    env = ((model or {}).get("PrimaryContainer") or {}).get("Environment") or {}
    return Drawn(first.get("VariantName", VARIANT), first.get("ServerlessConfig"), dict(env))


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    found = container_of(reads, args.name)
    region = run_region() or "<region>"
    if found is None:
        raise ClientError(
            f"no endpoint named {args.name} in {region}: the dashboard draws an endpoint's "
            "metrics; deploy it first (`vllm-sagemaker deploy endpoint`)"
        )
    warning = None if reads.assumed else metrics_warning(args.name, found.env)
    if warning:
        reads.note(warning)
    body = dashboard_body(region, args.name, found.variant, found.env, found.serverless)

    def report(answers: list[dict[str, Any]]) -> None:
        for answer in answers:
            for message in answer.get("DashboardValidationMessages", []):
                say(f"warning: CloudWatch: {message.get('Message', message)}")
        say(
            f"dashboard {args.name}: https://{region}.console.aws.amazon.com/cloudwatch/home"
            f"?region={region}#dashboards/dashboard/{args.name}"
        )

    return Plan((Step((dashboard_call(args.name, body),)),), report=report)
