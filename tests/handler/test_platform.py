"""SageMaker platform protocols on real engines: LoRA adapters (the identifier header and
/adapters), stateful sessions (also across two API-server processes, and expiry), a model
streamed from S3, async endpoints, and the log line of every invocation."""

import calendar
import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import AUTH
from tests.handler.test_invocations import JSON, stable
from tests.support import cli, waiting
from tests.support.json_lines import parse_lines, split_lines
from tests.support.servers import Server

ADAPTER = "X-Amzn-SageMaker-Adapter-Identifier"
SESSION = "X-Amzn-SageMaker-Session-Id"
EXPIRES = re.compile(r"^([a-zA-Z0-9](?:-*[a-zA-Z0-9])*);\sExpires=(\S+)$")
PROMPT = {"prompt": "The quick brown", "max_tokens": 8, "temperature": 0}
CHAT = {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 8, "temperature": 0}


def invoke(server: Server, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(
        server.url + "/invocations",
        headers={**JSON, **{k.replace("_", "-"): v for k, v in headers.items()}},
        content=json.dumps(body).encode(),
        timeout=120,
    )


def direct(server: Server, route: str, body: dict) -> dict:
    answer = httpx.post(server.url + route, json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def text_of(answer: dict) -> str:
    choice = answer["choices"][0]
    return choice["message"]["content"] if "message" in choice else choice["text"]


def streamed_text(response: httpx.Response) -> str:
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
    return "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events)


@pytest.mark.parametrize(
    ("route", "body"), [("/v1/completions", PROMPT), ("/v1/chat/completions", CHAT)]
)
def test_adapter_header_answers_as_the_adapter(chat_server: Server, route: str, body: dict) -> None:
    routed = invoke(chat_server, body, **{ADAPTER: "a1"})
    assert routed.status_code == 200, routed.text
    assert routed.json()["model"] == "a1"
    assert stable(routed.json()) == stable(direct(chat_server, route, {**body, "model": "a1"}))
    assert text_of(routed.json()) != text_of(direct(chat_server, route, body))


def test_streamed_chat_with_the_adapter_header(chat_server: Server) -> None:
    body = {**CHAT, "stream": True}
    routed = invoke(chat_server, body, **{ADAPTER: "a1"})
    assert routed.status_code == 200
    assert routed.headers["content-type"].startswith("text/event-stream")
    adapter_text = streamed_text(routed)
    assert adapter_text == text_of(
        direct(chat_server, "/v1/chat/completions", {**CHAT, "model": "a1"})
    )
    assert adapter_text != streamed_text(invoke(chat_server, body))


def test_every_record_of_a_mini_batch_uses_the_adapter(chat_server: Server) -> None:
    bodies = [PROMPT, CHAT, {**PROMPT, "prompt": "Paris is the capital"}]
    lines = httpx.post(
        chat_server.url + "/invocations",
        headers={"Content-Type": "application/jsonlines", ADAPTER: "a1"},
        content=b"".join(json.dumps(b).encode() + b"\n" for b in bodies),
        timeout=120,
    )
    assert lines.status_code == 200
    answers = parse_lines(lines.text)
    assert len(answers) == 3
    for body, answer in zip(bodies, answers, strict=True):
        route = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        assert answer["model"] == "a1"
        assert text_of(answer) == text_of(direct(chat_server, route, {**body, "model": "a1"}))
        assert text_of(answer) != text_of(direct(chat_server, route, body))


def test_a_bodys_own_model_is_kept_without_the_header(chat_server: Server) -> None:
    routed = invoke(chat_server, {**PROMPT, "model": "a1"})
    assert routed.json()["model"] == "a1"
    assert text_of(routed.json()) == text_of(
        direct(chat_server, "/v1/completions", {**PROMPT, "model": "a1"})
    )


def test_unknown_adapter_is_404_never_the_base_model(chat_server: Server) -> None:
    answer = invoke(chat_server, PROMPT, **{ADAPTER: "no-such-adapter"})
    assert answer.status_code == 404
    assert "does not exist" in answer.json()["error"]["message"]


def test_adapter_registered_at_run_time_then_removed(
    chat_server: Server, adapters: dict[str, Path]
) -> None:
    registered = httpx.post(
        chat_server.url + "/adapters", json={"name": "a2", "src": str(adapters["a2"])}
    )
    assert (registered.status_code, registered.text) == (200, "Adapter a2 registered")
    try:
        routed = invoke(chat_server, PROMPT, **{ADAPTER: "a2"})
        assert routed.status_code == 200
        a2 = direct(chat_server, "/v1/completions", {**PROMPT, "model": "a2"})
        assert text_of(routed.json()) == text_of(a2)
        assert text_of(a2) != text_of(
            direct(chat_server, "/v1/completions", {**PROMPT, "model": "a1"})
        )
        again = httpx.post(
            chat_server.url + "/adapters", json={"name": "a2", "src": str(adapters["a2"])}
        )
        assert (
            again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
        )
    finally:
        removed = httpx.delete(chat_server.url + "/adapters/a2")
    assert (removed.status_code, removed.text) == (200, "Adapter a2 unregistered")
    assert invoke(chat_server, PROMPT, **{ADAPTER: "a2"}).status_code == 404
    assert httpx.delete(chat_server.url + "/adapters/a2").status_code == 404


def test_adapter_registered_by_query_parameters_with_an_alias(
    chat_server: Server, adapters: dict[str, Path]
) -> None:
    registered = httpx.post(
        chat_server.url + "/adapters",
        params={"name": "a2-query", "src": str(adapters["a2"])},
        headers={"X-Amzn-SageMaker-Adapter-Alias": "my-alias"},
    )
    assert (registered.status_code, registered.text) == (200, "Adapter my-alias registered")
    try:
        assert invoke(chat_server, PROMPT, **{ADAPTER: "a2-query"}).status_code == 200
    finally:
        assert httpx.delete(chat_server.url + "/adapters/a2-query").status_code == 200


@pytest.mark.parametrize(
    ("payload", "status", "says"),
    [
        ({"name": "big", "src": "rank16"}, 400, "max_lora_rank"),
        ({"name": "nowhere", "src": "/no/such/adapter"}, 404, "No adapter found"),
        ({"src": "/x"}, 400, "name is required"),
    ],
)
def test_bad_adapters_get_4xx_with_the_reason(
    chat_server: Server, adapters: dict[str, Path], payload: dict, status: int, says: str
) -> None:
    if payload.get("src") in adapters:
        payload = {**payload, "src": str(adapters[payload["src"]])}
    answer = httpx.post(chat_server.url + "/adapters", json=payload, timeout=60)
    assert answer.status_code == status
    assert says in answer.json()["error"]["message"]
    assert httpx.get(chat_server.url + "/ping").status_code == 200


def test_adapters_need_the_api_key_and_lora(score_server: Server) -> None:
    payload = {"name": "a", "src": "/x"}
    assert httpx.post(score_server.url + "/adapters", json=payload).status_code == 401
    answer = httpx.post(score_server.url + "/adapters", json=payload, headers=AUTH)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "adapters_disabled"


def new_session(server: Server) -> tuple[str, float]:
    opened = invoke(server, {"requestType": "NEW_SESSION"})
    assert opened.status_code == 200, opened.text
    match = EXPIRES.match(opened.headers["X-Amzn-SageMaker-New-Session-Id"])
    assert match is not None
    expires = calendar.timegm(time.strptime(match.group(2), "%Y-%m-%dT%H:%M:%SZ"))
    return match.group(1), expires


def test_session_round_trip(chat_server: Server) -> None:
    session_id, expires = new_session(chat_server)
    assert 1100 < expires - time.time() < 1300
    assert invoke(chat_server, PROMPT, **{SESSION: session_id}).status_code == 200
    streamed = invoke(chat_server, {**CHAT, "stream": True}, **{SESSION: session_id})
    assert streamed.status_code == 200 and streamed_text(streamed)
    closed = invoke(chat_server, {"requestType": "CLOSE"}, **{SESSION: session_id})
    assert closed.status_code == 200
    assert closed.headers["X-Amzn-SageMaker-Closed-Session-Id"] == session_id
    after = invoke(chat_server, PROMPT, **{SESSION: session_id})
    assert after.status_code == 400 and after.json()["error"]["code"] == "session_not_found"
    assert invoke(chat_server, {"requestType": "CLOSE"}, **{SESSION: session_id}).status_code == 400


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (PROMPT, {SESSION: "no-such-session"}, 400, "session_not_found"),
        (PROMPT, {SESSION: "NEW_SESSION"}, 200, None),
        ({"requestType": "CLOSE"}, {}, 424, "missing_session_id"),
        ({"requestType": "BOGUS"}, {}, 400, "invalid_session_request"),
    ],
)
def test_session_errors(
    chat_server: Server, body: dict, headers: dict[str, str], status: int, code: str | None
) -> None:
    answer = invoke(chat_server, body, **headers)
    assert answer.status_code == status
    if code:
        assert answer.json()["error"]["code"] == code


