"""`deploy batch`: an OpenAI batch file on transform instances, one transform job per shard
(`deploy.kit.fleet`), or on running containers with `--local`."""

import argparse
import asyncio
import sys

from vllm_sagemaker.deploy.base.invoke import api_key
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.run import execute
from vllm_sagemaker.deploy.kit.checks import env_from_pairs
from vllm_sagemaker.deploy.kit.fleet import run as fleet
from vllm_sagemaker.deploy.kit.fleet.jobs import LocalJobs, SageMakerJobs, TransformSettings
from vllm_sagemaker.deploy.kit.options import (
    has_model,
    instance_note,
    role,
    say,
    source,
    transform_note,
)
from vllm_sagemaker.deploy.kit.plans.model import create_model, model_calls, model_env


def main(args: argparse.Namespace) -> int:
    if args.cancel:
        return fleet.cancel(args.work_prefix, args.dry_run)
    if args.api_key and not args.local:
        raise SystemExit(
            "deploy: --api-key is for --local containers: SageMaker's transform jobs call the "
            "container without one (leave SM_VLLM_API_KEY unset there)"
        )
    if not args.input_file or not args.output_file:
        raise SystemExit("deploy: batch needs --input-file and --output-file")
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
            return asyncio.run(fleet.run(batch, jobs))
        return _on_sagemaker(args, batch, settings)
    except fleet.Unusable as error:
        say(str(error))
        return 2
    except KeyboardInterrupt:
        say(
            "stopped; no new job starts. Transform jobs already started keep running; "
            "run the same command again to collect them and finish the rest"
        )
        return 130


def _on_sagemaker(
    args: argparse.Namespace, batch: fleet.FleetBatch, settings: TransformSettings
) -> int:
    """The shards as transform jobs: the model (made once, or reused when SageMaker holds it as
    asked), then the run; with --dry-run, what the run would write."""
    if not (args.image and args.instance_type and has_model(args)):
        raise SystemExit(
            "deploy: batch on SageMaker needs --image, --instance-type and a model "
            "(--model-id, --model-data or --model-prefix); or give --local URL..."
        )
    reads = Reads(args.dry_run)
    instance_note(args.instance_type)
    model = create_model(
        args.name,
        args.image,
        source(args),
        model_env(env_from_pairs(args.env), args.instance_type),
        role(args),
    )
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

    return asyncio.run(fleet.run(batch, jobs(), ready))
