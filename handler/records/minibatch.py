"""The records of one multi-record body: run on the engine together, written in input order.

Records start as soon as an in-flight slot is free (the slots are shared by every request of the
process, so a 100 MB payload cannot flood the engine or memory) and the engine batches them
continuously. Lines go out as soon as every record before them is done, so the response streams
instead of waiting for the slowest record. When the batch is stopped (deadline or client gone),
records not started yet are not dispatched and running ones are aborted on the engine; each is
still answered with a line, so the count always matches.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllm_sagemaker.core.errors import RequestError

CLIENT_GONE = RequestError(499, "the client closed the connection", "client_closed")


@dataclass
class Stop:
    """Why the records of a request that are still pending are given up: the first reason wins.

    In-process calls to vLLM's routes watch `event`; the serving calls `running` are cancelled
    (`cancelling`). Either way vLLM aborts the request on the engine."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    reason: RequestError | None = None
    running: set["asyncio.Future[Any]"] = field(default_factory=set)

    def __call__(self, reason: RequestError) -> None:
        if self.reason is None:
            self.reason = reason
            self.event.set()
            for work in self.running:
                work.cancel()

    @contextlib.contextmanager
    def cancelling(self, work: "asyncio.Future[Any]") -> Iterator[None]:
        """While inside, a stop cancels `work`."""
        self.running.add(work)
        try:
            yield
        finally:
            self.running.discard(work)


class Slots(Protocol):
    """In-flight slots, taken like an `asyncio.Semaphore`'s (the batch window is one too)."""

    def locked(self) -> bool: ...

    async def acquire(self) -> object: ...

    def release(self) -> None: ...


async def _slot(slots: Slots, stop: Stop) -> bool:
    """Take an in-flight slot (True), or give up when the batch is stopped first (False)."""
    if stop.reason is not None:
        return False
    if not slots.locked():
        await slots.acquire()
        return True
    acquire = asyncio.ensure_future(slots.acquire())
    stopped = asyncio.ensure_future(stop.event.wait())
    await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if acquire.done():
        return True
    acquire.cancel()
    return False


async def answer_in_order(
    count: int,
    answer: Callable[[int], Awaitable[bytes]],
    slots: Slots,
    stop: Stop,
    emit: Callable[[bytes], Awaitable[None]],
) -> None:
    """Answer records 0..count-1 concurrently; emit their lines (each + LF) in index order.

    `answer(i)` must return record i's line and never raise; it sees `stop` itself and answers
    a stopped record without the engine. Lines already done are emitted together in one chunk.
    """
    tasks: dict[int, asyncio.Task[bytes]] = {}
    arrived = asyncio.Event()

    async def run(index: int, holds_slot: bool) -> bytes:
        try:
            return await answer(index)
        finally:
            if holds_slot:
                slots.release()

    async def produce() -> None:
        for index in range(count):
            holds_slot = await _slot(slots, stop)
            tasks[index] = asyncio.create_task(run(index, holds_slot))
            arrived.set()

    producer = asyncio.create_task(produce())
    try:
        index = 0
        while index < count:
            while index not in tasks:
                arrived.clear()
                await arrived.wait()
            lines = [await tasks.pop(index)]
            index += 1
            while index in tasks and tasks[index].done():
                lines.append(tasks.pop(index).result())
                index += 1
            await emit(b"".join(line + b"\n" for line in lines))
    finally:
        if tasks or not producer.done():
            stop(CLIENT_GONE)
            await asyncio.gather(producer, return_exceptions=True)
            await asyncio.gather(*tasks.values(), return_exceptions=True)
