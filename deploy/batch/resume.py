"""What `--resume` skips: the lines earlier runs answered, known from the output and error files
(`deploy.batch.staging` reads them back, repairing a half-written last line)."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from vllm_sagemaker.deploy.batch.minibatches import too_large
from vllm_sagemaker.deploy.batch.targets import MAX_REQUEST_BYTES
from vllm_sagemaker.handler.core.batch_lines import Checked, Outcome, checked_lines
from vllm_sagemaker.handler.core.jsonlines import iter_records


@dataclass
class Answered:
    """What earlier runs already answered (from the output and error files)."""

    custom_ids: set[str] = field(default_factory=set)
    line_numbers: set[int] = field(default_factory=set)

    def add(self, result: Outcome) -> None:
        """A refused line's answer names its line number (a duplicate's custom_id is not its
        own); any other answer is known by its custom_id."""
        if result.line_number is not None:
            self.line_numbers.add(result.line_number)
        elif result.custom_id is not None:
            self.custom_ids.add(result.custom_id)

    def has(self, checked: Checked) -> bool:
        if checked.fault is not None:
            return checked.number in self.line_numbers
        return checked.custom_id in self.custom_ids


def to_answer(source: IO[bytes], answered: Answered) -> Iterator[Checked]:
    """The input's lines not answered yet, checked (blank lines are not requests)."""
    for item in checked_lines(iter_records(source)):
        item = too_large(item, MAX_REQUEST_BYTES)
        if not answered.has(item):
            yield item