@pytest.mark.parametrize(
    ("body", "headers"), [({"requestType": "NEW_SESSION"}, {}), (PROMPT, {SESSION: "abc"})]
)
def test_sessions_off_say_so(embed_server: Server, body: dict, headers: dict[str, str]) -> None:
    answer = invoke(embed_server, body, **headers)
    assert answer.status_code == 400
    assert "SAGEMAKER_ENABLE_STATEFUL_SESSIONS" in answer.json()["error"]["message"]


def serving_pids(server: Server, inference_ids: list[str], timeout: float = 120) -> list[str]:
    """The API-server process that logged each invocation, by its id."""
    patterns = [
        re.compile(rf"pid=(\d+)\] invocation id={re.escape(inference_id)} ")
        for inference_id in inference_ids
    ]

    def found() -> list[str] | None:
        log = server.log_path.read_text(errors="replace")
        matches = [pattern.search(log) for pattern in patterns]
        return [m.group(1) for m in matches if m] if all(matches) else None

    return waiting.until(found, timeout, f"no log line for some of {inference_ids}", 0.05)


def statuses_by_process(server: Server, body: dict, session_id: str) -> dict[str, set[int]]:
    """Send the request 20 times on fresh connections, with no wait between them; the statuses
    each API-server process answered."""
    sent = {uuid.uuid4().hex: 0 for _ in range(20)}
    for inference_id in sent:
        headers = {SESSION: session_id, "X-Amzn-SageMaker-Inference-Id": inference_id}
        sent[inference_id] = invoke(server, body, **headers).status_code
    seen: dict[str, set[int]] = {}
    for pid, status in zip(serving_pids(server, list(sent)), sent.values(), strict=True):
        seen.setdefault(pid, set()).add(status)
    return seen


