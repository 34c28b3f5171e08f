"""A plan's calls as data, what `--dry-run` prints and a real run makes (`deploy.base.run`): one
AWS API call (or a local file's write, service `file`) each; a body may be `Lines` of a file."""

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vllm_sagemaker.core import s3_uri

# How often a run asks SageMaker whether an endpoint or a job has got where it waits for.
POLL_S = 15.0
# The option that keeps what a failed run created (`deploy.base.run.Rollback`).
KEEP_OPTION = "--keep-on-failure"


@dataclass(frozen=True)
class Call:
    service: str
    operation: str
    params: dict[str, Any] = field(default_factory=dict)


def client(service: str) -> Any:
    """boto3's client for `service`. boto3 loads here, when a command first calls AWS: the
    commands' modules, which `--help` loads, import none of it."""
    import boto3

    return boto3.client(service)


def operation(service: str, name: str) -> Callable[..., Any]:
    """boto3's method for the AWS operation `name` (`DescribeEndpoint`) of `service`."""
    from botocore import xform_name

    return getattr(client(service), xform_name(name))


@dataclass(frozen=True)
class Undo:
    """How a failed run takes back one call (`deploy.base.run.Rollback`): `what` it touched
    ("model llm"); the `call` that deletes it (None: it stays, as it may have replaced what was
    there); what it `uses` ("endpoint config llm"), which stays while it stays."""

    what: str
    call: Call | None = None
    uses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lines:
    """A body made of lines [start, end) (counted from 0) of the JSON Lines file `source`."""

    source: str
    start: int
    end: int


def _shown(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, Lines):
        return {"lines_of": asdict(value)}
    raise TypeError(f"{type(value).__name__} is not printable")


def to_json(calls: Sequence[Call]) -> str:
    return json.dumps(
        [{"service": c.service, "operation": c.operation, "params": c.params} for c in calls],
        indent=2,
        default=_shown,
    )


def _at(uri: str, on_s3: str, on_file: str, **more: object) -> Call:
    """S3's `on_s3` of the object at `uri`, or `on_file` of the local file."""
    if s3_uri.is_s3(uri):
        bucket, key = s3_uri.s3_parts(uri)
        return Call("s3", on_s3, {"Bucket": bucket, "Key": key, **more})
    return Call("file", on_file, {"Path": uri, **more})


def put(uri: str, body: object) -> Call:
    return _at(uri, "PutObject", "Write", Body=body)


def remove(uri: str) -> Call:
    return _at(uri, "DeleteObject", "Remove")
