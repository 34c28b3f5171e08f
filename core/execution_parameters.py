"""What `GET /execution-parameters` tells SageMaker Batch Transform, from the environment.

SageMaker's precedence is: the transform job's own values, then this answer, then its defaults
(1 concurrent transform, 6 MB, MultiRecord). The defaults here keep the engine busy without
making a mini-batch outlive SageMaker's 600 s invocation timeout:
- MultiRecord, because a mini-batch's records run on the engine together (continuous batching);
- 1 MB mini-batches: about a thousand chat records, several times what an engine runs at once,
  yet small enough to finish in minutes even for long generations on a small GPU;
- 2 concurrent transforms, so the next mini-batch keeps the engine busy while the slowest records
  of the previous one finish; never more than 100 MB in flight (SageMaker's limit).
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_sagemaker.core.env import ConfigError

MAX_TOTAL_MB = 100
# What the container answers (and the kit's jobs ask for) when nothing is set.
DEFAULT_PAYLOAD_MB = 1
DEFAULT_CONCURRENCY = 2
# SageMaker's own defaults, when neither the job nor the container says otherwise.
SAGEMAKER_PAYLOAD_MB = 6
SAGEMAKER_CONCURRENCY = 1
STRATEGIES = ("MULTI_RECORD", "SINGLE_RECORD")


@dataclass(frozen=True)
class ExecutionParameters:
    max_concurrent_transforms: int
    batch_strategy: str
    max_payload_in_mb: int

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "MaxConcurrentTransforms": self.max_concurrent_transforms,
                "BatchStrategy": self.batch_strategy,
                "MaxPayloadInMB": self.max_payload_in_mb,
            }
        ).encode()


def positive_int(env: Mapping[str, str], name: str) -> int | None:
    """The variable as a whole number > 0, None when unset."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{name} must be a whole number > 0, got {raw!r}")
    return int(raw)


def batch_strategy(env: Mapping[str, str]) -> str:
    """SAGEMAKER_BATCH_STRATEGY in SageMaker's spelling (MultiRecord and MULTI_RECORD both
    accepted); MULTI_RECORD when unset."""
    raw = env.get("SAGEMAKER_BATCH_STRATEGY", "").strip()
    if not raw:
        return STRATEGIES[0]
    normal = raw.upper().replace("_", "")
    for strategy in STRATEGIES:
        if strategy.replace("_", "") == normal:
            return strategy
    raise ConfigError(
        f"SAGEMAKER_BATCH_STRATEGY must be MULTI_RECORD or SINGLE_RECORD, got {raw!r}"
    )


def from_env(env: Mapping[str, str]) -> ExecutionParameters:
    """The answer for this environment; ConfigError when the variables cannot be honoured."""
    # Async inference may raise the body limit past 100 MB; Batch Transform never sends more.
    payload = min(
        positive_int(env, "SAGEMAKER_MAX_PAYLOAD_IN_MB") or DEFAULT_PAYLOAD_MB, MAX_TOTAL_MB
    )
    concurrency = positive_int(env, "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS") or max(
        1, min(DEFAULT_CONCURRENCY, MAX_TOTAL_MB // payload)
    )
    if concurrency * payload > MAX_TOTAL_MB:
        raise ConfigError(
            f"SAGEMAKER_MAX_CONCURRENT_TRANSFORMS ({concurrency}) x SAGEMAKER_MAX_PAYLOAD_IN_MB "
            f"({payload}) must not exceed {MAX_TOTAL_MB} MB"
        )
    return ExecutionParameters(concurrency, batch_strategy(env), payload)
