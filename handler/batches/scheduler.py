"""Which batches this API-server process runs, and when.

The scheduler claims the oldest unfinished batch nobody holds (`Store.claim`), at most
`max_running` batches at once across every process sharing the store, and runs it. It looks
again when a batch is created here, when one of its runs ends, and every POLL_S (batches created
by another process, leases of a process that died). At shutdown its runs stop without writing
anything more and their leases are released, so the next start resumes them at once: a SIGTERM
never cancels a batch.
"""

import asyncio
import contextlib
import os
import socket
import uuid

from handler.batches.runner import BatchRun, RunEnded, Runtime
from handler.logs import logger

POLL_S = 1.0


def runner_id() -> str:
    """Who holds a lease: host, process and a nonce (a restarted process is someone else)."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


class Scheduler:
    def __init__(self, runtime: Runtime, max_running: int) -> None:
        self.runtime = runtime
        self.max_running = max_running
        self.runs: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.create_task(self._claim_forever())

    def wake(self) -> None:
        self._wake.set()

    async def _claim_forever(self) -> None:
        store, owner, lease_s = (
            self.runtime.store,
            self.runtime.owner,
            self.runtime.settings.lease_s,
        )
        while True:
            try:
                batch = await asyncio.to_thread(store.claim, owner, lease_s, self.max_running)
            except Exception:
                logger.exception("batch scheduler: could not claim a batch")
                batch = None
            if batch is not None and await self._engine_ready():
                self.runs[batch["id"]] = asyncio.create_task(self._run(batch))
                continue
            if batch is not None:
                await asyncio.to_thread(store.release, batch["id"], owner)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)

    async def _engine_ready(self) -> bool:
        return (await self.runtime.call("GET", "/health")).status == 200

    async def _run(self, batch: dict) -> None:
        batch_id = batch["id"]
        try:
            logger.info("batch %s: running (%s)", batch_id, batch["status"])
            await BatchRun(self.runtime, batch).run()
            logger.info("batch %s: done", batch_id)
        except* RunEnded as ended:
            logger.warning("batch %s: stopped here: %s", batch_id, ended.exceptions[0])
            await self._release(batch_id)
        except* Exception:
            logger.exception("batch %s: failed in this process; it will be tried again", batch_id)
            await self._release(batch_id)
        finally:
            self.runs.pop(batch_id, None)
            self.wake()

    async def _release(self, batch_id: str) -> None:
        try:
            await asyncio.to_thread(self.runtime.store.release, batch_id, self.runtime.owner)
        except Exception:
            logger.exception("batch %s: the lease could not be released", batch_id)

    async def stop(self) -> None:
        """Stop every run without writing more; release their leases."""
        tasks = [task for task in (self._loop, *self.runs.values()) if task is not None]
        held = list(self.runs)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for batch_id in held:
            await self._release(batch_id)
