"""The SageMaker platform rules as tables: adapter selection and registration, sessions, token
counts in log lines, async settings, and what `serve` adds for S3 streaming, LoRA and start-up."""

import json
import re
import time
from pathlib import Path

import pytest

from vllm_sagemaker.container import env_args
from vllm_sagemaker.core import routing, usage
from vllm_sagemaker.core.config import MIB, Config
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.process.logs import logfmt
from vllm_sagemaker.handler.sagemaker import adapters, sessions

SERVED = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
CHAT = {"messages": [{"role": "user", "content": "hi"}]}
EXPIRES = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*;\sExpires=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.mark.parametrize(
    "record",
    [
        CHAT,
        {**CHAT, "model": "base"},
        {"prompt": "x", "model": None},
        {"input": ["a", "b"]},
        {"inputs": "x", "parameters": {"max_new_tokens": 2}},
        {
            "custom_id": "c1",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"prompt": "x", "model": "m"},
        },
    ],
)
def test_adapter_becomes_the_model_of_every_kind(record: dict) -> None:
    raw = json.dumps(record).encode()
    found = routing.target(record, raw, None, SERVED, model="a1")
    assert json.loads(found.body)["model"] == "a1"


def test_without_the_header_a_body_keeps_its_model_and_bytes() -> None:
    raw = b'{"model": "a2", "messages": [{"role": "user", "content": "hi"}]}'
    assert routing.target(json.loads(raw), raw, None, SERVED).body == raw


@pytest.mark.parametrize(
    ("body", "query", "expected"),
    [
        (b'{"name": "a1", "src": "/opt/a1"}', b"", adapters.Registration("a1", "/opt/a1")),
        (b"", b"name=a2&src=%2Fopt%2Fa2", adapters.Registration("a2", "/opt/a2")),
        (b"not json", b"name=a3&src=/x&pin=true", adapters.Registration("a3", "/x", pin=True)),
        (
            b'{"name": "a4", "src": "/y", "preload": false}',
            b"name=ignored",
            adapters.Registration("a4", "/y", preload=False),
        ),
    ],
)
def test_adapter_registration_from_body_or_query(
    body: bytes, query: bytes, expected: adapters.Registration
) -> None:
    assert adapters.registration(body, query) == expected


@pytest.mark.parametrize(
    ("body", "query", "param"),
    [
        (b"", b"", "name"),
        (b'{"src": "/x"}', b"", "name"),
        (b'{"name": "a", "src": ""}', b"", "src"),
        (b'{"name": 3, "src": "/x"}', b"", "name"),
        (b'{"name": "a", "src": "/x", "pin": "yes"}', b"", "pin"),
    ],
)
def test_bad_adapter_registrations_name_the_field(body: bytes, query: bytes, param: str) -> None:
    with pytest.raises(RequestError) as error:
        adapters.registration(body, query)
    assert (error.value.status, error.value.param) == (400, param)


@pytest.mark.parametrize(
    ("path", "name"), [("/adapters/a1", "a1"), ("/adapters/my-adapter", "my-adapter")]
)
def test_unregistered_name(path: str, name: str) -> None:
    assert adapters.unregistered_name(path) == name


@pytest.mark.parametrize("path", ["/adapters/", "/adapters/a/b"])
def test_unregister_without_a_name_is_424(path: str) -> None:
    with pytest.raises(RequestError) as error:
        adapters.unregistered_name(path)
    assert error.value.status == 424


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"requestType": "NEW_SESSION"}', sessions.NEW_SESSION),
        (b'{"requestType":"CLOSE"}', sessions.CLOSE),
        (json.dumps(CHAT).encode(), None),
        (b'{"prompt": "say \\"requestType\\""}', None),
    ],
)
def test_session_request_type(body: bytes, kind: str | None) -> None:
    assert sessions.request_type(body) == kind


@pytest.mark.parametrize(
    "body", [b'{"requestType": "BOGUS"}', b'{"requestType": "CLOSE", "extra": 1}']
)
def test_malformed_session_requests_are_400(body: bytes) -> None:
    with pytest.raises(RequestError) as error:
        sessions.request_type(body)
    assert error.value.status == 400


