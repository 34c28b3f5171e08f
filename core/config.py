"""The handler's settings, read once from the environment when vLLM builds its app.

vLLM installs middleware with `app.add_middleware(Class)` and no arguments, so the environment is
how `serve` and the user configure the handler. `serve` reads it too before starting vLLM, so a
bad value stops the container at once with a clear message (ConfigError).
"""

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_sagemaker.core import dispatch, execution_parameters
from vllm_sagemaker.core.env import (
    RESTARTS_VAR,
    ConfigError,
    flag,
    flag_values,
    positive,
    seconds,
    whole_number,
)
from vllm_sagemaker.core.execution_parameters import ExecutionParameters, positive_int
from vllm_sagemaker.core.model_names import FALLBACK_VAR
from vllm_sagemaker.core.shm import SHM_PATH, shm_usable

MIB = 1024 * 1024
# vLLM's `--api-key`, as `serve` reads it (container.env_args); `api_keys` says what it holds.
API_KEY_VAR = "SM_VLLM_API_KEY"
# vLLM's own key variable: its key when no SM_VLLM_API_KEY is set, and our clients' default.
VLLM_API_KEY_VAR = "VLLM_API_KEY"
# Set by `deploy endpoint --async-output`: SageMaker gives no signal of its own.
ASYNC_MARKER = "SAGEMAKER_ASYNC_INFERENCE"
# Set by `deploy endpoint --serverless`: SageMaker Serverless Inference gives the container no
# sign of its own, and its limits (4 MB bodies, 60 s invocations) are stricter than an instance's.
SERVERLESS_MARKER = "SAGEMAKER_SERVERLESS"
# `false`: batch work keeps its whole window beside live traffic (no yielding, no API-server cap).
BATCH_YIELD_VAR = "SAGEMAKER_BATCH_YIELD"
REALTIME_PAYLOAD_MB = 6
BATCH_PAYLOAD_MB = 100
# SageMaker async inference: payloads up to 1 GB, invocations up to an hour.
ASYNC_PAYLOAD_MB = 1024
# SageMaker Serverless Inference: request and response bodies up to 4 MB, invocations up to 60 s,
# memory in 1 GB steps (ProductionVariantServerlessConfig's MemorySizeInMB).
SERVERLESS_PAYLOAD_MB = 4
SERVERLESS_MEMORY_SIZES_MB = (1024, 2048, 3072, 4096, 5120, 6144)
MAX_JSON_DEPTH = 64
DEFAULT_RECORDS_IN_FLIGHT = 1024
# 90 % of SageMaker's default InvocationsTimeoutInSeconds (600 s).
DEFAULT_MINI_BATCH_TIMEOUT_S = 540.0
# An hour less a minute, so an async invocation answers before SageMaker's 3600 s limit.
ASYNC_MINI_BATCH_TIMEOUT_S = 3540.0
# 90 % of Serverless Inference's 60 s.
SERVERLESS_MINI_BATCH_TIMEOUT_S = 54.0
DEFAULT_SESSION_EXPIRATION_S = 1200
DEFAULT_CONCURRENT_BATCHES = 2
DEFAULT_BATCH_INFLIGHT = 512
# Unless SAGEMAKER_LIVE_LATENCY_SLO is set, batch work may push live requests' p95 to this many
# times their p95 while no batch runs (SAGEMAKER_LIVE_LATENCY_RATIO).
DEFAULT_LIVE_RATIO = 2.0
COMPLETION_WINDOW_S = 24 * 3600
# OpenAI's 30 days: how long batch input and output files are kept unless told otherwise, and
# the longest `expires_after` a file or a batch's output may ask for (the shortest is an hour).
FILE_EXPIRY_S = 30 * 24 * 3600
EXPIRY_RANGE_S = (3600, FILE_EXPIRY_S)


@dataclass(frozen=True)
class SessionSettings:
    """Stateful sessions, with MHCS's variables: SAGEMAKER_ENABLE_STATEFUL_SESSIONS,
    SAGEMAKER_SESSIONS_EXPIRATION (seconds) and SAGEMAKER_SESSIONS_PATH."""

    enabled: bool
    expiration_s: int
    path: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "SessionSettings":
        root = SHM_PATH if shm_usable() else tempfile.gettempdir()
        return cls(
            enabled=flag(env, "SAGEMAKER_ENABLE_STATEFUL_SESSIONS", False),
            expiration_s=positive_int(env, "SAGEMAKER_SESSIONS_EXPIRATION")
            or DEFAULT_SESSION_EXPIRATION_S,
            path=env.get("SAGEMAKER_SESSIONS_PATH") or os.path.join(root, "sagemaker_sessions"),
        )


