"""A small stand-in for the SageMaker runtime API, which moto lacks.

`POST /endpoints/{name}/invocations` is forwarded to a real local container's `/invocations`,
as SageMaker forwards `InvokeEndpoint`: body, Content-Type, Accept and custom attributes in;
body, Content-Type and custom attributes out. Like the real service it answers a container's
non-200 with 424 `ModelError` (carrying `OriginalStatusCode`), a body over 6 MB (4 MB for a
serverless endpoint: `Runtime.serverless`) with 400 `ValidationError`, and an unknown endpoint
with 400 `ValidationError`; it can also throttle
every Nth call (400 `ThrottlingException`). boto3's `sagemaker-runtime` client talks to it with
`endpoint_url`.

It also serves SageMaker's OpenAI-compatible path, `POST /endpoints/{name}/openai/v1/chat/
completions`: a request needs `Authorization: Bearer <token>` (401 without one), a token made as
the SageMaker SDK's `generate_token` makes it: `sagemaker-api-key-` and the base64 of a presigned
`POST sagemaker.amazonaws.com/?Action=CallWithBearerToken` (SigV4, service `sagemaker`, `host`
the only signed header, at most 12 h) without its scheme, `&Version=1` appended. The emulator
reads the token with its own copy of those facts (never the client's, so a wrong constant there
cannot pass) and computes its SigV4 signature again with botocore from the secret of its access
key (403 for a bad, expired or other-region token). fixtures/bearer_token.json holds tokens signed
once that way, with their inputs. The body goes to the container as it came, as `POST
/v1/chat/completions` (the one container error quoted from a real endpoint came from that
route), and the container's answer comes back as it is: status, body and streams.

`POST /endpoints/{name}/invocations-response-stream` is `InvokeEndpointWithResponseStream`
(botocore's sagemaker-runtime model: that URI, the answer's content type in
`X-Amzn-SageMaker-Content-Type`): the container's `/invocations` answer relayed as AWS's event
stream (`application/vnd.amazon.eventstream`: each message a prelude of its length and its
headers' length with a CRC32, string headers `:event-type` PayloadPart, `:content-type`,
`:message-type` event, the payload, a CRC32 of it all). AWS promises nothing of where a part
ends ("one or more payload parts"), so the bytes are cut into PayloadParts of 1 to 7 bytes by a
seeded random cut, not on the lines of the server-sent events, and a client that assumes whole
lines or whole characters in a part fails; with `cut_anywhere` off, each of the container's
writes is one part (a client that needs that: LiteLLM's `sagemaker_chat`). A container's
non-200 before the stream is a 424 ModelError, as for InvokeEndpoint.

Inference components: `components` maps a component to its endpoint and container. The runtime
API's header of InferenceComponentName, `X-Amzn-SageMaker-Inference-Component`, routes a call
(both invoke paths, and the OpenAI path, where the same header is our working assumption) to its
component's container. On an endpoint with components, a call without it is AWS's 400
ValidationError "Inference Component Name header is required for endpoints to which you plan to
deploy inference components. ..." (AWS's words, quoted in LiteLLM's source and in users' logs);
a component in `no_capacity` (scaled to zero) answers AWS's 400 ValidationError "Inference
Component has no capacity to process this request. ..." (quoted in AWS's scale-to-zero
notebook), counted per component in `no_capacity_calls` as CloudWatch counts
NoCapacityInvocationFailures; a component the endpoint lacks is a 400 ValidationError in our
words (AWS's unconfirmed).
"""

import base64
import binascii
import contextlib
import datetime
import http.server
import json
import random
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

import httpx
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

from tests.support.local_http import serving

MAX_BODY_BYTES = 6 * 1000 * 1000
COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"
NO_CAPACITY = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be "
    "in-progress (if configured) or try to increase the capacity by invoking "
    "UpdateInferenceComponentRuntimeConfig API."
)
NO_COMPONENT_NAME = (
    "Inference Component Name header is required for endpoints to which you plan to deploy "
    "inference components. Please include Inference Component Name header or consider using "
    "SageMaker models."
)
STREAM = "invocations-response-stream"
EVENT_STREAM = "application/vnd.amazon.eventstream"
# The largest PayloadPart the stream is cut into, and the seed of the cut.
PART_BYTES = 7
CUT_SEED = 57
# Serverless Inference's limit of a request body.
SERVERLESS_MAX_BODY_BYTES = 4 * 1000 * 1000
CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
OPENAI_CHAT = ["openai", "v1", "chat", "completions"]
# SageMaker's bearer tokens, as the SageMaker SDK (sagemaker.core.token_generator) makes them.
TOKEN_SERVICE = "sagemaker"
TOKEN_HOST = "sagemaker.amazonaws.com"
TOKEN_ACTION = "CallWithBearerToken"
TOKEN_PREFIX = "sagemaker-api-key-"
TOKEN_VERSION = "&Version=1"
TOKEN_MAX_S = 12 * 60 * 60
SIGV4_DATE = "%Y%m%dT%H%M%SZ"
# How far in the future a signing time may be (AWS's SigV4 clock-skew allowance).
SKEW = datetime.timedelta(minutes=15)
TOKEN_FIXTURE = Path(__file__).with_name("fixtures") / "bearer_token.json"


