"""How `deploy batch` cuts an OpenAI batch file into shards for a fleet, and what it remembers.

A shard is a contiguous run of the file's valid request lines, one transform job's input, so its
`.out` keeps the file's order. There is at least one shard per instance (SageMaker gives each
input object to one instance only) and no shard holds more than `--shard-lines` lines, so a lost
shard costs little. The plan (`plan.json` under the work prefix) records the input's
fingerprint, the shards and every job run for each, so running the same command again reruns
only what has no output yet.
"""

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from vllm_sagemaker.deploy.aws import split
from vllm_sagemaker.deploy.aws.plan import MAX_NAME

DEFAULT_SHARD_LINES = 2000


def shard_count(requests: int, instances: int, shard_lines: int) -> int:
    """Shards for `requests` valid lines: one per instance at least, at most `shard_lines` lines
    each, never more shards than lines."""
    if requests <= 0:
        return 0
    return min(requests, max(instances, math.ceil(requests / shard_lines)))


def shard_sizes(requests: int, instances: int, shard_lines: int) -> list[int]:
    """The lines of each shard, in order, sizes differing by at most one."""
    count = shard_count(requests, instances, shard_lines)
    return [end - start for start, end in split.ranges(requests, count)]


def job_suffix(shard: int, attempt: int) -> str:
    """What a shard's transform job adds to the batch's name: `-<shard>-<attempt>`."""
    return f"-{shard:05d}-{attempt}"


def job_name(batch: str, shard: int, attempt: int) -> str:
    """`<batch>-<shard>-<attempt>`. `deploy batch` refuses a name with no room for the first
    attempt's suffix (`deploy.aws.validate`), so a name is whole until a shard's tenth attempt
    (or shard 100000); a longer suffix cuts the batch name so the whole stays a valid job name."""
    suffix = job_suffix(shard, attempt)
    return batch[: MAX_NAME - len(suffix)].rstrip("-") + suffix


@dataclass
class Job:
    """One transform job run for a shard; `status` None while it is not known to have ended."""

    name: str
    status: str | None = None
    reason: str | None = None
    seconds: float = 0.0


@dataclass
class Shard:
    index: int
    lines: int
    jobs: list[Job] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}"

    @property
    def last(self) -> Job | None:
        return self.jobs[-1] if self.jobs else None


@dataclass
class Plan:
    """What a batch's work prefix holds: the input it was cut from, and its shards."""

    input: str
    fingerprint: str
    lines: int
    requests: int
    shards: list[Shard]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Plan":
        value: dict[str, Any] = json.loads(data)
        shards = [
            Shard(s["index"], s["lines"], [Job(**job) for job in s["jobs"]])
            for s in value.pop("shards")
        ]
        return cls(**value, shards=shards)
