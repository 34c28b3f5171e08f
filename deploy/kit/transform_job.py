"""`deploy transform`: a Batch Transform job over the JSON Lines files under --input (cut into
shards when fewer than the instances), waited for; prints where each file's answers are. A
failed call removes the model the run created unless --keep-on-failure."""

import argparse
from functools import partial

from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.command import Check
from vllm_sagemaker.deploy.base.errors import ClientError, Problem, stop_at
from vllm_sagemaker.deploy.base.plan import Plan, Step, Wait
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.kit import checks, options
from vllm_sagemaker.deploy.kit.image_checks import image_region_problem
from vllm_sagemaker.deploy.kit.options import instance_note, role, source, transform_note
from vllm_sagemaker.deploy.kit.plans import shards
from vllm_sagemaker.deploy.kit.plans.model import create_model, model_calls, model_env
from vllm_sagemaker.deploy.kit.plans.rollback import undo
from vllm_sagemaker.deploy.kit.plans.transform import shard_plan, transform_call

SUMMARY = "run a Batch Transform job over JSON Lines"
DESCRIPTION = (
    "Run a Batch Transform job over the JSON Lines files under --input (cut into shards when "
    "there are fewer files than instances); wait for it and print where each file's answers are."
)


def add_options(parser: argparse.ArgumentParser) -> None:
    options.add_name(parser, "transform", "the transform job and its model")
    options.add_model(parser, False)
    parser.add_argument(
        "--input", required=True, metavar="S3_PREFIX", help="the JSON Lines files to transform"
    )
    parser.add_argument(
        "--output", required=True, metavar="S3_PREFIX", help="where the .out files go"
    )
    options.add_container(parser)
    parser.add_argument(
        "--instance-count", type=int, default=1, metavar="N", help="instances of the job"
    )
    options.add_transforms(parser)
    parser.add_argument(
        "--join-source",
        choices=["Input", "None"],
        default="None",
        help="Input: each answer line also holds its input record",
    )
    options.add_no_wait(parser, "for the job to end")
    options.add_keep_on_failure(parser, "the model")


def shards_problem(input_prefix: str, output: str, job: str) -> Problem | None:
    cut_to = shards.shard_prefix(output, job)
    if not shards.overlap(input_prefix, cut_to):
        return None
    why = (
        f"the input's shards would go to {cut_to}, which overlaps --input {input_prefix}; give an "
        "--output outside the input"
    )
    return Problem("--output", why, output)


INPUT = Check("input", partial(checks.s3_problem, "--input"))
OUTPUT = Check("output", partial(checks.s3_problem, "--output"))
SHARDS = Check("input output name", shards_problem)
# The end states of a transform job: done, and failed.
ENDED, FAILED = frozenset({"Completed"}), frozenset({"Failed", "Stopped"})
CHECKS = (
    *(checks.REGION, checks.NAME, *checks.MODEL, INPUT, OUTPUT, SHARDS, *checks.INSTANCES),
    *(*checks.TRANSFORMS, *checks.CONTAINER, checks.ROLE),
)


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    stop_at(image_region_problem(args.image, run_region()))
    describe = Call("sagemaker", "DescribeTransformJob", {"TransformJobName": args.name})
    if reads.describe(describe, f"the plan assumes no transform job named {args.name} exists"):
        raise ClientError(
            f"a transform job named {args.name} exists; give the new job another --name"
        )
    env = model_env(checks.env_from_pairs(args.env), args.instance_type)
    model = create_model(args.name, args.image, source(args), env, role(args, reads))
    input_prefix, cut, shard_notes = shard_plan(
        reads, args.input, args.output, args.name, args.instance_count
    )
    job = transform_call(
        args.name,
        input_prefix,
        args.output,
        args.instance_type,
        args.instance_count,
        args.max_payload_mb,
        args.max_concurrent_transforms,
        args.join_source == "Input",
    )
    models, model_notes = model_calls(reads, model)
    reads.notes += [*shard_notes, *model_notes]
    reads.notes += [*instance_note(args.instance_type), *transform_note(args.instance_type)]

    def report(answers: object) -> None:
        for file in storage.list_inputs(input_prefix):
            print(storage.joined(args.output, file.relative + ".out"))

    # A job that ran and failed keeps its model: only a failed call is taken back.
    ended = Wait(describe, "TransformJobStatus", ENDED, FAILED, taken_back=False)
    return Plan(
        (Step((*cut, *models, job), ended),),
        undo=undo,
        keep_on_failure=args.keep_on_failure,
        no_wait=args.no_wait,
        report=report,
    )
