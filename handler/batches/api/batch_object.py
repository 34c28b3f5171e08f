"""OpenAI's Batch object: the create parameters it is made from, and its shape (its usage is
`handler.batches.store.usage`'s).

`create_params` checks `POST /v1/batches` synchronously, as OpenAI does (a bad endpoint,
completion window or metadata is a 400 worded as OpenAI words it); everything about the lines
is checked later, when the batch validates its file. `new_batch` is the object in `validating`.
"""

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.core import json_record, kinds
from vllm_sagemaker.core.config import EXPIRY_RANGE_S
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.batches.store.usage import zero_usage

COMPLETION_WINDOW = "24h"
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


@dataclass(frozen=True)
class CreateParams:
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    output_expires_after_s: int | None


def _missing(name: str) -> RequestError:
    return RequestError(
        400, f"Missing required parameter: '{name}'.", "missing_required_parameter", name
    )


def _invalid(name: str, value: object, allowed: Collection[str]) -> RequestError:
    quoted = [f"'{item}'" for item in allowed]
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + ", and " + quoted[-1]
    return RequestError(
        400,
        f"Invalid value: '{value}'. Supported values are: {listed}.",
        "invalid_value",
        name,
    )


def _type_name(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else "a string"


def _wrong_type(name: str, expected: str, value: object) -> RequestError:
    return RequestError(
        400,
        f"Invalid type for '{name}': expected {expected}, but got {_type_name(value)} instead.",
        "invalid_type",
        name,
    )


def checked_metadata(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _wrong_type("metadata", "an object", value)
    if len(value) > METADATA_PAIRS:
        raise RequestError(
            400,
            f"Invalid 'metadata': too many properties. Expected an object with at most "
            f"{METADATA_PAIRS} properties, but got an object with {len(value)} properties.",
            "object_above_max_properties",
            "metadata",
        )
    for key, item in value.items():
        if len(key) > METADATA_KEY_CHARS:
            raise RequestError(
                400,
                f"Invalid 'metadata': keys are at most {METADATA_KEY_CHARS} characters.",
                "invalid_value",
                "metadata",
            )
        if not isinstance(item, str):
            raise _wrong_type(f"metadata.{key}", "a string", item)
        if len(item) > METADATA_VALUE_CHARS:
            raise RequestError(
                400,
                f"Invalid 'metadata.{key}': string too long. Expected a string with maximum "
                f"length {METADATA_VALUE_CHARS}, but got a string with length {len(item)} instead.",
                "string_above_max_length",
                f"metadata.{key}",
            )
    return value


def checked_output_expiry(value: object) -> int | None:
    if value is None:
        return None
    low, high = EXPIRY_RANGE_S
    if not isinstance(value, dict) or value.get("anchor") != "created_at":
        raise RequestError(
            400,
            'output_expires_after must be {"anchor": "created_at", "seconds": N}',
            "invalid_value",
            "output_expires_after",
        )
    seconds = value.get("seconds")
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not low <= seconds <= high:
        raise RequestError(
            400,
            f"output_expires_after.seconds must be a whole number from {low} to {high}",
            "invalid_value",
            "output_expires_after.seconds",
        )
    return seconds


def create_params(body: bytes, served: Collection[str]) -> CreateParams:
    """The parameters of `POST /v1/batches`, or a 400 for the first bad one. `served`: the
    routes this model serves (a batch may only name one of them)."""
    value = json_record.parse(body)
    if not isinstance(value, dict):
        raise RequestError(400, "the body must be a JSON object", "invalid_request_error")
    for name in ("input_file_id", "endpoint", "completion_window"):
        if value.get(name) in (None, ""):
            raise _missing(name)
    if not isinstance(value["input_file_id"], str):
        raise _wrong_type("input_file_id", "a string", value["input_file_id"])
    endpoints = [route for route in kinds.BATCH_ENDPOINTS if route in served]
    if value["endpoint"] not in endpoints:
        raise _invalid("endpoint", value["endpoint"], endpoints)
    if value["completion_window"] != COMPLETION_WINDOW:
        raise _invalid("completion_window", value["completion_window"], [COMPLETION_WINDOW])
    return CreateParams(
        value["input_file_id"],
        value["endpoint"],
        COMPLETION_WINDOW,
        checked_metadata(value.get("metadata")),
        checked_output_expiry(value.get("output_expires_after")),
    )


def new_batch(batch_id: str, params: CreateParams, now: int, window_s: int) -> dict[str, Any]:
    """The Batch object of a batch just created: `validating`, expiring after the window."""
    batch: dict[str, Any] = {
        "id": batch_id,
        "object": "batch",
        "endpoint": params.endpoint,
        "model": None,
        "errors": None,
        "input_file_id": params.input_file_id,
        "completion_window": params.completion_window,
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": now,
        "in_progress_at": None,
        "expires_at": now + window_s,
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "usage": zero_usage(),
        "metadata": params.metadata,
    }
    if params.output_expires_after_s is not None:
        batch["output_expires_after"] = {
            "anchor": "created_at",
            "seconds": params.output_expires_after_s,
        }
    return batch
