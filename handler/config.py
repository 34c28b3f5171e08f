"""The handler's settings, read once from the environment when vLLM builds its app.

vLLM installs middleware with `app.add_middleware(Class)` and no arguments, so the environment is
how `serve` and the user configure the handler. `serve` reads it too before starting vLLM, so a
bad value stops the container at once with a clear message (ConfigError).
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from container.env_args import ConfigError, flag_values
from handler import execution_parameters
from handler.execution_parameters import ExecutionParameters, positive_int

MIB = 1024 * 1024
REALTIME_PAYLOAD_MB = 6
BATCH_PAYLOAD_MB = 100
MAX_JSON_DEPTH = 64
DEFAULT_RECORDS_IN_FLIGHT = 1024
# 90 % of SageMaker's default InvocationsTimeoutInSeconds (600 s).
DEFAULT_MINI_BATCH_TIMEOUT_S = 540.0


@dataclass(frozen=True)
class Config:
    api_keys: tuple[str, ...]
    max_payload_bytes: int
    fixed_route: str | None
    batch: bool
    records_in_flight: int
    mini_batch_timeout_s: float
    execution_parameters: ExecutionParameters

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Config":
        env = os.environ if env is None else env
        batch = env.get("SAGEMAKER_BATCH", "").lower() == "true"
        return cls(
            api_keys=api_keys(env),
            max_payload_bytes=payload_limit_mb(env, batch) * MIB,
            fixed_route=env.get("SAGEMAKER_INVOCATIONS_ROUTE") or None,
            batch=batch,
            records_in_flight=positive_int(env, "SAGEMAKER_MAX_RECORDS_IN_FLIGHT")
            or DEFAULT_RECORDS_IN_FLIGHT,
            mini_batch_timeout_s=mini_batch_timeout_s(env),
            execution_parameters=execution_parameters.from_env(env),
        )


def api_keys(env: Mapping[str, str]) -> tuple[str, ...]:
    """vLLM's `--api-key` as SM_VLLM_API_KEY (one key or a JSON array), else VLLM_API_KEY."""
    if env.get("SM_VLLM_API_KEY"):
        return tuple(k for k in flag_values(env["SM_VLLM_API_KEY"]) if k)
    return (env["VLLM_API_KEY"],) if env.get("VLLM_API_KEY") else ()


def payload_limit_mb(env: Mapping[str, str], batch: bool) -> int:
    """SAGEMAKER_MAX_PAYLOAD_IN_MB when set, else SageMaker's own limit for the mode:
    6 MB for real-time requests, 100 MB for Batch Transform."""
    return positive_int(env, "SAGEMAKER_MAX_PAYLOAD_IN_MB") or (
        BATCH_PAYLOAD_MB if batch else REALTIME_PAYLOAD_MB
    )


def mini_batch_timeout_s(env: Mapping[str, str]) -> float:
    """SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS (seconds, > 0), else DEFAULT_MINI_BATCH_TIMEOUT_S."""
    raw = env.get("SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS", "").strip()
    if not raw:
        return DEFAULT_MINI_BATCH_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ConfigError(f"SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS must be seconds > 0, got {raw!r}")
    return value
