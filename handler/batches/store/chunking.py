"""How a batch is cut into chunks that any replica may claim: pure rules on the input's lines.

A chunk is `per_chunk` consecutive physical lines of the input file: its byte range (read with
one ranged GET, never the whole file) and the number of its first line, so its lines keep their
numbers in error lines. The input's lines are counted as the batch is validated, in the same
pass.

How many lines a chunk holds (`lines_per_chunk`) follows from the batch's size and the runners
sharing the store: a few chunks for each, so that every replica works on the batch and the share
of a slow or dead one is taken by the others, within bounds that keep the S3 requests per line
low (every chunk costs about a dozen: its claim, lease renewals, results and `done.json`).
"""

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# A chunk is never smaller than this (its S3 requests spread over enough lines) nor larger than
# that (a takeover redoes at most that many lines), unless SAGEMAKER_BATCH_CHUNK_LINES says so.
MIN_CHUNK_LINES = 50
MAX_CHUNK_LINES = 1000
# Chunks per runner: two rounds of SAGEMAKER_MAX_CONCURRENT_BATCHES' default (2) chunks at once.
CHUNKS_PER_RUNNER = 4


@dataclass(frozen=True)
class Chunk:
    """A range of a batch's input lines that one run answers, with the store's lease on it."""

    index: int
    first_line: int
    start: int
    end: int
    lease: Any = None

    def to_json(self) -> dict[str, int]:
        return {
            "index": self.index,
            "first_line": self.first_line,
            "start": self.start,
            "end": self.end,
        }


def lines_per_chunk(lines: int, runners: int, override: int | None = None) -> int:
    """Lines per chunk of a batch of `lines` lines shared by `runners` runners (those seen in the
    store; none seen counts as one, the runner cutting it): CHUNKS_PER_RUNNER chunks each, within
    MIN_CHUNK_LINES..MAX_CHUNK_LINES. `override` (SAGEMAKER_BATCH_CHUNK_LINES), when set, wins."""
    if override is not None:
        return override
    share = math.ceil(lines / (max(runners, 1) * CHUNKS_PER_RUNNER))
    return min(MAX_CHUNK_LINES, max(MIN_CHUNK_LINES, share))


def cut(line_lengths: Iterable[int], per_chunk: int) -> list[Chunk]:
    """The chunks of a file whose physical lines have these byte lengths, in order."""
    chunks: list[Chunk] = []
    start = offset = count = 0
    for length in line_lengths:
        offset += length
        count += 1
        if count == per_chunk:
            chunks.append(Chunk(len(chunks), len(chunks) * per_chunk + 1, start, offset))
            start, count = offset, 0
    if count:
        chunks.append(Chunk(len(chunks), len(chunks) * per_chunk + 1, start, offset))
    return chunks


def measured(lines: Iterable[bytes], lengths: list[int]) -> Iterator[bytes]:
    """`lines` as they are, noting each one's length in `lengths` as it passes."""
    for line in lines:
        lengths.append(len(line))
        yield line
