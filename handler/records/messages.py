"""ASGI messages: request headers and bodies in, whole answers out."""

import contextlib
from collections.abc import Callable, Sequence

from starlette.types import Receive, Scope, Send

from vllm_sagemaker.core import content_types
from vllm_sagemaker.core.config import MIB
from vllm_sagemaker.core.errors import RequestError

JSON = b"application/json"
JSON_LINES = content_types.JSON_LINES.encode()
TEXT = b"text/plain; charset=utf-8"


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header `name` (lower case), or None."""
    return next((v for k, v in scope["headers"] if k == name), None)


def text_header(scope: Scope, name: bytes) -> str | None:
    """A header's value as text, or None when it is absent or blank."""
    value = header(scope, name)
    if value is None:
        return None
    return value.decode("latin-1").strip() or None


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = JSON,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """A whole answer, with Content-Length."""
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_error(
    send: Send, error: RequestError, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """OpenAI's error object with the error's status."""
    await respond(send, error.status, error.to_json(), extra=extra)


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


def too_large(limit_bytes: int) -> RequestError:
    return RequestError(
        413,
        f"the body is larger than {limit_bytes // MIB} MiB (set "
        "SAGEMAKER_MAX_PAYLOAD_IN_MB to change the limit)",
        "payload_too_large",
    )


async def read_body(receive: Receive, limit_bytes: int) -> bytes:
    """The whole request body; 413 as soon as it passes `limit_bytes`, ClientGone when the
    client leaves first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit_bytes:
            raise too_large(limit_bytes)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def watch_disconnect(receive: Receive, on_gone: Callable[[], None]) -> None:
    """Call `on_gone` when the client goes away (or its messages can no longer be read), after
    the request body was read; run it as a task and cancel it once the answer is sent."""
    with contextlib.suppress(Exception):
        while (await receive())["type"] != "http.disconnect":
            pass
    on_gone()