def test_expires_header_matches_sagemakers_pattern() -> None:
    header = sessions.expires_header("4f1c-9a", 0).decode()
    assert header == "4f1c-9a; Expires=1970-01-01T00:00:00Z"
    assert EXPIRES.match(header)


def _status(call: object) -> int:
    try:
        call()  # type: ignore[operator]
    except RequestError as error:
        return error.status
    return 200


def test_session_protocol(tmp_path: Path) -> None:
    store = sessions.Sessions(60, str(tmp_path))
    other_process = sessions.Sessions(60, str(tmp_path))
    opened = sessions.handle(store, sessions.NEW_SESSION, None)
    assert opened is not None
    ((name, value),) = opened.headers
    assert name == sessions.NEW_SESSION_ID and EXPIRES.match(value.decode())
    session_id = value.decode().split(";")[0]
    # A request in the session goes on (None) in this process and in another one.
    assert sessions.handle(store, None, session_id) is None
    assert sessions.handle(other_process, None, session_id) is None
    assert sessions.handle(store, None, None) is None
    assert sessions.handle(store, None, sessions.NEW_SESSION) is None
    assert _status(lambda: sessions.handle(store, None, "unknown-id")) == 400
    assert _status(lambda: sessions.handle(store, None, "../../etc")) == 400
    assert _status(lambda: sessions.handle(store, sessions.CLOSE, None)) == 424
    closed = sessions.handle(other_process, sessions.CLOSE, session_id)
    assert closed is not None
    assert closed.headers == [(sessions.CLOSED_SESSION_ID, session_id.encode())]
    assert _status(lambda: sessions.handle(store, None, session_id)) == 400
    assert _status(lambda: sessions.handle(store, sessions.CLOSE, session_id)) == 400


def test_sessions_expire(tmp_path: Path) -> None:
    store = sessions.Sessions(1, str(tmp_path))
    opened = store.open()
    session_id = opened.headers[0][1].decode().split(";")[0]
    time.sleep(1.1)
    with pytest.raises(RequestError) as error:
        store.check(session_id)
    assert error.value.code == "session_expired"


@pytest.mark.parametrize("kind", [sessions.NEW_SESSION, sessions.CLOSE, None])
def test_sessions_off_refuse_session_requests(kind: str | None) -> None:
    with pytest.raises(RequestError) as error:
        sessions.handle(None, kind, "some-id")
    assert error.value.code == "sessions_disabled"


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        (b'{"id": "x", "usage": {"prompt_tokens": 5, "completion_tokens": 3}}', (5, 3)),
        (b'{"data": [], "usage":{"prompt_tokens":7,"total_tokens":7}}', (7, 0)),
        (
            b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 9}}\n\n',
            (2, 9),
        ),
        (b'data: {"choices": [], "usage": null}\n\n', (0, 0)),
        (b'{"error": {"message": "bad"}}', (0, 0)),
        (b'{"usage": {"prompt_tokens": -1, "completion_tokens": "x"}}', (0, 0)),
    ],
)
def test_usage_tokens(body: bytes, tokens: tuple[int, int]) -> None:
    assert usage.tokens(body) == tokens


def test_log_line_quotes_values_with_spaces() -> None:
    line = logfmt("invocation", id="r1", kind="batched chat", adapter=None, ms="1.5")
    assert line == 'invocation id=r1 kind="batched chat" adapter=- ms=1.5'


@pytest.mark.parametrize(
    ("env", "payload_mb", "deadline_s"),
    [
        ({}, 6, 540),
        ({"SAGEMAKER_BATCH": "true"}, 100, 540),
        ({"SAGEMAKER_ASYNC_INFERENCE": "true"}, 1024, 3540),
        (
            {"SAGEMAKER_ASYNC_INFERENCE": "true", "SAGEMAKER_MAX_PAYLOAD_IN_MB": "50"},
            50,
            3540,
        ),
        ({"SAGEMAKER_SERVERLESS": "true"}, 4, 54),
        ({"SAGEMAKER_SERVERLESS": "false"}, 6, 540),
        ({"SAGEMAKER_SERVERLESS": "true", "SAGEMAKER_MAX_PAYLOAD_IN_MB": "2"}, 2, 54),
    ],
)
def test_each_mode_s_limits(env: dict[str, str], payload_mb: int, deadline_s: float) -> None:
    config = Config.from_env(env)
    assert config.max_payload_bytes == payload_mb * MIB
    assert config.mini_batch_timeout_s == deadline_s


