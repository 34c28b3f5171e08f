"""`deploy endpoint --autoscale` and `deploy delete`'s calls for it: Application Auto Scaling on
the variant (MIN to MAX instances), one target-tracking policy on SageMaker's concurrency metric
or the container's RequestsWaiting (EMF). Pure rules."""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.handler.core import cloudwatch

if TYPE_CHECKING:  # boto3 loads when a command runs; `--help` loads this module without it
    from vllm_sagemaker.deploy.base.reads import Reads

SERVICE = "application-autoscaling"
NAMESPACE = "sagemaker"
DIMENSION = "sagemaker:variant:DesiredInstanceCount"
# The one policy the kit puts on a variant: a later --autoscale replaces it (PutScalingPolicy
# replaces a policy of the same name); a policy of another name is the user's and stays.
POLICY = "vllm-sagemaker-target-tracking"
# The variant the kit's endpoints have, and the one a container started by hand reports.
VARIANT = cloudwatch.DEFAULT_VARIANT

CONCURRENCY = "concurrency"
WAITING = "waiting"
SCALE_ON = (CONCURRENCY, WAITING)
# What each policy keeps its metric at, on average over the variant's instances, unless --target:
# concurrent requests per instance (vLLM batches them: a GPU serves dozens at once), and requests
# waiting in vLLM's queue per instance (a few: more means the engine is full).
DEFAULT_TARGETS = {CONCURRENCY: 32.0, WAITING: 5.0}
# SageMaker's metric of the requests in its model containers, every 10 s (AWS/SageMaker's
# ConcurrentRequestsPerModel), as target tracking names it.
CONCURRENCY_METRIC = "SageMakerVariantConcurrentRequestsPerModelHighResolution"

_RANGE = re.compile(r"(\d+):(\d+)")


@dataclass(frozen=True)
class Scaling:
    least: int
    most: int
    scale_on: str = CONCURRENCY
    target: float | None = None  # None: DEFAULT_TARGETS's


def parsed_range(value: str) -> tuple[int, int] | None:
    match = _RANGE.fullmatch(value.strip())
    return (int(match[1]), int(match[2])) if match else None


def autoscale_problem(value: str) -> str | None:
    found = parsed_range(value)
    if found is None:
        return f"--autoscale {value!r}: give MIN:MAX, the fewest and most instances, as 1:4"
    least, most = found
    if least < 1:
        return f"--autoscale {value}: an endpoint keeps at least 1 instance: give MIN 1 or more"
    if least > most:
        return f"--autoscale {value}: MIN {least} is more than MAX {most}"
    return None


def scaling_problem(
    autoscale: str | None, scale_on: str | None, target: float | None, no_wait: bool
) -> str | None:
    """What `deploy endpoint`'s scaling options cannot do together."""
    if autoscale is None and (scale_on is not None or target is not None):
        return "--scale-on and --target set --autoscale's policy: give --autoscale MIN:MAX too"
    if autoscale is not None and no_wait:
        return (
            "--autoscale: the variant is registered once the endpoint is InService; leave out "
            "--no-wait"
        )
    return None


def waiting_env_problem(scale_on: str | None, env: Mapping[str, str]) -> str | None:
    """`--scale-on waiting` needs the container's EMF documents: an --env that turns them off."""
    value = env.get(cloudwatch.METRICS_VARIABLE)
    if scale_on != WAITING or value is None or _setting(env, cloudwatch.METRICS_VARIABLE, ""):
        return None  # unset: the kit turns it on; another value: `serve`'s rule refuses it
    return (
        f"--scale-on {WAITING} scales on the container's {cloudwatch.REQUESTS_WAITING} metric, "
        f"which needs {cloudwatch.METRICS_VARIABLE}={cloudwatch.METRICS_ON}, not {value!r}: "
        f"leave {cloudwatch.METRICS_VARIABLE} out of --env"
    )


def metrics_env(env: Mapping[str, str], name: str, scaling: Scaling | None) -> dict[str, str]:
    """The container's environment: its EMF dimensions (unless --env names them), and EMF on
    to scale on its queue."""
    result = dict(env)
    result.setdefault(cloudwatch.ENDPOINT_VARIABLE, name)
    result.setdefault(cloudwatch.VARIANT_VARIABLE, VARIANT)
    if scaling is not None and scaling.scale_on == WAITING:
        result.setdefault(cloudwatch.METRICS_VARIABLE, cloudwatch.METRICS_ON)
    return result


def resource_id(endpoint: str, variant: str = VARIANT) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


def _target(endpoint: str) -> dict[str, str]:
    return {
        "ServiceNamespace": NAMESPACE,
        "ResourceId": resource_id(endpoint),
        "ScalableDimension": DIMENSION,
    }


def _setting(env: Mapping[str, str], name: str, default: str) -> str:
    """A metrics variable as `serve` reads it (`handler.core.metrics_settings`): stripped, and
    empty as unset."""
    return env.get(name, "").strip() or default


