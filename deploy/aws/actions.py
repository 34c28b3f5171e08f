"""What each `vllm-sagemaker deploy` command does: endpoints, transform jobs, invocations and
clean-up on SageMaker (the options and their checks are `deploy.aws.commands`').

Each command reads what decides its plan (`deploy.aws.reads`), builds the plan with
`deploy.aws.plan` and carries it out with `deploy.aws.run`; `--dry-run` makes the same reads and
prints the same plan as JSON, and writes nothing.
"""

import argparse
import asyncio
import base64
import datetime
import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import httpx

from vllm_sagemaker.deploy.aws import plan as aws_plan
from vllm_sagemaker.deploy.aws import run as aws_run
from vllm_sagemaker.deploy.aws import split, token
from vllm_sagemaker.deploy.aws.instances import gpu_count, image_target
from vllm_sagemaker.deploy.aws.plan import Call, ModelSource
from vllm_sagemaker.deploy.aws.reads import Reads
from vllm_sagemaker.deploy.aws.validate import ROLE_VARIABLE, Refused, env_from_pairs, json_problem
from vllm_sagemaker.deploy.fleet import runner as fleet
from vllm_sagemaker.deploy.fleet.jobs import LocalJobs, SageMakerJobs, TransformSettings
from vllm_sagemaker.deploy.image import build, builders
from vllm_sagemaker.deploy.io import storage
from vllm_sagemaker.deploy.io.invoke import api_key
from vllm_sagemaker.handler.core import s3_uri
from vllm_sagemaker.handler.core.jsonlines import iter_records

# What a dry run shows for a role it was not given.
ROLE_PLACEHOLDER = f"<{ROLE_VARIABLE}>"
# Where a builder's output goes: the process's stderr (its stdout holds only the image URI).
STDERR_FD = 2


def _role(args: argparse.Namespace) -> str:
    role = args.role or os.environ.get(ROLE_VARIABLE)
    if role:
        return role
    if args.dry_run:
        return ROLE_PLACEHOLDER
    raise SystemExit(f"deploy: give --role ARN or set {ROLE_VARIABLE}")


def _source(args: argparse.Namespace) -> ModelSource:
    return ModelSource(args.model_id, args.model_data, args.model_prefix, args.stream_weights)


def _say(text: str) -> None:
    print(f"deploy: {text}", file=sys.stderr, flush=True)


def _instance_note(instance_type: str) -> None:
    if image_target(instance_type) == "cpu":
        _say(
            f"CPU instance {instance_type}: the cpu image; the kit sets no tensor parallelism "
            "and no GPU inference AMI"
        )


def default_image(reads: Reads, instance_type: str) -> str:
    """The image for an endpoint given no --image: the one `deploy image --target T` pushes for
    the instance type's image T, `<repository URI>:T` of the repository `vllm-sagemaker` in the
    region, which must hold that tag. A dry run that cannot read ECR assumes it does."""
    target = image_target(instance_type)
    if target is None:  # refused before (validate.no_image_problem)
        raise Refused(f"--image: not given, and {instance_type} takes no image the kit knows")
    repository, tag = build.REPOSITORY, build.default_tag(target)
    first = f"run `vllm-sagemaker deploy image --target {target}` first, or give --image"
    assumed = len(reads.assumed)
    found = reads.describe(
        Call("ecr", "DescribeRepositories", {"repositoryNames": [repository]}),
        f"the plan assumes ECR holds {repository}:{tag} (what `deploy image --target "
        f"{target}` pushes)",
    )
    if len(reads.assumed) > assumed:
        return f"<account>.dkr.ecr.<region>.amazonaws.com/{repository}:{tag}"
    where = boto3.session.Session().region_name
    if found is None:
        raise SystemExit(
            f"deploy: no --image given, and ECR holds no repository {repository} in {where}: "
            + first
        )
    images = Call(
        "ecr",
        "DescribeImages",
        {"repositoryName": repository, "imageIds": [{"imageTag": tag}]},
    )
    if reads.describe(images) is None:
        raise SystemExit(
            f"deploy: no --image given, and ECR's {repository} in {where} holds no image tagged "
            f"{tag}: " + first
        )
    uri = f"{found['repositories'][0]['repositoryUri']}:{tag}"
    _say(f"image: {uri} (no --image given)")
    return uri


