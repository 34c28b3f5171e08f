"""The rules of an OpenAI batch line, for the whole project, in OpenAI's codes and words.

One line is `{"custom_id", "method": "POST", "url", "body"}`. The same rules answer a batch line
sent to `/invocations`, check a file before `vllm-sagemaker batch` sends it, and validate the input
of a server-side batch (`/v1/batches`), where every bad line is listed before anything runs:

- `LineChecker` checks what needs the whole file: JSON, the four fields, duplicate custom_ids;
- `request_fault` checks the request itself: method, url (against the batch's endpoint when there
  is one, else against the routes this model serves), body, `stream`, and `model` when the caller
  knows which models are served;
- `checked_lines` applies them to the lines of a file, in order (`vllm-sagemaker batch` and
  `deploy batch` read files through it);
- `validate` lists every bad line of a whole file, plus an empty file and more than MAX_LINES
  lines.
`outcome` reads a finished output line back and `repair` a whole results file (for resuming,
counts and usage).
"""

import json
import os
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from vllm_sagemaker.core import kinds
from vllm_sagemaker.core.errors import INTERNAL_ERROR, RequestError

MAX_LINES = 50_000
# A line that never ran because its batch was cancelled or stopped, wherever batches run (the
# server's Batches API, `deploy batch`'s fleet). OpenAI publishes no status for it; 499 is the
# status of a request its caller ended.
CANCELLED_LINE = RequestError(
    499, "This request was cancelled before it completed.", "batch_cancelled"
)
# A refused model's error lists at most this many of the names served.
SHOWN_MODELS = 10
REQUIRED = ("custom_id", "method", "url", "body")
LINE_PREFIX = re.compile(r"^line (\d+): ")
_NAMES = {
    "/v1/chat/completions": "Chat Completions",
    "/v1/completions": "Completions",
    "/v1/embeddings": "Embeddings",
    "/v1/responses": "Responses",
}


@dataclass(frozen=True)
class Fault:
    """Why a line cannot run: OpenAI's code, message and param."""

    code: str
    message: str
    param: str | None = None

    def error(self, number: int | None = None) -> RequestError:
        prefix = f"line {number}: " if number is not None else ""
        return RequestError(400, prefix + self.message, self.code, self.param)


def missing(name: str) -> Fault:
    return Fault("missing_required_parameter", f"Missing required parameter: '{name}'.", name)


def parse_line(raw: bytes) -> dict[str, Any] | Fault:
    """The line as a JSON object with the four fields, or its fault."""
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return Fault("invalid_json_line", "This line is not parseable as valid JSON.")
    return fields_fault(record) or record


def fields_fault(record: Any) -> Fault | None:
    """What is missing from a parsed line: an object with the four fields, a usable custom_id."""
    if not isinstance(record, dict):
        return Fault("invalid_json_line", "This line is not a JSON object.")
    for name in REQUIRED:
        if name not in record or record[name] is None:
            return missing(name)
    custom_id = record["custom_id"]
    if not isinstance(custom_id, str) or not custom_id:
        return Fault("invalid_value", "custom_id must be a non-empty string.", "custom_id")
    return None


def request_fault(
    record: dict[str, Any],
    served: Collection[str],
    endpoint: str | None = None,
    models: Collection[str] | None = None,
) -> Fault | None:
    """What is wrong with the request of a line (its fields are present), else None."""
    method, url, body = record.get("method", "POST"), record.get("url"), record.get("body")
    if method != "POST":
        return Fault(
            "invalid_value", f"Invalid value: '{method}'. Supported values are: 'POST'.", "method"
        )
    if not isinstance(url, str):
        return missing("url")
    path = url.split("?", 1)[0]
    if endpoint is not None and path != endpoint:
        return Fault(
            "invalid_url",
            "The URL provided for this request does not match the batch endpoint.",
            "url",
        )
    if path not in kinds.INFERENCE_ROUTES or path not in served:
        return Fault(
            "invalid_url",
            f"The URL {url!r} is not an inference route this model serves; "
            f"it serves: {', '.join(sorted(served))}.",
            "url",
        )
    if not isinstance(body, dict):
        return Fault("invalid_request", "The body must be a JSON object.", "body")
    if body.get("stream"):
        return Fault(
            "streaming_unsupported",
            f"{_NAMES.get(path, path)}: Streaming is not supported in the Batch API.",
            "body.stream",
        )
    model = body.get("model")
    if models is not None and model is not None and model not in models:
        return Fault("model_not_found", unknown_model(model, list(models)), "body.model")
    return None


def unknown_model(model: object, models: list[str]) -> str:
    """OpenAI's words for a model no one serves here, then what is served and how to add a name
    (LiteLLM's quick start writes its own `model_name` into every line)."""
    shown = ", ".join(f"'{name}'" for name in models[:SHOWN_MODELS]) or "none"
    more = f" and {len(models) - SHOWN_MODELS} more" if len(models) > SHOWN_MODELS else ""
    aliases = json.dumps([*models[:1], str(model)])
    return (
        f"The provided model '{model}' is not supported by the Batch API. This server serves "
        f"{shown}{more}. To accept '{model}' as another name of the model, start the server "
        f"with SM_VLLM_SERVED_MODEL_NAME='{aliases}'."
    )


