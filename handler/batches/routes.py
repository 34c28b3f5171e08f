"""The routes of the Files and Batches API, behind one switch and one store.

With SAGEMAKER_BATCH_API=false every route answers 404, which is how LiteLLM knows to run
batches itself (it probes `GET /files` and treats only a 404 that way). The store is opened on
the first call, so a store that cannot be used is a clear error on these routes and never stops
the server from serving real-time requests.
"""

from starlette.types import Receive, Scope, Send

from handler.batches import files_api
from handler.batches.store import Store, StoreError
from handler.config import BatchApiSettings
from handler.errors import RequestError
from handler.logs import logger
from handler.messages import respond_error

PREFIXES = (files_api.PREFIX,)


def owns(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in PREFIXES)


class BatchRoutes:
    def __init__(self, settings: BatchApiSettings) -> None:
        self.settings = settings
        self._files: files_api.FilesApi | None = None

    def _api(self) -> files_api.FilesApi:
        if self._files is None:
            store = Store(self.settings.store)
            limits = files_api.FileLimits(
                self.settings.max_file_bytes, self.settings.max_batch_input_bytes
            )
            self._files = files_api.FilesApi(store, limits)
        return self._files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.settings.enabled:
            error = RequestError(
                404,
                "the Files and Batches API is off on this server (SAGEMAKER_BATCH_API=false)",
                "not_found",
            )
            await respond_error(send, error)
            return
        try:
            await self._api()(scope, receive, send)
        except (StoreError, OSError) as error:
            logger.error("batch store: %s", error)
            await respond_error(
                send, RequestError(507, f"the batch store cannot be used: {error}", "store_error")
            )
