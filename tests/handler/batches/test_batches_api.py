"""OpenAI's Batches API on real servers, driven by the official `openai` SDK."""

import contextlib
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types import Batch

from tests.conftest import API_KEY, AUTH, BATCH_ENV
from tests.support import waiting
from tests.support.json_lines import parse_lines
from tests.support.servers import Server

FINAL = ("completed", "failed", "cancelled", "expired")
# Engine steps a long line needs, one after another: more than any machine runs in the second
# between a test seeing the first lines finish and its cancel or freeze taking effect.
LONG_TOKENS = 2000


def client(server: Server, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def chat_line(custom_id: str, tokens: int = 4, **body: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"say {custom_id}"}]
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"messages": messages, "max_tokens": tokens, **body},
    }


def refused_line(custom_id: str) -> dict[str, Any]:
    """A line the server answers at once without the engine, frozen or not: it asks for more
    tokens than the model's context holds (400)."""
    return chat_line(custom_id, tokens=99999)


def jsonl(lines: list[Any]) -> bytes:
    return b"\n".join(
        line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines
    )


def submit(sdk: openai.OpenAI, lines: list[Any], endpoint: str = "/v1/chat/completions") -> Batch:
    uploaded = sdk.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    return sdk.batches.create(
        input_file_id=uploaded.id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
        metadata={"job": "test"},
    )


def wait(
    sdk: openai.OpenAI, batch_id: str, until: Any = lambda b: b.status in FINAL, timeout=600
) -> Batch:
    """The batch once `until` holds; `timeout` only guards against a hang."""

    def retrieve() -> Batch | None:
        batch = sdk.batches.retrieve(batch_id)
        return batch if until(batch) else None

    return waiting.until(
        retrieve, timeout, lambda: f"batch still {sdk.batches.retrieve(batch_id)}", 0.2
    )


def completed(batch: Batch) -> int:
    return batch.request_counts.completed if batch.request_counts else 0


