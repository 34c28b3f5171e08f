"""`deploy endpoint --autoscale` and `deploy delete`'s calls for it: Application Auto Scaling on
the variant (MIN to MAX instances), one target-tracking policy on SageMaker's concurrency metric
or the container's RequestsWaiting (EMF). Pure rules."""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.errors import Problem
from vllm_sagemaker.deploy.base.plan import Step

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
# Scale from zero: a step policy that adds one instance (or copy) when its CloudWatch alarm, on
# SageMaker's metric of calls that found no capacity, fires. The alarm's action, before the run
# has the policy's ARN (AWS gives it when the policy is put).
WAKE_POLICY = "vllm-sagemaker-scale-from-zero"
WAKE_ARN = f"<PolicyARN of {WAKE_POLICY}>"
WAKE_COOLDOWN_S = 60
ALARMS = "cloudwatch"
SAGEMAKER_METRICS = "AWS/SageMaker"
# An async endpoint from 0: its queued requests per instance, kept at DEFAULT_BACKLOG unless
# --target; woken by its backlog without an instance.
BACKLOG = "ApproximateBacklogSizePerInstance"
DEFAULT_BACKLOG = 5.0
BACKLOG_WITHOUT_CAPACITY = "HasBacklogWithoutCapacity"

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


def min_max_problem(option: str, value: str, example: str) -> Problem | None:
    """A MIN:MAX option (`--autoscale`, `--instances`) that is not two whole numbers, or whose
    MAX is under 1 or under its MIN."""
    found = parsed_range(value)
    if found is None:
        why = f"give MIN:MAX, the fewest and most instances, as {example}"
        return Problem(option, why, repr(value))
    least, most = found
    if most < 1:
        return Problem(option, "MAX must be 1 or more", value)
    if least > most:
        return Problem(option, f"MIN {least} is more than MAX {most}", value)
    return None


def autoscale_problem(value: str, async_output: str | None = None) -> Problem | None:
    found = parsed_range(value)
    if found and found[0] < 1 and not async_output:
        why = (
            "a real-time endpoint keeps at least 1 instance (give MIN 1 or more); an async "
            "endpoint (--async-output) scales to 0, and so do inference components (`deploy "
            "component --scale-to-zero`)"
        )
        return Problem("--autoscale", why, value)
    return min_max_problem("--autoscale", value, "1:4")


def scaling_problem(
    autoscale: str | None, scale_on: str | None, target: float | None, no_wait: bool
) -> Problem | None:
    """What `deploy endpoint`'s scaling options cannot do together."""
    if autoscale is None and (scale_on is not None or target is not None):
        why = "set --autoscale's policy: give --autoscale MIN:MAX too"
        return Problem("--scale-on and --target", why, sep=" ")
    found = parsed_range(autoscale) if autoscale else None
    if found and found[0] == 0 and scale_on is not None:
        why = f"an async endpoint scaling from 0 scales on its backlog ({BACKLOG}); leave "
        return Problem("--scale-on", why + "--scale-on out")
    if autoscale is not None and no_wait:
        why = "the variant is registered once the endpoint is InService; leave out --no-wait"
        return Problem("--autoscale", why)
    return None


def waiting_env_problem(scale_on: str | None, env: Mapping[str, str]) -> Problem | None:
    """`--scale-on waiting` needs the container's EMF documents: an --env that turns them off."""
    value = env.get(cloudwatch.METRICS_VARIABLE)
    if scale_on != WAITING or value is None or _setting(env, cloudwatch.METRICS_VARIABLE, ""):
        return None  # unset: the kit turns it on; another value: `serve`'s rule refuses it
    why = (
        f"scales on the container's {cloudwatch.REQUESTS_WAITING} metric, which needs "
        f"{cloudwatch.METRICS_VARIABLE}={cloudwatch.METRICS_ON}, not {value!r}: leave "
        f"{cloudwatch.METRICS_VARIABLE} out of --env"
    )
    return Problem("--scale-on", why, WAITING, sep=" ")


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


@dataclass(frozen=True)
class Scalable:
    """What Application Auto Scaling scales of SageMaker's: a variant's instances, or an
    inference component's copies (`plans.component.copies_of`): AWS's scalable target."""

    resource_id: str
    dimension: str = DIMENSION

    def params(self) -> dict[str, str]:
        return {
            "ServiceNamespace": NAMESPACE,
            "ResourceId": self.resource_id,
            "ScalableDimension": self.dimension,
        }

    def holds(self, standing: Mapping[str, Any]) -> bool:
        """Whether a scalable target or policy, as read, is this one's."""
        return all(standing.get(key) == value for key, value in self.params().items())


