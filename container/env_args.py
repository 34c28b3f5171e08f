"""The rules that turn a SageMaker container's environment into vLLM server arguments.

Everything here is a pure function of its inputs (an environment mapping, a directory listing,
a GPU count), so the rules can be read in one place and tested with a table of cases.
"""

from collections.abc import Mapping, Sequence

from vllm_sagemaker.core.config import (
    API_KEY_VAR,
    BATCH_YIELD_VAR,
    api_keys,
    batch_api_on,
)
from vllm_sagemaker.core.env import ConfigError, flag, flag_values, model_dir
from vllm_sagemaker.core.environment import num_gpus, port
from vllm_sagemaker.core.sm_vllm import SM_VLLM_PREFIX, becomes_flag, flag_name

MIDDLEWARE = "vllm_sagemaker.handler.middleware.SageMakerMiddleware"
LIVE_FIRST_SCHEDULER = "vllm_sagemaker.handler.engine.live_first.LiveFirstScheduler"
# SageMaker allows up to 3600 s for a container to pass /ping (ContainerStartupHealthCheck-
# TimeoutInSeconds); vLLM gives up on its engine after 600 s unless told otherwise.
ENGINE_READY_TIMEOUT_S = 3600
# How long an idle keep-alive connection stays open. vLLM's 5 s equals the pool expiry of common
# clients (httpx's 5 s); a caller reusing a connection just as the server closes it gets a reset
# (a request lost with "connection reset by peer"). The server must close last: 75 s outlasts the
# idle timeouts of the proxies and pools in front of it (60 s is usual), as nginx's default does.
KEEP_ALIVE_S = 75
# Object stores vLLM's Run:ai model streamer reads weights from without a download first.
STREAMED_SCHEMES = ("s3://", "gs://", "az://")
STREAMER_LOAD_FORMAT = "runai_streamer"
# vLLM serves lower priority values first; real-time requests carry 0.
BATCH_PRIORITY = 10

# The variable vLLM reads one API key from when its command line has no `--api-key`.
VLLM_KEY_VAR = "VLLM_API_KEY"

NO_MODEL_MESSAGE = (
    "no model configured: set SM_VLLM_MODEL (a model id or path), put the model's files in "
    "/opt/ml/model (SageMaker unpacks ModelDataUrl there; SAGEMAKER_MODEL_DIR overrides the "
    "directory for local runs), or set HF_MODEL_ID"
)


def sm_vllm_flags(env: Mapping[str, str]) -> list[str]:
    """Every `SM_VLLM_<NAME>` variable as vLLM flags, in a stable (sorted) order.

    `SM_VLLM_MODEL`, `SM_VLLM_PORT` and `SM_VLLM_HOST` are left out: the model comes from
    `resolve_model` and the address from the SageMaker contract. `SM_VLLM_API_KEY` gives the
    keys the handler checks too; see `api_key_placement` for which of them reach the command
    line.
    """
    args: list[str] = []
    for variable in sorted(env):
        if not becomes_flag(variable):
            continue
        value = env[variable]
        if variable == API_KEY_VAR:
            args += api_key_placement(env)[0]
        elif value.lower() != "false":
            args += [flag_name(variable), *flag_values(value)]
    return args


