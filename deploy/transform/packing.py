"""How a transform job turns the records of an input file into request bodies, as SageMaker does.

- SplitType=Line, BatchStrategy=MultiRecord: as many whole records as fit under MaxPayloadInMB;
- SplitType=Line, BatchStrategy=SingleRecord: one record per request;
- SplitType=None: the whole file, byte for byte, in one request (`whole_file`).
Each record is sent followed by LF (JSON Lines), so a blank record keeps its place.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


class RecordTooLarge(ValueError):
    """A record (or a whole file, without splitting) is larger than MaxPayloadInMB."""


@dataclass
class MiniBatch:
    """One request: the records as read (for JoinSource) and as sent (after InputFilter)."""

    originals: list[bytes] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    whole_file: bool = False

    def body(self) -> bytes:
        if self.whole_file:
            return self.sent[0]
        return b"".join(record + b"\n" for record in self.sent)

    def input_bytes(self) -> int:
        """How much of the input file this mini-batch covers (for progress)."""
        if self.whole_file:
            return len(self.originals[0])
        return sum(len(record) + 1 for record in self.originals)


def mini_batches(
    records: Iterable[tuple[bytes, bytes]], max_bytes: int, multi_record: bool
) -> Iterator[MiniBatch]:
    """Pack (original, sent) record pairs into mini-batches whose bodies fit `max_bytes`."""
    batch, size = MiniBatch(), 0
    for index, (original, sent) in enumerate(records):
        needed = len(sent) + 1
        if needed > max_bytes:
            raise RecordTooLarge(
                f"record {index + 1} is {needed} bytes, more than MaxPayloadInMB allows "
                f"({max_bytes} bytes)"
            )
        if batch.sent and (not multi_record or size + needed > max_bytes):
            yield batch
            batch, size = MiniBatch(), 0
        batch.originals.append(original)
        batch.sent.append(sent)
        size += needed
    if batch.sent:
        yield batch


def whole_file(content: bytes, max_bytes: int) -> MiniBatch:
    """SplitType=None: one request with the file as it is."""
    if len(content) > max_bytes:
        raise RecordTooLarge(
            f"the file is {len(content)} bytes, more than MaxPayloadInMB allows ({max_bytes} "
            "bytes); use SplitType Line"
        )
    return MiniBatch([content], [content], whole_file=True)
