"""InvokeEndpointWithResponseStream and inference components end to end: boto3, LiteLLM's
`sagemaker_chat` provider and `deploy invoke --stream --component` stream a real container's
answer through the runtime stand-in (tests/support/runtime_emulator.py), which cuts AWS's event
stream anywhere and routes by InferenceComponentName; AWS's answers to a call without the
component on an endpoint that has components, and to a component scaled to zero."""

import json
import os
import random
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import litellm
import pytest
from botocore.eventstream import EventStreamBuffer

from tests.deploy.recording import run
from tests.support.runtime_emulator import (
    CUT_SEED,
    NO_CAPACITY,
    NO_COMPONENT_NAME,
    Runtime,
    cut,
    event_message,
    runtime_emulator,
)
from tests.support.servers import Server
from vllm_sagemaker.deploy.kit.invoke import stream_text

ENDPOINT = "shared"
REQUEST = {
    "messages": [{"role": "user", "content": "Count to five"}],
    "max_tokens": 12,
    "temperature": 0,
}


@pytest.fixture
def runtime(
    chat_server: Server, embed_server: Server, aws: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Runtime]:
    """Two components on one endpoint, the chat model and the embedder; boto3 (and the kit)
    pointed at the stand-in."""
    held = Runtime(
        {},
        components={
            "chat": (ENDPOINT, chat_server.url),
            "embed": (ENDPOINT, embed_server.url),
        },
    )
    with runtime_emulator(held) as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", url)
        yield held


def _client() -> Any:
    return boto3.client("sagemaker-runtime")


def _answer(component: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = _client().invoke_endpoint(
        EndpointName=ENDPOINT,
        InferenceComponentName=component,
        ContentType="application/json",
        Body=json.dumps(body),
    )
    answer: dict[str, Any] = json.loads(reply["Body"].read())
    return answer


def _text(answer: dict[str, Any]) -> str:
    return str(answer["choices"][0]["message"]["content"])


def test_the_event_stream_cuts_inside_characters_and_botocore_reads_it() -> None:
    """The stand-in's framing, read by botocore's own decoder fed a few bytes at a time: every
    message a PayloadPart event, the parts joined are the bytes sent, and some part ends inside
    a UTF-8 character."""
    sse = 'data: {"choices":[{"delta":{"content":"naïve café, 日本語 ✓"}}]}\n\n' * 4
    data = (sse + "data: [DONE]\n\n").encode()
    wire = b"".join(event_message(part) for part in cut(data, random.Random(CUT_SEED)))
    buffer = EventStreamBuffer()
    messages = []
    for at in range(0, len(wire), 5):
        buffer.add_data(wire[at : at + 5])
        messages.extend(buffer)
    event = {
        ":event-type": "PayloadPart",
        ":content-type": "application/octet-stream",
        ":message-type": "event",
    }
    assert all(message.headers == event for message in messages)
    parts = [m.payload for m in messages]
    assert b"".join(parts) == data and len(parts) > 1

    def whole_characters(part: bytes) -> bool:
        try:
            part.decode()
        except UnicodeDecodeError:
            return False
        return True

    assert not all(whole_characters(part) for part in parts)


def test_boto3_streams_a_component_cut_anywhere(runtime: Runtime, chat_server: Server) -> None:
    whole = _text(_answer("chat", REQUEST))
    reply = _client().invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT,
        InferenceComponentName="chat",
        ContentType="application/json",
        Body=json.dumps({**REQUEST, "stream": True}),
    )
    assert reply["ContentType"].startswith("text/event-stream")
    parts = [event["PayloadPart"]["Bytes"] for event in reply["Body"]]
    data = b"".join(parts)
    assert len(parts) > 10 and any(not part.endswith(b"\n") for part in parts)
    assert data.rstrip().endswith(b"data: [DONE]")
    assert "".join(stream_text([data])) == whole
    assert runtime.forwarded == [chat_server.url, chat_server.url]


def test_the_component_named_is_the_one_that_answers(
    runtime: Runtime, embed_server: Server
) -> None:
    answer = _answer("embed", {"input": "a sentence"})
    assert answer["object"] == "list" and len(answer["data"][0]["embedding"]) == 384
    assert runtime.forwarded == [embed_server.url]


def test_aws_answers_without_a_component_and_without_capacity(runtime: Runtime) -> None:
    for call in (
        lambda: _client().invoke_endpoint(EndpointName=ENDPOINT, Body=b"{}"),
        lambda: _client().invoke_endpoint_with_response_stream(EndpointName=ENDPOINT, Body=b"{}"),
    ):
        with pytest.raises(botocore.exceptions.ClientError) as missing:
            call()
        assert missing.value.response["Error"]["Code"] == "ValidationError"
        assert missing.value.response["Error"]["Message"] == NO_COMPONENT_NAME
    runtime.no_capacity.add("chat")
    with pytest.raises(botocore.exceptions.ClientError) as empty:
        _answer("chat", REQUEST)
    assert empty.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert empty.value.response["Error"]["Message"] == NO_CAPACITY
    assert runtime.no_capacity_calls["chat"] == 1 and runtime.forwarded == []


def test_litellm_sagemaker_chat_streams_a_component(runtime: Runtime) -> None:
    """LiteLLM 1.103.7's `sagemaker_chat` decodes each PayloadPart on its own (UTF-8, then a
    `data:` prefix stripped, JSON accumulated): it streams when each part starts an event and
    ends on a whole character, as when each of the container's writes (one server-sent event
    each) is one part, and fails on a stream cut anywhere (a UnicodeDecodeError, or events run
    together). So this stream keeps the container's writes."""
    runtime.cut_anywhere = False
    whole = _text(_answer("chat", REQUEST))
    url = os.environ["AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME"]
    base = f"{url}/endpoints/{ENDPOINT}/invocations-response-stream"
    chunks = litellm.completion(
        model=f"sagemaker_chat/{ENDPOINT}",
        stream=True,
        model_id="chat",
        sagemaker_base_url=base,
        aws_region_name="us-east-1",
        **REQUEST,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert text == whole


def test_deploy_invoke_streams_a_component(
    runtime: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _text(_answer("chat", REQUEST))
    body = json.dumps({**REQUEST, "stream": True})
    status, out, err = run(
        capsys,
        "deploy",
        "invoke",
        "--name",
        ENDPOINT,
        "--component",
        "chat",
        "--stream",
        "--body",
        body,
    )
    assert status == 0, err
    assert out == whole + "\n"
    runtime.no_capacity.add("chat")
    status, out, err = run(
        capsys, "deploy", "invoke", "--name", ENDPOINT, "--component", "chat", "--body", body
    )
    assert status == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("deploy: component chat on endpoint shared is scaling from zero")
