"""`vllm-sagemaker batch`: an OpenAI batch file through the container's record pipeline.

Lines are read as a stream, checked for what only the file can know
(`handler.core.batch_lines`), and sent in JSON Lines mini-batches (at most 32 lines and 6 MB) to
`/invocations`, where each line goes through the same pipeline as any SageMaker record. The
container is reached at a URL, or as a SageMaker endpoint through the runtime API
(`deploy.batch.targets`); a mini-batch the model refuses as a whole becomes error lines for its
lines. At most `--max-inflight` lines are in flight; answers are appended to the output as each
mini-batch finishes, in input order, so memory stays flat and a crash loses at most the lines in
flight. `--resume` reads back what the output already holds (repairing a half-written last line)
and answers only the rest; remote, `.gz` and stdout outputs are staged in a private directory
until they are delivered (`deploy.batch.staging`). A container that wants an API key is sent
`--api-key` (or `VLLM_API_KEY`); one that refuses the call (401) stops the run with one line.
A container at `--endpoint` that is starting is waited for (`--wait-ready`); nobody there stops
the run at once. A run that stops says why in one line, which names `--resume` only when answers
are written (`stopped`).
"""

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import IO, Protocol

from tqdm import tqdm

from vllm_sagemaker.deploy.batch import local_engine, staging, targets
from vllm_sagemaker.deploy.batch.pace import Pace
from vllm_sagemaker.deploy.batch.targets import MAX_REQUEST_BYTES, Destination
from vllm_sagemaker.deploy.io import invoke, storage
from vllm_sagemaker.deploy.io.ordered import in_order
from vllm_sagemaker.handler.core import usage
from vllm_sagemaker.handler.core.batch_lines import (
    Checked,
    Fault,
    Outcome,
    checked_lines,
    outcome,
)
from vllm_sagemaker.handler.core.errors import RequestError
from vllm_sagemaker.handler.core.formats import batch_error_line
from vllm_sagemaker.handler.core.install import server_missing
from vllm_sagemaker.handler.core.jsonlines import iter_records, split

LINES_PER_REQUEST = 32
DEFAULT_MAX_INFLIGHT = 512
DEFAULT_RETRIES = 5
LOG_EVERY_S = 10.0


@dataclass
class Summary:
    lines: int = 0
    succeeded: int = 0
    failed: int = 0
    resumed: int = 0
    throttled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def count(self, result: Outcome) -> None:
        self.lines += 1
        if result.succeeded:
            self.succeeded += 1
        else:
            self.failed += 1
        prompt, completion = usage.prompt_completion(result.usage)
        self.prompt_tokens += prompt
        self.completion_tokens += completion

    def counts(self) -> str:
        """Lines and tokens, the part every summary (one runner or a fleet) starts with."""
        return (
            f"{self.lines} lines answered ({self.succeeded} succeeded, {self.failed} failed"
            f"{f', {self.resumed} from before' if self.resumed else ''}), "
            f"{self.prompt_tokens} prompt + {self.completion_tokens} completion tokens"
        )

    def line(self, seconds: float) -> str:
        rate = self.lines / seconds if seconds > 0 else 0.0
        waited = f", {self.throttled} calls throttled for live traffic" if self.throttled else ""
        return f"{self.counts()}, {seconds:.1f} s, {rate:.1f} lines/s{waited}"


