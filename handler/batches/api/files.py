"""OpenAI's Files API: `/v1/files`, with OpenAI's object shapes, limits and errors.

- `POST /v1/files` (multipart: `purpose`, `file`, optional `expires_after[anchor]` and
  `expires_after[seconds]`, in any order) streams the file to the store;
- `GET /v1/files` (`purpose`, `limit`, `order`, `after`) pages with `has_more`, `first_id` and
  `last_id`, so the SDK's auto-pagination ends;
- `GET /v1/files/{id}`, `GET /v1/files/{id}/content` (streamed), `DELETE /v1/files/{id}`.
A batch input must be `.jsonl` and at most the input limit (200 MB by default); files of purpose
`batch` expire after 30 days unless `expires_after` says otherwise.
"""

import asyncio
import json
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.types import Receive, Scope, Send

from vllm_sagemaker.core import ids
from vllm_sagemaker.core.config import EXPIRY_RANGE_S, FILE_EXPIRY_S, MIB
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.batches.api import paging
from vllm_sagemaker.handler.batches.api.uploads import receive_upload
from vllm_sagemaker.handler.batches.store.interface import BatchStore
from vllm_sagemaker.handler.batches.store.types import StoredFile
from vllm_sagemaker.handler.records.messages import ClientGone, respond, respond_error, text_header

PREFIX = "/v1/files"
UPLOAD_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
MAX_LIST_LIMIT = 10_000
CHUNK_BYTES = MIB
# Room for the form's other parts and boundaries beside the file itself.
FORM_OVERHEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class FileLimits:
    max_file_bytes: int
    max_batch_input_bytes: int


def file_object(stored: StoredFile) -> dict[str, object]:
    """OpenAI's FileObject."""
    return {
        "id": stored.id,
        "object": "file",
        "bytes": stored.bytes,
        "created_at": stored.created_at,
        "filename": stored.filename,
        "purpose": stored.purpose,
        "status": "processed",
        "expires_at": stored.expires_at,
        "status_details": None,
    }


def too_large(limit_bytes: int, what: str = "a file") -> RequestError:
    mib = limit_bytes // MIB
    return RequestError(413, f"{what} is at most {mib} MiB", "file_too_large", "file")


def not_found(file_id: str) -> RequestError:
    return RequestError(404, f"No such File object: {file_id}", "file_not_found", "id")


def checked_purpose(fields: dict[str, str]) -> str:
    purpose = fields.get("purpose", "").strip()
    if not purpose:
        raise RequestError(
            400, "Missing required parameter: 'purpose'.", "missing_required_parameter", "purpose"
        )
    if purpose not in UPLOAD_PURPOSES:
        allowed = ", ".join(f"'{p}'" for p in UPLOAD_PURPOSES)
        raise RequestError(
            400,
            f"Invalid value: '{purpose}'. Supported values are: {allowed}.",
            "invalid_value",
            "purpose",
        )
    return purpose


def expires_at(fields: dict[str, str], purpose: str, created_at: int) -> int | None:
    """When the file expires: `expires_after[seconds]` after creation, else 30 days for batch
    files, else never."""
    anchor = fields.get("expires_after[anchor]")
    seconds = fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return created_at + FILE_EXPIRY_S if purpose == "batch" else None
    low, high = EXPIRY_RANGE_S
    if anchor != "created_at":
        raise RequestError(
            400, "expires_after[anchor] must be 'created_at'", "invalid_value", "expires_after"
        )
    if seconds is None or not seconds.isdigit() or not low <= int(seconds) <= high:
        raise RequestError(
            400,
            f"expires_after[seconds] must be a whole number from {low} to {high}",
            "invalid_value",
            "expires_after",
        )
    return created_at + int(seconds)


def check_batch_file(filename: str, purpose: str | None) -> None:
    if purpose == "batch" and not filename.lower().endswith(".jsonl"):
        raise RequestError(
            400, "Invalid file format for Batch API. Must be .jsonl", "invalid_file_format", "file"
        )