def endpoint(args: argparse.Namespace) -> int:
    reads = Reads(args.dry_run)
    image = args.image or default_image(reads, args.instance_type)
    _instance_note(args.instance_type)
    describe = Call("sagemaker", "DescribeEndpoint", {"EndpointName": args.name})
    existing = reads.describe(
        describe,
        f"the plan assumes endpoint {args.name} does not exist; if it does, the run creates a "
        f"model and config named {args.name}-<UTC time> and calls UpdateEndpoint instead",
    )
    version = aws_plan.version() if existing else None
    if version:
        _say(f"{args.name} exists; the run updates it to version {version}")
    calls = aws_plan.endpoint_calls(
        args.name,
        image,
        _source(args),
        args.instance_type,
        args.instance_count,
        env_from_pairs(args.env),
        _role(args),
        args.async_output,
        version,
    )
    aws_run.execute(calls, args.dry_run, reads.assumed)
    if not args.dry_run and not args.no_wait:
        aws_run.wait_for(describe, "EndpointStatus", {"InService"}, {"Failed"})
        _say(f"endpoint {args.name} is InService")
    return 0


def split_plan(
    reads: Reads, input_prefix: str, output: str, job: str, instances: int
) -> tuple[str, list[Call]]:
    """The prefix the job should read and the calls that fill it: `input_prefix` itself when it
    holds at least as many files as instances, else the job's own prefix beside the output with
    the files split into whole-line parts (and the parts an earlier attempt of the job left
    there deleted)."""
    target = split.split_prefix(output, job)
    if split.overlap(input_prefix, target):
        raise SystemExit(
            f"deploy: the input's parts would go to {target}, which overlaps --input "
            f"{input_prefix}; give an --output outside the input"
        )

    def listed() -> list[storage.InputFile]:
        try:
            return storage.list_inputs(input_prefix)
        except FileNotFoundError:
            raise SystemExit(f"deploy: no input files under --input {input_prefix}") from None

    files = reads.guarded(
        listed,
        f"the files under {input_prefix}",
        f"the plan assumes they number at least {instances}; with fewer, the run first splits "
        f"them into parts under {target}",
        None,
    )
    if files is None or len(files) >= instances:
        return input_prefix, []

    def counted() -> list[split.Counted]:
        result = []
        for file in files:
            with storage.reading(file.uri) as source:
                lines = sum(1 for _ in iter_records(source))
            result.append(split.Counted(file.uri, file.relative, lines))
        return result

    puts = split.part_calls(reads.required(counted, input_prefix), instances, target)
    planned = {call.params["Key"] for call in puts}
    bucket, _ = s3_uri.s3_parts(target)
    found = reads.s3_keys(target)
    foreign = [key for key in found if not split.is_part(key)]
    if foreign:
        raise SystemExit(
            f"deploy: {target} holds {foreign[0]}, which no split wrote, and the job would read "
            "it: remove it, or give the job another --name"
        )
    deletes = [
        Call("s3", "DeleteObject", {"Bucket": bucket, "Key": key})
        for key in found
        if key not in planned
    ]
    _say(
        f"{len(files)} file(s) under {input_prefix} for {instances} instances: the run splits "
        f"them into {len(puts)} parts under {target}"
    )
    return target, [*deletes, *puts]


def _transform_note(instance_type: str) -> None:
    if gpu_count(instance_type):
        _say(
            "note: this image (vLLM 0.32, built for a CUDA newer than 12.2) does not start on "
            "NVIDIA driver 470, which transform jobs on ml.g4dn and ml.g5 get by default; on "
            "driver 535 it may with --env VLLM_ENABLE_CUDA_COMPATIBILITY=1 --env "
            "VLLM_WORKER_MULTIPROC_METHOD=spawn (untested); for GPU batch work use an endpoint "
            "and `vllm-sagemaker batch --sagemaker-endpoint` (docs/deploy.md, Batch Transform on "
            "GPU)"
        )