class Writer(Protocol):
    """An open file, or a `staging.Sink` that opens its file at the first answer."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> None: ...


@dataclass
class Sinks:
    """The output file and the optional error file, appended to as lines finish."""

    output: Writer
    errors: Writer | None

    def write(self, line: bytes, result: Outcome) -> None:
        sink = self.errors if self.errors is not None and not result.succeeded else self.output
        sink.write(line + b"\n")

    def flush(self) -> None:
        for sink in (self.output, self.errors):
            if sink is not None:
                sink.flush()


@dataclass(frozen=True)
class BatchJob:
    input: str
    output: str
    error_file: str | None = None
    endpoint: str | None = None
    sagemaker_endpoint: str | None = None
    region: str | None = None
    inference_component: str | None = None
    model: str | None = None
    serve_args: tuple[str, ...] = ()
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    max_retries: int = DEFAULT_RETRIES
    resume: bool = False
    # Where remote, .gz and stdout outputs are staged (None: the system's temporary directory).
    output_tmp_dir: str | None = None
    timeout_s: float = 600.0
    # The key sent to --endpoint's container, or required by --model's engine (None there: a
    # fresh random one).
    api_key: str | None = None
    # How long --endpoint's container is waited for while it is starting.
    wait_ready_s: float = invoke.READY_WAIT_S


@dataclass
class Answered:
    """What earlier runs already answered (from the output and error files)."""

    custom_ids: set[str] = field(default_factory=set)
    line_numbers: set[int] = field(default_factory=set)

    def add(self, result: Outcome) -> None:
        """A refused line's answer names its line number (a duplicate's custom_id is not its
        own); any other answer is known by its custom_id."""
        if result.line_number is not None:
            self.line_numbers.add(result.line_number)
        elif result.custom_id is not None:
            self.custom_ids.add(result.custom_id)

    def has(self, checked: Checked) -> bool:
        if checked.fault is not None:
            return checked.number in self.line_numbers
        return checked.custom_id in self.custom_ids


def too_large(item: Checked, max_bytes: int) -> Checked:
    """`item`, refused when it alone is more than a request may carry."""
    if item.fault is not None or len(item.raw) + 1 <= max_bytes:
        return item
    message = f"The line is {len(item.raw)} bytes; a request may carry at most {max_bytes}."
    return replace(item, fault=Fault("payload_too_large", message, None))


def chunks(checked: Iterable[Checked], size: int, max_bytes: int) -> Iterator[list[Checked]]:
    """Mini-batches of at most `size` lines whose requests fit in `max_bytes` together (a
    line over `max_bytes` alone was refused by `too_large`)."""
    chunk: list[Checked] = []
    used = 0
    for item in checked:
        cost = 0 if item.fault else len(item.raw) + 1
        if chunk and (len(chunk) == size or used + cost > max_bytes):
            yield chunk
            chunk, used = [], 0
        chunk.append(item)
        used += cost
    if chunk:
        yield chunk


def to_answer(source: IO[bytes], answered: Answered) -> Iterator[Checked]:
    """The input's lines not answered yet, checked (blank lines are not requests)."""
    for item in checked_lines(iter_records(source)):
        item = too_large(item, MAX_REQUEST_BYTES)
        if not answered.has(item):
            yield item


def error_line(checked: Checked) -> bytes:
    """The answer of a line the file checks refused, naming its line number."""
    assert checked.fault is not None
    return batch_error_line(checked.custom_id, checked.fault.error(checked.number))


def refused_line(checked: Checked, refusal: invoke.Refused) -> bytes:
    """The answer of a line whose whole mini-batch the model refused."""
    message = f"The model refused the request holding this line: {refusal}"
    return batch_error_line(
        checked.custom_id, RequestError(refusal.status, message, "invocation_refused")
    )


async def chunk_lines(destination: Destination, chunk: list[Checked]) -> list[bytes]:
    """The output lines of a chunk, in order: known answers as they are, the rest from one
    multi-record request to the container."""
    body = b"".join(item.raw + b"\n" for item in chunk if item.fault is None)
    if not body:
        return [error_line(item) for item in chunk]
    try:
        answers = iter(split(await destination.invoke(body)))
    except invoke.Refused as refusal:
        return [error_line(item) if item.fault else refused_line(item, refusal) for item in chunk]
    lines = [error_line(item) if item.fault else next(answers, b"") for item in chunk]
    if any(not line for line in lines) or next(answers, None) is not None:
        raise invoke.InvocationFailed("the container's answer did not have one line per record")
    return lines


async def answer_chunk(
    destination: Destination, chunk: list[Checked]
) -> list[tuple[bytes, Outcome]]:
    """A chunk's output lines, each with its outcome (every line is parsed once). A line the
    engine aborted is no answer: the run stops before anything of the chunk is written."""
    answers = [(line, outcome(line)) for line in await chunk_lines(destination, chunk)]
    for item, (_, result) in zip(chunk, answers, strict=True):
        if item.fault is None and result.aborted:
            raise invoke.InvocationFailed(
                f"the engine aborted line {item.number} (is the container stopping?)"
            )
    return answers


def count_lines(source: IO[bytes]) -> int | None:
    """The number of lines of a seekable input (for the progress bar's ETA), None for a pipe."""
    if not source.seekable():
        return None
    lines = sum(chunk.count(b"\n") for chunk in iter(lambda: source.read(1 << 20), b""))
    source.seek(0)
    return lines


