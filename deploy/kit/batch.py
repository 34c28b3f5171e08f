"""`deploy batch`: an OpenAI batch file on transform instances, one transform job per shard
(`deploy.kit.fleet`), or on running containers with `--local`."""

import argparse
import sys

from vllm_sagemaker.deploy.base import interrupts
from vllm_sagemaker.deploy.base.errors import refuse
from vllm_sagemaker.deploy.base.invoke import api_key
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.base.run import execute
from vllm_sagemaker.deploy.kit.checks import env_from_pairs
from vllm_sagemaker.deploy.kit.fleet import run as fleet
from vllm_sagemaker.deploy.kit.fleet.jobs import LocalJobs, SageMakerJobs, TransformSettings
from vllm_sagemaker.deploy.kit.image_checks import image_region_problem
from vllm_sagemaker.deploy.kit.options import instance_note, role, say, source, transform_note
from vllm_sagemaker.deploy.kit.plans.model import create_model, model_calls, model_env


def main(args: argparse.Namespace) -> int:
    if args.cancel:
        return fleet.cancel(args.work_prefix, args.dry_run)
    # Its files, and on SageMaker an image, an instance type and a model: checks.fleet_problem.
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
    try:
        if args.local and args.dry_run:
            sys.stdout.buffer.write(fleet.preview(batch).to_json() + b"\n")
            return 0
        if args.local:
            jobs = LocalJobs(args.local, settings, api_key(args.api_key))
            return interrupts.run(fleet.run(batch, jobs))
        return _on_sagemaker(args, batch, settings)
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
    args: argparse.Namespace, batch: fleet.FleetBatch, settings: TransformSettings
) -> int:
    """The shards as transform jobs: the model (made once, reused as SageMaker holds it), then
    the run; with --dry-run, what the run would write."""
    refuse(image_region_problem(args.image, run_region()))
    reads = Reads(args.dry_run)
    instance_note(args.instance_type)
    env = model_env(env_from_pairs(args.env), args.instance_type)
    model = create_model(args.name, args.image, source(args), env, role(args, reads))
    first, notes = model_calls(reads, model)
    for note in notes:
        say(note)

    def jobs() -> SageMakerJobs:
        return SageMakerJobs(
            args.name, args.instance_type, args.instance_count, settings, args.poll_seconds
        )

    if args.dry_run:
        read = f"the batch's input {batch.input} and work prefix {batch.work}"
        calls = reads.required(lambda: fleet.planned_calls(batch, jobs(), first), read)
        transform_note(args.instance_type)
        execute(calls, True, reads.assumed)
        return 0

    def ready() -> None:
        transform_note(args.instance_type)
        execute(first, False)

    return interrupts.run(fleet.run(batch, jobs(), ready))
