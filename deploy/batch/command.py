"""`vllm-sagemaker batch`: its options, and the run they ask for (`deploy.batch.run`).

This module loads no boto3: `vllm-sagemaker --help` builds this command's parser.
"""

import argparse
import sys

from vllm_sagemaker.deploy.base import interrupts, invoke, profile
from vllm_sagemaker.deploy.batch.run import Stopped, run
from vllm_sagemaker.deploy.batch.settings import (
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_RETRIES,
    BatchSettings,
)
from vllm_sagemaker.handler.core.install import server_missing


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
        "--inference-component",
        metavar="NAME",
        help="with --sagemaker-endpoint: the inference component (model or adapter) to call",
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
    invoke.add_wait_ready_argument(parser, "; with --endpoint")
    parser.add_argument(
        "--output-tmp-dir",
        metavar="DIR",
        help="where remote, .gz and stdout outputs are staged until the end, in a private "
        "directory removed once they are delivered (default: the system's temporary directory)",
    )
    invoke.add_api_key_argument(
        parser,
        "; with --model, the key the started engine requires (default: a fresh random one); "
        "not with --sagemaker-endpoint",
    )


def main(args: argparse.Namespace, extra: list[str]) -> int:
    if extra and not args.model:
        print(f"batch: unrecognized arguments: {' '.join(extra)}", file=sys.stderr)
        return 2
    if args.api_key and args.sagemaker_endpoint:
        print(
            "batch: --api-key goes with --endpoint or --model: InvokeEndpoint cannot send one "
            "(SigV4 guards a SageMaker endpoint)",
            file=sys.stderr,
        )
        return 2
    missing = server_missing("batch --model") if args.model else None
    if missing:
        print(f"batch: {missing}", file=sys.stderr)
        return 1
    settings = BatchSettings(
        input=args.input_file,
        output=args.output_file,
        error_file=args.error_file,
        endpoint=args.endpoint,
        sagemaker_endpoint=args.sagemaker_endpoint,
        region=args.region,
        inference_component=args.inference_component,
        model=args.model,
        serve_args=tuple(extra),
        max_inflight=args.max_inflight,
        max_retries=args.max_retries,
        resume=args.resume,
        output_tmp_dir=args.output_tmp_dir,
        api_key=args.api_key if args.model else invoke.api_key(args.api_key),
        wait_ready_s=args.wait_ready,
    )
    try:
        # Ctrl-C: `interrupts.Interrupted`, whose line the top prints (exit status 130).
        interrupts.run(run(settings))
    except Stopped as error:
        print(f"batch: {error}", file=sys.stderr)
        return 1
    return 0
