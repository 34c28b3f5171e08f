"""The S3 side of the shared batch store: JSON objects changed only with conditional writes,
bodies streamed in and out, and S3's failures as the store's errors.

`If-None-Match: *` creates an object only when there is none; `If-Match: <etag>` changes it only
when nobody changed it since it was read. Either refusal (412, or 409 while a concurrent write is
in flight) is a `Conflict`: someone else won, read again. S3 that cannot be reached, or answers
5xx, is `StoreUnavailable`, which the routes answer with 503; nothing is half written, because
every object is whole when it appears.

Any S3-compatible endpoint works through boto3's usual configuration (`AWS_ENDPOINT_URL`, the
profile, the region).
"""

import contextlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from vllm_sagemaker.core import s3_uri
from vllm_sagemaker.handler.batches.store.types import StoreError, StoreUnavailable

CONFLICTS = {"PreconditionFailed", "ConditionalRequestConflict"}
MISSING = {"NoSuchKey", "404", "NotFound"}
# Few retries: a store request sits on a route's answer, and S3 being away must become a 503
# within seconds, not minutes.
READ_BYTES = 1 << 20
CLIENT_CONFIG = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5)
# Index keys (`<folder><order>-<id>`) list their objects in order: S3 lists keys ascending, and
# the order is written with a fixed width.
INDEX_DIGITS = 20


class Conflict(Exception):
    """A conditional write lost: the object exists already, or changed since it was read."""


@dataclass(frozen=True)
class Versioned:
    """An object's JSON value and the ETag to change it with."""

    value: dict[str, Any]
    etag: str


def parse_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> ("bucket", "a/b/"): the bucket and the key prefix, ending in "/"."""
    if not s3_uri.is_s3(uri):
        raise StoreError(f"{uri!r} is not an S3 location: write s3://bucket/prefix/")
    try:
        bucket, key = s3_uri.s3_parts(uri)
    except ValueError as error:
        raise StoreError(f"{error}: write s3://bucket/prefix/") from None
    prefix = key.strip("/")
    return bucket, prefix + "/" if prefix else ""


def index_key(folder: str, order: int, object_id: str) -> str:
    """The key under `folder` that lists `object_id` at `order`."""
    return f"{folder}{order:0{INDEX_DIGITS}d}-{object_id}"


def named(key: str) -> str:
    """The id an index key names: `<folder>/<order>-<id>` -> `<id>`."""
    return key.rpartition("/")[2].partition("-")[2]


class Bucket:
    """The objects under one `s3://bucket/prefix/`; keys are relative to the prefix."""

    def __init__(self, uri: str, client: Any = None) -> None:
        self.name, self.prefix = parse_uri(uri)
        self.client = client or boto3.client("s3", config=CLIENT_CONFIG)

    def key(self, relative: str) -> str:
        return self.prefix + relative

    def get_json(self, relative: str) -> Versioned | None:
        """The object's JSON and ETag; None when there is no such object."""
        with _errors():
            try:
                reply = self.client.get_object(Bucket=self.name, Key=self.key(relative))
            except ClientError as error:
                if _code(error) in MISSING:
                    return None
                raise
            return Versioned(json.loads(reply["Body"].read()), reply["ETag"])

    def create_json(self, relative: str, value: dict[str, Any]) -> str:
        """Write the object only if there is none (`If-None-Match: *`); its ETag."""
        return self._put(relative, value, IfNoneMatch="*")

    def replace_json(self, relative: str, value: dict[str, Any], etag: str) -> str:
        """Write the object only if it is still at `etag` (`If-Match`); its new ETag."""
        return self._put(relative, value, IfMatch=etag)

    def put_json(self, relative: str, value: dict[str, Any]) -> str:
        """Write the object whatever is there (for objects only one writer ever changes)."""
        return self._put(relative, value)

    def _put(self, relative: str, value: dict[str, Any], **condition: str) -> str:
        body = json.dumps(value).encode()
        with _errors():
            reply = self.client.put_object(
                Bucket=self.name,
                Key=self.key(relative),
                Body=body,
                ContentType="application/json",
                **condition,
            )
        return reply["ETag"]

    def delete(self, relative: str) -> None:
        with _errors():
            self.client.delete_object(Bucket=self.name, Key=self.key(relative))

    def keys(self, relative_prefix: str, start_after: str | None = None) -> Iterator[str]:
        """The keys under `relative_prefix` in S3's order (ascending), relative to the prefix;
        one LIST request per 1,000 keys."""
        for key, _ in self.listed(relative_prefix, start_after):
            yield key

    def listed(
        self, relative_prefix: str, start_after: str | None = None
    ) -> Iterator[tuple[str, float]]:
        """The keys under `relative_prefix`, each with when it was last written (epoch s)."""
        arguments = {"Bucket": self.name, "Prefix": self.key(relative_prefix)}
        if start_after is not None:
            arguments["StartAfter"] = self.key(start_after)
        with _errors():
            for page in self.client.get_paginator("list_objects_v2").paginate(**arguments):
                for item in page.get("Contents", []):
                    yield item["Key"][len(self.prefix) :], item["LastModified"].timestamp()

    def upload(self, relative: str, source: IO[bytes], **extra: str) -> None:
        """Stream `source` into the object (multipart above 8 MB, never whole in memory)."""
        with _errors():
            self.client.upload_fileobj(source, self.name, self.key(relative), ExtraArgs=extra)

    def open(self, relative: str, first: int | None = None, last: int | None = None) -> IO[bytes]:
        """The object's body as a stream, or the bytes `first`..`last` (inclusive) of it."""
        arguments = {"Bucket": self.name, "Key": self.key(relative)}
        if first is not None:
            arguments["Range"] = f"bytes={first}-{'' if last is None else last}"
        with _errors():
            try:
                body = self.client.get_object(**arguments)["Body"]
            except ClientError as error:
                if _code(error) in MISSING:
                    raise FileNotFoundError(relative) from None
                raise
        return io.BufferedReader(_Stream(body), READ_BYTES)

    def check(self) -> None:
        """Raise the store's error when the bucket cannot be used."""
        with _errors():
            self.client.head_bucket(Bucket=self.name)


class _Stream(io.RawIOBase):
    """A botocore body as a raw stream, so that it reads in lines like a local file."""

    def __init__(self, body: Any) -> None:
        self.body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with _errors():
            data = self.body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.body.close()
        super().close()


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """S3's refusals and failures as the store's: Conflict, StoreUnavailable, StoreError."""
    try:
        yield
    except ClientError as error:
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if _code(error) in CONFLICTS or status in (409, 412):
            raise Conflict(_code(error)) from None
        if status >= 500 or _code(error) in ("SlowDown", "RequestTimeout"):
            raise StoreUnavailable(f"S3 answered {status}: {_code(error)}") from None
        raise StoreError(f"S3 refused the request: {error}") from None
    except BotoCoreError as error:
        raise StoreUnavailable(f"S3 cannot be reached: {error}") from None