def across_both_processes(send: Callable[[], dict[str, set[int]]]) -> dict[str, set[int]]:
    """What `send` saw, once one round of it reached both API-server processes."""
    for _ in range(10):
        if len(seen := send()) == 2:
            return seen
    raise AssertionError(f"only one API-server process answered: {seen}")


def test_sessions_hold_across_two_api_server_processes(platform_server: Server) -> None:
    """Each round opens its own session and uses it at once, well inside its 10 s: a round whose
    requests all reached one process is tried again with a new session, never with one that
    may have expired meanwhile."""
    short = {**PROMPT, "max_tokens": 1}
    sessions: list[str] = []

    def open_and_use() -> dict[str, set[int]]:
        sessions.append(new_session(platform_server)[0])
        return statuses_by_process(platform_server, short, sessions[-1])

    assert all(s == {200} for s in across_both_processes(open_and_use).values())
    closed = invoke(platform_server, {"requestType": "CLOSE"}, **{SESSION: sessions[-1]})
    assert closed.status_code == 200
    after_close = across_both_processes(
        lambda: statuses_by_process(platform_server, short, sessions[-1])
    )
    assert all(s == {400} for s in after_close.values())


def test_sessions_expire(platform_server: Server) -> None:
    session_id, expires = new_session(platform_server)
    assert invoke(platform_server, PROMPT, **{SESSION: session_id}).status_code == 200
    time.sleep(max(0.0, expires - time.time()) + 1.1)
    late = invoke(platform_server, PROMPT, **{SESSION: session_id})
    assert late.status_code == 400
    assert late.json()["error"]["code"] in ("session_expired", "session_not_found")


