"""SageMakerMiddleware: the pure ASGI class vLLM installs through `--middleware`.

The one entry of the handler: it says which concern owns which path and nothing else.
SageMaker's routes (`handler.sagemaker`): `/ping`, `/execution-parameters`, `/invocations` and
the adapter protocol `/adapters`, unless a customer handler replaced `/ping` or `/invocations`
(`handler.sagemaker.custom_code`: then vLLM's app, where MHCS mounted it, answers). OpenAI's
Files and Batches API (`handler.batches`), which runs batches in the background from the
server's start (lifespan) to its shutdown, as the CloudWatch metrics (`handler.metrics`) are
written when SAGEMAKER_METRICS asks for them and, with several API-server processes, the batch
window's gauges are written for `/metrics`. Real-time inference requests are counted, so
running batches yield to them. With an API key configured, every route needs it but the health
routes and reading `/metrics` (`handler.sagemaker.auth`), bodies over the payload limit get
413, and everything else goes to vLLM untouched.
"""

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from vllm import envs as vllm_envs

from vllm_sagemaker.core import kinds
from vllm_sagemaker.core.config import API_KEY_VAR, Config
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.core.routing import custom_attributes, is_batch_work
from vllm_sagemaker.handler.batches.admission import rules as admission
from vllm_sagemaker.handler.batches.admission.window import BatchWindow
from vllm_sagemaker.handler.batches.api import routes as batch_routes
from vllm_sagemaker.handler.metrics import gauges
from vllm_sagemaker.handler.metrics import writer as metrics_writer
from vllm_sagemaker.handler.process.lifecycle import RESTARTS, StopRequests
from vllm_sagemaker.handler.process.logs import logger
from vllm_sagemaker.handler.records.messages import header, respond, respond_error, too_large
from vllm_sagemaker.handler.records.pipeline import Pipeline
from vllm_sagemaker.handler.sagemaker import adapters, custom_code, openai_path
from vllm_sagemaker.handler.sagemaker.auth import ApiKeys
from vllm_sagemaker.handler.sagemaker.invocations import CUSTOM_ATTRIBUTES, Invocations
from vllm_sagemaker.handler.sagemaker.ping import Ping


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
        pipeline = Pipeline(app, self.config.model_fallback, self.config.record_dispatch)
        self.pipeline = pipeline
        self.direct = openai_path.DirectRoutes(app, pipeline, self.config.max_payload_bytes)
        batches = self.config.batch_api
        self.window = BatchWindow(
            admission.Settings(
                full=batches.max_inflight, slo_ratio=batches.live_ratio, slo_s=batches.live_slo_s
            ),
            batches.yields,
        )
        self.invocations = Invocations(self.config, pipeline, self.window)
        self.adapters = adapters.AdapterRoutes(app, self.config.max_payload_bytes)
        self.stops = StopRequests()
        RESTARTS.set(self.config.server_restarts)
        self.ping = Ping(app, self.stops)
        self.custom = custom_code.Replaced()
        self.batch_api = batch_routes.BatchRoutes(
            self.config.batch_api, pipeline, self.window, self.config.api_keys, self.stops
        )
        self.metrics = metrics_writer.from_env()
        self.gauges = gauges.refresher()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = openai_path.canonical(scope)
        if not is_live(scope):
            await self.route(scope, receive, send)
            return
        with self.window.live() as answer_started:

            async def timed(message: Message) -> None:
                if message["type"] == "http.response.body" and (
                    message.get("body") or not message.get("more_body")
                ):
                    answer_started()
                await send(message)

            await self.route(scope, receive, timed)

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """vLLM's lifespan, with the batch scheduler and the CloudWatch metrics started once the
        server is up and stopped before vLLM shuts down. A shutdown nobody asked for ends the
        process with status 1."""

        async def on_receive() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await self.batch_api.shutdown()
                for periodic in (self.gauges, self.metrics):
                    if periodic is not None:
                        await periodic.stop()
            return message

        async def on_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                # vLLM caches its settings once its engine processes are up; its API server
                # reads os.environ again for every output of every request (3-5 % of its CPU
                # under a batch, benchmarks/engine_speed.py): once up, it caches them too.
                vllm_envs.enable_envs_cache()
                self.custom = custom_code.replaced()
                custom_code.log(self.custom)
                self.pipeline.customer_middleware = bool(self.custom.middlewares)
                self.stops.watch()
                await self.batch_api.startup(scope)
                for periodic in (self.gauges, self.metrics):
                    if periodic is not None:
                        periodic.start()
            if message["type"] == "lifespan.shutdown.complete":
                self.stops.exit_unless_requested("vLLM stopped unasked (its engine died)")
            await send(message)

        await self.app(scope, on_receive, on_send)

    async def route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if not self.keys.allows(method, path, header(scope, b"authorization")):
            await self.unauthorized(path, send)
            return
        batch_path = batch_routes.canonical(path)
        if batch_path is not None:
            await self.batch_api({**scope, "path": batch_path}, receive, send)
            return
        length = header(scope, b"content-length")
        if length and length.isdigit() and int(length) > self.config.max_payload_bytes:
            await respond_error(send, too_large(self.config.max_payload_bytes))
            return
        if path == "/ping" and not self.custom.ping:
            await self.ping(scope, send)
        elif path == "/execution-parameters" and method == "GET":
            await respond(send, 200, self.config.execution_parameters.to_json())
        elif path == "/invocations" and method == "POST" and not self.custom.invocations:
            await self.invocations(scope, receive, send)
        elif path == "/invocations":
            await self.app({**scope, custom_code.SCOPE_KEY: self.invocations}, receive, send)
        elif path == adapters.PREFIX or path.startswith(adapters.PREFIX + "/"):
            await self.adapters(scope, receive, send)
        elif method == "POST" and path in kinds.INFERENCE_ROUTES:
            await self.direct(scope, receive, send)
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
                "SageMaker, leave %s unset (SigV4 guards the endpoint)",
                path,
                API_KEY_VAR,
            )
        await respond_error(send, error, [(b"www-authenticate", b"Bearer")])