@dataclass
class Runtime:
    """What the emulator forwards to, and what it saw."""

    containers: dict[str, str]
    # The endpoints of `containers` that are serverless.
    serverless: frozenset[str] = frozenset()
    # The secret of each access key, and the region: what the OpenAI path's tokens are checked
    # with.
    secrets: dict[str, str] = field(default_factory=dict)
    region: str = "us-east-1"
    throttle_every: int = 0
    calls: int = 0
    throttled: int = 0
    attributes: list[str | None] = field(default_factory=list)
    # Inference components: each one's endpoint and container; those with no copy (scaled to
    # zero), which a test changes; the calls each of them refused for that.
    components: dict[str, tuple[str, str]] = field(default_factory=dict)
    no_capacity: set[str] = field(default_factory=set)
    no_capacity_calls: Counter[str] = field(default_factory=Counter)
    # Whether the stream is cut anywhere (else each of the container's writes is one PayloadPart,
    # as a relay that keeps them would send them).
    cut_anywhere: bool = True
    # The container each call was forwarded to, in order.
    forwarded: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def route(self, endpoint: str, component: str | None) -> tuple[str | None, str]:
        """The container a call goes to, or None and AWS's message of why not."""
        with self.lock:
            if component is not None:
                held = self.components.get(component)
                if held is None or held[0] != endpoint:
                    why = f"Inference Component {component} not found on endpoint {endpoint}."
                    return None, why
                if component in self.no_capacity:
                    self.no_capacity_calls[component] += 1
                    return None, NO_CAPACITY
                self.forwarded.append(held[1])
                return held[1], ""
            if any(held_on == endpoint for held_on, _ in self.components.values()):
                return None, NO_COMPONENT_NAME
            container = self.containers.get(endpoint)
            if container is None:
                return None, f"Endpoint {endpoint} not found."
            self.forwarded.append(container)
            return container, ""

    def max_body_bytes(self, endpoint: str) -> int:
        return SERVERLESS_MAX_BODY_BYTES if endpoint in self.serverless else MAX_BODY_BYTES

    def next_call_throttled(self) -> bool:
        with self.lock:
            self.calls += 1
            throttle = self.throttle_every > 0 and self.calls % self.throttle_every == 0
            self.throttled += throttle
            return throttle


