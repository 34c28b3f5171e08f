"""Route selection, record parsing, content types, auth and TGI mapping: tables of cases."""

import json

import pytest

from vllm_sagemaker.core import content_types, json_record, kinds, routing, tgi
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.core.routing import Answer, BatchLineError
from vllm_sagemaker.handler.sagemaker.auth import ApiKeys

GENERATE = frozenset(
    {
        "/v1/chat/completions",
        "/v1/chat/completions/batch",
        "/v1/completions",
        "/tokenize",
        "/detokenize",
    }
)
EMBED = frozenset({"/v1/embeddings", "/pooling", "/score", "/v1/score", "/rerank", "/tokenize"})
CROSS = frozenset({"/score", "/rerank", "/classify", "/pooling", "/v1/rerank"})
CHAT = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "served", "route"),
    [
        ({"messages": CHAT}, GENERATE, "/v1/chat/completions"),
        ({"messages": [CHAT, CHAT]}, GENERATE, "/v1/chat/completions/batch"),
        ({"prompt": "hi"}, GENERATE, "/v1/completions"),
        ({"prompt": "hi", "input": "x"}, GENERATE, "/v1/completions"),
        ({"messages": CHAT, "prompt": "x"}, GENERATE, "/v1/chat/completions"),
        ({"inputs": "hi"}, GENERATE, "/v1/completions"),
        ({"input": "hi"}, EMBED, "/v1/embeddings"),
        ({"input": ["a", "b"]}, EMBED, "/v1/embeddings"),
        ({"queries": "q", "documents": ["d"]}, EMBED, "/score"),
        ({"text_1": "a", "text_2": "b"}, CROSS, "/score"),
        ({"data_1": "a", "data_2": "b"}, CROSS, "/score"),
        ({"query": "q", "documents": ["d"]}, CROSS, "/rerank"),
        ({"input": "hi"}, CROSS, "/classify"),
        ({"input": "hi"}, frozenset({"/pooling"}), "/pooling"),
    ],
)
def test_kind_order(body: dict, served: frozenset[str], route: str) -> None:
    assert routing.target(body, b"{}", None, served).route == route


@pytest.mark.parametrize(
    ("body", "served", "says"),
    [
        ({"input": "hi"}, GENERATE, "embedding requests: they need an embedding model"),
        ({"messages": CHAT}, EMBED, "chat requests: they need a text-generation model"),
        ({"prompt": "hi"}, CROSS, "completion requests"),
        ({"query": "q", "documents": []}, GENERATE, "rerank requests"),
        ({"messages": []}, GENERATE, "matches no request kind"),
        ({"messages": "hi"}, GENERATE, "matches no request kind"),
        ({"hello": 1}, EMBED, "Accepted shapes: embedding"),
        ([1, 2], GENERATE, "is not a JSON object"),
        ("text", GENERATE, "is not a JSON object"),
        (None, GENERATE, "is not a JSON object"),
        (3.5, EMBED, "is not a JSON object"),
    ],
)
def test_unmatched_bodies_get_a_400_that_says_why(
    body: object, served: frozenset[str], says: str
) -> None:
    with pytest.raises(RequestError) as error:
        routing.target(body, b"{}", None, served)
    assert error.value.status == 400
    assert says in error.value.message


@pytest.mark.parametrize(
    ("hint", "route"),
    [
        ("/v1/embeddings", "/v1/embeddings"),
        ("/v1/rerank?x=1", "/v1/rerank"),
        ("/pooling", "/pooling"),
    ],
)
def test_route_hint_wins_over_kinds(hint: str, route: str) -> None:
    served = EMBED | {"/v1/rerank"}
    target = routing.target({"prompt": "looks like a completion"}, b"raw", hint, served)
    assert (target.route, target.body) == (route, b"raw")


