"""The same answers both ways (issue 65): the records of a JSON Lines body answered through
vLLM's serving objects (`dispatch=serving`, the default for records) equal, line for line and
field by field, the answers of vLLM's HTTP routes in-process (`dispatch=route`), on the real
engines of the session, for every request kind, adapters, batch lines and errors.

Each case sends the same records twice, once each way, and also checks that the way asked for
is the way taken: vLLM's HTTP instrumentator counts every request its routes answer
(`http_requests_total{handler="/v1/chat/completions", method="POST"}`), so the route way adds
one per record that reaches vLLM and the serving way adds none, except on the embedder, whose
customer middlewares make its records take the route anyway (`core.dispatch`). Which way is
taken by default, by one real-time request, by a `dispatch` naming no way and through customer
middlewares: test_dispatch_ways.py.
"""

import json
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conftest import AUTH
from tests.handler.test_minibatch import jsonl, send
from tests.support.servers import Server

ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
ADAPTER = "X-Amzn-SageMaker-Adapter-Identifier"
INFERENCE_ID = "X-Amzn-SageMaker-Inference-Id"
# Both invocations of a case carry the same inference id, which vLLM makes its request ids of
# (`chatcmpl-<inference id>-<record>`, a batch line's `request_id`), so ids are compared too.
# What still legitimately differs between two calls of the same record, whichever way it goes:
# the timestamp `created` (seconds: two calls may straddle one), and a batch output line's own
# `id` (`batch_req_<random>`, made for each line). Nothing else is random: generation is greedy
# (temperature 0, TGI's do_sample false) and the lengths are fixed.
VOLATILE = frozenset({"created"})
# Floats (logprobs, embeddings, scores) may differ in their last digits: how the engine batches
# requests changes the order of float operations.
REL_TOL = 1e-6

CHAT = [{"role": "user", "content": "Hello there"}]
PARIS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris"}]
GREEDY = {"max_tokens": 8, "temperature": 0}
# Far more tokens than the tiny Llama's context (4096) and the cross-encoder's (512).
OVER_CONTEXT = " ".join(["hello"] * 6000)


def batch_line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


@dataclass(frozen=True)
class Case:
    name: str
    server: str
    records: list[Any]
    # How many of the records reach one of vLLM's routes when they take the route (the others
    # are refused before: an unserved kind, a stream in a multi-record body, a bad url).
    reaching: int
    headers: dict[str, str] = field(default_factory=dict)
    # Custom attributes sent beside `dispatch=...`.
    attributes: str = ""

    def __str__(self) -> str:
        return self.name


