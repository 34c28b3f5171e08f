"""Which replicas share the S3 store now, counted by their runners, so that a batch is cut into
enough chunks for all.

Every runner (one API-server process: `handler.batches.running.scheduler.runner_id`; a replica
with several API servers is that many) writes a heartbeat, the empty object `runners/<runner id>`,
each time it looks for work or renews a lease, at most every BEAT_EVERY_S. A runner is present
while its heartbeat is at most FRESH_S older than the newest one: both times are S3's own
(LastModified), so the replicas' clocks need not agree. The runner cutting a batch counts them
with one LIST, itself always among them (a long validation renews no lease, so its own
heartbeat may be older), and removes the heartbeats of runners gone (stopped, killed,
restarted under a new id).

A heartbeat only sizes chunks: one missed (S3 failing for a moment) costs nothing but the next
batch's chunks counting one runner fewer, so a beat that fails is dropped, never an error.
"""

import contextlib
import time
from collections.abc import Mapping

from vllm_sagemaker.handler.batches.store.s3.objects import Bucket
from vllm_sagemaker.handler.batches.store.types import StoreError

FOLDER = "runners/"
BEAT_EVERY_S = 5.0
# Three beats: a runner busy for a moment is not taken for gone.
FRESH_S = 3 * BEAT_EVERY_S


def present(written: Mapping[str, float], fresh_s: float = FRESH_S) -> set[str]:
    """The heartbeats (by key, with when each was written) of the runners still present: those
    written at most `fresh_s` before the newest."""
    if not written:
        return set()
    newest = max(written.values())
    return {key for key, at in written.items() if at >= newest - fresh_s}


class Replicas:
    """The heartbeats of the replicas' runners under one store's prefix."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket
        self._beaten: dict[str, float] = {}

    def beat(self, owner: str) -> None:
        """Note that `owner` is here, unless it did within the last BEAT_EVERY_S."""
        now = time.monotonic()
        if now - self._beaten.get(owner, -BEAT_EVERY_S) < BEAT_EVERY_S:
            return
        with contextlib.suppress(StoreError):
            self.bucket.put_json(FOLDER + owner, {})
            self._beaten[owner] = now

    def count(self) -> int:
        """How many runners are present, this process's own among them; the heartbeats of
        those gone are removed."""
        written = dict(self.bucket.listed(FOLDER))
        alive = present(written) | {FOLDER + owner for owner in self._beaten}
        for key in written.keys() - alive:
            self.bucket.delete(key)
        return len(alive)
