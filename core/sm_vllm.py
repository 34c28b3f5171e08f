"""`SM_VLLM_<NAME>` variables: the vLLM option each names, and the names vLLM does not have.

`serve` gives vLLM `--<name-with-dashes>` for each (`container.env_args`). A misspelled name
would reach vLLM as an option it refuses, at the endpoint, minutes after a deploy; so `serve`
checks every name against `vllm serve`'s options before it starts vLLM, and `deploy --env`
checks the same (both through `environment.environment_problems`).
"""

import difflib
from collections.abc import Mapping

from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.core.vllm_options import LONG_OPTIONS, SHORT_OPTIONS, VLLM_VERSION

SM_VLLM_PREFIX = "SM_VLLM_"
# Settings the SageMaker contract owns: they never become flags (the model comes from
# `env_args.resolve_model`, the address from the contract), so they are not checked here.
CONTRACT_OWNED = frozenset({"MODEL", "PORT", "HOST"})


def flag_name(variable: str) -> str:
    """`SM_VLLM_MAX_MODEL_LEN` -> `--max-model-len`."""
    return "--" + variable.removeprefix(SM_VLLM_PREFIX).lower().replace("_", "-")


def variable_name(flag: str) -> str:
    """`--max-model-len` -> `SM_VLLM_MAX_MODEL_LEN`."""
    return SM_VLLM_PREFIX + flag.removeprefix("--").upper().replace("-", "_")


def becomes_flag(variable: str) -> bool:
    """Whether `variable` is an `SM_VLLM_<NAME>` that `serve` turns into a vLLM flag."""
    name = variable.removeprefix(SM_VLLM_PREFIX)
    return variable.startswith(SM_VLLM_PREFIX) and bool(name) and name not in CONTRACT_OWNED


def nearest_flag(flag: str) -> str | None:
    """The option vLLM has that `flag` most likely meant: the long form of a short option
    (`--tp` -> `--tensor-parallel-size`), else the closest long option, if any is close."""
    short = SHORT_OPTIONS.get(flag.removeprefix("-"))
    if short:
        return short
    close = difflib.get_close_matches(flag, LONG_OPTIONS, n=1)
    return close[0] if close else None


def unknown_flag(variable: str) -> str | None:
    """Why vLLM would refuse the flag `variable` names (one line), or None."""
    flag = flag_name(variable)
    if not becomes_flag(variable) or flag in LONG_OPTIONS:
        return None
    refused = f"{variable}: vLLM {VLLM_VERSION} has no option {flag}"
    nearest = nearest_flag(flag)
    if nearest:
        return f"{refused}; did you mean {variable_name(nearest)} ({nearest})?"
    return f"{refused}, nor one close to it (`vllm serve --help` lists them)"


def flags(env: Mapping[str, str]) -> list[str]:
    """The vLLM options that the SM_VLLM_* variables of `env` name; ConfigError naming every
    variable whose option vLLM does not have, each with the nearest one it has."""
    unknown = [line for variable in sorted(env) if (line := unknown_flag(variable))]
    if unknown:
        raise ConfigError("; ".join(unknown))
    return [flag_name(variable) for variable in sorted(env) if becomes_flag(variable)]
