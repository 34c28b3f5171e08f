"""Reading the container's environment: the rules `serve` and the handler share.

`serve` checks the whole environment before vLLM starts, and the handler reads the same
variables inside it, so a bad value stops the container at once with one message (ConfigError).
"""

import json
from collections.abc import Mapping

DEFAULT_MODEL_DIR = "/opt/ml/model"


class ConfigError(ValueError):
    """The environment does not describe a server that can start."""


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
