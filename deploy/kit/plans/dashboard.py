"""`deploy dashboard`'s call: one PutDashboard drawing SageMaker's metrics of an endpoint's variant
(on instances or serverless) beside the container's own (`handler.core.cloudwatch`'s EMF), a
pure function of the endpoint, variant, region and the container's environment.
"""

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.kit.plans.scaling import emf_source
from vllm_sagemaker.handler.core import cloudwatch

# SageMaker's endpoint metrics (dimensions EndpointName and VariantName), with their units.
PLATFORM = "AWS/SageMaker"
PLATFORM_METRICS = {
    "Invocations": "None",
    "Invocation4XXErrors": "None",
    "Invocation5XXErrors": "None",
    "ModelLatency": "Microseconds",
    "ConcurrentRequestsPerModel": "None",
}
# Its instances' metrics (the same dimensions), in percent: each instance reports once a minute,
# so a minute's sample count of CPUUtilization is the variant's instance count.
INSTANCES = "/aws/sagemaker/Endpoints"
INSTANCE_METRICS = {
    "CPUUtilization": "Percent",
    "MemoryUtilization": "Percent",
    "GPUUtilization": "Percent",
    "GPUMemoryUtilization": "Percent",
}
# What SageMaker publishes of a serverless variant beside PLATFORM_METRICS' invocations and
# latency (AWS/SageMaker; its memory under INSTANCES): cold starts (ModelSetupTime, and
# OverheadLatency, which includes them), the concurrency used of MaxConcurrency and, with
# ProvisionedConcurrency, of the copies kept warm. It has no CPU or GPU metrics, nor
# ConcurrentRequestsPerModel ("Monitor a serverless endpoint": the list is exhaustive).
SERVERLESS_METRICS = {
    "ModelSetupTime": "Microseconds",
    "OverheadLatency": "Microseconds",
    "ServerlessConcurrentExecutionsUtilization": "None",
}
PROVISIONED_METRICS = {
    "ServerlessProvisionedConcurrencyUtilization": "None",
    "ServerlessProvisionedConcurrencyInvocations": "Count",
    "ServerlessProvisionedConcurrencySpilloverInvocations": "Count",
}
PERCENTILES = ("p50", "p95", "p99")
PERIOD_S = 60
_WIDTH, _HEIGHT, _COLUMNS = 12, 6, 2
Widget = tuple[str, list[list[Any]]]
# A widget's line of one namespace: (metric, statistic, label) -> the line.
Line = Callable[..., list[Any]]


def _metric(
    namespace: str, name: str, dimensions: Sequence[Mapping[str, str]], stat: str, label: str
) -> list[Any]:
    """One line of a widget: CloudWatch's [namespace, name, dimension, value, ..., options]."""
    pairs = [part for dimension in dimensions for part in (dimension["Name"], dimension["Value"])]
    return [namespace, name, *pairs, {"stat": stat, "label": label}]


