"""What a fleet remembers under its work prefix (`fleet.json`): the input's fingerprint, its
shards and every transform job run for each, so a rerun runs only what has no output yet."""

import json
from dataclasses import asdict, dataclass, field
from typing import Any


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
class Fleet:
    """What a batch's work prefix holds: the input it was cut from, and its shards."""

    input: str
    fingerprint: str
    lines: int
    requests: int
    shards: list[Shard]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Fleet":
        value: dict[str, Any] = json.loads(data)
        shards = [
            Shard(s["index"], s["lines"], [Job(**job) for job in s["jobs"]])
            for s in value.pop("shards")
        ]
        return cls(**value, shards=shards)
