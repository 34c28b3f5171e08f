"""One `vllm-sagemaker batch` run: the input streamed in mini-batches to a container or a
SageMaker endpoint, answers appended in input order as they come (memory stays flat, a crash
loses at most the lines in flight), outputs staged until delivered (`deploy.batch.staging`)."""

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import IO

from vllm_sagemaker.core.batch_lines import Checked, Outcome
from vllm_sagemaker.deploy.base import interrupts, invocations, storage
from vllm_sagemaker.deploy.base.errors import ClientError, client_error
from vllm_sagemaker.deploy.base.ordered import in_order
from vllm_sagemaker.deploy.base.pace import Pace
from vllm_sagemaker.deploy.base.results import Progress, Sinks, Summary
from vllm_sagemaker.deploy.batch import local_engine, staging
from vllm_sagemaker.deploy.batch.minibatches import (
    CONTAINER_HEADERS,
    LINES_PER_REQUEST,
    Answered,
    Destination,
    answer_mini_batch,
    mini_batches,
    to_answer,
)

DEFAULT_MAX_INFLIGHT = 512
DEFAULT_RETRIES = 5


@dataclass(frozen=True)
class BatchSettings:
    input_file: str
    output_file: str
    error_file: str | None
    endpoint: str | None
    sagemaker_endpoint: str | None
    region: str | None
    inference_component: str | None
    model: str | None
    max_inflight: int
    max_retries: int
    resume: bool
    # An earlier run's output whose kept answers go to this output (`--resume-from`).
    resume_from: str | None
    # Where remote, .gz and stdout outputs are staged (None: the system's temporary directory).
    output_tmp_dir: str | None
    # The key sent to --endpoint's container, or required by --model's engine (None: a new one).
    api_key: str | None
    wait_ready: float
    serve_args: tuple[str, ...] = ()
    timeout_s: float = 600.0


@contextlib.asynccontextmanager
async def destination_for(settings: BatchSettings, pace: Pace) -> AsyncIterator[Destination]:
    async with contextlib.AsyncExitStack() as stack:
        if settings.sagemaker_endpoint:
            # boto3 loads here, not with this module: `vllm-sagemaker --help` builds the parser.
            from vllm_sagemaker.deploy.batch import sagemaker_endpoint

            endpoint = sagemaker_endpoint.Endpoint(
                settings.sagemaker_endpoint,
                settings.region,
                settings.inference_component,
                settings.max_retries,
                settings.timeout_s,
                pace,
            )
            stack.callback(endpoint.close)
            await endpoint.ready()
            yield endpoint
            return
        url, key = settings.endpoint, settings.api_key
        if url is None:
            assert settings.model is not None
            key = key or local_engine.new_key()
            url = await stack.enter_async_context(
                local_engine.serving(settings.model, settings.serve_args, key)
            )
        client = await stack.enter_async_context(invocations.client(url, key))
        await invocations.wait_ready(client, settings.wait_ready, "batch")
        yield invocations.Container(
            client, CONTAINER_HEADERS, settings.max_retries, settings.timeout_s, pace
        )


def stopped(error: ClientError, answered: int) -> ClientError:
    """`error`, naming `--resume` when lines are answered (an `Undelivered` line already does)."""
    if not answered or isinstance(error, staging.Undelivered):
        return error
    return ClientError(f"{error.line}; {answered} lines are answered and kept: {interrupts.RESUME}")


def interrupted(settings: BatchSettings, answered: int) -> interrupts.Interrupted:
    """The line of a run Ctrl-C stopped: where its `answered` lines are kept."""
    uris = [settings.output_file, *([settings.error_file] if settings.error_file else [])]
    if answered:
        uris = [staging.kept_in(uri, settings.output_tmp_dir) for uri in uris]
    return interrupts.Interrupted(
        interrupts.kept_line(answered, "line", "answered", " and ".join(uris))
    )


def count_lines(source: IO[bytes]) -> int | None:
    """The lines of a seekable input (for the progress bar's ETA), None for a pipe."""
    if not source.seekable():
        return None
    lines = sum(block.count(b"\n") for block in iter(lambda: source.read(1 << 20), b""))
    source.seek(0)
    return lines


async def run(settings: BatchSettings) -> Summary:
    """Answer the input's lines; `ClientError` when the run cannot go on, `Interrupted`."""
    summary = Summary()
    try:
        return await _run(settings, summary)
    except asyncio.CancelledError:
        raise interrupted(settings, summary.lines) from None
    except Exception as error:
        found = client_error(error)
        if found is None:
            raise
        raise stopped(found, summary.lines) from error


async def _run(settings: BatchSettings, summary: Summary) -> Summary:
    tmp_dir = settings.output_tmp_dir
    output = staging.Sink(settings.output_file, tmp_dir, settings.resume, settings.resume_from)
    # `--resume-from` resumes too: the error file keeps what the earlier run wrote to it.
    errors = (
        staging.Sink(settings.error_file, tmp_dir, output.resume) if settings.error_file else None
    )
    if errors is not None and errors.directory == output.directory:
        raise ClientError(
            f"cannot write {settings.error_file}: it is the output itself; give --error-file a "
            "path of its own"
        )
    outputs = [sink for sink in (output, errors) if sink is not None]
    sinks = Sinks(output, errors)
    answered = Answered()
    with contextlib.ExitStack() as stack:
        for sink in outputs:
            stack.callback(sink.close)
            sink.hold()
        for sink in outputs:
            for result in sink.earlier():
                answered.add(result)
                summary.count(result)
                summary.resumed += 1
        source = stack.enter_context(storage.reading(settings.input_file))
        # Mini-batches in flight at most (fewer while the container throttles batch work).
        pace = Pace(max(1, settings.max_inflight // LINES_PER_REQUEST))
        async with destination_for(settings, pace) as destination:
            progress = Progress(
                "batch", count_lines(source), " lines", initial=summary.lines, log=summary.line
            )

            async def start(mini_batch: list[Checked]) -> list[tuple[bytes, Outcome]]:
                async with pace:
                    return await answer_mini_batch(destination, mini_batch)

            def finish(mini_batch: list[Checked], answers: list[tuple[bytes, Outcome]]) -> None:
                summary.throttled = pace.throttles
                for line, result in answers:
                    sinks.write(line, result)
                    summary.count(result)
                sinks.flush()
                progress.update(len(answers))

            try:
                await in_order(mini_batches(to_answer(source, answered)), start, finish, pace.most)
            finally:
                seconds = progress.close()
        for sink in outputs:
            sink.deliver()
    print(f"batch: {summary.line(seconds)}", file=sys.stderr)
    return summary
