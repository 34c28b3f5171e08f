"""`vllm-sagemaker deploy ...`: endpoints, transform jobs, invocations and clean-up on SageMaker.

Each command builds its plan with `deploy.aws.plan` and carries it out with `deploy.aws.run`;
`--dry-run` prints the plan as JSON and calls nothing.
"""

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import PurePosixPath
from typing import Any

import boto3
import botocore.exceptions

from vllm_sagemaker.deploy.aws import plan as aws_plan
from vllm_sagemaker.deploy.aws import run as aws_run
from vllm_sagemaker.deploy.aws import split
from vllm_sagemaker.deploy.aws.instances import TRANSFORM_FAMILIES, gpu_count
from vllm_sagemaker.deploy.aws.plan import Call, ModelSource
from vllm_sagemaker.deploy.fleet import runner as fleet
from vllm_sagemaker.deploy.fleet.jobs import LocalJobs, SageMakerJobs, TransformSettings
from vllm_sagemaker.deploy.io import storage
from vllm_sagemaker.handler.core import s3_uri
from vllm_sagemaker.handler.core.jsonlines import iter_records

ROLE_VARIABLE = "SAGEMAKER_ROLE_ARN"


def _env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"deploy: --env takes KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _role(args: argparse.Namespace) -> str:
    role = args.role or os.environ.get(ROLE_VARIABLE)
    if role:
        return role
    if args.dry_run:
        return f"<{ROLE_VARIABLE}>"
    raise SystemExit(f"deploy: give --role ARN or set {ROLE_VARIABLE}")


def _source(args: argparse.Namespace) -> ModelSource:
    if args.stream_weights and not args.model_prefix:
        raise SystemExit("deploy: --stream-weights streams from --model-prefix; give one")
    return ModelSource(args.model_id, args.model_data, args.model_prefix, args.stream_weights)


def _endpoint_exists(name: str) -> bool:
    client = boto3.client("sagemaker")
    try:
        client.describe_endpoint(EndpointName=name)
    except botocore.exceptions.ClientError:
        return False
    return True


def endpoint(args: argparse.Namespace) -> int:
    version = None
    if not args.dry_run and _endpoint_exists(args.name):
        version = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        print(f"deploy: {args.name} exists; updating it to version {version}", file=sys.stderr)
    calls = aws_plan.endpoint_calls(
        args.name,
        args.image,
        _source(args),
        args.instance_type,
        args.instance_count,
        _env(args.env),
        _role(args),
        args.async_output,
        version,
    )
    aws_run.execute(calls, args.dry_run)
    if not args.dry_run and not args.no_wait:
        describe = Call("sagemaker", "DescribeEndpoint", {"EndpointName": args.name})
        aws_run.wait_for(describe, "EndpointStatus", {"InService"}, {"Failed"})
        print(f"deploy: endpoint {args.name} is InService", file=sys.stderr)
    return 0


def split_input(input_prefix: str, instances: int) -> str:
    """The prefix the job should read: `input_prefix` itself when it holds at least as many
    files as instances, else a new prefix holding the files split into whole-line parts."""
    files = storage.list_inputs(input_prefix)
    if len(files) >= instances:
        return input_prefix
    bucket, key = s3_uri.s3_parts(input_prefix)
    target = f"s3://{bucket}/{key.rstrip('/')}-split-{instances}/"
    with tempfile.TemporaryDirectory() as tmp:
        counts = []
        for file in files:
            with storage.reading(file.uri) as source:
                counts.append(sum(1 for _ in iter_records(source)))
        for file, count, parts in zip(
            files, counts, split.parts_per_file(counts, instances), strict=True
        ):
            with storage.reading(file.uri) as source:
                lines = iter_records(source)
                for index, (start, end) in enumerate(split.ranges(count, parts)):
                    part = os.path.join(tmp, "part")
                    with open(part, "wb") as out:
                        for _ in range(end - start):
                            out.write(next(lines) + b"\n")
                    relative = PurePosixPath(file.relative)
                    name = str(
                        relative.with_name(f"{relative.stem}.part-{index:05d}{relative.suffix}")
                    )
                    storage.publish(part, storage.joined(target, name))
    print(f"deploy: split {len(files)} file(s) into parts under {target}", file=sys.stderr)
    return target