def lines_of(sdk: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return parse_lines(sdk.files.content(file_id).content)


def test_round_trip_with_lines_the_engine_refuses(chat_server: Server) -> None:
    sdk = client(chat_server)
    lines = [chat_line(f"r{i}") for i in range(30)]
    for i in (4, 17):
        lines[i] = chat_line(f"r{i}", tokens=99999)
    created = submit(sdk, lines)
    assert Batch.model_validate(created.model_dump())
    assert (created.status, created.metadata, created.output_file_id) == (
        "validating",
        {"job": "test"},
        None,
    )
    assert created.expires_at == created.created_at + 24 * 3600
    done = wait(sdk, created.id)
    assert done.status == "completed"
    assert done.request_counts is not None and done.request_counts.model_dump() == {
        "total": 30,
        "completed": 28,
        "failed": 2,
    }
    output, errors = lines_of(sdk, done.output_file_id), lines_of(sdk, done.error_file_id)
    assert len(output) == 28 and len(errors) == 2
    assert Counter(line["custom_id"] for line in output + errors) == Counter(
        f"r{i}" for i in range(30)
    )
    assert all(line["response"]["status_code"] == 200 for line in output)
    assert all(line["id"].startswith("batch_req_") for line in output + errors)
    for refused in errors:
        assert refused["custom_id"] in ("r4", "r17")
        assert refused["error"] is None and refused["response"]["status_code"] == 400
        assert "max_tokens" in refused["response"]["body"]["error"]["message"]
    completions = sum(line["response"]["body"]["usage"]["completion_tokens"] for line in output)
    assert done.usage is not None and done.usage.output_tokens == completions > 0
    assert done.model == chat_server.model
    assert done.completed_at and done.in_progress_at and done.finalizing_at
    for file_id in (done.output_file_id, done.error_file_id):
        assert file_id is not None and sdk.files.retrieve(file_id).purpose == "batch_output"


def test_a_batch_whose_lines_all_fail_has_no_output_file(chat_server: Server) -> None:
    sdk = client(chat_server)
    done = wait(sdk, submit(sdk, [chat_line("x", tokens=99999)]).id)
    assert (done.status, done.output_file_id) == ("completed", None)
    assert [line["custom_id"] for line in lines_of(sdk, done.error_file_id)] == ["x"]


def test_every_bad_line_is_listed_and_nothing_runs(chat_server: Server) -> None:
    sdk = client(chat_server)
    # An earlier test's work may still be finishing: the count starts from an idle engine.
    chat_server.wait_idle(600)
    served_before = chat_server.metric("vllm:request_success_total")
    lines = [
        chat_line("ok"),
        b"{not json",
        {"custom_id": "no-url", "method": "POST", "body": {}},
        {**chat_line("elsewhere"), "url": "/v1/completions"},
        chat_line("streams", stream=True),
        chat_line("ok"),
        chat_line("who", model="no-such-model"),
        chat_line("fine"),
    ]
    done = wait(sdk, submit(sdk, lines).id)
    assert done.status == "failed" and done.failed_at
    assert done.errors is not None
    listed = [(e.line, e.code, e.param) for e in done.errors.data or []]
    assert listed == [
        (2, "invalid_json_line", None),
        (3, "missing_required_parameter", "url"),
        (4, "invalid_url", "url"),
        (5, "streaming_unsupported", "body.stream"),
        (6, "duplicate_custom_id", "custom_id"),
        (7, "model_not_found", "body.model"),
    ]
    assert (done.output_file_id, done.error_file_id) == (None, None)
    assert chat_server.metric("vllm:request_success_total") == served_before


def test_an_empty_file_fails(chat_server: Server) -> None:
    sdk = client(chat_server)
    done = wait(sdk, submit(sdk, [b"", b"  "]).id)
    assert done.status == "failed"
    assert done.errors is not None and [e.code for e in done.errors.data or []] == ["empty_file"]


@pytest.mark.parametrize(
    ("change", "status", "param", "message"),
    [
        (
            {"endpoint": "/v1/invalid/endpoint"},
            400,
            "endpoint",
            "Invalid value: '/v1/invalid/endpoint'. Supported values are: ",
        ),
        (
            {"completion_window": "1h"},
            400,
            "completion_window",
            "Invalid value: '1h'. Supported values are: '24h'.",
        ),
        (
            {"metadata": {"tags": ["a"]}},
            400,
            "metadata.tags",
            "Invalid type for 'metadata.tags': expected a string, but got an array instead.",
        ),
        ({"input_file_id": "file-nope"}, 404, "id", "No such File object: file-nope"),
    ],
)
def test_create_checks_its_parameters_at_once(
    chat_server: Server, change: dict, status: int, param: str, message: str
) -> None:
    sdk = client(chat_server)
    uploaded = sdk.files.create(file=("in.jsonl", jsonl([chat_line("a")])), purpose="batch")
    body = {"input_file_id": uploaded.id, "endpoint": "/v1/chat/completions"}
    body |= {"completion_window": "24h", **change}
    answer = httpx.post(chat_server.url + "/v1/batches", json=body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["param"] == param and error["message"].startswith(message)


def test_an_input_file_must_have_purpose_batch(chat_server: Server) -> None:
    sdk = client(chat_server)
    uploaded = sdk.files.create(file=("in.jsonl", jsonl([chat_line("a")])), purpose="user_data")
    with pytest.raises(openai.BadRequestError, match="purpose 'batch'"):
        sdk.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )


def test_cancel_mid_run_keeps_partial_output_and_ends_fast(chat_server: Server) -> None:
    """Quick lines finish; then the engine is frozen with the long lines in it (each needs
    2,000 engine steps), so the cancel comes mid-run on any machine. Once the engine resumes,
    none of the cancelled lines generates: they were aborted, not left running."""
    sdk = client(chat_server)
    quick = [chat_line(f"c{i}", tokens=2) for i in range(10)]
    long = [chat_line(f"c{i}", tokens=LONG_TOKENS, ignore_eos=True) for i in range(10, 300)]
    batch = submit(sdk, quick + long)
    wait(sdk, batch.id, lambda b: completed(b) >= 5)
    with chat_server.paused():
        assert chat_server.in_engine() > 0, "the batch finished before the engine was frozen"
        assert sdk.batches.cancel(batch.id).status == "cancelling"
        # The cancel ends while the engine stays frozen: it waits for no line to finish.
        done = wait(sdk, batch.id)
        assert done.status == "cancelled"
    output, errors = lines_of(sdk, done.output_file_id), lines_of(sdk, done.error_file_id)
    assert 5 <= len(output) <= 10
    assert Counter(line["custom_id"] for line in output + errors) == Counter(
        f"c{i}" for i in range(300)
    )
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert all(line["response"] is None for line in errors)
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (
        len(output),
        len(errors),
    )
    assert sdk.batches.cancel(batch.id).status == "cancelled"
    assert chat_server.tokens_beside_a_probe() == 0, "the cancelled lines ran on in the engine"


def test_a_finished_batch_cannot_be_cancelled_and_is_not_retried(chat_server: Server) -> None:
    sdk = client(chat_server)
    done = wait(sdk, submit(sdk, [chat_line("a")]).id)
    calls: list[str] = []
    hooks = {"request": [lambda request: calls.append(request.url.path)]}
    retrying = openai.OpenAI(
        base_url=chat_server.url + "/v1",
        api_key="none",
        http_client=httpx.Client(event_hooks=hooks),
    )
    with pytest.raises(openai.ConflictError) as refused:
        retrying.batches.cancel(done.id)
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert refused.value.body["message"] == "Cannot cancel a batch with status 'completed'."
    assert len(calls) == 1


def test_list_pages_newest_first_and_ends(chat_server: Server) -> None:
    sdk = client(chat_server)
    ids = [submit(sdk, [chat_line("a")]).id for _ in range(3)]
    listed = [b.id for b in sdk.batches.list(limit=2)]
    assert [i for i in listed if i in ids] == ids[::-1]
    assert all(Batch.model_validate(b.model_dump()) for b in sdk.batches.list(limit=100))


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/batches/batch_nope", 404),
        ("POST", "/v1/batches/batch_nope/cancel", 404),
        ("GET", "/v1/batches?limit=0", 400),
        ("GET", "/v1/batches?limit=abc", 400),
        ("DELETE", "/v1/batches/batch_nope", 405),
    ],
)
def test_hostile_requests_get_4xx(chat_server: Server, method: str, path: str, status: int) -> None:
    assert httpx.request(method, chat_server.url + path).status_code == status


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[]", b'{"endpoint": 5}', b'{"input_file_id": 5, "endpoint": "x"}'],
)
def test_hostile_bodies_get_400(chat_server: Server, body: bytes) -> None:
    answer = httpx.post(chat_server.url + "/v1/batches", content=body)
    assert answer.status_code == 400 and "error" in answer.json()


