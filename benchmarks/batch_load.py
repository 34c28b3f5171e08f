"""The batch a live request meets in `benchmarks.live_first`: a `/v1/batches` batch on our
servers, or on plain vLLM a client keeping 32-token chats in flight at priority 10."""

import asyncio
import threading
from pathlib import Path
from typing import Protocol

import httpx
import openai

from tests.support import waiting

BATCH_TOKENS = 32
BATCH_PRIORITY = 10


class Batch(Protocol):
    """A batch that runs until stopped, and how many of its lines are answered."""

    def start(self) -> None: ...

    def answered(self) -> int: ...

    def stop(self) -> None: ...


class ServerBatch:
    """A `/v1/batches` batch of `source` on one of our servers."""

    def __init__(self, url: str, source: Path) -> None:
        self.sdk = openai.OpenAI(base_url=url + "/v1", api_key="none")
        self.file_id = self.sdk.files.create(file=source.open("rb"), purpose="batch").id
        self.id = ""

    def start(self) -> None:
        self.id = self.sdk.batches.create(
            input_file_id=self.file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id

    def answered(self) -> int:
        counts = self.sdk.batches.retrieve(self.id).request_counts
        return 0 if counts is None else counts.completed + counts.failed

    def stop(self) -> None:
        """Cancel the batch, unless it has run out of lines (then SystemExit: a phase that
        outlasts its batch measured less than its span; raise `--lines`)."""
        if self.sdk.batches.retrieve(self.id).status == "completed":
            raise SystemExit(f"batch {self.id} ran out of lines within a phase: raise --lines")
        self.sdk.batches.cancel(self.id)
        waiting.until(
            lambda: self.sdk.batches.retrieve(self.id).status == "cancelled", 600, "not cancelled"
        )


class ClientBatch:
    """Plain vLLM's batch: a client sending 32-token chats at priority 10, at most `inflight` at
    a time: back to back (`pace` None), or `pace` lines a second (open loop, so it drives the
    batch throughput another server reached, as far as vLLM keeps up)."""

    def __init__(self, url: str, inflight: int) -> None:
        self.url, self.inflight = url, inflight
        self.pace: float | None = None
        self.done = 0
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    async def _line(self, client: httpx.AsyncClient, number: int) -> None:
        """One line, sent until it is answered or the batch stops."""
        body = {
            "model": "chat",
            "messages": [{"role": "user", "content": f"Tell me about number {number}"}],
            "max_tokens": BATCH_TOKENS,
            "min_tokens": BATCH_TOKENS,
            "priority": BATCH_PRIORITY,
        }
        while not self._stopping.is_set():
            try:
                reply = await client.post("/v1/chat/completions", json=body)
            except httpx.TransportError:
                # vLLM's server resets some of 256 connections opened at once: send again.
                continue
            if reply.status_code == 200:
                self.done += 1
            return

    async def _back_to_back(self, client: httpx.AsyncClient, number: int) -> None:
        while not self._stopping.is_set():
            await self._line(client, number)

    async def _paced(self, client: httpx.AsyncClient, pace: float) -> None:
        slots = asyncio.Semaphore(self.inflight)
        running: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        due = loop.time()

        async def one(number: int) -> None:
            try:
                await self._line(client, number)
            finally:
                slots.release()

        number = 0
        while not self._stopping.is_set():
            await asyncio.sleep(max(0.0, due - loop.time()))
            due += 1 / pace
            await slots.acquire()
            task = asyncio.create_task(one(number))
            running.add(task)
            task.add_done_callback(running.discard)
            number += 1
        await asyncio.gather(*running)

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=self.inflight)
        async with httpx.AsyncClient(base_url=self.url, timeout=600, limits=limits) as client:
            if self.pace is not None:
                await self._paced(client, self.pace)
                return
            await asyncio.gather(*(self._back_to_back(client, n) for n in range(self.inflight)))

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(),))
        self._thread.start()

    def answered(self) -> int:
        return self.done

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
