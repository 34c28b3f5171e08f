"""One `vllm-sagemaker batch` run: an OpenAI batch file through the container's record pipeline.

Lines are read as a stream, checked for what only the file can know
(`handler.core.batch_lines`), and sent in JSON Lines mini-batches (at most 32 lines and 6 MB:
`deploy.batch.minibatches`) to `/invocations`, where each line goes through the same pipeline as
any SageMaker record. The container is reached at a URL, or as a SageMaker endpoint through the
runtime API (`deploy.batch.targets`); a mini-batch the model refuses as a whole becomes error
lines for its lines. At most `--max-inflight` lines are in flight; answers are appended to the
output as each mini-batch finishes, in input order, so memory stays flat and a crash loses at
most the lines in flight. `--resume` reads back what the output already holds (repairing a
half-written last line) and answers only the rest (`deploy.batch.resume`); remote, `.gz` and
stdout outputs are staged in a private directory until they are delivered
(`deploy.batch.staging`). A container that wants an API key is sent `--api-key` (or
`VLLM_API_KEY`); one that refuses the call (401) stops the run with one line. A container at
`--endpoint` that is starting is waited for (`--wait-ready`); nobody there stops the run at once.
A run that stops says why in one line, which names `--resume` only when answers are written
(`stopped`); so does a run Ctrl-C stops (`interrupted`, exit status 130), once what was in flight
is closed: the output holds whole lines only, which `--resume` keeps. A second run on an output
a run holds is refused (`deploy.batch.staging`).
"""

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

from vllm_sagemaker.deploy.base import interrupts, invoke, storage
from vllm_sagemaker.deploy.base.ordered import in_order
from vllm_sagemaker.deploy.base.pace import Pace
from vllm_sagemaker.deploy.base.results import Sinks, Summary
from vllm_sagemaker.deploy.batch import local_engine, staging, targets
from vllm_sagemaker.deploy.batch.minibatches import (
    LINES_PER_REQUEST,
    answer_mini_batch,
    mini_batches,
)
from vllm_sagemaker.deploy.batch.progress import Progress, count_lines
from vllm_sagemaker.deploy.batch.resume import Answered, to_answer
from vllm_sagemaker.deploy.batch.settings import BatchSettings
from vllm_sagemaker.deploy.batch.targets import MAX_REQUEST_BYTES, Target
from vllm_sagemaker.handler.core.batch_lines import Checked, Outcome


def most_requests(settings: BatchSettings) -> int:
    """Mini-batches in flight at most (fewer while the container throttles batch work)."""
    return max(1, settings.max_inflight // LINES_PER_REQUEST)


@contextlib.asynccontextmanager
async def target_for(settings: BatchSettings, pace: Pace) -> AsyncIterator[Target]:
    """Where the run's mini-batches go, ready to take them."""
    if settings.sagemaker_endpoint:
        endpoint = targets.Endpoint(
            settings.sagemaker_endpoint,
            settings.region,
            settings.inference_component,
            settings.max_retries,
            settings.timeout_s,
            most_requests(settings),
            pace,
        )
        try:
            await endpoint.ready()
            yield endpoint
        finally:
            endpoint.close()
        return
    async with contextlib.AsyncExitStack() as stack:
        if settings.endpoint:
            url, key = settings.endpoint, settings.api_key
        else:
            assert settings.model is not None
            key = settings.api_key or local_engine.new_key()
            url = await stack.enter_async_context(
                local_engine.serving(settings.model, settings.serve_args, key)
            )
        async with invoke.client(url, key) as client:
            container = targets.Container(
                client, settings.max_retries, settings.timeout_s, pace, settings.wait_ready_s
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
    return Stopped(f"{error}; {answered} lines are answered and kept: {interrupts.RESUME}")


def interrupted(settings: BatchSettings, answered: int) -> interrupts.Interrupted:
    """The line of a run Ctrl-C stopped with `answered` lines in its outputs (earlier runs'
    included): where they are kept (a staged output's staging file), and `--resume`."""
    uris = [settings.output, *([settings.error_file] if settings.error_file else [])]
    if answered:
        uris = [staging.kept_in(uri, settings.output_tmp_dir) for uri in uris]
    return interrupts.Interrupted(
        interrupts.kept_line(answered, "line", "answered", " and ".join(uris))
    )


async def run(settings: BatchSettings) -> Summary:
    """Answer the input's lines; the outputs are created at the first answer and delivered at
    the end. `Stopped` when the run cannot go on, `interrupts.Interrupted` when Ctrl-C stops it
    (the task cancelled)."""
    summary = Summary()
    try:
        return await _run(settings, summary)
    except STOPS as error:
        raise stopped(error, summary.lines) from error
    except asyncio.CancelledError:
        raise interrupted(settings, summary.lines) from None


async def _run(settings: BatchSettings, summary: Summary) -> Summary:
    answered = Answered()

    def sink_for(uri: str) -> staging.Sink:
        return staging.Sink(uri, settings.output_tmp_dir, settings.resume)

    output = sink_for(settings.output)
    errors = sink_for(settings.error_file) if settings.error_file else None
    if errors is not None and errors.directory == output.directory:
        raise storage.Unreachable(
            f"cannot write {settings.error_file}: it is the output itself; give --error-file a "
            "path of its own"
        )
    outputs = [sink for sink in (output, errors) if sink is not None]
    sinks = Sinks(output, errors)
    with contextlib.ExitStack() as stack:
        for sink in outputs:
            stack.callback(sink.close)
            sink.hold()
        for sink in outputs:
            for result in sink.earlier():
                answered.add(result)
                summary.count(result)
                summary.resumed += 1
        source = stack.enter_context(storage.reading(settings.input))
        pace = Pace(most_requests(settings))
        async with target_for(settings, pace) as target:
            progress = Progress(count_lines(source), summary.lines)

            async def start(mini_batch: list[Checked]) -> list[tuple[bytes, Outcome]]:
                async with pace:
                    return await answer_mini_batch(target, mini_batch)

            def finish(mini_batch: list[Checked], answers: list[tuple[bytes, Outcome]]) -> None:
                summary.throttled = pace.throttles
                for line, result in answers:
                    sinks.write(line, result)
                    summary.count(result)
                sinks.flush()
                progress.update(summary, len(answers))

            try:
                await in_order(
                    mini_batches(to_answer(source, answered), LINES_PER_REQUEST, MAX_REQUEST_BYTES),
                    start,
                    finish,
                    most_requests(settings),
                )
            finally:
                seconds = progress.close()
        for sink in outputs:
            sink.deliver()
    print(f"batch: {summary.line(seconds)}", file=sys.stderr)
    return summary
