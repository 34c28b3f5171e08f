"""The batch runner's own rules: line checks, reading output lines back, resume state."""

import json
from pathlib import Path

import pytest

from vllm_sagemaker.core import batch_lines
from vllm_sagemaker.core.batch_lines import LineChecker, outcome, repair, request_fault
from vllm_sagemaker.core.errors import INTERNAL_ERROR, RequestError
from vllm_sagemaker.core.formats import batch_error_line
from vllm_sagemaker.deploy.batch.minibatches import Answered, error_line
from vllm_sagemaker.deploy.batch.staging import staged_path


def line(custom_id: object, **extra: object) -> bytes:
    record = {"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": {}}
    return json.dumps({**record, **extra}).encode()


def without(name: str) -> bytes:
    record = json.loads(line("x"))
    del record[name]
    return json.dumps(record).encode()


@pytest.mark.parametrize(
    ("raw", "custom_id", "code", "param"),
    [
        (b"{bad", None, "invalid_json_line", None),
        (b"[1, 2]", None, "invalid_json_line", None),
        (without("custom_id"), None, "missing_required_parameter", "custom_id"),
        (without("method"), "x", "missing_required_parameter", "method"),
        (without("url"), "x", "missing_required_parameter", "url"),
        (without("body"), "x", "missing_required_parameter", "body"),
        (line(""), None, "invalid_value", "custom_id"),
        (line(7), None, "invalid_value", "custom_id"),
    ],
)
def test_lines_that_can_never_run(
    raw: bytes, custom_id: str | None, code: str, param: str | None
) -> None:
    checked = LineChecker().check(12, raw)
    assert checked.record is None and checked.fault is not None
    assert checked.custom_id == custom_id
    assert (checked.fault.code, checked.fault.param) == (code, param)
    answer = json.loads(error_line(checked))
    assert answer["custom_id"] == custom_id
    assert answer["response"] is None
    assert answer["error"]["code"] == code
    assert answer["error"]["message"].startswith("line 12: ")


def test_missing_fields_are_worded_as_openai_words_them() -> None:
    fault = LineChecker().check(1, without("custom_id")).fault
    assert fault is not None and fault.message == "Missing required parameter: 'custom_id'."


def test_duplicates_name_the_first_line() -> None:
    checker = LineChecker()
    assert checker.check(1, line("a")).record is not None
    assert checker.check(2, line("b")).record is not None
    duplicate = checker.check(5, line("a"))
    assert duplicate.record is None and duplicate.fault is not None
    assert duplicate.fault.code == "duplicate_custom_id"
    assert json.loads(error_line(duplicate))["error"]["message"] == (
        "line 5: The custom_id 'a' is already used on line 1."
    )


CHAT = "/v1/chat/completions"
SERVED = {CHAT, "/v1/completions", "/tokenize"}


def request(**changes: object) -> dict:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    record = {"custom_id": "a", "method": "POST", "url": CHAT, "body": body}
    return {**record, **changes}


@pytest.mark.parametrize(
    ("record", "endpoint", "code", "param"),
    [
        (request(), CHAT, None, None),
        (request(), None, None, None),
        (request(url=CHAT + "?x=1"), CHAT, None, None),
        (request(method="GET"), CHAT, "invalid_value", "method"),
        (request(url="/v1/completions"), CHAT, "invalid_url", "url"),
        (request(url="/v1/embeddings"), None, "invalid_url", "url"),
        (request(url="/sleep"), None, "invalid_url", "url"),
        (request(url=5), None, "missing_required_parameter", "url"),
        (request(body=[1]), CHAT, "invalid_request", "body"),
        (
            request(body={"messages": [], "stream": True}),
            CHAT,
            "streaming_unsupported",
            "body.stream",
        ),
        (request(body={"model": "other", "messages": []}), CHAT, "model_not_found", "body.model"),
        (request(body={"messages": []}), CHAT, None, None),
    ],
)
def test_request_rules(
    record: dict, endpoint: str | None, code: str | None, param: str | None
) -> None:
    fault = request_fault(record, SERVED, endpoint, models={"m", "adapter"})
    assert (fault.code, fault.param) == (code, param) if fault else code is None


def test_streaming_is_worded_per_endpoint() -> None:
    fault = request_fault(request(body={"stream": True}), SERVED, CHAT)
    assert fault is not None
    assert fault.message == "Chat Completions: Streaming is not supported in the Batch API."


def test_models_are_checked_only_when_known() -> None:
    assert request_fault(request(body={"model": "other"}), SERVED, CHAT) is None


