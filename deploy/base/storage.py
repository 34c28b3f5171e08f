"""Where the client reads and writes: local paths, `-` (stdin, stdout), `http(s)://` URLs (a
presigned GET or PUT) and `s3://` keys and prefixes; `.gz` by name. S3 goes through smart_open
(boto3's profile, region, AWS_ENDPOINT_URL; loaded at the first S3 call, not for `--help`):
writes are multipart uploads that appear only once complete, as a local output written beside
itself and renamed. HTTP stays on httpx: smart_open cannot PUT, nor retry 5xx and timeouts."""

import contextlib
import functools
import gzip
import os
import re
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import httpx

from vllm_sagemaker.core.s3_uri import S3, is_s3, s3_parts
from vllm_sagemaker.deploy.base.calls import client
from vllm_sagemaker.deploy.base.errors import ClientError, UsageError, line_of

HTTP_RETRIES = 5
HTTP_TIMEOUT_S = 300.0
# S3's rules for bucket names (general purpose buckets).
_BUCKET = re.compile(r"(?![0-9.]+$)(?!.*(\.\.|\.-|-\.))[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class Unreachable(ClientError, OSError):
    """An input that cannot be read or an output that cannot be written; the line says why."""


class NoInput(Unreachable, FileNotFoundError):
    """An input with no files."""


@dataclass(frozen=True)
class InputFile:
    uri: str
    relative: str
    size: int


def bucket_problem(bucket: str) -> str | None:
    if _BUCKET.fullmatch(bucket):
        return None
    return (
        f"{bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, dots and hyphens, "
        "starting and ending with a letter or digit, not an IP address)"
    )


def is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def is_local(uri: str) -> bool:
    return uri != "-" and not is_s3(uri) and not is_http(uri)


def compressed(uri: str) -> bool:
    return uri.split("?", 1)[0].endswith(".gz")


def joined(base: str, relative: str) -> str:
    """The location `relative` under the output `base`."""
    return base.rstrip("/") + "/" + relative if is_s3(base) else str(Path(base) / relative)


s3_client = functools.cache(functools.partial(client, "s3"))


@contextlib.contextmanager
def told(action: str, uri: str) -> Iterator[None]:
    """A failure of the block as the line `cannot <action> <uri>: <why>`."""
    try:
        yield
    except ClientError:
        raise
    except Exception as error:
        cause = error.__cause__ or error
        why: str | None = str(cause)  # a .gz that is not gzip, cut short or damaged
        if isinstance(cause, OSError) and cause.filename:
            why = cause.strerror or why  # the line names the path
        elif not isinstance(cause, (EOFError, zlib.error, gzip.BadGzipFile)):
            why = line_of(cause) or line_of(error)
        if why is None:
            raise
        raise Unreachable(f"cannot {action} {uri}: {why}") from error


@contextlib.contextmanager
def stream(uri: str, mode: str) -> Iterator[IO[bytes]]:
    """A local path or an S3 object, its bytes as stored; an exception aborts an upload."""
    import smart_open

    action = "read" if "r" in mode else "write"
    params = {"client": s3_client()} if is_s3(uri) else None
    with told(action, uri):
        stream = smart_open.open(uri, mode, compression="disable", transport_params=params)
    try:
        yield cast(IO[bytes], stream)
    except BaseException as error:
        stream.__exit__(type(error), error, error.__traceback__)
        raise
    with told(action, uri):
        stream.close()


def _http(method: str, url: str, file: IO[bytes]) -> None:
    """A GET into `file`, or `file` PUT, retried on 5xx, timeouts and connection errors."""
    failure = ""
    for attempt in range(HTTP_RETRIES + 1):
        if attempt:
            time.sleep(min(2 ** (attempt - 1), 30))
        file.seek(0)
        try:
            body = file if method == "PUT" else None
            with httpx.stream(method, url, content=body, timeout=HTTP_TIMEOUT_S) as response:
                if response.is_success:
                    if method == "GET":
                        file.truncate()
                        file.writelines(response.iter_bytes())
                    return
                from vllm_sagemaker.deploy.base.error_answers import said

                failure = said(response.read(), response.status_code)
        except httpx.TransportError as error:
            failure = f"{type(error).__name__}: {error}"
            continue
        if response.status_code < 500:
            break
    raise Unreachable(f"{method} {url.split('?', 1)[0]} failed: {failure}")


def list_inputs(uri: str) -> list[InputFile]:
    """Every file under `uri` (file, directory or S3 prefix), sorted, relative to its directory."""
    if is_s3(uri):
        bucket, prefix = s3_parts(uri)
        base = prefix[: prefix.rfind("/") + 1]
        with told("read", uri):
            pages = (
                s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            )
            found = [
                InputFile(f"{S3}{bucket}/{item['Key']}", item["Key"][len(base) :], item["Size"])
                for page in pages
                for item in page.get("Contents", [])
                if not item["Key"].endswith("/")
            ]
    else:
        path = Path(uri)
        if not path.exists():
            raise NoInput(f"{path} does not exist")
        files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
        top = path.parent if path.is_file() else path
        found = [InputFile(str(f), f.relative_to(top).as_posix(), f.stat().st_size) for f in files]
    if not found:
        raise NoInput(f"no input files under {uri}")
    return sorted(found, key=lambda f: f.relative)


def exists(uri: str) -> bool:
    if not is_s3(uri):
        return Path(uri).is_file()
    with told("read", uri):
        import botocore.exceptions

        from vllm_sagemaker.deploy.base.error_answers import missing

        try:
            s3_client().head_object(Bucket=s3_parts(uri)[0], Key=s3_parts(uri)[1])
        except botocore.exceptions.ClientError as error:
            if not missing(error):
                raise
            return False
    return True


def remove(uri: str) -> None:
    """Delete the file at `uri`; FileNotFoundError when there is none."""
    if not exists(uri):
        raise FileNotFoundError(uri)
    with told("delete", uri):
        if is_s3(uri):
            s3_client().delete_object(Bucket=s3_parts(uri)[0], Key=s3_parts(uri)[1])
        else:
            Path(uri).unlink()


@contextlib.contextmanager
def written(uri: str) -> Iterator[IO[bytes]]:
    """A binary file that appears at `uri` (local or S3) only if the block raises nothing."""
    if is_s3(uri):
        with stream(uri, "wb") as sink:
            yield sink
        return
    target = Path(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(descriptor, "wb") as staged:
            yield staged
        os.replace(name, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


@contextlib.contextmanager
def local_copy(uri: str) -> Iterator[str]:
    """A local path with `uri`'s bytes as sent: a local file itself, else a temporary copy."""
    if is_local(uri):
        yield uri
        return
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / ("input.jsonl.gz" if compressed(uri) else "input.jsonl"))
        with open(path, "w+b") as copy:
            if uri == "-":
                shutil.copyfileobj(sys.stdin.buffer, copy)
            elif is_http(uri):
                _http("GET", uri, copy)
            else:
                with told("read", uri), stream(uri, "rb") as remote:
                    shutil.copyfileobj(remote, copy)
        yield path


@contextlib.contextmanager
def reading(uri: str) -> Iterator[IO[bytes]]:
    """`uri` opened for binary reading, decompressed first when its name ends in `.gz`."""
    if uri == "-":
        yield sys.stdin.buffer
        return
    with contextlib.ExitStack() as stack:
        path = stack.enter_context(local_copy(uri))
        with told("read", uri):
            raw = stack.enter_context(open(path, "rb"))
            if compressed(uri):
                plain = stack.enter_context(tempfile.TemporaryFile())
                with gzip.GzipFile(fileobj=raw) as packed:
                    shutil.copyfileobj(packed, plain)
                plain.seek(0)
                raw = cast(Any, plain)
        yield raw


def check_writable(uri: str, directory: bool = False) -> None:
    """`Unreachable` (`UsageError`: a name S3 refuses) when `uri` (with `directory`: the folder
    `uri`) could not be written, found before any work. A local file's nearest folder is probed
    with a new file: permissions do not say it in /proc or as root."""
    if is_s3(uri):
        bucket = uri[len(S3) :].split("/", 1)[0]
        if problem := bucket_problem(bucket):
            raise UsageError(f"cannot write {uri}: {problem}")
        with told("write", uri):  # ListBucket, as HeadBucket, but its 404 names the bucket
            s3_client().list_objects_v2(Bucket=bucket, MaxKeys=0)
    if not is_local(uri):
        return
    path = Path(uri)
    if not directory and path.is_dir():
        raise Unreachable(f"cannot write {uri}: it is a directory; give a file's path")
    if not directory and uri.endswith(os.sep):
        raise Unreachable(f"cannot write {uri}: a file's path cannot end in {os.sep}")
    if directory and path.exists() and not path.is_dir():
        raise Unreachable(f"cannot write into {uri}: it is a file, not a directory")
    nearest = path.absolute() if directory else path.absolute().parent
    while not nearest.exists():
        nearest = nearest.parent
    if not nearest.is_dir():
        raise Unreachable(f"cannot write {uri}: {nearest} is not a directory")
    try:
        tempfile.TemporaryFile(dir=nearest).close()
    except OSError as error:
        raise Unreachable(
            f"cannot write {uri}: no file can be created in {nearest} ({error.strerror})"
        ) from None
    if not directory and path.exists() and not os.access(path, os.W_OK):
        raise Unreachable(f"cannot write {uri}: permission denied")


def publish(staged: str, uri: str) -> None:
    """Deliver a finished local file to `uri`, compressed when the name ends in `.gz`."""
    if os.path.abspath(staged) == os.path.abspath(uri):
        return
    with contextlib.ExitStack() as stack:
        if uri == "-":
            sink: IO[bytes] = sys.stdout.buffer
        elif is_http(uri):
            sink = stack.enter_context(tempfile.TemporaryFile())
        else:
            sink = stack.enter_context(written(uri))
        packing = gzip.GzipFile(fileobj=sink, mode="wb") if compressed(uri) else None
        with open(staged, "rb") as source, packing or contextlib.nullcontext():
            shutil.copyfileobj(source, packing or sink)
        sink.flush()
        if is_http(uri):
            _http("PUT", uri, sink)
