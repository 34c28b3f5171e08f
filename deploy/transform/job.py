"""A Batch Transform job run against a running container as SageMaker runs it
(`vllm-sagemaker transform`, each shard of `deploy batch --local`): each input `X` gives `X.out`
at its relative path under the output, written only when every request for X succeeded (a
failed file fails the job at the end); a job that cannot start is one line and exit status 2."""

import asyncio
import io
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from vllm_sagemaker.core.config import MIB
from vllm_sagemaker.core.execution_parameters import SAGEMAKER_CONCURRENCY, SAGEMAKER_PAYLOAD_MB
from vllm_sagemaker.core.jsonlines import iter_records
from vllm_sagemaker.deploy.base import interrupts, invocations, storage
from vllm_sagemaker.deploy.base.errors import (
    ClientError,
    ExitStatus,
    Problem,
    UsageError,
    client_error,
    stop_at,
)
from vllm_sagemaker.deploy.base.ordered import in_order, packed, payload_problem
from vllm_sagemaker.deploy.base.results import Progress
from vllm_sagemaker.deploy.transform.data_processing import DataProcessing


@dataclass(frozen=True)
class TransformJob:
    endpoint: str
    input: str
    output: str
    content_type: str | None = None
    accept: str | None = None
    split_lines: bool = False
    batch_strategy: str | None = None
    max_payload_mb: int | None = None
    max_concurrent_transforms: int | None = None
    assemble_lines: bool = False
    processing: DataProcessing = field(default_factory=DataProcessing)
    max_retries: int = 3
    timeout_s: float = 600.0
    resume: bool = False
    api_key: str | None = None
    wait_ready_s: float = invocations.READY_WAIT_S

    def headers(self) -> dict[str, str]:
        given = {"Content-Type": self.content_type, "Accept": self.accept}
        return {name: value for name, value in given.items() if value}


@dataclass(frozen=True)
class ResolvedParameters:
    concurrency: int
    multi_record: bool
    max_payload_mb: int


@dataclass
class FileResults:
    """The job's files: how many are done (`skipped` by `--resume`), why each failed."""

    files: list[storage.InputFile] = field(default_factory=list)
    done: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)


def check(job: TransformJob) -> None:
    if job.processing.join_input:
        if job.accept != job.content_type:
            raise UsageError("JoinSource Input needs --accept equal to --content-type")
        if job.assemble_lines != job.split_lines:
            raise UsageError("JoinSource Input needs --assemble-with equal to --split-type")
    if not 0 <= job.max_retries <= 3:
        raise UsageError(Problem("--max-retries", "must be between 0 and 3", sep=" "))
    if not 1 <= job.timeout_s <= 3600:
        raise UsageError(Problem("--timeout", "must be between 1 and 3600 seconds", sep=" "))
    stop_at(payload_problem(job.max_payload_mb or 0, job.max_concurrent_transforms or 0, False))


def _setting(given: int | None, answer: dict, field: str, option: str) -> tuple[int | None, str]:
    """`given`, else the container's whole number for `field` (None: neither), and its name as a
    line says it: the option, or the container's field."""
    if given is not None:
        return given, option
    value = answer.get(field)
    try:
        return (None, field) if value is None else (int(value), f"the container's {field}")
    except (TypeError, ValueError):
        raise UsageError(
            f"the container's /execution-parameters gives {field} {value!r}, not a whole number: "
            f"set {option}"
        ) from None


def settings(job: TransformJob, answer: dict) -> ResolvedParameters:
    """SageMaker's precedence: the job's values, then the container's answer, then defaults."""
    concurrency, concurrent = _setting(
        job.max_concurrent_transforms or None,  # 0: the container's
        answer,
        "MaxConcurrentTransforms",
        "--max-concurrent-transforms",
    )
    payload, payload_name = _setting(
        job.max_payload_mb, answer, "MaxPayloadInMB", "--max-payload-mb"
    )
    strategy = job.batch_strategy or answer.get("BatchStrategy") or "MultiRecord"
    result = ResolvedParameters(
        concurrency=concurrency or SAGEMAKER_CONCURRENCY,
        multi_record=str(strategy).replace("_", "").upper() == "MULTIRECORD",
        max_payload_mb=SAGEMAKER_PAYLOAD_MB if payload is None else payload,
    )
    packs = job.split_lines and result.multi_record
    stop_at(
        payload_problem(result.max_payload_mb, result.concurrency, packs, payload_name, concurrent)
    )
    return result


@dataclass
class MiniBatch:
    """One request: its records as read (for JoinSource) and as sent (after InputFilter)."""

    records: list[tuple[bytes, bytes]]
    whole_file: bool = False

    def body(self) -> bytes:
        end = b"" if self.whole_file else b"\n"
        return b"".join(sent + end for _, sent in self.records)

    def input_bytes(self) -> int:
        end = 0 if self.whole_file else 1
        return sum(len(original) + end for original, _ in self.records)


def fitting(records: Iterable[tuple[bytes, bytes]], limit: int) -> Iterator[tuple[bytes, bytes]]:
    """`records`, each sent followed by LF; a failed file for one over `limit` (0: none)."""
    for number, (original, sent) in enumerate(records, 1):
        if limit and len(sent) + 1 > limit:
            raise ClientError(
                f"record {number} is {len(sent) + 1} bytes, more than MaxPayloadInMB allows "
                f"({limit} bytes)"
            )
        yield original, sent


