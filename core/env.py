"""Reading the container's environment: the rules `serve` and the handler share.

`serve` checks the whole environment before vLLM starts, and the handler reads the same
variables inside it, so a bad value stops the container at once with one message (ConfigError).
"""

import json
from collections.abc import Mapping

DEFAULT_MODEL_DIR = "/opt/ml/model"
TRUE_VALUES = ("true", "1", "yes", "on")
FALSE_VALUES = ("false", "0", "no", "off")
# Set by `serve` in vLLM's environment at each start: how many times it has started vLLM again
# after a failure (`container.supervisor`; the handler publishes it on /metrics).
RESTARTS_VAR = "SAGEMAKER_SERVER_RESTARTS"


class ConfigError(ValueError):
    """The environment does not describe a server that can start."""


def flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """A yes/no variable: true/1/yes/on or false/0/no/off in any case, spaces stripped;
    `default` when unset or empty; ConfigError for anything else."""
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    raise ConfigError(
        f"{name}={env[name]!r} is not a yes/no value; use one of "
        f"{', '.join(TRUE_VALUES)} or {', '.join(FALSE_VALUES)} (any case), or leave it unset "
        f"for the default ({str(default).lower()})"
    )


def positive(env: Mapping[str, str], name: str, what: str, least: float = 0.0) -> float | None:
    """`what` (seconds, a ratio), a finite number above `least` (fractions allowed); None when
    unset."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = least
    if not least < value < float("inf"):
        raise ConfigError(f"{name} must be {what} > {least:g}, got {raw!r}")
    return value


def seconds(env: Mapping[str, str], name: str) -> float | None:
    """A duration in seconds, a finite number > 0 (fractions allowed); None when unset."""
    return positive(env, name, "seconds")


def whole_number(env: Mapping[str, str], name: str, most: int | None = None) -> int | None:
    """A whole number from 0 (to `most`, when given); None when unset."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or (most is not None and int(raw) > most):
        bounds = "≥ 0" if most is None else f"from 0 to {most}"
        raise ConfigError(f"{name} must be a whole number {bounds}, got {raw!r}")
    return int(raw)


def flag_values(value: str) -> list[str]:
    """The arguments that follow a flag for one variable's value (AWS vLLM image rules).

    `true` or empty -> none (a bare flag); a JSON array -> one argument per element;
    anything else -> the value as one argument, spaces kept. `false` is handled by the caller,
    because it drops the flag itself.
    """
    if value == "" or value.lower() == "true":
        return []
    if value.lstrip().startswith("["):
        try:
            items = json.loads(value)
        except json.JSONDecodeError:
            return [value]
        if isinstance(items, list):
            return [item if isinstance(item, str) else json.dumps(item) for item in items]
    return [value]


def model_dir(env: Mapping[str, str]) -> str:
    """Where SageMaker puts model artifacts, or SAGEMAKER_MODEL_DIR for local runs."""
    return env.get("SAGEMAKER_MODEL_DIR") or DEFAULT_MODEL_DIR
