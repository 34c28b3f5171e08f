"""SageMakerMiddleware: the pure ASGI class vLLM installs through `--middleware`.

It owns `/ping`, `/execution-parameters` and `/invocations`, guards every non-health route with
the API key when one is configured, refuses bodies over the payload limit with 413, and passes
everything else to vLLM untouched.
"""

import asyncio
import contextlib
import os
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handler import asgi_call, content_types, jsonlines, minibatch
from handler.auth import ApiKeys
from handler.config import MIB, Config
from handler.errors import RequestError
from handler.formats import batch_error_line
from handler.logs import logger
from handler.minibatch import CLIENT_GONE, Stop
from handler.pipeline import Pipeline
from handler.routing import Answer, BatchLineError, custom_attributes

PING_TIMEOUT_S = 1.5
EXIT_DELAY_S = 0.5
CUSTOM_ATTRIBUTES = b"x-amzn-sagemaker-custom-attributes"
INFERENCE_ID = b"x-amzn-sagemaker-inference-id"
JSON_LINES_MEDIA = b"application/jsonlines"


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


def header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope["headers"] if k == name), None)


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = b"application/json",
    extra: asgi_call.Headers = (),
) -> None:
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_error(send: Send, error: RequestError, extra: asgi_call.Headers = ()) -> None:
    await respond(send, error.status, error.to_json(), extra=extra)