def test_model_streamed_from_s3_serves(platform_server: Server, s3_model: str) -> None:
    answer = invoke(platform_server, PROMPT)
    assert answer.status_code == 200
    assert answer.json()["model"] == s3_model
    assert "runai_streamer" in platform_server.log_path.read_text(errors="replace")


def test_dry_run_shows_s3_streaming_and_the_ready_timeout(s3_model: str) -> None:
    shown = cli.run("serve", "--dry-run", env={"SM_VLLM_MODEL": s3_model}, text=True)
    assert shown.returncode == 0, shown.stderr
    command = json.loads(shown.stdout)
    assert command[command.index("--load-format") + 1] == "runai_streamer"
    assert "VLLM_ENGINE_READY_TIMEOUT_S=3600" in shown.stderr
    # Idle connections outlive the callers' pools (vLLM's own 5 s races them: a reset).
    assert "VLLM_HTTP_TIMEOUT_KEEP_ALIVE=75" in shown.stderr
    assert "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0" in shown.stderr


def test_async_endpoint_answers_20_mb_whole(platform_server: Server) -> None:
    padding = "x" * 40_000
    records = [{**PROMPT, "max_tokens": 1, "user": f"{i}-{padding}"} for i in range(540)]
    body = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    assert len(body) > 20 * 1024 * 1024
    with httpx.stream(
        "POST",
        platform_server.url + "/invocations",
        headers={"Content-Type": "application/jsonlines"},
        content=body,
        timeout=600,
    ) as answer:
        content = answer.read()
    assert answer.status_code == 200
    assert answer.headers["content-length"] == str(len(content))
    assert "transfer-encoding" not in answer.headers
    lines = split_lines(content)
    assert len(lines) == len(records)
    assert all(json.loads(line)["object"] == "text_completion" for line in lines)


def test_async_endpoint_refuses_to_stream(platform_server: Server) -> None:
    answer = invoke(platform_server, {**CHAT, "stream": True})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "stream_not_supported"
    assert "async" in answer.json()["error"]["message"]
    plain = invoke(platform_server, CHAT)
    assert plain.status_code == 200 and plain.headers["content-length"]


def test_one_log_line_per_invocation(chat_server: Server) -> None:
    inference_id = uuid.uuid4().hex
    answer = invoke(
        chat_server, PROMPT, **{ADAPTER: "a1", "X-Amzn-SageMaker-Inference-Id": inference_id}
    )
    usage = answer.json()["usage"]
    serving_pids(chat_server, [inference_id])
    lines = [
        line
        for line in chat_server.log_path.read_text(errors="replace").splitlines()
        if f"invocation id={inference_id} " in line
    ]
    assert len(lines) == 1
    assert (
        f"kind=completion route=/v1/completions adapter=a1 status=200 records=1 failed=0 "
        f"prompt_tokens={usage['prompt_tokens']} completion_tokens={usage['completion_tokens']} ms="
    ) in lines[0]
