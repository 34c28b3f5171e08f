"""Which batch work this API-server process runs, and when.

The scheduler claims work nobody holds (`claim` of the store), at most `max_running` runs at
once in this process, and runs it. With the embedded store the work is a whole batch, the
oldest unfinished one, and `max_running` also bounds the batches running across every process
sharing the store. With the S3 store it is a batch to validate, a chunk of a running batch, or a
batch whose chunks are all done (`handler.batches.store.s3.store`). It looks again when a batch is
created here, when one of its runs ends, and every POLL_S (work created by another process or
replica, leases of one that died), and claims nothing more once a stop (SIGTERM) is asked for.
A run's lease is given back when it ends. At shutdown its
runs stop without writing anything more and their leases are released, so the next start (or
another replica) resumes them at once: a SIGTERM never cancels a batch.
"""

import asyncio
import contextlib
import os
import socket
import uuid

from vllm_sagemaker.handler.batches.running.runner import BatchRun, RunEnded, Runtime
from vllm_sagemaker.handler.batches.store.types import Claim
from vllm_sagemaker.handler.process.logs import logger

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
            claim = None
            if len(self.runs) < self.max_running and not self.runtime.stops.requested:
                try:
                    claim = await asyncio.to_thread(store.claim, owner, lease_s, self.max_running)
                except Exception as error:
                    logger.warning("batch scheduler: could not claim work: %s", error)
            if claim is not None and await self._engine_ready():
                self.runs[_label(claim)] = asyncio.create_task(self._run(claim))
                continue
            if claim is not None:
                await self._release(claim)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)

    async def _engine_ready(self) -> bool:
        return await self.runtime.engine_healthy()

    async def _run(self, claim: Claim) -> None:
        label = _label(claim)
        run = BatchRun(self.runtime, claim)
        try:
            logger.info("batch %s: %s (%s)", label, claim.work.value, claim.batch["status"])
            await run.run()
            logger.info("batch %s: done", label)
        except* RunEnded as ended:
            logger.warning("batch %s: stopped here: %s", label, ended.exceptions[0])
        except* Exception:
            logger.exception("batch %s: failed in this process; it will be tried again", label)
        finally:
            await self._release(run.claim)
            self.runs.pop(label, None)
            self.wake()

    async def _release(self, claim: Claim) -> None:
        try:
            await asyncio.to_thread(self.runtime.store.release, claim)
        except Exception:
            logger.exception("batch %s: the lease could not be released", _label(claim))

    async def stop(self) -> None:
        """Stop every run without writing more; each releases its lease as it ends."""
        tasks = [task for task in (self._loop, *self.runs.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _label(claim: Claim) -> str:
    """A run's name in the log: the batch, and its chunk when it is one."""
    chunk = claim.chunk
    return claim.batch["id"] if chunk is None else f"{claim.batch['id']} chunk {chunk.index}"
