"""How `deploy batch` runs an OpenAI batch file on a fleet of Batch Transform instances.

1. Prepare: the file is checked line by line with the project's batch-line rules; refused lines
   will be error lines, and a file with no valid request stops here, before anything is spent.
   The valid lines are written as shards under the work prefix (`shards/shard-NNNNN/input.jsonl`)
   beside `fleet.json`. A fleet already there is reused when the input is the same file.
2. Run: shards without output run as transform jobs (one instance each), `--instance-count` at a
   time; when a job ends its slot takes the next shard. Before each later start the cancel marker
   is read (`--cancel` writes it); after a cancel or Ctrl-C no new job starts and every finished
   shard's output is kept.
3. Merge: the input is read again in order (a remote input is downloaded once per run and read
   from that local copy); each line's answer comes from its shard's `.out`, or
   is an error line (refused at step 1, shard failed, shard not run). Output and error files are
   written whole at every run, so a rerun that finishes the missing shards completes them.

SageMaker jobs or local containers do the work (`deploy.kit.fleet.jobs`); everything else is
shared. The fleet's state is `deploy.kit.fleet.state`'s.
"""

import asyncio
import collections
import contextlib
import hashlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.calls import Call, put, remove
from vllm_sagemaker.deploy.base.results import Sinks, Summary
from vllm_sagemaker.deploy.base.run import execute
from vllm_sagemaker.deploy.base.say import say
from vllm_sagemaker.deploy.kit.fleet.jobs import Jobs, JobSpec, SageMakerJobs
from vllm_sagemaker.deploy.kit.fleet.state import Fleet, Job, Shard
from vllm_sagemaker.deploy.kit.plans.names import job_name
from vllm_sagemaker.deploy.kit.plans.shards import DEFAULT_SHARD_LINES, shard_sizes
from vllm_sagemaker.handler.core import kinds
from vllm_sagemaker.handler.core.batch_lines import (
    CANCELLED_LINE,
    Checked,
    checked_lines,
    outcome,
)
from vllm_sagemaker.handler.core.errors import RequestError
from vllm_sagemaker.handler.core.formats import batch_error_line
from vllm_sagemaker.handler.core.jsonlines import iter_records

FLEET = "fleet.json"
CANCEL = "cancel"
INPUT_NAME = "input.jsonl"


class Unusable(Exception):
    """The file cannot run at all; nothing was started."""


@dataclass(frozen=True)
class Layout:
    """Where a batch's files live under its work prefix."""

    work: str

    def at(self, relative: str) -> str:
        return storage.joined(self.work, relative)

    def shard_input(self, shard: Shard) -> str:
        return self.at(f"shards/{shard.name}/")

    def shard_output(self, shard: Shard) -> str:
        return self.at(f"output/{shard.name}/")

    def shard_out_file(self, shard: Shard) -> str:
        return self.at(f"output/{shard.name}/{INPUT_NAME}.out")


def checked(source_uri: str) -> Iterator[Checked]:
    """The request lines of the input, checked as every batch line is checked."""
    with storage.reading(source_uri) as source:
        yield from checked_lines(iter_records(source), kinds.INFERENCE_ROUTES)


def fingerprint(uri: str) -> str:
    digest = hashlib.sha256()
    with storage.reading(uri) as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class Source:
    """The batch file: the URI it was given as, and the local path this run reads it from."""

    uri: str
    path: str


def prepare(
    source: Source, layout: Layout, instances: int, shard_lines: int, dry_run: bool
) -> Fleet:
    """The fleet for `source`: the one under the work prefix when it was made from the same file,
    else a new one with its shards written (nothing is written for a dry run)."""
    uri = source.uri
    say(f"checking {uri}")
    found = fingerprint(source.path)
    fleet_uri = layout.at(FLEET)
    if storage.exists(fleet_uri):
        with storage.reading(fleet_uri) as existing:
            fleet = Fleet.from_json(existing.read())
        if fleet.fingerprint != found:
            raise Unusable(
                f"{layout.work} holds the fleet of another file ({fleet.input}); give this file "
                "its own --work-prefix"
            )
        say(f"reusing the fleet in {fleet_uri}: {len(fleet.shards)} shards")
        return fleet
    lines = requests = 0
    faults: list[str] = []
    for item in checked(source.path):
        lines += 1
        if item.fault is None:
            requests += 1
        elif len(faults) < 3:
            faults.append(f"line {item.number}: {item.fault.code}: {item.fault.message}")
    if requests == 0:
        raise Unusable(f"{uri} has no valid request line ({lines} lines): " + "; ".join(faults))
    sizes = shard_sizes(requests, instances, shard_lines)
    fleet = Fleet(uri, found, lines, requests, [Shard(i, n) for i, n in enumerate(sizes)])
    say(
        f"{lines} lines, {lines - requests} refused, {requests} in {len(sizes)} shards "
        f"of about {sizes[0]} lines"
    )
    if not dry_run:
        write_shards(source.path, fleet, layout)
        save(fleet, layout)
    return fleet


