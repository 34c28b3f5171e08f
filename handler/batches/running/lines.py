"""Running lines: the lines of a run's chunk not answered yet go through the record pipeline
(`Pipeline.record`, the code that answers `/invocations` records) in a sliding window, each
result appended as it finishes (`handler.batches.running.results`). Once the run is stopped
(cancel, expiry), the lines left are answered without the engine and running ones are
aborted."""

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator

from vllm_sagemaker.core.batch_lines import Outcome, outcome
from vllm_sagemaker.core.jsonlines import iter_records
from vllm_sagemaker.handler.batches.admission import metrics
from vllm_sagemaker.handler.batches.admission import rules as admission
from vllm_sagemaker.handler.batches.running.claim import HeldClaim
from vllm_sagemaker.handler.batches.running.context import PREEMPTED, RunEnded, Runtime
from vllm_sagemaker.handler.batches.running.results import Results
from vllm_sagemaker.handler.batches.running.status import BatchStatus
from vllm_sagemaker.handler.records.context import RecordContext
from vllm_sagemaker.handler.records.minibatch import Stop

# An engine 5xx is tried again this many times while the engine is healthy, then written.
RETRIES = 2
RETRY_DELAY_S = 1.0


class LineRunner:
    """The lines of one run's chunk (in the embedded store, the whole batch) through the
    engine."""

    def __init__(self, runtime: Runtime, held: HeldClaim, status: BatchStatus) -> None:
        self.runtime = runtime
        self.held = held
        self.status = status

    def pending(self, answered: set[str]) -> Iterator[tuple[int, bytes]]:
        """The input's request lines not answered yet, with their line numbers."""
        chunk = self.held.claim.chunk
        first = 1 if chunk is None else chunk.first_line
        file_id = self.status.batch["input_file_id"]
        with self.runtime.store.open_body(file_id, chunk) as source:
            for number, raw in enumerate(iter_records(source), start=first):
                if raw.strip() and json.loads(raw)["custom_id"] not in answered:
                    yield number, raw

    async def feed(
        self, group: asyncio.TaskGroup, context: RecordContext, results: Results
    ) -> None:
        """Start every pending line as a window slot frees; once stopped, answer the rest at
        once (without the engine)."""
        window = self.runtime.window
        running: dict[asyncio.Task[None], Stop] = {}
        requeued: list[tuple[int, bytes]] = []
        preempter = group.create_task(self.preempt(context, running))

        source = self.pending(set(results.answered))
        try:
            while True:
                line = requeued.pop() if requeued else next(source, None)
                if line is None:
                    if not running:
                        break
                    await asyncio.wait(list(running), return_when=asyncio.FIRST_COMPLETED)
                    continue
                number, raw = line
                if context.stop.reason is not None:
                    results.write(*await self.answer(context, raw, number))
                    continue
                await window.acquire()
                line_context = dataclasses.replace(context, stop=Stop())
                task = group.create_task(self.line(line_context, raw, number, results, requeued))
                running[task] = line_context.stop
                task.add_done_callback(lambda done: running.pop(done, None))
        finally:
            preempter.cancel()

    async def preempt(
        self, context: RecordContext, running: dict[asyncio.Task[None], Stop]
    ) -> None:
        """Stop the youngest running lines that stay beyond the window (they are queued again),
        and every running line once the batch is stopped."""
        window = self.runtime.window
        exceeded_since: float | None = None
        while True:
            if context.stop.reason is not None:
                for line_stop in running.values():
                    line_stop(context.stop.reason)
            else:
                now = time.monotonic()
                limit = window.live_limit()
                if window.running <= limit:
                    exceeded_since = None
                elif exceeded_since is None:
                    exceeded_since = now
                exceeded_for = 0.0 if exceeded_since is None else now - exceeded_since
                count = admission.to_preempt(window.running, limit, exceeded_for)
                for line_stop in list(running.values())[::-1][:count]:
                    line_stop(PREEMPTED)
            await window.changed(0.1)

    async def line(
        self,
        context: RecordContext,
        raw: bytes,
        number: int,
        results: Results,
        requeued: list[tuple[int, bytes]],
    ) -> None:
        try:
            line, result = await self.answer(context, raw, number)
            if context.stop.reason is PREEMPTED and not result.succeeded:
                metrics.PREEMPTIONS.inc()
                requeued.append((number, raw))
            else:
                results.write(line, result)
        finally:
            self.runtime.window.release()

    async def answer(
        self, context: RecordContext, raw: bytes, number: int
    ) -> tuple[bytes, Outcome]:
        """The line's result. A server error (an engine 5xx, a route that raised) is not an
        answer while the server is stopping (SIGTERM: vLLM stops its engine first and fails
        every request until it exits) or its engine is down: the run ends and the line runs
        again on resume. A line the engine aborted (vLLM aborts every running request when it
        shuts down) is never an answer: it is tried again, and if the engine keeps aborting,
        the run ends."""
        for attempt in range(RETRIES + 1):
            line = await self.runtime.pipeline.record(context, raw, number)
            result = outcome(line)
            if context.stop.reason is not None:
                break
            if (result.status_code or 0) < 500 and not result.aborted:
                break
            if self.runtime.stops.requested:
                raise RunEnded("the server is stopping; the batch resumes at the next start")
            if not await self.runtime.engine_healthy():
                raise RunEnded("the engine is not healthy; the batch resumes when it is")
            if attempt < RETRIES:
                await asyncio.sleep(RETRY_DELAY_S)
        if result.aborted and context.stop.reason is None:
            raise RunEnded(f"the engine aborted line {number} {RETRIES + 1} times")
        return line, result
