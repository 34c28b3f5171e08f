"""Writes one EMF document to stdout every interval while the server runs, with
SAGEMAKER_METRICS=cloudwatch (`core.metrics_settings`). SageMaker ships the container's
stdout to CloudWatch Logs, which turns each document into metrics: no agent, no permission.

With several API-server processes every one runs a writer, and exactly one writes: the one
holding a lock on a file in PROMETHEUS_MULTIPROC_DIR (the directory vLLM shares between them for
its metrics). It holds it until it exits; then the next to try takes over, from its own reading.
Its documents add every process's counters and histograms (`handler.metrics.samples`).
"""

import asyncio
import fcntl
import json
import os
import sys
from pathlib import Path
from typing import IO

from vllm_sagemaker.core.metrics_settings import MetricsSettings
from vllm_sagemaker.handler.metrics import emf, gauges, samples
from vllm_sagemaker.handler.metrics.periodic import Periodic
from vllm_sagemaker.handler.process.logs import logger

LOCK_NAME = "sagemaker-metrics.lock"


class WriterLock:
    """Whether this process is the one that writes (held until it exits). Without a shared
    directory the process is the only API server and always writes."""

    def __init__(self, directory: str | None) -> None:
        self.path = None if directory is None else Path(directory) / LOCK_NAME
        self._file: IO[bytes] | None = None

    def held(self) -> bool:
        if self.path is None or self._file is not None:
            return True
        handle = self.path.open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self._file = handle
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class MetricsWriter:
    def __init__(self, settings: MetricsSettings) -> None:
        self.settings = settings
        self.lock = WriterLock(os.environ.get(gauges.MULTIPROC_VAR))
        self._source = samples.registry()
        self._previous: emf.Snapshot | None = None
        failed = "CloudWatch metrics: no document this interval"
        self._loop = Periodic(self._once, settings.interval_s, failed)

    def start(self) -> None:
        logger.info(
            "CloudWatch metrics: an EMF document to stdout every %d s, namespace %s, %s",
            self.settings.interval_s,
            self.settings.namespace,
            ", ".join(f"{k}={v}" for k, v in self.settings.dimensions.items()),
        )
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        self.lock.release()

    async def _once(self) -> None:
        if self.lock.held():
            current = await asyncio.to_thread(samples.snapshot, self._source)
            if self._previous is not None:
                self._write(self._previous, current)
            self._previous = current

    def _write(self, previous: emf.Snapshot, current: emf.Snapshot) -> None:
        settings = self.settings
        document = emf.document(previous, current, settings.namespace, settings.dimensions)
        sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def from_env() -> MetricsWriter | None:
    """The writer SAGEMAKER_METRICS asks for; None when it is off (the default)."""
    settings = MetricsSettings.from_env(os.environ)
    return MetricsWriter(settings) if settings.enabled else None