def write_shards(path: str, fleet: Fleet, layout: Layout) -> None:
    valid = (item.raw for item in checked(path) if item.fault is None)
    for shard in fleet.shards:
        with storage.written(layout.at(f"shards/{shard.name}/{INPUT_NAME}")) as sink:
            for _ in range(shard.lines):
                sink.write(next(valid) + b"\n")


def save(fleet: Fleet, layout: Layout) -> None:
    with storage.written(layout.at(FLEET)) as sink:
        sink.write(fleet.to_json())


def cancelled(layout: Layout) -> bool:
    return storage.exists(layout.at(CANCEL))


def pending(fleet: Fleet, layout: Layout) -> list[Shard]:
    """Shards still to run: no output yet."""
    return [shard for shard in fleet.shards if not storage.exists(layout.shard_out_file(shard))]


async def run_shards(fleet: Fleet, layout: Layout, jobs: Jobs, name: str) -> bool:
    """Run the pending shards, `jobs.slots` at a time: the first ones start together, and a slot
    whose job ends takes the next shard at once, so shards that take uneven time keep every
    instance busy. Shards whose job an earlier run started go first (they are waited for, not
    started again). Before every later start the cancel marker is read; False when a cancel left
    shards unstarted."""
    todo = sorted(pending(fleet, layout), key=lambda shard: not attachable(shard, jobs))
    if cancelled(layout):
        say(f"cancelled: {len(todo)} shards not started")
        return False
    say(f"{len(todo)} shards to run, {jobs.slots} at a time")
    queue = collections.deque(todo)
    stopped = False

    async def slot(number: int, shard: Shard) -> None:
        nonlocal stopped
        while True:
            await run_shard(fleet, layout, jobs, name, JobSlot(number, shard))
            if not queue or stopped:
                return
            if cancelled(layout):
                stopped = True
                say(f"cancelled: {len(queue)} shards not started")
                return
            shard = queue.popleft()

    firsts = [queue.popleft() for _ in range(min(jobs.slots, len(queue)))]
    await asyncio.gather(*(slot(number, shard) for number, shard in enumerate(firsts)))
    return not stopped


def attachable(shard: Shard, jobs: Jobs) -> bool:
    """Whether the shard's last job was started by an earlier run and may still be running."""
    return jobs.can_attach and shard.last is not None and shard.last.status is None


@dataclass(frozen=True)
class JobSlot:
    """A shard and the slot (instance, or local container) it runs on."""

    number: int
    shard: Shard


async def run_shard(fleet: Fleet, layout: Layout, jobs: Jobs, name: str, at: JobSlot) -> None:
    """Run one shard's job (or wait for the one an earlier run started), recording it in the fleet
    as soon as it exists and again when it ends."""
    shard = at.shard
    last = shard.last if attachable(shard, jobs) else None
    if last is None:
        last = Job(job_name(name, shard.index, len(shard.jobs) + 1))
        shard.jobs.append(last)
    spec = JobSpec(last.name, layout.shard_input(shard), layout.shard_output(shard), at.number)
    say(f"{shard.name}: {last.name} on slot {at.number + 1} of {jobs.slots}")
    await jobs.run(spec, last, lambda: save(fleet, layout))
    save(fleet, layout)
    say(f"{last.name}: {last.status}{f' ({last.reason})' if last.reason else ''}")


# The error code of a line whose shard's job failed.
SHARD_FAILED = "shard_failed"
# Why a line has no answer, as the summary says it.
JOB_FAILED = "their jobs failed"
NOT_STARTED = "their jobs did not start"


def shard_answers(fleet: Fleet, layout: Layout) -> Iterator[bytes | RequestError]:
    """Every valid line's answer in input order: its `.out` line, or why it has none."""
    for shard in fleet.shards:
        out = layout.shard_out_file(shard)
        if storage.exists(out):
            with storage.reading(out) as lines:
                count = 0
                for line in iter_records(lines):
                    count += 1
                    yield line
            if count != shard.lines:
                raise Unusable(f"{out} has {count} lines for the {shard.lines} of its shard")
            continue
        job = shard.last
        if job is not None and job.status is not None:
            why = job.reason or "it wrote no output"
            error = RequestError(
                500, f"transform job {job.name} {job.status.lower()}: {why}", SHARD_FAILED
            )
        else:
            error = replace(
                CANCELLED_LINE,
                message="the line's shard has not run (the batch was cancelled or stopped); run "
                "the same command again to finish it",
            )
        for _ in range(shard.lines):
            yield error