def emf_source(env: Mapping[str, str]) -> tuple[str, list[dict[str, str]]]:
    """The namespace and dimensions of a container's EMF documents, as `serve` reads them."""
    return _setting(env, cloudwatch.NAMESPACE_VARIABLE, cloudwatch.DEFAULT_NAMESPACE), [
        {
            "Name": cloudwatch.ENDPOINT_DIMENSION,
            "Value": _setting(env, cloudwatch.ENDPOINT_VARIABLE, cloudwatch.DEFAULT_ENDPOINT),
        },
        {
            "Name": cloudwatch.VARIANT_DIMENSION,
            "Value": _setting(env, cloudwatch.VARIANT_VARIABLE, VARIANT),
        },
    ]


def scaling_calls(endpoint: str, scaling: Scaling, env: Mapping[str, str]) -> list[Call]:
    """RegisterScalableTarget and PutScalingPolicy for the variant; `env`: `metrics_env`'s."""
    target = DEFAULT_TARGETS[scaling.scale_on] if scaling.target is None else scaling.target
    tracking: dict[str, Any] = {"TargetValue": target}
    if scaling.scale_on == CONCURRENCY:
        tracking["PredefinedMetricSpecification"] = {"PredefinedMetricType": CONCURRENCY_METRIC}
    else:  # the container's RequestsWaiting, averaged over the variant's instances
        namespace, dimensions = emf_source(env)
        tracking["CustomizedMetricSpecification"] = {
            "MetricName": cloudwatch.REQUESTS_WAITING,
            "Namespace": namespace,
            "Dimensions": dimensions,
            "Statistic": "Average",
            "Unit": cloudwatch.UNITS[cloudwatch.REQUESTS_WAITING],
        }
    return [
        Call(
            SERVICE,
            "RegisterScalableTarget",
            {**_target(endpoint), "MinCapacity": scaling.least, "MaxCapacity": scaling.most},
        ),
        Call(
            SERVICE,
            "PutScalingPolicy",
            {
                "PolicyName": POLICY,
                **_target(endpoint),
                "PolicyType": "TargetTrackingScaling",
                "TargetTrackingScalingPolicyConfiguration": tracking,
            },
        ),
    ]


def is_endpoints(endpoint: str, standing: Mapping[str, Any]) -> bool:
    """Whether a scalable target or policy is `endpoint`'s (never `endpoint/chat-prod/...`'s)."""
    return (
        standing.get("ServiceNamespace") == NAMESPACE
        and standing.get("ScalableDimension") == DIMENSION
        and str(standing.get("ResourceId", "")).startswith(f"endpoint/{endpoint}/variant/")
    )


def deletion(standing: Mapping[str, Any]) -> Call:
    """The deletion of a scaling policy or of a scalable target (as read, or as put)."""
    keys = ("ServiceNamespace", "ResourceId", "ScalableDimension")
    if "PolicyName" in standing:
        return Call(SERVICE, "DeleteScalingPolicy", {k: standing[k] for k in ("PolicyName", *keys)})
    return Call(SERVICE, "DeregisterScalableTarget", {k: standing[k] for k in keys})


def scaling_deletions(
    endpoint: str, targets: Sequence[Mapping[str, Any]], policies: Sequence[Mapping[str, Any]]
) -> list[Call]:
    """What `deploy delete` removes of `endpoint`'s scaling: its policies, then its targets."""
    return [deletion(held) for held in [*policies, *targets] if is_endpoints(endpoint, held)]


def standing(reads: "Reads", endpoint: str) -> tuple[list[Any], list[Any]]:
    """The scalable targets of `endpoint`'s variants and their scaling policies, as read."""
    targets = [
        target
        for target in reads.items(
            SERVICE, "DescribeScalableTargets", "ScalableTargets", ServiceNamespace=NAMESPACE
        )
        if is_endpoints(endpoint, target)
    ]
    policies = [
        policy
        for target in targets
        for policy in reads.items(
            SERVICE,
            "DescribeScalingPolicies",
            "ScalingPolicies",
            ServiceNamespace=NAMESPACE,
            ResourceId=target["ResourceId"],
            ScalableDimension=DIMENSION,
        )
        if policy.get("ResourceId") == target["ResourceId"]
    ]
    return targets, policies


def replaced(
    calls: Sequence[Call],
    targets: Sequence[Mapping[str, Any]],
    policies: Sequence[Mapping[str, Any]],
) -> list[Call]:
    """The calls that replace a standing target or policy: a failed run leaves them."""

    def held(call: Call) -> bool:
        standing = policies if "PolicyName" in call.params else targets
        keys = ("PolicyName", "ResourceId") if "PolicyName" in call.params else ("ResourceId",)
        return any(all(s.get(k) == call.params[k] for k in keys) for s in standing)

    return [call for call in calls if held(call)]
