"""Where batch tools read inputs and write outputs: local paths and `s3://bucket/prefix`.

S3 goes through boto3 with its usual configuration (profile, region, and `AWS_ENDPOINT_URL` for
S3-compatible stores or a local moto server). Outputs are written atomically: a file appears
only once it is complete, so a failed input leaves no output and a re-run can skip what is done.
"""

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import boto3

S3 = "s3://"


def is_s3(uri: str) -> bool:
    return uri.startswith(S3)


def s3_parts(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> ("bucket", "a/b")."""
    bucket, _, key = uri[len(S3) :].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, key


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
    except s3_client().exceptions.ClientError:
        return False
    return True


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