@pytest.mark.parametrize(
    ("hint", "code"),
    [
        ("/sleep", "route_not_allowed"),
        ("/v1/load_lora_adapter", "route_not_allowed"),
        ("/collective_rpc", "route_not_allowed"),
        ("/invocations", "route_not_allowed"),
        ("/v1/chat/completions", "route_not_served"),
    ],
)
def test_administrative_or_unserved_routes_are_refused(hint: str, code: str) -> None:
    with pytest.raises(RequestError) as error:
        routing.target({"input": "x"}, b"{}", hint, EMBED)
    assert (error.value.status, error.value.code) == (400, code)


def test_batch_line_goes_to_its_url() -> None:
    line = {"custom_id": "r1", "method": "POST", "url": "/v1/embeddings", "body": {"input": "a"}}
    target = routing.target(line, b"", "/pooling", EMBED)
    assert (target.route, target.custom_id) == ("/v1/embeddings", "r1")
    assert json.loads(target.body) == {"input": "a"}


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ({"custom_id": "r", "method": "POST", "url": "/sleep", "body": {}}, "invalid_url"),
        ({"custom_id": "r", "method": "POST", "body": {}}, "missing_required_parameter"),
        ({"custom_id": "r", "url": "/v1/embeddings", "body": {}}, "missing_required_parameter"),
        (
            {"custom_id": "r", "method": "GET", "url": "/v1/embeddings", "body": {}},
            "invalid_value",
        ),
        (
            {"custom_id": "r", "method": "POST", "url": "/v1/embeddings", "body": [1]},
            "invalid_request",
        ),
        (
            {
                "custom_id": "r",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"input": "a", "stream": True},
            },
            "streaming_unsupported",
        ),
        ({"custom_id": "r", "method": "POST", "url": "/v1/completions", "body": {}}, "invalid_url"),
    ],
)
def test_bad_batch_lines_keep_their_custom_id(line: dict, code: str) -> None:
    with pytest.raises(BatchLineError) as error:
        routing.target(line, b"", None, EMBED)
    assert (error.value.custom_id, error.value.error.code) == ("r", code)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, {}),
        ("route=/v1/embeddings", {"route": "/v1/embeddings"}),
        ("a=1, route=/rerank ,flag", {"a": "1", "route": "/rerank", "flag": ""}),
        (",,", {}),
    ],
)
def test_custom_attributes(header: str | None, expected: dict[str, str]) -> None:
    assert routing.custom_attributes(header) == expected


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"", "empty_body"),
        (b"  \n ", "empty_body"),
        (b"\xff\xfe{}", "invalid_encoding"),
        (b'{"a": 1', "invalid_json"),
        (b'{"a": 1}\n{"b": 2}', "invalid_json"),
        (b"NaNx", "invalid_json"),
        (deep(20_000), "nesting_too_deep"),
        (deep(500), "nesting_too_deep"),
        (b'{"a":' * 65 + b"1" + b"}" * 65, "nesting_too_deep"),
    ],
)
def test_hostile_records_get_a_400(raw: bytes, code: str) -> None:
    with pytest.raises(RequestError) as error:
        json_record.parse(raw)
    assert (error.value.status, error.value.code) == (400, code)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b'{"input": "x"}', {"input": "x"}),
        (deep(64), json.loads(deep(64))),
        (b"null", None),
        (b'{"s": "' + b"a" * 1_000_000 + b'"}', {"s": "a" * 1_000_000}),
    ],
)
def test_records_that_parse(raw: bytes, value: object) -> None:
    assert json_record.parse(raw) == value


@pytest.mark.parametrize(
    ("content_type", "framing"),
    [
        (None, content_types.Framing.JSON),
        ("application/json", content_types.Framing.JSON),
        ("application/json; charset=utf-8", content_types.Framing.JSON),
        ("Application/JSON", content_types.Framing.JSON),
        ("application/jsonlines", content_types.Framing.JSON_LINES),
        ("application/jsonl", content_types.Framing.JSON_LINES),
        ("application/x-jsonlines", content_types.Framing.JSON_LINES),
        ("application/x-ndjson; charset=utf-8", content_types.Framing.JSON_LINES),
    ],
)
def test_accepted_content_types(content_type: str | None, framing: content_types.Framing) -> None:
    assert content_types.framing(content_type) is framing


