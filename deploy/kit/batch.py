"""`deploy batch`: an OpenAI batch file on transform instances, one transform job per shard
(`deploy.kit.fleet`), or on running containers with `--local`."""

import argparse
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import Any

from vllm_sagemaker.core import s3_uri
from vllm_sagemaker.deploy.base import interrupts
from vllm_sagemaker.deploy.base.calls import POLL_S, Call
from vllm_sagemaker.deploy.base.command import Check, env_from_pairs, given
from vllm_sagemaker.deploy.base.errors import Problem, stop_at
from vllm_sagemaker.deploy.base.invocations import add_api_key_argument, api_key
from vllm_sagemaker.deploy.base.plan import Make, Plan, Step
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.kit import checks, options
from vllm_sagemaker.deploy.kit.checks import positive_problem, s3_problem
from vllm_sagemaker.deploy.kit.fleet import run as fleet
from vllm_sagemaker.deploy.kit.fleet.jobs import LocalJobs, SageMakerJobs, TransformSettings
from vllm_sagemaker.deploy.kit.image_checks import image_region_problem
from vllm_sagemaker.deploy.kit.options import instance_note, role, source, transform_note
from vllm_sagemaker.deploy.kit.plans.model import create_model, model_calls, model_env
from vllm_sagemaker.deploy.kit.plans.shards import DEFAULT_SHARD_LINES

SUMMARY = "run an OpenAI batch file on a fleet of Batch Transform instances"
DESCRIPTION = (
    "Run an OpenAI batch file on transform jobs, one instance each, --instance-count at a time "
    "(or on running containers with --local): the file is checked and cut into shards under "
    "--work-prefix, and the answers are merged in input order. Running the same command again "
    "finishes what an earlier run left."
)


def add_options(parser: argparse.ArgumentParser) -> None:
    options.add_name(parser, "batch", "the model, and the jobs NAME-<shard>-<attempt>")
    options.add_model(parser, False, required=False)
    options.add_container(parser, required=False)
    parser.add_argument(
        "--instance-count",
        type=int,
        default=1,
        metavar="N",
        help="transform jobs (one instance each) at once",
    )
    options.add_transforms(parser)
    parser.add_argument(
        "-i", "--input-file", metavar="INPUT", help="the OpenAI batch file: a path or s3:// URL"
    )
    parser.add_argument(
        "-o", "--output-file", metavar="OUTPUT", help="where the answers go: a path or s3:// URL"
    )
    parser.add_argument("--error-file", metavar="PATH", help="failed lines go here")
    parser.add_argument(
        "--work-prefix",
        required=True,
        metavar="PREFIX",
        help="s3:// prefix (a directory with --local) for shards, outputs and fleet.json",
    )
    parser.add_argument(
        "--shard-lines",
        type=int,
        default=DEFAULT_SHARD_LINES,
        metavar="N",
        help=f"at most N lines per shard (default {DEFAULT_SHARD_LINES})",
    )
    parser.add_argument(
        "--instance-price", type=float, metavar="USD", help="price of one instance-hour"
    )
    parser.add_argument(
        "--cancel", action="store_true", help="start no new job for this --work-prefix"
    )
    parser.add_argument(
        "--local",
        nargs="+",
        metavar="URL",
        help="run the shards with the local transform runner against these containers",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=POLL_S,
        metavar="S",
        help=f"how often transform jobs are polled (default {POLL_S:g})",
    )
    add_api_key_argument(parser, " (with --local)")


def fleet_problem(
    cancel: bool,
    local: list[str] | None,
    api_key: str | None,
    input_file: str | None,
    output_file: str | None,
    image: str | None,
    instance_type: str | None,
    *model: str | None,
) -> Problem | None:
    if cancel:
        return None
    if not input_file or not output_file:
        return Problem("--input-file and --output-file", "deploy batch needs both (or --cancel)")
    if local:
        return None
    if api_key:
        why = (
            "is for --local containers: SageMaker's transform jobs call the container without one "
            "(leave SM_VLLM_API_KEY unset there)"
        )
        return Problem("--api-key", why, sep=" ")
    if not (image and instance_type and any(model)):
        needed = "--image, --instance-type and a model (--model-id, --model-data or --model-prefix)"
        return Problem(needed, "deploy batch on SageMaker needs them; or give --local URL...")
    return None


