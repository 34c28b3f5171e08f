"""Reads a `Snapshot` of the samples the EMF rules use (`handler.metrics.emf`) from the registry
vLLM's own `/metrics` serves: this process's default registry with one API-server process, or,
with several (`--api-server-count`, which sets PROMETHEUS_MULTIPROC_DIR), the multiprocess
collector over every process's files, which adds counters and histograms across the processes.
"""

import time
from collections import defaultdict

from prometheus_client.registry import Collector
from vllm.v1.metrics.prometheus import get_prometheus_registry

from vllm_sagemaker.handler.metrics.emf import HISTOGRAMS, SAMPLES, Snapshot

BUCKET_SUFFIX = "_bucket"


def registry() -> Collector:
    """What vLLM's `/metrics` reads (its own rule, so both always agree)."""
    return get_prometheus_registry()


def snapshot(source: Collector) -> Snapshot:
    """The samples the rules read, now (blocking: the multiprocess collector reads files)."""
    series: dict[str, list[float]] = defaultdict(list)
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    at_s = time.time()
    for family in source.collect():
        for sample in family.samples:
            if sample.name in SAMPLES:
                series[sample.name].append(sample.value)
            elif family.name in HISTOGRAMS and sample.name == family.name + BUCKET_SUFFIX:
                buckets[family.name][float(sample.labels["le"])] += sample.value
    return Snapshot(at_s, dict(series), {name: dict(b) for name, b in buckets.items()})