def model_calls(reads: Reads, model: Call) -> list[Call]:
    """The CreateModel call, unless SageMaker holds that model already as the kit would create
    it (then none); SystemExit naming the difference when it holds another model of that name."""
    name = model.params["ModelName"]
    existing = reads.describe(
        Call("sagemaker", "DescribeModel", {"ModelName": name}),
        f"the plan assumes no model named {name} exists; if one does and differs, the run stops",
    )
    if existing is None:
        return [model]
    role_known = model.params["ExecutionRoleArn"] != ROLE_PLACEHOLDER
    differences = aws_plan.model_differences(existing, model, role_known)
    if differences:
        raise SystemExit(
            f"deploy: a model named {name} exists and differs from this one ("
            + "; ".join(differences)
            + "); give another --name, or delete that model first"
        )
    _say(f"model {name} exists as asked; the run uses it")
    return []


def transform(args: argparse.Namespace) -> int:
    reads = Reads(args.dry_run)
    describe = Call("sagemaker", "DescribeTransformJob", {"TransformJobName": args.name})
    if reads.describe(describe, f"the plan assumes no transform job named {args.name} exists"):
        raise SystemExit(
            f"deploy: a transform job named {args.name} exists; give the new job another --name"
        )
    env = aws_plan.model_env(env_from_pairs(args.env), args.instance_type)
    model = aws_plan.create_model(args.name, args.image, _source(args), env, _role(args))
    input_prefix, parts = split_plan(reads, args.input, args.output, args.name, args.instance_count)
    job = aws_plan.transform_call(
        args.name,
        input_prefix,
        args.output,
        args.instance_type,
        args.instance_count,
        args.max_payload_mb,
        args.max_concurrent_transforms,
        args.join_source == "Input",
    )
    calls = [*parts, *model_calls(reads, model), job]
    _instance_note(args.instance_type)
    _transform_note(args.instance_type)
    aws_run.execute(calls, args.dry_run, reads.assumed)
    if not args.dry_run and not args.no_wait:
        aws_run.wait_for(describe, "TransformJobStatus", {"Completed"}, {"Failed", "Stopped"})
        for file in storage.list_inputs(input_prefix):
            print(storage.joined(args.output, file.relative + ".out"))
    return 0


def fleet_batch(args: argparse.Namespace) -> int:
    """`deploy batch`: an OpenAI batch file on transform instances (or --local containers)."""
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
        return _fleet_on_sagemaker(args, batch, settings)
    except fleet.Unusable as error:
        _say(str(error))
        return 2
    except KeyboardInterrupt:
        _say(
            "stopped; no new job starts. Transform jobs already started keep running; "
            "run the same command again to collect them and finish the rest"
        )
        return 130


def _fleet_on_sagemaker(
    args: argparse.Namespace, batch: fleet.FleetBatch, settings: TransformSettings
) -> int:
    """The shards as transform jobs: the model (made once, or reused when SageMaker holds it as
    asked), then the run; with --dry-run, what the run would write."""
    if not (args.image and args.instance_type and _has_model(args)):
        raise SystemExit(
            "deploy: batch on SageMaker needs --image, --instance-type and a model "
            "(--model-id, --model-data or --model-prefix); or give --local URL..."
        )
    reads = Reads(args.dry_run)
    _instance_note(args.instance_type)
    model = aws_plan.create_model(
        args.name,
        args.image,
        _source(args),
        aws_plan.model_env(env_from_pairs(args.env), args.instance_type),
        _role(args),
    )
    first = model_calls(reads, model)

    def jobs() -> SageMakerJobs:
        return SageMakerJobs(
            args.name, args.instance_type, args.instance_count, settings, args.poll_seconds
        )

    if args.dry_run:
        read = f"the batch's input {batch.input} and work prefix {batch.work}"
        calls = reads.required(lambda: fleet.planned_calls(batch, jobs(), first), read)
        _transform_note(args.instance_type)
        aws_run.execute(calls, True, reads.assumed)
        return 0

    def ready() -> None:
        _transform_note(args.instance_type)
        aws_run.execute(first, False)

    return asyncio.run(fleet.run(batch, jobs(), ready))


