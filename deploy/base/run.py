"""Carrying out a plan of AWS calls with boto3, or printing it for `--dry-run`."""

import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import boto3
from botocore import xform_name

from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.calls import POLL_S, Call, Lines, to_json
from vllm_sagemaker.handler.core.jsonlines import iter_records


def execute(
    calls: Sequence[Call], dry_run: bool, assumed: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Make the calls in order and return their answers; or, for a dry run, print them as JSON
    (and on stderr what the plan had to assume) and make none."""
    if dry_run:
        for assumption in assumed:
            print(f"deploy: dry run: {assumption}", file=sys.stderr)
        print(to_json(calls))
        return []
    with _LineReader() as lines:
        return [_make(call, lines) for call in calls]


def _make(call: Call, lines: "_LineReader") -> dict[str, Any]:
    body = call.params.get("Body")
    if call.service == "file" and call.operation == "Remove":
        Path(call.params["Path"]).unlink()
        return {}
    if call.service == "file":
        with storage.written(call.params["Path"]) as sink:
            sink.write(body if isinstance(body, bytes) else str(body).encode())
        return {}
    if isinstance(body, Lines):
        # A part may pass S3's 5 GB limit for one PutObject: it is uploaded as boto3 uploads
        # files (one PutObject up to 8 MB, a multipart upload above).
        with tempfile.TemporaryFile() as part:
            lines.copy(body, part)
            part.seek(0)
            boto3.client("s3").upload_fileobj(part, call.params["Bucket"], call.params["Key"])
        return {}
    operation = getattr(boto3.client(call.service), xform_name(call.operation))
    answer: dict[str, Any] = operation(**call.params)
    return answer


class _LineReader(contextlib.ExitStack):
    """Copies `Lines` bodies out of their files, reading each file once when its parts come in
    order (as a cut's shards do)."""

    def __init__(self) -> None:
        super().__init__()
        self._source: str | None = None
        self._records: Iterator[bytes] = iter(())
        self._at = 0
        self._open: contextlib.ExitStack | None = None

    def copy(self, body: Lines, into: IO[bytes]) -> None:
        if body.source != self._source or body.start < self._at:
            if self._open is not None:
                self._open.close()
            self._open = self.enter_context(contextlib.ExitStack())
            self._records = iter_records(self._open.enter_context(storage.reading(body.source)))
            self._source, self._at = body.source, 0
        for index in range(self._at, body.end):
            record = next(self._records, None)
            if record is None:
                raise storage.Unreachable(
                    f"{body.source} ended at line {index} while being cut into shards (it changed "
                    "since it was counted); run the command again"
                )
            if index >= body.start:
                into.write(record + b"\n")
        self._at = body.end


def wait_for(describe: Call, status_key: str, done: set[str], failed: set[str]) -> dict[str, Any]:
    """Poll `describe` until its status is in `done` (returned) or `failed` (SystemExit)."""
    client = boto3.client(describe.service)
    operation = getattr(client, xform_name(describe.operation))
    last = None
    while True:
        answer = operation(**describe.params)
        status = answer[status_key]
        if status != last:
            print(f"deploy: {status}", file=sys.stderr, flush=True)
            last = status
        if status in done:
            return answer
        if status in failed:
            reason = answer.get("FailureReason", "no reason given")
            raise SystemExit(f"deploy: {status}: {reason}")
        time.sleep(POLL_S)