class Progress:
    """A progress bar on a terminal, a plain log line every LOG_EVERY_S otherwise."""

    def __init__(self, total: int | None, done: int) -> None:
        self.interactive = sys.stderr.isatty()
        self.bar = tqdm(
            total=total, initial=done, unit=" lines", disable=not self.interactive, desc="batch"
        )
        self.started = self.last_log = time.monotonic()

    def update(self, summary: Summary, lines: int) -> None:
        self.bar.update(lines)
        now = time.monotonic()
        if not self.interactive and now - self.last_log >= LOG_EVERY_S:
            self.last_log = now
            print(f"batch: {summary.line(now - self.started)}", file=sys.stderr, flush=True)

    def close(self) -> float:
        self.bar.close()
        return time.monotonic() - self.started


def most_calls(job: BatchJob) -> int:
    """Mini-batches in flight at most (fewer while the container throttles batch work)."""
    return max(1, job.max_inflight // LINES_PER_REQUEST)


@contextlib.asynccontextmanager
async def destination_for(job: BatchJob, pace: Pace) -> AsyncIterator[Destination]:
    """Where the job's mini-batches go, ready to take them."""
    if job.sagemaker_endpoint:
        endpoint = targets.Endpoint(
            job.sagemaker_endpoint,
            job.region,
            job.inference_component,
            job.max_retries,
            job.timeout_s,
            most_calls(job),
            pace,
        )
        try:
            await endpoint.ready()
            yield endpoint
        finally:
            endpoint.close()
        return
    with contextlib.ExitStack() as stack:
        if job.endpoint:
            url, key = job.endpoint, job.api_key
        else:
            assert job.model is not None
            key = job.api_key or local_engine.new_key()
            url = stack.enter_context(local_engine.serving(job.model, job.serve_args, key))
        async with invoke.client(url, key) as client:
            container = targets.Container(
                client, job.max_retries, job.timeout_s, pace, job.wait_ready_s
            )
            await container.ready()
            yield container


class Stopped(Exception):
    """The run stopped; the message is its one line."""


# What stops a run: an input or output that cannot be used, a container that cannot take calls
# or wants an API key, an engine that did not start, calls that failed after their retries.
STOPS = (
    storage.Unreachable,
    invoke.KeyRefused,
    invoke.NotReady,
    invoke.InvocationFailed,
    local_engine.EngineFailed,
)


def stopped(error: Exception, answered: int) -> Stopped:
    """The line of a run stopped by `error` with `answered` lines in its outputs (earlier runs'
    included). `--resume` keeps those, answers the rest and delivers the outputs, so it is named
    when there are some; with none it would do what a plain run does, so it is not."""
    if not answered:
        return Stopped(str(error))
    return Stopped(
        f"{error}; {answered} lines are answered and kept: run the same command with --resume "
        "to finish"
    )


async def run(job: BatchJob) -> Summary:
    """Answer the input's lines; the outputs are created at the first answer and delivered at
    the end. `Stopped` when the run cannot go on."""
    summary = Summary()
    try:
        return await _run(job, summary)
    except STOPS as error:
        raise stopped(error, summary.lines) from error


async def _run(job: BatchJob, summary: Summary) -> Summary:
    answered = Answered()

    def sink_for(uri: str) -> staging.Sink:
        return staging.Sink(uri, job.output_tmp_dir, job.resume)

    output = sink_for(job.output)
    errors = sink_for(job.error_file) if job.error_file else None
    outputs = [sink for sink in (output, errors) if sink is not None]
    for sink in outputs:
        for result in sink.earlier():
            answered.add(result)
            summary.count(result)
            summary.resumed += 1
    sinks = Sinks(output, errors)
    with contextlib.ExitStack() as stack:
        for sink in outputs:
            stack.callback(sink.close)
        source = stack.enter_context(storage.reading(job.input))
        pace = Pace(most_calls(job))
        async with destination_for(job, pace) as destination:
            progress = Progress(count_lines(source), summary.lines)

            async def start(chunk: list[Checked]) -> list[tuple[bytes, Outcome]]:
                async with pace:
                    return await answer_chunk(destination, chunk)

            def finish(chunk: list[Checked], answers: list[tuple[bytes, Outcome]]) -> None:
                summary.throttled = pace.throttles
                for line, result in answers:
                    sinks.write(line, result)
                    summary.count(result)
                sinks.flush()
                progress.update(summary, len(answers))

            try:
                await in_order(
                    chunks(to_answer(source, answered), LINES_PER_REQUEST, MAX_REQUEST_BYTES),
                    start,
                    finish,
                    most_calls(job),
                )
            finally:
                seconds = progress.close()
        for sink in outputs:
            sink.deliver()
    print(f"batch: {summary.line(seconds)}", file=sys.stderr)
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-i",
        "--input-file",
        required=True,
        metavar="INPUT",
        help="a path, -, http(s):// or s3:// URL (.gz by name)",
    )
    parser.add_argument(
        "-o",
        "--output-file",
        required=True,
        metavar="OUTPUT",
        help="a path, -, http(s):// (PUT) or s3:// URL",
    )
    parser.add_argument(
        "--error-file", metavar="PATH", help="failed lines go here instead of the output"
    )
    engine_choice = parser.add_mutually_exclusive_group(required=True)
    engine_choice.add_argument(
        "--endpoint", metavar="URL", help="a running container, e.g. http://localhost:8080"
    )
    engine_choice.add_argument(
        "--sagemaker-endpoint",
        metavar="NAME",
        help="a SageMaker real-time endpoint, called with InvokeEndpoint (boto3's credentials)",
    )
    engine_choice.add_argument(
        "--model", help="start `serve` with this model for the run; unknown options go to vLLM"
    )
    parser.add_argument(
        "--max-inflight",
        type=int,
        default=DEFAULT_MAX_INFLIGHT,
        metavar="N",
        help=f"lines in flight at once (default {DEFAULT_MAX_INFLIGHT})",
    )
    parser.add_argument("--region", help="the endpoint's AWS region (default: boto3's)")
    parser.add_argument(
        "--inference-component",
        metavar="NAME",
        help="with --sagemaker-endpoint: the inference component (model or adapter) to call",
    )
    parser.add_argument(
        "--max-retries",
        type=int,
        default=DEFAULT_RETRIES,
        metavar="N",
        help="tries after a timed-out or 5xx call before the run stops "
        f"(default {DEFAULT_RETRIES}); a 429 (the container keeps its engine for live "
        "traffic) is waited out and halves the calls in flight, never counted",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="answer only the lines the output (and error file) do not hold yet",
    )
    invoke.add_wait_ready_argument(parser, "; with --endpoint")
    parser.add_argument(
        "--output-tmp-dir",
        metavar="DIR",
        help="where remote, .gz and stdout outputs are staged until the end, in a private "
        "directory removed once they are delivered (default: the system's temporary directory)",
    )
    invoke.add_api_key_argument(
        parser,
        "; with --model, the key the started engine requires (default: a fresh random one); "
        "not with --sagemaker-endpoint",
    )


