"""`deploy invoke`: one JSON request to an endpoint, and its answer printed (or streamed, or, for
an async endpoint, where the answer will appear); with `--openai`, to its OpenAI-compatible path
with a bearer token; with `--component`, to one inference component of it. A component scaling
from zero is said in one line."""

import argparse
import json
import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from vllm_sagemaker.core.content_types import JSON
from vllm_sagemaker.deploy.base import error_answers, storage
from vllm_sagemaker.deploy.base.calls import Call, put
from vllm_sagemaker.deploy.base.command import Check
from vllm_sagemaker.deploy.base.error_answers import answered
from vllm_sagemaker.deploy.base.errors import ClientError, Problem, UsageError, os_line, stop_at
from vllm_sagemaker.deploy.base.plan import Make, Plan, Step
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.options import add_name
from vllm_sagemaker.deploy.kit.plans import openai_path

SUMMARY = "call an endpoint"
DESCRIPTION = (
    "Send one JSON request to an endpoint and print its answer (or stream it, or, for an async "
    "endpoint, print where the answer will appear)."
)


def add_options(parser: argparse.ArgumentParser) -> None:
    add_name(parser, "invoke", "the endpoint")
    parser.add_argument("--body", required=True, help="the request: JSON, or @file holding it")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--stream", action="store_true", help="print tokens as they arrive")
    mode.add_argument(
        "--async",
        dest="use_async",
        action="store_true",
        help="async endpoint: upload the body, print the S3 location of the answer",
    )
    parser.add_argument(
        "--openai",
        action="store_true",
        help="send the body to the endpoint's OpenAI-compatible path (/openai/v1/chat/"
        "completions) with a bearer token, as an OpenAI client does, instead of InvokeEndpoint",
    )
    openai_path.add_component(
        parser,
        "InferenceComponentName on InvokeEndpoint (and its streaming form); with --openai, the "
        f"{openai_path.COMPONENT_HEADER} header, the runtime API's header of "
        "InferenceComponentName "
        "(assumed to reach the component there too); not with --async (InvokeEndpointAsync "
        "takes none)",
    )


def openai_problem(openai: bool, use_async: bool) -> Problem | None:
    if openai and use_async:
        return Problem("--openai", "the OpenAI-compatible path is real-time; leave out --async")
    return None


def component_problem(component: str | None, use_async: bool) -> Problem | None:
    if component and use_async:
        why = (
            "InvokeEndpointAsync takes no inference component (async endpoints have none); leave "
            "out --async or --component"
        )
        return Problem("--component", why)
    return None


OPENAI = Check("openai use_async", openai_problem)
COMPONENT = Check("component use_async", component_problem)
CHECKS = (checks.REGION, checks.NAME, OPENAI, COMPONENT)


def from_zero_line(endpoint: str, component: str | None) -> str:
    """What a call that met no capacity is told."""
    alarm = "the component has" if component else "its components have"
    return (
        f"{error_answers.from_zero(endpoint, component)}: when {alarm} the kit's scale-to-zero "
        "alarm (`deploy component --scale-to-zero`), this call starts a copy, which takes "
        f"{error_answers.FROM_ZERO_TAKES}: try again then"
    )


def json_problem(option: str, body: bytes) -> Problem | None:
    try:
        json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        why = error if isinstance(error, json.JSONDecodeError) else "not UTF-8 text"
        return Problem(option, f"not JSON ({why}): give a JSON document, or @file holding one")
    return None


def _body(given: str) -> bytes:
    """--body: the JSON given, or (`@FILE`) the file's."""
    if not given.startswith("@"):
        return given.encode()
    try:
        return Path(given[1:]).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read the --body file: {os_line(error)}") from error


def async_output(reads: Reads, name: str) -> str:
    """Where the async endpoint `name` writes its answers (its config's S3OutputPath)."""
    assumption = f"the plan assumes {name} is an async endpoint writing to <S3OutputPath>"
    endpoint = openai_path.existing_endpoint(reads, name, assumption)
    if endpoint is None:
        return "s3://<S3OutputPath>"
    config_name = endpoint["EndpointConfigName"]
    describe = Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": config_name})
    config = reads.describe(describe) or {}
    output = config.get("AsyncInferenceConfig", {}).get("OutputConfig", {}).get("S3OutputPath")
    if not output:
        raise ClientError(f"{name} is not an async endpoint (deploy it with --async-output)")
    return str(output)


