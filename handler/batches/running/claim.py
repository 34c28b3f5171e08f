"""Claiming: the claim a batch run holds, its lease renewed while the run works."""

import asyncio

from vllm_sagemaker.handler.batches.running.context import RunEnded
from vllm_sagemaker.handler.batches.store.interface import BatchStore
from vllm_sagemaker.handler.batches.store.types import Claim


class HeldClaim:
    """One run's claim (a whole batch, or one chunk of it) and the runner that holds it."""

    def __init__(self, store: BatchStore, claim: Claim, owner: str) -> None:
        self.store = store
        self.claim = claim
        self.owner = owner
        self.batch_id: str = claim.batch["id"]

    @property
    def whole(self) -> bool:
        """The run is the whole batch's, not one chunk's."""
        return self.claim.chunk is None

    @property
    def batch_owner(self) -> str | None:
        """Who must hold the batch for this run to change it: nobody for a chunk's run, whose
        changes (counts, a failure) are merged with If-Match."""
        return self.owner if self.whole else None

    async def renew(self, lease_s: float) -> None:
        """Extend the lease; the run ends when another process took the work over."""
        renewed = await asyncio.to_thread(self.store.renew, self.claim, lease_s)
        if renewed is None:
            raise RunEnded(f"batch {self.batch_id} was taken over by another process")
        self.claim = renewed