@dataclass(frozen=True)
class BatchApiSettings:
    """The Files and Batches API: SAGEMAKER_BATCH_API (on unless `false`; off by default on
    Serverless Inference, whose container keeps no disk and is reclaimed when idle), its store
    SAGEMAKER_BATCH_STORE, upload limits SAGEMAKER_BATCH_MAX_FILE_MB (any file, OpenAI's 512)
    and SAGEMAKER_BATCH_MAX_INPUT_MB (a batch input file, OpenAI's 200); how batches run:
    SAGEMAKER_MAX_CONCURRENT_BATCHES at once, SAGEMAKER_BATCH_MAX_INFLIGHT batch lines and
    batch-marked records in flight in the process while no live request is around,
    SAGEMAKER_BATCH_PRIORITY (set by `serve` under priority scheduling),
    SAGEMAKER_BATCH_YIELD (`false`: keep the whole window under live traffic),
    SAGEMAKER_LIVE_LATENCY_SLO (milliseconds to a live request's first byte that batch work must
    not push the p95 past; unset: SAGEMAKER_LIVE_LATENCY_RATIO, 2, times the p95 live requests
    take while no batch runs) and
    SAGEMAKER_BATCH_COMPLETION_WINDOW_SECONDS (OpenAI's 24 h); with an `s3://` store, shared by
    replicas, SAGEMAKER_BATCH_CHUNK_LINES lines per chunk (unset: sized from the batch and the
    replicas present, `handler.batches.store.chunking.lines_per_chunk`)."""

    enabled: bool
    store: str
    max_file_bytes: int
    max_batch_input_bytes: int
    max_concurrent: int = DEFAULT_CONCURRENT_BATCHES
    max_inflight: int = DEFAULT_BATCH_INFLIGHT
    priority: int | None = None
    yields: bool = True
    live_slo_s: float | None = None
    live_ratio: float = DEFAULT_LIVE_RATIO
    window_s: int = COMPLETION_WINDOW_S
    chunk_lines: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "BatchApiSettings":
        default_store = os.path.join(
            env.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"),
            "vllm-sagemaker",
            "batches",
        )
        return cls(
            enabled=batch_api_on(env),
            store=env.get("SAGEMAKER_BATCH_STORE") or default_store,
            max_file_bytes=(positive_int(env, "SAGEMAKER_BATCH_MAX_FILE_MB") or 512) * MIB,
            max_batch_input_bytes=(positive_int(env, "SAGEMAKER_BATCH_MAX_INPUT_MB") or 200) * MIB,
            max_concurrent=positive_int(env, "SAGEMAKER_MAX_CONCURRENT_BATCHES")
            or DEFAULT_CONCURRENT_BATCHES,
            max_inflight=positive_int(env, "SAGEMAKER_BATCH_MAX_INFLIGHT")
            or DEFAULT_BATCH_INFLIGHT,
            priority=batch_priority(env),
            yields=flag(env, BATCH_YIELD_VAR, True),
            live_slo_s=(slo / 1000)
            if (slo := positive_int(env, "SAGEMAKER_LIVE_LATENCY_SLO"))
            else None,
            live_ratio=positive(env, "SAGEMAKER_LIVE_LATENCY_RATIO", "a ratio", 1.0)
            or DEFAULT_LIVE_RATIO,
            window_s=positive_int(env, "SAGEMAKER_BATCH_COMPLETION_WINDOW_SECONDS")
            or COMPLETION_WINDOW_S,
            chunk_lines=positive_int(env, "SAGEMAKER_BATCH_CHUNK_LINES"),
        )


