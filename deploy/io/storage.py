"""Where batch tools read inputs and write outputs: local paths, `-` (stdin/stdout),
`http(s)://` URLs (presigned GET and PUT) and `s3://bucket/key` or prefixes; `.gz` by name.

S3 goes through boto3 with its usual configuration (profile, region, and `AWS_ENDPOINT_URL` for
S3-compatible stores or a local moto server); large uploads are multipart. Remote inputs are
streamed to a temporary file, never held in memory. Outputs are written atomically: a file
appears only once it is complete, so a failed input leaves no output and a re-run can skip what
is done. HTTP transfers are retried with backoff on 5xx and timeouts; any 2xx is success.
"""

import contextlib
import functools
import gzip
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import boto3
import botocore.exceptions
import httpx

from vllm_sagemaker.deploy.io.aws_errors import missing
from vllm_sagemaker.handler.core.s3_uri import S3, is_s3, s3_parts

HTTP_RETRIES = 5
HTTP_TIMEOUT_S = 300.0


class Unreachable(OSError):
    """An input that cannot be read or an output that cannot be written; the message says why."""


@functools.cache
def s3_client() -> Any:
    return boto3.client("s3")


@dataclass(frozen=True)
class InputFile:
    uri: str
    relative: str
    size: int


def list_inputs(uri: str) -> list[InputFile]:
    """Every file under `uri` (a file, a directory searched recursively, or an S3 prefix),
    sorted, each with its path relative to the input's directory."""
    found = _list_s3(uri) if is_s3(uri) else _list_local(Path(uri))
    if not found:
        raise FileNotFoundError(f"no input files under {uri}")
    return sorted(found, key=lambda f: f.relative)


def _list_local(path: Path) -> list[InputFile]:
    if path.is_file():
        return [InputFile(str(path), path.name, path.stat().st_size)]
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist")
    return [
        InputFile(str(file), file.relative_to(path).as_posix(), file.stat().st_size)
        for file in path.rglob("*")
        if file.is_file()
    ]


def _list_s3(uri: str) -> list[InputFile]:
    """Objects whose keys start with the prefix, relative to the prefix's last `/`, as
    SageMaker's S3Prefix data source selects them."""
    bucket, prefix = s3_parts(uri)
    base = prefix[: prefix.rfind("/") + 1]
    pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [
        InputFile(f"{S3}{bucket}/{item['Key']}", item["Key"][len(base) :], item["Size"])
        for page in pages
        for item in page.get("Contents", [])
        if not item["Key"].endswith("/")
    ]


def joined(base: str, relative: str) -> str:
    """The location `relative` under the output `base`."""
    if is_s3(base):
        return base.rstrip("/") + "/" + relative
    return str(Path(base) / relative)


def exists(uri: str) -> bool:
    if not is_s3(uri):
        return Path(uri).is_file()
    bucket, key = s3_parts(uri)
    try:
        s3_client().head_object(Bucket=bucket, Key=key)
    except botocore.exceptions.ClientError as error:
        if missing(error):
            return False
        raise Unreachable(f"cannot read {uri}: {error}") from None
    return True


def remove(uri: str) -> None:
    """Delete the file at `uri`; FileNotFoundError when there is none."""
    if not is_s3(uri):
        Path(uri).unlink()
        return
    if not exists(uri):
        raise FileNotFoundError(uri)
    bucket, key = s3_parts(uri)
    s3_client().delete_object(Bucket=bucket, Key=key)


@contextlib.contextmanager
def opened(file: InputFile) -> Iterator[IO[bytes]]:
    """The input opened for binary reading (an S3 object is downloaded to a temporary file)."""
    if not is_s3(file.uri):
        with open(file.uri, "rb") as local:
            yield local
        return
    bucket, key = s3_parts(file.uri)
    with tempfile.TemporaryFile() as copy:
        s3_client().download_fileobj(bucket, key, copy)
        copy.seek(0)
        yield copy


