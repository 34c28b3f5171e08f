"""Every value `serve` refuses in the container's environment, in one place: `serve` checks its
environment here before it starts anything, and `deploy --env` checks the variables it would give
a model, so a value the container would refuse is refused before AWS sees it.

The variables `serve` reads for its own command line (`container.env_args`,
`container.requirements`) are read here too, so both sides check them by the same rules: the
SM_VLLM_* names among them against vLLM's own options (`sm_vllm`).
"""

from collections.abc import Callable, Mapping

from vllm_sagemaker.handler.core import handler_specs, sm_vllm
from vllm_sagemaker.handler.core.config import Config
from vllm_sagemaker.handler.core.env import ConfigError, flag
from vllm_sagemaker.handler.core.execution_parameters import positive_int
from vllm_sagemaker.handler.core.metrics_settings import MetricsSettings
from vllm_sagemaker.handler.core.restart_policy import RestartPolicy

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
