"""`serve`: read the container's environment, build vLLM's server command, and exec it.

The rules live in `env_args` and `hardware`; this module only gathers the machine's facts,
prints or execs the result, and turns a configuration error (of the server or of the handler
that will run inside it) into one clear message before anything starts.
"""

import json
import os
import sys
from collections.abc import Mapping, Sequence

from container import env_args, hardware
from handler.config import Config

# `vllm serve` of this interpreter's vLLM (see container.vllm_cli). Unlike vLLM's single
# API-server module, it honours --api-server-count (several API-server processes), headless
# mode and data-parallel supervisors.
VLLM_SERVE = ("-m", "container.vllm_cli", "serve")


def server_command(
    env: Mapping[str, str], extra: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """The command line of vLLM's OpenAI server and the variables to add to its environment."""
    gpus = hardware.visible_gpu_count(env, hardware.dev_entries())
    try:
        entries = os.listdir(env_args.model_dir(env))
    except OSError:
        entries = []
    args = env_args.server_args(env, entries, gpus, extra)
    added = {
        **env_args.platform_env(env, args),
        **hardware.engine_env(env, gpus, hardware.mem_available_bytes()),
    }
    return [sys.executable, *VLLM_SERVE, *args], added


def run(extra: Sequence[str], dry_run: bool) -> int:
    """Print the resolved command (`dry_run`) or replace this process with the server."""
    try:
        Config.from_env(os.environ)
        command, added = server_command(os.environ, extra)
    except env_args.ConfigError as error:
        print(f"serve: {error}", file=sys.stderr)
        return 2
    if dry_run:
        print(json.dumps(command))
        if added:
            print(
                "serve: would set " + " ".join(f"{k}={v}" for k, v in added.items()),
                file=sys.stderr,
            )
        return 0
    for key, value in added.items():
        print(f"serve: {key}={value} (set it to override)", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, {**os.environ, **added})
