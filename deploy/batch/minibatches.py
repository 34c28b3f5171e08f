"""How `vllm-sagemaker batch` groups its lines into mini-batches and answers one: at most
`LINES_PER_REQUEST` lines in one JSON Lines request to `/invocations`, under the target's size
limit. Lines the file checks refused are answered here, without a request; a mini-batch the
model refuses as a whole becomes error lines for its lines.
"""

from collections.abc import Iterable, Iterator
from dataclasses import replace

from vllm_sagemaker.deploy.base import invoke
from vllm_sagemaker.deploy.batch.targets import Target
from vllm_sagemaker.handler.core.batch_lines import Checked, Fault, Outcome, outcome
from vllm_sagemaker.handler.core.errors import RequestError
from vllm_sagemaker.handler.core.formats import batch_error_line
from vllm_sagemaker.handler.core.jsonlines import split

LINES_PER_REQUEST = 32


def too_large(item: Checked, max_bytes: int) -> Checked:
    """`item`, refused when it alone is more than a request may carry."""
    if item.fault is not None or len(item.raw) + 1 <= max_bytes:
        return item
    message = f"The line is {len(item.raw)} bytes; a request may carry at most {max_bytes}."
    return replace(item, fault=Fault("payload_too_large", message, None))


def mini_batches(checked: Iterable[Checked], size: int, max_bytes: int) -> Iterator[list[Checked]]:
    """Mini-batches of at most `size` lines whose requests fit in `max_bytes` together (a
    line over `max_bytes` alone was refused by `too_large`)."""
    mini_batch: list[Checked] = []
    used = 0
    for item in checked:
        cost = 0 if item.fault else len(item.raw) + 1
        if mini_batch and (len(mini_batch) == size or used + cost > max_bytes):
            yield mini_batch
            mini_batch, used = [], 0
        mini_batch.append(item)
        used += cost
    if mini_batch:
        yield mini_batch


def error_line(checked: Checked) -> bytes:
    """The answer of a line the file checks refused, naming its line number."""
    assert checked.fault is not None
    return batch_error_line(checked.custom_id, checked.fault.error(checked.number))


def refused_line(checked: Checked, refusal: invoke.Refused) -> bytes:
    """The answer of a line whose whole mini-batch the model refused."""
    message = f"The model refused the request holding this line: {refusal}"
    return batch_error_line(
        checked.custom_id, RequestError(refusal.status, message, "invocation_refused")
    )


async def mini_batch_lines(target: Target, mini_batch: list[Checked]) -> list[bytes]:
    """The output lines of a mini-batch, in order: known answers as they are, the rest from one
    multi-record request to the container."""
    body = b"".join(item.raw + b"\n" for item in mini_batch if item.fault is None)
    if not body:
        return [error_line(item) for item in mini_batch]
    try:
        answers = iter(split(await target.invoke(body)))
    except invoke.Refused as refusal:
        return [
            error_line(item) if item.fault else refused_line(item, refusal) for item in mini_batch
        ]
    lines = [error_line(item) if item.fault else next(answers, b"") for item in mini_batch]
    if any(not line for line in lines) or next(answers, None) is not None:
        raise invoke.InvocationFailed("the container's answer did not have one line per record")
    return lines


async def answer_mini_batch(
    target: Target, mini_batch: list[Checked]
) -> list[tuple[bytes, Outcome]]:
    """A mini-batch's output lines, each with its outcome (every line is parsed once). A line
    the engine aborted is no answer: the run stops before anything of the mini-batch is
    written."""
    lines = await mini_batch_lines(target, mini_batch)
    try:
        answers = [(line, outcome(line)) for line in lines]
    except ValueError:
        raise invoke.InvocationFailed(
            "the answer is not batch output lines (a JSON object a line): is it a vllm-sagemaker "
            "container?"
        ) from None
    for item, (_, result) in zip(mini_batch, answers, strict=True):
        if item.fault is None and result.aborted:
            raise invoke.InvocationFailed(
                f"the engine aborted line {item.number} (is the container stopping?)"
            )
    return answers
