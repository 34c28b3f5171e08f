"""The checks an OpenAI batch file gets before its lines reach the container, and the facts a
finished output line tells (for resuming and for the summary).

What only the whole file can know is checked here: JSON, a `custom_id` and a `body` (without
them a line is not a batch line at all), and duplicate custom_ids. Everything about the request
itself (method, url, body) is checked by the container's record pipeline, which answers a bad
line with an error line carrying its custom_id. Errors found here use the same output format.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any

from handler.errors import RequestError
from handler.formats import batch_error_line

LINE_PREFIX = re.compile(r"^line (\d+): ")


@dataclass(frozen=True)
class Checked:
    """One input line: either `send` it to the container, or its `answer` is already known."""

    number: int
    custom_id: str | None
    send: bytes | None = None
    answer: bytes | None = None


def _error(number: int, custom_id: str | None, code: str, message: str) -> bytes:
    return batch_error_line(custom_id, RequestError(400, f"line {number}: {message}", code))


@dataclass
class LineChecker:
    """Checks lines in file order; remembers where each custom_id was first seen."""

    first_seen: dict[str, int] = field(default_factory=dict)

    def check(self, number: int, raw: bytes) -> Checked:
        try:
            record = json.loads(raw)
        except ValueError as error:
            return Checked(number, None, answer=_error(number, None, "invalid_json", str(error)))
        custom_id = record.get("custom_id") if isinstance(record, dict) else None
        if not isinstance(custom_id, str) or not custom_id:
            message = "a batch line needs a non-empty string custom_id"
            return Checked(number, None, answer=_error(number, None, "missing_custom_id", message))
        first = self.first_seen.setdefault(custom_id, number)
        if first != number:
            message = f"custom_id {custom_id!r} was already used on line {first}"
            return Checked(
                number, custom_id, answer=_error(number, custom_id, "duplicate_custom_id", message)
            )
        if "body" not in record:
            message = "a batch line needs a body (the route's request body)"
            return Checked(
                number, custom_id, answer=_error(number, custom_id, "missing_body", message)
            )
        return Checked(number, custom_id, send=raw)


@dataclass(frozen=True)
class Outcome:
    """What a finished output line says."""

    custom_id: str | None
    line_number: int | None
    succeeded: bool
    usage: dict[str, Any]


def outcome(line: bytes) -> Outcome:
    """Read back one output line (ValueError when it is not a complete JSON line)."""
    value = json.loads(line)
    response, error = value.get("response"), value.get("error")
    succeeded = error is None and isinstance(response, dict) and response.get("status_code") == 200
    body = response.get("body") if isinstance(response, dict) else None
    usage = body.get("usage") if isinstance(body, dict) else None
    number = None
    if value.get("custom_id") is None and isinstance(error, dict):
        match = LINE_PREFIX.match(str(error.get("message", "")))
        number = int(match.group(1)) if match else None
    return Outcome(
        value.get("custom_id"), number, succeeded, usage if isinstance(usage, dict) else {}
    )
