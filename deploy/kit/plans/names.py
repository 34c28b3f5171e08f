"""The names the deploy kit gives what it creates on SageMaker (`--name`, an update's
`NAME-<UTC time>`, `deploy batch`'s jobs `NAME-<shard>-<attempt>`) and the tag it puts on it."""

import re
import time

TAGS = [{"Key": "created-by", "Value": "vllm-sagemaker"}]
# SageMaker's names of models, endpoints, endpoint configs and transform jobs: its API's pattern
# (which bounds the letters and digits, not the hyphens between them) and length.
MAX_NAME = 63
NAME_PATTERN = re.compile(rf"[a-zA-Z0-9](-*[a-zA-Z0-9]){{0,{MAX_NAME - 1}}}")
# The versions `deploy endpoint` makes when it updates an endpoint: `NAME-<UTC time>`.
VERSION_FORMAT = "%Y%m%d-%H%M%S"


def version(now: float | None = None) -> str:
    """The version a new model and config of an existing endpoint are named after."""
    return time.strftime(VERSION_FORMAT, time.gmtime(now))


def versioned(name: str, version: str) -> str:
    return f"{name}-{version}"


def is_version_of(name: str, candidate: str) -> bool:
    """Whether `candidate` is `name` or `NAME-<UTC time>` exactly: `chat-20250101-000000` is
    chat's, `chat-prod` and `chat-prod-20250101-000000` are not."""
    if candidate == name or not candidate.startswith(name + "-"):
        return candidate == name
    stamp = candidate[len(name) + 1 :]
    try:
        parsed = time.strptime(stamp, VERSION_FORMAT)
    except ValueError:
        return False
    return time.strftime(VERSION_FORMAT, parsed) == stamp


def job_suffix(shard: int, attempt: int) -> str:
    """What a shard's transform job adds to the batch's name: `-<shard>-<attempt>`."""
    return f"-{shard:05d}-{attempt}"


def job_name(batch: str, shard: int, attempt: int) -> str:
    """`<batch>-<shard>-<attempt>`, the batch name cut so that the whole stays a valid name."""
    suffix = job_suffix(shard, attempt)
    return batch[: MAX_NAME - len(suffix)].rstrip("-") + suffix
