"""The rules from two snapshots of the server's Prometheus metrics (the last interval's and this
one's) to one CloudWatch Embedded Metric Format (EMF) document: a JSON object whose `_aws` says
which of its keys are metrics, under which namespace and dimensions, and in what unit.

- Gauges (requests running and waiting, KV cache use, batch runs, restarts) go out as they stand;
  vLLM's engine gauges as 0 before the engine's first report.
- Counters go out as what they added over the interval: a count, or a count per second.
- Latency histograms go out in EMF's histogram form (Values and Counts, with Max, Min, Count
  and Sum), from what each bucket added over the interval, so CloudWatch computes their
  percentiles. A latency counts as its bucket's upper bound (so a percentile is never under the
  truth, and at most one bucket over it); the open `+Inf` bucket counts as the largest finite
  bound. A histogram that nothing was added to (no request finished) is left out, as is a
  metric the server does not have.

Pure functions: the snapshots are plain numbers (`handler.metrics.samples` reads them).
"""

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_sagemaker.core import cloudwatch

# EMF: at most 100 values in a metric's values/counts.
MAX_VALUES = 100
MS_PER_S = 1000


@dataclass(frozen=True)
class Snapshot:
    """The metrics at one moment: each sample's values over its label sets and the API-server
    processes, and each histogram's cumulative bucket counts (summed the same way) by upper
    bound in seconds."""

    at_s: float
    series: Mapping[str, Sequence[float]] = field(default_factory=dict)
    buckets: Mapping[str, Mapping[float, float]] = field(default_factory=dict)

    def total(self, sample: str) -> float | None:
        values = self.series.get(sample)
        return None if values is None else math.fsum(values)


class How(enum.Enum):
    """How a Prometheus sample becomes a CloudWatch value."""

    SUM = "the sum over label sets and processes, as it stands"
    MAX = "the largest value over label sets and processes, as it stands"
    COUNT = "what a counter added over the interval"
    RATE = "what a counter added over the interval, per second"
    LATENCY = "what a seconds histogram added over the interval, in ms, as values/counts"


@dataclass(frozen=True)
class Metric:
    name: str
    sample: str
    how: How
    scale: float = 1.0
    # A gauge's value while the server has no sample of it: vLLM's engine gauges have none
    # until the engine's first report when several API-server processes share the registry
    # (nothing runs, nothing waits, no KV cache is used then). None: left out.
    idle: float | None = None


# The metrics, from vLLM's Prometheus samples and ours. KV cache use is the fullest engine's
# (vLLM publishes a share of 1 per engine); every process holds the same restart count.
METRICS: tuple[Metric, ...] = (
    Metric(cloudwatch.REQUESTS_RUNNING, "vllm:num_requests_running", How.SUM, idle=0.0),
    Metric(cloudwatch.REQUESTS_WAITING, "vllm:num_requests_waiting", How.SUM, idle=0.0),
    Metric(cloudwatch.KV_CACHE_USAGE, "vllm:kv_cache_usage_perc", How.MAX, 100.0, 0.0),
    Metric(cloudwatch.TIME_TO_FIRST_TOKEN, "vllm:time_to_first_token_seconds", How.LATENCY),
    Metric(cloudwatch.END_TO_END_LATENCY, "vllm:e2e_request_latency_seconds", How.LATENCY),
    Metric(cloudwatch.PROMPT_TOKENS_PER_SECOND, "vllm:prompt_tokens_total", How.RATE),
    Metric(cloudwatch.GENERATION_TOKENS_PER_SECOND, "vllm:generation_tokens_total", How.RATE),
    Metric(cloudwatch.BATCH_LINES_DONE, "vllm_sagemaker:batch_lines_done_total", How.COUNT),
    Metric(cloudwatch.BATCHES_IN_PROGRESS, "vllm_sagemaker:batch_runs", How.SUM),
    Metric(cloudwatch.BATCH_THROTTLED, "vllm_sagemaker:batch_throttled_total", How.COUNT),
    Metric(cloudwatch.BATCH_PREEMPTED, "vllm_sagemaker:batch_preemptions_total", How.COUNT),
    Metric(cloudwatch.ENGINE_RESTARTS, "vllm_sagemaker:server_restarts", How.MAX),
)
# What `handler.metrics.samples` collects: plain samples, and histograms by family name.
SAMPLES = frozenset(m.sample for m in METRICS if m.how is not How.LATENCY)
HISTOGRAMS = frozenset(m.sample for m in METRICS if m.how is How.LATENCY)


