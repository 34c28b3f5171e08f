"""Multi-record bodies on real engines: one line per record in order, errors only on the bad
records, streaming as prefixes finish, the in-flight bound, the deadline and cancellation."""

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import AUTH, BATCH_ENV
from tests.support import waiting
from tests.support.json_lines import parse_lines
from tests.support.servers import Server, metric_value

JSON_LINES = {"Content-Type": "application/jsonlines"}
# Several seconds of generation for one record (the tiny model's context is 4096 tokens).
LONG = {"prompt": "The quick", "max_tokens": 3000, "min_tokens": 3000}


def jsonl(records: list[Any]) -> bytes:
    return b"".join(
        (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records
    )


def send(
    server: Server, body: bytes, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[Any]]:
    """POST a multi-record body; the response and its lines, each parsed as JSON."""
    response = httpx.post(
        server.url + "/invocations",
        content=body,
        headers={**JSON_LINES, **(headers or {})},
        timeout=300,
    )
    assert response.text.endswith("\n")
    return response, parse_lines(response.text)


def echo(i: int) -> dict[str, Any]:
    """A completion whose answer starts with its own prompt, so order can be checked."""
    return {"prompt": f"record {i}", "max_tokens": 1, "echo": True, "temperature": 0}


def error_code(line: Any) -> Any:
    """The error code of an error line (plain or batch output format), None for a success."""
    if "custom_id" in line:
        return line["error"]["code"] if line["error"] else None
    return line["error"]["code"] if "error" in line else None


BAD = {
    2: (b"{not json", "invalid_json"),
    4: (b"", "empty_body"),
    6: ({"input": "an embedding on a chat model"}, "unsupported_request_kind"),
    8: ({"prompt": "x", "stream": True}, "stream_not_supported"),
    10: ({"prompt": "x", "max_tokens": 9000}, 400),
    12: (
        {"custom_id": "bad", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}},
        "invalid_url",
    ),
    14: (b"[1, 2, 3]", "unrecognized_request"),
    16: (b'"just a string"', "unrecognized_request"),
}


def test_mixed_records_answer_line_for_line(chat_server: Server) -> None:
    records: list[Any] = [BAD[i][0] if i in BAD else echo(i) for i in range(40)]
    records[20] = {
        "custom_id": "good",
        "method": "POST",
        "url": "/v1/completions",
        "body": {"prompt": "record 20", "max_tokens": 1, "echo": True},
    }
    records[22] = {"inputs": "record 22", "parameters": {"max_new_tokens": 2}}
    records[24] = {"messages": [{"role": "user", "content": "record 24"}], "max_tokens": 2}
    response, lines = send(chat_server, jsonl(records))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/jsonlines"
    assert len(lines) == len(records)
    assert {i: error_code(line) for i, line in enumerate(lines) if error_code(line)} == {
        i: code for i, (_, code) in BAD.items()
    }
    for i, line in enumerate(lines):
        if i in BAD or i in (20, 22, 24):
            continue
        assert line["choices"][0]["text"].startswith(f"record {i}")
    batch_line = lines[20]
    assert batch_line["custom_id"] == "good"
    assert batch_line["response"]["status_code"] == 200
    assert batch_line["response"]["body"]["choices"][0]["text"].startswith("record 20")
    assert set(lines[22][0]) == {"generated_text"}
    assert lines[24]["object"] == "chat.completion"


def test_256_records_in_order(chat_server: Server) -> None:
    response, lines = send(chat_server, jsonl([echo(i) for i in range(256)]))
    assert response.status_code == 200
    assert len(lines) == 256
    assert all(line["choices"][0]["text"].startswith(f"record {i}") for i, line in enumerate(lines))