def test_outcomes_read_back() -> None:
    def written(custom_id: str | None, response: object, error: object) -> bytes:
        value = {"id": "b", "custom_id": custom_id, "response": response, "error": error}
        return json.dumps(value).encode()

    success = written("a", {"status_code": 200, "body": {"usage": {"prompt_tokens": 3}}}, None)
    refused = written("c", {"status_code": 400, "body": {"error": {}}}, None)
    anonymous = written(None, None, {"code": "invalid_json_line", "message": "line 9: bad"})
    assert outcome(success).succeeded and outcome(success).usage == {"prompt_tokens": 3}
    assert not outcome(refused).succeeded and outcome(refused).custom_id == "c"
    assert outcome(anonymous).line_number == 9
    answered = Answered()
    for value in (success, refused, anonymous):
        answered.add(outcome(value))
    assert answered.custom_ids == {"a", "c"} and answered.line_numbers == {9}


@pytest.mark.parametrize(
    ("status", "choices", "aborted"),
    [
        (200, [{"finish_reason": "length"}], False),
        (200, [{"finish_reason": "stop"}, {"finish_reason": "abort"}], True),
        (200, [{"finish_reason": "abort"}], True),
        (200, None, False),
        (500, [{"finish_reason": "abort"}], False),
    ],
)
def test_a_line_the_engine_aborted_is_known(
    status: int, choices: list | None, aborted: bool
) -> None:
    body = {"choices": choices} if choices is not None else {"data": []}
    line = json.dumps(
        {"custom_id": "a", "response": {"status_code": status, "body": body}, "error": None}
    )
    assert outcome(line.encode()).aborted is aborted


@pytest.mark.parametrize(
    ("error", "status"),
    [
        # The route raised instead of answering (vLLM fails every request while it stops):
        # a server error, never the line's answer.
        (RequestError(500, "internal error: RuntimeError: shut down", INTERNAL_ERROR), 500),
        (RequestError(400, "line 3: not JSON", "invalid_json_line"), None),
        (RequestError(499, "cancelled", "batch_cancelled"), None),
    ],
)
def test_a_line_without_a_response_has_the_status_of_its_cause(
    error: RequestError, status: int | None
) -> None:
    assert outcome(batch_error_line("a", error)).status_code == status


@pytest.mark.parametrize("line", [b"body", b'"a string"', b"[1, 2]", b'{"id": "1", "custom_'])
def test_a_line_that_is_not_a_json_object_is_no_outcome(line: bytes) -> None:
    """What a container that is not ours may answer (moto's stand-in endpoint answers `body`)."""
    with pytest.raises(ValueError):
        outcome(line)


def test_repair_cuts_a_half_written_line(tmp_path: Path) -> None:
    good = (
        b'{"id": "1", "custom_id": "a", "response": null, "error": {"code": "x", "message": "m"}}\n'
    )
    path = tmp_path / "out.jsonl"
    path.write_bytes(good * 2 + b'{"id": "1", "custom_')
    assert [o.custom_id for o in repair(str(path))] == ["a", "a"]
    assert path.read_bytes() == good * 2


@pytest.mark.parametrize(
    ("uri", "staged_here"),
    [
        ("out.jsonl", True),
        ("out.jsonl.gz", False),
        ("s3://b/k", False),
        ("https://h/p?sig", False),
        ("-", False),
    ],
)
def test_where_answers_are_staged(uri: str, staged_here: bool, tmp_path: Path) -> None:
    staged = staged_path(uri, str(tmp_path))
    assert (staged == uri) is staged_here
    assert staged == staged_path(uri, str(tmp_path))


@pytest.mark.parametrize(
    ("models", "served", "alias"),
    [
        (["tiny"], "This server serves 'tiny'.", '["tiny", "my-vllm-model"]'),
        (["tiny", "a1"], "serves 'tiny', 'a1'.", '["tiny", "my-vllm-model"]'),
        ([f"m{i}" for i in range(12)], "'m9' and 2 more.", '["m0", "my-vllm-model"]'),
        ([], "This server serves none.", '["my-vllm-model"]'),
    ],
)
def test_a_refused_model_says_what_is_served_and_how_to_add_a_name(
    models: list[str], served: str, alias: str
) -> None:
    message = batch_lines.unknown_model("my-vllm-model", models)
    assert message.startswith(
        "The provided model 'my-vllm-model' is not supported by the Batch API. "
    )
    assert served in message
    assert message.endswith(f"SM_VLLM_SERVED_MODEL_NAME='{alias}'.")
