"""One record's bytes -> a JSON value, refusing what no route could use.

Invalid UTF-8, invalid JSON, an empty record and nesting deeper than MAX_JSON_DEPTH each get a
400 with a message that says which; nothing a client sends here can raise anything else.
"""

import json
from collections.abc import Iterable
from typing import Any

from vllm_sagemaker.core.config import MAX_JSON_DEPTH
from vllm_sagemaker.core.errors import RequestError


def parse(raw: bytes) -> Any:
    """The JSON value in `raw`, or a RequestError(400)."""
    if not raw.strip():
        raise RequestError(400, "the body is empty; send a JSON object", "empty_body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(
            400, f"the body is not valid UTF-8 (byte {error.start})", "invalid_encoding"
        ) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise RequestError(400, f"the body is not valid JSON: {error}", "invalid_json") from None
    except RecursionError:
        raise too_deep() from None
    if depth_exceeds(value, MAX_JSON_DEPTH):
        raise too_deep()
    return value


def too_deep() -> RequestError:
    return RequestError(
        400, f"the body is nested more than {MAX_JSON_DEPTH} levels deep", "nesting_too_deep"
    )


def depth_exceeds(value: Any, limit: int) -> bool:
    """Whether arrays and objects in `value` nest deeper than `limit` (iteratively)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
