"""SageMakerMiddleware: the pure ASGI class vLLM installs through `--middleware`.

It owns SageMaker's routes: `/ping`, `/execution-parameters`, `/invocations` (handler.invocations)
and the adapter protocol `/adapters` (handler.adapters), and OpenAI's Files and Batches API
(`/v1/files`, `/v1/batches`: handler.batches), which has upload limits of its own and runs
batches in the background from the server's start (lifespan) to its shutdown. Real-time
inference requests are counted, so running batches yield to them. It guards every non-health
route with the API key when one is configured, refuses bodies over the payload limit with 413,
and passes everything else to vLLM untouched.
"""

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handler import adapters, asgi_call, kinds
from handler.auth import ApiKeys
from handler.batches import routes as batch_routes
from handler.batches.window import LiveTraffic
from handler.config import Config
from handler.errors import RequestError
from handler.invocations import CUSTOM_ATTRIBUTES, Invocations
from handler.lifecycle import StopRequests
from handler.logs import logger
from handler.messages import header, respond, respond_error, too_large
from handler.pipeline import Pipeline
from handler.routing import custom_attributes, is_batch_work

PING_TIMEOUT_S = 1.5
EXIT_DELAY_S = 0.5


def is_live(scope: Scope) -> bool:
    """A real-time inference request: not a server-side batch line (those never pass through
    here) and not marked as batch work by its custom attributes."""
    if scope["method"] != "POST" or not (
        scope["path"] == "/invocations" or scope["path"] in kinds.INFERENCE_ROUTES
    ):
        return False
    attributes = header(scope, CUSTOM_ATTRIBUTES)
    marks = custom_attributes(attributes.decode("latin-1") if attributes else None)
    return not is_batch_work(marks)


class SageMakerMiddleware:
    """Owns the SageMaker routes and passes everything else to vLLM."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.config = Config.from_env()
        self.keys = ApiKeys(self.config.api_keys)
        pipeline = Pipeline(app)
        self.invocations = Invocations(self.config, pipeline)
        self.adapters = adapters.AdapterRoutes(app, self.config.max_payload_bytes)
        self.live = LiveTraffic()
        self.stops = StopRequests()
        self.batch_api = batch_routes.BatchRoutes(
            self.config.batch_api, pipeline, self.live, self.config.api_keys
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if is_live(scope):
            with self.live.request():
                await self.route(scope, receive, send)
        else:
            await self.route(scope, receive, send)

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """vLLM's lifespan, with the batch scheduler started once the server is up and stopped
        before vLLM shuts down. A shutdown nobody asked for ends the process with status 1."""

        async def on_receive() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await self.batch_api.shutdown()
            return message

        async def on_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                self.stops.watch()
                await self.batch_api.startup(scope)
            if message["type"] == "lifespan.shutdown.complete":
                self.stops.exit_unless_requested("vLLM stopped unasked (its engine died)")
            await send(message)

        await self.app(scope, on_receive, on_send)

    async def route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if not self.keys.allows(method, path, header(scope, b"authorization")):
            await self.unauthorized(path, send)
            return
        if batch_routes.owns(path):
            await self.batch_api(scope, receive, send)
            return
        length = header(scope, b"content-length")
        if length and length.isdigit() and int(length) > self.config.max_payload_bytes:
            await respond_error(send, too_large(self.config.max_payload_bytes))
            return
        if path == "/ping":
            await self.ping(scope, send)
        elif path == "/execution-parameters" and method == "GET":
            await respond(send, 200, self.config.execution_parameters.to_json())
        elif path == "/invocations" and method == "POST":
            await self.invocations(scope, receive, send)
        elif path == adapters.PREFIX or path.startswith(adapters.PREFIX + "/"):
            await self.adapters(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def unauthorized(self, path: str, send: Send) -> None:
        error = RequestError(
            401,
            "a valid API key is required: send 'Authorization: Bearer <key>'",
            "invalid_api_key",
        )
        if path.startswith(adapters.PREFIX):
            logger.warning(
                "%s refused without an API key. SageMaker's own adapter calls carry none: on "
                "SageMaker, leave SM_VLLM_API_KEY unset (SigV4 guards the endpoint)",
                path,
            )
        await respond_error(send, error, [(b"www-authenticate", b"Bearer")])

    async def ping(self, scope: Scope, send: Send) -> None:
        """200 with an empty body when the engine answers vLLM's /health, else 503.

        Answers within PING_TIMEOUT_S whatever the load. When the engine is dead for good the
        process exits with status 1 (unless it is already stopping on request), so SageMaker
        replaces the instance instead of keeping a broken endpoint InService.
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
            asyncio.get_running_loop().call_later(
                EXIT_DELAY_S, self.stops.exit_unless_requested, "the engine is dead"
            )