def _has_model(args: argparse.Namespace) -> bool:
    return bool(args.model_id or args.model_data or args.model_prefix)


def delete_plan(reads: Reads, name: str) -> tuple[list[Call], list[str]]:
    """What `deploy delete --name NAME` removes: the endpoint NAME and every endpoint config and
    model named NAME or `NAME-<UTC time>` (the kit's versions of it); nothing else (`NAME-prod`
    is another's). Also what it keeps that the endpoint uses under another name."""
    endpoint = reads.describe(Call("sagemaker", "DescribeEndpoint", {"EndpointName": name}))
    kept: list[str] = []
    if endpoint:
        current = endpoint["EndpointConfigName"]
        config = reads.describe(
            Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": current})
        )
        used = [("endpoint config", current)] + [
            ("model", variant["ModelName"])
            for variant in (config or {}).get("ProductionVariants", [])
        ]
        kept = [
            f"keeps {kind} {used_name}: endpoint {name} uses it, but the name is not {name}'s"
            for kind, used_name in used
            if not aws_plan.is_version_of(name, used_name)
        ]
    configs, models = (
        [
            found
            for found in reads.names(operation, items, key, NameContains=name)
            if aws_plan.is_version_of(name, found)
        ]
        for operation, items, key in (
            ("ListEndpointConfigs", "EndpointConfigs", "EndpointConfigName"),
            ("ListModels", "Models", "ModelName"),
        )
    )
    return aws_plan.delete_calls(name if endpoint else None, configs, models), kept


def delete(args: argparse.Namespace) -> int:
    calls, kept = delete_plan(Reads(args.dry_run), args.name)
    for line in kept:
        _say(line)
    if not calls:
        raise SystemExit(
            f"deploy: nothing to delete: no endpoint, endpoint config or model named {args.name} "
            f"or {args.name}-<UTC time>"
        )
    if args.dry_run:
        aws_run.execute(calls, True)
        return 0
    failed = 0
    for call in calls:
        try:
            aws_run.execute([call], False)
        except botocore.exceptions.ClientError as error:
            failed += 1
            _say(f"{call.operation} failed: {error}")
            if call.operation == "DeleteEndpoint":
                _say("its endpoint configs and models are kept while the endpoint stands")
                return 1
    if failed:
        _say(f"{failed} of {len(calls)} deletions failed; run the same command again to retry")
        return 1
    return 0


def _body(text: str) -> bytes:
    if text.startswith("@"):
        with open(text[1:], "rb") as file:
            return file.read()
    return text.encode()


def async_output(reads: Reads, name: str) -> str:
    """Where the async endpoint `name` writes its answers (its config's S3OutputPath)."""
    assumption = f"the plan assumes {name} is an async endpoint writing to <S3OutputPath>"
    endpoint = reads.describe(
        Call("sagemaker", "DescribeEndpoint", {"EndpointName": name}), assumption
    )
    if endpoint is None and reads.assumed:
        return "s3://<S3OutputPath>"
    if endpoint is None:
        raise SystemExit(f"deploy: there is no endpoint named {name}")
    config_name = endpoint["EndpointConfigName"]
    describe = Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": config_name})
    config = reads.describe(describe) or {}
    output = config.get("AsyncInferenceConfig", {}).get("OutputConfig", {}).get("S3OutputPath")
    if not output:
        raise SystemExit(f"deploy: {name} is not an async endpoint (deploy it with --async-output)")
    return str(output)