@pytest.mark.parametrize(
    ("env", "batch_api"),
    [
        ({}, True),
        ({"SAGEMAKER_SERVERLESS": "true"}, False),
        ({"SAGEMAKER_SERVERLESS": "true", "SAGEMAKER_BATCH_API": "true"}, True),
        ({"SAGEMAKER_BATCH_API": "false"}, False),
    ],
)
def test_serverless_turns_the_batches_api_off_unless_asked(
    env: dict[str, str], batch_api: bool
) -> None:
    assert Config.from_env(env).batch_api.enabled is batch_api


@pytest.mark.parametrize(
    ("model", "given", "expected"),
    [
        ("s3://bucket/llama/", [], ["--load-format", "runai_streamer"]),
        ("S3://bucket/llama/", [], ["--load-format", "runai_streamer"]),
        ("gs://bucket/llama/", [], ["--load-format", "runai_streamer"]),
        ("s3://bucket/llama/", ["--load-format", "safetensors"], []),
        ("s3://bucket/llama/", ["--load-format=runai_streamer_sharded"], []),
        ("/opt/ml/model", [], []),
        ("meta-llama/Llama-3.1-8B", [], []),
    ],
)
def test_load_format(model: str, given: list[str], expected: list[str]) -> None:
    assert env_args.load_format_args(model, given) == expected


# What `serve` adds to every server's environment unless the user set it.
ALWAYS = {
    "PYTHONFAULTHANDLER": "1",
    "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
}


@pytest.mark.parametrize(
    ("env", "model", "expected"),
    [
        ({}, "/opt/ml/model", ALWAYS),
        (
            {"VLLM_ENGINE_READY_TIMEOUT_S": "900"},
            "/opt/ml/model",
            {"PYTHONFAULTHANDLER": "1", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75"},
        ),
        (
            {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "5", "PYTHONFAULTHANDLER": ""},
            "/opt/ml/model",
            {"VLLM_ENGINE_READY_TIMEOUT_S": "3600"},
        ),
        (
            {"SM_VLLM_ENABLE_LORA": "true"},
            "m",
            {**ALWAYS, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"},
        ),
        ({"SM_VLLM_ENABLE_LORA": "false"}, "m", ALWAYS),
        ({"SM_VLLM_ENABLE_LORA": "", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0"}, "m", ALWAYS),
        (
            {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000"},
            "s3://models/tiny/",
            {**ALWAYS, "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"},
        ),
        ({}, "s3://models/tiny/", ALWAYS),
        ({"AWS_ENDPOINT_URL": "http://x"}, "/opt/ml/model", ALWAYS),
    ],
)
def test_platform_env(env: dict[str, str], model: str, expected: dict[str, str]) -> None:
    assert env_args.platform_env(env, ["--model", model, "--port", "8080"]) == expected


def test_no_runtime_adapters_with_several_api_servers() -> None:
    env = {"SM_VLLM_ENABLE_LORA": "true"}
    args = ["--model", "m", "--api-server-count", "2"]
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in env_args.platform_env(env, args)


@pytest.mark.parametrize(
    ("args", "count"),
    [
        ([], 1),
        (["--api-server-count", "2"], 2),
        (["--api-server-count=4"], 4),
        (["-asc", "3"], 3),
        (["--api-server-count", "x"], 1),
    ],
)
def test_api_server_count(args: list[str], count: int) -> None:
    assert env_args.api_server_count(args) == count


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b"Success", 200),
        (404, b'{"error": {"message": "No adapter found for /nope"}}', 404),
        (
            500,
            b'{"error": {"message": "LoRA rank 16 is greater than max_lora_rank 8."}}',
            400,
        ),
        (500, b"adapter_model.safetensors doesn't contain tensors", 400),
        (500, b'{"error": {"message": "engine died"}}', 500),
    ],
)
def test_adapter_faults_are_the_callers(status: int, body: bytes, expected: int) -> None:
    mapped, answer = adapters.client_status(status, body)
    assert mapped == expected
    if expected == 400 and status == 500:
        assert b"max_lora_rank" in answer or b"tensors" in answer
