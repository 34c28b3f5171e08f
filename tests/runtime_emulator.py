"""A small stand-in for the SageMaker runtime API, which moto lacks.

`POST /endpoints/{name}/invocations` is forwarded to a real local container's `/invocations`,
as SageMaker forwards `InvokeEndpoint`: body, Content-Type, Accept and custom attributes in;
body, Content-Type and custom attributes out. Like the real service it answers a container's
non-200 with 424 `ModelError` (carrying `OriginalStatusCode`), a body over 6 MB with 400
`ValidationError`, and an unknown endpoint with 400 `ValidationError`; it can also throttle
every Nth call (400 `ThrottlingException`). boto3's `sagemaker-runtime` client talks to it with
`endpoint_url`.
"""

import contextlib
import http.server
import json
import threading
from dataclasses import dataclass, field

import httpx

from tests.local_http import serving

MAX_BODY_BYTES = 6 * 1000 * 1000
CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"


@dataclass
class Runtime:
    """What the emulator forwards to, and what it saw."""

    containers: dict[str, str]
    throttle_every: int = 0
    calls: int = 0
    throttled: int = 0
    attributes: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_call_throttled(self) -> bool:
        with self.lock:
            self.calls += 1
            throttle = self.throttle_every > 0 and self.calls % self.throttle_every == 0
            self.throttled += throttle
            return throttle


def _handler(runtime: Runtime) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def error(self, status: int, kind: str, message: str, **extra: object) -> None:
            self.answer(status, json.dumps({"message": message, **extra}).encode(), kind)

        def answer(self, status: int, body: bytes, kind: str | None = None, **headers: str) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Type", headers.pop("content_type", "application/json"))
            if kind:
                self.send_header("x-amzn-ErrorType", kind)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)  # the client may be gone (a test killed it)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            parts = self.path.strip("/").split("/")
            if len(parts) != 3 or parts[0] != "endpoints" or parts[2] != "invocations":
                self.error(404, "UnknownOperationException", f"no operation at {self.path}")
                return
            container = runtime.containers.get(parts[1])
            if container is None:
                self.error(400, "ValidationError", f"Endpoint {parts[1]} not found.")
                return
            if len(body) > MAX_BODY_BYTES:
                self.error(400, "ValidationError", "Request payload is too large.")
                return
            if runtime.next_call_throttled():
                self.error(400, "ThrottlingException", "Rate exceeded")
                return
            attributes = self.headers.get(CUSTOM_ATTRIBUTES)
            with runtime.lock:
                runtime.attributes.append(attributes)
            headers = {
                name: value
                for name in ("Content-Type", "Accept", CUSTOM_ATTRIBUTES)
                if (value := self.headers.get(name)) is not None
            }
            reply = httpx.post(
                container + "/invocations", content=body, headers=headers, timeout=600
            )
            if reply.status_code != 200:
                self.error(
                    424,
                    "ModelError",
                    f"Received client error ({reply.status_code}) from primary with message "
                    f'"{reply.text[:500]}".',
                    OriginalStatusCode=reply.status_code,
                    OriginalMessage=reply.text[:500],
                )
                return
            echo = {CUSTOM_ATTRIBUTES: v} if (v := reply.headers.get(CUSTOM_ATTRIBUTES)) else {}
            self.answer(
                200,
                reply.content,
                content_type=reply.headers.get("content-type", "application/json"),
                **echo,
            )

    return Handler


def runtime_emulator(runtime: Runtime) -> contextlib.AbstractContextManager[str]:
    """`runtime` served on a free port of 127.0.0.1; entering gives its URL."""
    return serving(_handler(runtime))
