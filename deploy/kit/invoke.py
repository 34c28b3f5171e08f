"""`deploy invoke`: one JSON request to an endpoint, and its answer printed (or streamed, or, for
an async endpoint, where the answer will appear). With `--openai` the body goes to the
endpoint's OpenAI-compatible path with a bearer token (`deploy.kit.token`), as an OpenAI client
sends it.
"""

import argparse
import json
import sys
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.calls import Call, put
from vllm_sagemaker.deploy.base.error_answers import message
from vllm_sagemaker.deploy.base.errors import ClientError, Refused
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.run import execute
from vllm_sagemaker.deploy.kit import token
from vllm_sagemaker.deploy.kit.checks import json_problem
from vllm_sagemaker.handler.core.errors import status_phrase


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
        raise ClientError(f"there is no endpoint named {name}")
    config_name = endpoint["EndpointConfigName"]
    describe = Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": config_name})
    config = reads.describe(describe) or {}
    output = config.get("AsyncInferenceConfig", {}).get("OutputConfig", {}).get("S3OutputPath")
    if not output:
        raise ClientError(f"{name} is not an async endpoint (deploy it with --async-output)")
    return str(output)


def invoke_async(name: str, body: bytes, dry_run: bool) -> int:
    """Upload the body beside the endpoint's async outputs, invoke, print where the answer
    will appear."""
    reads = Reads(dry_run)
    location = storage.joined(async_output(reads, name), f"inputs/{uuid.uuid4().hex}.json")
    params = {"EndpointName": name, "InputLocation": location, "ContentType": "application/json"}
    calls = [put(location, body), Call("sagemaker-runtime", "InvokeEndpointAsync", params)]
    answers = execute(calls, dry_run, reads.assumed)
    if answers:
        print(answers[-1]["OutputLocation"])
    return 0


def invoke_openai(args: argparse.Namespace, body: bytes) -> int:
    """POST the body to the endpoint's OpenAI-compatible chat route with a bearer token; print
    the answer, or (`--stream`, which asks for a stream) its text as it arrives."""
    url = token.openai_base(args.name) + "/chat/completions"
    if args.stream:
        body = json.dumps({**json.loads(body), "stream": True}).encode()
    if args.dry_run:
        print(json.dumps([{"method": "POST", "url": url, "body": json.loads(body)}], indent=2))
        return 0
    headers = {
        "Authorization": f"Bearer {token.bearer(token.MAX_S)}",
        "Content-Type": "application/json",
    }
    timeout = httpx.Timeout(600, connect=10)
    with httpx.stream("POST", url, content=body, headers=headers, timeout=timeout) as reply:
        if reply.status_code != 200:
            reply.read()
            status = reply.status_code
            told = message(reply.content) or status_phrase(status)
            raise ClientError(f"{url} answered {status}: {told}")
        if not args.stream:
            sys.stdout.buffer.write(reply.read() + b"\n")
            return 0
        for text in stream_text(reply.iter_bytes()):
            sys.stdout.write(text)
            sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def main(args: argparse.Namespace) -> int:
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
    answers = execute([Call("sagemaker-runtime", operation, params)], args.dry_run)
    if not answers:
        return 0
    if not args.stream:
        sys.stdout.buffer.write(answers[0]["Body"].read() + b"\n")
        return 0
    payloads = (event.get("PayloadPart", {}).get("Bytes", b"") for event in answers[0]["Body"])
    for text in stream_text(payloads):
        sys.stdout.write(text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


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