def invoke_async(name: str, body: bytes, dry_run: bool) -> int:
    """Upload the body beside the endpoint's async outputs, invoke, print where the answer
    will appear."""
    reads = Reads(dry_run)
    location = storage.joined(async_output(reads, name), f"inputs/{uuid.uuid4().hex}.json")
    params = {"EndpointName": name, "InputLocation": location, "ContentType": "application/json"}
    calls = [
        aws_plan.put(location, body),
        Call("sagemaker-runtime", "InvokeEndpointAsync", params),
    ]
    answers = aws_run.execute(calls, dry_run, reads.assumed)
    if answers:
        print(answers[-1]["OutputLocation"])
    return 0


def openai_base(name: str) -> str:
    """The OpenAI base URL of endpoint `name`, on the runtime API boto3 would call (so
    AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME counts)."""
    return token.base_url(boto3.client("sagemaker-runtime").meta.endpoint_url, name)


def bearer(expires_s: int) -> str:
    """A token from the credentials and region boto3 would use."""
    session = boto3.session.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise botocore.exceptions.NoCredentialsError()
    return token.token(credentials.get_frozen_credentials(), session.region_name, expires_s)


def existing_endpoint(reads: Reads, name: str) -> None:
    """Stop in one line when endpoint `name` does not exist (a token for it would be refused)."""
    call = Call("sagemaker", "DescribeEndpoint", {"EndpointName": name})
    if (
        reads.describe(call, f"the plan assumes endpoint {name} exists") is None
        and not reads.assumed
    ):
        raise SystemExit(
            f"deploy: endpoint {name} does not exist in {boto3.session.Session().region_name}"
        )


def token_command(args: argparse.Namespace) -> int:
    """Print OPENAI_BASE_URL and OPENAI_API_KEY for endpoint NAME (or, dry, only the URL)."""
    reads = Reads(args.dry_run)
    existing_endpoint(reads, args.name)
    base = openai_base(args.name)
    if args.dry_run:
        _say("dry run: the token is made from your credentials when it runs; nothing is written")
        print(f"export OPENAI_BASE_URL={shlex.quote(base)}")
        return 0
    expires_s = token.duration_s(args.expires) or token.MAX_S
    key = bearer(expires_s)
    until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expires_s)
    stamp = until.strftime("%Y-%m-%dT%H:%M:%SZ")
    if args.json:
        print(json.dumps({"base_url": base, "api_key": key, "expires_at": stamp}))
    else:
        print(f"export OPENAI_BASE_URL={shlex.quote(base)}")
        print(f"export OPENAI_API_KEY={shlex.quote(key)}")
    _say(f"the token is good until {stamp}, unless your AWS credentials expire first")
    return 0