def async_plan(args: argparse.Namespace, body: bytes, reads: Reads) -> Plan:
    """Upload the body beside the endpoint's async outputs, invoke, print where the answer goes."""
    location = storage.joined(async_output(reads, args.name), f"inputs/{uuid.uuid4().hex}.json")
    params = {"EndpointName": args.name, "InputLocation": location, "ContentType": JSON}
    calls = (put(location, body), Call("sagemaker-runtime", "InvokeEndpointAsync", params))

    def report(answers: list[dict[str, Any]]) -> None:
        print(answers[-1]["OutputLocation"])

    return Plan((Step(calls),), report=report)


def openai_plan(args: argparse.Namespace, body: bytes) -> Plan:
    """POST the body to the endpoint's OpenAI-compatible chat route with a bearer token; print
    the answer, or (`--stream`, which asks for a stream) its text as it arrives."""
    url = openai_path.openai_base(args.name) + "/chat/completions"
    if args.stream:
        body = json.dumps({**json.loads(body), "stream": True}).encode()
    component = openai_path.component_headers(args.component)
    shown: dict[str, Any] = {"method": "POST", "url": url, "body": json.loads(body)}
    if component:
        shown["headers"] = component

    def post(calls: object, make: object) -> None:
        headers = {
            "Authorization": f"Bearer {openai_path.bearer(openai_path.MAX_S)}",
            "Content-Type": JSON,
            **component,
        }
        timeout = httpx.Timeout(600, connect=10)
        with httpx.stream("POST", url, content=body, headers=headers, timeout=timeout) as reply:
            if reply.status_code != 200:
                said = reply.read()
                if error_answers.no_capacity(said):
                    raise ClientError(from_zero_line(args.name, args.component))
                raise ClientError(f"{url} {answered(reply.status_code, said, reply.headers)}")
            if args.stream:
                _print_stream(reply.iter_bytes())
            else:
                sys.stdout.buffer.write(reply.read() + b"\n")

    return Plan((Step((), make=post),), preview=json.dumps([shown], indent=2))


def invoke_plan(args: argparse.Namespace, body: bytes) -> Plan:
    """InvokeEndpoint (or, with `--stream`, its streaming form); print the answer."""
    params = {"EndpointName": args.name, "ContentType": JSON, "Body": body}
    if args.component:
        params["InferenceComponentName"] = args.component
    operation = "InvokeEndpointWithResponseStream" if args.stream else "InvokeEndpoint"

    def call(calls: Sequence[Call], make: Make) -> None:
        import botocore.exceptions

        try:
            (answer,) = make(list(calls))
        except botocore.exceptions.ClientError as error:
            said = str(error.response.get("Error", {}).get("Message", ""))
            if error_answers.no_capacity(said):
                raise ClientError(from_zero_line(args.name, args.component)) from None
            raise
        if args.stream:
            events = answer["Body"]
            _print_stream(event.get("PayloadPart", {}).get("Bytes", b"") for event in events)
        else:
            sys.stdout.buffer.write(answer["Body"].read() + b"\n")

    return Plan((Step((Call("sagemaker-runtime", operation, params),), make=call),))


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    body = _body(args.body)
    stop_at(json_problem("--body", body))
    if args.use_async:
        return async_plan(args, body, reads)
    if args.openai:
        return openai_plan(args, body)
    return invoke_plan(args, body)


def _print_stream(received: Iterable[bytes]) -> None:
    for text in stream_text(received):
        sys.stdout.write(text)
        sys.stdout.flush()
    sys.stdout.write("\n")


def stream_text(received: Iterable[bytes]) -> Iterator[str]:
    """The generated text in a stream of server-sent events, as its bytes arrive."""
    pending = b""
    for data in received:
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            data = line.removeprefix(b"data:").strip()
            if not line.startswith(b"data:") or data == b"[DONE]":
                continue
            for choice in json.loads(data).get("choices", []):
                yield choice.get("text") or (choice.get("delta") or {}).get("content") or ""