CASES = [
    Case(
        "chat",
        "chat_server",
        [{"messages": CHAT, **GREEDY}, {"messages": PARIS, **GREEDY, "logprobs": True}],
        2,
    ),
    Case(
        "completion",
        "chat_server",
        [
            {"prompt": "The quick brown", **GREEDY},
            {"prompt": "Once upon a time", **GREEDY, "logprobs": 2},
            {"prompt": ["Über café ☕", "数字"], **GREEDY, "n": 2},
            # Seeded sampling is as deterministic as greedy decoding.
            {"prompt": "The quick brown", "max_tokens": 8, "temperature": 1.0, "seed": 7},
        ],
        4,
    ),
    Case(
        "tgi",
        "chat_server",
        [{"inputs": "The quick brown", "parameters": {"max_new_tokens": 8, "do_sample": False}}],
        1,
    ),
    Case(
        "tgi with details",
        "chat_server",
        [
            {
                "inputs": "Once upon a time",
                "parameters": {"max_new_tokens": 8, "do_sample": False, "details": True},
            }
        ],
        1,
    ),
    Case(
        "batched chat",
        "chat_server",
        [{"messages": [CHAT, PARIS], "max_tokens": 4, "temperature": 0}],
        1,
    ),
    Case(
        "adapter by header",
        "chat_server",
        [{"messages": CHAT, **GREEDY}, {"prompt": "The quick brown", **GREEDY}],
        2,
        headers={ADAPTER: "a1"},
    ),
    Case(
        "adapter as the record's model",
        "chat_server",
        [
            {"model": "a1", "messages": CHAT, **GREEDY},
            {"model": "a1", "prompt": "The quick brown", **GREEDY},
        ],
        2,
    ),
    Case(
        "unknown adapter by header: vLLM's 404",
        "chat_server",
        [{"prompt": "The quick brown", **GREEDY}],
        1,
        headers={ADAPTER: "no-such-adapter"},
    ),
    Case(
        "unknown model, answered by the served model",
        "chat_server",
        [
            {"model": "no-such-model", "messages": CHAT, **GREEDY},
            {"model": "no-such-model", "prompt": "The quick brown", **GREEDY},
        ],
        2,
    ),
    Case(
        "batch lines",
        "chat_server",
        [
            batch_line("chat", "/v1/chat/completions", {"messages": CHAT, **GREEDY}),
            batch_line("completion", "/v1/completions", {"prompt": "The quick", **GREEDY}),
            batch_line("bad", "/v1/completions", {"prompt": "hi", "max_tokens": -1}),
            # Refused before vLLM: the chat model serves no embeddings.
            batch_line("embed", "/v1/embeddings", {"input": "hello"}),
        ],
        3,
    ),
    Case(
        "bad body: vLLM's validation errors",
        "chat_server",
        [
            {"prompt": "hi", "max_tokens": -1},
            {"messages": [{"role": 5, "content": "hi"}], "max_tokens": 4},
            {"messages": CHAT, "max_tokens": 4, "temperature": "hot"},
            {"messages": [CHAT, PARIS], "max_tokens": -1},
        ],
        4,
    ),
    Case(
        "bad body: the request model's own validators (VLLMValidationError)",
        "chat_server",
        [
            {"prompt": "hi", "max_tokens": 4, "stream_options": {"include_usage": True}},
            {"messages": CHAT, "max_tokens": 4, "logprobs": True, "top_logprobs": -2},
            batch_line("v", "/v1/chat/completions", {"messages": CHAT, "tool_choice": "required"}),
        ],
        3,
    ),
    Case(
        "refused before vLLM: a kind the model does not serve, a stream",
        "chat_server",
        [{"input": "an embedding on a chat model"}, {"prompt": "x", "stream": True}],
        0,
    ),
    Case(
        "a prompt over the context",
        "chat_server",
        [
            {"prompt": OVER_CONTEXT, **GREEDY},
            {"messages": [{"role": "user", "content": OVER_CONTEXT}], **GREEDY},
            {"prompt": "hi", "max_tokens": 100_000},
        ],
        3,
    ),
    Case(
        "score",
        "score_server",
        [
            {"queries": "cat", "documents": ["a cat sits", "stock market"]},
            {"queries": ["cat", "dog"], "documents": ["a cat sits", "a dog runs"]},
        ],
        2,
        headers=AUTH,
    ),
    Case(
        "rerank",
        "score_server",
        [
            {"query": "cat", "documents": ["a cat sits", "stock market", "hi"]},
            {"query": "cat", "documents": ["a cat sits", "stock market"], "top_n": 1},
        ],
        2,
        headers=AUTH,
    ),
    Case(
        "classify",
        "score_server",
        [{"input": "a cat sits on the mat"}, {"input": ["hello", "stock market"]}],
        2,
        headers=AUTH,
    ),
    Case(
        "pooling",
        "score_server",
        [
            {"input": "a cat sits on the mat"},
            {"input": ["hello", "stock market"]},
            {"input": "hello", "encoding_format": "base64"},
        ],
        3,
        headers=AUTH,
        attributes="route=/pooling",
    ),
    Case(
        "score over the context, bad rerank",
        "score_server",
        [
            {"queries": "cat", "documents": [OVER_CONTEXT]},
            {"query": "cat", "documents": ["a cat sits"], "top_n": "all"},
        ],
        2,
        headers=AUTH,
    ),
    Case(
        "bad pooling body: a removed parameter (VLLMValidationError)",
        "score_server",
        [{"input": "a cat sits on the mat", "normalize": True}],
        1,
        headers=AUTH,
    ),
    Case(
        "embedding (customer middlewares: the route both ways)",
        "embed_server",
        [{"input": "A cat sits on the mat"}, {"input": ["hello", "world"]}],
        2,
    ),
    Case(
        "embedding batch lines (customer middlewares)",
        "embed_server",
        [
            batch_line("e1", "/v1/embeddings", {"input": "hello"}),
            batch_line("e2", "/v1/embeddings", {"input": ["a", "b"], "dimensions": -1}),
            # Refused before vLLM: the embedder serves no chat.
            batch_line("c1", "/v1/chat/completions", {"messages": CHAT}),
        ],
        2,
    ),
    Case(
        "pooling on the embedder (customer middlewares)",
        "embed_server",
        [{"input": "a cat sits on the mat"}],
        1,
        attributes="route=/pooling",
    ),
]
# The embedder's customer script (conftest.CUSTOMER_MIDDLEWARES) wraps vLLM's routes: its
# records take the route whatever the invocation asks.
ROUTE_ANYWAY = {"embed_server"}