def api_key_placement(env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """Where vLLM gets the keys of SM_VLLM_API_KEY (`config.api_keys`, the keys the handler
    checks, which refuses a value that holds none): the arguments and the environment variables
    to give it. A process's command line is readable by every local user (/proc/PID/cmdline,
    `ps`), its environment only by its owner, so one key goes in VLLM_KEY_VAR, which vLLM reads
    when it has no `--api-key` (and which replaces any the user set, so that vLLM and the
    handler check the same key). Several keys need `--api-key k1 k2`: the variable holds one.
    Without SM_VLLM_API_KEY, nothing: vLLM and the handler both read VLLM_KEY_VAR as it is."""
    if API_KEY_VAR not in env:
        return [], {}
    keys = api_keys(env)
    if len(keys) == 1:
        return [], {VLLM_KEY_VAR: keys[0]}
    return [flag_name(API_KEY_VAR), *keys], {}


def shown(variable: str, value: str) -> str:
    """`variable=value` as `serve` prints a variable it adds: the API key by where it comes
    from, never its value (logs are read by more people than should hold the key)."""
    return f"{variable}=<from {API_KEY_VAR}>" if variable == VLLM_KEY_VAR else f"{variable}={value}"


def resolve_model(env: Mapping[str, str], model_dir_entries: Sequence[str]) -> str:
    """The model to serve: SM_VLLM_MODEL, else the model directory when it holds files,
    else HF_MODEL_ID. `model_dir_entries` lists the model directory (empty when missing)."""
    if env.get("SM_VLLM_MODEL"):
        return env["SM_VLLM_MODEL"]
    if model_dir_entries:
        return model_dir(env)
    if env.get("HF_MODEL_ID"):
        return env["HF_MODEL_ID"]
    raise ConfigError(NO_MODEL_MESSAGE)


def tensor_parallel_args(
    env: Mapping[str, str], visible_gpus: int, given: Sequence[str]
) -> list[str]:
    """`--tensor-parallel-size` from SM_NUM_GPUS or the visible GPU count, unless already given."""
    if _given("--tensor-parallel-size", given) or "-tp" in given:
        return []
    gpus = num_gpus(env)
    if gpus is not None:
        return ["--tensor-parallel-size", str(gpus)]
    if visible_gpus > 1:
        return ["--tensor-parallel-size", str(visible_gpus)]
    return []


def _given(flag: str, args: Sequence[str]) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def load_format_args(model: str, given: Sequence[str]) -> list[str]:
    """`--load-format runai_streamer` for a model in an object store (`s3://bucket/prefix/`):
    the weights stream to the engine with no download to disk first. A load format the user
    chose wins."""
    if not model.lower().startswith(STREAMED_SCHEMES) or _given("--load-format", given):
        return []
    return ["--load-format", STREAMER_LOAD_FORMAT]


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The value given to the first of `names` in `args` (`--flag value` or `--flag=value`)."""
    for index, arg in enumerate(args):
        for name in names:
            if arg.startswith(name + "="):
                return arg.partition("=")[2]
            if arg == name and index + 1 < len(args):
                return args[index + 1]
    return None


def api_server_count(args: Sequence[str]) -> int:
    """The API-server processes vLLM will run, as far as the arguments say (1 when unset)."""
    value = flag_value(args, "--api-server-count", "-asc") or ""
    return int(value) if value.isdigit() else 1


def platform_env(env: Mapping[str, str], args: Sequence[str]) -> dict[str, str]:
    """Variables `serve` adds unless the user set them: a fatal signal in any of vLLM's
    processes prints their Python stacks into the log; vLLM waits for its engine as long as
    SageMaker waits for /ping; idle connections stay open KEEP_ALIVE_S; with LoRA on, adapters
    can be registered at run time (SageMaker's POST /adapters) when there is one API server
    (vLLM refuses runtime adapters with several, since each process would hold its own); a model
    streamed from an S3-compatible store at a custom endpoint (AWS_ENDPOINT_URL: MinIO,
    LocalStack, moto) is addressed path-style, as such stores expect; under priority
    scheduling, server-side batch lines run at BATCH_PRIORITY (vLLM serves lower values first;
    real-time requests have 0). Also, whatever the user set, the one key of SM_VLLM_API_KEY
    (`api_key_placement`). `args` are the server's arguments."""
    model = flag_value(args, "--model") or ""
    added = {
        "PYTHONFAULTHANDLER": "1",
        "VLLM_ENGINE_READY_TIMEOUT_S": str(ENGINE_READY_TIMEOUT_S),
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(KEEP_ALIVE_S),
    }
    lora = env.get(SM_VLLM_PREFIX + "ENABLE_LORA", "")
    if lora.lower() not in ("", "false") and api_server_count(args) == 1:
        added["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "true"
    custom_endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if model.lower().startswith("s3://") and custom_endpoint:
        added["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] = "0"
    if flag_value(args, "--scheduling-policy") == "priority":
        added["SAGEMAKER_BATCH_PRIORITY"] = str(BATCH_PRIORITY)
    return {
        **{key: value for key, value in added.items() if key not in env},
        **api_key_placement(env)[1],
    }


def scheduling_args(env: Mapping[str, str], given: Sequence[str]) -> list[str]:
    """Priority scheduling when the Batches API is on (unless a policy was chosen), so batch
    lines can run at a lower priority than real-time requests; under priority scheduling, while
    batch work yields (SAGEMAKER_BATCH_YIELD), the live-first scheduler unless one was chosen:
    batch requests sit out the engine steps that prefill a live request."""
    args = []
    if batch_api_on(env) and not _given("--scheduling-policy", given):
        args += ["--scheduling-policy", "priority"]
    priority = flag_value([*given, *args], "--scheduling-policy") == "priority"
    if priority and flag(env, BATCH_YIELD_VAR, True) and not _given("--scheduler-cls", given):
        args += ["--scheduler-cls", LIVE_FIRST_SCHEDULER]
    return args


def quiet_ping_args(given: Sequence[str]) -> list[str]:
    """Keep /ping out of the access log (SageMaker pings every few seconds) unless the user
    chose which endpoints to silence."""
    if any(a.startswith("--disable-access-log-for-endpoints") for a in given):
        return []
    return ["--disable-access-log-for-endpoints", "/ping"]


def server_args(
    env: Mapping[str, str],
    model_dir_entries: Sequence[str],
    visible_gpus: int,
    extra: Sequence[str] = (),
) -> list[str]:
    """The full argument list of vLLM's OpenAI server (everything after the program)."""
    flags = [*sm_vllm_flags(env), *extra]
    model = resolve_model(env, model_dir_entries)
    return [
        "--model",
        model,
        "--host",
        "0.0.0.0",
        "--port",
        str(port(env)),
        *flags,
        *load_format_args(model, flags),
        *tensor_parallel_args(env, visible_gpus, flags),
        *scheduling_args(env, flags),
        *quiet_ping_args(flags),
        "--middleware",
        MIDDLEWARE,
    ]