def list_query(query: bytes) -> tuple[str | None, int, bool, str | None]:
    """(purpose, limit, descending, after) from the list query, or a 400 naming the parameter."""
    params = dict(parse_qsl(query.decode("latin-1")))
    limit = paging.page_limit(params, MAX_LIST_LIMIT, MAX_LIST_LIMIT)
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestError(400, "order must be 'asc' or 'desc'", "invalid_value", "order")
    return params.get("purpose") or None, limit, order == "desc", params.get("after")


class FilesApi:
    def __init__(self, store: BatchStore, limits: FileLimits) -> None:
        self.store = store
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        try:
            named = paging.object_path(path, PREFIX, ("content",))
            file_id, action = named.object_id, named.action
            if not file_id and method == "POST":
                await self.upload(scope, receive, send)
            elif not file_id and method == "GET":
                await self.list(scope, send)
            elif file_id and not action and method in ("GET", "DELETE"):
                await self.one(method, file_id, send)
            elif file_id and action == "content" and method == "GET":
                await self.content(file_id, send)
            else:
                raise RequestError(
                    405, f"{method} {path} is not a Files API call", "method_not_allowed"
                )
        except RequestError as error:
            await respond_error(send, error)
        except ClientGone:
            return

    async def upload(self, scope: Scope, receive: Receive, send: Send) -> None:
        length = text_header(scope, b"content-length") or ""
        if length.isdigit() and int(length) > self.limits.max_file_bytes + FORM_OVERHEAD_BYTES:
            raise too_large(self.limits.max_file_bytes)
        file_id = ids.new_id(ids.FILE_ID_PREFIX)
        partial = self.store.partial_path(file_id)

        def check_file(filename: str, fields: dict[str, str]) -> None:
            check_batch_file(filename, fields.get("purpose"))

        upload = await receive_upload(
            receive,
            text_header(scope, b"content-type"),
            partial,
            self.limits.max_file_bytes,
            check_file,
        )
        try:
            purpose = checked_purpose(upload.fields)
            check_batch_file(upload.filename or "", purpose)
            if purpose == "batch" and upload.size > self.limits.max_batch_input_bytes:
                raise too_large(self.limits.max_batch_input_bytes, "a batch input file")
            created_at = int(time.time())
            stored = StoredFile(
                file_id,
                upload.size,
                created_at,
                upload.filename or "file",
                purpose,
                expires_at(upload.fields, purpose, created_at),
            )
            await asyncio.to_thread(self.store.add_file, stored)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        await respond(send, 200, json.dumps(file_object(stored)).encode())

    async def list(self, scope: Scope, send: Send) -> None:
        purpose, limit, descending, after = list_query(scope.get("query_string", b""))
        found = await asyncio.to_thread(self.store.files, purpose, limit, descending, after)
        await respond(send, 200, paging.page([file_object(i) for i in found.items], found.has_more))

    async def _file(self, file_id: str) -> StoredFile:
        stored = (
            await asyncio.to_thread(self.store.file, file_id)
            if ids.is_id(file_id, ids.FILE_ID_PREFIX)
            else None
        )
        if stored is None:
            raise not_found(file_id[:100])
        return stored

    async def one(self, method: str, file_id: str, send: Send) -> None:
        stored = await self._file(file_id)
        if method == "DELETE":
            await asyncio.to_thread(self.store.delete_file, stored.id)
            body: dict[str, object] = {"id": stored.id, "object": "file", "deleted": True}
        else:
            body = file_object(stored)
        await respond(send, 200, json.dumps(body).encode())

    async def content(self, file_id: str, send: Send) -> None:
        """The file's bytes, streamed from disk in CHUNK_BYTES pieces."""
        stored = await self._file(file_id)
        try:
            body = await asyncio.to_thread(self.store.open_body, stored.id)
        except FileNotFoundError:
            raise not_found(file_id) from None
        with body:
            headers = [
                (b"content-type", b"application/octet-stream"),
                (b"content-length", str(stored.bytes).encode()),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while chunk := await asyncio.to_thread(body.read, CHUNK_BYTES):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