# A number, or a distribution in EMF's histogram form: Values and Counts with their statistics
# (Max, Min, Count, Sum), as CloudWatch's own EMF libraries write it.
Value = float | dict[str, Any]


def value(metric: Metric, previous: Snapshot, current: Snapshot) -> Value | None:
    """The metric's value over the interval; None when the server does not have it (a gauge
    without a sample yet: its `idle` value), or, for a latency, when no request finished."""
    if metric.how is How.LATENCY:
        now = current.buckets.get(metric.sample)
        return None if now is None else values_counts(previous.buckets.get(metric.sample, {}), now)
    if metric.how is How.SUM or metric.how is How.MAX:
        values = current.series.get(metric.sample)
        if not values:
            return metric.idle
        return (math.fsum(values) if metric.how is How.SUM else max(values)) * metric.scale
    added = _added(previous.total(metric.sample), current.total(metric.sample))
    if added is None or metric.how is How.COUNT:
        return added
    elapsed = current.at_s - previous.at_s
    return added / elapsed if elapsed > 0 else 0.0


def document(
    previous: Snapshot, current: Snapshot, namespace: str, dimensions: Mapping[str, str]
) -> dict[str, Any]:
    """The EMF document for the interval from `previous` to `current`."""
    values = {}
    for metric in METRICS:
        found = value(metric, previous, current)
        if found is not None:
            values[metric.name] = found
    return {
        "_aws": {
            "Timestamp": int(current.at_s * MS_PER_S),
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    "Dimensions": [list(dimensions)],
                    "Metrics": [{"Name": name, "Unit": cloudwatch.UNITS[name]} for name in values],
                }
            ],
        },
        **dimensions,
        **values,
    }


def values_counts(
    previous: Mapping[float, float], current: Mapping[float, float]
) -> dict[str, Any] | None:
    """EMF's values/counts (milliseconds) from two readings of cumulative buckets (upper bound in
    seconds: count); None when no observation was added."""
    finite = sorted(bound for bound in current if math.isfinite(bound))
    if not finite:
        return None
    if any(current[bound] < previous.get(bound, 0.0) for bound in current):
        previous = {}  # the histogram started again (a new process)
    by_value: dict[float, float] = {}
    below = 0.0
    for bound in sorted(current):
        cumulative = current[bound] - previous.get(bound, 0.0)
        added, below = cumulative - below, cumulative
        if added > 0:
            at = min(bound, finite[-1]) * MS_PER_S
            by_value[at] = by_value.get(at, 0.0) + added
    pairs = list(by_value.items())
    while len(pairs) > MAX_VALUES:
        pairs = _halve(pairs)
    if not pairs:
        return None
    values, counts = [at for at, _ in pairs], [round(n) for _, n in pairs]
    return {
        "Values": values,
        "Counts": counts,
        "Max": max(values),
        "Min": min(values),
        "Count": sum(counts),
        "Sum": math.fsum(at * n for at, n in zip(values, counts, strict=True)),
    }


def _halve(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Neighbouring buckets two by two, each pair at its upper value (EMF allows 100 values)."""
    return [
        (pairs[min(i + 1, len(pairs) - 1)][0], math.fsum(n for _, n in pairs[i : i + 2]))
        for i in range(0, len(pairs), 2)
    ]


def _added(before: float | None, now: float | None) -> float | None:
    """What a counter added; all of it when it went down (it started again with a process)."""
    if now is None:
        return None
    before = before or 0.0
    return now - before if now >= before else now
