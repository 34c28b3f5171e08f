"""How `serve` restarts vLLM, as read from the environment (PROCESS_AUTO_RECOVERY,
PROCESS_MAX_START_RETRIES, SAGEMAKER_RESTART_WINDOW_SECONDS, SAGEMAKER_STOP_TIMEOUT_SECONDS). It
sits in the core so that the client's `deploy --env` refuses exactly the values `serve` would
(`core.environment`); what the variables mean and the rules that use the policy are
`container.restarts`'.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from vllm_sagemaker.core.env import flag, seconds, whole_number

MAX_RESTARTS_LIMIT = 100
DEFAULT_MAX_RESTARTS = 3
# Long enough to hold three loads of a large model (several minutes each), so a server that
# dies right after each load is given up on rather than reloaded forever.
DEFAULT_WINDOW_S = 3600.0
# supervisord's stopwaitsecs in AWS's image; vLLM stops in a few seconds, a running batch pauses.
DEFAULT_STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RestartPolicy:
    """Whether, how often and how gently `serve` restarts vLLM."""

    enabled: bool = True
    max_restarts: int = DEFAULT_MAX_RESTARTS
    window_s: float = DEFAULT_WINDOW_S
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "RestartPolicy":
        retries = whole_number(env, "PROCESS_MAX_START_RETRIES", MAX_RESTARTS_LIMIT)
        return cls(
            enabled=flag(env, "PROCESS_AUTO_RECOVERY", True),
            max_restarts=DEFAULT_MAX_RESTARTS if retries is None else retries,
            window_s=seconds(env, "SAGEMAKER_RESTART_WINDOW_SECONDS") or DEFAULT_WINDOW_S,
            stop_timeout_s=seconds(env, "SAGEMAKER_STOP_TIMEOUT_SECONDS") or DEFAULT_STOP_TIMEOUT_S,
        )
