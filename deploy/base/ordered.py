"""Run jobs concurrently, at most `window` at a time, and consume their results in input order.

Both batch tools need this: requests go out as fast as the container takes them, but outputs are
written in the order of the input, with no more than `window` results held in memory.
"""

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


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
