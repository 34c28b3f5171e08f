"""What the Files and Batches routes share: their path parts, and OpenAI's list pages.

A list page is `{"object": "list", "data", "first_id", "last_id", "has_more"}`; `has_more` and
`after` (an id of the previous page) are what make the SDK's auto-pagination end.
"""

import json
from collections.abc import Mapping
from typing import Any

from starlette.types import Scope

from handler.errors import RequestError


def path_parts(scope: Scope, prefix: str) -> tuple[str, str, str]:
    """`/v1/x/{id}/{action}` -> (the path, id, action); id and action may be empty."""
    path = scope["path"].rstrip("/")
    object_id, _, action = path.removeprefix(prefix).strip("/").partition("/")
    return path, object_id, action


def page_limit(params: Mapping[str, str], default: int, maximum: int) -> int:
    raw = params.get("limit", str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise RequestError(400, f"limit must be from 1 to {maximum}", "invalid_value", "limit")
    return int(raw)


def page(data: list[dict[str, Any]], has_more: bool) -> bytes:
    return json.dumps(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": has_more,
        }
    ).encode()
