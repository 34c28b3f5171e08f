"""OpenAI's Batches API: `/v1/batches`, with OpenAI's Batch object, statuses and errors.

- `POST /v1/batches` checks its parameters at once (400s worded as OpenAI words them; an
  unknown input file is 404) and answers the batch in `validating`; the scheduler runs it;
- `GET /v1/batches` (`limit` 1-100, `after`) pages newest first with `has_more`;
- `GET /v1/batches/{id}`;
- `POST /v1/batches/{id}/cancel`: `cancelling` (the runner stops within a second and the batch
  ends `cancelled` with its partial results); a finished batch is 409 with
  `x-should-retry: false`, so the SDK does not retry it.
"""

import asyncio
import json
import time
from urllib.parse import parse_qsl

from starlette.types import Receive, Scope, Send

from vllm_sagemaker.core import ids
from vllm_sagemaker.core.config import MIB
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.batches.api import batch_object, paging
from vllm_sagemaker.handler.batches.api.files import not_found as file_not_found
from vllm_sagemaker.handler.batches.running.scheduler import Scheduler
from vllm_sagemaker.handler.batches.store.interface import BatchStore
from vllm_sagemaker.handler.batches.store.types import Batch
from vllm_sagemaker.handler.records import asgi_call
from vllm_sagemaker.handler.records.messages import ClientGone, read_body, respond, respond_error
from vllm_sagemaker.handler.records.pipeline import Pipeline

PREFIX = "/v1/batches"
MAX_BODY_BYTES = MIB
DEFAULT_LIMIT, MAX_LIMIT = 20, 100
NO_RETRY = [(b"x-should-retry", b"false")]


def not_found(batch_id: str) -> RequestError:
    return RequestError(404, f"No such Batch object: {batch_id[:100]}", "batch_not_found", "id")


def list_query(query: bytes) -> tuple[int, str | None]:
    params = dict(parse_qsl(query.decode("latin-1")))
    return paging.page_limit(params, DEFAULT_LIMIT, MAX_LIMIT), params.get("after")


def cancelled(batch: Batch, now: int) -> Batch | None:
    """The batch after a cancel request; None when it stays as it is."""
    if batch["status"] in ("validating", "in_progress", "finalizing"):
        batch.update(status="cancelling", cancelling_at=now)
        return batch
    return None


class BatchesApi:
    def __init__(self, store: BatchStore, pipeline: Pipeline, scheduler: Scheduler, window_s: int):
        self.store = store
        self.pipeline = pipeline
        self.scheduler = scheduler
        self.window_s = window_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        try:
            named = paging.object_path(path, PREFIX, ("cancel",))
            batch_id, action = named.object_id, named.action
            if not batch_id and method == "POST":
                await self.create(scope, receive, send)
            elif not batch_id and method == "GET":
                await self.list(scope, send)
            elif batch_id and not action and method == "GET":
                await respond(send, 200, json.dumps(await self._batch(batch_id)).encode())
            elif batch_id and action == "cancel" and method == "POST":
                await self.cancel(batch_id, send)
            else:
                raise RequestError(
                    405, f"{method} {path} is not a Batches API call", "method_not_allowed"
                )
        except RequestError as error:
            await respond_error(send, error, NO_RETRY if error.status == 409 else [])
        except ClientGone:
            return

    async def create(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_body(receive, MAX_BODY_BYTES)
        auth: asgi_call.Headers = [(k, v) for k, v in scope["headers"] if k == b"authorization"]
        served = await self.pipeline.served(scope, auth)
        params = batch_object.create_params(body, served)
        stored = await asyncio.to_thread(self.store.file, params.input_file_id)
        if stored is None:
            raise file_not_found(params.input_file_id[:100])
        if stored.purpose != "batch":
            raise RequestError(
                400,
                f"The input file {stored.id} has purpose '{stored.purpose}'; a batch input "
                "must be uploaded with purpose 'batch'.",
                "invalid_value",
                "input_file_id",
            )
        batch = batch_object.new_batch(
            ids.new_id(ids.BATCH_ID_PREFIX), params, int(time.time()), self.window_s
        )
        await asyncio.to_thread(self.store.add_batch, batch)
        self.scheduler.wake()
        await respond(send, 200, json.dumps(batch).encode())

    async def list(self, scope: Scope, send: Send) -> None:
        limit, after = list_query(scope.get("query_string", b""))
        found = await asyncio.to_thread(self.store.batches, limit, after)
        await respond(send, 200, paging.page(*found))

    async def _batch(self, batch_id: str) -> Batch:
        valid = ids.is_id(batch_id, ids.BATCH_ID_PREFIX)
        batch = await asyncio.to_thread(self.store.batch, batch_id) if valid else None
        if batch is None:
            raise not_found(batch_id)
        return batch

    async def cancel(self, batch_id: str, send: Send) -> None:
        await self._batch(batch_id)
        now = int(time.time())
        batch = await asyncio.to_thread(
            self.store.change_batch, batch_id, lambda b: cancelled(b, now)
        )
        if batch is None:
            raise not_found(batch_id)
        if batch["status"] in ("completed", "failed", "expired"):
            raise RequestError(
                409, f"Cannot cancel a batch with status '{batch['status']}'.", "batch_finished"
            )
        await respond(send, 200, json.dumps(batch).encode())
