"""A Batch Transform job run locally against a running container: `vllm-sagemaker transform`,
and each shard of `deploy batch --local`.

It drives the container the way SageMaker does: GET /ping until ready (a container that is
starting is waited for up to `--wait-ready` seconds; nobody there stops the job at once, as do an
input that cannot be listed and an output that cannot be written), GET /execution-parameters,
then POST /invocations with mini-batches packed from every input file, at most
MaxConcurrentTransforms at a time. Each input `X` gives `X.out` (beside X's relative path under
the output), written only when every request for X succeeded: like SageMaker, a failed request
(after retries) leaves no `.out` for its file and makes the job fail at the end. A container that
wants an API key (`--api-key`, `VLLM_API_KEY`) and did not get it stops the job with one line.
Ctrl-C stops it too (exit status 130): requests in flight are closed, a file being written
leaves no `.out`, and the line says how many files were transformed and kept, which `--resume`
skips.
"""

import asyncio
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import httpx
from tqdm import tqdm

from vllm_sagemaker.deploy.base import interrupts, invoke, storage
from vllm_sagemaker.deploy.base.ordered import in_order
from vllm_sagemaker.deploy.transform.data_processing import DataProcessing
from vllm_sagemaker.deploy.transform.packing import (
    MiniBatch,
    RecordTooLarge,
    mini_batches,
    whole_file,
)
from vllm_sagemaker.handler.core.config import MIB
from vllm_sagemaker.handler.core.jsonlines import iter_records

# SageMaker's defaults when neither the job nor the container says otherwise.
DEFAULT_CONCURRENCY = 1
DEFAULT_PAYLOAD_MB = 6
MAX_TOTAL_MB = 100


class JobError(Exception):
    """The job cannot run as configured (SageMaker would refuse to create it)."""


class FileFailed(Exception):
    """One input file could not be transformed; the message says why."""


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
    wait_ready_s: float = invoke.READY_WAIT_S

    def headers(self) -> dict[str, str]:
        headers = {}
        if self.content_type:
            headers["Content-Type"] = self.content_type
        if self.accept:
            headers["Accept"] = self.accept
        return headers


@dataclass(frozen=True)
class Settings:
    """What the job runs with once the container's /execution-parameters are known."""

    concurrency: int
    multi_record: bool
    max_payload_mb: int


def check(job: TransformJob) -> None:
    """CreateTransformJob's own checks on the job's settings."""
    if job.processing.join_input:
        if job.accept != job.content_type:
            raise JobError("JoinSource Input needs --accept equal to --content-type")
        if job.assemble_lines != job.split_lines:
            raise JobError("JoinSource Input needs --assemble-with equal to --split-type")
    if not 0 <= job.max_retries <= 3:
        raise JobError("--max-retries must be between 0 and 3")
    if not 1 <= job.timeout_s <= 3600:
        raise JobError("--timeout must be between 1 and 3600 seconds")
    # What the options ask for alone; with the container's answer, `settings` checks again.
    given = Settings(job.max_concurrent_transforms or 1, True, job.max_payload_mb or 1)
    _check_limits(given, job, {})


_PAYLOAD = ("--max-payload-mb", "MaxPayloadInMB")
_CONCURRENCY = ("--max-concurrent-transforms", "MaxConcurrentTransforms")


def _named(names: tuple[str, str], given: int | None, answer: dict) -> str:
    """Where a setting came from, as a line names it: the option, or the container's field."""
    option, field = names
    return option if given else f"the container's {field}" if answer.get(field) else field


def _check_limits(result: Settings, job: TransformJob, answer: dict) -> None:
    """SageMaker's limits on a mini-batch's size and on how many are in flight."""
    payload = _named(_PAYLOAD, job.max_payload_mb, answer)
    concurrency = _named(_CONCURRENCY, job.max_concurrent_transforms, answer)
    size, count = result.max_payload_mb, result.concurrency
    if not 1 <= size <= MAX_TOTAL_MB:
        raise JobError(f"{payload} {size}: must be from 1 to {MAX_TOTAL_MB}")
    if count < 1:
        raise JobError(f"{concurrency} {count}: must be at least 1")
    if count * size > MAX_TOTAL_MB:
        raise JobError(
            f"{payload} {size} times {concurrency} {count} = {size * count} MB: SageMaker allows "
            f"at most {MAX_TOTAL_MB} MB in flight per instance"
        )


def settings(job: TransformJob, answer: dict | None) -> Settings:
    """SageMaker's precedence: the job's values, then the container's answer, then defaults."""
    answer = answer or {}
    concurrency = job.max_concurrent_transforms or answer.get("MaxConcurrentTransforms")
    payload = job.max_payload_mb or answer.get("MaxPayloadInMB") or DEFAULT_PAYLOAD_MB
    strategy = job.batch_strategy or answer.get("BatchStrategy") or "MultiRecord"
    result = Settings(
        concurrency=int(concurrency or DEFAULT_CONCURRENCY),
        multi_record=strategy.replace("_", "").upper() == "MULTIRECORD",
        max_payload_mb=int(payload),
    )
    _check_limits(result, job, answer)
    return result


