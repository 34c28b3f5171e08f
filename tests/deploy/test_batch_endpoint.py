"""`vllm-sagemaker batch --sagemaker-endpoint`: an OpenAI batch file through InvokeEndpoint.

The runtime API is the emulator in tests/support/runtime_emulator.py, forwarding to the real chat
container; the endpoint itself is registered in moto, where DescribeEndpoint finds it.
"""

import asyncio
import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from tests.deploy.batching import (
    REFUSED,
    completion,
    held_mid_run,
    jsonl,
    line_count,
    refused_first,
)
from tests.support import cli, processes
from tests.support.aws import moto_endpoint
from tests.support.json_lines import parse_lines
from tests.support.runtime_emulator import Runtime, runtime_emulator
from tests.support.servers import Server
from vllm_sagemaker.core.batch_lines import Checked, Fault
from vllm_sagemaker.core.routing import BATCH_WORK_ATTRIBUTE
from vllm_sagemaker.deploy.base import invocations
from vllm_sagemaker.deploy.batch import sagemaker_endpoint
from vllm_sagemaker.deploy.batch.minibatches import answer_mini_batch, mini_batches, too_large


@pytest.fixture
def endpoint(chat_server: Server, aws: dict[str, str]) -> Iterator[tuple[str, Runtime, dict]]:
    """An InService endpoint in moto served by the chat container through the emulator, which
    throttles one call in ten; its name, the emulator, and the environment that reaches it."""
    with moto_endpoint("chat") as name:
        runtime = Runtime({name: chat_server.url}, throttle_every=10)
        with runtime_emulator(runtime) as url:
            yield name, runtime, {"AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url}


def two_thousand_lines() -> list[Any]:
    """2,000 lines: the first REFUSED refused by the engine (see `refused_first`), three bad."""
    records: list[Any] = refused_first([completion(f"r{i}", tokens=4) for i in range(2000)])
    records[107] = b"{not json"
    records[700] = completion("r3")
    records[1400] = {**completion("r1400"), "method": "GET"}
    return records


def test_a_file_through_an_endpoint_killed_and_resumed(
    endpoint: tuple[str, Runtime, dict], chat_server: Server, tmp_path: Path
) -> None:
    """2,000 lines, three bad, one call in ten throttled, the run killed mid-run (held there by
    construction: the engine is frozen once the refused lines are answered) and resumed: 2,000
    answers, every custom_id exactly once, the bad lines as error lines."""
    name, runtime, env = endpoint
    (tmp_path / "in.jsonl").write_bytes(jsonl(two_thousand_lines()))
    output, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    args = [
        "batch",
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(output),
            error_file=str(errors),
            sagemaker_endpoint=name,
            max_inflight="64",
        ),
    ]
    with chat_server.paused():
        first = processes.spawn(
            [cli.VLLM_SAGEMAKER, *args], env={**os.environ, **env}, stderr=subprocess.DEVNULL
        )
        held_mid_run(first, REFUSED, output, errors)
        processes.kill(first)
    assert line_count(output) + line_count(errors) == REFUSED

    done = cli.run(*args, "--resume", env=env)
    assert done.returncode == 0, done.stderr
    answered, failed = parse_lines(output.read_bytes()), parse_lines(errors.read_bytes())
    assert len(answered) + len(failed) == 2000
    assert all(line["response"]["status_code"] == 200 for line in answered)
    ids = Counter(line["custom_id"] for line in answered + failed)
    assert ids.pop(None) == 1  # the line that is not JSON has no custom_id
    assert ids.pop("r3") == 2  # its answer, and the error line of its duplicate
    assert set(ids.values()) == {1} and len(ids) == 1997 and "r107" not in ids
    refused = [line for line in failed if line["error"] is None]
    assert [line["custom_id"] for line in refused] == [f"r{i}" for i in range(REFUSED)]
    assert {line["response"]["status_code"] for line in refused} == {400}
    assert sorted(line["error"]["code"] for line in failed if line["error"]) == [
        "duplicate_custom_id",
        "invalid_json_line",
        "invalid_value",
    ]
    assert runtime.throttled > 0
    assert set(runtime.attributes) == {BATCH_WORK_ATTRIBUTE}
    assert b"2000 lines answered" in done.stderr


