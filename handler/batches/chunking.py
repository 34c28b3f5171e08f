"""How a batch is cut into chunks that any replica may claim: a pure rule on the input's lines.

A chunk is `per_chunk` consecutive physical lines of the input file: its byte range (read with
one ranged GET, never the whole file) and the number of its first line, so its lines keep their
numbers in error lines. The input's lines are counted as the batch is validated, in the same
pass.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Part:
    """The lines of a batch one run answers: a chunk, with the store's lease on it."""

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


def cut(line_lengths: Iterable[int], per_chunk: int) -> list[Part]:
    """The chunks of a file whose physical lines have these byte lengths, in order."""
    parts: list[Part] = []
    start = offset = count = 0
    for length in line_lengths:
        offset += length
        count += 1
        if count == per_chunk:
            parts.append(Part(len(parts), len(parts) * per_chunk + 1, start, offset))
            start, count = offset, 0
    if count:
        parts.append(Part(len(parts), len(parts) * per_chunk + 1, start, offset))
    return parts


def measured(lines: Iterable[bytes], lengths: list[int]) -> Iterator[bytes]:
    """`lines` as they are, noting each one's length in `lengths` as it passes."""
    for line in lines:
        lengths.append(len(line))
        yield line
