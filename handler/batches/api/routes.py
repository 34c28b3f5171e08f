"""The routes of the Files and Batches API, behind one switch and one store, and the scheduler
that runs batches in this process.

With SAGEMAKER_BATCH_API=false every route answers 404, which is how LiteLLM knows to run
batches itself (it probes `GET /files` and treats only a 404 that way). The store is opened when
the server starts (to resume the batches it holds) or on the first call; a store that cannot be
used is a clear error on these routes and never stops the server from serving real-time
requests.
"""

from starlette.types import Receive, Scope, Send

from vllm_sagemaker.core import s3_uri
from vllm_sagemaker.core.config import BatchApiSettings
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.batches.admission.window import BatchWindow
from vllm_sagemaker.handler.batches.api import batches as batches_api
from vllm_sagemaker.handler.batches.api import files as files_api
from vllm_sagemaker.handler.batches.running.runner import RunSettings, Runtime
from vllm_sagemaker.handler.batches.running.scheduler import Scheduler, runner_id
from vllm_sagemaker.handler.batches.store.interface import BatchStore
from vllm_sagemaker.handler.batches.store.s3.store import S3Store
from vllm_sagemaker.handler.batches.store.sqlite import Store
from vllm_sagemaker.handler.batches.store.types import StoreError, StoreUnavailable
from vllm_sagemaker.handler.process.lifecycle import StopRequests
from vllm_sagemaker.handler.process.logs import logger
from vllm_sagemaker.handler.records.asgi_call import Headers
from vllm_sagemaker.handler.records.messages import respond_error
from vllm_sagemaker.handler.records.pipeline import Pipeline

PREFIXES = (files_api.PREFIX, batches_api.PREFIX)
# Also served without `/v1`: LiteLLM's documented config names a vLLM server without it
# (`api_base: http://host:8000`), then probes `{api_base}/files` and sends its OpenAI client there.
VERSION = "/v1"
LEASE_S = 15.0


def canonical(path: str) -> str | None:
    """The `/v1/...` path of a Files or Batches API path (given with or without `/v1`), or None
    for any other path."""
    full = path if path.startswith(VERSION + "/") else VERSION + path
    if any(full == prefix or full.startswith(prefix + "/") for prefix in PREFIXES):
        return full
    return None


def open_store(location: str, chunk_lines: int | None) -> BatchStore:
    """The store SAGEMAKER_BATCH_STORE names: `s3://bucket/prefix/`, shared by every replica
    naming it, or a local directory."""
    if s3_uri.is_s3(location):
        return S3Store(location, chunk_lines=chunk_lines)
    return Store(location)


def base_scope(lifespan: Scope) -> Scope:
    """The scope in-process calls of a batch are built from: the app and its state, as the
    server's lifespan gives them, with no client behind it."""
    return {
        "type": "http",
        "asgi": lifespan.get("asgi", {"version": "3.0"}),
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 0),
        "client": ("127.0.0.1", 0),
        "app": lifespan.get("app"),
        "state": lifespan.get("state", {}),
        "extensions": {},
    }


class BatchRoutes:
    def __init__(
        self,
        settings: BatchApiSettings,
        pipeline: Pipeline,
        window: BatchWindow,
        api_keys: tuple[str, ...],
        stops: StopRequests,
    ) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.window = window
        self.stops = stops
        self.headers: Headers = (
            [(b"authorization", f"Bearer {api_keys[0]}".encode())] if api_keys else []
        )
        self.scope: Scope | None = None
        self.scheduler: Scheduler | None = None
        self._apis: tuple[files_api.FilesApi, batches_api.BatchesApi] | None = None

    def _open(self) -> tuple[files_api.FilesApi, batches_api.BatchesApi]:
        if self._apis is None:
            store = open_store(self.settings.store, self.settings.chunk_lines)
            limits = files_api.FileLimits(
                self.settings.max_file_bytes, self.settings.max_batch_input_bytes
            )
            scheduler = self._scheduler(store)
            self._apis = (
                files_api.FilesApi(store, limits),
                batches_api.BatchesApi(store, self.pipeline, scheduler, self.settings.window_s),
            )
        return self._apis

    def _scheduler(self, store: BatchStore) -> Scheduler:
        settings = self.settings
        run = RunSettings(settings.priority, LEASE_S, store.check_every_s)
        scope = self.scope or base_scope({})
        runtime = Runtime(
            store, self.pipeline, scope, self.headers, self.window, run, runner_id(), self.stops
        )
        self.scheduler = Scheduler(runtime, settings.max_concurrent)
        self.scheduler.start()
        return self.scheduler

    async def startup(self, lifespan: Scope) -> None:
        """Open the store and start running the batches it holds."""
        if not self.settings.enabled:
            return
        self.scope = base_scope(lifespan)
        try:
            self._open()
        except (StoreError, OSError) as error:
            logger.error("batch store: %s; the Files and Batches API will answer 507", error)

    async def shutdown(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.stop()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A Files or Batches API request, its path already `canonical`."""
        if not self.settings.enabled:
            error = RequestError(
                404,
                "the Files and Batches API is off on this server (SAGEMAKER_BATCH_API=false)",
                "not_found",
            )
            await respond_error(send, error)
            return
        try:
            files, batches = self._open()
            api = files if scope["path"].startswith(files_api.PREFIX) else batches
            await api(scope, receive, send)
        except StoreUnavailable as error:
            logger.error("batch store: %s", error)
            await respond_error(
                send, RequestError(503, f"the batch store is out of reach: {error}", "store_error")
            )
        except (StoreError, OSError) as error:
            logger.error("batch store: %s", error)
            await respond_error(
                send, RequestError(507, f"the batch store cannot be used: {error}", "store_error")
            )
