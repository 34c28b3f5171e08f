"""`vllm-sagemaker transform`: its options, named after CreateTransformJob's fields, and its plan,
the job they ask for (`deploy.transform.job`): a `deploy.base.command.Command`."""

import argparse
import dataclasses

from vllm_sagemaker.deploy.base import interrupts, invocations, profile
from vllm_sagemaker.deploy.base.command import Check
from vllm_sagemaker.deploy.base.plan import Plan, Step
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.transform import jsonpath
from vllm_sagemaker.deploy.transform.data_processing import DataProcessing
from vllm_sagemaker.deploy.transform.job import TransformJob, run

# The options named as the job's fields.
FIELDS = {field.name for field in dataclasses.fields(TransformJob)}
SUMMARY = "run a Batch Transform job locally against a running container"
DESCRIPTION = (
    "Run a SageMaker Batch Transform job against a running container (local or remote), the way "
    "SageMaker drives it: /ping, /execution-parameters, then mini-batches on /invocations. "
    "Inputs and outputs are local paths or s3:// prefixes. Exit status: 0 when every file was "
    "transformed, 1 when some failed, 2 when the job could not start."
)
CHECKS: tuple[Check, ...] = ()


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint", required=True, help="the container, e.g. http://localhost:8080"
    )
    parser.add_argument("--input", required=True, help="a file, a directory or s3://bucket/prefix")
    parser.add_argument("--output", required=True, help="a directory or s3://bucket/prefix")
    profile.add_profile_argument(parser)
    parser.add_argument("--content-type", help="sent as Content-Type, e.g. application/jsonlines")
    parser.add_argument("--accept", help="sent as Accept")
    parser.add_argument("--split-type", choices=["Line", "None"], default="None")
    parser.add_argument("--batch-strategy", choices=["MultiRecord", "SingleRecord"])
    parser.add_argument("--max-payload-mb", type=int, metavar="N")
    parser.add_argument("--max-concurrent-transforms", type=int, metavar="N")
    parser.add_argument("--assemble-with", choices=["Line", "None"], default="None")
    parser.add_argument("--join-source", choices=["Input", "None"], default="None")
    parser.add_argument("--input-filter", metavar="JSONPATH", help="e.g. $.body or $['prompt']")
    parser.add_argument(
        "--output-filter", metavar="JSONPATH", help="e.g. $['id','SageMakerOutput']"
    )
    parser.add_argument("--max-retries", type=int, default=3, metavar="N", help="0-3 (default 3)")
    parser.add_argument(
        "--timeout", type=float, default=600.0, metavar="SECONDS", help="per request (default 600)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="skip input files whose .out already exists"
    )
    invocations.add_wait_ready_argument(parser)
    invocations.add_api_key_argument(parser)


def job_from_args(args: argparse.Namespace) -> TransformJob:
    def compiled(expression: str | None) -> jsonpath.JsonPath | None:
        return jsonpath.compiled(expression) if expression else None

    same = {name: value for name, value in vars(args).items() if name in FIELDS}
    return TransformJob(
        **{**same, "api_key": invocations.api_key(args.api_key)},
        split_lines=args.split_type == "Line",
        assemble_lines=args.assemble_with == "Line",
        processing=DataProcessing(
            compiled(args.input_filter), args.join_source == "Input", compiled(args.output_filter)
        ),
        timeout_s=args.timeout,
        wait_ready_s=args.wait_ready,
    )


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    """0 when every file was transformed, 1 when some failed, 2 when the job could not start."""
    job = job_from_args(args)
    return Plan((Step((), make=lambda calls, make: interrupts.run(run(job))),))
