"""Runs the batch work this process has claimed (`Claim.work`), from wherever the batch stands:
its validation, its lines (the whole batch's in the embedded store, one chunk's in the shared S3
store), or in the S3 store the assembly of its chunks' results once all are done.

- `validating`: the input file is checked with the project's batch-line rules
  (`handler.core.batch_lines.validate`, every bad line listed) and the batch is `failed` or
  `in_progress`; nothing reaches the engine before that.
- `in_progress` / `cancelling`: the lines not answered yet go through the record pipeline
  (`Pipeline.record`, the code that answers `/invocations` records) in a sliding window; each
  result line is appended as it finishes (`handler.batches.results`).
- Then `finalizing`, and `completed`, `cancelled` or `expired`, the results becoming files.

A watch loop renews the lease, publishes counts and usage, and stops the run when the batch is
cancelled or its window passes: lines not answered then are answered without the engine
(`batch_cancelled`, `batch_expired`) and running ones are aborted. A SIGTERM or a dead engine
ends the run without writing anything more: the batch stays as it is and resumes from its
results files.
"""

import asyncio
import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.types import Scope

from vllm_sagemaker.handler.batches import admission, metrics
from vllm_sagemaker.handler.batches.batch_object import add_usage
from vllm_sagemaker.handler.batches.chunking import measured
from vllm_sagemaker.handler.batches.results import Results, Tallies
from vllm_sagemaker.handler.batches.s3.store import S3Store
from vllm_sagemaker.handler.batches.store import Batch, Claim, Store, StoredFile, Work
from vllm_sagemaker.handler.batches.window import BatchWindow
from vllm_sagemaker.handler.core.batch_lines import Outcome, Validation, outcome, validate
from vllm_sagemaker.handler.core.errors import RequestError
from vllm_sagemaker.handler.core.jsonlines import iter_records
from vllm_sagemaker.handler.lifecycle import StopRequests
from vllm_sagemaker.handler.logs import logger
from vllm_sagemaker.handler.records import asgi_call
from vllm_sagemaker.handler.records.context import RecordContext
from vllm_sagemaker.handler.records.minibatch import Stop
from vllm_sagemaker.handler.records.pipeline import Pipeline

CANCELLED = RequestError(499, "This request was cancelled before it completed.", "batch_cancelled")
EXPIRED = RequestError(
    408,
    "This request could not be executed before the completion window expired.",
    "batch_expired",
)
# A running line given back to the queue so live requests get the engine; it runs again later.
PREEMPTED = RequestError(503, "preempted for live traffic; the line runs again", "preempted")
OUTPUT_EXPIRY_S = 30 * 24 * 3600
# An engine 5xx is tried again this many times while the engine is healthy, then written.
RETRIES = 2
RETRY_DELAY_S = 1.0
SYNC_EVERY_S = 5.0


class RunEnded(Exception):
    """The run cannot go on in this process (engine gone, lease taken over); the batch stays
    as it is for the next run."""


@dataclass(frozen=True)
class RunSettings:
    priority: int | None
    lease_s: float
    check_every_s: float


@dataclass(frozen=True)
class Runtime:
    """What every batch run of this process shares."""

    store: Store | S3Store
    pipeline: Pipeline
    scope: Scope
    headers: asgi_call.Headers
    window: BatchWindow
    settings: RunSettings
    owner: str
    stops: StopRequests

    async def call(self, method: str, path: str) -> asgi_call.Reply:
        return await asgi_call.call(
            self.pipeline.app, self.scope, method, path, b"", self.headers, asyncio.Event()
        )


