"""How answers are written: OpenAI batch output lines, JSON Lines records, and TGI answers."""

import json
from typing import Any

from vllm_sagemaker.core import ids, tgi
from vllm_sagemaker.core.errors import RequestError, error_body, status_phrase
from vllm_sagemaker.core.routing import Answer

# The id of one line of a batch's output, as OpenAI names it.


def batch_output_line(
    custom_id: str, status: int, request_id: str, body: bytes, is_json: bool
) -> bytes:
    """A route's answer as a run_batch / OpenAI batch output line.

    The route's status goes into `response.status_code`; an error answer's body keeps its
    `{"error": ...}` and the line's `error` stays null, as OpenAI writes it. A JSON answer is
    spliced in as it came; anything else (a plain-text error) becomes a JSON string.
    """
    if not is_json:
        body = json.dumps(body.decode("utf-8", "replace")).encode()
    head = json.dumps({"id": ids.new_id(ids.REQUEST_ID_PREFIX), "custom_id": custom_id})[:-1]
    response = json.dumps({"status_code": status, "request_id": request_id})[:-1]
    return (
        head.encode()
        + b', "response": '
        + response.encode()
        + b', "body": '
        + (body.strip() or b"null")
        + b'}, "error": null}'
    )


def batch_error_line(custom_id: str | None, error: RequestError) -> bytes:
    """A batch line that never reached a route: `response` null, `error` {code, message}."""
    return json.dumps(
        {
            "id": ids.new_id(ids.REQUEST_ID_PREFIX),
            "custom_id": custom_id,
            "response": None,
            "error": {"code": error.code, "message": error.message},
        }
    ).encode()


def shaped(answer: Answer, status: int, body: bytes) -> bytes:
    """The client's body for a route's answer: unchanged, or TGI's shape for a success."""
    if answer is Answer.PLAIN or status != 200:
        return body
    completion: Any = json.loads(body)
    return json.dumps(tgi.from_completion(completion, answer is Answer.TGI_DETAILS)).encode()


def one_line(body: bytes) -> bytes:
    """A JSON document on one line (re-serialised only when it spans several)."""
    body = body.strip()
    if b"\n" in body or b"\r" in body:
        return json.dumps(json.loads(body)).encode()
    return body


def record_line(answer: Answer, status: int, body: bytes, is_json: bool) -> bytes:
    """A route's answer as one record of a JSON Lines answer: the (shaped) answer for a success,
    OpenAI's error object for a failure (the engine's own when it sent one)."""
    if status == 200 and is_json:
        return one_line(shaped(answer, status, body))
    if is_json:
        try:
            value = json.loads(body)
        except ValueError:
            value = None
        if isinstance(value, dict) and "error" in value:
            return one_line(body)
    text = body.decode("utf-8", "replace").strip() or status_phrase(status)
    if status == 200:
        return json.dumps(text).encode()
    return json.dumps(error_body(status, text, "engine_error")).encode()