class SageMakerMiddleware:
    """Owns the SageMaker routes and passes everything else to vLLM."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.config = Config.from_env()
        self.keys = ApiKeys(self.config.api_keys)
        self.pipeline = Pipeline(app)
        self.slots = asyncio.Semaphore(self.config.records_in_flight)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if not self.keys.allows(method, path, header(scope, b"authorization")):
            error = RequestError(
                401,
                "a valid API key is required: send 'Authorization: Bearer <key>'",
                "invalid_api_key",
            )
            await respond(send, 401, error.to_json(), extra=[(b"www-authenticate", b"Bearer")])
            return
        length = header(scope, b"content-length")
        if length and length.isdigit() and int(length) > self.config.max_payload_bytes:
            await respond_error(send, self._too_large())
            return
        if path == "/ping":
            await self.ping(scope, send)
        elif path == "/execution-parameters" and method == "GET":
            await respond(send, 200, self.config.execution_parameters.to_json())
        elif path == "/invocations" and method == "POST":
            await self.invocations(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _too_large(self) -> RequestError:
        limit_mb = self.config.max_payload_bytes // MIB
        return RequestError(
            413,
            f"the body is larger than {limit_mb} MiB (set "
            "SAGEMAKER_MAX_PAYLOAD_IN_MB to change the limit)",
            "payload_too_large",
        )

    async def ping(self, scope: Scope, send: Send) -> None:
        """200 with an empty body when the engine answers vLLM's /health, else 503.

        Answers within PING_TIMEOUT_S whatever the load. When the engine is dead for good the
        process exits non-zero, so SageMaker replaces the instance instead of keeping a broken
        endpoint InService.
        """
        try:
            reply = await asyncio.wait_for(
                asgi_call.call(self.app, scope, "GET", "/health", b"", [], asyncio.Event()),
                PING_TIMEOUT_S,
            )
            status = 200 if reply.status == 200 else 503
        except TimeoutError:
            reply, status = None, 503
        await respond(send, status, b"", content_type=b"text/plain")
        if reply is not None and reply.status == 503:
            logger.error("the engine is dead; exiting so SageMaker replaces this instance")
            asyncio.get_running_loop().call_later(EXIT_DELAY_S, os._exit, 1)

    async def invocations(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One SageMaker invocation: route, dispatch in-process, answer."""
        started = time.perf_counter()
        request_id = (header(scope, INFERENCE_ID) or b"").decode("latin-1") or uuid.uuid4().hex
        attributes = header(scope, CUSTOM_ATTRIBUTES)
        echo = [(b"x-request-id", request_id.encode())]
        if attributes is not None:
            echo.append((b"x-amzn-sagemaker-custom-attributes", attributes))
        route_hint = (
            custom_attributes(attributes.decode("latin-1")).get("route") if attributes else None
        ) or self.config.fixed_route
        try:
            framing = content_types.framing(_decoded(header(scope, b"content-type")))
            body = await self._read_body(receive)
        except RequestError as error:
            await respond_error(send, error, echo)
            return
        except ClientGone:
            return
        several = framing is content_types.Framing.JSON_LINES or jsonlines.holds_several_records(
            body
        )
        stop = Stop()
        watcher = asyncio.create_task(_watch_disconnect(receive, stop))
        try:
            if several:
                status = await self._mini_batch(
                    scope, send, jsonlines.split(body), route_hint, request_id, echo, stop
                )
            else:
                status = await self._answer(
                    scope,
                    send,
                    jsonlines.without_bom(body),
                    route_hint,
                    request_id,
                    echo,
                    stop.event,
                )
        finally:
            watcher.cancel()
        logger.info(
            "invocation %s -> %s in %.1f ms",
            request_id,
            status,
            (time.perf_counter() - started) * 1000,
        )

    async def _mini_batch(
        self,
        scope: Scope,
        send: Send,
        records: list[bytes],
        route_hint: str | None,
        request_id: str,
        echo: asgi_call.Headers,
        stop: Stop,
    ) -> int:
        """A multi-record body: 200 and one JSON line per record, in order, streamed as each
        prefix of records is done. Records still running at the deadline are aborted and
        answered with a timeout error line, so SageMaker gets its answer before it gives up."""
        headers = scope["headers"]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", JSON_LINES_MEDIA), *echo],
            }
        )
        timeout_s = self.config.mini_batch_timeout_s
        deadline = asyncio.get_running_loop().call_later(
            timeout_s,
            stop,
            RequestError(
                408,
                f"the record did not finish within the mini-batch deadline of {timeout_s:g} s "
                "(SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS)",
                "timeout",
            ),
        )

        async def answer(index: int) -> bytes:
            return await self.pipeline.record(
                scope, headers, records[index], route_hint, f"{request_id}-{index}", stop
            )

        async def emit(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        try:
            await minibatch.answer_in_order(len(records), answer, self.slots, stop, emit)
        finally:
            deadline.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        logger.info("mini-batch %s: %d records", request_id, len(records))
        return 200

    async def _answer(
        self,
        scope: Scope,
        send: Send,
        body: bytes,
        route_hint: str | None,
        request_id: str,
        echo: asgi_call.Headers,
        disconnected: asyncio.Event,
    ) -> int:
        headers = scope["headers"]
        try:
            target = await self.pipeline.target(scope, headers, body, route_hint)
        except BatchLineError as error:
            await respond(send, 200, batch_error_line(error.custom_id, error.error), extra=echo)
            return 200
        except RequestError as error:
            await respond_error(send, error, echo)
            return error.status
        if target.answer is Answer.PLAIN and not target.is_batch_line:
            return await self._forward(
                scope, send, target.route, body, request_id, echo, disconnected
            )
        status, answer = await self.pipeline.answer(
            scope, headers, target, request_id, disconnected
        )
        await respond(send, status, answer, extra=echo)
        return status

    async def _forward(
        self,
        scope: Scope,
        send: Send,
        route: str,
        body: bytes,
        request_id: str,
        echo: asgi_call.Headers,
        disconnected: asyncio.Event,
    ) -> int:
        """Stream the route's answer to the client as vLLM produces it (SSE included)."""
        status = 500

        async def forward(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                names = {name for name, _ in echo}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + echo}
            await send(message)

        headers = asgi_call.request_headers(scope["headers"], body, request_id)
        await asgi_call.dispatch(
            self.app, scope, "POST", route, body, headers, forward, disconnected
        )
        return status

    async def _read_body(self, receive: Receive) -> bytes:
        """The whole request body, or 413 as soon as it passes the payload limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.config.max_payload_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _decoded(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


async def _watch_disconnect(receive: Receive, stop: Stop) -> None:
    """Stop the request when the client goes away (vLLM then aborts what is running)."""
    with contextlib.suppress(Exception):
        while (await receive())["type"] != "http.disconnect":
            pass
    stop(CLIENT_GONE)
