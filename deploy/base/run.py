"""Making AWS calls with boto3, waiting for what they started, and taking back what a failed run
created (`Rollback`)."""

import contextlib
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from vllm_sagemaker.core.jsonlines import iter_records
from vllm_sagemaker.deploy.base import profile, storage
from vllm_sagemaker.deploy.base.calls import (
    KEEP_OPTION,
    POLL_S,
    Call,
    Lines,
    Undo,
    client,
    operation,
)
from vllm_sagemaker.deploy.base.error_answers import AwsError, missing
from vllm_sagemaker.deploy.base.errors import ClientError, client_error, line_of
from vllm_sagemaker.deploy.base.interrupts import Interrupted, not_waited_line, wait_line
from vllm_sagemaker.deploy.base.say import say

# How many of the objects a failed run wrote and leaves its line names.
NAMED_WRITES = 2


def execute(calls: Sequence[Call], rollback: "Rollback | None" = None) -> list[dict[str, Any]]:
    """Make the calls and return their answers (`deploy.base.plan.apply` makes a plan's)."""
    with _LineReader() as lines:
        answers = []
        for call in calls:
            with rollback.making(call) if rollback else contextlib.nullcontext():
                answers.append(_make(call, lines))
        return answers


def call_failed(call: Call, said: str) -> str:
    """The line of a call that failed, from the line of its error; AWS's refusal of the call
    gives only its reason."""
    if isinstance(said, AwsError) and said.operation == call.operation:
        said = said.reason
    return f"{call.operation} failed: {said}"


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def rollback_line(
    failure: str,
    removed: Sequence[str],
    not_removed: Sequence[tuple[str, str]] = (),
    written: Sequence[str] = (),
    kept: bool = False,
    changed: Sequence[str] = (),
    in_use: Sequence[str] = (),
) -> str:
    """The one line of a failed run: what failed, changed that stays and what that uses, took
    back (`removed`; with `kept`, left on purpose), could not take back (what, why), wrote."""
    parts = [failure, *changed]
    if in_use:
        parts.append(f"kept {_listed(in_use)} (in use)")
    if removed:
        parts.append(
            f"kept {_listed(removed)} ({KEEP_OPTION})" if kept else f"removed {_listed(removed)}"
        )
    parts += [f"could not remove {what} ({why})" for what, why in not_removed]
    if written:
        more = [f"{len(written) - NAMED_WRITES} more"] if len(written) > NAMED_WRITES else []
        parts.append(f"what it wrote stays: {_listed([*written[:NAMED_WRITES], *more])}")
    return "; ".join(parts)


class Rollback:
    """A `with` block around a run: on an error, take back newest first what its calls created
    (`undo`), never what was there before (with `keep`, nothing), and raise one ClientError line
    naming the call that failed and what was removed."""

    def __init__(self, undo: Callable[[Call], Undo | None], keep: bool = False) -> None:
        self.undo, self.keep = undo, keep
        self.made: list[Call] = []
        self.failed: Call | None = None

    @contextlib.contextmanager
    def making(self, call: Call) -> Iterator[None]:
        self.failed = call
        yield
        self.failed = None
        self.made.append(call)

    def __enter__(self) -> "Rollback":
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        if not isinstance(error, Exception):
            return  # none, or Ctrl-C: the interrupted run says what it left
        found = client_error(error)
        if found is None:  # a bug: its traceback follows
            say(self._rolled_back(f"{type(error).__name__}: {error}"))
            return
        told = found.line if self.failed is None else call_failed(self.failed, found.line)
        raise ClientError(self._rolled_back(told), found.exit_status) from error

    def _rolled_back(self, failure: str) -> str:
        taken = [undo for call in reversed(self.made) if (undo := self.undo(call))]
        stays = [undo for undo in taken if undo.call is None]
        written = [undo.what for undo in reversed(stays) if not undo.uses]
        changed = [undo.what for undo in stays if undo.uses]
        removable = [undo for undo in taken if undo.call is not None]
        if self.keep:
            kept = [undo.what for undo in removable]
            return rollback_line(failure, kept, (), written, kept=True, changed=changed)
        used = {name for undo in stays for name in undo.uses}
        removed: list[str] = []
        in_use: list[str] = []
        not_removed: list[tuple[str, str]] = []
        with _LineReader() as lines:
            for undo in removable:
                assert undo.call is not None
                if undo.what in used:
                    in_use.append(undo.what)
                    used.update(undo.uses)
                    continue
                try:
                    _make(undo.call, lines)
                except Exception as error:
                    not_removed.append((undo.what, line_of(error) or repr(error)))
                    used.update(undo.uses)
                else:
                    removed.append(undo.what)
        return rollback_line(failure, removed, not_removed, written, False, changed, in_use)


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
        # A part may pass S3's 5 GB limit of one PutObject: boto3 uploads it in parts.
        with tempfile.TemporaryFile() as part:
            lines.copy(body, part)
            part.seek(0)
            client("s3").upload_fileobj(part, call.params["Bucket"], call.params["Key"])
        return {}
    answer: dict[str, Any] = operation(call.service, call.operation)(**call.params)
    if call.operation in _SETTLES:
        _until_gone(Call(call.service, _SETTLES[call.operation], call.params))
    return answer