def _check_transform(args: argparse.Namespace) -> None:
    """What a transform job needs of the model and the instance type; SystemExit if amiss."""
    if args.model_prefix and not args.stream_weights:
        raise SystemExit(
            "deploy: --model-prefix cannot be used for Batch Transform: SageMaker does not copy "
            "an uncompressed S3 prefix (ModelDataSource) for transform jobs. Add "
            "--stream-weights (the container streams the weights from the prefix itself), pack "
            "the model as model.tar.gz and give --model-data, or use --model-id."
        )
    family = args.instance_type.split(".")[1] if args.instance_type.count(".") == 2 else ""
    if gpu_count(args.instance_type) and family not in TRANSFORM_FAMILIES:
        raise SystemExit(
            f"deploy: {args.instance_type} cannot run transform jobs; GPU families allowed: "
            + ", ".join(TRANSFORM_FAMILIES)
        )
    if gpu_count(args.instance_type):
        print(
            "deploy: note: transform instances run NVIDIA driver 470 or 535 (CUDA <= 12.2); an "
            "image built for a newer CUDA may fail to start there",
            file=sys.stderr,
        )


def transform(args: argparse.Namespace) -> int:
    _check_transform(args)
    input_prefix = args.input if args.dry_run else split_input(args.input, args.instance_count)
    env = aws_plan.model_env(_env(args.env), args.instance_type)
    calls = [
        aws_plan.create_model(args.name, args.image, _source(args), env, _role(args)),
        aws_plan.transform_call(
            args.name,
            input_prefix,
            args.output,
            args.instance_type,
            args.instance_count,
            args.max_payload_mb,
            args.max_concurrent_transforms,
            args.join_source == "Input",
        ),
    ]
    aws_run.execute(calls, args.dry_run)
    if not args.dry_run and not args.no_wait:
        describe = Call("sagemaker", "DescribeTransformJob", {"TransformJobName": args.name})
        aws_run.wait_for(describe, "TransformJobStatus", {"Completed"}, {"Failed", "Stopped"})
        for file in storage.list_inputs(input_prefix):
            print(storage.joined(args.output, file.relative + ".out"))
    return 0


def _model_exists(name: str) -> bool:
    try:
        boto3.client("sagemaker").describe_model(ModelName=name)
    except botocore.exceptions.ClientError:
        return False
    return True


def fleet_batch(args: argparse.Namespace) -> int:
    """`deploy batch`: an OpenAI batch file on transform instances (or --local containers)."""
    if args.cancel:
        return fleet.cancel(args.work_prefix)
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
            return asyncio.run(fleet.run(batch, LocalJobs(args.local, settings)))
        return _fleet_on_sagemaker(args, batch, settings)
    except fleet.Unusable as error:
        print(f"deploy: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "deploy: stopped; no new job starts. Transform jobs already started keep running; "
            "run the same command again to collect them and finish the rest",
            file=sys.stderr,
        )
        return 130


def _fleet_on_sagemaker(
    args: argparse.Namespace, batch: fleet.FleetBatch, settings: TransformSettings
) -> int:
    """The shards as transform jobs: only the plan with --dry-run, else the model (made once)
    and the run."""
    if not (args.image and args.instance_type and _has_model(args)):
        raise SystemExit(
            "deploy: batch on SageMaker needs --image, --instance-type and a model "
            "(--model-id, --model-data or --model-prefix); or give --local URL..."
        )
    _check_transform(args)
    model = aws_plan.create_model(
        args.name,
        args.image,
        _source(args),
        aws_plan.model_env(_env(args.env), args.instance_type),
        _role(args),
    )
    jobs = SageMakerJobs(
        args.name, args.instance_type, args.instance_count, settings, args.poll_seconds
    )
    if args.dry_run:
        plan = fleet.preview(batch)
        calls = fleet.planned_calls(plan, fleet.Layout(batch.work), jobs, args.name)
        aws_run.execute([model, *calls], True)
        return 0
    if not _model_exists(args.name):
        aws_run.execute([model], False)
    return asyncio.run(fleet.run(batch, jobs))


def _has_model(args: argparse.Namespace) -> bool:
    return bool(args.model_id or args.model_data or args.model_prefix)


def _created_for(name: str) -> tuple[list[str], list[str]]:
    """The endpoint configs and models named `name` or `name-<version>`."""
    client = boto3.client("sagemaker")

    def ours(items: list[dict[str, Any]], key: str) -> list[str]:
        names = [item[key] for item in items]
        return [n for n in names if n == name or n.startswith(name + "-")]

    configs = client.list_endpoint_configs(NameContains=name, MaxResults=100)["EndpointConfigs"]
    models = client.list_models(NameContains=name, MaxResults=100)["Models"]
    return ours(configs, "EndpointConfigName"), ours(models, "ModelName")


