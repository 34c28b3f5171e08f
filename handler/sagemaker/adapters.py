"""SageMaker's adapter protocol (LoRA adapters as inference components) on vLLM's LoRA routes.

SageMaker registers an adapter inference component with `POST /adapters` (`name`, `src` a
local directory, optional `preload` and `pin`; as a JSON body or as query parameters, since the
platform has sent both) and removes it with `DELETE /adapters/{name}`. Both are carried out
in-process by vLLM's `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`, and answered as
MHCS answers them: 200 `Adapter <name> registered` / `unregistered`, or vLLM's own error (404
for an unknown adapter or a path with no adapter, 400 for a rank above --max-lora-rank).
"""

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.process.logs import logfmt, logger
from vllm_sagemaker.handler.records import asgi_call
from vllm_sagemaker.handler.records.messages import (
    TEXT,
    ClientGone,
    read_body,
    respond,
    respond_error,
    text_header,
)

PREFIX = "/adapters"
ALIAS = b"x-amzn-sagemaker-adapter-alias"
IDENTIFIER = b"x-amzn-sagemaker-adapter-identifier"
LOAD_ROUTE = "/v1/load_lora_adapter"
UNLOAD_ROUTE = "/v1/unload_lora_adapter"
# vLLM reports these faults of the adapter itself as a 500 from its worker; they are the
# caller's to fix (MHCS keeps the same markers).
ADAPTER_FAULTS = (b"greater than max_lora_rank", b"doesn't contain tensors")
DISABLED = RequestError(
    400,
    "adapters cannot be registered at run time on this server: start it with "
    "SM_VLLM_ENABLE_LORA=true (serve then sets VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)",
    "adapters_disabled",
)


@dataclass(frozen=True)
class Registration:
    name: str
    src: str
    preload: bool = True
    pin: bool = False


def registration(body: bytes, query: bytes) -> Registration:
    """The adapter to register, from a JSON object body or else the query string; a 400 that
    names the field when one is missing or of the wrong type."""
    fields: dict[str, Any] = {}
    if body.strip():
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            fields = parsed
    if not fields:
        fields = dict(parse_qsl(query.decode("latin-1")))
    return Registration(
        _text(fields, "name"),
        _text(fields, "src"),
        _flag(fields, "preload", True),
        _flag(fields, "pin", False),
    )


def _text(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str) or not value.strip():
        raise RequestError(
            400, f"{name} is required: a non-empty string", "invalid_adapter_request", name
        )
    return value.strip()


def _flag(fields: dict[str, Any], name: str, default: bool) -> bool:
    value = fields.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise RequestError(400, f"{name} must be true or false", "invalid_adapter_request", name)


def unregistered_name(path: str) -> str:
    """The adapter named by `DELETE /adapters/{name}`; 424 (as MHCS answers) when it is missing."""
    name = path.removeprefix(PREFIX + "/").strip()
    if not name or "/" in name:
        raise RequestError(
            424,
            "Malformed request path; missing path parameter: adapter_name",
            "missing_adapter_name",
        )
    return name


def client_status(status: int, body: bytes) -> tuple[int, bytes]:
    """vLLM's answer to a load, with a fault of the adapter (a rank above --max-lora-rank, no
    tensors) as the 400 it is rather than vLLM's 500; vLLM's message is kept."""
    if status < 500 or not any(fault in body for fault in ADAPTER_FAULTS):
        return status, body
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body.decode("utf-8", "replace")
    return 400, RequestError(400, message, "invalid_adapter", "src").to_json()


class AdapterRoutes:
    """`POST /adapters` registers an adapter, `DELETE /adapters/{name}` removes it."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        try:
            if method == "POST" and path == PREFIX:
                body = await read_body(receive, self.max_body_bytes)
                adapter = registration(body, scope.get("query_string", b""))
                name, route = adapter.name, LOAD_ROUTE
                payload = {"lora_name": adapter.name, "lora_path": adapter.src}
                done = "registered"
            elif method == "DELETE" and path != PREFIX:
                name, route = unregistered_name(path), UNLOAD_ROUTE
                payload, done = {"lora_name": name}, "unregistered"
            else:
                allowed = "POST" if path == PREFIX else "DELETE"
                raise RequestError(405, f"{path} answers {allowed} only", "method_not_allowed")
            status, answer = await self._call(scope, route, payload)
        except ClientGone:
            return
        except RequestError as error:
            logger.info(logfmt("adapter", method=method, path=path, status=error.status))
            await respond_error(send, error)
            return
        logger.info(logfmt("adapter", method=method, name=name, status=status))
        if status != 200:
            await respond(send, status, answer)
            return
        alias = text_header(scope, ALIAS)
        await respond(send, 200, f"Adapter {alias or name} {done}".encode(), TEXT)

    async def _call(self, scope: Scope, route: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        """Run vLLM's LoRA route in-process: (status, body)."""
        body = json.dumps(payload).encode()
        headers = asgi_call.request_headers(
            [(k, v) for k, v in scope["headers"] if k == b"authorization"], body, None
        )
        reply = await asgi_call.call(self.app, scope, "POST", route, body, headers, asyncio.Event())
        if reply.status == 404 and b'"Not Found"' in reply.body:
            raise DISABLED
        return client_status(reply.status, bytes(reply.body))
