"""Which way vLLM answers an invocation (issue 65): the records of a JSON Lines body take vLLM's
serving objects by default, one real-time request takes vLLM's HTTP route whatever `dispatch`
asks, a `dispatch` that names no way is the invocation's 400, and the embedder's customer
middlewares make its records take the route whichever way is asked. The route's requests are
counted with vLLM's HTTP instrumentator, and answers compared field by field, as in
test_dispatch_parity.py.
"""

import uuid

import httpx
import pytest

from tests.handler.test_dispatch_parity import (
    ATTRIBUTES,
    CHAT,
    GREEDY,
    INFERENCE_ID,
    differences,
    grown,
    vllm_posts,
)
from tests.handler.test_minibatch import JSON_LINES, jsonl, send
from tests.support.servers import Server


def test_records_take_the_serving_way_by_default(chat_server: Server) -> None:
    records = [{"messages": CHAT, **GREEDY}, {"prompt": "The quick brown", **GREEDY}]
    same_id = {INFERENCE_ID: f"parity-{uuid.uuid4().hex}"}
    before = vllm_posts(chat_server)
    default, default_lines = send(chat_server, jsonl(records), same_id)
    assert grown(before, vllm_posts(chat_server)) == 0
    serving, serving_lines = send(
        chat_server, jsonl(records), {**same_id, ATTRIBUTES: "dispatch=serving"}
    )
    assert default.status_code == serving.status_code == 200
    for a, b in zip(default_lines, serving_lines, strict=True):
        assert differences(a, b) == []


def test_one_real_time_request_takes_the_route_whatever_is_asked(chat_server: Server) -> None:
    body = {"messages": CHAT, **GREEDY}
    same_id = {INFERENCE_ID: f"parity-{uuid.uuid4().hex}"}
    answers = []
    for way in ("serving", "route"):
        before = vllm_posts(chat_server)
        answer = httpx.post(
            chat_server.url + "/invocations",
            json=body,
            headers={**same_id, ATTRIBUTES: f"dispatch={way}"},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        assert (
            vllm_posts(chat_server).get("/v1/chat/completions", 0)
            - before.get("/v1/chat/completions", 0)
            == 1
        ), way
        answers.append(answer.json())
    assert differences(*answers) == []


@pytest.mark.parametrize("value", ["sideways", "http"])
def test_a_dispatch_that_names_no_way_is_a_400_for_the_invocation(
    chat_server: Server, value: str
) -> None:
    before = vllm_posts(chat_server)
    answer = httpx.post(
        chat_server.url + "/invocations",
        content=jsonl([{"prompt": "hi", **GREEDY}, {"messages": CHAT, **GREEDY}]),
        headers={**JSON_LINES, ATTRIBUTES: f"trace=1, dispatch={value}"},
        timeout=120,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_custom_attribute", "dispatch")
    assert f"dispatch={value}" in error["message"]
    assert grown(before, vllm_posts(chat_server)) == 0


@pytest.mark.parametrize("way", ["route", "serving"])
def test_customer_middlewares_wrap_the_records_whichever_way_is_asked(
    embed_server: Server, way: str
) -> None:
    """The embedder's customer script (conftest.CUSTOMER_MIDDLEWARES) wraps vLLM's routes, so
    its records take the route whatever is asked (the route's counter grows by one a record):
    a single request's answer still carries what its formatters saw, as in
    tests/handler/test_custom_code.py, and a mini-batch's answer the same headers both ways (its
    throttle's; the records' own responses, which the formatters tag, stay inside)."""
    attributes = {ATTRIBUTES: f"dispatch={way}"}
    single = httpx.post(
        embed_server.url + "/invocations", json={"input": "hello"}, headers=attributes, timeout=60
    )
    assert single.status_code == 200, single.text
    assert single.headers["x-customer-formatted"] == "POST /v1/embeddings"
    before = vllm_posts(embed_server)
    answer, lines = send(embed_server, jsonl([{"input": "hello"}, {"input": "a cat"}]), attributes)
    assert answer.status_code == 200
    assert [len(line["data"][0]["embedding"]) for line in lines] == [384, 384]
    after = vllm_posts(embed_server)
    assert after.get("/v1/embeddings", 0) - before.get("/v1/embeddings", 0) == 2
    assert answer.headers["x-customer-throttle"] == "POST /invocations"
    assert "x-customer-formatted" not in answer.headers
