"""`deploy dashboard`'s call: one PutDashboard drawing SageMaker's metrics of an endpoint's variant
(on instances or serverless) beside the container's own (`core.cloudwatch`'s EMF)."""

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.kit.plans.scaling import emf_source

# SageMaker's endpoint metrics (dimensions EndpointName and VariantName), with their units.
PLATFORM = "AWS/SageMaker"
PLATFORM_METRICS = {
    **dict.fromkeys(("Invocations", "Invocation4XXErrors", "Invocation5XXErrors"), "None"),
    "ModelLatency": "Microseconds",
    "ConcurrentRequestsPerModel": "None",
}
# Its instances' metrics (the same dimensions), in percent: each instance reports once a minute,
# so a minute's sample count of CPUUtilization is the variant's instance count.
INSTANCES = "/aws/sagemaker/Endpoints"
INSTANCE_METRICS = dict.fromkeys(
    ("CPUUtilization", "MemoryUtilization", "GPUUtilization", "GPUMemoryUtilization"), "Percent"
)
PERCENTILES = ("p50", "p95", "p99")
PERIOD_S = 60
_WIDTH, _HEIGHT, _COLUMNS = 12, 6, 2
_STYLE = {"view": "timeSeries", "stacked": False, "period": PERIOD_S}
Widget = tuple[str, list[list[Any]]]
# A widget's line of one namespace: (metric, statistic, label) -> the line.
Line = Callable[..., list[Any]]


def dashboard_body(
    region: str,
    endpoint: str,
    variant: str,
    env: Mapping[str, str],
    serverless: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The dashboard of a variant; `serverless` its ServerlessConfig (None: on instances)."""
    platform = [
        {"Name": cloudwatch.ENDPOINT_DIMENSION, "Value": endpoint},
        {"Name": cloudwatch.VARIANT_DIMENSION, "Value": variant},
    ]

    def lines_of(namespace: str, dimensions: Sequence[Mapping[str, str]]) -> Line:
        """Lines of a widget: CloudWatch's [namespace, name, dimension, value, ..., options]."""
        pairs = [
            part for dimension in dimensions for part in (dimension["Name"], dimension["Value"])
        ]

        def line(name: str, stat: str, label: str | None = None) -> list[Any]:
            return [namespace, name, *pairs, {"stat": stat, "label": label or f"{name} {stat}"}]

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
        # What SageMaker draws of a serverless variant in place of its instances.
        platform_widgets = [
            (
                "Cold starts: model setup time (microseconds)",
                [aws("ModelSetupTime", stat) for stat in ("Maximum", "Average")],
            ),
            ("Memory use (%)", [instance("MemoryUtilization", s) for s in ("Average", "Maximum")]),
            (
                "Concurrency used (of MAX_CONCURRENCY)",
                spread(aws, "ServerlessConcurrentExecutionsUtilization"),
            ),
        ]
        if "ProvisionedConcurrency" in serverless:
            platform_widgets += [
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
                "properties": {"title": title, "region": region, **_STYLE, "metrics": lines},
            }
            for index, (title, lines) in enumerate(widgets)
        ]
    }


def spread(line: Line, name: str) -> list[list[Any]]:
    """A metric's average and most."""
    return [line(name, "Average", "average"), line(name, "Maximum", "most")]


def metrics_warning(endpoint: str, env: Mapping[str, str]) -> str | None:
    """The warning for a container that writes none of its own metrics (half the graphs)."""
    if env.get(cloudwatch.METRICS_VARIABLE, "").strip():
        return None
    return (
        f"warning: endpoint {endpoint}'s container writes none of its own metrics "
        f"({cloudwatch.METRICS_VARIABLE} is unset in its model's environment), so the graphs of "
        "time to first token, latency, requests, KV cache and tokens stay empty; deploy it with "
        f"--env {cloudwatch.METRICS_VARIABLE}={cloudwatch.METRICS_ON}"
    )


def dashboard_call(name: str, body: Mapping[str, Any]) -> Call:
    params = {"DashboardName": name, "DashboardBody": json.dumps(body)}
    return Call("cloudwatch", "PutDashboard", params)
