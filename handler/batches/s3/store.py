"""The Files and Batches API's state in S3 (SAGEMAKER_BATCH_STORE=s3://bucket/prefix/), shared by
every replica that names the same prefix, with no database or queue: S3's conditional writes
are the only coordination.

Layout under the prefix:
    files/<id>/body                 a file's bytes (streamed in and out, multipart)
    files/<id>/file.json            its row; the file exists once this is written
    file-index/<ns>-<id>            upload order, for listing (ns: creation time in ns)
    batches/<id>/batch.json         the Batch object, its order and the batch-level lease;
                                    changed only with If-Match
    batches/<id>/plan.json          its chunks (`handler.batches.chunking`), written once
    batches/<id>/chunks/...         chunk leases and results (`handler.batches.s3.chunks`)
    runners/<runner id>             a heartbeat per runner (`handler.batches.s3.runners`)
    batch-index/<inverted ns>-<id>  newest first, for listing
    active/<ns>-<id>                the unfinished batches: a replica's one LIST per poll

Index and `active` keys are written before the object they point to and removed after it, so a
crash leaves at worst a key that names nothing, which is skipped.

Work is claimed in three kinds, all under leases (`handler.batches.leases`):
- a `validating` batch, whole, under the batch's lease: validated and cut into chunks, as many
  as the batch's size and the runners present ask for (`handler.batches.chunking`);
- each chunk of a running batch, under its own lease: any replica runs any chunk;
- a batch whose chunks are all finished, whole, under the batch's lease: its results are
  assembled into the output and error files and it takes its final status.
"""

import contextlib
import hashlib
import io
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from vllm_sagemaker.handler.batches import leases
from vllm_sagemaker.handler.batches.batch_object import add_usage
from vllm_sagemaker.handler.batches.chunking import Part, cut, lines_per_chunk
from vllm_sagemaker.handler.batches.leases import Lease
from vllm_sagemaker.handler.batches.s3.chunks import KINDS, Chunks, Done
from vllm_sagemaker.handler.batches.s3.objects import Bucket, Conflict
from vllm_sagemaker.handler.batches.s3.runners import Runners
from vllm_sagemaker.handler.batches.store import (
    UNFINISHED,
    Batch,
    Claim,
    Page,
    StoredFile,
    StoreError,
    Work,
)
from vllm_sagemaker.handler.logs import logger

INDEX_DIGITS = 20
NEWEST = 10**INDEX_DIGITS - 1
CAS_ATTEMPTS = 20