@pytest.mark.parametrize(
    "content_type",
    [
        "application/jsonlines",
        "application/jsonl",
        "application/x-jsonlines",
        "application/x-ndjson",
        "application/json",
        "application/jsonlines; charset=utf-8",
    ],
)
def test_every_json_lines_type_with_crlf_and_bom(embed_server: Server, content_type: str) -> None:
    texts = ["a cat sits on the mat", "the stock market fell", "hello"]
    body = (
        b"\xef\xbb\xbf" + b"\r\n".join(json.dumps({"input": t}).encode() for t in texts) + b"\r\n"
    )
    response, lines = send(embed_server, body, {"Content-Type": content_type})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/jsonlines"
    direct = httpx.post(embed_server.url + "/v1/embeddings", json={"input": texts}).json()
    assert len(lines) == len(texts)
    for line, item in zip(lines, direct["data"], strict=True):
        assert line["data"][0]["embedding"] == pytest.approx(item["embedding"], abs=1e-5)


def test_a_pretty_printed_json_body_is_one_request(embed_server: Server) -> None:
    body = json.dumps({"input": ["a", "b"]}, indent=2).encode()
    response = httpx.post(
        embed_server.url + "/invocations",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert len(response.json()["data"]) == 2


def test_records_carry_the_api_key_and_route(score_server: Server) -> None:
    records = [
        {"query": "cat", "documents": ["a cat sits", "stocks fell"]},
        {"queries": "cat", "documents": ["a cat sits"]},
        {"input": "a cat sits"},
    ]
    headers = {**AUTH, "X-Amzn-SageMaker-Custom-Attributes": "route=/rerank"}
    _, routed = send(score_server, jsonl(records[:1] * 2), headers)
    assert [len(line["results"]) for line in routed] == [2, 2]
    response, lines = send(score_server, jsonl(records), AUTH)
    assert response.status_code == 200
    assert sorted(lines[0]) == sorted(routed[0])
    assert lines[1]["object"] == "list"
    assert "data" in lines[2]
    refused = httpx.post(
        score_server.url + "/invocations", content=jsonl(records), headers=JSON_LINES
    )
    assert refused.status_code == 401


def abandon(server: Server, body: bytes, until_hang_up: Callable[[httpx.Response], None]) -> None:
    """POST a multi-record body, run `until_hang_up` on the streaming response, hang up, and
    wait until the server has ended the invocation."""
    inference_id = uuid.uuid4().hex
    headers = {**JSON_LINES, "X-Amzn-SageMaker-Inference-Id": inference_id}
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", server.url + "/invocations", content=body, headers=headers) as answer,
    ):
        assert answer.status_code == 200
        until_hang_up(answer)
    server.wait_logged_invocation(inference_id)


def test_lines_stream_out_as_each_prefix_finishes(chat_server: Server) -> None:
    """The engine is frozen, so the second record cannot finish; the first, a line that is not
    JSON, is answered without the engine and reaches the client all the same. The client then
    hangs up, and the second record is aborted: once the engine resumes it generates nothing
    like its 3,000 tokens. Nothing here is timed."""
    first: list[dict[str, Any]] = []
    with chat_server.paused():
        abandon(
            chat_server,
            jsonl([b"{not json", LONG]),
            lambda answer: first.append(json.loads(next(answer.iter_lines()))),
        )
    assert [error_code(line) for line in first] == ["invalid_json"]
    assert chat_server.tokens_beside_a_probe() == 0, "the record of a client gone ran on"


def test_an_abandoned_mini_batch_is_aborted_on_the_engine(chat_server: Server) -> None:
    """All 128 records reach the engine; the engine is frozen with them in it, so none can
    finish; the client hangs up, and once the engine resumes they generate nothing like the
    384,000 tokens they asked for: they were aborted."""

    def freeze_with_all_in_engine(answer: httpx.Response) -> None:
        waiting.until(
            lambda: chat_server.in_engine() >= 128, 300, "the records never all reached the engine"
        )
        chat_server.pause()
        assert chat_server.in_engine() == 128

    try:
        abandon(chat_server, jsonl([LONG] * 128), freeze_with_all_in_engine)
    finally:
        httpx.post(chat_server.url + "/resume", timeout=60).raise_for_status()
    assert chat_server.tokens_beside_a_probe() == 0, "abandoned records ran on"