@dataclass(frozen=True)
class Checked:
    """One input line: its record when it may run, else its fault."""

    number: int
    custom_id: str | None
    raw: bytes
    record: dict[str, Any] | None = None
    fault: Fault | None = None


@dataclass
class LineChecker:
    """Checks lines in file order; remembers where each custom_id was first seen."""

    first_seen: dict[str, int] = field(default_factory=dict)

    def check(self, number: int, raw: bytes) -> Checked:
        record = parse_line(raw)
        if isinstance(record, Fault):
            custom_id = _custom_id(raw) if record.code == "missing_required_parameter" else None
            return Checked(number, custom_id, raw, fault=record)
        custom_id = record["custom_id"]
        first = self.first_seen.setdefault(custom_id, number)
        if first != number:
            fault = Fault(
                "duplicate_custom_id",
                f"The custom_id '{custom_id}' is already used on line {first}.",
                "custom_id",
            )
            return Checked(number, custom_id, raw, fault=fault)
        return Checked(number, custom_id, raw, record)


def _custom_id(raw: bytes) -> str | None:
    """The custom_id of a line that is JSON but incomplete, when it has a usable one."""
    value = json.loads(raw)
    custom_id = value.get("custom_id")
    return custom_id if isinstance(custom_id, str) and custom_id else None


def checked_lines(
    lines: Iterable[bytes],
    served: Collection[str] | None = None,
    endpoint: str | None = None,
    models: Collection[str] | None = None,
) -> Iterator[Checked]:
    """The request lines of a file (blank lines are not requests), checked in order with their
    1-based line numbers; with `served`, each request is also checked by `request_fault`."""
    checker = LineChecker()
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        checked = checker.check(number, raw)
        if checked.fault is None and served is not None and checked.record is not None:
            fault = request_fault(checked.record, served, endpoint, models)
            if fault is not None:
                checked = replace(checked, fault=fault)
        yield checked


@dataclass
class Validation:
    """What the lines of a batch input file add up to before anything runs."""

    total: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None


def validate(
    lines: Iterable[bytes], endpoint: str, served: Collection[str], models: Collection[str]
) -> Validation:
    """Check every line of a batch input (blank lines are not requests) and list every bad one
    with its 1-based line number, as OpenAI lists them in `errors.data`."""
    found = Validation()
    for checked in checked_lines(lines, served, endpoint, models):
        found.total += 1
        fault = checked.fault
        if fault is not None:
            found.errors.append(
                {
                    "code": fault.code,
                    "message": fault.message,
                    "param": fault.param,
                    "line": checked.number,
                }
            )
        elif found.model is None and checked.record is not None:
            model = checked.record["body"].get("model")
            found.model = model if isinstance(model, str) else None
    if found.total == 0:
        found.errors.append(
            {
                "code": "empty_file",
                "message": "The batch input file is empty: it has no request lines.",
                "param": "input_file_id",
                "line": None,
            }
        )
    elif found.total > MAX_LINES:
        found.errors.append(
            {
                "code": "too_many_requests",
                "message": f"The batch input file has {found.total} requests; a batch may have "
                f"at most {MAX_LINES}.",
                "param": "input_file_id",
                "line": None,
            }
        )
    return found


@dataclass(frozen=True)
class Outcome:
    """What a finished output line says."""

    custom_id: str | None
    line_number: int | None
    succeeded: bool
    usage: dict[str, Any]
    status_code: int | None = None
    aborted: bool = False


def outcome(line: bytes) -> Outcome:
    """Read back one output line (ValueError when it is not a complete JSON object line)."""
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    response, error = value.get("response"), value.get("error")
    succeeded = error is None and isinstance(response, dict) and response.get("status_code") == 200
    body = response.get("body") if isinstance(response, dict) else None
    usage = body.get("usage") if isinstance(body, dict) else None
    number, status = None, None
    if isinstance(response, dict):
        status = response.get("status_code")
    elif isinstance(error, dict):
        match = LINE_PREFIX.match(str(error.get("message", "")))
        number = int(match.group(1)) if match else None
        # A route that raised instead of answering is a server error, not the line's answer.
        status = 500 if error.get("code") == INTERNAL_ERROR else None
    return Outcome(
        value.get("custom_id"),
        number,
        succeeded,
        usage if isinstance(usage, dict) else {},
        status if isinstance(status, int) else None,
        succeeded and was_aborted(body),
    )


def was_aborted(body: Any) -> bool:
    """Whether the engine gave the request up part-way (a choice finished with "abort", as vLLM
    answers every running request when it shuts down): the answer is not the model's."""
    choices = body.get("choices") if isinstance(body, dict) else None
    return isinstance(choices, list) and any(
        isinstance(choice, dict) and choice.get("finish_reason") == "abort" for choice in choices
    )


def repair(path: str) -> list[Outcome]:
    """The outcomes of the complete lines in `path`, cutting off a half-written last line."""
    outcomes: list[Outcome] = []
    keep = 0
    with open(path, "rb") as existing:
        for line in existing:
            if not line.endswith(b"\n"):
                break
            try:
                outcomes.append(outcome(line))
            except ValueError:
                break
            keep += len(line)
    os.truncate(path, keep)
    return outcomes