def main(args: argparse.Namespace, extra: list[str]) -> int:
    if extra and not args.model:
        print(f"batch: unrecognized arguments: {' '.join(extra)}", file=sys.stderr)
        return 2
    if args.api_key and args.sagemaker_endpoint:
        print(
            "batch: --api-key goes with --endpoint or --model: InvokeEndpoint cannot send one "
            "(SigV4 guards a SageMaker endpoint)",
            file=sys.stderr,
        )
        return 2
    missing = server_missing("batch --model") if args.model else None
    if missing:
        print(f"batch: {missing}", file=sys.stderr)
        return 1
    job = BatchJob(
        input=args.input_file,
        output=args.output_file,
        error_file=args.error_file,
        endpoint=args.endpoint,
        sagemaker_endpoint=args.sagemaker_endpoint,
        region=args.region,
        inference_component=args.inference_component,
        model=args.model,
        serve_args=tuple(extra),
        max_inflight=args.max_inflight,
        max_retries=args.max_retries,
        resume=args.resume,
        output_tmp_dir=args.output_tmp_dir,
        api_key=args.api_key if args.model else invoke.api_key(args.api_key),
        wait_ready_s=args.wait_ready,
    )
    try:
        asyncio.run(run(job))
    except Stopped as error:
        print(f"batch: {error}", file=sys.stderr)
        return 1
    return 0