# Deletions SageMaker finishes later, and the read that finds them gone: waited for, so that
# what they used (a component's endpoint and model) can be deleted next.
_SETTLES = {"DeleteInferenceComponent": "DescribeInferenceComponent"}


# How long a deletion SageMaker finishes later is waited for.
SETTLE_S = 1800.0


def _until_gone(describe: Call) -> None:
    """Poll `describe` until what it reads is gone; ClientError when its deletion failed, or
    has not ended in SETTLE_S."""
    import botocore.exceptions

    read = operation(describe.service, describe.operation)
    what = described(describe)
    say(f"{what}: waiting until it is deleted")
    deadline = time.monotonic() + SETTLE_S
    while True:
        try:
            answer = read(**describe.params)
        except botocore.exceptions.ClientError as error:
            if missing(error):
                return
            raise
        status = next((v for k, v in answer.items() if k.endswith("Status")), "")
        if status == "Failed":
            reason = answer.get("FailureReason", "no reason given")
            raise ClientError(f"{what}: its deletion failed: {reason}")
        if time.monotonic() > deadline:
            raise ClientError(f"{what}: still {status or 'there'} after {SETTLE_S:g} s")
        time.sleep(POLL_S)


class _LineReader(contextlib.ExitStack):
    """Copies `Lines` bodies out of their files, read once when the parts come in order."""

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


def described(call: Call) -> str:
    """What a Describe call reads, as a line names it: `endpoint llm`, `transform job j`."""
    kind = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", call.operation.removeprefix("Describe")).lower()
    return f"{kind} {next(iter(call.params.values()), '')}".strip()


def wait_for(describe: Call, status_key: str, done: set[str], failed: set[str]) -> dict[str, Any]:
    """Poll `describe` until its status is `done` (returned) or `failed` (ClientError)."""
    read = operation(describe.service, describe.operation)
    region = client(describe.service).meta.region_name  # for a Ctrl-C's line, said at once
    last = None
    try:
        while True:
            answer = read(**describe.params)
            status = answer[status_key]
            if status != last:
                say(f"{described(describe)}: {status}")
                last = status
            if status in done:
                return answer
            if status in failed:
                reason = answer.get("FailureReason", "no reason given")
                raise ClientError(f"{described(describe)}: {status}: {reason}")
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        given = profile.given_profile()
        raise Interrupted(
            wait_line(describe.operation, describe.params, last, region, given)
        ) from None


def not_waited(describe: Call) -> None:
    """Say, for `--no-wait`, that what `describe` reads goes on unwaited, and how to check it."""
    region = client(describe.service).meta.region_name
    say(not_waited_line(describe.operation, describe.params, region, profile.given_profile()))
