"""`serve` started for one run (`batch --model`): on 127.0.0.1 only (`serve` itself binds
0.0.0.0, as a container must), requiring an API key (a fresh random one unless `--api-key` gives
it), so its routes and Files API are open to neither the network nor other local users."""

import asyncio
import contextlib
import functools
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import BinaryIO

import httpx

from vllm_sagemaker.core import prctl
from vllm_sagemaker.core.config import API_KEY_VAR, BATCH_YIELD_VAR
from vllm_sagemaker.deploy.base.errors import ClientError

START_TIMEOUT_S = 900.0
POLL_S = 0.25
HOST = "127.0.0.1"


class EngineFailed(ClientError):
    """The engine did not start; the line ends with its log's tail."""


def new_key() -> str:
    """A fresh random API key: 256 bits in hex (plain characters for a header)."""
    return secrets.token_hex(32)


def command(
    serve: str, model: str, extra: Sequence[str], port: int, api_key: str
) -> tuple[list[str], dict[str, str]]:
    """`serve`'s arguments and environment: `extra` (for vLLM), then `--host 127.0.0.1` to win.
    The key goes in the environment as SM_VLLM_API_KEY (over any VLLM_API_KEY), never in a
    command line every local user can read (`ps`). No live request reaches the run's engine, so
    its batch window never yields (0.74x -> 0.84x of `vllm.LLM` in benchmarks/engine_speed.py)."""
    env = {
        **os.environ,
        "SM_VLLM_MODEL": model,
        "SAGEMAKER_BIND_TO_PORT": str(port),
        API_KEY_VAR: api_key,
        BATCH_YIELD_VAR: "false",
    }
    return [serve, *extra, "--host", HOST], env


def spawn_tied(args: Sequence[str], env: dict[str, str], log: BinaryIO) -> subprocess.Popen[bytes]:
    """Start `args` in a session of its own (Ctrl-C reaches this command, which stops the engine
    in order) that gets SIGTERM when this process ends, `kill -9` included."""
    return subprocess.Popen(
        args,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=functools.partial(prctl.die_with_parent, os.getpid()),
    )


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.asynccontextmanager
async def serving(model: str, extra: Sequence[str], api_key: str) -> AsyncIterator[str]:
    """`serve` for `model`, requiring `api_key`: its URL once ready (Ctrl-C stops the wait)."""
    with socket.socket() as sock:  # a free port
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    args, env = command(str(Path(sys.executable).with_name("serve")), model, extra, port, api_key)
    with tempfile.TemporaryDirectory(prefix="vllm-sagemaker-engine-") as tmp:
        log = Path(tmp) / "serve.log"
        with log.open("wb") as out:
            process = spawn_tied(args, env, out)
        url = f"http://{HOST}:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            async with httpx.AsyncClient(base_url=url) as client:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get("/ping", timeout=2)).status_code == 200:
                            break
                    if process.poll() is not None:
                        raise EngineFailed(f"serve exited with {process.returncode}:\n{_tail(log)}")
                    if time.monotonic() > deadline:
                        raise EngineFailed(
                            f"serve not ready after {START_TIMEOUT_S:g} s:\n{_tail(log)}"
                        )
                    await asyncio.sleep(POLL_S)
            yield url
        finally:  # SIGTERM, then SIGKILL to the engine's session after a minute
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
