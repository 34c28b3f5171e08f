"""Runs the batch work this process has claimed (`Claim.work`), from wherever the batch stands:
its validation, its lines (the whole batch's in the embedded store, one chunk's in the shared S3
store), or in the S3 store the assembly of its chunks' results once all are done.

- `validating`: the input file is checked and the batch is `failed` or `in_progress`; nothing
  reaches the engine before that (`handler.batches.running.validation`).
- `in_progress` / `cancelling`: the lines not answered yet run in a sliding window, each result
  appended as it finishes (`handler.batches.running.lines`).
- Then `finalizing`, and `completed`, `cancelled` or `expired`, the results becoming files
  (`handler.batches.running.finishing`).

A watch loop renews the lease (`handler.batches.running.claim`), publishes counts and usage
(`handler.batches.running.status`), and stops the run when the batch is cancelled or its window
passes: lines not answered then are answered without the engine (`batch_cancelled`,
`batch_expired`) and running ones are aborted. A SIGTERM or a dead engine ends the run without
writing anything more: the batch stays as it is and resumes from its results files.
"""

import asyncio
import time

from vllm_sagemaker.handler.batches.admission import metrics
from vllm_sagemaker.handler.batches.running.claim import HeldClaim
from vllm_sagemaker.handler.batches.running.context import (
    RunEnded,
    RunSettings,
    Runtime,
    stop_when_due,
)
from vllm_sagemaker.handler.batches.running.finishing import ResultsWriter
from vllm_sagemaker.handler.batches.running.lines import LineRunner
from vllm_sagemaker.handler.batches.running.results import Results
from vllm_sagemaker.handler.batches.running.status import BatchStatus
from vllm_sagemaker.handler.batches.running.validation import InputCheck
from vllm_sagemaker.handler.batches.store.types import Claim, Work
from vllm_sagemaker.handler.records.context import RecordContext
from vllm_sagemaker.handler.records.minibatch import Stop

__all__ = ["BatchRun", "RunEnded", "RunSettings", "Runtime"]

SYNC_EVERY_S = 5.0


class BatchRun:
    """One claim's work: the validation of a batch, its lines (all of them, or one chunk's),
    or its final assembly once every chunk is done."""

    def __init__(self, runtime: Runtime, claim: Claim) -> None:
        self.runtime = runtime
        self.held = HeldClaim(runtime.store, claim, runtime.owner)
        self.status = BatchStatus(self.held)
        self.input = InputCheck(runtime, self.status)
        self.lines = LineRunner(runtime, self.held, self.status)
        self.writer = ResultsWriter(self.held, self.status)

    @property
    def claim(self) -> Claim:
        """The claim as it now stands (its lease renewed), for the scheduler to release."""
        return self.held.claim

    async def run(self) -> None:
        work = self.held.claim.work
        if work is Work.VALIDATE:
            await self.input.validate()
        elif work is Work.LINES:
            await self.execute()
        else:
            await self.writer.assemble()

    async def execute(self) -> None:
        """Answer the claim's lines, then make the results its chunk's."""
        if await self.input.input_file() is None:
            return
        results = Results(self.runtime.store.results_dir(self.held.claim))
        await asyncio.to_thread(results.open)
        stop = Stop()
        stop_when_due(self.status.batch, stop)
        context = RecordContext(
            self.runtime.scope,
            self.runtime.headers,
            self.held.batch_id,
            stop=stop,
            priority=self.runtime.settings.priority,
        )
        try:
            with metrics.BATCH_RUNS.track_inprogress():
                async with asyncio.TaskGroup() as group:
                    watcher = group.create_task(self.watch(results, stop))
                    await self.lines.feed(group, context, results)
                    watcher.cancel()
            await self.writer.finish_run(results, stop)
        finally:
            results.close()

    async def watch(self, results: Results, stop: Stop) -> None:
        """Every check_every_s: renew the lease, publish progress, notice cancel and expiry."""
        settings = self.runtime.settings
        synced = time.monotonic()
        while True:
            await asyncio.sleep(settings.check_every_s)
            await self.held.renew(settings.lease_s)
            stop_when_due(await self.status.progress(results.tallies), stop)
            if time.monotonic() - synced >= SYNC_EVERY_S:
                await asyncio.to_thread(results.sync)
                synced = time.monotonic()
