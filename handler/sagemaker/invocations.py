"""`POST /invocations`: SageMaker's inference call, through the one record pipeline.

In order: read the body (413 past the payload limit), answer a session request or check the
request's session, then run one request (streamed through as vLLM produces it) or a
multi-record body (one JSON line per record, in order). `X-Amzn-SageMaker-Adapter-Identifier`
makes that adapter answer every record. Batch-marked invocations (`priority=batch`) run in the
batch window beside live traffic: when it has no room for HOLD_S seconds they are answered 429
with Retry-After, and their records take the window's slots. On an async endpoint every answer
is whole, with Content-Length, as SageMaker's async path requires. Each invocation logs one line.

A multi-record body whose records failed because the engine died under it is not answered as if
it had finished: its streamed answer is cut off (the caller sees the call fail and SageMaker
sends the mini-batch again once `serve` has restarted vLLM), or, not streamed yet, it gets 503.
"""

import asyncio
import dataclasses
import time
import uuid

from starlette.types import Message, Receive, Scope, Send

from vllm_sagemaker.core import content_types, dispatch, jsonlines
from vllm_sagemaker.core.config import Config
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.core.formats import batch_error_line
from vllm_sagemaker.core.routing import (
    Answer,
    BatchLineError,
    Target,
    custom_attributes,
    is_batch_work,
)
from vllm_sagemaker.handler.batches.admission import metrics
from vllm_sagemaker.handler.batches.admission.window import BatchWindow
from vllm_sagemaker.handler.process.logs import logfmt, logger
from vllm_sagemaker.handler.records import asgi_call, minibatch
from vllm_sagemaker.handler.records.context import RecordContext
from vllm_sagemaker.handler.records.messages import (
    JSON_LINES,
    TEXT,
    ClientGone,
    header,
    read_body,
    respond,
    respond_error,
    text_header,
    watch_disconnect,
)
from vllm_sagemaker.handler.records.minibatch import CLIENT_GONE
from vllm_sagemaker.handler.records.pipeline import Pipeline
from vllm_sagemaker.handler.sagemaker import adapters, progress, sessions

CUSTOM_ATTRIBUTES = b"x-amzn-sagemaker-custom-attributes"
INFERENCE_ID = b"x-amzn-sagemaker-inference-id"
ASYNC_REQUESTS = "requests to an async endpoint (SAGEMAKER_ASYNC_INFERENCE=true)"
# A batch-marked invocation waits at most this long for room in the batch window, then gets 429:
# well inside SageMaker's 60 s limit, and short enough that the caller's window adapts quickly.
HOLD_S = 2.0
RETRY_AFTER_S = 1
ENGINE_DIED = RequestError(
    503,
    "the engine died while this request ran; it is being restarted: send the request again",
    "engine_unavailable",
)
THROTTLED = RequestError(
    429,
    "live traffic has the engine: batch work is throttled; retry after the Retry-After seconds",
    "rate_limit_exceeded",
)


class CutOff(Exception):
    """A streamed answer that must not end as if whole: raised out of the app so the server
    closes the connection without the body's last chunk, and the caller sees the call fail."""

    def __init__(self, error: RequestError) -> None:
        super().__init__(error.message)
        self.error = error


