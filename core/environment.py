"""Every value `serve` refuses in the container's environment, in one place: `serve` checks its
environment here before it starts anything, and `deploy --env` checks the variables it would give
a model, so a value the container would refuse is refused before AWS sees it.

The variables `serve` reads for its own command line (`container.env_args`,
`container.requirements`) are read here too, so both sides check them by the same rules: the
SM_VLLM_* names among them against vLLM's own options (`sm_vllm`).
"""

import re
from collections.abc import Callable, Mapping

from vllm_sagemaker.core import handler_specs, sm_vllm
from vllm_sagemaker.core.config import Config
from vllm_sagemaker.core.env import ConfigError, flag
from vllm_sagemaker.core.execution_parameters import positive_int
from vllm_sagemaker.core.metrics_settings import MetricsSettings
from vllm_sagemaker.core.restart_policy import RestartPolicy

DEFAULT_PORT = 8080
AUTO_INSTALL_VAR = "STANDARD_AUTO_INSTALL_REQ"
CPU_PRELOAD_VAR = "SAGEMAKER_CPU_PRELOAD"


def port(env: Mapping[str, str]) -> int:
    """8080, or SAGEMAKER_BIND_TO_PORT (multi-container endpoints and inference pipelines)."""
    raw = env.get("SAGEMAKER_BIND_TO_PORT", "")
    if not raw:
        return DEFAULT_PORT
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"SAGEMAKER_BIND_TO_PORT must be a TCP port number, got {raw!r}")
    return int(raw)


def num_gpus(env: Mapping[str, str]) -> int | None:
    """SM_NUM_GPUS (TGI's and LMI's tensor-parallel size), a whole number > 0; None when unset."""
    return positive_int(env, "SM_NUM_GPUS")


def auto_install(env: Mapping[str, str]) -> bool:
    """Whether `serve` installs the customer's requirements.txt (STANDARD_AUTO_INSTALL_REQ, AWS's
    switch)."""
    return flag(env, AUTO_INSTALL_VAR, True)


def cpu_preload(env: Mapping[str, str]) -> bool:
    """Whether `serve` preloads tcmalloc and Intel OpenMP into the CPU engine (vLLM's CPU guide;
    `container.cpu_libraries`)."""
    return flag(env, CPU_PRELOAD_VAR, True)


def readable_int(value: str) -> int | None:
    """A count as vLLM's options read it (`vllm.utils.argparse_utils.human_readable_int`):
    digits, or a number with k, m, g, t (powers of 1000) or a whole number with K, M, G, T
    (powers of 1024); None for anything else."""
    value = value.strip()
    if value.isdigit():
        return int(value)
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", value)
    if not found:
        return None
    number, suffix = found.groups()
    if suffix.islower():
        return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
    return int(number) * 1024 ** ("KMGT".index(suffix) + 1) if number.isdigit() else None


def _count(value: str) -> int:
    count = readable_int(value)
    if count is None:
        raise ValueError(value)
    return count


def _count_or_auto(value: str) -> int:
    return -1 if value.strip().lower() in ("auto", "-1") else _count(value)


_WHOLE = (int, "a whole number")
_COUNT = (_count, "a count, as 8192, 8k or 8K")
# Numeric options of vLLM's `vllm serve` that `serve` reads itself or a deploy most often sizes,
# with the type vLLM's parser gives them (and what it takes, in words).
_NUMBERS: dict[str, tuple[Callable[[str], object], str]] = {
    "--tensor-parallel-size": _WHOLE,
    "--pipeline-parallel-size": _WHOLE,
    "--data-parallel-size": _WHOLE,
    "--api-server-count": _WHOLE,
    "--max-num-seqs": _WHOLE,
    "--max-model-len": (_count_or_auto, "a count, as 8192, 8k or 8K, or auto"),
    "--max-num-batched-tokens": _COUNT,
    "--kv-cache-memory-bytes": _COUNT,
    "--gpu-memory-utilization": (float, "a number, as 0.9"),
}


def vllm_number_problems(env: Mapping[str, str]) -> list[str]:
    """Each SM_VLLM_* variable of a numeric vLLM option whose value vLLM's parser refuses (in
    the container, vLLM itself says so when `serve` starts it; `deploy --env` says it first)."""
    wrong = []
    for variable in sorted(env):
        flag = sm_vllm.flag_name(variable) if sm_vllm.becomes_flag(variable) else ""
        kind, takes = _NUMBERS.get(flag, (str, ""))
        try:
            kind(env[variable])
        except ValueError:
            wrong.append(f"{variable}={env[variable]!r}: vLLM's {flag} takes {takes}")
    return wrong


# Each reads its variables and raises ConfigError for a value `serve` refuses.
_READERS: tuple[Callable[[Mapping[str, str]], object], ...] = (
    Config.from_env,
    RestartPolicy.from_env,
    port,
    num_gpus,
    auto_install,
    cpu_preload,
    sm_vllm.flags,
    MetricsSettings.from_env,
)


def environment_problems(
    env: Mapping[str, str], read: handler_specs.ReadSource | None
) -> list[str]:
    """Why `serve` would refuse `env`, one reason per reader (none: it starts as far as the
    environment goes). `read` reads the customer's handler files; None where they are out of
    reach (the client, which checks only the specs' form)."""
    problems = []
    for reader in _READERS:
        try:
            reader(env)
        except ConfigError as error:
            problems.append(str(error))
    return problems + handler_specs.problems(env, read)
