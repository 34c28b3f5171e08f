"""What every batch run of this process shares, and why a run stops before its lines are all
answered: a cancel or the end of the batch's window (answered without the engine), or a line
given back for live traffic."""

import asyncio
import time
from dataclasses import dataclass

from starlette.types import Scope

from vllm_sagemaker.core.batch_lines import CANCELLED_LINE
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.batches.admission.window import BatchWindow
from vllm_sagemaker.handler.batches.store.interface import BatchStore
from vllm_sagemaker.handler.batches.store.types import Batch
from vllm_sagemaker.handler.process.lifecycle import StopRequests
from vllm_sagemaker.handler.records import asgi_call
from vllm_sagemaker.handler.records.minibatch import Stop
from vllm_sagemaker.handler.records.pipeline import Pipeline

EXPIRED = RequestError(
    408,
    "This request could not be executed before the completion window expired.",
    "batch_expired",
)
# A running line given back to the queue so live requests get the engine; it runs again later.
PREEMPTED = RequestError(503, "preempted for live traffic; the line runs again", "preempted")


class RunEnded(Exception):
    """The run cannot go on in this process (engine gone, lease taken over); the batch stays
    as it is for the next run."""


@dataclass(frozen=True)
class RunSettings:
    priority: int | None
    lease_s: float
    check_every_s: float


@dataclass(frozen=True)
class Runtime:
    """What every batch run of this process shares."""

    store: BatchStore
    pipeline: Pipeline
    scope: Scope
    headers: asgi_call.Headers
    window: BatchWindow
    settings: RunSettings
    owner: str
    stops: StopRequests

    async def call(self, method: str, path: str) -> asgi_call.Reply:
        return await asgi_call.call(
            self.pipeline.app, self.scope, method, path, b"", self.headers, asyncio.Event()
        )

    async def engine_healthy(self) -> bool:
        return await asgi_call.engine_healthy(self.pipeline.app, self.scope, self.headers)


def stop_when_due(batch: Batch, stop: Stop) -> None:
    """Stop the run when the batch is being cancelled or its window has passed."""
    if batch["status"] == "cancelling":
        stop(CANCELLED_LINE)
    elif time.time() >= batch["expires_at"]:
        stop(EXPIRED)