class Invocations:
    def __init__(self, config: Config, pipeline: Pipeline, window: BatchWindow) -> None:
        self.config = config
        self.pipeline = pipeline
        self.window = window
        self.slots = asyncio.Semaphore(config.records_in_flight)
        settings = config.sessions
        self.sessions = (
            sessions.Sessions(settings.expiration_s, settings.path) if settings.enabled else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        request_id = text_header(scope, INFERENCE_ID) or uuid.uuid4().hex
        attributes = header(scope, CUSTOM_ATTRIBUTES)
        echo = [(b"x-request-id", request_id.encode())]
        if attributes is not None:
            echo.append((CUSTOM_ATTRIBUTES, attributes))
        marks = custom_attributes(attributes.decode("latin-1") if attributes else None)
        batch_work = is_batch_work(marks)
        context = RecordContext(
            scope=scope,
            headers=scope["headers"],
            request_id=request_id,
            route_hint=marks.get("route") or self.config.fixed_route,
            adapter=text_header(scope, adapters.IDENTIFIER),
            priority=self.config.batch_api.priority if batch_work else None,
            batch_work=batch_work,
        )
        try:
            status = await self._invoke(context, receive, send, echo, marks)
        except ClientGone:
            status = CLIENT_GONE.status
        except CutOff as cut:
            logger.error("invocation %s cut off: %s", request_id, cut.error.message)
            logger.info(_log_line(context, cut.error.status, _ms_since(started)))
            raise
        finally:
            progress.count(context.tally)
        logger.info(_log_line(context, status, _ms_since(started)))

    async def _invoke(
        self,
        context: RecordContext,
        receive: Receive,
        send: Send,
        echo: asgi_call.Headers,
        marks: dict[str, str],
    ) -> int:
        scope = context.scope
        try:
            way = dispatch.asked(marks.get(dispatch.DISPATCH_KEY))
            if way is not None:
                context = dataclasses.replace(context, dispatch=way)
            framing = content_types.framing(text_header(scope, b"content-type"))
            body = await read_body(receive, self.config.max_payload_bytes)
            several = framing is content_types.Framing.JSON_LINES or (
                jsonlines.holds_several_records(body)
            )
            session = sessions.handle(
                self.sessions,
                None if several else sessions.request_type(body),
                text_header(scope, sessions.SESSION_ID),
            )
        except RequestError as error:
            context.tally.count(None, error.status, b"")
            await respond_error(send, error, echo)
            return error.status
        if session is not None:
            context.tally.kinds.add("session")
            await respond(send, 200, session.body, TEXT, [*session.headers, *echo])
            return 200
        if context.batch_work and not await self.window.room(HOLD_S):
            metrics.THROTTLED.inc()
            context.tally.count(None, THROTTLED.status, b"")
            retry_after = (b"retry-after", str(RETRY_AFTER_S).encode())
            await respond_error(send, THROTTLED, [retry_after, *echo])
            return THROTTLED.status
        watcher = asyncio.create_task(watch_disconnect(receive, lambda: context.stop(CLIENT_GONE)))
        try:
            if several:
                return await self._mini_batch(context, send, jsonlines.split(body), echo)
            if not context.batch_work:
                return await self._answer(context, send, jsonlines.without_bom(body), echo)
            await self.window.acquire()
            try:
                return await self._answer(context, send, jsonlines.without_bom(body), echo)
            finally:
                self.window.release()
        finally:
            watcher.cancel()

    async def _mini_batch(
        self, context: RecordContext, send: Send, records: list[bytes], echo: asgi_call.Headers
    ) -> int:
        """A multi-record body: 200 and one JSON line per record, in order. Lines stream out as
        each prefix of records is done (on an async endpoint, they are sent whole at the end).
        Records still running at the deadline are aborted and answered with a timeout error
        line, so SageMaker gets its answer before it gives up."""
        buffered: list[bytes] | None = [] if self.config.async_inference else None
        if buffered is None:
            start = {"type": "http.response.start", "status": 200}
            await send({**start, "headers": [(b"content-type", JSON_LINES), *echo]})
        timeout_s = self.config.mini_batch_timeout_s
        deadline = asyncio.get_running_loop().call_later(
            timeout_s,
            context.stop,
            RequestError(
                408,
                f"the record did not finish within the mini-batch deadline of {timeout_s:g} s "
                "(SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS)",
                "timeout",
            ),
        )

        async def answer(index: int) -> bytes:
            return await self.pipeline.record(context, records[index], index)

        async def emit(chunk: bytes) -> None:
            if buffered is not None:
                buffered.append(chunk)
            else:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        try:
            slots = self.window if context.batch_work else self.slots
            await minibatch.answer_in_order(len(records), answer, slots, context.stop, emit)
        finally:
            deadline.cancel()
        if context.tally.server_errors and not await asgi_call.engine_healthy(
            self.pipeline.app, context.scope
        ):
            if buffered is None:
                raise CutOff(ENGINE_DIED)
            await respond_error(send, ENGINE_DIED, echo)
            return ENGINE_DIED.status
        if buffered is not None:
            await respond(send, 200, b"".join(buffered), JSON_LINES, echo)
        else:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return 200

    async def _answer(
        self, context: RecordContext, send: Send, body: bytes, echo: asgi_call.Headers
    ) -> int:
        """One request: the route's answer streamed through as vLLM produces it, or shaped
        (TGI, batch line) and sent whole, as on an async endpoint."""
        async_inference = self.config.async_inference
        try:
            target = await self.pipeline.target(
                context, body, no_stream=ASYNC_REQUESTS if async_inference else None
            )
        except BatchLineError as error:
            context.tally.count(None, 400, b"")
            await respond(send, 200, batch_error_line(error.custom_id, error.error), extra=echo)
            return 200
        except RequestError as error:
            context.tally.count(None, error.status, b"")
            await respond_error(send, error, echo)
            return error.status
        if target.answer is Answer.PLAIN and not target.is_batch_line and not async_inference:
            return await self._forward(context, send, target, echo)
        status, answer = await self.pipeline.answer(context, target)
        await respond(send, status, answer, extra=echo)
        return status

    async def _forward(
        self, context: RecordContext, send: Send, target: Target, echo: asgi_call.Headers
    ) -> int:
        """Stream the route's answer to the client as vLLM produces it (SSE included)."""
        status = 500
        usage_chunk = b""

        async def forward(message: Message) -> None:
            nonlocal status, usage_chunk
            if message["type"] == "http.response.start":
                status = message["status"]
                names = {name for name, _ in echo}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + echo}
            elif b'"usage"' in message.get("body", b""):
                usage_chunk = message["body"]
            await send(message)

        await self.pipeline.dispatch(context, target, context.request_id, forward)
        context.tally.count(target, status, usage_chunk)
        return status


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _log_line(context: RecordContext, status: int, ms: float) -> str:
    """One line a person can read in CloudWatch."""
    tally = context.tally
    return logfmt(
        "invocation",
        id=context.request_id,
        kind=",".join(sorted(tally.kinds)),
        route=",".join(sorted(tally.routes)),
        adapter=context.adapter,
        status=status,
        records=tally.records,
        failed=tally.failed,
        prompt_tokens=tally.prompt_tokens,
        completion_tokens=tally.completion_tokens,
        ms=f"{ms:.1f}",
    )