def variant(endpoint: str) -> Scalable:
    return Scalable(resource_id(endpoint))


def _setting(env: Mapping[str, str], name: str, default: str) -> str:
    """A metrics variable as `serve` reads it (`core.metrics_settings`): stripped, and
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


@dataclass(frozen=True)
class Wake:
    """What wakes a target scaled to zero: an alarm on SageMaker's `metric` for `dimension`
    (name, value), its `statistic` over `periods` periods of `period_s`."""

    metric: str
    dimension: tuple[str, str]
    statistic: str
    period_s: int
    periods: int


def alarm_name(target: Scalable) -> str:
    return f"{WAKE_POLICY} {target.resource_id}"


def register_call(target: Scalable, least: int, most: int) -> Call:
    params = {**target.params(), "MinCapacity": least, "MaxCapacity": most}
    return Call(SERVICE, "RegisterScalableTarget", params)


def tracking_call(target: Scalable, tracking: Mapping[str, Any]) -> Call:
    """The kit's one target-tracking policy on `target`."""
    return Call(
        SERVICE,
        "PutScalingPolicy",
        {
            "PolicyName": POLICY,
            **target.params(),
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": dict(tracking),
        },
    )


def wake_calls(target: Scalable, wake: Wake) -> list[Call]:
    """A step policy adding one (instance or copy) and the alarm that fires it when calls find
    no capacity; the alarm's action is `WAKE_ARN` until `armed`."""
    step = {
        "AdjustmentType": "ChangeInCapacity",
        "MetricAggregationType": "Maximum",
        "Cooldown": WAKE_COOLDOWN_S,
        "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1}],
    }
    name, value = wake.dimension
    alarm = {
        "AlarmName": alarm_name(target),
        "AlarmDescription": f"{target.resource_id} has calls without capacity: add one",
        "Namespace": SAGEMAKER_METRICS,
        "MetricName": wake.metric,
        "Dimensions": [{"Name": name, "Value": value}],
        "Statistic": wake.statistic,
        "Period": wake.period_s,
        "EvaluationPeriods": wake.periods,
        "DatapointsToAlarm": wake.periods,
        "Threshold": 1.0,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": "missing",
        "AlarmActions": [WAKE_ARN],
    }
    return [
        Call(
            SERVICE,
            "PutScalingPolicy",
            {
                "PolicyName": WAKE_POLICY,
                **target.params(),
                "PolicyType": "StepScaling",
                "StepScalingPolicyConfiguration": step,
            },
        ),
        Call(ALARMS, "PutMetricAlarm", alarm),
    ]


def apply(calls: Sequence[Call], make: Callable[[list[Call]], list[dict[str, Any]]]) -> None:
    """Make a plan's scaling calls with `make`; its wake alarm last, its action the step
    policy's ARN, which AWS gives only when the policy is put."""
    puts = [call for call in calls if call.service != ALARMS]
    arns = {
        call.params["PolicyName"]: answer.get("PolicyARN")
        for call, answer in zip(puts, make(puts), strict=True)
        if "PolicyName" in call.params
    }
    make(
        [
            Call(
                alarm.service,
                alarm.operation,
                {**alarm.params, "AlarmActions": [arns[WAKE_POLICY]]},
            )
            for alarm in calls
            if alarm.service == ALARMS
        ]
    )


def step(calls: Sequence[Call]) -> Step:
    """A plan's step of scaling calls, made by `apply`."""
    return Step(tuple(calls), make=apply)