def test_a_huge_body_gets_413(chat_server: Server) -> None:
    answer = httpx.post(chat_server.url + "/v1/batches", content=b"x" * (2 * 1024 * 1024))
    assert answer.status_code == 413


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/batches"),
        ("GET", "/v1/batches"),
        ("GET", "/v1/batches/batch_x"),
        ("POST", "/v1/batches/batch_x/cancel"),
    ],
)
def test_every_batches_route_needs_the_key(score_server: Server, method: str, path: str) -> None:
    assert httpx.request(method, score_server.url + path).status_code == 401
    with_key = httpx.request(method, score_server.url + path, headers=AUTH, json={})
    assert with_key.status_code != 401


def test_a_batch_runs_with_the_servers_api_key(score_server: Server) -> None:
    sdk = client(score_server, API_KEY)
    line = {
        "custom_id": "s",
        "method": "POST",
        "url": "/score",
        "body": {"queries": "a", "documents": ["a", "b"]},
    }
    done = wait(sdk, submit(sdk, [line], endpoint="/score").id)
    assert done.status == "completed"
    assert lines_of(sdk, done.output_file_id)[0]["response"]["status_code"] == 200


def test_the_switch_turns_every_batches_route_off(embed_server: Server) -> None:
    for method, path in (("GET", "/v1/batches"), ("POST", "/v1/batches/batch_x/cancel")):
        assert httpx.request(method, embed_server.url + path).status_code == 404


def test_two_api_servers_run_each_batch_once(platform_server: Server) -> None:
    sdk = client(platform_server)
    lines = [
        {**chat_line(f"p{i}"), "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 2}}
        for i in range(40)
    ]
    batches = [submit(sdk, lines, endpoint="/v1/completions").id for _ in range(3)]
    for batch_id in batches:
        done = wait(sdk, batch_id)
        assert done.status == "completed"
        output = lines_of(sdk, done.output_file_id)
        assert sorted(line["custom_id"] for line in output) == sorted(f"p{i}" for i in range(40))
    log = platform_server.log_path.read_text()
    for batch_id in batches:
        assert log.count(f"batch {batch_id}: validate") == 1
        assert log.count(f"batch {batch_id}: lines") == 1


def end_window(server: Server, batch_id: str) -> None:
    """End a batch's completion window in the server's SQLite store, as time would (an hour
    cannot pass in a test): it ends when the batch was created."""
    store = Path(server.env["SAGEMAKER_BATCH_STORE"]) / "store.sqlite3"
    with contextlib.closing(sqlite3.connect(store, timeout=30)) as db, db:
        db.execute(
            "UPDATE batches SET object = json_set(object, '$.expires_at', "
            "json_extract(object, '$.created_at')) WHERE id = ?",
            (batch_id,),
        )


def test_the_window_expires_a_batch_keeping_what_finished(batch_server: Server) -> None:
    """Quick lines finish; then the engine is frozen with the long lines in it and the window
    is ended, so the long lines cannot finish inside it on any machine."""
    sdk = client(batch_server)
    quick = [chat_line(f"e{i}", tokens=2) for i in range(20)]
    long = [chat_line(f"e{i}", tokens=LONG_TOKENS, ignore_eos=True) for i in range(20, 400)]
    created = submit(sdk, quick + long)
    window = int(BATCH_ENV["SAGEMAKER_BATCH_COMPLETION_WINDOW_SECONDS"])
    assert created.expires_at == created.created_at + window
    wait(sdk, created.id, lambda b: completed(b) > 0)
    with batch_server.paused():
        assert batch_server.in_engine() > 0, "the batch finished before the engine was frozen"
        end_window(batch_server, created.id)
        done = wait(sdk, created.id)
    assert done.status == "expired" and done.expired_at
    output, errors = lines_of(sdk, done.output_file_id), lines_of(sdk, done.error_file_id)
    assert output and errors
    assert Counter(line["custom_id"] for line in output + errors) == Counter(
        f"e{i}" for i in range(400)
    )
    assert {line["error"]["code"] for line in errors} == {"batch_expired"}
    assert errors[0]["error"]["message"] == (
        "This request could not be executed before the completion window expired."
    )
