"""The batch runner's own rules: line checks, reading output lines back, resume state."""

import json
from pathlib import Path

import pytest

from deploy.batch import Answered, chunks, repair, staged_path
from deploy.batch_lines import LineChecker, outcome


def line(custom_id: object, **extra: object) -> bytes:
    return json.dumps(
        {"custom_id": custom_id, "url": "/v1/completions", "body": {}, **extra}
    ).encode()


@pytest.mark.parametrize(
    ("raw", "custom_id", "code"),
    [
        (b"{bad", None, "invalid_json"),
        (b"[1, 2]", None, "missing_custom_id"),
        (json.dumps({"url": "/v1/completions", "body": {}}).encode(), None, "missing_custom_id"),
        (line(""), None, "missing_custom_id"),
        (line(7), None, "missing_custom_id"),
        (json.dumps({"custom_id": "x", "url": "/v1/completions"}).encode(), "x", "missing_body"),
    ],
)
def test_lines_that_never_reach_the_container(raw: bytes, custom_id: str | None, code: str) -> None:
    checked = LineChecker().check(12, raw)
    assert checked.send is None
    assert checked.custom_id == custom_id
    answer = json.loads(checked.answer or b"")
    assert answer["custom_id"] == custom_id
    assert answer["response"] is None
    assert answer["error"]["code"] == code
    assert answer["error"]["message"].startswith("line 12: ")


def test_duplicates_name_the_first_line() -> None:
    checker = LineChecker()
    assert checker.check(1, line("a")).send == line("a")
    assert checker.check(2, line("b")).send == line("b")
    duplicate = checker.check(5, line("a"))
    assert duplicate.send is None
    assert json.loads(duplicate.answer or b"")["error"]["message"] == (
        "line 5: custom_id 'a' was already used on line 1"
    )


def test_outcomes_read_back() -> None:
    def written(custom_id: str | None, response: object, error: object) -> bytes:
        value = {"id": "b", "custom_id": custom_id, "response": response, "error": error}
        return json.dumps(value).encode()

    success = written("a", {"status_code": 200, "body": {"usage": {"prompt_tokens": 3}}}, None)
    refused = written("c", {"status_code": 400, "body": {"error": {}}}, None)
    anonymous = written(None, None, {"code": "invalid_json", "message": "line 9: bad"})
    assert outcome(success).succeeded and outcome(success).usage == {"prompt_tokens": 3}
    assert not outcome(refused).succeeded and outcome(refused).custom_id == "c"
    assert outcome(anonymous).line_number == 9
    answered = Answered()
    for value in (success, refused, anonymous):
        answered.add(outcome(value))
    assert answered.custom_ids == {"a", "c"} and answered.line_numbers == {9}


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


def test_chunks() -> None:
    assert [len(c) for c in chunks(range(70), 32)] == [32, 32, 6]