def assembled(batch: MiniBatch, answer: bytes, job: TransformJob) -> bytes:
    """The output bytes for one mini-batch: the answer's records, joined and filtered, each
    followed by LF when AssembleWith is Line."""
    if not job.processing.per_record and not job.assemble_lines:
        return answer
    outputs = [answer] if batch.whole_file else list(iter_records(io.BytesIO(answer)))
    if job.processing.per_record:
        if len(outputs) != len(batch.originals):
            raise FileFailed(
                f"the container answered {len(outputs)} records for a mini-batch of "
                f"{len(batch.originals)}; JoinSource and OutputFilter need one line per record"
            )
        outputs = [
            job.processing.output(record, output)
            for record, output in zip(batch.originals, outputs, strict=True)
        ]
    end = b"\n" if job.assemble_lines else b""
    return b"".join(output + end for output in outputs)


def batches(source: IO[bytes], job: TransformJob, settings: Settings) -> Iterator[MiniBatch]:
    """The requests for one input file."""
    limit = settings.max_payload_mb * MIB
    if not job.split_lines:
        content = source.read()
        yield whole_file(job.processing.filtered_input(content), limit)
        return
    pairs = ((record, job.processing.filtered_input(record)) for record in iter_records(source))
    yield from mini_batches(pairs, limit, settings.multi_record)


class Container:
    """The container a job calls: its parameters, and invocations with retries."""

    def __init__(self, job: TransformJob, client: httpx.AsyncClient) -> None:
        self.job = job
        self.client = client

    async def execution_parameters(self) -> dict | None:
        """The container's answer, or None when it has none (SageMaker then uses defaults)."""
        try:
            response = await self.client.get("/execution-parameters", timeout=10)
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    async def invoke(self, body: bytes) -> bytes:
        """The answer to one request; FileFailed once retries are used up or on a 4xx."""
        try:
            return await invoke.post(
                self.client,
                "/invocations",
                body,
                self.job.headers(),
                self.job.max_retries,
                self.job.timeout_s,
            )
        except invoke.InvocationFailed as error:
            raise FileFailed(str(error)) from None


async def transform_file(
    container: Container,
    settings: Settings,
    file: storage.InputFile,
    slots: asyncio.Semaphore,
    progress: tqdm,
) -> None:
    """Write `file`'s `.out`, keeping at most `settings.concurrency` requests in flight."""
    job = container.job
    target = storage.joined(job.output, file.relative + ".out")
    if job.resume and storage.exists(target):
        progress.update(file.size)
        return

    async def send(batch: MiniBatch) -> bytes:
        async with slots:
            return await container.invoke(batch.body())

    try:
        with storage.opened(file) as source, storage.written(target) as sink:

            def write(batch: MiniBatch, answer: bytes) -> None:
                sink.write(assembled(batch, answer, job))
                progress.update(batch.input_bytes())

            await in_order(batches(source, job, settings), send, write, settings.concurrency)
    except RecordTooLarge as error:
        raise FileFailed(str(error)) from None


async def transform_all(
    job: TransformJob, quiet: bool = False, done: list[str] | None = None
) -> dict[str, str]:
    """Run the job; why each input file that failed did (none when all were transformed).
    `quiet` hides the progress bars (when the caller shows its own); `done` gets each input
    file whose `.out` is written (or was, with `--resume`) as it is. `invoke.KeyRefused` when
    the container wants an API key it did not get, `invoke.NotReady` when it cannot take calls,
    `storage.Unreachable` when the input cannot be listed or the output cannot be written."""
    check(job)
    files = storage.list_inputs(job.input)
    storage.check_writable(job.output, directory=True)
    failed: dict[str, str] = {}
    # A 401 fails every file alike: the first one ends the job, and files not begun yet are not
    # sent (gather leaves no task running).
    refused: list[invoke.KeyRefused] = []
    async with invoke.client(job.endpoint, job.api_key) as client:
        container = Container(job, client)
        await invoke.wait_ready(client, job.wait_ready_s, "transform", bar=not quiet)
        chosen = settings(job, await container.execution_parameters())
        slots = asyncio.Semaphore(chosen.concurrency)
        opened_files = asyncio.Semaphore(chosen.concurrency)
        with tqdm(
            total=sum(f.size for f in files),
            unit="B",
            unit_scale=True,
            desc="transform",
            # None: on a terminal only, so logs and pipes get the job's own lines alone.
            disable=True if quiet else None,
        ) as progress:

            async def one(file: storage.InputFile) -> None:
                async with opened_files:
                    if refused:
                        return
                    try:
                        await transform_file(container, chosen, file, slots, progress)
                        if done is not None:
                            done.append(file.uri)
                    except invoke.KeyRefused as error:
                        refused.append(error)
                    except (FileFailed, OSError) as error:
                        failed[file.uri] = str(error)
                        progress.set_postfix(failed=len(failed))

            await asyncio.gather(*(one(file) for file in files))
    if refused:
        raise refused[0]
    return failed


async def run(job: TransformJob) -> int:
    """Run the job and report it; 0 when every file was transformed, 1 otherwise.
    `interrupts.Interrupted` when Ctrl-C stops it (the task cancelled)."""
    files = storage.list_inputs(job.input)
    written: list[str] = []
    try:
        failed = await transform_all(job, done=written)
    except asyncio.CancelledError:
        raise interrupts.Interrupted(
            interrupts.kept_line(len(written), "file", "transformed", job.output, len(files))
        ) from None
    for uri, reason in sorted(failed.items()):
        print(f"transform: FAILED {uri}: {reason}", file=sys.stderr)
    done = len(files) - len(failed)
    print(f"transform: {done} of {len(files)} files transformed into {job.output}", file=sys.stderr)
    return 1 if failed else 0