def merge(
    fleet: Fleet, layout: Layout, source: str, output: str, error_file: str | None
) -> Summary:
    """Write the output (and error) file from the input `source` and its shards' answers, in
    input order."""
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
            answer = None if item.fault is not None else next(answers)
            line = answer_line(item, answer)
            result = outcome(line)
            if isinstance(answer, RequestError):
                summary.skip(JOB_FAILED if answer.code == SHARD_FAILED else NOT_STARTED)
            else:
                summary.count(result)
            sinks.write(line, result)
        sinks.flush()
        storage.publish(output_path, output)
        if error_file:
            storage.publish(error_path, error_file)
    return summary


def answer_line(item: Checked, answer: bytes | RequestError | None) -> bytes:
    """A line's output line: its shard's answer, the error line of a line whose shard did not
    run, or (no answer: it was refused before) its refusal."""
    if isinstance(answer, bytes):
        return answer
    if isinstance(answer, RequestError):
        return batch_error_line(item.custom_id, answer)
    assert item.fault is not None
    return batch_error_line(item.custom_id, item.fault.error(item.number))


def instance_hours(fleet: Fleet) -> float:
    return sum(job.seconds for shard in fleet.shards for job in shard.jobs) / 3600


def report(summary: Summary, fleet: Fleet, price: float | None, complete: bool) -> str:
    hours = instance_hours(fleet)
    cost = f", about ${hours * price:.2f} at ${price:g}/instance-hour" if price else ""
    state = "" if complete else " (incomplete: run the same command again to finish)"
    return f"{summary.counts()}, {hours:.3f} instance-hours{cost}{state}"


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

    @property
    def shape(self) -> tuple[int, int]:
        """Instances and the most lines a shard holds: what the shards are cut by."""
        return self.instances, self.shard_lines


def preview(batch: FleetBatch) -> Fleet:
    """The fleet a run would follow; nothing is written."""
    with storage.local_copy(batch.input) as path:
        return prepare(Source(batch.input, path), Layout(batch.work), *batch.shape, dry_run=True)


def planned_calls(batch: FleetBatch, jobs: SageMakerJobs, first: Sequence[Call]) -> list[Call]:
    """What a run would write, in the order `run` makes the writes: the shards and `fleet.json`
    (unless the work prefix holds it already), the cancel marker's removal (when there is
    one), `first` (the model), a CreateTransformJob for every shard still to run whose job an
    earlier run did not start, then the output (and error) file. A run also rewrites `fleet.json`
    as each job starts and ends."""
    layout = Layout(batch.work)
    new = not storage.exists(layout.at(FLEET))
    fleet = preview(batch)
    saved = [
        *(
            put(layout.at(f"shards/{shard.name}/{INPUT_NAME}"), f"<{shard.lines} request lines>")
            for shard in fleet.shards
        ),
        put(layout.at(FLEET), "<the fleet>"),
    ]
    marker = [remove(layout.at(CANCEL))] if cancelled(layout) else []
    todo = [shard for shard in pending(fleet, layout) if not attachable(shard, jobs)]
    created = [
        jobs.call(
            JobSpec(
                job_name(batch.name, shard.index, len(shard.jobs) + 1),
                layout.shard_input(shard),
                layout.shard_output(shard),
                slot % jobs.slots,
            )
        )
        for slot, shard in enumerate(todo)
    ]
    merged = [put(batch.output, f"<{fleet.lines} answer lines in input order>")]
    if batch.error_file:
        merged.append(put(batch.error_file, "<the lines that failed>"))
    return [*(saved if new else []), *marker, *first, *created, *merged]


async def run(batch: FleetBatch, jobs: Jobs, ready: Callable[[], object] = lambda: None) -> int:
    """Prepare, run and merge; 0 when every line has an answer from its shard's job. `ready` is
    called once the input is known to be usable, before the first job (it makes the model)."""
    layout = Layout(batch.work)
    with storage.local_copy(batch.input) as path:
        fleet = prepare(Source(batch.input, path), layout, *batch.shape, dry_run=False)
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


def cancel(work: str, dry_run: bool) -> int:
    """Write the cancel marker under `work` (with `dry_run`, print that write instead)."""
    execute([put(Layout(work).at(CANCEL), b"cancel\n")], dry_run)
    if not dry_run:
        say(f"no new job will start for {work}; running jobs finish and their output is kept")
    return 0
