"""How `deploy batch` runs an OpenAI batch file on a fleet of Batch Transform jobs: prepare (the
valid lines written as shards under the work prefix beside `fleet.json`, which a later run reuses
for the same file), run (shards without output, `--instance-count` at a time; none starts after
a cancel or Ctrl-C), merge (every line's answer or error line, in order, written whole at every
run, so a rerun completes it)."""

import asyncio
import collections
import contextlib
import hashlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from vllm_sagemaker.core import kinds
from vllm_sagemaker.core.batch_lines import (
    CANCELLED_LINE,
    Checked,
    checked_lines,
    outcome,
)
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.core.formats import batch_error_line
from vllm_sagemaker.core.jsonlines import iter_records
from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.calls import Call, put, remove
from vllm_sagemaker.deploy.base.errors import ClientError, UsageError
from vllm_sagemaker.deploy.base.plan import Plan, Step
from vllm_sagemaker.deploy.base.results import Sinks, Summary
from vllm_sagemaker.deploy.base.say import say
from vllm_sagemaker.deploy.kit.fleet.jobs import Jobs, JobSpec, SageMakerJobs
from vllm_sagemaker.deploy.kit.fleet.state import Fleet, Job, Shard
from vllm_sagemaker.deploy.kit.plans.names import job_name
from vllm_sagemaker.deploy.kit.plans.shards import DEFAULT_SHARD_LINES, shard_sizes

FLEET = "fleet.json"
CANCEL = "cancel"
INPUT_NAME = "input.jsonl"


@dataclass(frozen=True)
class Layout:
    """Where a batch's files live under its work prefix."""

    work: str

    def at(self, relative: str) -> str:
        return storage.joined(self.work, relative)

    def shard_file(self, shard: Shard) -> str:
        return self.at(f"shards/{shard.name}/{INPUT_NAME}")

    def shard_out_file(self, shard: Shard) -> str:
        return self.at(f"output/{shard.name}/{INPUT_NAME}.out")

    def spec(self, job: str, shard: Shard, slot: int) -> JobSpec:
        """The job `job` running `shard` on `slot`."""
        return JobSpec(
            job, self.at(f"shards/{shard.name}/"), self.at(f"output/{shard.name}/"), slot
        )


def next_job(batch: str, shard: Shard) -> str:
    """The name of the shard's next job."""
    return job_name(batch, shard.index, len(shard.jobs) + 1)


def checked(source_uri: str) -> Iterator[Checked]:
    """The request lines of the input, checked as every batch line is checked."""
    with storage.reading(source_uri) as source:
        yield from checked_lines(iter_records(source), kinds.INFERENCE_ROUTES)


@dataclass(frozen=True)
class FleetBatch:
    name: str
    input: str
    output: str
    error_file: str | None
    work: str
    instances: int
    shard_lines: int = DEFAULT_SHARD_LINES
    price: float | None = None


def prepare(batch: FleetBatch, path: str, dry_run: bool) -> Fleet:
    """The fleet for the batch's input (read from `path`): the work prefix's when made from the
    same file, else a new one with its shards written (unless `dry_run`)."""
    uri, layout = batch.input, Layout(batch.work)
    say(f"checking {uri}")
    with storage.reading(path) as source:
        found = "sha256:" + hashlib.file_digest(cast(Any, source), "sha256").hexdigest()
    fleet_uri = layout.at(FLEET)
    if storage.exists(fleet_uri):
        with storage.reading(fleet_uri) as existing:
            fleet = Fleet.from_json(existing.read())
        if fleet.fingerprint != found:
            raise UsageError(
                f"{layout.work} holds the fleet of another file ({fleet.input}); give this file "
                "its own --work-prefix"
            )
        say(f"reusing the fleet in {fleet_uri}: {len(fleet.shards)} shards")
        return fleet
    lines = requests = 0
    faults: list[str] = []
    for item in checked(path):
        lines += 1
        if item.fault is None:
            requests += 1
        elif len(faults) < 3:
            faults.append(f"line {item.number}: {item.fault.code}: {item.fault.message}")
    if requests == 0:
        raise UsageError(f"{uri} has no valid request line ({lines} lines): " + "; ".join(faults))
    sizes = shard_sizes(requests, batch.instances, batch.shard_lines)
    fleet = Fleet(uri, found, lines, requests, [Shard(i, n) for i, n in enumerate(sizes)])
    say(
        f"{lines} lines, {lines - requests} refused, {requests} in {len(sizes)} shards "
        f"of about {sizes[0]} lines"
    )
    if not dry_run:
        valid = (item.raw for item in checked(path) if item.fault is None)
        for shard in fleet.shards:
            with storage.written(layout.shard_file(shard)) as sink:
                for _ in range(shard.lines):
                    sink.write(next(valid) + b"\n")
        save(fleet, layout)
    return fleet