def dashboard_body(
    region: str,
    endpoint: str,
    variant: str,
    env: Mapping[str, str],
    serverless: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The dashboard of `endpoint`'s `variant` in `region`; `env` is its container's environment,
    `serverless` the variant's ServerlessConfig (None: it runs on instances)."""
    platform = [
        {"Name": cloudwatch.ENDPOINT_DIMENSION, "Value": endpoint},
        {"Name": cloudwatch.VARIANT_DIMENSION, "Value": variant},
    ]

    def lines_of(namespace: str, dimensions: list[dict[str, str]]) -> Line:
        def line(name: str, stat: str, label: str | None = None) -> list[Any]:
            return _metric(namespace, name, dimensions, stat, label or f"{name} {stat}")

        return line

    aws, instance, own = (
        lines_of(PLATFORM, platform),
        lines_of(INSTANCES, platform),
        lines_of(*emf_source(env)),
    )

    def percentiles(line: Line, name: str) -> list[list[Any]]:
        return [line(name, stat) for stat in PERCENTILES]

    each = "instance" if serverless is None else "container"
    latency = percentiles(aws, "ModelLatency")
    if serverless is None:
        platform_widgets: list[Widget] = [
            ("Instances", [instance("CPUUtilization", "SampleCount", "instances")])
        ]
        running = [aws("ConcurrentRequestsPerModel", "Average", "in the container (SageMaker)")]
        use = [("CPU and GPU use (%)", [instance(name, "Average") for name in INSTANCE_METRICS])]
    else:
        latency.append(aws("OverheadLatency", "p99", "OverheadLatency p99 (cold starts too)"))
        platform_widgets = serverless_widgets(aws, instance, "ProvisionedConcurrency" in serverless)
        running, use = [], []
    widgets: list[Widget] = [
        (
            "Invocations (sum a minute)",
            [aws(name, "Sum") for name in PLATFORM_METRICS if name.startswith("Invocation")],
        ),
        *platform_widgets,
        ("Model latency (microseconds)", latency),
        ("Time to first token (ms)", percentiles(own, cloudwatch.TIME_TO_FIRST_TOKEN)),
        ("End-to-end latency (ms)", percentiles(own, cloudwatch.END_TO_END_LATENCY)),
        (
            f"Requests per {each}",
            [
                own(cloudwatch.REQUESTS_RUNNING, "Average", "running"),
                own(cloudwatch.REQUESTS_WAITING, "Average", "waiting"),
                *running,
            ],
        ),
        ("KV cache use (%)", spread(own, cloudwatch.KV_CACHE_USAGE)),
        (
            f"Tokens per second per {each}",
            [
                own(cloudwatch.PROMPT_TOKENS_PER_SECOND, "Average", "prompt"),
                own(cloudwatch.GENERATION_TOKENS_PER_SECOND, "Average", "generated"),
            ],
        ),
        *use,
    ]
    return {
        "widgets": [
            {
                "type": "metric",
                "x": _WIDTH * (index % _COLUMNS),
                "y": _HEIGHT * (index // _COLUMNS),
                "width": _WIDTH,
                "height": _HEIGHT,
                "properties": {
                    "title": title,
                    "region": region,
                    "view": "timeSeries",
                    "stacked": False,
                    "period": PERIOD_S,
                    "metrics": lines,
                },
            }
            for index, (title, lines) in enumerate(widgets)
        ]
    }


def spread(line: Line, name: str) -> list[list[Any]]:
    """A metric's average and most."""
    return [line(name, "Average", "average"), line(name, "Maximum", "most")]


def serverless_widgets(aws: Line, instance: Line, provisioned: bool) -> list[Widget]:
    """What SageMaker draws of a serverless variant in place of its instances: cold starts, memory
    and the concurrency used; with provisioned concurrency, the warm copies' use and the
    invocations that spilled over to cold ones. `aws` and `instance` make a line of
    AWS/SageMaker and of INSTANCES."""
    widgets: list[Widget] = [
        (
            "Cold starts: model setup time (microseconds)",
            [aws("ModelSetupTime", "Maximum"), aws("ModelSetupTime", "Average")],
        ),
        (
            "Memory use (%)",
            [instance("MemoryUtilization", "Average"), instance("MemoryUtilization", "Maximum")],
        ),
        (
            "Concurrency used (of MAX_CONCURRENCY)",
            spread(aws, "ServerlessConcurrentExecutionsUtilization"),
        ),
    ]
    if provisioned:
        widgets += [
            (
                "Provisioned concurrency used (of the copies kept warm)",
                spread(aws, "ServerlessProvisionedConcurrencyUtilization"),
            ),
            (
                "Invocations on warm copies (sum a minute)",
                [
                    aws("ServerlessProvisionedConcurrencyInvocations", "Sum", "warm"),
                    aws(
                        "ServerlessProvisionedConcurrencySpilloverInvocations",
                        "Sum",
                        "spilled over (cold starts)",
                    ),
                ],
            ),
        ]
    return widgets


def metrics_warning(endpoint: str, env: Mapping[str, str]) -> str | None:
    """The warning for a container that writes none of its own metrics (SAGEMAKER_METRICS unset
    or empty in its environment, as `serve` reads it): half the graphs would stay empty."""
    if env.get(cloudwatch.METRICS_VARIABLE, "").strip():
        return None
    return (
        f"warning: endpoint {endpoint}'s container writes none of its own metrics "
        f"({cloudwatch.METRICS_VARIABLE} is unset in its model's environment), so the graphs of "
        "time to first token, latency, requests, KV cache and tokens stay empty; deploy it with "
        f"--env {cloudwatch.METRICS_VARIABLE}={cloudwatch.METRICS_ON}"
    )


def dashboard_call(name: str, body: Mapping[str, Any]) -> Call:
    return Call(
        "cloudwatch", "PutDashboard", {"DashboardName": name, "DashboardBody": json.dumps(body)}
    )