def batches(
    source: IO[bytes], job: TransformJob, settings: ResolvedParameters
) -> Iterator[MiniBatch]:
    """The requests for one input file: with SplitType Line, as many whole records as fit under
    MaxPayloadInMB (MultiRecord) or one (SingleRecord); else the whole file as it is."""
    limit = settings.max_payload_mb * MIB
    if not job.split_lines:
        content = job.processing.filtered_input(source.read())
        if limit and len(content) > limit:
            raise ClientError(
                f"the file is {len(content)} bytes, more than MaxPayloadInMB allows ({limit} "
                "bytes); use SplitType Line"
            )
        yield MiniBatch([(content, content)], whole_file=True)
        return
    records = ((record, job.processing.filtered_input(record)) for record in iter_records(source))
    most = 0 if settings.multi_record else 1
    for records_of in packed(fitting(records, limit), lambda pair: len(pair[1]) + 1, limit, most):
        yield MiniBatch(records_of)


def assembled(batch: MiniBatch, answer: bytes, job: TransformJob) -> bytes:
    """One mini-batch's output: the answer's records, joined and filtered (AssembleWith)."""
    if not job.processing.per_record and not job.assemble_lines:
        return answer
    outputs = [answer] if batch.whole_file else list(iter_records(io.BytesIO(answer)))
    if job.processing.per_record:
        if len(outputs) != len(batch.records):
            raise ClientError(
                f"the container answered {len(outputs)} records for a mini-batch of "
                f"{len(batch.records)}; JoinSource and OutputFilter need one line per record"
            )
        outputs = [
            job.processing.output(original, output)
            for (original, _), output in zip(batch.records, outputs, strict=True)
        ]
    end = b"\n" if job.assemble_lines else b""
    return b"".join(output + end for output in outputs)


async def transform_all(job: TransformJob, outcome: FileResults, quiet: bool = False) -> None:
    """Run the job, filling in `outcome` (`quiet`: no bars); a `ClientError` with status
    USAGE_ERROR when it cannot run (the first 401 ends the job: no more files are sent)."""
    try:
        check(job)
        outcome.files = storage.list_inputs(job.input)
        storage.check_writable(job.output, directory=True)
        async with invocations.client(job.endpoint, job.api_key) as client:
            await invocations.wait_ready(client, job.wait_ready_s, "transform", bar=not quiet)
            container = invocations.Container(client, job.headers(), job.max_retries, job.timeout_s)
            chosen = settings(job, await container.execution_parameters())
            slots = asyncio.Semaphore(chosen.concurrency)
            opened_files = asyncio.Semaphore(chosen.concurrency)
            total = sum(file.size for file in outcome.files)
            progress = Progress("transform", total, "B", quiet=quiet)
            refused: list[invocations.Unauthorized] = []

            async def send(batch: MiniBatch) -> bytes:
                async with slots:
                    return await container.invoke(batch.body())

            async def transform_file(file: storage.InputFile, target: str) -> None:
                """Write `file`'s `.out` at `target`, `chosen.concurrency` requests in flight."""
                with storage.stream(file.uri, "rb") as source, storage.written(target) as sink:

                    def write(batch: MiniBatch, answer: bytes) -> None:
                        sink.write(assembled(batch, answer, job))
                        progress.update(batch.input_bytes())

                    await in_order(batches(source, job, chosen), send, write, chosen.concurrency)

            async def one(file: storage.InputFile) -> None:
                out = storage.joined(job.output, file.relative + ".out")
                async with opened_files:
                    if refused:
                        return
                    if job.resume and storage.exists(out):
                        outcome.skipped += 1
                        outcome.done += 1
                        progress.update(file.size)
                        return
                    try:
                        await transform_file(file, out)
                        outcome.done += 1
                    except invocations.Unauthorized as error:
                        refused.append(error)
                    except (ClientError, OSError) as error:
                        outcome.failed[file.uri] = str(error)
                        progress.update(0, failed=len(outcome.failed))

            try:
                await asyncio.gather(*(one(file) for file in outcome.files))
            finally:
                progress.close()
        if refused:
            raise refused[0]
    except Exception as error:
        found = client_error(error)
        if found is None:
            raise
        raise ClientError(found.line, ExitStatus.USAGE_ERROR) from error


async def run(job: TransformJob) -> int:
    """Run the job and report it: 0 when every file was transformed, 1 otherwise."""
    outcome = FileResults()
    try:
        await transform_all(job, outcome)
    except asyncio.CancelledError:
        raise interrupts.Interrupted(
            interrupts.kept_line(
                outcome.done, "file", "transformed", job.output, len(outcome.files)
            )
        ) from None
    for uri, reason in sorted(outcome.failed.items()):
        print(f"transform: FAILED {uri}: {reason}", file=sys.stderr)
    files = len(outcome.files)
    skipped = f" ({outcome.skipped} done before, skipped by --resume)" if outcome.skipped else ""
    print(
        f"transform: {files - len(outcome.failed)} of {files} files transformed into "
        f"{job.output}{skipped}",
        file=sys.stderr,
    )
    return 1 if outcome.failed else 0