def delete(args: argparse.Namespace) -> int:
    if args.dry_run:
        aws_run.execute(aws_plan.delete_calls(args.name, [args.name], [args.name]), True)
        return 0
    configs, models = _created_for(args.name)
    for call in aws_plan.delete_calls(args.name, configs, models):
        try:
            aws_run.execute([call], False)
        except botocore.exceptions.ClientError as error:
            print(f"deploy: {call.operation}: {error}", file=sys.stderr)
    return 0


def _body(text: str) -> bytes:
    if text.startswith("@"):
        with open(text[1:], "rb") as file:
            return file.read()
    return text.encode()


def invoke_async(name: str, body: bytes, dry_run: bool) -> int:
    """Upload the body beside the endpoint's async outputs, invoke, print where the answer
    will appear."""
    if dry_run:
        params = {"EndpointName": name, "InputLocation": "<S3OutputPath>/inputs/<id>.json"}
        aws_run.execute([Call("sagemaker-runtime", "InvokeEndpointAsync", params)], True)
        return 0
    client = boto3.client("sagemaker")
    config_name = client.describe_endpoint(EndpointName=name)["EndpointConfigName"]
    config = client.describe_endpoint_config(EndpointConfigName=config_name)
    output = config.get("AsyncInferenceConfig", {}).get("OutputConfig", {}).get("S3OutputPath")
    if not output:
        raise SystemExit(f"deploy: {name} is not an async endpoint (deploy it with --async-output)")
    location = storage.joined(output, f"inputs/{uuid.uuid4().hex}.json")
    bucket, key = s3_uri.s3_parts(location)
    storage.s3_client().put_object(Bucket=bucket, Key=key, Body=body)
    params = {"EndpointName": name, "InputLocation": location, "ContentType": "application/json"}
    (answer,) = aws_run.execute([Call("sagemaker-runtime", "InvokeEndpointAsync", params)], False)
    print(answer["OutputLocation"])
    return 0