def test_an_unknown_endpoint_stops_before_anything_is_written(
    endpoint: tuple[str, Runtime, dict], tmp_path: Path
) -> None:
    _, _, env = endpoint
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    done = cli.run(
        "batch",
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(tmp_path / "out.jsonl"),
            sagemaker_endpoint="no-such-endpoint",
        ),
        env=env,
        text=True,
    )
    assert done.returncode == 1
    assert "no-such-endpoint" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_an_api_key_cannot_go_through_invoke_endpoint(tmp_path: Path) -> None:
    done = cli.run(
        "batch",
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(tmp_path / "out.jsonl"),
            sagemaker_endpoint="chat",
            api_key="k",
        ),
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "batch: --api-key goes with --endpoint or --model: InvokeEndpoint cannot send one "
        "(SigV4 guards a SageMaker endpoint)"
    ]


def client_error(code: str, status: int, **fields: Any) -> botocore.exceptions.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": f"{code} happened"},
        "ResponseMetadata": {"HTTPStatusCode": status},
        **fields,
    }
    return botocore.exceptions.ClientError(response, "InvokeEndpoint")


@pytest.mark.parametrize(
    ("error", "meaning"),
    [
        (client_error("ThrottlingException", 400), invocations.Throttled),
        (client_error("ModelNotReadyException", 429), invocations.Retryable),
        (client_error("ServiceUnavailable", 503), invocations.Retryable),
        (client_error("InternalFailure", 500), invocations.Retryable),
        (client_error("InternalDependencyException", 530), invocations.Retryable),
        (client_error("ModelError", 424, OriginalStatusCode=503), invocations.Retryable),
        # the container keeps its engine for live traffic: waited out, never a failure
        (client_error("ModelError", 424, OriginalStatusCode=429), invocations.Throttled),
        (client_error("ModelError", 424, OriginalStatusCode=400), invocations.NotRetryable),
        (client_error("ModelError", 424, OriginalStatusCode=413), invocations.NotRetryable),
        # the container wants an API key, which InvokeEndpoint cannot send: the run stops
        (client_error("ModelError", 424, OriginalStatusCode=401), invocations.Unauthorized),
        (client_error("ValidationError", 400), invocations.InvocationFailed),
        (client_error("AccessDeniedException", 403), invocations.InvocationFailed),
    ],
)
def test_what_an_invoke_endpoint_error_means(
    error: botocore.exceptions.ClientError, meaning: type
) -> None:
    assert type(sagemaker_endpoint.classify(error)) is meaning


def test_a_refused_mini_batch_keeps_its_status_and_message() -> None:
    answer = sagemaker_endpoint.classify(
        client_error("ModelError", 424, OriginalStatusCode=400, OriginalMessage="bad body")
    )
    assert isinstance(answer, invocations.NotRetryable)
    assert (answer.http_status, answer.line) == (400, "HTTP 400: bad body")


def line(size: int, fault: Fault | None = None) -> Checked:
    return Checked(1, "c", b"x" * size, {}, fault)


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ([10] * 5, [[10, 10, 10], [10, 10]]),  # three lines a request
        ([40, 40, 40], [[40, 40], [40]]),  # 41 + 41 fit in 100 bytes, a third does not
        ([99, 99], [[99], [99]]),
    ],
)
def test_mini_batches_are_cut_by_lines_and_bytes(sizes: list[int], expected: list[list]) -> None:
    got = [[len(item.raw) for item in batch] for batch in mini_batches(map(line, sizes), 3, 100)]
    assert got == expected


def test_a_line_over_the_limit_is_refused_alone() -> None:
    assert too_large(line(99), 100).fault is None
    refused = too_large(line(100), 100).fault
    assert refused is not None and refused.code == "payload_too_large"
    assert [len(b) for b in mini_batches([too_large(line(150), 100), line(10)], 3, 100)] == [2]


class Answering:
    """A target whose answer to any mini-batch is the given lines."""

    def __init__(self, lines: list[dict]) -> None:
        self.body = b"".join(json.dumps(value).encode() + b"\n" for value in lines)

    async def ready(self) -> None:
        pass

    async def invoke(self, body: bytes) -> bytes:
        return self.body

    def close(self) -> None:
        pass


def finished(custom_id: str, reason: str) -> dict:
    body = {"choices": [{"finish_reason": reason}], "usage": {}}
    return {"custom_id": custom_id, "response": {"status_code": 200, "body": body}, "error": None}


def test_a_mini_batch_the_engine_aborted_is_not_an_answer() -> None:
    mini_batch = [Checked(7, "a", b"{}"), Checked(8, "b", b"{}")]
    whole = Answering([finished("a", "length"), finished("b", "stop")])
    assert len(asyncio.run(answer_mini_batch(whole, mini_batch))) == 2
    cut = Answering([finished("a", "length"), finished("b", "abort")])
    with pytest.raises(invocations.InvocationFailed, match="aborted line 8"):
        asyncio.run(answer_mini_batch(cut, mini_batch))
