"""Calls to vLLM's own routes in-process over ASGI: no socket, no second process.

A synthetic request scope is built from the client's scope (so `app`, `state` and the client
address carry over), the body is handed over in one message, and the route's response messages
go to a `send` of the caller's choosing. The synthetic `receive` reports a disconnect when the
real client goes away, so vLLM aborts the request on the engine.
"""

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope

Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

# Headers the synthetic request gets from the handler, not from the client.
_REPLACED = frozenset(
    {b"content-type", b"content-length", b"transfer-encoding", b"x-request-id", b"expect"}
)


def request_headers(
    client: Iterable[tuple[bytes, bytes]], body: bytes, request_id: str | None
) -> Headers:
    """The client's headers (auth, SageMaker headers) with a JSON body's framing and the id."""
    headers = [(k, v) for k, v in client if k not in _REPLACED]
    headers += [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if request_id:
        headers.append((b"x-request-id", request_id.encode()))
    return headers


def synthetic(scope: Scope, method: str, path: str, headers: Headers) -> Scope:
    """The scope of an in-process request to `method path`, built from the client's `scope`
    (its app, state and client address carry over)."""
    return {
        **scope,
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
    }


def receiver(body: bytes, disconnected: asyncio.Event) -> Receive:
    """An in-process request's `receive`: `body` in one message, then a disconnect once
    `disconnected` is set."""
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    return receive


async def dispatch(
    app: ASGIApp,
    scope: Scope,
    method: str,
    path: str,
    body: bytes,
    headers: Headers,
    send: Send,
    disconnected: asyncio.Event,
) -> None:
    """Run `method path` with `body` on `app`, sending its response messages to `send`."""
    await app(synthetic(scope, method, path, headers), receiver(body, disconnected), send)


@dataclass
class Reply:
    """A route's whole answer."""

    status: int = 500
    headers: Headers = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)

    async def collect(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name), None)


async def call(
    app: ASGIApp,
    scope: Scope,
    method: str,
    path: str,
    body: bytes,
    headers: Headers,
    disconnected: asyncio.Event,
) -> Reply:
    """Run a route and return its whole answer."""
    reply = Reply()
    await dispatch(app, scope, method, path, body, headers, reply.collect, disconnected)
    return reply


async def engine_healthy(app: ASGIApp, scope: Scope, headers: Headers | None = None) -> bool:
    """vLLM's `/health` answers 200: its engine is alive. The route only reads the engine
    client's state, so it never waits for inference."""
    reply = await call(app, scope, "GET", "/health", b"", headers or [], asyncio.Event())
    return reply.status == 200
