"""The chunks of one batch in S3: cut once, then claimed, renewed, given up and finished with
conditional writes alone, so replicas sharing a bucket never run a chunk at the same time and
take over a chunk whose runner died once its lease runs out.

The batch's chunks (`handler.batches.store.chunking`) are `batches/<batch id>/chunks.json`,
`{"chunks": [...]}`, created once (If-None-Match). Objects of chunk `n`, under
`batches/<batch id>/chunks/<n>/`:
    lease.json                the lease (`handler.batches.store.leases`), changed only with
                              If-Match
    <epoch>/output.jsonl      the results of the run under that epoch, written before done.json
    <epoch>/errors.jsonl
    done.json                 which epoch's results count, who ran it, and what they add up
                              to; created once (If-None-Match), so a chunk finishes once

A runner that lost its lease can still write its results, but under its own epoch: they are
never read unless that run created done.json first, and a run only does so once all its result
lines are written. So each custom_id is answered exactly once, across crashes and takeovers.
"""

import contextlib
import time
from dataclasses import dataclass, field
from typing import IO, Any

from vllm_sagemaker.handler.batches.store import leases
from vllm_sagemaker.handler.batches.store.chunking import Chunk
from vllm_sagemaker.handler.batches.store.leases import Lease
from vllm_sagemaker.handler.batches.store.s3.objects import Bucket, Conflict

KINDS = ("output", "errors")


@dataclass(frozen=True)
class Held:
    """A chunk this runner holds: the lease it wrote and that lease's ETag."""

    index: int
    lease: Lease
    etag: str


@dataclass(frozen=True)
class Done:
    """A finished chunk: the epoch whose results count, and their tallies."""

    epoch: int
    tallies: dict[str, Any]


@dataclass
class Survey:
    finished: set[int] = field(default_factory=set)
    leases_written: dict[int, float] = field(default_factory=dict)

    def worth_trying(self, index: int, now: float, lease_s: float) -> bool:
        """Whether chunk `index` may be free: not finished, and its lease (if any) not written
        within the last lease (a held lease is renewed well within that)."""
        if index in self.finished:
            return False
        written = self.leases_written.get(index)
        return written is None or written + lease_s <= now


class Chunks:
    def __init__(self, bucket: Bucket, batch_id: str) -> None:
        self.bucket = bucket
        self.root = f"batches/{batch_id}/chunks/"
        self.list_key = f"batches/{batch_id}/chunks.json"

    def cut(self) -> list[Chunk] | None:
        """The batch's chunks, in order; None before the batch is cut."""
        found = self.bucket.get_json(self.list_key)
        if found is None:
            return None
        return [Chunk(**chunk) for chunk in found.value["chunks"]]

    def add_cut(self, chunks: list[Chunk]) -> bool:
        """Write the batch's chunks unless they are written already (False): the first stand."""
        try:
            self.bucket.create_json(self.list_key, {"chunks": [c.to_json() for c in chunks]})
        except Conflict:
            return False
        return True

    def _key(self, index: int, name: str) -> str:
        return f"{self.root}{index:06d}/{name}"

    def _lease_key(self, index: int) -> str:
        return self._key(index, "lease.json")

    def results_key(self, index: int, epoch: int, kind: str) -> str:
        return self._key(index, f"{epoch}/{kind}.jsonl")

    def claim(
        self, index: int, owner: str, lease_s: float, now: float | None = None
    ) -> Held | None:
        """Take chunk `index` when nobody holds it and it is not finished; None otherwise (or
        when another runner claimed it at the same moment)."""
        moment = time.time() if now is None else now
        if self.done(index) is not None:
            return None
        current = self.bucket.get_json(self._lease_key(index))
        lease = leases.claimed(
            None if current is None else Lease.from_json(current.value), owner, moment, lease_s
        )
        if lease is None:
            return None
        try:
            if current is None:
                etag = self.bucket.create_json(self._lease_key(index), lease.to_json())
            else:
                etag = self.bucket.replace_json(
                    self._lease_key(index), lease.to_json(), current.etag
                )
        except Conflict:
            return None
        return Held(index, lease, etag)

    def renew(self, held: Held, lease_s: float, now: float | None = None) -> Held | None:
        """Extend the lease (one conditional write: If-Match on the lease this runner wrote);
        None when the chunk is no longer this runner's."""
        moment = time.time() if now is None else now
        lease = leases.renewed(held.lease, held.lease, moment, lease_s)
        if lease is None:
            return None
        try:
            etag = self.bucket.replace_json(self._lease_key(held.index), lease.to_json(), held.etag)
        except Conflict:
            return None
        return Held(held.index, lease, etag)

    def release(self, held: Held) -> None:
        """Give the chunk up so another runner may claim it at once (at shutdown); nothing when
        it is no longer this runner's."""
        lease = leases.released(held.lease)
        with contextlib.suppress(Conflict):
            self.bucket.replace_json(self._lease_key(held.index), lease.to_json(), held.etag)

    def write_results(self, held: Held, kind: str, source: IO[bytes]) -> None:
        """Store the run's results of `kind` under its own epoch (the fence)."""
        self.bucket.upload(self.results_key(held.index, held.lease.epoch, kind), source)

    def finish(self, held: Held, tallies: dict[str, Any]) -> bool:
        """Make this run's results the chunk's, once: False when the chunk was finished already
        (by a run that held it before or after this one)."""
        try:
            self.bucket.create_json(
                self._key(held.index, "done.json"),
                {"epoch": held.lease.epoch, "owner": held.lease.owner, "tallies": tallies},
            )
        except Conflict:
            return False
        return True

    def done(self, index: int) -> Done | None:
        found = self.bucket.get_json(self._key(index, "done.json"))
        if found is None:
            return None
        return Done(int(found.value["epoch"]), found.value["tallies"])

    def survey(self) -> Survey:
        """Which chunks are finished, and when each lease was last written, from one LIST per
        1,000 objects: a replica looking for work reads no lease it need not."""
        found = Survey()
        for key, written in self.bucket.listed(self.root):
            index, _, name = key[len(self.root) :].partition("/")
            if name == "done.json":
                found.finished.add(int(index))
            elif name == "lease.json":
                found.leases_written[int(index)] = written
        return found