def test_execution_parameters_default(chat_server: Server) -> None:
    response = httpx.get(chat_server.url + "/execution-parameters")
    assert response.status_code == 200
    assert response.json() == {
        "MaxConcurrentTransforms": 2,
        "BatchStrategy": "MULTI_RECORD",
        "MaxPayloadInMB": 1,
    }


def test_execution_parameters_follow_the_environment(batch_server: Server) -> None:
    assert httpx.get(batch_server.url + "/execution-parameters").json() == {
        "MaxConcurrentTransforms": int(BATCH_ENV["SAGEMAKER_MAX_CONCURRENT_TRANSFORMS"]),
        "BatchStrategy": "SINGLE_RECORD",
        "MaxPayloadInMB": int(BATCH_ENV["SAGEMAKER_MAX_PAYLOAD_IN_MB"]),
    }


def test_payload_limit_follows_sagemaker_max_payload(batch_server: Server) -> None:
    record = json.dumps({"prompt": "x" * 1000, "max_tokens": 1}).encode() + b"\n"
    too_big = record * (3 * 1024 * 1024 // len(record))
    response = httpx.post(
        batch_server.url + "/invocations", content=too_big, headers=JSON_LINES, timeout=60
    )
    assert response.status_code == 413
    assert "2 MiB" in response.json()["error"]["message"]


def steps_over_8_tokens(server: Server) -> float:
    """Engine steps so far that carried more than 8 tokens (vLLM's tokens-per-step histogram)."""
    text = server.metrics()
    steps = metric_value(text, "vllm:iteration_tokens_total_count")
    return steps - metric_value(text, "vllm:iteration_tokens_total_bucket", le="8.0")


def test_records_in_flight_are_bounded(batch_server: Server) -> None:
    """16 records of 100 tokens with 4 in-flight slots: no engine step runs them all. Unbounded,
    all 100 decode steps would carry 16 tokens; bounded, a step carries more than 8 only when
    several new prompts are admitted together, at most once per record."""
    record = {"prompt": "The quick", "max_tokens": 100, "min_tokens": 100}
    before = steps_over_8_tokens(batch_server)
    response, lines = send(batch_server, jsonl([record] * 16))
    assert response.status_code == 200 and len(lines) == 16
    # A slow machine may reach the 3 s mini-batch deadline before the last records.
    assert {line.get("usage", {}).get("completion_tokens", "timeout") for line in lines} <= {
        100,
        "timeout",
    }
    assert steps_over_8_tokens(batch_server) - before <= 16


def test_records_past_the_deadline_time_out_alone(batch_server: Server) -> None:
    """The engine is frozen, so no record that needs it can finish on any machine: the first, a
    line that is not JSON, is answered without the engine; each of the others gets its own
    timeout line at the 3 s deadline and is aborted on the engine (nothing is left running in
    it, and once it resumes none of them generates)."""
    body = jsonl([b"{not json"] + [LONG] * 8)
    with (
        batch_server.paused(),
        httpx.Client(timeout=300) as client,
        client.stream(
            "POST", batch_server.url + "/invocations", content=body, headers=JSON_LINES
        ) as response,
    ):
        lines = [json.loads(line) for line in response.iter_lines()]
    assert response.status_code == 200
    first, *rest = lines
    assert error_code(first) == "invalid_json"
    assert [line["error"]["code"] for line in rest] == ["timeout"] * 8
    assert all(line["error"]["type"] == "timeout_error" for line in rest)
    assert all(
        BATCH_ENV["SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS"] + " s" in line["error"]["message"]
        for line in rest
    )
    assert batch_server.tokens_beside_a_probe() == 0, "records past the deadline ran on"


def test_an_empty_json_lines_body_is_one_bad_record(batch_server: Server) -> None:
    response, lines = send(batch_server, b"")
    assert response.status_code == 200
    assert [line["error"]["code"] for line in lines] == ["empty_body"]
