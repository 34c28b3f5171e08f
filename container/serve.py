"""`serve`: read the container's environment, build vLLM's server command, and run it.

The rules live in `env_args`, `hardware`, `handler_specs`, `requirements` and `restarts`; this
module only gathers the machine's facts, installs the customer's requirements, prints the result
or runs it (under `supervisor`, which starts vLLM again when it fails; with
PROCESS_AUTO_RECOVERY=false it execs vLLM in its place), and turns a configuration error (of
the server, of the handler that will run inside it, or of the customer's handler specs) into
one clear message before anything starts.
"""

import argparse
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence

from vllm_sagemaker.container import (
    cgroup,
    cpu_libraries,
    env_args,
    hardware,
    memory,
    model_reads,
    modelinfos,
    requirements,
    system,
)
from vllm_sagemaker.container.supervisor import Supervisor
from vllm_sagemaker.core import handler_specs
from vllm_sagemaker.core.env import ConfigError, model_dir
from vllm_sagemaker.core.environment import CPU_PRELOAD_VAR, environment_problems
from vllm_sagemaker.core.install import server_missing
from vllm_sagemaker.core.restart_policy import RestartPolicy

# `vllm serve` of this interpreter's vLLM (see container.vllm_cli). Unlike vLLM's single
# API-server module, it honours --api-server-count (several API-server processes), headless
# mode and data-parallel supervisors.
VLLM_SERVE = ("-m", "vllm_sagemaker.container.vllm_cli", "serve")
# The start of the line of a model whose weights could not be counted (its reason follows);
# vLLM starts all the same.
NOT_CHECKED = "whether the model fits in memory is not checked"


def model_memory(
    env: Mapping[str, str], args: Sequence[str], checked: bool
) -> tuple[memory.Model, list[str]]:
    """The model's memory as its files say (`container.memory`), and what `serve` says when
    its fit cannot be checked (`checked`: the container's memory caps it). A model directory
    is always read (a file this user cannot read is a ConfigError); the Hub and S3 only when
    the fit is checked."""
    model = env_args.flag_value(args, "--model") or ""
    place = model_reads.where(model)
    files = model_reads.Files()
    try:
        if place == "dir":
            files = model_reads.directory(model)
        elif checked and place != "path":
            files = model_reads.remote(env, model, env_args.flag_value(args, "--revision"))
    except model_reads.NotRead as unread:
        return memory.Model(), [f"{NOT_CHECKED}: {unread}"]
    load_format = env_args.flag_value(args, "--load-format") or "auto"
    names = memory.weight_files(files.sizes, load_format, files.indexes, files.from_hub)
    found = memory.model(files.config, sum(files.sizes[n] for n in names or ()), args)
    if names is None and checked:
        why = f"vLLM's --load-format {load_format} loads weights this check does not count"
        return found, [f"{NOT_CHECKED}: {why}"]
    return found, []


def engine_memory(
    env: Mapping[str, str], args: Sequence[str], gpus: int, limits: cgroup.Limits
) -> memory.Sizing:
    """The KV cache that fits this machine (`container.memory`): a container is capped when its
    cgroup's limit is below the machine's memory, and then has what is left of the limit or
    of the machine's free memory, whichever is less."""
    available = hardware.mem_available_bytes()
    cap = limits.memory_bytes
    if cap is not None and cap >= hardware.mem_total_bytes():
        cap = None
    if cap is not None:
        cap = min(cap, limits.memory_used_bytes + available)
    found, said = model_memory(env, args, memory.checks_fit(env, args, gpus, cap))
    sized = memory.size(env, args, gpus, cap, available, found)
    return dataclasses.replace(sized, notes=[*said, *sized.notes])