def file_problem(option: str, value: str) -> Problem | None:
    return s3_problem(option, value) if s3_uri.is_s3(value) else None


FLEET = Check(
    "cancel local api_key input_file output_file image instance_type "
    "model_id model_data model_prefix",
    fleet_problem,
)
INPUT_FILE = Check("input_file", given(partial(file_problem, "--input-file")))
OUTPUT_FILE = Check("output_file", given(partial(file_problem, "--output-file")))
ERROR_FILE = Check("error_file", given(partial(file_problem, "--error-file")))
WORK_PREFIX = Check("work_prefix", given(partial(s3_problem, "--work-prefix")), unless="local")
SHARD_LINES = Check("shard_lines", partial(checks.range_problem, "--shard-lines", least=1))
POLL = Check("poll_seconds", partial(positive_problem, "--poll-seconds"))
PRICE = Check("instance_price", given(partial(positive_problem, "--instance-price")))
CHECKS = (
    *(checks.REGION, checks.NAME, *checks.MODEL, FLEET, INPUT_FILE, OUTPUT_FILE, ERROR_FILE),
    *(WORK_PREFIX, *checks.INSTANCES, *checks.TRANSFORMS, SHARD_LINES, POLL, PRICE),
    *(*checks.CONTAINER, checks.ROLE),
)


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    if args.cancel:
        return fleet.cancel_plan(args.work_prefix)
    # Its files, and on SageMaker an image, an instance type and a model: fleet_problem.
    settings = TransformSettings(args.max_payload_mb, args.max_concurrent_transforms)
    batch = fleet.FleetBatch(
        args.name,
        args.input_file,
        args.output_file,
        args.error_file,
        args.work_prefix,
        len(args.local) if args.local else args.instance_count,
        args.shard_lines,
        args.instance_price,
    )
    if args.local and args.dry_run:
        return Plan((), preview=fleet.preview(batch).to_json().decode())
    if args.local:
        jobs = LocalJobs(args.local, settings, api_key(args.api_key))
        return Plan((Step((), make=lambda calls, make: ran(args, fleet.run(batch, jobs))),))
    return _on_sagemaker(args, reads, batch, settings)


def ran(args: argparse.Namespace, run: Coroutine[Any, Any, int]) -> int:
    """The fleet's run, to its end (0: every line answered); a Ctrl-C says what it leaves."""
    try:
        return interrupts.run(run)
    except KeyboardInterrupt:
        raise interrupts.Interrupted(stopped_line(bool(args.local), args.work_prefix)) from None


def stopped_line(local: bool, work: str) -> str:
    """What a Ctrl-C leaves: the shards finished; SageMaker's jobs go on, local ones stop."""
    if local:
        return interrupts.interrupted_line(
            f"no new job starts; the shards finished are kept under {work}",
            "run the same command again to finish the rest",
        )
    return interrupts.interrupted_line(
        "no new job starts; transform jobs already started keep running",
        "run the same command again to collect them and finish the rest",
    )


def _on_sagemaker(
    args: argparse.Namespace, reads: Reads, batch: fleet.FleetBatch, settings: TransformSettings
) -> Plan:
    """The shards as transform jobs: the model (made once, reused as SageMaker holds it), then
    the run; with --dry-run, what the run would write."""
    stop_at(image_region_problem(args.image, run_region()))
    reads.notes += instance_note(args.instance_type)
    env = model_env(env_from_pairs(args.env), args.instance_type)
    model = create_model(args.name, args.image, source(args), env, role(args, reads))
    first, notes = model_calls(reads, model)
    reads.notes += notes
    jobs = SageMakerJobs(
        args.name, args.instance_type, args.instance_count, settings, args.poll_seconds
    )
    if args.dry_run:
        read = f"the batch's input {batch.input} and work prefix {batch.work}"
        calls = reads.required(lambda: fleet.planned_calls(batch, jobs, first), read)
        reads.notes += transform_note(args.instance_type)
        return Plan((Step(tuple(calls)),))

    def run_fleet(calls: Sequence[Call], make: Make) -> int:
        return ran(args, fleet.run(batch, jobs, lambda: make(list(calls))))

    reads.notes += transform_note(args.instance_type)
    return Plan((Step(tuple(first), make=run_fleet),))
