"""Where batch tools read inputs and write outputs: local paths, `-` (stdin/stdout),
`http(s)://` URLs (presigned GET and PUT) and `s3://bucket/key` or prefixes; `.gz` by name.

S3 goes through boto3 with its usual configuration (profile, region, and `AWS_ENDPOINT_URL` for
S3-compatible stores or a local moto server); large uploads are multipart. Remote inputs are
streamed to a temporary file, never held in memory. Outputs are written atomically: a file
appears only once it is complete, so a failed input leaves no output and a re-run can skip what
is done. HTTP transfers are retried with backoff on 5xx and timeouts; any 2xx is success.

What cannot be read or written is `Unreachable`, whose message is the one line a command
prints: `cannot read URI: why` (`cannot write`, ...), for local paths, S3 (no credentials, no
bucket, access denied: `_s3`) and HTTP alike. `check_writable` finds an output that cannot be
written before any work is done, without creating anything.

boto3 is imported by the first S3 call (`_s3`), not with this module: the commands' parsers, which
`vllm-sagemaker --help` builds, load without it.
"""

import contextlib
import functools
import gzip
import os
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

from vllm_sagemaker.deploy.base.error_answers import said
from vllm_sagemaker.handler.core.s3_uri import S3, is_s3, s3_parts

HTTP_RETRIES = 5
HTTP_TIMEOUT_S = 300.0


class Unreachable(OSError):
    """An input that cannot be read or an output that cannot be written; the message says why."""


class NoInput(Unreachable, FileNotFoundError):
    """An input with no files: a FileNotFoundError for the callers that look for one."""


@contextlib.contextmanager
def _s3(action: str, uri: str) -> Iterator[None]:
    """S3 calls whose failure (no credentials, no bucket, access denied, no network) is the one
    line `cannot <action> <uri>: <why>`, the why as every command tells it
    (`deploy.base.aws_lines`). Every S3 call goes through here, so boto3 loads here."""
    from vllm_sagemaker.deploy.base.aws_lines import aws_line

    try:
        yield
    except Exception as error:
        why = aws_line(error)
        if why is None:
            raise
        raise Unreachable(f"cannot {action} {uri}: {why}") from error


@functools.cache
def s3_client() -> Any:
    import boto3

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
        raise NoInput(f"no input files under {uri}")
    return sorted(found, key=lambda f: f.relative)


def _list_local(path: Path) -> list[InputFile]:
    if path.is_file():
        return [InputFile(str(path), path.name, path.stat().st_size)]
    if not path.is_dir():
        raise NoInput(f"{path} does not exist")
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
    with _s3("read", uri):
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
    with _s3("read", uri):
        from vllm_sagemaker.deploy.base.aws_errors import missing

        client = s3_client()
        try:
            client.head_object(Bucket=bucket, Key=key)
        except client.exceptions.ClientError as error:
            if missing(error):
                return False
            raise
    return True


def remove(uri: str) -> None:
    """Delete the file at `uri`; FileNotFoundError when there is none."""
    if not is_s3(uri):
        Path(uri).unlink()
        return
    if not exists(uri):
        raise FileNotFoundError(uri)
    bucket, key = s3_parts(uri)
    with _s3("delete", uri):
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
        with _s3("read", file.uri):
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
            with _s3("write", uri):
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
                failure = said(response.read(), response.status_code)
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
    with _s3("read", uri):
        s3_client().download_fileobj(bucket, key, into)


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
        unpacked = stack.enter_context(_Gunzip(uri, raw))
        unpacked.peek(1)  # a file that is not gzip at all is found before any work
        yield cast(IO[bytes], unpacked)


class _Gunzip(gzip.GzipFile):
    """A `.gz` input whose damage (not gzip at all, cut short, a bad checksum) is `Unreachable`
    wherever in the file it shows."""

    def __init__(self, uri: str, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self.uri = uri

    @contextlib.contextmanager
    def _damage(self) -> Iterator[None]:
        try:
            yield
        except (OSError, EOFError, zlib.error) as error:
            raise Unreachable(f"cannot read {self.uri}: {error}") from error

    def read(self, size: int | None = -1) -> bytes:
        with self._damage():
            return super().read(size)

    def read1(self, size: int = -1) -> bytes:
        with self._damage():
            return super().read1(size)

    def peek(self, n: int) -> bytes:
        with self._damage():
            return super().peek(n)

    def readline(self, size: int | None = -1) -> bytes:
        with self._damage():
            return super().readline(size)


def check_writable(uri: str, directory: bool = False) -> None:
    """`Unreachable` when the local file `uri` (with `directory`: the folder `uri`) could not be
    written, found before any work is done and without creating anything: the nearest folder
    that exists must take a new file (one is made and removed at once; permissions alone do not
    say it, e.g. in /proc or as root). Remote outputs and stdout are not checked here: their
    writes fail with their own line."""
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
        descriptor, probe = tempfile.mkstemp(dir=nearest, prefix=".vllm-sagemaker-probe-")
    except OSError as error:
        raise Unreachable(
            f"cannot write {uri}: no file can be created in {nearest} ({error.strerror})"
        ) from None
    os.close(descriptor)
    os.unlink(probe)
    if not directory and path.exists() and not os.access(path, os.W_OK):
        raise Unreachable(f"cannot write {uri}: permission denied")


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
            with _s3("write", uri):
                s3_client().upload_file(source, bucket, key)
        elif is_http(uri):
            _http("PUT", uri, upload=source)
        elif os.path.abspath(source) != os.path.abspath(uri):
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, uri)
