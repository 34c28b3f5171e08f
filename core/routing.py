"""Which vLLM route answers a record, and with which body.

Explicit routing beats guessing, in this order:
1. an OpenAI batch line (`{"custom_id", "method", "url", "body"}`) goes to its `url`;
2. `route=/v1/...` in `X-Amzn-SageMaker-Custom-Attributes` (the AWS vLLM images' convention);
3. `SAGEMAKER_INVOCATIONS_ROUTE`, fixed for the whole container (Batch Transform sends no headers);
4. otherwise the request kinds of `core.kinds`, tried in table order.
Only inference routes can be named explicitly; administrative routes are refused, never called.
"""

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from vllm_sagemaker.core import batch_lines, kinds, tgi
from vllm_sagemaker.core.errors import RequestError


class Answer(Enum):
    """How the route's answer is shaped for the client."""

    PLAIN = "plain"
    TGI = "tgi"
    TGI_DETAILS = "tgi-details"


@dataclass(frozen=True)
class Target:
    route: str
    body: bytes
    answer: Answer = Answer.PLAIN
    custom_id: str | None = None
    kind: str = "route"
    # The body asks for a stream (server-sent events).
    streams: bool = False

    @property
    def is_batch_line(self) -> bool:
        return self.custom_id is not None


@dataclass(frozen=True)
class BatchLineError(Exception):
    """A batch line that cannot reach a route; it is answered in the batch output format."""

    custom_id: str
    error: RequestError


# The custom attribute that marks a request as batch work (`vllm-sagemaker batch` sends it).
BATCH_WORK_KEY, BATCH_WORK_VALUE = "priority", "batch"
BATCH_WORK_ATTRIBUTE = f"{BATCH_WORK_KEY}={BATCH_WORK_VALUE}"


def custom_attributes(header: str | None) -> dict[str, str]:
    """`a=1, route=/v1/embeddings, flag` -> {"a": "1", "route": "/v1/embeddings", "flag": ""}."""
    pairs: dict[str, str] = {}
    for item in (header or "").split(","):
        key, _, value = item.strip().partition("=")
        if key:
            pairs[key.strip()] = value.strip()
    return pairs


def is_batch_work(attributes: Mapping[str, str]) -> bool:
    """Whether custom attributes mark a request as batch work (`priority=batch`, as
    `vllm-sagemaker batch` sends): its records run at batch priority, and it is not live traffic
    that server-side batches yield to."""
    return attributes.get(BATCH_WORK_KEY) == BATCH_WORK_VALUE


def checked_route(route: str, served: Collection[str], param: str) -> str:
    """`route` when it is an inference route this model serves, else a 400 that says why."""
    path = route.split("?", 1)[0]
    if path not in kinds.INFERENCE_ROUTES:
        allowed = ", ".join(sorted(kinds.INFERENCE_ROUTES))
        raise RequestError(
            400,
            f"route {route!r} cannot be reached through /invocations; "
            f"inference routes are: {allowed}",
            "route_not_allowed",
            param,
        )
    if path not in served:
        raise RequestError(
            400,
            f"this model does not serve {path}; it serves: {', '.join(sorted(served))}",
            "route_not_served",
            param,
        )
    return path


def is_batch_line(record: Any) -> bool:
    return isinstance(record, dict) and "custom_id" in record and "body" in record


def _body(value: Any, raw: bytes | None, model: str | None) -> bytes:
    """The JSON body a route gets: `raw` as it came when nothing changes, else `value`
    serialised, with `model` set when another model answers than the body names (an adapter
    by X-Amzn-SageMaker-Adapter-Identifier, or the served model for a name the server does not
    know: `core.model_names`)."""
    if model is not None and isinstance(value, dict):
        value = {**value, "model": model}
    elif raw is not None:
        return raw
    return json.dumps(value).encode()


def batch_line_target(
    record: dict[str, Any],
    served: Collection[str],
    model: str | None = None,
    priority: int | None = None,
) -> Target:
    """The target of an OpenAI batch line (rules: core.batch_lines); errors carry its
    custom_id. `priority` (a batch the server runs) becomes the body's engine priority."""
    fault = batch_lines.fields_fault(record) or batch_lines.request_fault(record, served)
    if fault is not None:
        raise BatchLineError(str(record.get("custom_id")), fault.error())
    route = record["url"].split("?", 1)[0]
    body = record["body"] if priority is None else {**record["body"], "priority": priority}
    body = _body(body, None, model)
    return Target(route, body, custom_id=record["custom_id"], kind="batch line")


def target(
    record: Any,
    raw: bytes,
    route_hint: str | None,
    served: Collection[str],
    no_stream: str | None = None,
    model: str | None = None,
    priority: int | None = None,
) -> Target:
    """Where `record` (parsed from `raw`) goes, by the precedence in this module's docstring.

    `no_stream` says who cannot stream (the records of a multi-record body, whose answers are
    lines; any request to an async endpoint): such a record asking for `"stream": true` is
    refused rather than silently changed. `model` (an adapter's name) becomes the body's model.
    """
    if is_batch_line(record):
        return batch_line_target(record, served, model, priority)
    if no_stream and isinstance(record, dict) and record.get("stream"):
        raise RequestError(
            400,
            f'{no_stream} cannot stream; remove "stream": true',
            "stream_not_supported",
            "stream",
        )
    streams = isinstance(record, dict) and bool(record.get("stream"))
    if route_hint:
        route = checked_route(route_hint, served, "route")
        return Target(route, _body(record, raw, model), streams=streams)
    kind = kinds.choose(record, served)
    if kind is kinds.TGI:
        answer = Answer.TGI_DETAILS if tgi.wants_details(record) else Answer.TGI
        body = _body(tgi.to_completion(record), None, model)
        return Target(kind.route, body, answer, kind=kind.name, streams=streams)
    return Target(kind.route, _body(record, raw, model), kind=kind.name, streams=streams)