def save(fleet: Fleet, layout: Layout) -> None:
    with storage.written(layout.at(FLEET)) as sink:
        sink.write(fleet.to_json())


def cancelled(layout: Layout) -> bool:
    return storage.exists(layout.at(CANCEL))


def pending(fleet: Fleet, layout: Layout) -> list[Shard]:
    """Shards still to run: no output yet."""
    return [shard for shard in fleet.shards if not storage.exists(layout.shard_out_file(shard))]


async def run_shards(fleet: Fleet, layout: Layout, jobs: Jobs, name: str) -> bool:
    """Run the pending shards, `jobs.slots` at a time, those whose job an earlier run started
    first (waited for, not started again); False when a cancel left shards unstarted."""
    todo = sorted(pending(fleet, layout), key=lambda shard: not attachable(shard, jobs))
    if cancelled(layout):
        say(f"cancelled: {len(todo)} shards not started")
        return False
    say(f"{len(todo)} shards to run, {jobs.slots} at a time")
    queue = collections.deque(todo)
    stopped = False

    async def slot(number: int) -> None:
        """Take the next shard as soon as this slot's job ends, until none is left or a cancel."""
        nonlocal stopped
        while queue and not stopped:
            await run_shard(fleet, layout, jobs, name, number, queue.popleft())
            if queue and not stopped and cancelled(layout):
                stopped = True
                say(f"cancelled: {len(queue)} shards not started")

    await asyncio.gather(*(slot(number) for number in range(jobs.slots)))
    return not stopped


def attachable(shard: Shard, jobs: Jobs) -> bool:
    """Whether the shard's last job was started by an earlier run and may still be running."""
    return jobs.can_attach and shard.last is not None and shard.last.status is None


async def run_shard(
    fleet: Fleet, layout: Layout, jobs: Jobs, name: str, slot: int, shard: Shard
) -> None:
    """Run a shard's job on `slot` (or wait for an earlier run's), saving the fleet as it goes."""
    last = shard.last if attachable(shard, jobs) else None
    if last is None:
        last = Job(next_job(name, shard))
        shard.jobs.append(last)
    say(f"{shard.name}: {last.name} on slot {slot + 1} of {jobs.slots}")
    await jobs.run(layout.spec(last.name, shard, slot), last, lambda: save(fleet, layout))
    save(fleet, layout)
    say(f"{last.name}: {last.status}{f' ({last.reason})' if last.reason else ''}")


# Why a line has no answer, as the summary says it, by its error line's code.
SHARD_FAILED = "shard_failed"
NO_OUTPUT = "shard_no_output"
RUNNING = "shard_running"
UNANSWERED = {
    NO_OUTPUT: "their jobs completed, wrote no output",
    SHARD_FAILED: "their jobs failed",
    RUNNING: "their jobs started, not yet ended",
    CANCELLED_LINE.code: "their jobs did not start",
}


def unanswered(shard: Shard) -> RequestError:
    """The error line of each line of a shard without output."""
    job = shard.last
    if job is None:
        return replace(
            CANCELLED_LINE,
            message="the line's shard has not run (the batch was cancelled or stopped); run "
            "the same command again to finish it",
        )
    if job.status is None:
        told = f"transform job {job.name} started and has not ended; run the same command again"
        return RequestError(503, f"{told} to collect it", RUNNING)
    code = NO_OUTPUT if job.status == "Completed" else SHARD_FAILED
    why = job.reason or "it wrote no output"
    return RequestError(500, f"transform job {job.name} {job.status.lower()}: {why}", code)


