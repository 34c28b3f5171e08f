"""The batch records of the S3 store: each batch's `batch.json` (the Batch object, its order and
the batch-level lease), changed only with If-Match, and the keys that list batches, newest first
(`batch-index/`) and unfinished (`active/`) (`handler.batches.store.s3.store` names the layout).

A batch's lease (`handler.batches.store.leases`) is held by the runner that validates the batch
or assembles its chunks' results; a chunk's lease is the chunk's own
(`handler.batches.store.s3.chunks`)."""

import contextlib
import time
from collections.abc import Callable
from typing import Any

from vllm_sagemaker.handler.batches.store import leases
from vllm_sagemaker.handler.batches.store.leases import Lease
from vllm_sagemaker.handler.batches.store.s3.objects import (
    INDEX_DIGITS,
    Bucket,
    Conflict,
    index_key,
    named,
)
from vllm_sagemaker.handler.batches.store.types import UNFINISHED, Batch, StoreError

INDEX, ACTIVE = "batch-index/", "active/"
NEWEST = 10**INDEX_DIGITS - 1
CAS_ATTEMPTS = 20


class BatchRecords:
    """The batches under one store's prefix."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket

    def _key(self, batch_id: str) -> str:
        return f"batches/{batch_id}/batch.json"

    def add_batch(self, batch: Batch) -> None:
        seq = time.time_ns()
        self.bucket.put_json(index_key(INDEX, NEWEST - seq, batch["id"]), {})
        self.bucket.put_json(index_key(ACTIVE, seq, batch["id"]), {})
        self.bucket.create_json(self._key(batch["id"]), {"batch": batch, "seq": seq})

    def batch(self, batch_id: str) -> Batch | None:
        found = self.bucket.get_json(self._key(batch_id))
        return None if found is None else found.value["batch"]

    def batches(self, limit: int, after: str | None) -> tuple[list[Batch], bool]:
        start_after = None
        if after is not None:
            found = self.bucket.get_json(self._key(after))
            if found is None:
                return [], False
            start_after = index_key(INDEX, NEWEST - found.value["seq"], after)
        items: list[Batch] = []
        for key in self.bucket.keys(INDEX, start_after):
            batch = self.batch(named(key))
            if batch is not None:
                items.append(batch)
                if len(items) > limit:
                    break
        return items[:limit], len(items) > limit

    def active(self) -> list[str]:
        """The unfinished batches' ids, oldest first: one LIST."""
        return [named(key) for key in self.bucket.keys(ACTIVE)]

    def change_batch(
        self, batch_id: str, change: Callable[[Batch], Batch | None], owner: str | None = None
    ) -> Batch | None:
        """Apply `change` with If-Match, reading again whenever another replica wrote first.
        With `owner`, nothing changes unless that runner holds the batch's lease."""
        for _ in range(CAS_ATTEMPTS):
            found = self.bucket.get_json(self._key(batch_id))
            if found is None:
                return None
            record = found.value
            if owner is not None and not leases.holds(_lease(record), _mine(record, owner), 0):
                return None
            changed = change(record["batch"])
            if changed is None:
                return record["batch"]
            try:
                self.bucket.replace_json(
                    self._key(batch_id), {**record, "batch": changed}, found.etag
                )
            except Conflict:
                continue
            if changed["status"] not in UNFINISHED:
                self.bucket.delete(index_key(ACTIVE, record["seq"], batch_id))
            return changed
        raise StoreError(f"batch {batch_id} changed {CAS_ATTEMPTS} times while being written")

    def claim(self, batch_id: str, owner: str, lease_s: float) -> Batch | None:
        """Take the batch's lease when nobody holds it; the batch, or None."""
        now = time.time()
        found = self.bucket.get_json(self._key(batch_id))
        if found is None:
            return None
        lease = leases.claimed(_lease(found.value), owner, now, lease_s)
        if lease is None:
            return None
        record = {**found.value, "lease": lease.to_json()}
        try:
            self.bucket.replace_json(self._key(batch_id), record, found.etag)
        except Conflict:
            return None
        batch: Batch = record["batch"]
        return batch

    def renew(self, batch_id: str, owner: str, lease_s: float) -> bool:
        """Extend `owner`'s lease on the batch; False when it is no longer `owner`'s."""
        now = time.time()
        for _ in range(CAS_ATTEMPTS):
            found = self.bucket.get_json(self._key(batch_id))
            if found is None:
                return False
            mine = _mine(found.value, owner)
            lease = leases.renewed(_lease(found.value), mine, now, lease_s)
            if lease is None:
                return False
            try:
                self.bucket.replace_json(
                    self._key(batch_id), {**found.value, "lease": lease.to_json()}, found.etag
                )
            except Conflict:
                continue
            return True
        return False

    def release(self, batch_id: str, owner: str) -> None:
        """Give the batch's lease up, if `owner` still holds it."""
        with contextlib.suppress(Conflict):
            found = self.bucket.get_json(self._key(batch_id))
            if found is not None and leases.holds(
                _lease(found.value), _mine(found.value, owner), 0
            ):
                released = leases.released(_lease(found.value) or Lease(None, 0, 0))
                self.bucket.replace_json(
                    self._key(batch_id), {**found.value, "lease": released.to_json()}, found.etag
                )


def _lease(record: dict[str, Any]) -> Lease | None:
    value = record.get("lease")
    return None if value is None else Lease.from_json(value)


def _mine(record: dict[str, Any], owner: str) -> Lease:
    """The lease `owner` would hold on this batch: its own name, the current epoch, and no end
    (`holds` then checks only owner, epoch and the stored lease's end)."""
    lease = _lease(record)
    return Lease(owner, float("inf"), 0 if lease is None else lease.epoch)
