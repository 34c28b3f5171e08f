"""Mini-batches, as `transform`, `batch` and `deploy batch --local` send records to
`/invocations`: `packed`, finished `in_order`, under SageMaker's limit (`payload_problem`)."""

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TypeVar

from vllm_sagemaker.core.execution_parameters import MAX_TOTAL_MB
from vllm_sagemaker.deploy.base.errors import Problem

Item = TypeVar("Item")
Result = TypeVar("Result")


def payload_problem(
    payload_mb: int,
    concurrency: int,
    packs: bool,
    payload: str = "--max-payload-mb",
    concurrent: str = "--max-concurrent-transforms",
) -> Problem | None:
    """CreateTransformJob's limits, each said with the name the value came by: MaxPayloadInMB
    from 0 to 100, where 0 is no limit (chunked encoding), for a record or file sent whole, so
    from 1 when records are `packs`ed together (MultiRecord); MaxConcurrentTransforms at least 0
    (0: the container's); their product at most 100 MB."""
    least = 1 if packs else 0
    if not least <= payload_mb <= MAX_TOTAL_MB:
        why = " (0, no limit, is for SingleRecord or SplitType None)" if payload_mb == 0 else ""
        return Problem(payload, f"must be from {least} to {MAX_TOTAL_MB}{why}", payload_mb)
    if concurrency < 0:
        return Problem(concurrent, "must be at least 0 (0: the container's)", concurrency)
    if payload_mb * concurrency > MAX_TOTAL_MB:
        product = f"{payload_mb} times {concurrent} {concurrency} = {payload_mb * concurrency} MB"
        why = f"SageMaker allows at most {MAX_TOTAL_MB} MB in flight per instance"
        return Problem(payload, why, product)
    return None


def packed(
    items: Iterable[Item], cost: Callable[[Item], int], max_bytes: int, max_items: int
) -> Iterator[list[Item]]:
    """`items` in mini-batches of at most `max_items` (0: any) whose `cost`s (bytes) add up to at
    most `max_bytes` (0: no limit); an item over it goes alone, for the caller to refuse first."""
    batch: list[Item] = []
    used = 0
    for item in items:
        needed = cost(item)
        if batch and (len(batch) == max_items or (max_bytes and used + needed > max_bytes)):
            yield batch
            batch, used = [], 0
        batch.append(item)
        used += needed
    if batch:
        yield batch


async def in_order(
    items: Iterable[Item],
    start: Callable[[Item], Awaitable[Result]],
    finish: Callable[[Item, Result], None],
    window: int,
) -> None:
    """`start(item)` for each item (at most `window` running), then `finish(item, result)` in
    input order. An exception from either stops the run and cancels what is still running."""
    pending: deque[tuple[Item, asyncio.Task[Result]]] = deque()

    async def finish_first() -> None:
        item, task = pending.popleft()
        finish(item, await task)

    try:
        for item in items:
            if len(pending) >= window:
                await finish_first()
            pending.append((item, asyncio.ensure_future(start(item))))
        while pending:
            await finish_first()
    finally:
        for _, task in pending:
            task.cancel()
        await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
