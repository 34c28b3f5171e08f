"""What an error answer says, on one line: its message, else its status.

An answer from AWS, a container or whatever stands between (a proxy's or a captive portal's
HTML page) reaches a user as one line: the message of a JSON or XML error (OpenAI's
`error.message`, AWS's `message` or `<Message>`, FastAPI's `detail`), or a short plain text,
with its spaces and newlines collapsed; never the page itself.
"""

import json
import re
from collections.abc import Mapping
from typing import Any

from vllm_sagemaker.handler.core.errors import status_phrase

# The longest message quoted; the rest is cut with an ellipsis.
MAX_CHARS = 300
# The keys a JSON error names its message with, first found first.
_MESSAGE_KEYS = ("message", "Message", "errorMessage", "detail", "error")
_XML_MESSAGE = re.compile(r"<Message>(.*?)</Message>", re.DOTALL)
_XML_CODE = re.compile(r"<Code>\s*([A-Za-z0-9.]+)\s*</Code>")


def one_line(text: str) -> str:
    """`text` with its runs of spaces and newlines made one space, at most MAX_CHARS long."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 1] + "…"


def message(body: str | bytes) -> str | None:
    """The message of an error answer's body; None when it holds none (empty, an HTML page,
    JSON without a message)."""
    text = (body.decode(errors="replace") if isinstance(body, bytes) else body).strip()
    if not text:
        return None
    if text.startswith("<"):
        found = _XML_MESSAGE.search(text)
        return one_line(found[1]) if found and found[1].strip() else None
    try:
        parsed = json.loads(text)
    except ValueError:
        return one_line(text)
    return _json_message(parsed)


def _json_message(parsed: Any) -> str | None:
    if isinstance(parsed, str) and parsed.strip():
        return one_line(parsed)
    if not isinstance(parsed, dict):
        return None
    for key in _MESSAGE_KEYS:
        found = _json_message(parsed.get(key))
        if found:
            return found
    return None


def said(body: str | bytes, status: int) -> str:
    """`HTTP 429: <its message>`, else `HTTP 429: Too Many Requests`."""
    return f"HTTP {status}: {message(body) or status_phrase(status)}"


def error_code(response: Mapping[str, Any]) -> str:
    """The code of a botocore error answer (`ClientError.response`): its `Code`, or, where that
    is a bare HTTP status because the body was not in the service's format (an XML error to a
    JSON API), the `<Code>` the body names."""
    detail = response.get("Error", {})
    code = str(detail.get("Code", ""))
    if code.isdigit():
        found = _XML_CODE.search(str(detail.get("Message", "")))
        return found[1] if found else code
    return code
