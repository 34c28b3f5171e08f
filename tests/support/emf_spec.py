"""CloudWatch's Embedded Metric Format, as its specification states it, with its own literals
(never the code it checks): `problems(document)` says every way a document breaks it.

https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
and, for the histogram form (Values, Counts, Max, Min, Count, Sum), AWS's own EMF libraries.
"""

import json
import math
from typing import Any

MAX_METRICS = 100
MAX_DIMENSIONS = 30
MAX_VALUES = 100
# CloudWatch's StandardUnit values (PutMetricData's MetricDatum.Unit).
UNITS = frozenset(
    {
        "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
        "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
        "Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second",
        "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second",
        "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
    }
)  # fmt: skip
HISTOGRAM_KEYS = {"Values", "Counts", "Max", "Min", "Count", "Sum"}
# Epoch milliseconds from 2001 to 2286: seconds or microseconds fall outside.
TIMESTAMP_RANGE_MS = (10**12, 10**13)


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def value_problems(name: str, value: Any) -> list[str]:
    if is_number(value):
        return []
    if isinstance(value, list):
        ok = 0 < len(value) <= MAX_VALUES and all(is_number(v) for v in value)
        return [] if ok else [f"{name}: not 1-{MAX_VALUES} numbers: {value!r}"]
    if not isinstance(value, dict) or set(value) != HISTOGRAM_KEYS:
        return [f"{name}: neither a number nor a histogram: {value!r}"]
    values, counts = value["Values"], value["Counts"]
    if not all(is_number(v) for v in (value["Max"], value["Min"], value["Count"], value["Sum"])):
        return [f"{name}: a statistic is not a number: {value!r}"]
    if not (
        isinstance(values, list)
        and isinstance(counts, list)
        and 0 < len(values) == len(counts) <= MAX_VALUES
        and all(is_number(v) for v in values + counts)
    ):
        return [f"{name}: Values and Counts not 1-{MAX_VALUES} numbers each: {value!r}"]
    problems = []
    if value["Min"] != min(values) or value["Max"] != max(values):
        problems.append(f"{name}: Min/Max are not the values' own: {value!r}")
    if value["Count"] != sum(counts) or any(c <= 0 for c in counts):
        problems.append(f"{name}: Count is not the sum of positive Counts: {value!r}")
    if not math.isclose(value["Sum"], sum(v * c for v, c in zip(values, counts, strict=True))):
        problems.append(f"{name}: Sum is not the values times their counts: {value!r}")
    return problems


def problems(document: Any) -> list[str]:
    """Every rule of the specification `document` (a parsed log line) breaks."""
    if not isinstance(document, dict) or not isinstance(document.get("_aws"), dict):
        return ["no _aws metadata object"]
    meta = document["_aws"]
    found = []
    stamp = meta.get("Timestamp")
    if not (isinstance(stamp, int) and not isinstance(stamp, bool)):
        found.append(f"Timestamp is not a whole number of epoch milliseconds: {stamp!r}")
    elif not TIMESTAMP_RANGE_MS[0] <= stamp < TIMESTAMP_RANGE_MS[1]:
        found.append(f"Timestamp is not epoch milliseconds: {stamp}")
    directives = meta.get("CloudWatchMetrics")
    if not isinstance(directives, list) or not directives:
        return [*found, "CloudWatchMetrics is not a non-empty array"]
    for directive in directives:
        found += directive_problems(document, directive)
    return found


def directive_problems(document: dict[str, Any], directive: Any) -> list[str]:
    if not isinstance(directive, dict):
        return [f"a metric directive is not an object: {directive!r}"]
    found = []
    if not isinstance(directive.get("Namespace"), str) or not directive["Namespace"]:
        found.append(f"Namespace is not a string: {directive.get('Namespace')!r}")
    for dimensions in directive.get("Dimensions", []):
        if not isinstance(dimensions, list) or len(dimensions) > MAX_DIMENSIONS:
            found.append(f"a dimension set is not an array of <= 30: {dimensions!r}")
            continue
        for name in dimensions:
            if not isinstance(document.get(name), str):
                found.append(f"dimension {name!r} has no string member in the document")
    metrics = directive.get("Metrics")
    if not isinstance(metrics, list) or len(metrics) > MAX_METRICS:
        return [*found, f"Metrics is not an array of <= {MAX_METRICS}"]
    for metric in metrics:
        name = metric.get("Name") if isinstance(metric, dict) else None
        if not isinstance(name, str) or name not in document:
            found.append(f"metric {name!r} has no member in the document")
            continue
        if "Unit" in metric and metric["Unit"] not in UNITS:
            found.append(f"{name}: {metric['Unit']!r} is not a CloudWatch unit")
        found += value_problems(name, document[name])
    return found


def documents(log: str) -> list[dict[str, Any]]:
    """The EMF documents among a log's lines (JSON objects with `_aws`), in order."""
    found = []
    for line in log.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            found.append(json.loads(line))
    return found