def server_command(
    env: Mapping[str, str],
    extra: Sequence[str],
    facts: system.System,
    limits: cgroup.Limits | None = None,
) -> tuple[list[str], dict[str, str], list[str]]:
    """The command line of vLLM's OpenAI server, the variables to add to its environment, and
    what `serve` says of the machine (a line each). What the engine cannot do without (`facts`
    or the container's `limits` lack it) is a ConfigError."""
    limits = limits or cgroup.Limits()
    gpus = hardware.visible_gpu_count(env, hardware.dev_entries())
    preload, lacking = cpu_libraries.preload(env, gpus, cpu_libraries.on_this_machine())
    try:
        entries = os.listdir(model_dir(env))
    except OSError:
        entries = []
    given = env_args.server_args(env, entries, gpus, extra)
    needs = system.needs(env, given, gpus, facts)
    sized = engine_memory(env, given, gpus, limits)
    problems = [*needs.problems, *sized.problems]
    if problems:
        raise ConfigError("; ".join(problems))
    args = env_args.server_args(env, entries, gpus, [*extra, *needs.args, *sized.args])
    threads = (
        hardware.omp_threads_env({**env, **needs.env}, gpus, limits.cpus, hardware.allowed_cpus())
        if system.world_size(args) == 1
        else {}
    )
    added = {
        **env_args.platform_env(env, args),
        **sized.env,
        **threads,
        **preload,
        **needs.env,
    }
    lacking = [*lacking, *needs.notes, *sized.notes]
    if threads:
        ((variable, value),) = threads.items()
        lacking.append(
            f"the container's CPU quota is {limits.cpus:g} CPUs, so vLLM's CPU worker runs "
            f"{hardware.omp_thread_count(threads)} thread(s) ({variable}={value})"
        )
    if "SAGEMAKER_MODEL_DIR" in env and "SAGEMAKER_MODEL_PATH" not in env:
        # MHCS, inside the server, looks for the customer's code here.
        added["SAGEMAKER_MODEL_PATH"] = handler_specs.code_dir(env)
    return [sys.executable, *VLLM_SERVE, *args], added, lacking


def _why(variable: str) -> str:
    """Why `serve` sets a variable, as its start-up line says."""
    if variable == env_args.VLLM_KEY_VAR:
        return "off vLLM's command line"
    if variable == cpu_libraries.PRELOAD:
        return f"vLLM's CPU guide; {CPU_PRELOAD_VAR}=false leaves it out"
    if variable in (system.IN_PROCESS_VAR, system.NO_COMPILE_VAR):
        return "what this system lacks, said above; set it to override"
    return "set it to override"


def run(extra: Sequence[str], dry_run: bool) -> int:
    """Print the resolved command (`dry_run`), or run the server: supervised, or in place of this
    process when auto-recovery is off."""
    missing = None if dry_run else server_missing("serve")
    if missing:
        print(f"serve: {missing}", file=sys.stderr)
        return 1
    try:
        problems = environment_problems(os.environ, handler_specs.read_source)
        if problems:
            raise ConfigError("; ".join(problems))
        policy = RestartPolicy.from_env(os.environ)
        command, added, lacking = server_command(
            os.environ, extra, system.on_this_machine(os.environ), cgroup.read()
        )
        install = requirements.for_directory(os.environ, handler_specs.code_dir(os.environ))
    except ConfigError as error:
        print(f"serve: {error}", file=sys.stderr)
        return 2
    for line in lacking:
        print(f"serve: {line}", file=sys.stderr)
    if dry_run:
        print(json.dumps(command))
        if install:
            print("serve: would install requirements: " + shlex.join(install), file=sys.stderr)
        if added:
            print(
                "serve: would set " + " ".join(env_args.shown(k, v) for k, v in added.items()),
                file=sys.stderr,
            )
        return 0
    if install and requirements.install(install) != 0:
        return 1
    for key, value in added.items():
        print(f"serve: {env_args.shown(key, value)} ({_why(key)})", file=sys.stderr)
    modelinfos.seed({**os.environ, **added})
    sys.stdout.flush()
    sys.stderr.flush()
    if policy.enabled:
        return Supervisor(command, {**os.environ, **added}, policy).run()
    os.execve(command[0], command, {**os.environ, **added})


# What `serve --help` says of it.
DESCRIPTION = (
    "Start vLLM's OpenAI server configured from the environment: each SM_VLLM_* variable is "
    "one of vLLM's options (SM_VLLM_MAX_MODEL_LEN=8192 is --max-model-len 8192); the model is "
    "/opt/ml/model or HF_MODEL_ID. Arguments this command does not know pass through to vLLM "
    "(`serve --max-num-seqs 64`). SageMaker starts the container as `serve`."
)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of `serve` (all others pass through to vLLM), and its description and usage
    where the parser has none."""
    parser.description = parser.description or DESCRIPTION
    parser.usage = parser.usage or "%(prog)s [-h] [--dry-run] [VLLM_OPTION ...]"
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved vLLM command as a JSON array and exit without starting it",
    )
    return parser


def _strip_serve(argv: Sequence[str]) -> list[str]:
    """SageMaker appends `serve` to `docker run IMAGE`; accept it (once or repeated) and drop it."""
    args = list(argv)
    while args and args[0] == "serve":
        args.pop(0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """The `serve` command (the image's entrypoint)."""
    parser = add_arguments(argparse.ArgumentParser(prog="serve"))
    args, extra = parser.parse_known_args(_strip_serve(sys.argv[1:] if argv is None else argv))
    return run(extra, args.dry_run)