def invoke_openai(args: argparse.Namespace, body: bytes) -> int:
    """POST the body to the endpoint's OpenAI-compatible chat route with a bearer token; print
    the answer, or (`--stream`, which asks for a stream) its text as it arrives."""
    url = openai_base(args.name) + "/chat/completions"
    if args.stream:
        body = json.dumps({**json.loads(body), "stream": True}).encode()
    if args.dry_run:
        print(json.dumps([{"method": "POST", "url": url, "body": json.loads(body)}], indent=2))
        return 0
    headers = {"Authorization": f"Bearer {bearer(token.MAX_S)}", "Content-Type": "application/json"}
    timeout = httpx.Timeout(600, connect=10)
    with httpx.stream("POST", url, content=body, headers=headers, timeout=timeout) as reply:
        if reply.status_code != 200:
            reply.read()
            raise SystemExit(f"deploy: {url} answered {reply.status_code}: {_said(reply)}")
        if not args.stream:
            sys.stdout.buffer.write(reply.read() + b"\n")
            return 0
        for text in stream_text(reply.iter_bytes()):
            sys.stdout.write(text)
            sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def _said(reply: httpx.Response) -> str:
    """What an error answer says, on one line: OpenAI's error message, else its text."""
    try:
        message = str(reply.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = reply.text
    return " ".join(message.split())[:300]


def invoke(args: argparse.Namespace) -> int:
    body = _body(args.body)
    problem = json_problem("--body", body)
    if problem:
        raise Refused(problem)
    if args.use_async:
        return invoke_async(args.name, body, args.dry_run)
    if args.openai:
        return invoke_openai(args, body)
    params: dict[str, Any] = {
        "EndpointName": args.name,
        "ContentType": "application/json",
        "Body": body,
    }
    operation = "InvokeEndpointWithResponseStream" if args.stream else "InvokeEndpoint"
    answers = aws_run.execute([Call("sagemaker-runtime", operation, params)], args.dry_run)
    if not answers:
        return 0
    if not args.stream:
        sys.stdout.buffer.write(answers[0]["Body"].read() + b"\n")
        return 0
    parts = (event.get("PayloadPart", {}).get("Bytes", b"") for event in answers[0]["Body"])
    for text in stream_text(parts):
        sys.stdout.write(text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def stream_text(chunks: Iterable[bytes]) -> Iterator[str]:
    """The generated text in a stream of server-sent events, as it arrives."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            data = line.removeprefix(b"data:").strip()
            if not line.startswith(b"data:") or data == b"[DONE]":
                continue
            for choice in json.loads(data).get("choices", []):
                yield choice.get("text") or (choice.get("delta") or {}).get("content") or ""


def image(args: argparse.Namespace) -> int:
    """Make the ECR repository if it is missing, then log in, build the CPU or GPU image and
    push it with docker, buildah or podman (`deploy.image.builders`)."""
    choice = builders.on_this_machine(args.builder)
    if choice.tool is None:
        raise Refused(choice.why)
    tool = choice.tool
    _say(f"builder: {choice.why}")
    tag = args.tag or build.default_tag(args.target)
    reads = Reads(args.dry_run)
    describe = Call("ecr", "DescribeRepositories", {"repositoryNames": [args.repository]})
    found = reads.describe(describe, f"the plan assumes repository {args.repository} is missing")
    tags = [{"Key": t["Key"], "Value": t["Value"]} for t in aws_plan.TAGS]
    create = Call("ecr", "CreateRepository", {"repositoryName": args.repository, "tags": tags})
    plan = [] if found else [create]

    def commands(repository_uri: str, registry: str, user: str) -> list[list[str]]:
        uri = f"{repository_uri}:{tag}"
        target = build.Build(args.target, uri, Path(args.context))
        return [
            builders.login(tool, registry, user),
            build.command(tool, target),
            builders.push(tool, uri),
        ]

    if args.dry_run:
        aws_run.execute(plan, True, reads.assumed)
        repository_uri = (
            found["repositories"][0]["repositoryUri"]
            if found
            else f"<registry>/{args.repository}"
        )
        registry = repository_uri.split("/", 1)[0]
        for command in commands(repository_uri, registry, builders.ECR_USER):
            _say(f"then: {build.shown(command)}")
        return 0
    answers = aws_run.execute(plan, False)
    repository = answers[0]["repository"] if answers else (found or {})["repositories"][0]
    (auth,) = aws_run.execute([Call("ecr", "GetAuthorizationToken", {})], False)
    token = auth["authorizationData"][0]
    user, password = base64.b64decode(token["authorizationToken"]).decode().split(":", 1)
    registry = builders.registry_host(token["proxyEndpoint"])
    login, *rest = commands(repository["repositoryUri"], registry, user)
    _run_builder(login, password)
    for command in rest:
        _run_builder(command)
    print(f"{repository['repositoryUri']}:{tag}")
    return 0


def _run_builder(command: list[str], stdin: str | None = None) -> None:
    """Run a builder's command with its output on stderr (stdout holds only the image URI); a
    failure reaches the client's error path as one line (`deploy.errors`)."""
    _say(f"running: {build.shown(command)}")
    subprocess.run(
        command,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        stdout=STDERR_FD,
        text=True,
        check=True,
    )


# The `deploy` subcommands, by name.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "image": image,
    "endpoint": endpoint,
    "transform": transform,
    "batch": fleet_batch,
    "invoke": invoke,
    "token": token_command,
    "delete": delete,
}