class BatchRun:
    """One claim's work: the validation of a batch, its lines (all of them, or one chunk's),
    or its final assembly once every chunk is done."""

    def __init__(self, runtime: Runtime, claim: Claim) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.claim = claim
        self.id: str = claim.batch["id"]
        self.batch = claim.batch

    async def run(self) -> None:
        work = self.claim.work
        if work is Work.VALIDATE:
            await self.validate()
        elif work is Work.LINES:
            await self.execute()
        else:
            await self.assemble()

    async def _change(self, change: Callable[[Batch], Batch | None]) -> Batch:
        changed = await asyncio.to_thread(
            self.store.change_batch, self.id, change, self._batch_owner()
        )
        if changed is None:
            raise RunEnded(f"batch {self.id} is no longer held by this process")
        self.batch = changed
        return changed

    async def input_file(self) -> StoredFile | None:
        """The batch's input file; when it is gone (deleted, expired), the batch fails."""
        stored = await asyncio.to_thread(self.store.file, self.batch["input_file_id"])
        if stored is None:
            error = {
                "code": "invalid_request",
                "message": f"Cannot find file {self.batch['input_file_id']}.",
                "param": "input_file_id",
                "line": None,
            }
            await self.fail([error])
        return stored

    async def validate(self) -> None:
        """Check the whole input file: the batch runs (its lines are claimed next, as the
        store plans them) or fails."""
        stored = await self.input_file()
        if stored is None:
            return
        served = await self.runtime.pipeline.served(self.runtime.scope, self.runtime.headers)
        models = await self.models()
        lengths: list[int] = []
        found = await asyncio.to_thread(self._checked, stored.id, served, models, lengths)
        if found.errors:
            await self.fail(found.errors)
            return
        await asyncio.to_thread(self.store.add_plan, self.id, lengths)
        now = int(time.time())

        def start(batch: Batch) -> Batch:
            batch["model"] = found.model or (models[0] if models else None)
            batch["request_counts"]["total"] = found.total
            batch["in_progress_at"] = now
            if batch["status"] == "validating":
                batch["status"] = "in_progress"
            return batch

        await self._change(start)

    def _checked(
        self, file_id: str, served: frozenset[str], models: list[str], lengths: list[int]
    ) -> Validation:
        """The input file checked line by line, noting each physical line's length."""
        with self.store.open_body(file_id) as source:
            return validate(
                iter_records(measured(source, lengths)), self.batch["endpoint"], served, models
            )

    async def models(self) -> list[str]:
        """The models this server serves (the base model and its adapters), from /v1/models."""
        reply = await self.runtime.call("GET", "/v1/models")
        if reply.status != 200:
            raise RunEnded(f"/v1/models answered {reply.status}; the batch is checked later")
        return [item["id"] for item in json.loads(reply.body).get("data", [])]

    async def fail(self, errors: list[dict[str, Any]]) -> None:
        now = int(time.time())

        def failed(batch: Batch) -> Batch:
            batch.update(status="failed", failed_at=now, errors={"object": "list", "data": errors})
            return batch

        await asyncio.to_thread(self.store.fail_batch, self.id, self._batch_owner(), failed)

    def _batch_owner(self) -> str | None:
        """Who must hold the batch for this run to change it: nobody for a chunk's run, whose
        changes (counts, a failure) are merged with If-Match."""
        return None if self.claim.part is not None else self.runtime.owner

    async def execute(self) -> None:
        if await self.input_file() is None:
            return
        results = Results(self.store.results_dir(self.claim))
        await asyncio.to_thread(results.open)
        stop = Stop()
        if self.batch["status"] == "cancelling":
            stop(CANCELLED)
        elif time.time() >= self.batch["expires_at"]:
            stop(EXPIRED)
        context = RecordContext(
            self.runtime.scope,
            self.runtime.headers,
            self.id,
            stop=stop,
            priority=self.runtime.settings.priority,
        )
        window = self.runtime.window
        try:
            async with asyncio.TaskGroup() as group:
                watcher = group.create_task(self.watch(results, stop))
                await self.feed(group, context, results, window)
                watcher.cancel()
            if self.claim.part is None:
                await self.finish(results, stop)
            else:
                await self.finish_part(results, stop)
        finally:
            results.close()

    def pending(self, answered: set[str]) -> Iterator[tuple[int, bytes]]:
        """The input's request lines not answered yet, with their line numbers."""
        first = 1 if self.claim.part is None else self.claim.part.first_line
        with self.store.open_body(self.batch["input_file_id"], self.claim.part) as source:
            for number, raw in enumerate(iter_records(source), start=first):
                if raw.strip() and json.loads(raw)["custom_id"] not in answered:
                    yield number, raw

    async def feed(
        self,
        group: asyncio.TaskGroup,
        context: RecordContext,
        results: Results,
        window: BatchWindow,
    ) -> None:
        """Start every pending line as a window slot frees; once stopped, answer the rest at
        once (without the engine)."""
        running: dict[asyncio.Task[None], Stop] = {}
        requeued: list[tuple[int, bytes]] = []
        preempter = group.create_task(self.preempt(context, running, window))

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
                task = group.create_task(
                    self.line(line_context, raw, number, results, window, requeued)
                )
                running[task] = line_context.stop
                task.add_done_callback(lambda done: running.pop(done, None))
        finally:
            preempter.cancel()

    async def preempt(
        self, context: RecordContext, running: dict[asyncio.Task[None], Stop], window: BatchWindow
    ) -> None:
        """Stop the youngest running lines that stay beyond the window (they are queued again),
        and every running line once the batch is stopped."""
        exceeded_since: float | None = None
        while True:
            if context.stop.reason is not None:
                for line_stop in running.values():
                    line_stop(context.stop.reason)
            else:
                now = time.monotonic()
                limit = window.limit()
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
        window: BatchWindow,
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
            window.release()

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
            health = await self.runtime.call("GET", "/health")
            if health.status != 200:
                raise RunEnded("the engine is not healthy; the batch resumes when it is")
            if attempt < RETRIES:
                await asyncio.sleep(RETRY_DELAY_S)
        if result.aborted and context.stop.reason is None:
            raise RunEnded(f"the engine aborted line {number} {RETRIES + 1} times")
        return line, result

    async def watch(self, results: Results, stop: Stop) -> None:
        """Every check_every_s: renew the lease, publish progress, notice cancel and expiry."""
        settings = self.runtime.settings
        synced = time.monotonic()
        while True:
            await asyncio.sleep(settings.check_every_s)
            renewed = await asyncio.to_thread(self.store.renew, self.claim, settings.lease_s)
            if renewed is None:
                raise RunEnded(f"batch {self.id} was taken over by another process")
            self.claim = renewed
            batch = await self.progress(results)
            if batch["status"] == "cancelling":
                stop(CANCELLED)
            elif time.time() >= batch["expires_at"]:
                stop(EXPIRED)
            if time.monotonic() - synced >= SYNC_EVERY_S:
                await asyncio.to_thread(results.sync)
                synced = time.monotonic()

    async def progress(self, results: Results) -> Batch:
        """The batch as it now is, with this run's counts so far when the run is the whole
        batch (a chunk's counts join the batch's when the chunk is finished)."""
        if self.claim.part is None:
            return await self._change(lambda b: _with_progress(b, results))
        batch = await asyncio.to_thread(self.store.batch, self.id)
        if batch is None:
            raise RunEnded(f"batch {self.id} is gone")
        return batch

    async def finish_part(self, results: Results, stop: Stop) -> None:
        """Make this run's results its chunk's (unless another run finished the chunk first)."""
        await asyncio.to_thread(results.sync)
        tallies = {
            "completed": results.tallies.completed,
            "failed": results.tallies.failed,
            "usage": results.tallies.usage,
            "stopped": _stopped(stop),
        }
        files = {"output": results.output_path, "errors": results.errors_path}
        part = self.claim.part
        finished = await asyncio.to_thread(self.store.finish_part, self.id, part, files, tallies)
        if not finished:
            logger.warning("batch %s: chunk %s was finished by another run first", self.id, part)
        shutil.rmtree(results.directory, ignore_errors=True)

    async def assemble(self) -> None:
        """Every chunk is finished: join their results into the output and error files and
        give the batch its final status, with the counts the chunks add up to."""
        chunks = await asyncio.to_thread(lambda: list(self.store.chunk_results(self.id)))
        now = int(time.time())
        await self._change(_finalizing(now))
        totals = Tallies()
        stop = Stop()
        for _, result in chunks:
            totals.completed += result["completed"]
            totals.failed += result["failed"]
            add_usage(totals.usage, result["usage"])
            if result.get("stopped") == "expired":
                stop(EXPIRED)
            elif result.get("stopped") == "cancelled" and stop.reason is None:
                stop(CANCELLED)
        ids: dict[str, str | None] = {}
        for key, kind, count in (
            ("output_file_id", "output", totals.completed),
            ("error_file_id", "errors", totals.failed),
        ):
            ids[key] = None
            if count:
                stored = self._output_file(kind, 0, now)
                await asyncio.to_thread(self.store.assemble, self.id, kind, stored)
                ids[key] = stored.id

        def final(batch: Batch) -> Batch:
            status = _final_status(batch, stop)
            batch.update(ids, status=status)
            batch[f"{status}_at"] = now
            batch["request_counts"].update(completed=totals.completed, failed=totals.failed)
            batch["usage"] = totals.usage
            return batch

        await self._change(final)

    async def finish(self, results: Results, stop: Stop) -> None:
        """finalizing, then the final status with the results as files, in one transaction."""
        await asyncio.to_thread(results.sync)
        now = int(time.time())
        await self._change(_finalizing(now))
        outputs, ids = self.results_files(results, now)

        def final(batch: Batch) -> Batch:
            status = _final_status(batch, stop)
            batch.update(ids, status=status)
            batch[f"{status}_at"] = now
            return _with_progress(batch, results)

        finished = await asyncio.to_thread(
            self.store.finish_batch, self.id, self.runtime.owner, outputs, final
        )
        if finished is None:
            raise RunEnded(f"batch {self.id} was taken over while it finished")
        shutil.rmtree(results.directory, ignore_errors=True)

    def results_files(
        self, results: Results, now: int
    ) -> tuple[list[tuple[StoredFile, Path]], dict[str, str | None]]:
        """The output and error files (only those with lines) and the ids the batch shows."""
        outputs, ids = [], {}
        for key, kind, count, path in (
            ("output_file_id", "output", results.tallies.completed, results.output_path),
            ("error_file_id", "errors", results.tallies.failed, results.errors_path),
        ):
            ids[key] = None
            if count:
                stored = self._output_file(kind, path.stat().st_size, now)
                outputs.append((stored, path))
                ids[key] = stored.id
        return outputs, ids

    def _output_file(self, kind: str, size: int, now: int) -> StoredFile:
        """The output (or error) file of this batch, as the Files API shows it."""
        expiry = (self.batch.get("output_expires_after") or {}).get("seconds") or OUTPUT_EXPIRY_S
        return StoredFile(
            f"file-{self.id.removeprefix('batch_')}-{kind}",
            size,
            now,
            f"{self.id}_{kind}.jsonl",
            "batch_output",
            now + expiry,
        )


def _with_progress(batch: Batch, results: Results) -> Batch:
    counts = batch["request_counts"]
    counts["completed"], counts["failed"] = results.tallies.completed, results.tallies.failed
    batch["usage"] = results.tallies.usage
    return batch


def _finalizing(now: int) -> Callable[[Batch], Batch]:
    def finalizing(batch: Batch) -> Batch:
        batch["finalizing_at"] = batch["finalizing_at"] or now
        if batch["status"] == "in_progress":
            batch["status"] = "finalizing"
        return batch

    return finalizing


def _stopped(stop: Stop) -> str | None:
    """Why a chunk's run stopped early, as its finished chunk records it."""
    if stop.reason is EXPIRED:
        return "expired"
    return "cancelled" if stop.reason is CANCELLED else None


def _final_status(batch: Batch, stop: Stop) -> str:
    if stop.reason is EXPIRED:
        return "expired"
    if stop.reason is CANCELLED or batch["status"] == "cancelling":
        return "cancelled"
    return "completed"
