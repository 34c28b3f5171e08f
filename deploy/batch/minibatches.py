"""How `vllm-sagemaker batch` turns its input into requests and answers: lines answered before
skipped (`--resume`), the rest at most `LINES_PER_REQUEST` a request under `MAX_REQUEST_BYTES`;
lines the file checks refused, or in a mini-batch the model refused, become error lines."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import IO, Protocol

from vllm_sagemaker.core.batch_lines import (
    Checked,
    Fault,
    Outcome,
    checked_lines,
    outcome,
)
from vllm_sagemaker.core.content_types import JSON_LINES
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.core.formats import batch_error_line
from vllm_sagemaker.core.jsonlines import iter_records, split
from vllm_sagemaker.core.routing import BATCH_WORK_ATTRIBUTE
from vllm_sagemaker.deploy.base import invocations
from vllm_sagemaker.deploy.base.ordered import packed

LINES_PER_REQUEST = 32
# InvokeEndpoint carries at most 6 MB, and a container refuses more than its
# SAGEMAKER_MAX_PAYLOAD_IN_MB (6 MiB by default): a mini-batch stays under both.
MAX_REQUEST_BYTES = 6 * 1000 * 1000
# Every call is batch work: the container runs its records at batch priority.
CONTAINER_HEADERS = {
    "Content-Type": JSON_LINES,
    "X-Amzn-SageMaker-Custom-Attributes": BATCH_WORK_ATTRIBUTE,
}


class Destination(Protocol):
    """Where mini-batches go: an `invocations.Container`, or a SageMaker endpoint
    (`deploy.batch.sagemaker_endpoint.Endpoint`)."""

    async def invoke(self, body: bytes) -> bytes:
        """The answer to one JSON Lines mini-batch."""


@dataclass
class Answered:
    custom_ids: set[str] = field(default_factory=set)
    line_numbers: set[int] = field(default_factory=set)

    def add(self, result: Outcome) -> None:
        # A refused line is known by its number (a duplicate's custom_id is not its own).
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


def too_large(item: Checked, max_bytes: int) -> Checked:
    """`item`, refused when it alone is more than a request may carry."""
    if item.fault is not None or len(item.raw) + 1 <= max_bytes:
        return item
    message = f"The line is {len(item.raw)} bytes; a request may carry at most {max_bytes}."
    return replace(item, fault=Fault("payload_too_large", message, None))


def mini_batches(
    checked: Iterable[Checked], size: int = LINES_PER_REQUEST, max_bytes: int = MAX_REQUEST_BYTES
) -> Iterator[list[Checked]]:
    """Mini-batches of at most `size` lines whose requests fit in `max_bytes` together."""
    return packed(checked, lambda item: 0 if item.fault else len(item.raw) + 1, max_bytes, size)


def error_line(checked: Checked) -> bytes:
    assert checked.fault is not None
    return batch_error_line(checked.custom_id, checked.fault.error(checked.number))


async def answer_mini_batch(
    destination: Destination, mini_batch: list[Checked]
) -> list[tuple[bytes, Outcome]]:
    """A mini-batch's output lines, in order, with their outcomes: the lines not refused go in one
    request; an aborted line stops the run before any is written."""
    body = b"".join(item.raw + b"\n" for item in mini_batch if item.fault is None)
    try:
        answers = iter(split(await destination.invoke(body)) if body else ())
    except invocations.NotRetryable as final:
        message = f"The model refused the request holding this line: {final}"
        refused = RequestError(final.http_status, message, "invocation_refused")
        lines = [
            error_line(item) if item.fault else batch_error_line(item.custom_id, refused)
            for item in mini_batch
        ]
    else:
        lines = [error_line(item) if item.fault else next(answers, b"") for item in mini_batch]
        if any(not line for line in lines) or next(answers, None) is not None:
            raise invocations.InvocationFailed(
                "the container's answer did not have one line per record"
            )
    try:
        answered = [(line, outcome(line)) for line in lines]
    except ValueError:
        raise invocations.InvocationFailed(
            "the answer is not batch output lines (a JSON object a line): is it a vllm-sagemaker "
            "container?"
        ) from None
    for item, (_, result) in zip(mini_batch, answered, strict=True):
        if item.fault is None and result.aborted:
            raise invocations.InvocationFailed(
                f"the engine aborted line {item.number} (is the container stopping?)"
            )
    return answered