def invoke(args: argparse.Namespace) -> int:
    body = _body(args.body)
    if args.use_async:
        return invoke_async(args.name, body, args.dry_run)
    params: dict[str, Any] = {
        "EndpointName": args.name,
        "ContentType": "application/json",
        "Body": body,
    }
    if args.stream:
        call = Call("sagemaker-runtime", "InvokeEndpointWithResponseStream", params)
    else:
        call = Call("sagemaker-runtime", "InvokeEndpoint", params)
    if args.dry_run:
        aws_run.execute(
            [Call(call.service, call.operation, {**params, "Body": body.decode()})], True
        )
        return 0
    (answer,) = aws_run.execute([call], False)
    if not args.stream:
        sys.stdout.buffer.write(answer["Body"].read() + b"\n")
        return 0
    for text in stream_text(answer["Body"]):
        sys.stdout.write(text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def stream_text(events: Any) -> Any:
    """The generated text in a stream of server-sent events, as it arrives."""
    pending = b""
    for event in events:
        pending += event.get("PayloadPart", {}).get("Bytes", b"")
        *lines, pending = pending.split(b"\n")
        for line in lines:
            data = line.removeprefix(b"data:").strip()
            if not line.startswith(b"data:") or data == b"[DONE]":
                continue
            for choice in json.loads(data).get("choices", []):
                yield choice.get("text") or (choice.get("delta") or {}).get("content") or ""


def image(args: argparse.Namespace) -> int:
    ecr = Call("ecr", "GetAuthorizationToken", {})
    create = Call(
        "ecr",
        "CreateRepository",
        {
            "repositoryName": args.repository,
            "tags": [{"Key": t["Key"], "Value": t["Value"]} for t in aws_plan.TAGS],
        },
    )
    if args.dry_run:
        aws_run.execute(
            [
                Call("ecr", "DescribeRepositories", {"repositoryNames": [args.repository]}),
                create,
                ecr,
            ],
            True,
        )
        return 0
    client = boto3.client("ecr")
    try:
        repository = client.describe_repositories(repositoryNames=[args.repository])[
            "repositories"
        ][0]
    except client.exceptions.RepositoryNotFoundException:
        repository = aws_run.execute([create], False)[0]["repository"]
    uri = f"{repository['repositoryUri']}:{args.tag}"
    auth = aws_run.execute([ecr], False)[0]["authorizationData"][0]
    user, password = base64.b64decode(auth["authorizationToken"]).decode().split(":", 1)
    registry = auth["proxyEndpoint"]
    for command, stdin in (
        ([args.docker, "login", "--username", user, "--password-stdin", registry], password),
        ([args.docker, "build", "-t", uri, args.context], None),
        ([args.docker, "push", uri], None),
    ):
        subprocess.run(command, input=stdin, text=True, check=True)
    print(uri)
    return 0


def _model_options(
    parser: argparse.ArgumentParser, prefix_allowed: bool, required: bool = True
) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--model-id", help="a Hugging Face model id (HF_MODEL_ID)")
    source.add_argument("--model-data", metavar="S3_TAR_GZ", help="s3://.../model.tar.gz")
    source.add_argument(
        "--model-prefix",
        metavar="S3_PREFIX",
        help="an uncompressed S3 prefix"
        + ("" if prefix_allowed else " (only with --stream-weights)"),
    )
    parser.add_argument(
        "--stream-weights",
        action="store_true",
        help="with --model-prefix: the container streams the weights from S3 to the engine "
        "(vLLM's Run:ai streamer) instead of SageMaker downloading them before start",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="deploy_command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dry-run", action="store_true", help="print the AWS calls as JSON only")

    build = commands.add_parser("image", parents=[common], help="build and push the image to ECR")
    build.add_argument("--repository", default="vllm-sagemaker")
    build.add_argument("--tag", default="latest")
    build.add_argument("--context", default=".", help="the docker build context")
    build.add_argument("--docker", default="docker", help="the docker CLI to use")
    build.set_defaults(handler=image)

    hosted = commands.add_parser("endpoint", parents=[common], help="create a SageMaker endpoint")
    hosted.add_argument("--name", required=True)
    hosted.add_argument("--image", required=True)
    _model_options(hosted, True)
    hosted.add_argument("--instance-type", required=True)
    hosted.add_argument("--instance-count", type=int, default=1)
    hosted.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    hosted.add_argument("--role", help=f"execution role ARN (default ${ROLE_VARIABLE})")
    hosted.add_argument("--async-output", metavar="S3_PREFIX", help="make it an async endpoint")
    hosted.add_argument("--no-wait", action="store_true")
    hosted.set_defaults(handler=endpoint)

    job = commands.add_parser("transform", parents=[common], help="run a Batch Transform job")
    job.add_argument("--name", required=True)
    job.add_argument("--image", required=True)
    _model_options(job, False)
    job.add_argument("--input", required=True, metavar="S3_PREFIX")
    job.add_argument("--output", required=True, metavar="S3_PREFIX")
    job.add_argument("--instance-type", required=True)
    job.add_argument("--instance-count", type=int, default=1)
    job.add_argument("--max-payload-mb", type=int, default=1)
    job.add_argument("--max-concurrent-transforms", type=int, default=2)
    job.add_argument("--join-source", choices=["Input", "None"], default="None")
    job.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    job.add_argument("--role", help=f"execution role ARN (default ${ROLE_VARIABLE})")
    job.add_argument("--no-wait", action="store_true")
    job.set_defaults(handler=transform)

    fleet_job = commands.add_parser(
        "batch",
        parents=[common],
        help="run an OpenAI batch file on a fleet of Batch Transform instances",
    )
    fleet_job.add_argument("--name", required=True, help="names the model and the jobs")
    fleet_job.add_argument("--image")
    _model_options(fleet_job, False, required=False)
    fleet_job.add_argument("--instance-type")
    fleet_job.add_argument(
        "--instance-count", type=int, default=1, help="transform jobs (one instance each) at once"
    )
    fleet_job.add_argument("--max-payload-mb", type=int, default=1)
    fleet_job.add_argument("--max-concurrent-transforms", type=int, default=2)
    fleet_job.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    fleet_job.add_argument("--role", help=f"execution role ARN (default ${ROLE_VARIABLE})")
    fleet.add_arguments(fleet_job)
    fleet_job.set_defaults(handler=fleet_batch)

    call = commands.add_parser("invoke", parents=[common], help="call an endpoint")
    call.add_argument("--name", required=True)
    call.add_argument("--body", required=True, help="JSON, or @file")
    mode = call.add_mutually_exclusive_group()
    mode.add_argument("--stream", action="store_true", help="print tokens as they arrive")
    mode.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="async endpoint: upload the body, print the S3 location of the answer",
    )
    call.set_defaults(handler=invoke)

    remove = commands.add_parser("delete", parents=[common], help="delete what deploy created")
    remove.add_argument("--name", required=True)
    remove.set_defaults(handler=delete)


def main(args: argparse.Namespace) -> int:
    try:
        return args.handler(args)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        print(f"deploy: {error}", file=sys.stderr)
        return 1