@contextlib.contextmanager
def written(uri: str) -> Iterator[IO[bytes]]:
    """A binary file that appears at `uri` only if the block ends without an exception."""
    if is_s3(uri):
        bucket, key = s3_parts(uri)
        with tempfile.TemporaryFile() as staged:
            yield staged
            staged.seek(0)
            s3_client().upload_fileobj(staged, bucket, key)
        return
    target = Path(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, staged_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(descriptor, "wb") as staged:
            yield staged
        os.replace(staged_name, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged_name)


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def _http(method: str, url: str, upload: str | None = None, into: IO[bytes] | None = None) -> None:
    """One HTTP call, retried with backoff on 5xx, timeouts and connection errors: the file
    `upload` is streamed as the body; a successful answer is streamed into `into`."""
    failure = ""
    for attempt in range(HTTP_RETRIES + 1):
        if attempt:
            time.sleep(min(2 ** (attempt - 1), 30))
        try:
            with contextlib.ExitStack() as stack:
                body = stack.enter_context(open(upload, "rb")) if upload else None
                response = stack.enter_context(
                    httpx.stream(method, url, content=body, timeout=HTTP_TIMEOUT_S)
                )
                if response.is_success:
                    if into is not None:
                        into.seek(0)
                        into.truncate()
                        for chunk in response.iter_bytes():
                            into.write(chunk)
                    return
                failure = f"HTTP {response.status_code}: {response.read()[:300]!r}"
        except httpx.TransportError as error:
            failure = f"{type(error).__name__}: {error}"
            continue
        if response.status_code < 500:
            break
    raise Unreachable(f"{method} {url.split('?', 1)[0]} failed: {failure}")


def _download(uri: str, into: IO[bytes]) -> None:
    if not is_s3(uri):
        _http("GET", uri, into=into)
        return
    bucket, key = s3_parts(uri)
    try:
        s3_client().download_fileobj(bucket, key, into)
    except Exception as error:
        raise Unreachable(f"cannot read {uri}: {error}") from None


def compressed(uri: str) -> bool:
    return uri.split("?", 1)[0].endswith(".gz")


def is_local(uri: str) -> bool:
    return uri != "-" and not is_s3(uri) and not is_http(uri)


@contextlib.contextmanager
def local_copy(uri: str) -> Iterator[str]:
    """A local path with `uri`'s bytes, for a caller that reads them several times: a local
    file itself, else one download (or stdin, read once) into a temporary file removed on exit.
    The copy stays as it was sent (`.gz` stays compressed, and in the name)."""
    if is_local(uri):
        yield uri
        return
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / ("input.jsonl.gz" if compressed(uri) else "input.jsonl"))
        with open(path, "wb") as copy:
            if uri == "-":
                shutil.copyfileobj(sys.stdin.buffer, copy)
            else:
                _download(uri, copy)
        yield path


@contextlib.contextmanager
def reading(uri: str) -> Iterator[IO[bytes]]:
    """`uri` opened for binary reading, decompressed when its name ends in `.gz`."""
    with contextlib.ExitStack() as stack:
        if uri == "-":
            raw: IO[bytes] = sys.stdin.buffer
        elif is_s3(uri) or is_http(uri):
            raw = stack.enter_context(tempfile.TemporaryFile())
            _download(uri, raw)
            raw.seek(0)
        else:
            try:
                raw = stack.enter_context(open(uri, "rb"))
            except OSError as error:
                raise Unreachable(f"cannot read {uri}: {error.strerror}") from None
        if not compressed(uri):
            yield raw
            return
        yield cast(IO[bytes], stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")))


def publish(staged: str, uri: str) -> None:
    """Deliver a finished local file to `uri`, compressing it when the name ends in `.gz`."""
    source = staged
    with contextlib.ExitStack() as stack:
        if compressed(uri):
            packed = stack.enter_context(tempfile.NamedTemporaryFile(suffix=".gz"))
            with open(staged, "rb") as plain, gzip.open(packed, "wb") as packing:
                shutil.copyfileobj(plain, packing)
            packed.flush()
            source = packed.name
        if uri == "-":
            with open(source, "rb") as finished:
                shutil.copyfileobj(finished, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        elif is_s3(uri):
            bucket, key = s3_parts(uri)
            try:
                s3_client().upload_file(source, bucket, key)
            except Exception as error:
                raise Unreachable(f"cannot write {uri}: {error}") from None
        elif is_http(uri):
            _http("PUT", uri, upload=source)
        elif os.path.abspath(source) != os.path.abspath(uri):
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, uri)
