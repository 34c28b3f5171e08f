"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`."""

import json
from dataclasses import dataclass
from http import HTTPStatus

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}


# The code of a record whose route raised instead of answering (the engine stopping, a bug).
INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True)
class RequestError(Exception):
    """A request or record the handler refuses, with the HTTP status it deserves."""

    status: int
    message: str
    code: str
    param: str | None = None

    def body(self) -> dict[str, object]:
        return error_body(self.status, self.message, self.code, self.param)

    def to_json(self) -> bytes:
        return json.dumps(self.body()).encode()


def error_body(status: int, message: str, code: str, param: str | None = None) -> dict[str, object]:
    """OpenAI's error object for `status`."""
    kind = _TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