def shard_answers(fleet: Fleet, layout: Layout) -> Iterator[bytes | RequestError]:
    """Every valid line's answer in input order: its `.out` line, or why it has none."""
    for shard in fleet.shards:
        out = layout.shard_out_file(shard)
        if not storage.exists(out):
            yield from [unanswered(shard)] * shard.lines
            continue
        with storage.reading(out) as lines:
            count = 0
            for line in iter_records(lines):
                count += 1
                yield line
        if count != shard.lines:
            raise ClientError(f"{out} has {count} lines for the {shard.lines} of its shard")


def merge(
    fleet: Fleet, layout: Layout, source: str, output: str, error_file: str | None
) -> Summary:
    """Write the output (and error) file: the input `source`'s lines' answers, in order."""
    summary = Summary()
    answers = shard_answers(fleet, layout)
    with contextlib.ExitStack() as stack:
        staged_dir = stack.enter_context(tempfile.TemporaryDirectory())
        output_path = str(Path(staged_dir) / "output.jsonl")
        error_path = str(Path(staged_dir) / "errors.jsonl")
        sinks = Sinks(
            stack.enter_context(open(output_path, "wb")),
            stack.enter_context(open(error_path, "wb")) if error_file else None,
        )
        for item in checked(source):
            answer = next(answers) if item.fault is None else item.fault.error(item.number)
            line = answer if isinstance(answer, bytes) else batch_error_line(item.custom_id, answer)
            result = outcome(line)
            if item.fault is None and isinstance(answer, RequestError):
                summary.skip(UNANSWERED[answer.code])
            else:
                summary.count(result)
            sinks.write(line, result)
        sinks.flush()
        storage.publish(output_path, output)
        if error_file:
            storage.publish(error_path, error_file)
    return summary


def report(summary: Summary, fleet: Fleet, price: float | None, complete: bool) -> str:
    hours = sum(job.seconds for shard in fleet.shards for job in shard.jobs) / 3600
    cost = f", about ${hours * price:.2f} at ${price:g}/instance-hour" if price else ""
    state = "" if complete else " (incomplete: run the same command again to finish)"
    return f"{summary.counts()}, {hours:.3f} instance-hours{cost}{state}"


def preview(batch: FleetBatch) -> Fleet:
    """The fleet a run would follow; nothing is written."""
    with storage.local_copy(batch.input) as path:
        return prepare(batch, path, True)


def planned_calls(batch: FleetBatch, jobs: SageMakerJobs, first: Sequence[Call]) -> list[Call]:
    """What a run would write, in order: the shards and `fleet.json` (unless there already), the
    cancel marker's removal, `first` (the model), the shards' jobs, the output (and error) file."""
    layout = Layout(batch.work)
    new = not storage.exists(layout.at(FLEET))
    fleet = preview(batch)
    shards = [put(layout.shard_file(s), f"<{s.lines} request lines>") for s in fleet.shards]
    saved = [*shards, put(layout.at(FLEET), "<the fleet>")] if new else []
    marker = [remove(layout.at(CANCEL))] if cancelled(layout) else []
    todo = [shard for shard in pending(fleet, layout) if not attachable(shard, jobs)]
    created = [
        jobs.call(layout.spec(next_job(batch.name, shard), shard, slot % jobs.slots))
        for slot, shard in enumerate(todo)
    ]
    merged = [put(batch.output, f"<{fleet.lines} answer lines in input order>")]
    if batch.error_file:
        merged.append(put(batch.error_file, "<the lines that failed>"))
    return [*saved, *marker, *first, *created, *merged]


async def run(batch: FleetBatch, jobs: Jobs, ready: Callable[[], object] = lambda: None) -> int:
    """Prepare, run and merge; 0 when every line has an answer. `ready` makes the model."""
    layout = Layout(batch.work)
    with storage.local_copy(batch.input) as path:
        fleet = prepare(batch, path, False)
        with contextlib.suppress(FileNotFoundError):
            storage.remove(layout.at(CANCEL))
        ready()
        finished = False
        try:
            finished = await run_shards(fleet, layout, jobs, batch.name)
        finally:
            summary = merge(fleet, layout, path, batch.output, batch.error_file)
            complete = finished and not pending(fleet, layout)
            say(report(summary, fleet, batch.price, complete))
    return 0 if complete else 1


def cancel_plan(work: str) -> Plan:
    """Write the cancel marker under `work`."""
    line = f"no new job will start for {work}; running jobs finish and their output is kept"
    return Plan((Step((put(Layout(work).at(CANCEL), b"cancel\n"),)),), report=lambda _: say(line))
