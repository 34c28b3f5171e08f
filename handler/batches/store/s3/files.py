"""The files of the S3 store: each file's body and row, and the index that lists them in upload
order (`handler.batches.store.s3.store` names the layout). A body is streamed in and out, never
whole in memory; a file exists once its row is written, after its body."""

import io
import time
from pathlib import Path
from typing import IO, Any

from vllm_sagemaker.handler.batches.store.chunking import Chunk
from vllm_sagemaker.handler.batches.store.s3.objects import Bucket, index_key, named
from vllm_sagemaker.handler.batches.store.types import Page, StoredFile

INDEX = "file-index/"


class S3Files:
    """The files under one store's prefix; bodies are written locally (`staging`) first."""

    def __init__(self, bucket: Bucket, staging: Path) -> None:
        self.bucket = bucket
        self.staging = staging

    def partial_path(self, file_id: str) -> Path:
        return self.staging / "files" / f"{file_id}.partial"

    def add_file(self, stored: StoredFile) -> None:
        """Upload a completely written `<id>.partial` body, then make it a file."""
        partial = self.partial_path(stored.id)
        with partial.open("rb") as body:
            self.bucket.upload(_body_key(stored.id), body)
        self._add_row(stored)
        partial.unlink(missing_ok=True)

    def add_joined(self, stored: StoredFile, keys: list[str]) -> StoredFile:
        """Make the objects `keys`, one after another, the body of the file `stored` (streamed
        through a multipart upload); the file as stored, its size counted as it was written.
        Joining again is safe: the row written first stands."""
        joined = _Joined(self.bucket, keys)
        self.bucket.upload(_body_key(stored.id), io.BufferedReader(joined))
        made = StoredFile(
            stored.id,
            joined.size,
            stored.created_at,
            stored.filename,
            stored.purpose,
            stored.expires_at,
        )
        if self.bucket.get_json(_row_key(stored.id)) is None:
            self._add_row(made)
        return made

    def _add_row(self, stored: StoredFile) -> None:
        seq = time.time_ns()
        self.bucket.put_json(index_key(INDEX, seq, stored.id), {})
        self.bucket.put_json(_row_key(stored.id), {**_file_json(stored), "seq": seq})

    def file(self, file_id: str, now: float | None = None) -> StoredFile | None:
        found = self.bucket.get_json(_row_key(file_id))
        if found is None:
            return None
        stored = _stored(found.value)
        if stored.expires_at is not None and stored.expires_at <= (now or time.time()):
            self.delete_file(file_id)
            return None
        return stored

    def files(self, purpose: str | None, limit: int, descending: bool, after: str | None) -> Page:
        keys = [named(key) for key in self.bucket.keys(INDEX)]
        if descending:
            keys.reverse()
        if after is not None:
            keys = keys[keys.index(after) + 1 :] if after in keys else []
        items: list[StoredFile] = []
        for file_id in keys:
            stored = self.file(file_id)
            if stored is not None and (purpose is None or stored.purpose == purpose):
                items.append(stored)
                if len(items) > limit:
                    break
        return Page(items[:limit], len(items) > limit)

    def delete_file(self, file_id: str) -> bool:
        found = self.bucket.get_json(_row_key(file_id))
        if found is None:
            return False
        self.bucket.delete(_row_key(file_id))
        self.bucket.delete(_body_key(file_id))
        self.bucket.delete(index_key(INDEX, found.value["seq"], file_id))
        return True

    def open_body(self, file_id: str, chunk: Chunk | None = None) -> IO[bytes]:
        key = _body_key(file_id)
        if chunk is None:
            return self.bucket.open(key)
        if chunk.end == chunk.start:
            return io.BytesIO()
        return self.bucket.open(key, chunk.start, chunk.end - 1)


class _Joined(io.RawIOBase):
    """Several S3 objects read one after another as one stream."""

    def __init__(self, bucket: Bucket, keys: list[str]) -> None:
        self.bucket = bucket
        self.keys = iter(keys)
        self.current: IO[bytes] | None = None
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self.current is None:
                key = next(self.keys, None)
                if key is None:
                    return 0
                self.current = self.bucket.open(key)
            data = self.current.read(len(buffer))
            if data:
                buffer[: len(data)] = data
                self.size += len(data)
                return len(data)
            self.current = None


def _body_key(file_id: str) -> str:
    return f"files/{file_id}/body"


def _row_key(file_id: str) -> str:
    return f"files/{file_id}/file.json"


def _file_json(stored: StoredFile) -> dict[str, Any]:
    return {
        "id": stored.id,
        "bytes": stored.bytes,
        "created_at": stored.created_at,
        "filename": stored.filename,
        "purpose": stored.purpose,
        "expires_at": stored.expires_at,
    }


def _stored(value: dict[str, Any]) -> StoredFile:
    return StoredFile(
        value["id"],
        value["bytes"],
        value["created_at"],
        value["filename"],
        value["purpose"],
        value["expires_at"],
    )
