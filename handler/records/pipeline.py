"""The one record pipeline: route -> dispatch -> format.

Every entry point (a real-time request, a record of a Batch Transform mini-batch, a line of an
offline batch file) goes through `Pipeline`: `target` decides the route, `answer` calls it
in-process and shapes its answer for one client, `record` does both for one record of a
multi-record body and always returns its output line. What they need to run is one
`RecordContext`; none of them needs a client connection. The call goes to the route's serving
object or to its HTTP route in-process, the way `core.dispatch` says: only the dispatch differs.
"""

import asyncio
import json

from starlette.types import ASGIApp, Scope

from vllm_sagemaker.core import dispatch, formats, json_record, kinds, model_names, routing
from vllm_sagemaker.core.errors import INTERNAL_ERROR, RequestError
from vllm_sagemaker.core.routing import BatchLineError, Target
from vllm_sagemaker.handler.process.logs import logger
from vllm_sagemaker.handler.records import asgi_call, serving
from vllm_sagemaker.handler.records.context import RecordContext

JSON_MEDIA = b"application/json"
MULTI_RECORD = "records of a multi-record body"


MODELS_ROUTE = "/v1/models"


class Pipeline:
    def __init__(
        self, app: ASGIApp, model_fallback: bool = True, way: dispatch.Way | None = None
    ) -> None:
        self.app = app
        self.model_fallback = model_fallback
        # The way records reach vLLM unless an invocation says (SAGEMAKER_RECORD_DISPATCH).
        self.way = way
        # The customer's script wraps vLLM's routes in middlewares (set once the server is up).
        self.customer_middleware = False
        self._served: frozenset[str] | None = None
        self._probing = asyncio.Lock()
        self._served_names: tuple[str, ...] = ()

    async def served(self, scope: Scope, headers: asgi_call.Headers) -> frozenset[str]:
        """The inference routes this server has, learned once by asking the server itself:
        a registered POST route answers GET with 405, a missing one with 404."""
        if self._served is None:
            async with self._probing:
                if self._served is None:
                    self._served = frozenset(
                        [
                            route
                            for route in sorted(kinds.INFERENCE_ROUTES)
                            if await self._exists(scope, headers, route)
                        ]
                    )
        return self._served

    async def _exists(self, scope: Scope, headers: asgi_call.Headers, route: str) -> bool:
        probe = [(k, v) for k, v in headers if k == b"authorization"]
        reply = await asgi_call.call(self.app, scope, "GET", route, b"", probe, asyncio.Event())
        return reply.status != 404

    async def models(self, scope: Scope, headers: asgi_call.Headers) -> model_names.Models:
        """The names the server answers to now, from vLLM's own `/v1/models` (served names
        first; an entry with a `parent` is a LoRA adapter)."""
        probe = [(k, v) for k, v in headers if k == b"authorization"]
        reply = await asgi_call.call(
            self.app, scope, "GET", MODELS_ROUTE, b"", probe, asyncio.Event()
        )
        if reply.status != 200:
            return model_names.Models(())
        entries = json.loads(bytes(reply.body)).get("data", [])
        served = tuple(e["id"] for e in entries if not e.get("parent"))
        self._served_names = served
        return model_names.Models(served, frozenset(e["id"] for e in entries if e.get("parent")))

    async def model_for(
        self, scope: Scope, headers: asgi_call.Headers, record: object
    ) -> str | None:
        """The model that answers `record` in place of the one it names (None: as it is), by
        `core.model_names`; vLLM's names are asked for only when the name is not served."""
        name = model_names.asked(record)
        if not self.model_fallback or name is None or name in self._served_names:
            return None
        if routing.is_batch_line(record):
            return None
        return model_names.answering(name, await self.models(scope, headers))

    async def target(
        self, context: RecordContext, raw: bytes, no_stream: str | None = None
    ) -> Target:
        """Parse one record and decide its route (raises RequestError or BatchLineError).

        With an adapter in the context, the adapter answers: it becomes the body's `model`;
        else a `model` the server does not know is answered by the served model."""
        served = await self.served(context.scope, context.headers)
        record = json_record.parse(raw)
        model = context.adapter or await self.model_for(context.scope, context.headers, record)
        return routing.target(
            record, raw, context.route_hint, served, no_stream, model, context.priority
        )

    async def dispatch(
        self, context: RecordContext, target: Target, request_id: str, send: asgi_call.Send
    ) -> None:
        """Run the target's route in-process, its response messages going to `send`."""
        await asgi_call.dispatch(
            self.app,
            context.scope,
            "POST",
            target.route,
            target.body,
            asgi_call.request_headers(context.headers, target.body, request_id),
            send,
            context.disconnected,
        )

    async def call(
        self, context: RecordContext, target: Target, request_id: str, record: bool = False
    ) -> asgi_call.Reply:
        """Run the target's route in-process and return its whole answer: through its serving
        object or its HTTP route, as `core.dispatch` decides (`record`: a record of a
        multi-record body or a batch line)."""
        serve = serving.handler(context.scope, target.route)
        way = dispatch.way(
            context.dispatch or self.way,
            record=record,
            streams=target.streams,
            served=serve is not None,
            customer_middleware=self.customer_middleware,
        )
        if serve is not None and way is dispatch.Way.SERVING:
            headers = asgi_call.request_headers(context.headers, target.body, request_id)
            return await serving.call(
                context.scope, target.route, target.body, headers, context.stop, serve
            )
        reply = asgi_call.Reply()
        await self.dispatch(context, target, request_id, reply.collect)
        return reply

    async def answer(self, context: RecordContext, target: Target) -> tuple[int, bytes]:
        """Call the target's route and shape its answer for one client: (status, body)."""
        reply = await self.call(context, target, context.request_id)
        body = bytes(reply.body)
        context.tally.count(target, reply.status, body)
        if target.custom_id is not None:
            return 200, self._line(target, reply, context.request_id)
        return reply.status, formats.shaped(target.answer, reply.status, body)

    async def record(self, context: RecordContext, raw: bytes, index: int) -> bytes:
        """Record `index` of a multi-record body -> its output line. Never raises: a bad record,
        an engine error, a stop (deadline, client gone) or a bug each become that record's
        line."""
        request_id = f"{context.request_id}-{index}"
        try:
            target = await self.target(context, raw, no_stream=MULTI_RECORD)
        except BatchLineError as error:
            return _refused(context, formats.batch_error_line(error.custom_id, error.error))
        except RequestError as error:
            return _refused(context, error.to_json())
        except Exception as error:
            logger.exception("record %s could not be routed", request_id)
            return _refused(context, _internal(f"{type(error).__name__}: {error}").to_json())
        stop = context.stop
        try:
            if stop.reason is None:
                reply = await self.call(context, target, request_id, record=True)
                if stop.reason is None or not _aborted(reply):
                    context.tally.count(target, reply.status, bytes(reply.body))
                    return self._line(target, reply, request_id)
            context.tally.count(target, 500, b"")
            return _failed(target, stop.reason or _internal("stopped without a reason"))
        except Exception as error:
            logger.exception("record %s failed", request_id)
            context.tally.count(target, 500, b"")
            return _failed(target, _internal(f"{type(error).__name__}: {error}"))

    @staticmethod
    def _line(target: Target, reply: asgi_call.Reply, request_id: str) -> bytes:
        body, is_json = bytes(reply.body), _is_json(reply)
        if target.custom_id is not None:
            return formats.batch_output_line(
                target.custom_id, reply.status, request_id, body, is_json
            )
        return formats.record_line(target.answer, reply.status, body, is_json)


def _refused(context: RecordContext, line: bytes) -> bytes:
    """The line of a record that never got a route, counted as a failure."""
    context.tally.count(None, 400, b"")
    return line


def _is_json(reply: asgi_call.Reply) -> bool:
    return (reply.header(b"content-type") or b"").startswith(JSON_MEDIA)


def _aborted(reply: asgi_call.Reply) -> bool:
    """vLLM's cancellation wrapper answers an aborted request with no body or a JSON null."""
    return bytes(reply.body).strip() in (b"", b"null")


def _internal(message: str) -> RequestError:
    return RequestError(500, f"internal error: {message}", INTERNAL_ERROR)


def _failed(target: Target, error: RequestError) -> bytes:
    """The line of a record that got no answer from its route."""
    if target.custom_id is not None:
        return formats.batch_error_line(target.custom_id, error)
    return error.to_json()
