"""The handler's settings, read once from the environment when vLLM builds its app.

vLLM installs middleware with `app.add_middleware(Class)` and no arguments, so the environment is
how `serve` and the user configure the handler.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from container.env_args import flag_values

MIB = 1024 * 1024
REALTIME_PAYLOAD_MB = 6
BATCH_PAYLOAD_MB = 100
MAX_JSON_DEPTH = 64


@dataclass(frozen=True)
class Config:
    api_keys: tuple[str, ...]
    max_payload_bytes: int
    fixed_route: str | None
    batch: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Config":
        env = os.environ if env is None else env
        batch = env.get("SAGEMAKER_BATCH", "").lower() == "true"
        return cls(
            api_keys=api_keys(env),
            max_payload_bytes=payload_limit_mb(env, batch) * MIB,
            fixed_route=env.get("SAGEMAKER_INVOCATIONS_ROUTE") or None,
            batch=batch,
        )


def api_keys(env: Mapping[str, str]) -> tuple[str, ...]:
    """vLLM's `--api-key` as SM_VLLM_API_KEY (one key or a JSON array), else VLLM_API_KEY."""
    if env.get("SM_VLLM_API_KEY"):
        return tuple(k for k in flag_values(env["SM_VLLM_API_KEY"]) if k)
    return (env["VLLM_API_KEY"],) if env.get("VLLM_API_KEY") else ()


def payload_limit_mb(env: Mapping[str, str], batch: bool) -> int:
    """SAGEMAKER_MAX_PAYLOAD_IN_MB when set, else SageMaker's own limit for the mode:
    6 MB for real-time requests, 100 MB for Batch Transform."""
    raw = env.get("SAGEMAKER_MAX_PAYLOAD_IN_MB", "")
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return BATCH_PAYLOAD_MB if batch else REALTIME_PAYLOAD_MB
