"""Gauges whose value a function gives, right on `/metrics` with one API-server process or
several.

prometheus_client's `Gauge.set_function` works within one process only: with several API-server
processes (`--api-server-count`, for which vLLM sets PROMETHEUS_MULTIPROC_DIR), `/metrics` reads
every process's values from its files in that directory, which `set_function` never writes, so
such a gauge would read 0 there. `follow` keeps the function: with one process it is read at
every scrape; with several, `refresher` writes every function's value to this process's file
once a REFRESH_S while the server runs, so a scrape shows each process's value at most that old
(SageMaker publishes what it scrapes every 10 s at the most often). How the processes' values
combine is each gauge's `multiprocess_mode`.
"""

import os
from collections.abc import Callable

from prometheus_client import Gauge

from vllm_sagemaker.handler.metrics.periodic import Periodic

MULTIPROC_VAR = "PROMETHEUS_MULTIPROC_DIR"
REFRESH_S = 1.0

_followed: dict[Gauge, Callable[[], float]] = {}


def multiprocess() -> bool:
    """Whether this process's metrics go to the directory the API-server processes share."""
    return os.environ.get(MULTIPROC_VAR) is not None


def follow(gauge: Gauge, function: Callable[[], float]) -> None:
    """Show `function`'s value as `gauge` (the latest function given for a gauge wins)."""
    _followed[gauge] = function
    if not multiprocess():
        gauge.set_function(function)


def refresh() -> None:
    """Write every followed function's value now."""
    for gauge, function in _followed.items():
        gauge.set(function())


async def _refresh() -> None:
    refresh()


def refresher() -> Periodic | None:
    """What refreshes the followed gauges while the server runs, when several processes share
    them; None with one process."""
    if not multiprocess():
        return None
    return Periodic(_refresh, REFRESH_S, "metrics: the gauges were not refreshed this time")
