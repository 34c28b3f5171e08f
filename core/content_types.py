"""Which bodies `/invocations` accepts, by Content-Type."""

from enum import Enum

from vllm_sagemaker.core.errors import RequestError

JSON = "application/json"
JSON_TYPES = frozenset({JSON})
# The JSON Lines type this project sends and answers with (SageMaker's name for it).
JSON_LINES = "application/jsonlines"
JSON_LINES_TYPES = frozenset(
    {
        JSON_LINES,
        "application/jsonl",
        "application/x-jsonlines",
        "application/x-ndjson",
    }
)
ACCEPTED = ", ".join(sorted(JSON_TYPES | JSON_LINES_TYPES))


class Framing(Enum):
    JSON = "json"
    JSON_LINES = "jsonlines"


def framing(content_type: str | None) -> Framing:
    """JSON for `application/json` (parameters such as charset allowed) or no Content-Type;
    JSON Lines for its four media types; 415 for anything else."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if not media or media in JSON_TYPES:
        return Framing.JSON
    if media in JSON_LINES_TYPES:
        return Framing.JSON_LINES
    raise RequestError(
        415,
        f"unsupported Content-Type {content_type!r}; accepted: {ACCEPTED}",
        "unsupported_media_type",
        "Content-Type",
    )
