"""The Files and Batches API's state in S3 (SAGEMAKER_BATCH_STORE=s3://bucket/prefix/), shared by
every replica that names the same prefix, with no database or queue: S3's conditional writes
are the only coordination.

Layout under the prefix:
    files/<id>/body                 a file's bytes (streamed in and out, multipart)
    files/<id>/file.json            its row; the file exists once this is written
    file-index/<ns>-<id>            upload order, for listing (ns: creation time in ns)
                                    (`handler.batches.store.s3.files`)
    batches/<id>/batch.json         the Batch object, its order and the batch-level lease;
                                    changed only with If-Match
    batch-index/<inverted ns>-<id>  newest first, for listing
    active/<ns>-<id>                the unfinished batches: a replica's one LIST per poll
                                    (`handler.batches.store.s3.batches`)
    batches/<id>/chunks.json        its chunks (`handler.batches.store.chunking`), written once
    batches/<id>/chunks/...         chunk leases and results (`handler.batches.store.s3.chunks`)
    runners/<runner id>             a heartbeat per runner (`handler.batches.store.s3.replicas`)

Index and `active` keys are written before the object they point to and removed after it, so a
crash leaves at worst a key that names nothing, which is skipped.

Work is claimed in three kinds, all under leases (`handler.batches.store.leases`):
- a `validating` batch, whole, under the batch's lease: validated and cut into chunks, as many
  as the batch's size and the runners present ask for (`handler.batches.store.chunking`);
- each chunk of a running batch, under its own lease: any replica runs any chunk;
- a batch whose chunks are all finished, whole, under the batch's lease: its results are
  assembled into the output and error files and it takes its final status.
"""

import hashlib
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from vllm_sagemaker.handler.batches.store.chunking import Chunk, cut, lines_per_chunk
from vllm_sagemaker.handler.batches.store.s3.batches import BatchRecords
from vllm_sagemaker.handler.batches.store.s3.chunks import KINDS, Chunks, Done
from vllm_sagemaker.handler.batches.store.s3.files import S3Files
from vllm_sagemaker.handler.batches.store.s3.objects import Bucket
from vllm_sagemaker.handler.batches.store.s3.replicas import Replicas
from vllm_sagemaker.handler.batches.store.types import (
    UNFINISHED,
    Batch,
    Claim,
    Page,
    StoredFile,
    StoreError,
    Work,
)
from vllm_sagemaker.handler.batches.store.usage import add_usage
from vllm_sagemaker.handler.process.logs import logger