@pytest.mark.parametrize(
    "content_type", ["text/csv", "text/plain", "application/xml", "multipart/form-data; boundary=x"]
)
def test_other_content_types_get_415(content_type: str) -> None:
    with pytest.raises(RequestError) as error:
        content_types.framing(content_type)
    assert error.value.status == 415
    assert "application/jsonlines" in error.value.message


@pytest.mark.parametrize(
    ("method", "path", "authorization", "allowed"),
    [
        ("POST", "/invocations", None, False),
        ("POST", "/invocations", b"Bearer k1", True),
        ("POST", "/invocations", b"bearer k2", True),
        ("POST", "/rerank", b"Bearer wrong", False),
        ("POST", "/tokenize", b"Basic k1", False),
        # SageMaker's scraper reads /metrics with no key; nothing else there is open.
        ("GET", "/metrics", None, True),
        ("HEAD", "/metrics", None, True),
        ("POST", "/metrics", None, False),
        ("DELETE", "/metrics", None, False),
        ("GET", "/metrics/", None, False),
        ("GET", "/metricsz", None, False),
        ("POST", "/metrics", b"Bearer k1", True),
        ("GET", "/v1/models", None, False),
        ("GET", "/ping", None, True),
        ("POST", "/ping", None, True),
        ("GET", "/execution-parameters", None, True),
        ("OPTIONS", "/invocations", None, True),
    ],
)
def test_api_keys(method: str, path: str, authorization: bytes | None, allowed: bool) -> None:
    assert ApiKeys(["k1", "k2"]).allows(method, path, authorization) is allowed


def test_no_keys_allow_everything() -> None:
    assert ApiKeys([]).allows("POST", "/invocations", None)


@pytest.mark.parametrize(
    ("body", "completion"),
    [
        ({"inputs": "hi"}, {"prompt": "hi"}),
        (
            {"inputs": "hi", "parameters": {"max_new_tokens": 5, "temperature": 0.5, "top_k": 3}},
            {"prompt": "hi", "max_tokens": 5, "temperature": 0.5, "top_k": 3},
        ),
        (
            {"inputs": "hi", "parameters": {"do_sample": False, "stop": "x", "seed": 1}},
            {"prompt": "hi", "temperature": 0.0, "stop": ["x"], "seed": 1},
        ),
        (
            {"inputs": ["a", "b"], "parameters": {"stop_sequences": ["x"], "details": True}},
            {"prompt": ["a", "b"], "stop": ["x"]},
        ),
        ({"inputs": "hi", "stream": True}, {"prompt": "hi", "stream": True}),
    ],
)
def test_tgi_to_completion(body: dict, completion: dict) -> None:
    assert tgi.to_completion(body) == completion


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"inputs": 3}, "inputs"),
        ({"inputs": []}, "inputs"),
        ({"inputs": "x", "parameters": [1]}, "parameters"),
        ({"inputs": "x", "parameters": {"max_new_token": 3}}, "parameters"),
    ],
)
def test_bad_tgi_bodies(body: dict, param: str) -> None:
    with pytest.raises(RequestError) as error:
        tgi.to_completion(body)
    assert (error.value.status, error.value.param) == (400, param)


def test_tgi_target_shapes_the_answer() -> None:
    target = routing.target({"inputs": "x", "parameters": {"details": True}}, b"", None, GENERATE)
    assert target.answer is Answer.TGI_DETAILS
    completion = {
        "choices": [
            {"index": 1, "text": "b", "finish_reason": "stop"},
            {"index": 0, "text": "a", "finish_reason": "length"},
        ],
        "usage": {"completion_tokens": 7},
    }
    assert tgi.from_completion(completion, details=False) == [
        {"generated_text": "a"},
        {"generated_text": "b"},
    ]
    assert tgi.from_completion(completion, details=True)[0]["details"] == {
        "finish_reason": "length",
        "generated_tokens": 7,
    }


def test_every_kind_route_is_an_inference_route() -> None:
    assert {kind.route for kind in kinds.KINDS} <= kinds.INFERENCE_ROUTES
