"""What the batch store holds and hands out, the same for both backends (`handler.batches.store.
sqlite.Store` and `handler.batches.store.s3.store.S3Store`): the Batch object, a file's record,
the work a runner claims, a page of files, and the store's errors."""

import enum
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.handler.batches.store.chunking import Chunk

# The Batch object as the API shows it (`handler.batches.api.batch_object.new_batch`).
Batch = dict[str, Any]

# A batch in one of these states still has work for a runner; the others are final.
UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")


class StoreError(Exception):
    """The store cannot be used (unwritable directory, full disk): a clear 5xx, never corrupt
    state."""


class StoreUnavailable(StoreError):
    """The store is out of reach for now (S3 unreachable or failing): a 503, try again."""


@dataclass(frozen=True)
class StoredFile:
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    expires_at: int | None


class Work(enum.Enum):
    """What a claim asks its runner to do."""

    VALIDATE = "validate"  # check the input file; the batch runs or fails
    LINES = "lines"  # answer the lines: the whole batch's, or one chunk's
    ASSEMBLE = "assemble"  # every chunk is finished: join their results, give the final status


@dataclass(frozen=True)
class Claim:
    """Work a runner holds: on a whole batch, or one chunk of it (`chunk`, in a shared store)."""

    batch: Batch
    owner: str
    work: Work
    chunk: Chunk | None = None


@dataclass(frozen=True)
class Page:
    items: list[StoredFile]
    has_more: bool
