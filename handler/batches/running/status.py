"""Status changes: the batch as a run last saw it, and every change the run makes to it (each
only while the run may: see `HeldClaim.batch_owner`)."""

import asyncio
from collections.abc import Callable
from typing import Any

from vllm_sagemaker.core.batch_lines import CANCELLED_LINE
from vllm_sagemaker.handler.batches.running.claim import HeldClaim
from vllm_sagemaker.handler.batches.running.context import EXPIRED, RunEnded
from vllm_sagemaker.handler.batches.running.results import Tallies
from vllm_sagemaker.handler.batches.store.types import Batch
from vllm_sagemaker.handler.records.minibatch import Stop


class BatchStatus:
    """The batch of one run: validated and started, failed, its progress, finalizing and its
    final status."""

    def __init__(self, held: HeldClaim) -> None:
        self.held = held
        self.store = held.store
        self.batch: Batch = held.claim.batch

    async def change(self, change: Callable[[Batch], Batch | None]) -> Batch:
        changed = await asyncio.to_thread(
            self.store.change_batch, self.held.batch_id, change, self.held.batch_owner
        )
        if changed is None:
            raise RunEnded(f"batch {self.held.batch_id} is no longer held by this process")
        self.batch = changed
        return changed

    async def start(self, model: str | None, total: int, now: int) -> None:
        """The batch is valid: it runs its `total` lines with `model`."""

        def start(batch: Batch) -> Batch:
            batch["model"] = model
            batch["request_counts"]["total"] = total
            batch["in_progress_at"] = now
            if batch["status"] == "validating":
                batch["status"] = "in_progress"
            return batch

        await self.change(start)

    async def fail(self, errors: list[dict[str, Any]], now: int) -> None:
        def failed(batch: Batch) -> Batch:
            batch.update(status="failed", failed_at=now, errors={"object": "list", "data": errors})
            return batch

        await asyncio.to_thread(
            self.store.fail_batch, self.held.batch_id, self.held.batch_owner, failed
        )

    async def progress(self, tallies: Tallies) -> Batch:
        """The batch as it now is, with this run's counts so far when the run is the whole
        batch (a chunk's counts join the batch's when the chunk is finished)."""
        if self.held.whole:
            return await self.change(lambda batch: _with_counts(batch, tallies))
        batch = await asyncio.to_thread(self.store.batch, self.held.batch_id)
        if batch is None:
            raise RunEnded(f"batch {self.held.batch_id} is gone")
        return batch

    async def finalizing(self, now: int) -> None:
        def finalizing(batch: Batch) -> Batch:
            batch["finalizing_at"] = batch["finalizing_at"] or now
            if batch["status"] == "in_progress":
                batch["status"] = "finalizing"
            return batch

        await self.change(finalizing)


def final(
    ids: dict[str, str | None], totals: Tallies, stop: Stop, now: int
) -> Callable[[Batch], Batch]:
    """The change that gives a batch its final status, its results files and counts."""

    def finished(batch: Batch) -> Batch:
        status = _final_status(batch, stop)
        batch.update(ids, status=status)
        batch[f"{status}_at"] = now
        return _with_counts(batch, totals)

    return finished


def _with_counts(batch: Batch, tallies: Tallies) -> Batch:
    counts = batch["request_counts"]
    counts["completed"], counts["failed"] = tallies.completed, tallies.failed
    batch["usage"] = tallies.usage
    return batch


def _final_status(batch: Batch, stop: Stop) -> str:
    if stop.reason is EXPIRED:
        return "expired"
    if stop.reason is CANCELLED_LINE or batch["status"] == "cancelling":
        return "cancelled"
    return "completed"
