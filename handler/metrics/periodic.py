"""A step the server repeats in the background from its start to its shutdown (the EMF writer's
document, the shared gauges' refresh): a failed step is logged and the next one runs."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from vllm_sagemaker.handler.process.logs import logger


class Periodic:
    def __init__(self, step: Callable[[], Awaitable[None]], every_s: float, failed: str) -> None:
        self.step = step
        self.every_s = every_s
        self.failed = failed
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _forever(self) -> None:
        while True:
            try:
                await self.step()
            except Exception:
                logger.exception(self.failed)
            await asyncio.sleep(self.every_s)
