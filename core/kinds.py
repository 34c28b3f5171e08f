"""The request kinds `/invocations` recognises: their order, shapes and vLLM routes, in one table.

A body is matched against the kinds in table order; the first kind that fits *and* that the
loaded model serves wins. A body that fits only kinds the model does not serve is told so
plainly; a body that fits nothing is shown the shapes this model accepts.
"""

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.core.errors import RequestError

Body = Any


@dataclass(frozen=True)
class Kind:
    name: str
    route: str
    fits: Callable[[Mapping[str, Any]], bool]
    shape: str
    served_by: str


def _has(*keys: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda body: all(key in body for key in keys)


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) for m in value)


def _is_chat(body: Mapping[str, Any]) -> bool:
    messages = body.get("messages")
    return _is_conversation(messages) and bool(messages)


def _is_chat_batch(body: Mapping[str, Any]) -> bool:
    messages = body.get("messages")
    return (
        isinstance(messages, list)
        and bool(messages)
        and all(isinstance(c, list) and _is_conversation(c) for c in messages)
    )


def _is_score(body: Mapping[str, Any]) -> bool:
    pairs = (
        ("queries", "documents"),
        ("queries", "items"),
        ("text_1", "text_2"),
        ("data_1", "data_2"),
    )
    return any(a in body and b in body for a, b in pairs)


GENERATES = "a text-generation model"
EMBEDS = "an embedding model"
SCORES = "a cross-encoder (score) model or an embedding model"

KINDS: tuple[Kind, ...] = (
    Kind(
        "chat",
        "/v1/chat/completions",
        _is_chat,
        '{"messages": [{"role": "user", "content": "..."}]}',
        GENERATES,
    ),
    Kind(
        "batched chat",
        "/v1/chat/completions/batch",
        _is_chat_batch,
        '{"messages": [[{"role": "user", "content": "..."}], [...]]}',
        GENERATES,
    ),
    Kind("completion", "/v1/completions", _has("prompt"), '{"prompt": "..."}', GENERATES),
    Kind(
        "TGI/LMI generation",
        "/v1/completions",
        _has("inputs"),
        '{"inputs": "...", "parameters": {"max_new_tokens": 32}}',
        GENERATES,
    ),
    Kind("embedding", "/v1/embeddings", _has("input"), '{"input": "..." or ["...", ...]}', EMBEDS),
    Kind("score", "/score", _is_score, '{"queries": "...", "documents": ["...", ...]}', SCORES),
    Kind(
        "rerank",
        "/rerank",
        _has("query", "documents"),
        '{"query": "...", "documents": ["...", ...]}',
        SCORES,
    ),
    Kind(
        "classify",
        "/classify",
        _has("input"),
        '{"input": "..."}',
        "a classification or cross-encoder model",
    ),
    Kind("pooling", "/pooling", _has("input"), '{"input": "..."}', "a pooling model"),
)

TGI = next(kind for kind in KINDS if kind.name == "TGI/LMI generation")

# The routes a server-side batch (/v1/batches) may name: OpenAI's text endpoints and vLLM's
# pooling routes, in the order errors list them.
BATCH_ENDPOINTS: tuple[str, ...] = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/score",
    "/v1/score",
    "/rerank",
    "/v1/rerank",
    "/v2/rerank",
    "/classify",
    "/pooling",
)
# Routes that explicit routing (batch lines, custom attributes, SAGEMAKER_INVOCATIONS_ROUTE) may
# name. Administrative routes (/sleep, /v1/load_lora_adapter, /collective_rpc, ...) are not here.
INFERENCE_ROUTES: frozenset[str] = frozenset(
    {
        *BATCH_ENDPOINTS,
        "/v1/chat/completions/batch",
        "/v1/messages",
        "/v2/embed",
        "/tokenize",
        "/detokenize",
    }
)


def choose(body: Body, served: Collection[str]) -> Kind:
    """The first kind in table order that fits `body` and whose route the model serves."""
    unserved: Kind | None = None
    if isinstance(body, dict):
        for kind in KINDS:
            if kind.fits(body):
                if kind.route in served:
                    return kind
                unserved = unserved or kind
    offered = [kind for kind in KINDS if kind.route in served]
    if unserved is not None:
        serves = ", ".join(kind.name for kind in offered) or "none of the request kinds"
        raise RequestError(
            400,
            f"this model does not serve {unserved.name} requests: they need {unserved.served_by}. "
            f"This model serves: {serves}.",
            "unsupported_request_kind",
        )
    shapes = "; ".join(f"{kind.name}: {kind.shape}" for kind in offered)
    what = (
        "matches no request kind this model serves"
        if isinstance(body, dict)
        else ("is not a JSON object")
    )
    raise RequestError(
        400,
        f"the body {what}. "
        f"Accepted shapes: {shapes}. To name the route explicitly, send an OpenAI batch line "
        '({"custom_id", "method", "url", "body"}) or the custom attribute route=/v1/...',
        "unrecognized_request",
    )