class S3Store:
    """A `handler.batches.store_interface.BatchStore` over S3: the same methods as the embedded
    `handler.batches.store.Store`."""

    # Every check is S3 requests (a lease renewal, a read of the batch), paid per chunk run.
    check_every_s = 2.0

    def __init__(
        self, uri: str, staging: str | None = None, chunk_lines: int | None = None
    ) -> None:
        self.bucket = Bucket(uri)
        # SAGEMAKER_BATCH_CHUNK_LINES; None: sized from the batch and the runners present.
        self.chunk_lines = chunk_lines
        self.runners = Runners(self.bucket)
        digest = hashlib.sha256(uri.encode()).hexdigest()[:12]
        self.staging = Path(staging or tempfile.gettempdir()) / f"vllm-sagemaker-s3-{digest}"
        self._plans: dict[str, list[Part]] = {}
        # Finished chunks' done.json, by batch: written once and never changed, so read once.
        self._finished: dict[str, dict[int, Done]] = {}
        try:
            (self.staging / "files").mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"{self.staging} cannot be used: {error}") from None
        self.bucket.check()

    # Files

    def partial_path(self, file_id: str) -> Path:
        return self.staging / "files" / f"{file_id}.partial"

    def add_file(self, stored: StoredFile) -> None:
        """Upload a completely written `<id>.partial` body, then make it a file."""
        partial = self.partial_path(stored.id)
        with partial.open("rb") as body:
            self.bucket.upload(f"files/{stored.id}/body", body)
        self._add_file_row(stored)
        partial.unlink(missing_ok=True)

    def _add_file_row(self, stored: StoredFile) -> None:
        seq = time.time_ns()
        self.bucket.put_json(f"file-index/{seq:0{INDEX_DIGITS}d}-{stored.id}", {})
        self.bucket.put_json(f"files/{stored.id}/file.json", {**_file_json(stored), "seq": seq})

    def file(self, file_id: str, now: float | None = None) -> StoredFile | None:
        found = self.bucket.get_json(f"files/{file_id}/file.json")
        if found is None:
            return None
        stored = _stored(found.value)
        if stored.expires_at is not None and stored.expires_at <= (now or time.time()):
            self.delete_file(file_id)
            return None
        return stored

    def files(self, purpose: str | None, limit: int, descending: bool, after: str | None) -> Page:
        keys = [_named(key) for key in self.bucket.keys("file-index/")]
        if descending:
            keys.reverse()
        if after is not None:
            keys = keys[keys.index(after) + 1 :] if after in keys else []
        items: list[StoredFile] = []
        for file_id in keys:
            stored = self.file(file_id)
            if stored is not None and (purpose is None or stored.purpose == purpose):
                items.append(stored)
                if len(items) > limit:
                    break
        return Page(items[:limit], len(items) > limit)

    def delete_file(self, file_id: str) -> bool:
        found = self.bucket.get_json(f"files/{file_id}/file.json")
        if found is None:
            return False
        self.bucket.delete(f"files/{file_id}/file.json")
        self.bucket.delete(f"files/{file_id}/body")
        self.bucket.delete(f"file-index/{found.value['seq']:0{INDEX_DIGITS}d}-{file_id}")
        return True

    def open_body(self, file_id: str, part: Part | None = None) -> IO[bytes]:
        key = f"files/{file_id}/body"
        if part is None:
            return self.bucket.open(key)
        if part.end == part.start:
            return io.BytesIO()
        return self.bucket.open(key, part.start, part.end - 1)

    # Batches

    def add_batch(self, batch: Batch) -> None:
        seq = time.time_ns()
        self.bucket.put_json(f"batch-index/{NEWEST - seq:0{INDEX_DIGITS}d}-{batch['id']}", {})
        self.bucket.put_json(f"active/{seq:0{INDEX_DIGITS}d}-{batch['id']}", {})
        self.bucket.create_json(self._batch_key(batch["id"]), {"batch": batch, "seq": seq})

    def _batch_key(self, batch_id: str) -> str:
        return f"batches/{batch_id}/batch.json"

    def batch(self, batch_id: str) -> Batch | None:
        found = self.bucket.get_json(self._batch_key(batch_id))
        return None if found is None else found.value["batch"]

    def batches(self, limit: int, after: str | None) -> tuple[list[Batch], bool]:
        start_after = None
        if after is not None:
            found = self.bucket.get_json(self._batch_key(after))
            if found is None:
                return [], False
            start_after = f"batch-index/{NEWEST - found.value['seq']:0{INDEX_DIGITS}d}-{after}"
        items: list[Batch] = []
        for key in self.bucket.keys("batch-index/", start_after):
            batch = self.batch(_named(key))
            if batch is not None:
                items.append(batch)
                if len(items) > limit:
                    break
        return items[:limit], len(items) > limit

    def change_batch(
        self, batch_id: str, change: Callable[[Batch], Batch | None], owner: str | None = None
    ) -> Batch | None:
        """Apply `change` with If-Match, reading again whenever another replica wrote first.
        With `owner`, nothing changes unless that runner holds the batch's lease."""
        for _ in range(CAS_ATTEMPTS):
            found = self.bucket.get_json(self._batch_key(batch_id))
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
                    self._batch_key(batch_id), {**record, "batch": changed}, found.etag
                )
            except Conflict:
                continue
            if changed["status"] not in UNFINISHED:
                self.bucket.delete(f"active/{record['seq']:0{INDEX_DIGITS}d}-{batch_id}")
            return changed
        raise StoreError(f"batch {batch_id} changed {CAS_ATTEMPTS} times while being written")

    # Claims

    def claim(self, owner: str, lease_s: float, max_running: int) -> Claim | None:
        """The first piece of work nobody holds, oldest batch first: a batch to validate, a
        chunk to run, or a batch whose chunks are all finished. Plans and finished chunks of
        batches no longer active are forgotten."""
        self.runners.beat(owner)
        active = [_named(key) for key in self.bucket.keys("active/")]
        self._plans = {
            batch_id: self._plans[batch_id] for batch_id in active if batch_id in self._plans
        }
        self._finished = {
            batch_id: self._finished[batch_id] for batch_id in active if batch_id in self._finished
        }
        for batch_id in active:
            claim = self._claim_in(batch_id, owner, lease_s)
            if claim is not None:
                return claim
        return None

    def _claim_in(self, batch_id: str, owner: str, lease_s: float) -> Claim | None:
        found = self.bucket.get_json(self._batch_key(batch_id))
        if found is None or found.value["batch"]["status"] not in UNFINISHED:
            return None
        batch = found.value["batch"]
        plan = None if batch["status"] == "validating" else self.plan(batch_id)
        if plan is None:
            return self._claim_batch(batch_id, owner, lease_s, Work.VALIDATE)
        chunks = Chunks(self.bucket, batch_id)
        survey = chunks.survey()
        now = time.time()
        for part in plan:
            if not survey.worth_trying(part.index, now, lease_s):
                continue
            held = chunks.claim(part.index, owner, lease_s)
            if held is not None:
                return Claim(batch, owner, Work.LINES, Part(**part.to_json(), lease=held))
        if len(survey.finished) == len(plan):
            return self._claim_batch(batch_id, owner, lease_s, Work.ASSEMBLE)
        return None

    def _claim_batch(self, batch_id: str, owner: str, lease_s: float, work: Work) -> Claim | None:
        now = time.time()
        found = self.bucket.get_json(self._batch_key(batch_id))
        if found is None:
            return None
        lease = leases.claimed(_lease(found.value), owner, now, lease_s)
        if lease is None:
            return None
        record = {**found.value, "lease": lease.to_json()}
        try:
            self.bucket.replace_json(self._batch_key(batch_id), record, found.etag)
        except Conflict:
            return None
        return Claim(record["batch"], owner, work)

    def renew(self, claim: Claim, lease_s: float) -> Claim | None:
        self.runners.beat(claim.owner)
        if claim.part is not None:
            held = Chunks(self.bucket, claim.batch["id"]).renew(claim.part.lease, lease_s)
            if held is None:
                return None
            part = Part(**claim.part.to_json(), lease=held)
            return Claim(claim.batch, claim.owner, claim.work, part)
        now = time.time()
        for _ in range(CAS_ATTEMPTS):
            found = self.bucket.get_json(self._batch_key(claim.batch["id"]))
            if found is None:
                return None
            mine = _mine(found.value, claim.owner)
            lease = leases.renewed(_lease(found.value), mine, now, lease_s)
            if lease is None:
                return None
            try:
                self.bucket.replace_json(
                    self._batch_key(claim.batch["id"]),
                    {**found.value, "lease": lease.to_json()},
                    found.etag,
                )
            except Conflict:
                continue
            return claim
        return None

    def release(self, claim: Claim) -> None:
        if claim.part is not None:
            Chunks(self.bucket, claim.batch["id"]).release(claim.part.lease)
            return
        with contextlib.suppress(Conflict):
            found = self.bucket.get_json(self._batch_key(claim.batch["id"]))
            if found is not None and leases.holds(
                _lease(found.value), _mine(found.value, claim.owner), 0
            ):
                released = leases.released(_lease(found.value) or Lease(None, 0, 0))
                self.bucket.replace_json(
                    self._batch_key(claim.batch["id"]),
                    {**found.value, "lease": released.to_json()},
                    found.etag,
                )

    # Plans and results

    def plan(self, batch_id: str) -> list[Part] | None:
        if batch_id not in self._plans:
            found = self.bucket.get_json(f"batches/{batch_id}/plan.json")
            if found is None:
                return None
            self._plans[batch_id] = [Part(**part) for part in found.value["parts"]]
        return self._plans[batch_id]

    def add_plan(self, batch_id: str, lengths: list[int]) -> None:
        """Cut a validated batch, whose physical lines have `lengths`, into chunks sized for
        the runners present (or of `chunk_lines`) and write them once: the first plan written
        stands (a second writer, such as a runner that validated again after a takeover, may
        count other runners), and every runner reads that one."""
        runners = self.runners.count()
        per_chunk = lines_per_chunk(len(lengths), runners, self.chunk_lines)
        parts = cut(lengths, per_chunk)
        with contextlib.suppress(Conflict):
            self.bucket.create_json(
                f"batches/{batch_id}/plan.json", {"parts": [part.to_json() for part in parts]}
            )
            logger.info(
                "batch %s: %d lines, %d per chunk (%d runners present), chunks: %d",
                batch_id,
                len(lengths),
                per_chunk,
                runners,
                len(parts),
            )

    def results_dir(self, claim: Claim) -> Path:
        """Where a chunk run writes its results before they go to S3: its own (by epoch)."""
        part = claim.part
        if part is None:
            raise StoreError("only a chunk's run writes results in the S3 store")
        return (
            self.staging / "batches" / claim.batch["id"] / f"{part.index}-{part.lease.lease.epoch}"
        )

    def fail_batch(
        self, batch_id: str, owner: str | None, change: Callable[[Batch], Batch]
    ) -> Batch | None:
        """Give the batch its failure (`change`); the claim's lease goes when its run ends."""
        return self.change_batch(batch_id, change, owner)

    def finish_part(
        self, batch_id: str, part: Part | None, files: dict[str, Path], tallies: dict[str, Any]
    ) -> bool:
        """Upload a chunk run's results under its epoch and make them the chunk's, once; then
        add them to the batch's counts. False when the chunk was finished by another run."""
        if part is None:
            raise StoreError("only a chunk's run finishes a part in the S3 store")
        chunks = Chunks(self.bucket, batch_id)
        for kind in KINDS:
            with files[kind].open("rb") as body:
                chunks.write_results(part.lease, kind, body)
        if not chunks.finish(part.lease, tallies):
            return False
        self.change_batch(batch_id, lambda batch: _counted(batch, tallies))
        return True

    def chunk_results(self, batch_id: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each finished chunk's epoch and tallies, in chunk order."""
        chunks = Chunks(self.bucket, batch_id)
        finished = self._finished.setdefault(batch_id, {})
        for part in self.plan(batch_id) or []:
            if part.index not in finished:
                done = chunks.done(part.index)
                if done is None:
                    raise StoreError(f"chunk {part.index} of batch {batch_id} is not finished")
                finished[part.index] = done
            done = finished[part.index]
            yield part.index, {"epoch": done.epoch, **done.tallies}

    def assemble(self, batch_id: str, kind: str, stored: StoredFile) -> StoredFile:
        """The results of `kind` of every chunk, in chunk order, as one file (streamed through
        a multipart upload, never whole in memory)."""
        chunks = Chunks(self.bucket, batch_id)
        keys = [
            chunks.results_key(index, result["epoch"], kind)
            for index, result in self.chunk_results(batch_id)
        ]
        joined = _Joined(self.bucket, keys)
        self.bucket.upload(f"files/{stored.id}/body", io.BufferedReader(joined))
        assembled = StoredFile(
            stored.id,
            joined.size,
            stored.created_at,
            stored.filename,
            stored.purpose,
            stored.expires_at,
        )
        if self.bucket.get_json(f"files/{stored.id}/file.json") is None:
            self._add_file_row(assembled)
        return assembled

    def assemble_batch(
        self,
        batch_id: str,
        owner: str,
        outputs: dict[str, StoredFile],
        change: Callable[[Batch], Batch],
    ) -> Batch | None:
        """Every chunk is finished: join their results of each kind in `outputs` into that file
        (`assemble`), then give the batch its final state (`change`) if `owner` holds it."""
        for kind, stored in outputs.items():
            self.assemble(batch_id, kind, stored)
        return self.change_batch(batch_id, change, owner)


class _Joined(io.RawIOBase):
    """Several S3 objects read one after another as one stream."""

    def __init__(self, bucket: Bucket, keys: list[str]) -> None:
        self.bucket = bucket
        self.keys = iter(keys)
        self.current: IO[bytes] | None = None
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self.current is None:
                key = next(self.keys, None)
                if key is None:
                    return 0
                self.current = self.bucket.open(key)
            data = self.current.read(len(buffer))
            if data:
                buffer[: len(data)] = data
                self.size += len(data)
                return len(data)
            self.current = None


def _named(key: str) -> str:
    """The id an index key names: `<folder>/<order>-<id>` -> `<id>`."""
    return key.rpartition("/")[2].partition("-")[2]


def _counted(batch: Batch, tallies: dict[str, Any]) -> Batch:
    counts = batch["request_counts"]
    counts["completed"] += tallies["completed"]
    counts["failed"] += tallies["failed"]
    add_usage(batch["usage"], tallies["usage"])
    return batch


def _lease(record: dict[str, Any]) -> Lease | None:
    value = record.get("lease")
    return None if value is None else Lease.from_json(value)


def _mine(record: dict[str, Any], owner: str) -> Lease:
    """The lease `owner` would hold on this batch: its own name, the current epoch, and no end
    (`holds` then checks only owner, epoch and the stored lease's end)."""
    lease = _lease(record)
    return Lease(owner, float("inf"), 0 if lease is None else lease.epoch)


def _file_json(stored: StoredFile) -> dict[str, Any]:
    return {
        "id": stored.id,
        "bytes": stored.bytes,
        "created_at": stored.created_at,
        "filename": stored.filename,
        "purpose": stored.purpose,
        "expires_at": stored.expires_at,
    }


def _stored(value: dict[str, Any]) -> StoredFile:
    return StoredFile(
        value["id"],
        value["bytes"],
        value["created_at"],
        value["filename"],
        value["purpose"],
        value["expires_at"],
    )