def presigned_query(value: str) -> dict[str, str] | None:
    """The query of the presigned URL inside a token (None: not a SageMaker token)."""
    if not value.startswith(TOKEN_PREFIX):
        return None
    try:
        url = base64.b64decode(value.removeprefix(TOKEN_PREFIX), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    if not url.startswith(f"{TOKEN_HOST}/?") or not url.endswith(TOKEN_VERSION):
        return None
    return dict(parse_qsl(url.removeprefix(f"{TOKEN_HOST}/?")))


def signature(query: dict[str, str], secret: str, region: str) -> str:
    """The SigV4 signature a token's presigned URL should carry, computed again by botocore at
    the token's own time."""
    access_key = query["X-Amz-Credential"].split("/")[0]
    credentials = ReadOnlyCredentials(access_key, secret, query.get("X-Amz-Security-Token"))
    auth = SigV4QueryAuth(credentials, TOKEN_SERVICE, region, expires=int(query["X-Amz-Expires"]))
    request = AWSRequest(
        method="POST",
        url=f"https://{TOKEN_HOST}/",
        headers={"host": TOKEN_HOST},
        params={"Action": TOKEN_ACTION},
    )
    request.context["timestamp"] = query["X-Amz-Date"]
    auth._modify_request_before_signing(request)
    return auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def token_problem(
    authorization: str | None, runtime: Runtime, now: datetime.datetime | None = None
) -> tuple[int, str] | None:
    """Why a request on the OpenAI path is refused at `now` (naive UTC; None: the current
    time), as (status, message); None: it is not."""
    if not authorization or not authorization.startswith("Bearer "):
        return 401, "Missing Authentication Token: send Authorization: Bearer <token>"
    query = presigned_query(authorization.removeprefix("Bearer ").strip())
    invalid = (403, "The bearer token included in the request is invalid.")
    if query is None or query.get("Action") != TOKEN_ACTION or query.get("Version") != "1":
        return invalid
    try:
        access_key, day, region, service, terminator = query["X-Amz-Credential"].split("/")
        signed = datetime.datetime.strptime(query["X-Amz-Date"], SIGV4_DATE)
        expires = int(query["X-Amz-Expires"])
    except (KeyError, ValueError):
        return invalid
    secret = runtime.secrets.get(access_key)
    if secret is None or (service, terminator) != (TOKEN_SERVICE, "aws4_request"):
        return invalid
    if region != runtime.region or day != query["X-Amz-Date"][:8]:
        return invalid
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        return invalid
    if query.get("X-Amz-SignedHeaders") != "host" or not 0 < expires <= TOKEN_MAX_S:
        return invalid
    now = now or utc_now()
    if now > signed + datetime.timedelta(seconds=expires):
        return 403, "The bearer token has expired."
    if signed > now + SKEW:
        return invalid
    if signature(query, secret, region) != query.get("X-Amz-Signature"):
        return invalid
    return None


def _header(name: bytes, value: bytes) -> bytes:
    """An event-stream header of type string (7)."""
    return bytes([len(name)]) + name + b"\x07" + struct.pack(">H", len(value)) + value


def event_message(payload: bytes, event: str = "PayloadPart") -> bytes:
    """One message of AWS's event stream carrying `payload`."""
    headers = b"".join(
        _header(name, value)
        for name, value in (
            (b":event-type", event.encode()),
            (b":content-type", b"application/octet-stream"),
            (b":message-type", b"event"),
        )
    )
    prelude = struct.pack(">II", 16 + len(headers) + len(payload), len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + headers + payload
    return message + struct.pack(">I", binascii.crc32(message))


def cut(data: bytes, cuts: random.Random) -> list[bytes]:
    """`data` in parts of 1 to PART_BYTES bytes, where `cuts` says."""
    parts, at = [], 0
    while at < len(data):
        step = cuts.randint(1, PART_BYTES)
        parts.append(data[at : at + step])
        at += step
    return parts


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

        def openai_error(self, status: int, message: str, code: str) -> None:
            error = {"message": message, "type": "invalid_request_error", "code": code}
            self.answer(status, json.dumps({"error": error}).encode())

        def openai(self, name: str, body: bytes) -> None:
            """The OpenAI-compatible path: the token checked, the container's answer relayed
            as it comes (a stream chunk by chunk)."""
            refused = token_problem(self.headers.get("Authorization"), runtime)
            if refused is not None:
                self.openai_error(*refused, "access_denied")
                return
            container, why = runtime.route(name, self.headers.get(COMPONENT_HEADER))
            if container is None:
                self.openai_error(400, why, "validation_error")
                return
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            url = container + "/v1/chat/completions"
            with httpx.stream("POST", url, content=body, headers=headers, timeout=600) as reply:
                self.send_response(reply.status_code)
                self.send_header("Content-Type", reply.headers.get("content-type", ""))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    for chunk in filter(None, reply.iter_raw()):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            parts = self.path.strip("/").split("/")
            if parts[:1] == ["endpoints"] and parts[2:] == OPENAI_CHAT:
                self.openai(parts[1], body)
                return
            operations = ("invocations", STREAM)
            if len(parts) != 3 or parts[0] != "endpoints" or parts[2] not in operations:
                self.error(404, "UnknownOperationException", f"no operation at {self.path}")
                return
            if len(body) > runtime.max_body_bytes(parts[1]):
                self.error(400, "ValidationError", "Request payload is too large.")
                return
            container, why = runtime.route(parts[1], self.headers.get(COMPONENT_HEADER))
            if container is None:
                self.error(400, "ValidationError", why)
                return
            if runtime.next_call_throttled():
                self.error(400, "ThrottlingException", "Rate exceeded")
                return
            attributes = self.headers.get(CUSTOM_ATTRIBUTES)
            with runtime.lock:
                runtime.attributes.append(attributes)
            # The streaming form names Accept in a header of its own.
            accept = self.headers.get("Accept") or self.headers.get("X-Amzn-SageMaker-Accept")
            headers = {
                name: value
                for name, value in (
                    ("Content-Type", self.headers.get("Content-Type")),
                    ("Accept", accept),
                    (CUSTOM_ATTRIBUTES, attributes),
                )
                if value is not None
            }
            url = container + "/invocations"
            with httpx.stream("POST", url, content=body, headers=headers, timeout=600) as reply:
                if reply.status_code != 200:
                    text = reply.read().decode(errors="replace")[:500]
                    self.error(
                        424,
                        "ModelError",
                        f"Received client error ({reply.status_code}) from primary with message "
                        f'"{text}".',
                        OriginalStatusCode=reply.status_code,
                        OriginalMessage=text,
                    )
                    return
                echo = {CUSTOM_ATTRIBUTES: v} if (v := reply.headers.get(CUSTOM_ATTRIBUTES)) else {}
                kind = reply.headers.get("content-type", "application/json")
                if parts[2] == STREAM:
                    self.event_stream(reply, kind, echo)
                else:
                    self.answer(200, reply.read(), content_type=kind, **echo)

        def event_stream(self, reply: httpx.Response, kind: str, echo: dict[str, str]) -> None:
            """The container's answer as AWS's event stream of PayloadParts, cut anywhere."""
            self.send_response(200)
            self.send_header("Content-Type", EVENT_STREAM)
            self.send_header("X-Amzn-SageMaker-Content-Type", kind)
            for name, value in echo.items():
                self.send_header(name, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            cuts = random.Random(CUT_SEED)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for data in reply.iter_raw():
                    for part in cut(data, cuts) if runtime.cut_anywhere else [data]:
                        message = event_message(part)
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(message), message))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

    return Handler


def runtime_emulator(runtime: Runtime) -> contextlib.AbstractContextManager[str]:
    """`runtime` served on a free port of 127.0.0.1; entering gives its URL."""
    return serving(_handler(runtime))
