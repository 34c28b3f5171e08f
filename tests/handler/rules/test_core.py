"""Rules written once in core and used by several layers, each with a table of cases."""

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllm_sagemaker.container import serve
from vllm_sagemaker.core import content_types, ids, routing, usage
from vllm_sagemaker.core.batch_lines import CANCELLED_LINE
from vllm_sagemaker.core.config import ASYNC_MARKER, MIB, SERVERLESS_MARKER
from vllm_sagemaker.core.env import ConfigError, flag
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.deploy.batch import minibatches
from vllm_sagemaker.deploy.kit.fleet import run as fleet
from vllm_sagemaker.deploy.kit.fleet.state import Fleet, Shard
from vllm_sagemaker.deploy.kit.plans.transform import transform_call
from vllm_sagemaker.handler.batches.api import batch_object
from vllm_sagemaker.handler.batches.api import batches as batches_api
from vllm_sagemaker.handler.batches.api import files as files_api
from vllm_sagemaker.handler.records.messages import watch_disconnect


@pytest.mark.parametrize(
    ("line_usage", "expected"),
    [
        ({"prompt_tokens": 3, "completion_tokens": 5}, (3, 5)),
        ({"input_tokens": 3, "output_tokens": 5}, (3, 5)),
        ({"prompt_tokens": 4}, (4, 0)),
        ({}, (0, 0)),
        ({"prompt_tokens": True, "completion_tokens": False}, (0, 0)),
        ({"prompt_tokens": "12", "completion_tokens": "many"}, (0, 0)),
        ({"prompt_tokens": 2.5, "completion_tokens": None}, (0, 0)),
        ({"prompt_tokens": -3, "completion_tokens": [1]}, (0, 0)),
        ({"prompt_tokens": 0, "input_tokens": 9}, (0, 0)),
    ],
)
def test_a_token_count_is_a_non_negative_int_never_a_boolean_nor_a_crash(
    line_usage: dict[str, object], expected: tuple[int, int]
) -> None:
    """The same counts whether read off a parsed line (batches, the batch client) or off an
    answer's bytes (log lines)."""
    assert usage.prompt_completion(line_usage) == expected
    assert usage.tokens(json.dumps({"id": "x", "usage": line_usage}).encode()) == expected


def _fleet_unrun_shard(tmp_path: Path) -> RequestError:
    state = Fleet("in.jsonl", "sha256:0", 1, 1, [Shard(0, 1)])
    (answer,) = fleet.shard_answers(state, fleet.Layout(str(tmp_path / "work")))
    assert isinstance(answer, RequestError)
    return answer


@pytest.mark.parametrize(
    ("where", "cancelled_line"),
    [
        ("the server's Batches API", lambda _: CANCELLED_LINE),
        ("deploy batch's fleet, a shard that never ran", _fleet_unrun_shard),
    ],
)
def test_a_cancelled_line_is_499_batch_cancelled_wherever_batches_run(
    where: str, cancelled_line: Callable[[Path], RequestError], tmp_path: Path
) -> None:
    error = cancelled_line(tmp_path)
    assert (error.status, error.code) == (499, "batch_cancelled"), where
    assert error.body()["error"]["type"] == "invalid_request_error"


