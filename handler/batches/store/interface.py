"""What a batch store is, to the routes and to the runner: `BatchStore`, which the embedded
store (`handler.batches.store.sqlite.Store`) and the shared one (`handler.batches.store.s3.store.
S3Store`) both are, with the same methods.

A batch's lines run in chunks: one chunk (the whole batch) in the embedded store, several in the
S3 store. A run of a chunk's lines ends with `finish_chunk`; once every chunk is finished, the
batch's results are joined into its files and it takes its final status with `assemble_batch`
(at once by the run of a whole batch, which still holds it; by an `ASSEMBLE` claim for chunks).
"""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from vllm_sagemaker.handler.batches.store.chunking import Chunk
from vllm_sagemaker.handler.batches.store.types import Batch, Claim, Page, StoredFile


class BatchStore(Protocol):
    """The durable state of the Files and Batches API, and the work its batches are claimed
    as."""

    # How often a run renews its lease, publishes its counts and looks for a cancel.
    check_every_s: float

    # Files

    def partial_path(self, file_id: str) -> Path:
        """Where an upload's body is written before `add_file` makes it a file."""

    def add_file(self, stored: StoredFile) -> None:
        """Make a completely written `<id>.partial` body a file."""

    def file(self, file_id: str, now: float | None = None) -> StoredFile | None:
        """The file with this id, None when there is none or it has expired."""

    def files(self, purpose: str | None, limit: int, descending: bool, after: str | None) -> Page:
        """One page of files in upload order (or its reverse), after the file `after`."""

    def delete_file(self, file_id: str) -> bool:
        """Remove the file; False when there was no such file."""

    def open_body(self, file_id: str, chunk: Chunk | None = None) -> IO[bytes]:
        """A file's bytes, or only those of one chunk of a batch's input."""

    # Batches

    def add_batch(self, batch: Batch) -> None: ...

    def batch(self, batch_id: str) -> Batch | None: ...

    def batches(self, limit: int, after: str | None) -> tuple[list[Batch], bool]:
        """One page of batches, newest first, after the batch `after`; and whether more
        follow."""

    def change_batch(
        self, batch_id: str, change: Callable[[Batch], Batch | None], owner: str | None = None
    ) -> Batch | None:
        """Apply `change` (None: leave the batch as it is) and return the batch as it now is;
        with `owner`, nothing changes (None) unless that runner holds the batch."""

    # Claims

    def claim(self, owner: str, lease_s: float, max_running: int) -> Claim | None:
        """Work nobody holds, under a lease of `lease_s` for `owner`."""

    def renew(self, claim: Claim, lease_s: float) -> Claim | None:
        """Extend the claim's lease; None when the work is no longer the claim's."""

    def release(self, claim: Claim) -> None:
        """Give the work up: another runner may take it at once."""

    # Runs

    def add_chunks(self, batch_id: str, lengths: list[int]) -> None:
        """Cut a validated batch, whose physical lines have `lengths`, into the chunks its lines
        are claimed in."""

    def results_dir(self, claim: Claim) -> Path:
        """Where the claim's run appends its results."""

    def fail_batch(
        self, batch_id: str, owner: str | None, change: Callable[[Batch], Batch]
    ) -> Batch | None:
        """Give the batch its failure (`change`), if `owner` may change it."""

    def finish_chunk(
        self, batch_id: str, chunk: Chunk | None, files: dict[str, Path], tallies: dict[str, Any]
    ) -> bool:
        """Make a run's results (`files` by kind, `output` and `errors`) and `tallies`
        (`completed`, `failed`, `usage`, and why the run `stopped` early) its chunk's, once;
        False when another run finished the chunk first."""

    def chunk_results(self, batch_id: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each finished chunk's index and tallies, in order."""

    def assemble_batch(
        self,
        batch_id: str,
        owner: str,
        outputs: dict[str, StoredFile],
        change: Callable[[Batch], Batch],
    ) -> Batch | None:
        """Join the finished chunks' results of each kind in `outputs` into that file (its
        `bytes` are what was written) and give the batch its final state (`change`), if
        `owner` holds it (None otherwise)."""