def scaling_calls(endpoint: str, scaling: Scaling, env: Mapping[str, str]) -> list[Call]:
    """RegisterScalableTarget and PutScalingPolicy for the variant; `env`: `metrics_env`'s. From
    0 (an async endpoint): tracking its backlog, and woken by its backlog without capacity."""
    scaled = variant(endpoint)
    default = DEFAULT_BACKLOG if scaling.least == 0 else DEFAULT_TARGETS[scaling.scale_on]
    value = default if scaling.target is None else scaling.target
    wake: list[Call] = []
    tracking: dict[str, Any]
    if scaling.least == 0:
        by_endpoint = [{"Name": "EndpointName", "Value": endpoint}]
        tracking = {
            "TargetValue": value,
            "CustomizedMetricSpecification": {
                "MetricName": BACKLOG,
                "Namespace": SAGEMAKER_METRICS,
                "Dimensions": by_endpoint,
                "Statistic": "Average",
            },
        }
        waking = Wake(BACKLOG_WITHOUT_CAPACITY, ("EndpointName", endpoint), "Average", 60, 2)
        wake = wake_calls(scaled, waking)
    elif scaling.scale_on == CONCURRENCY:
        tracking = {
            "TargetValue": value,
            "PredefinedMetricSpecification": {"PredefinedMetricType": CONCURRENCY_METRIC},
        }
    else:  # the container's RequestsWaiting, averaged over the variant's instances
        namespace, dimensions = emf_source(env)
        tracking = {
            "TargetValue": value,
            "CustomizedMetricSpecification": {
                "MetricName": cloudwatch.REQUESTS_WAITING,
                "Namespace": namespace,
                "Dimensions": dimensions,
                "Statistic": "Average",
                "Unit": cloudwatch.UNITS[cloudwatch.REQUESTS_WAITING],
            },
        }
    return [
        register_call(scaled, scaling.least, scaling.most),
        tracking_call(scaled, tracking),
        *wake,
    ]


def deletion(standing: Mapping[str, Any]) -> Call:
    """The deletion of a scaling policy or of a scalable target (as read, or as put)."""
    keys = ("ServiceNamespace", "ResourceId", "ScalableDimension")
    if "PolicyName" in standing:
        return Call(SERVICE, "DeleteScalingPolicy", {k: standing[k] for k in ("PolicyName", *keys)})
    return Call(SERVICE, "DeregisterScalableTarget", {k: standing[k] for k in keys})


Owns = Callable[[Mapping[str, Any]], bool]


def owned_by(endpoint: str) -> Owns:
    """Whether a scalable target or policy is one of `endpoint`'s variants' (never those of
    `endpoint/chat-prod/...`)."""
    prefix = f"endpoint/{endpoint}/variant/"
    return lambda standing: (
        standing.get("ServiceNamespace") == NAMESPACE
        and standing.get("ScalableDimension") == DIMENSION
        and str(standing.get("ResourceId", "")).startswith(prefix)
    )


def scaling_deletions(
    owns: Owns, targets: Sequence[Mapping[str, Any]], policies: Sequence[Mapping[str, Any]]
) -> list[Call]:
    """What `deploy delete` removes of what `owns` picks out: its policies, then its targets."""
    return [deletion(held) for held in [*policies, *targets] if owns(held)]


def standing(reads: "Reads", owns: Owns) -> tuple[list[Any], list[Any]]:
    """The scalable targets `owns` picks out and their scaling policies, as read."""
    targets = [
        target
        for target in reads.items(
            SERVICE, "DescribeScalableTargets", "ScalableTargets", ServiceNamespace=NAMESPACE
        )
        if owns(target)
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
            ScalableDimension=target["ScalableDimension"],
        )
        if policy.get("ResourceId") == target["ResourceId"]
    ]
    return targets, policies


def standing_alarms(reads: "Reads", targets: Sequence[Scalable]) -> list[str]:
    """The kit's wake alarms of `targets` that CloudWatch holds."""
    if not targets:
        return []
    names = [alarm_name(target) for target in targets]
    read = Call(ALARMS, "DescribeAlarms", {"AlarmNames": names})
    return [alarm["AlarmName"] for alarm in (reads.describe(read) or {}).get("MetricAlarms", [])]


def alarm_deletion(names: Sequence[str]) -> list[Call]:
    return [Call(ALARMS, "DeleteAlarms", {"AlarmNames": list(names)})] if names else []


def replaced(
    calls: Sequence[Call],
    targets: Sequence[Mapping[str, Any]],
    policies: Sequence[Mapping[str, Any]],
    alarms: Sequence[str] = (),
) -> list[Call]:
    """The calls that replace a standing target, policy or alarm: a failed run leaves them."""

    def held(call: Call) -> bool:
        if call.service == ALARMS:
            return call.params["AlarmName"] in alarms
        standing = policies if "PolicyName" in call.params else targets
        keys = ("PolicyName", "ResourceId") if "PolicyName" in call.params else ("ResourceId",)
        return any(all(s.get(k) == call.params[k] for k in keys) for s in standing)

    return [call for call in calls if held(call)]