# Every yes/no variable, with its default; `serve` checks them all before vLLM starts.
FLAGS = {
    "SAGEMAKER_ENABLE_STATEFUL_SESSIONS": False,
    "SAGEMAKER_BATCH": False,
    ASYNC_MARKER: False,
    SERVERLESS_MARKER: False,
    "SAGEMAKER_BATCH_API": True,
    "SAGEMAKER_BATCH_YIELD": True,
    "STANDARD_AUTO_INSTALL_REQ": True,
    "SAGEMAKER_CPU_PRELOAD": True,
    "SAGEMAKER_MODEL_FALLBACK": True,
}


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("SAGEMAKER_BATCH", "true", True),
        ("SAGEMAKER_BATCH", " TRUE ", True),
        ("SAGEMAKER_BATCH", "1", True),
        ("SAGEMAKER_BATCH", "Yes", True),
        ("SAGEMAKER_BATCH", "on", True),
        ("SAGEMAKER_BATCH", None, False),
        ("SAGEMAKER_BATCH", "", False),
        ("SAGEMAKER_BATCH", "  ", False),
        ("SAGEMAKER_BATCH_API", "false", False),
        ("SAGEMAKER_BATCH_API", "False", False),
        ("SAGEMAKER_BATCH_API", "0", False),
        ("SAGEMAKER_BATCH_API", "no", False),
        ("SAGEMAKER_BATCH_API", "OFF", False),
        ("SAGEMAKER_BATCH_API", None, True),
        ("SAGEMAKER_BATCH_API", "", True),
        ("SAGEMAKER_ENABLE_STATEFUL_SESSIONS", "1", True),
        (ASYNC_MARKER, "true", True),
        ("SAGEMAKER_BATCH_YIELD", "no", False),
        ("STANDARD_AUTO_INSTALL_REQ", "0", False),
        ("SAGEMAKER_CPU_PRELOAD", "false", False),
        *((name, "maybe", ConfigError) for name in FLAGS),
        ("SAGEMAKER_BATCH", "2", ConfigError),
        ("SAGEMAKER_BATCH_API", "disabled", ConfigError),
        ("STANDARD_AUTO_INSTALL_REQ", "y", ConfigError),
    ],
)
def test_a_yes_no_variable_is_read_one_way_and_a_bad_one_stops_serve(
    name: str,
    value: str | None,
    expected: bool | type[ConfigError],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {} if value is None else {name: value}
    if not isinstance(expected, bool):
        with pytest.raises(ConfigError, match=name):
            flag(env, name, FLAGS[name])
        for variable in FLAGS:
            monkeypatch.delenv(variable, raising=False)
        monkeypatch.setenv("SM_VLLM_MODEL", "some/model")
        monkeypatch.setenv(name, value or "")
        assert serve.run([], dry_run=True) == 2
        (message,) = capsys.readouterr().err.splitlines()
        assert message.startswith(f"serve: {name}=") and "true, 1, yes, on" in message
        return
    assert flag(env, name, FLAGS[name]) is expected


THIRTY_DAYS_S = 30 * 24 * 3600
_HEADERS = minibatches.CONTAINER_HEADERS
_TRANSFORM = transform_call("job", "s3://b/in/", "s3://b/out/", "ml.g5.xlarge", 1, 6, 1, False)
_FILE_EXPIRY = {"expires_after[anchor]": "created_at", "expires_after[seconds]": str(THIRTY_DAYS_S)}
_OUTPUT_EXPIRY = {"anchor": "created_at", "seconds": THIRTY_DAYS_S}
_BATCH = {"input_file_id": "file-a", "endpoint": "/v1/completions", "completion_window": "24h"}


@pytest.mark.parametrize(
    ("what", "observed", "expected"),
    [
        (
            "the batch client's calls are batch work to the container",
            routing.is_batch_work(
                routing.custom_attributes(_HEADERS["X-Amzn-SageMaker-Custom-Attributes"])
            ),
            True,
        ),
        (
            "the batch client sends JSON Lines the container reads as JSON Lines",
            content_types.framing(_HEADERS["Content-Type"]),
            content_types.Framing.JSON_LINES,
        ),
        (
            "a transform job sends and accepts the same JSON Lines",
            (
                _TRANSFORM.params["TransformInput"]["ContentType"],
                _TRANSFORM.params["TransformOutput"]["Accept"],
            ),
            (content_types.JSON_LINES, content_types.JSON_LINES),
        ),
        ("a batch input file is kept 30 days", files_api.expires_at({}, "batch", 0), THIRTY_DAYS_S),
        (
            "a file may ask for 30 days",
            files_api.expires_at(_FILE_EXPIRY, "user_data", 0),
            THIRTY_DAYS_S,
        ),
        (
            "a batch's output may ask for 30 days",
            batch_object.create_params(
                json.dumps({**_BATCH, "output_expires_after": _OUTPUT_EXPIRY}).encode(),
                frozenset({"/v1/completions"}),
            ).output_expires_after_s,
            THIRTY_DAYS_S,
        ),
        ("a Batches API body is at most 1 MiB", batches_api.MAX_BODY_BYTES, 1024 * 1024),
        (
            "a MiB in a refusal is 2**20 bytes",
            files_api.too_large(3 * MIB).message,
            "a file is at most 3 MiB",
        ),
    ],
)
def test_a_wire_constant_means_the_same_on_every_side(
    what: str, observed: object, expected: object
) -> None:
    assert observed == expected, what


@pytest.mark.parametrize(
    ("messages", "gone"),
    [
        ([{"type": "http.disconnect"}], True),
        (
            [
                {"type": "http.request", "body": b"", "more_body": False},
                {"type": "http.disconnect"},
            ],
            True,
        ),
        ([OSError("the connection broke")], True),
        ([{"type": "http.request", "body": b"x"}], False),
        ([], False),
    ],
)
def test_a_client_is_gone_when_it_disconnects_or_cannot_be_read(
    messages: list[dict[str, Any] | Exception], gone: bool
) -> None:
    """The one watcher of /invocations and of custom code's invoke(): `on_gone` runs once the
    client leaves; a client still there (its next message never comes) leaves it unrun."""

    async def watched() -> list[str]:
        pending = list(messages)
        called: list[str] = []
        # Set once the watcher has read every message and waits for the next: it is still there.
        waiting = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if not pending:
                waiting.set()
                await asyncio.Event().wait()
            message = pending.pop(0)
            if isinstance(message, Exception):
                raise message
            return message

        watcher = asyncio.create_task(watch_disconnect(receive, lambda: called.append("gone")))
        still_there = asyncio.create_task(waiting.wait())
        await asyncio.wait({watcher, still_there}, return_when=asyncio.FIRST_COMPLETED)
        watcher.cancel()
        still_there.cancel()
        return called

    assert asyncio.run(watched()) == (["gone"] if gone else [])


@pytest.mark.parametrize(
    ("value", "prefix", "is_id"),
    [
        (ids.new_id(ids.FILE_ID_PREFIX), "file-", True),
        (ids.new_id(ids.BATCH_ID_PREFIX), "batch_", True),
        (ids.new_id(ids.REQUEST_ID_PREFIX), "batch_req_", True),
        (ids.batch_output_file_id("batch_ab12", "output"), "file-", True),
        ("file-0123abcdef", "file-", True),
        ("file-ab_1", "file-", True),
        ("file-0123-output", "file-", True),
        ("batch_0123abcdef", "batch_", True),
        ("batch_a-b", "batch_", True),
        ("file-" + "a" * 123, "file-", True),
        ("file-" + "a" * 124, "file-", False),
        ("file-", "file-", False),
        ("batch_0123", "file-", False),
        ("file-0123", "batch_", False),
        ("file-a.b", "file-", False),
        ("file-a/b", "file-", False),
        ("file-a b", "file-", False),
        ("file-\x00", "file-", False),
        ("file-ab_1", "", True),
        ("-file", "", False),
        ("..", "", False),
        ("", "", False),
    ],
)
def test_an_id_is_its_prefix_then_letters_digits_and_dashes(
    value: str, prefix: str, is_id: bool
) -> None:
    assert ids.is_id(value, prefix) is is_id


@pytest.mark.parametrize(
    ("batch_id", "kind", "file_id"),
    [
        ("batch_ab12", "output", "file-ab12-output"),
        ("batch_ab12", "errors", "file-ab12-errors"),
    ],
)
def test_a_batch_output_file_id_names_its_batch(batch_id: str, kind: str, file_id: str) -> None:
    assert ids.batch_output_file_id(batch_id, kind) == file_id