def differences(route: Any, serving: Any, where: str = "") -> list[str]:
    """Where `serving` differs from `route`, field by field, ignoring VOLATILE keys and float
    noise within REL_TOL."""
    if isinstance(route, dict) and isinstance(serving, dict):
        found = []
        for key in sorted(set(route) | set(serving), key=str):
            if key in VOLATILE or (not where and key == "id" and "custom_id" in route):
                continue
            if key not in serving or key not in route:
                side = "route" if key in route else "serving"
                found.append(f"{where}.{key}: only the {side} way has it")
                continue
            found += differences(route[key], serving[key], f"{where}.{key}")
        return found
    if isinstance(route, list) and isinstance(serving, list):
        if len(route) != len(serving):
            return [f"{where}: {len(route)} items by the route, {len(serving)} by serving"]
        return [
            d
            for i, pair in enumerate(zip(route, serving, strict=True))
            for d in differences(*pair, f"{where}[{i}]")
        ]
    if type(route) is type(serving) and (
        route == serving
        or (isinstance(route, float) and math.isclose(route, serving, rel_tol=REL_TOL))
    ):
        return []
    return [f"{where}: route {route!r} != serving {serving!r}"]


def vllm_posts(server: Server) -> dict[str, float]:
    """POST requests vLLM's routes have answered, by route (the instrumentator's counter; our
    own /invocations is not among them)."""
    pattern = r"^http_requests_total\{([^}]*)\} (\S+)$"
    counts: dict[str, float] = {}
    for labels, value in re.findall(pattern, server.metrics(AUTH), re.MULTILINE):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if found.get("method") == "POST" and found.get("handler") != "/invocations":
            counts[found["handler"]] = counts.get(found["handler"], 0) + float(value)
    return counts


def grown(before: dict[str, float], after: dict[str, float]) -> float:
    return sum(after.values()) - sum(before.values())


def test_differences_are_found_field_by_field() -> None:
    """The comparison itself: what it ignores, and what it reports."""
    line = {"id": "x-1", "created": 1, "choices": [{"text": "a", "logprob": -1.5}], "n": 1}
    same = {**line, "created": 2, "choices": [{"text": "a", "logprob": -1.5 * (1 + 1e-8)}]}
    assert differences(line, same) == []
    other = {**line, "id": "x-2", "choices": [{"text": "b", "logprob": -1.6}], "n": 1.0}
    assert differences(line, other) == [
        ".choices[0].logprob: route -1.5 != serving -1.6",
        ".choices[0].text: route 'a' != serving 'b'",
        ".id: route 'x-1' != serving 'x-2'",
        ".n: route 1 != serving 1.0",
    ]
    assert differences({"n": 1}, {"n": True}) == [".n: route 1 != serving True"]
    assert differences({"a": [1]}, {"a": [1, 2], "b": 0}) == [
        ".a: 1 items by the route, 2 by serving",
        ".b: only the serving way has it",
    ]
    batch = {"id": "batch_req_1", "custom_id": "c", "response": {"request_id": "r-0"}}
    assert differences(batch, {**batch, "id": "batch_req_2"}) == []
    assert differences(batch, {**batch, "response": {"request_id": "r-1"}}) != []