class S3Store:
    """A `handler.batches.store.interface.BatchStore` over S3: the same methods as the embedded
    `handler.batches.store.sqlite.Store`."""

    # Every check is S3 requests (a lease renewal, a read of the batch), paid per chunk run.
    check_every_s = 2.0

    def __init__(
        self, uri: str, staging: str | None = None, chunk_lines: int | None = None
    ) -> None:
        self.bucket = Bucket(uri)
        # SAGEMAKER_BATCH_CHUNK_LINES; None: sized from the batch and the runners present.
        self.chunk_lines = chunk_lines
        self.replicas = Replicas(self.bucket)
        digest = hashlib.sha256(uri.encode()).hexdigest()[:12]
        self.staging = Path(staging or tempfile.gettempdir()) / f"vllm-sagemaker-s3-{digest}"
        self.stored_files = S3Files(self.bucket, self.staging)
        self.records = BatchRecords(self.bucket)
        # Each batch's chunks (chunks.json), by batch: written once and never changed.
        self._chunks: dict[str, list[Chunk]] = {}
        # Finished chunks' done.json, by batch: written once and never changed, so read once.
        self._finished: dict[str, dict[int, Done]] = {}
        try:
            (self.staging / "files").mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"{self.staging} cannot be used: {error}") from None
        self.bucket.check()

    # Files (`handler.batches.store.s3.files`)

    def partial_path(self, file_id: str) -> Path:
        return self.stored_files.partial_path(file_id)

    def add_file(self, stored: StoredFile) -> None:
        self.stored_files.add_file(stored)

    def file(self, file_id: str, now: float | None = None) -> StoredFile | None:
        return self.stored_files.file(file_id, now)

    def files(self, purpose: str | None, limit: int, descending: bool, after: str | None) -> Page:
        return self.stored_files.files(purpose, limit, descending, after)

    def delete_file(self, file_id: str) -> bool:
        return self.stored_files.delete_file(file_id)

    def open_body(self, file_id: str, chunk: Chunk | None = None) -> IO[bytes]:
        return self.stored_files.open_body(file_id, chunk)

    # Batches (`handler.batches.store.s3.batches`)

    def add_batch(self, batch: Batch) -> None:
        self.records.add_batch(batch)

    def batch(self, batch_id: str) -> Batch | None:
        return self.records.batch(batch_id)

    def batches(self, limit: int, after: str | None) -> tuple[list[Batch], bool]:
        return self.records.batches(limit, after)

    def change_batch(
        self, batch_id: str, change: Callable[[Batch], Batch | None], owner: str | None = None
    ) -> Batch | None:
        return self.records.change_batch(batch_id, change, owner)

    # Claims

    def claim(self, owner: str, lease_s: float, max_running: int) -> Claim | None:
        """The first piece of work nobody holds, oldest batch first: a batch to validate, a
        chunk to run, or a batch whose chunks are all finished. The chunks and finished chunks
        of batches no longer active are forgotten."""
        self.replicas.beat(owner)
        active = self.records.active()
        self._chunks = {
            batch_id: self._chunks[batch_id] for batch_id in active if batch_id in self._chunks
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
        batch = self.records.batch(batch_id)
        if batch is None or batch["status"] not in UNFINISHED:
            return None
        cut_into = None if batch["status"] == "validating" else self.chunks(batch_id)
        if cut_into is None:
            return self._claim_batch(batch_id, owner, lease_s, Work.VALIDATE)
        chunks = Chunks(self.bucket, batch_id)
        survey = chunks.survey()
        now = time.time()
        for chunk in cut_into:
            if not survey.worth_trying(chunk.index, now, lease_s):
                continue
            held = chunks.claim(chunk.index, owner, lease_s)
            if held is not None:
                return Claim(batch, owner, Work.LINES, Chunk(**chunk.to_json(), lease=held))
        if len(survey.finished) == len(cut_into):
            return self._claim_batch(batch_id, owner, lease_s, Work.ASSEMBLE)
        return None

    def _claim_batch(self, batch_id: str, owner: str, lease_s: float, work: Work) -> Claim | None:
        batch = self.records.claim(batch_id, owner, lease_s)
        return None if batch is None else Claim(batch, owner, work)

    def renew(self, claim: Claim, lease_s: float) -> Claim | None:
        self.replicas.beat(claim.owner)
        if claim.chunk is not None:
            held = Chunks(self.bucket, claim.batch["id"]).renew(claim.chunk.lease, lease_s)
            if held is None:
                return None
            chunk = Chunk(**claim.chunk.to_json(), lease=held)
            return Claim(claim.batch, claim.owner, claim.work, chunk)
        renewed = self.records.renew(claim.batch["id"], claim.owner, lease_s)
        return claim if renewed else None

    def release(self, claim: Claim) -> None:
        if claim.chunk is not None:
            Chunks(self.bucket, claim.batch["id"]).release(claim.chunk.lease)
            return
        self.records.release(claim.batch["id"], claim.owner)

    # Chunks and results

    def chunks(self, batch_id: str) -> list[Chunk] | None:
        """The batch's chunks, in order; None before it is cut."""
        if batch_id not in self._chunks:
            found = Chunks(self.bucket, batch_id).cut()
            if found is None:
                return None
            self._chunks[batch_id] = found
        return self._chunks[batch_id]

    def add_chunks(self, batch_id: str, lengths: list[int]) -> None:
        """Cut a validated batch, whose physical lines have `lengths`, into chunks sized for
        the runners present (or of `chunk_lines`) and write them once: the first chunks written
        stand (a second writer, such as a runner that validated again after a takeover, may
        count other runners), and every runner reads those."""
        runners = self.replicas.count()
        per_chunk = lines_per_chunk(len(lengths), runners, self.chunk_lines)
        chunks = cut(lengths, per_chunk)
        if Chunks(self.bucket, batch_id).add_cut(chunks):
            logger.info(
                "batch %s: %d lines, %d per chunk (%d runners present), chunks: %d",
                batch_id,
                len(lengths),
                per_chunk,
                runners,
                len(chunks),
            )

    def results_dir(self, claim: Claim) -> Path:
        """Where a chunk run writes its results before they go to S3: its own (by epoch)."""
        chunk = claim.chunk
        if chunk is None:
            raise StoreError("only a chunk's run writes results in the S3 store")
        return (
            self.staging
            / "batches"
            / claim.batch["id"]
            / f"{chunk.index}-{chunk.lease.lease.epoch}"
        )

    def fail_batch(
        self, batch_id: str, owner: str | None, change: Callable[[Batch], Batch]
    ) -> Batch | None:
        """Give the batch its failure (`change`); the claim's lease goes when its run ends."""
        return self.change_batch(batch_id, change, owner)

    def finish_chunk(
        self, batch_id: str, chunk: Chunk | None, files: dict[str, Path], tallies: dict[str, Any]
    ) -> bool:
        """Upload a chunk run's results under its epoch and make them the chunk's, once; then
        add them to the batch's counts. False when the chunk was finished by another run."""
        if chunk is None:
            raise StoreError("only a chunk's run finishes a chunk in the S3 store")
        chunks = Chunks(self.bucket, batch_id)
        for kind in KINDS:
            with files[kind].open("rb") as body:
                chunks.write_results(chunk.lease, kind, body)
        if not chunks.finish(chunk.lease, tallies):
            return False
        self.change_batch(batch_id, lambda batch: _counted(batch, tallies))
        return True

    def chunk_results(self, batch_id: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each finished chunk's epoch and tallies, in chunk order."""
        chunks = Chunks(self.bucket, batch_id)
        finished = self._finished.setdefault(batch_id, {})
        for chunk in self.chunks(batch_id) or []:
            if chunk.index not in finished:
                done = chunks.done(chunk.index)
                if done is None:
                    raise StoreError(f"chunk {chunk.index} of batch {batch_id} is not finished")
                finished[chunk.index] = done
            done = finished[chunk.index]
            yield chunk.index, {"epoch": done.epoch, **done.tallies}

    def assemble(self, batch_id: str, kind: str, stored: StoredFile) -> StoredFile:
        """The results of `kind` of every chunk, in chunk order, as one file (streamed through
        a multipart upload, never whole in memory)."""
        chunks = Chunks(self.bucket, batch_id)
        keys = [
            chunks.results_key(index, result["epoch"], kind)
            for index, result in self.chunk_results(batch_id)
        ]
        return self.stored_files.add_joined(stored, keys)

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


def _counted(batch: Batch, tallies: dict[str, Any]) -> Batch:
    counts = batch["request_counts"]
    counts["completed"] += tallies["completed"]
    counts["failed"] += tallies["failed"]
    add_usage(batch["usage"], tallies["usage"])
    return batch
