"""Finishing: a run's result files become its chunk's (`BatchStore.finish_chunk`), and once
every chunk is finished, the chunks' results become the batch's output and error files as it
takes its final status (`BatchStore.assemble_batch`)."""

import asyncio
import shutil
import time

from vllm_sagemaker.core import ids
from vllm_sagemaker.core.batch_lines import CANCELLED_LINE
from vllm_sagemaker.core.config import FILE_EXPIRY_S
from vllm_sagemaker.handler.batches.running.claim import HeldClaim
from vllm_sagemaker.handler.batches.running.context import EXPIRED, RunEnded
from vllm_sagemaker.handler.batches.running.results import Results, Tallies
from vllm_sagemaker.handler.batches.running.status import BatchStatus, final
from vllm_sagemaker.handler.batches.store.types import StoredFile
from vllm_sagemaker.handler.batches.store.usage import add_usage
from vllm_sagemaker.handler.process.logs import logger
from vllm_sagemaker.handler.records.minibatch import Stop


class ResultsWriter:
    """The results of one run's batch: its chunk's, then (once all chunks are) the batch's."""

    def __init__(self, held: HeldClaim, status: BatchStatus) -> None:
        self.held = held
        self.store = held.store
        self.status = status

    async def finish_run(self, results: Results, stop: Stop) -> None:
        """Make this run's results its chunk's (unless another run finished the chunk first);
        the run of a whole batch, its one chunk, then assembles the batch at once."""
        await asyncio.to_thread(results.sync)
        tallies = {
            "completed": results.tallies.completed,
            "failed": results.tallies.failed,
            "usage": results.tallies.usage,
            "stopped": _stopped(stop),
        }
        files = {"output": results.output_path, "errors": results.errors_path}
        batch_id, chunk = self.held.batch_id, self.held.claim.chunk
        finished = await asyncio.to_thread(self.store.finish_chunk, batch_id, chunk, files, tallies)
        if not finished:
            logger.warning("batch %s: chunk %s was finished by another run first", batch_id, chunk)
        if self.held.whole:
            await self.assemble()
        shutil.rmtree(results.directory, ignore_errors=True)

    async def assemble(self) -> None:
        """Every chunk is finished: join their results into the output and error files and
        give the batch its final status, with the counts the chunks add up to."""
        batch_id = self.held.batch_id
        chunks = await asyncio.to_thread(lambda: list(self.store.chunk_results(batch_id)))
        now = int(time.time())
        await self.status.finalizing(now)
        totals = Tallies()
        stop = Stop()
        for _, result in chunks:
            totals.completed += result["completed"]
            totals.failed += result["failed"]
            add_usage(totals.usage, result["usage"])
            if result.get("stopped") == "expired":
                stop(EXPIRED)
            elif result.get("stopped") == "cancelled" and stop.reason is None:
                stop(CANCELLED_LINE)
        outputs: dict[str, StoredFile] = {}
        ids: dict[str, str | None] = {}
        for key, kind, count in (
            ("output_file_id", "output", totals.completed),
            ("error_file_id", "errors", totals.failed),
        ):
            ids[key] = None
            if count:
                outputs[kind] = self._output_file(kind, now)
                ids[key] = outputs[kind].id
        finished = await asyncio.to_thread(
            self.store.assemble_batch,
            batch_id,
            self.held.owner,
            outputs,
            final(ids, totals, stop, now),
        )
        if finished is None:
            raise RunEnded(f"batch {batch_id} was taken over while it finished")
        self.status.batch = finished

    def _output_file(self, kind: str, now: int) -> StoredFile:
        """The output (or error) file of this batch, as the Files API shows it (its size is
        the store's to fill in as it writes the body)."""
        batch_id = self.held.batch_id
        expires_after = self.status.batch.get("output_expires_after") or {}
        expiry = expires_after.get("seconds") or FILE_EXPIRY_S
        return StoredFile(
            ids.batch_output_file_id(batch_id, kind),
            0,
            now,
            f"{batch_id}_{kind}.jsonl",
            "batch_output",
            now + expiry,
        )


def _stopped(stop: Stop) -> str | None:
    """Why a chunk's run stopped early, as its finished chunk records it."""
    if stop.reason is EXPIRED:
        return "expired"
    return "cancelled" if stop.reason is CANCELLED_LINE else None