def invoke_both_ways(
    server: Server, case: Case
) -> tuple[tuple[httpx.Response, list[Any]], tuple[httpx.Response, list[Any]], float, float]:
    """The case's records once each way: both answers and how many requests vLLM's routes
    answered during each."""
    answers = []
    counted = []
    inference_id = f"parity-{uuid.uuid4().hex}"
    for way in ("route", "serving"):
        attributes = ", ".join(a for a in (case.attributes, f"dispatch={way}") if a)
        headers = {**case.headers, ATTRIBUTES: attributes, INFERENCE_ID: inference_id}
        before = vllm_posts(server)
        answers.append(send(server, jsonl(case.records), headers))
        counted.append(grown(before, vllm_posts(server)))
    return answers[0], answers[1], counted[0], counted[1]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_both_ways_answer_the_same(case: Case, request: pytest.FixtureRequest) -> None:
    server: Server = request.getfixturevalue(case.server)
    (route, route_lines), (serving, serving_lines), by_route, by_serving = invoke_both_ways(
        server, case
    )
    assert route.status_code == serving.status_code == 200, (route.text, serving.text)
    assert route.headers["content-type"] == serving.headers["content-type"]
    assert len(route_lines) == len(serving_lines) == len(case.records)
    found = [
        f"record {i}: {'; '.join(diffs)}\n  route:   {json.dumps(a)}\n  serving: {json.dumps(b)}"
        for i, (a, b) in enumerate(zip(route_lines, serving_lines, strict=True))
        if (diffs := differences(a, b))
    ]
    assert not found, "\n".join(found)
    assert by_route == case.reaching, "dispatch=route: each record reaches vLLM's HTTP route"
    expected = case.reaching if case.server in ROUTE_ANYWAY else 0
    assert by_serving == expected, "dispatch=serving: records reach vLLM's serving objects"


def _refused_by_vllm(lines: list[Any]) -> bool:
    """Each record answered with vLLM's 400 naming the parameter (a batch line's in its
    response, with the status)."""
    errors = [
        line["response"]["body"]["error"]
        if "custom_id" in line and line["response"]["status_code"] == 400
        else line["error"]
        for line in lines
    ]
    return all(error["code"] == 400 and error["param"] for error in errors)


# What the route answers each of these cases: parity of two wrong answers would prove nothing.
ANSWERS = {
    "adapter by header": lambda lines: [line["model"] for line in lines] == ["a1", "a1"],
    "adapter as the record's model": lambda lines: [line["model"] for line in lines] == ["a1"] * 2,
    "unknown model, answered by the served model": lambda lines: all(
        line["model"] != "no-such-model" and "choices" in line for line in lines
    ),
    "bad body: vLLM's validation errors": _refused_by_vllm,
    "unknown adapter by header: vLLM's 404": lambda lines: lines[0]["error"]["code"] == 404,
    "bad body: the request model's own validators (VLLMValidationError)": _refused_by_vllm,
    "bad pooling body: a removed parameter (VLLMValidationError)": _refused_by_vllm,
    "a prompt over the context": lambda lines: all(
        "4096" in line["error"]["message"] for line in lines
    ),
    "score over the context, bad rerank": _refused_by_vllm,
}


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_the_cases_are_answered_as_they_say(name: str, request: pytest.FixtureRequest) -> None:
    (case,) = [case for case in CASES if case.name == name]
    server: Server = request.getfixturevalue(case.server)
    headers = {**case.headers, ATTRIBUTES: "dispatch=route"}
    response, lines = send(server, jsonl(case.records), headers)
    assert response.status_code == 200
    assert ANSWERS[name](lines), lines
