"""`vllm-sagemaker batch`: its options, checks and plan, a `deploy.base.command.Command` (no
boto3 here: `--help` builds the parser). Options the parser does not know go to vLLM with
--model (`vllm_args`)."""

import argparse
import dataclasses

from vllm_sagemaker.core.install import server_missing
from vllm_sagemaker.deploy.base import interrupts, invocations, profile
from vllm_sagemaker.deploy.base.command import Check
from vllm_sagemaker.deploy.base.errors import ClientError, Problem
from vllm_sagemaker.deploy.base.plan import Plan, Step
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.batch.run import (
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_RETRIES,
    BatchSettings,
    run,
)

OPTIONS = {field.name for field in dataclasses.fields(BatchSettings)}
SUMMARY = "run an OpenAI batch file through the container's record pipeline"
DESCRIPTION = (
    "Run an OpenAI batch file (custom_id/method/url/body lines) through a running container "
    "(--endpoint) or one started for the run (--model; unknown options go to vLLM). Streams the "
    "input, keeps at most --max-inflight lines in flight, appends answers in input order as they "
    "finish, and --resume finishes an interrupted run. Exit status: 0 when every line was "
    "answered (bad lines get error lines), 1 when the run stopped (unreadable input, no engine, "
    "unwritable output)."
)


def add_options(parser: argparse.ArgumentParser) -> None:
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
    profile.add_profile_argument(parser)
    parser.add_argument(
        "--component",
        "--inference-component",
        dest="inference_component",
        metavar="NAME",
        help="with --sagemaker-endpoint: the inference component (model or adapter) to call; "
        "while it scales from zero (AWS answers that it has no capacity), the run says so once "
        f"and waits up to {invocations.SCALE_FROM_ZERO_S / 60:g} min for a copy, trying again "
        f"every {invocations.FROM_ZERO_WAIT_S:g} s or so, never counted against --max-retries",
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
    parser.add_argument(
        "--resume-from",
        metavar="OUTPUT",
        help="take the answers an earlier run kept for OUTPUT, whose delivery failed, and "
        "deliver them to -o with the rest; none is answered again",
    )
    invocations.add_wait_ready_argument(parser, "; with --endpoint")
    parser.add_argument(
        "--output-tmp-dir",
        metavar="DIR",
        help="where remote, .gz and stdout outputs are staged until the end, in a private "
        "directory removed once they are delivered (default: the system's temporary directory)",
    )
    invocations.add_api_key_argument(
        parser,
        "; with --model, the key the started engine requires (default: a fresh random one); "
        "not with --sagemaker-endpoint",
    )


def vllm_args_problem(vllm_args: list[str], model: str | None) -> str | None:
    if vllm_args and not model:
        return f"unrecognized arguments: {' '.join(vllm_args)}"
    return None


def api_key_problem(api_key: str | None, sagemaker_endpoint: str | None) -> Problem | None:
    if api_key and sagemaker_endpoint:
        why = "goes with --endpoint or --model: InvokeEndpoint cannot send one (SigV4 guards a "
        return Problem("--api-key", why + "SageMaker endpoint)", sep=" ")
    return None


def inflight_problem(max_inflight: int) -> Problem | None:
    return (
        Problem("--max-inflight", "must be at least 1", max_inflight) if max_inflight < 1 else None
    )


CHECKS = (
    Check("vllm_args model", vllm_args_problem),
    Check("api_key sagemaker_endpoint", api_key_problem),
    Check("max_inflight", inflight_problem),
)


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    """Every line answered (0), else a `ClientError` (1) or `Interrupted`."""
    missing = server_missing("batch --model") if args.model else None
    if missing:
        raise ClientError(missing)
    options = {name: value for name, value in vars(args).items() if name in OPTIONS}
    api_key = args.api_key if args.model else invocations.api_key(args.api_key)
    settings = BatchSettings(**{**options, "api_key": api_key}, serve_args=tuple(args.vllm_args))

    def answer_every_line(calls: object, make: object) -> None:
        interrupts.run(run(settings))

    return Plan((Step((), make=answer_every_line),))