@dataclass(frozen=True)
class Config:
    api_keys: tuple[str, ...]
    max_payload_bytes: int
    fixed_route: str | None
    batch: bool
    async_inference: bool
    records_in_flight: int
    mini_batch_timeout_s: float
    execution_parameters: ExecutionParameters
    sessions: SessionSettings
    batch_api: BatchApiSettings
    # How often `serve` has restarted vLLM (it sets RESTARTS_VAR at each start).
    server_restarts: int = 0
    # A `model` the server does not know is answered by the served model (`core.model_names`).
    model_fallback: bool = True
    # How records reach vLLM when the invocation does not say (`core.dispatch`).
    record_dispatch: dispatch.Way | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Config":
        env = os.environ if env is None else env
        batch = flag(env, "SAGEMAKER_BATCH", False)
        async_inference = flag(env, ASYNC_MARKER, False)
        serverless = is_serverless(env)
        return cls(
            api_keys=api_keys(env),
            max_payload_bytes=payload_limit_mb(env, batch, async_inference, serverless) * MIB,
            fixed_route=env.get("SAGEMAKER_INVOCATIONS_ROUTE") or None,
            batch=batch,
            async_inference=async_inference,
            records_in_flight=positive_int(env, "SAGEMAKER_MAX_RECORDS_IN_FLIGHT")
            or DEFAULT_RECORDS_IN_FLIGHT,
            mini_batch_timeout_s=mini_batch_timeout_s(env, async_inference, serverless),
            execution_parameters=execution_parameters.from_env(env),
            sessions=SessionSettings.from_env(env),
            batch_api=BatchApiSettings.from_env(env),
            server_restarts=whole_number(env, RESTARTS_VAR) or 0,
            model_fallback=flag(env, FALLBACK_VAR, True),
            record_dispatch=dispatch.setting(env.get(dispatch.DISPATCH_VAR)),
        )


def is_serverless(env: Mapping[str, str]) -> bool:
    """Whether the container runs on SageMaker Serverless Inference (SERVERLESS_MARKER)."""
    return flag(env, SERVERLESS_MARKER, False)


def batch_api_on(env: Mapping[str, str]) -> bool:
    """SAGEMAKER_BATCH_API: the Files and Batches API, on unless `false`, and off unless `true` on
    Serverless Inference (its container keeps no disk and is reclaimed when idle)."""
    return flag(env, "SAGEMAKER_BATCH_API", not is_serverless(env))


def batch_priority(env: Mapping[str, str]) -> int | None:
    """SAGEMAKER_BATCH_PRIORITY: the engine priority of batch lines (an integer), else none."""
    raw = env.get("SAGEMAKER_BATCH_PRIORITY", "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"SAGEMAKER_BATCH_PRIORITY must be an integer, got {raw!r}") from None


def api_keys(env: Mapping[str, str]) -> tuple[str, ...]:
    """The keys a request must carry (none: no key needed): SM_VLLM_API_KEY, vLLM's `--api-key`
    (one key or a JSON array of keys, spaces around each removed: a header value cannot end in
    one), else VLLM_API_KEY. `serve` passes vLLM exactly these keys, so both check the same ones.

    SM_VLLM_API_KEY set to a value that holds no key is a ConfigError: empty, `true` (a bare
    flag elsewhere, but `--api-key` needs a value), `false` (is it a key or "off"? unset the
    variable for a server without keys), or an array of blank strings.
    """
    if API_KEY_VAR not in env:
        return (env[VLLM_API_KEY_VAR],) if env.get(VLLM_API_KEY_VAR) else ()
    raw = env[API_KEY_VAR]
    value = raw.strip()
    values = [] if value.lower() == "false" else flag_values(value)
    keys = tuple(key for item in values if (key := item.strip()))
    if not keys:
        raise ConfigError(
            f"{API_KEY_VAR}={raw!r} holds no API key: set it to the key clients send as "
            "'Authorization: Bearer <key>' (or a JSON array of keys), or leave it unset for a "
            "server that needs no key"
        )
    return keys


def payload_limit_mb(
    env: Mapping[str, str], batch: bool, async_inference: bool, serverless: bool
) -> int:
    """SAGEMAKER_MAX_PAYLOAD_IN_MB when set, else SageMaker's own limit for the mode:
    6 MB for real-time requests, 100 MB for Batch Transform, 1 GB for async inference, 4 MB on
    Serverless Inference."""
    if serverless:
        default = SERVERLESS_PAYLOAD_MB
    elif async_inference:
        default = ASYNC_PAYLOAD_MB
    else:
        default = BATCH_PAYLOAD_MB if batch else REALTIME_PAYLOAD_MB
    return positive_int(env, "SAGEMAKER_MAX_PAYLOAD_IN_MB") or default


def mini_batch_timeout_s(env: Mapping[str, str], async_inference: bool, serverless: bool) -> float:
    """SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS (seconds, > 0), else the mode's default: 540 s
    (within SageMaker's 600 s), 3540 s on an async endpoint (within its hour), 54 s on
    Serverless Inference (within its 60 s)."""
    timeout = seconds(env, "SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS")
    if timeout is not None:
        return timeout
    if serverless:
        return SERVERLESS_MINI_BATCH_TIMEOUT_S
    return ASYNC_MINI_BATCH_TIMEOUT_S if async_inference else DEFAULT_MINI_BATCH_TIMEOUT_S
