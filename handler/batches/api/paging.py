"""What the Files and Batches routes share: what a path names, and OpenAI's list pages.

A path names the collection (`/v1/files`), one object (`/v1/files/{id}`) or an action on one
(`/v1/files/{id}/content`). Anything else is a 404, whatever the method: dot segments, encoded
slashes (the server decodes them before routing), empty parts, overlong ids, characters that no
id has. Only a path that names something and a method it does not take is a 405.

A list page is `{"object": "list", "data", "first_id", "last_id", "has_more"}`; `has_more` and
`after` (an id of the previous page) are what make the SDK's auto-pagination end.
"""

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.core import ids
from vllm_sagemaker.core.errors import RequestError

SHOWN_CHARS = 200


@dataclass(frozen=True)
class ObjectPath:
    """What a path names: the collection (no id), one object, or an action on one."""

    object_id: str = ""
    action: str = ""


def object_path(path: str, prefix: str, actions: Collection[str]) -> ObjectPath:
    """What `path` (under `prefix`) names; 404 when it names nothing (see the module's rules;
    a trailing slash is an empty part)."""
    parts = path.removeprefix(prefix).split("/")[1:]
    if (
        len(parts) > 2
        or (parts and not ids.is_id(parts[0]))
        or (len(parts) == 2 and parts[1] not in actions)
    ):
        shown = path if len(path) <= SHOWN_CHARS else path[:SHOWN_CHARS] + "..."
        raise RequestError(404, f"No such object: {shown!r} names nothing here", "not_found")
    return ObjectPath(*parts)


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
