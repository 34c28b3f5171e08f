"""Customer code beside the model: handlers that replace `/ping` or `/invocations`.

vLLM's build_app runs the bootstrap of AWS's model-hosting-container-standards (MHCS) before the
server starts. It imports `$SAGEMAKER_MODEL_PATH/$CUSTOM_SCRIPT_FILENAME` (`/opt/ml/model/`,
`model.py`), resolves one handler for ping and one for invocations, first match wins: env
`CUSTOM_FASTAPI_PING_HANDLER` / `CUSTOM_FASTAPI_INVOCATION_HANDLER` > `@custom_ping_handler` /
`@custom_invocation_handler` > functions `custom_sagemaker_ping_handler` /
`custom_sagemaker_invocation_handler` in the script > vLLM's own, and mounts the winner on
vLLM's app. `replaced()` reads that resolution from MHCS's registry, so the middleware passes a
replaced route on to vLLM's app instead of answering it itself.

`invoke()` is for those handlers: it runs this server's `/invocations` (routing, mini-batches,
batch lines, sessions, adapters) on the handler's request, or on a body of the handler's own.
"""

import asyncio
import inspect
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

from model_hosting_container_standards.common.fastapi.middleware.registry import (
    middleware_registry,
)
from model_hosting_container_standards.common.handler.registry import handler_registry
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Message

from vllm_sagemaker.core import handler_specs
from vllm_sagemaker.handler.process.logs import logger
from vllm_sagemaker.handler.records import asgi_call
from vllm_sagemaker.handler.records.messages import watch_disconnect

# Where the middleware leaves its /invocations for a customer handler to find.
SCOPE_KEY = "vllm_sagemaker.invocations"
# MHCS's handler types for the two routes.
PING, INVOKE = "ping", "invoke"
_REPLACED_HEADERS = frozenset({b"content-length", b"transfer-encoding"})


@dataclass(frozen=True)
class Replaced:
    """The customer functions answering /ping and /invocations, None where ours answers, and
    the customer middlewares MHCS installed around vLLM's routes (`throttle`,
    `pre_post_process`: the formatters): records then reach vLLM through its HTTP routes, which
    those wrap (`core.dispatch`)."""

    ping: str | None = None
    invocations: str | None = None
    middlewares: tuple[str, ...] = ()


def replaced() -> Replaced:
    """What MHCS's bootstrap resolved (it runs in vLLM's build_app, before the server starts)."""
    return Replaced(
        _customer(PING), _customer(INVOKE), tuple(middleware_registry.list_middlewares())
    )


def _customer(handler_type: str) -> str | None:
    handler = handler_registry.get_handler(handler_type)
    if handler is None or handler is handler_registry.get_framework_default(handler_type):
        return None
    function = inspect.unwrap(handler)
    code = getattr(function, "__code__", None)
    where = os.path.basename(code.co_filename) if code else getattr(function, "__module__", "?")
    return f"{where}:{getattr(function, '__qualname__', function)}"


def log(found: Replaced) -> None:
    """One line saying which script was found and what it replaced; nothing without one."""
    script = handler_specs.script_path(os.environ)
    if not (os.path.isfile(script) or found.ping or found.invocations or found.middlewares):
        return
    logger.info(
        "custom code: script %s%s; /ping answered by %s; /invocations answered by %s%s",
        script,
        "" if os.path.isfile(script) else " (not found)",
        found.ping or "vllm-sagemaker",
        found.invocations or "vllm-sagemaker",
        f"; middlewares {', '.join(found.middlewares)} wrap vLLM's routes, which records take"
        if found.middlewares
        else "",
    )


async def invoke(
    request: Request, body: bytes | None = None, content_type: str | None = None
) -> StreamingResponse:
    """This server's `/invocations` on `request`, with `body` (and `content_type`) in place of
    the request's own when given: one JSON line per record for a JSON Lines body, a stream for a
    streamed request, OpenAI's error shape for a bad one. Return the answer as it is, or read it
    whole to post-process it: `b"".join([chunk async for chunk in answer.body_iterator])`."""
    invocations: ASGIApp | None = request.scope.get(SCOPE_KEY)
    if invocations is None:
        raise RuntimeError(
            "invoke() answers only requests to /invocations that vllm-sagemaker's handler "
            "passed to a customer invocation handler"
        )
    raw = await request.body() if body is None else body
    drop = _REPLACED_HEADERS | ({b"content-type"} if content_type else frozenset())
    headers = [(k, v) for k, v in request.scope["headers"] if k not in drop]
    headers.append((b"content-length", str(len(raw)).encode()))
    if content_type:
        headers.append((b"content-type", content_type.encode("latin-1")))
    messages: asyncio.Queue[Message | None] = asyncio.Queue()
    disconnected = asyncio.Event()

    async def run() -> None:
        watcher = asyncio.create_task(watch_disconnect(request.receive, disconnected.set))
        try:
            await asgi_call.dispatch(
                invocations, request.scope, "POST", "/invocations", raw, headers,
                messages.put, disconnected,
            )  # fmt: skip
        finally:
            watcher.cancel()
            await messages.put(None)

    task = asyncio.create_task(run())
    start = await messages.get()
    if start is None:
        await task
        raise RuntimeError("/invocations ended without an answer")

    async def chunks() -> AsyncIterator[bytes]:
        while (message := await messages.get()) is not None:
            if message.get("body"):
                yield message["body"]
        await task

    answer = StreamingResponse(chunks(), status_code=start["status"])
    answer.raw_headers = [
        (k, v) for k, v in start.get("headers", []) if k.lower() not in _REPLACED_HEADERS
    ]
    return answer
