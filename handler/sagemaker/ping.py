"""`GET /ping`: SageMaker's health check, answered from vLLM's `/health`."""

import asyncio

from starlette.types import ASGIApp, Scope, Send

from vllm_sagemaker.handler.process.lifecycle import StopRequests
from vllm_sagemaker.handler.records import asgi_call
from vllm_sagemaker.handler.records.messages import respond

EXIT_DELAY_S = 0.5


class Ping:
    """200 with an empty body when the engine answers vLLM's /health, else 503.

    vLLM's /health only reads the engine client's state, so a ping never waits for inference.
    There is no timeout that answers 503: a ping is slow only when the API server's event loop
    is (`benchmarks/ping_under_load.py`), and a busy server is not a dead one. When the engine is
    dead for good the process exits with status 1 (unless it is already stopping on request),
    so `serve` starts vLLM again instead of keeping a broken endpoint InService.
    """

    def __init__(self, app: ASGIApp, stops: StopRequests) -> None:
        self.app = app
        self.stops = stops

    async def __call__(self, scope: Scope, send: Send) -> None:
        healthy = await asgi_call.engine_healthy(self.app, scope)
        await respond(send, 200 if healthy else 503, b"", content_type=b"text/plain")
        if not healthy:
            asyncio.get_running_loop().call_later(
                EXIT_DELAY_S, self.stops.exit_unless_requested, "the engine is dead"
            )
