"""Real `serve` processes for tests: start, wait for /ping, stop."""

import contextlib
import os
import random
import re
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from tests.support import processes, waiting

SERVE = str(Path(sys.executable).with_name("serve"))
# A hang guard: five engines starting together on a 2-core machine three times slower than
# ours (about 3 min here) must not reach it.
START_TIMEOUT_S = 1200


# Every server `start` started in this test run, in order (tests/support/server_deaths.py reads
# their logs when a test fails).
STARTED: list["Server"] = []

PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_handed_out: set[int] = set()


def free_port() -> int:
    """A port nothing listens on, below the kernel's ephemeral range and never handed out twice.

    A server binds its port only after its model loads. A port from the ephemeral range (what
    binding port 0 gives) may meanwhile become the local end of any outgoing connection, such
    as the model streamer's connections to S3; the server's bind then succeeds but its listen
    fails with "Address already in use", as one CI run showed."""
    try:
        first_ephemeral = int(Path(PORT_RANGE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768
    while True:
        port = random.randrange(max(1024, first_ephemeral - 12000), first_ephemeral)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of a gauge or counter in a /metrics text over the series with these labels."""
    pattern = rf"^{re.escape(name)}(?:{{([^}}]*)}})? (\S+)$"
    wanted = {f'{label}="{value}"' for label, value in labels.items()}
    return sum(
        float(value)
        for series, value in re.findall(pattern, text, re.MULTILINE)
        if wanted <= set(series.split(","))
    )


def serve_env(model: Path | str, port: int, **extra: str) -> dict[str, str]:
    """The environment a SageMaker-like start of `serve` gets, sized for the test machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SM_VLLM_")}
    env.update(
        SM_VLLM_MODEL=str(model),
        # Tiny models gain nothing from vLLM's compilation, which costs every start 14 s of
        # CPU (70 s -> 56 s for the tiny Llama on an idle 2-core machine).
        SM_VLLM_ENFORCE_EAGER="true",
        SAGEMAKER_BIND_TO_PORT=str(port),
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    if "SM_VLLM_KV_CACHE_MEMORY_BYTES" not in extra:
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    env.update(extra)
    return env


@dataclass
class Server:
    """One running `serve` process and where to reach it."""

    name: str
    model: str
    port: int
    log_path: Path
    process: subprocess.Popen = field(repr=False)
    # What `start` added to the environment (where its batch store and sessions live).
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_logged_invocation(self, inference_id: str, timeout: float = 120) -> None:
        """Until the server has logged the end of the invocation with this id: the line is
        written once the request is over (answered, or its client gone and its work aborted)."""
        waiting.until(
            lambda: f"invocation id={inference_id} " in self.log_path.read_text(errors="replace"),
            timeout,
            f"no log line for invocation {inference_id}",
        )

    def metrics(self, headers: Mapping[str, str] | None = None) -> str:
        """vLLM's /metrics text, one scrape (a route that runs in a thread pool: it took up to
        8 s while a stream was running on 2 busy cores)."""
        return httpx.get(self.url + "/metrics", headers=headers, timeout=60).text

    def metric(self, name: str, headers: Mapping[str, str] | None = None, **labels: str) -> float:
        """The sum of a gauge or counter over the series with these label values."""
        return metric_value(self.metrics(headers), name, **labels)

    def in_engine(self) -> float:
        """Requests the engine is running or has queued (one scrape: a request moving from
        the queue to a running batch between two scrapes would be counted nowhere)."""
        text = self.metrics()
        return metric_value(text, "vllm:num_requests_running") + metric_value(
            text, "vllm:num_requests_waiting"
        )

    def wait_idle(self, timeout: float) -> None:
        """Until the engine runs and queues nothing (fails after `timeout`)."""
        waiting.until(lambda: self.in_engine() == 0, timeout, "the engine is still busy", 0.2)

    def tokens_beside_a_probe(self, tokens: int = 200) -> float:
        """Tokens the engine makes for other requests while a probe of exactly `tokens` tokens
        runs to completion: 0 when nothing else runs. Unlike a gauge, this cannot be stale: a
        request left running (not aborted) makes a token in every step the probe takes."""
        before = self.metric("vllm:generation_tokens_total")
        probe = {"prompt": "probe", "max_tokens": tokens, "min_tokens": tokens}
        answer = httpx.post(self.url + "/invocations", json=probe, timeout=300)
        assert answer.status_code == 200, answer.text
        return self.metric("vllm:generation_tokens_total") - before - tokens

    def pause(self) -> None:
        """Freeze the engine (vLLM's `POST /pause?mode=keep`, a route of VLLM_SERVER_DEV_MODE):
        requests already in it stay, new ones queue, and none makes progress. A test that needs
        work to outlast a deadline or a stop freezes the engine rather than hoping the machine
        is slow enough."""
        # Without clear_cache=false, vLLM resets its caches as it pauses, which sends every
        # running request back to the queue to be prefilled again.
        params = {"mode": "keep", "clear_cache": "false"}
        paused = httpx.post(self.url + "/pause", params=params, timeout=60)
        assert paused.status_code == 200, paused.text

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The engine frozen for the length of the block (see `pause`)."""
        self.pause()
        try:
            yield
        finally:
            httpx.post(self.url + "/resume", timeout=60).raise_for_status()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.process.returncode}:\n" + self.log_tail()
                )
            try:
                return httpx.get(self.url + "/ping", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        waiting.until(ready, timeout, lambda: f"{self.name} not ready:\n" + self.log_tail(), 1)

    def family(self) -> list[psutil.Process]:
        """`serve` and every process under it: vLLM's server, its engine core and their own."""
        serve = psutil.Process(self.process.pid)
        return [serve, *serve.children(recursive=True)]

    def vllm_process(self, title: str, timeout: float = START_TIMEOUT_S) -> psutil.Process:
        """The process of vLLM's whose title names it (`EngineCore`, `Worker`), once it runs
        (fails after `timeout`)."""

        def found() -> psutil.Process | None:
            with contextlib.suppress(psutil.Error):
                for process in self.family():
                    if title in " ".join(process.cmdline()):
                        return process
            return None

        return waiting.until(found, timeout, f"{self.name} has no {title} process")

    def engine_core(self, timeout: float = START_TIMEOUT_S) -> psutil.Process:
        """vLLM's engine core process, once it runs (fails after `timeout`)."""
        return self.vllm_process("EngineCore", timeout)

    def worker(self, timeout: float = START_TIMEOUT_S) -> psutil.Process:
        """vLLM's CPU worker, the process that runs the model, once it runs."""
        return self.vllm_process("VLLM::Worker", timeout)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, as SageMaker sends it; SIGKILL the group if it outlives `timeout`."""
        return processes.stop(self.process, timeout)


def start(name: str, model: Path | str, log_dir: Path, **env: str) -> Server:
    """Start `serve` for `model` on a free port (not waiting for it to be ready), with a batch
    store of its own beside its log unless `env` names one."""
    port = free_port()
    log_path = log_dir / f"{name}.log"
    env = {"SAGEMAKER_BATCH_STORE": str(log_dir / f"{name}-batches"), **env}
    with log_path.open("wb") as log:
        process = processes.spawn(
            [SERVE, "serve"],
            env=serve_env(model, port, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(name, str(model), port, log_path, process, env)
    STARTED.append(server)
    return server


@contextlib.contextmanager
def running(
    models: Mapping[str, Path | str],
    log_dir: Path,
    env: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[dict[str, Server]]:
    """Start one server per model together, wait until all answer /ping, stop them at the end.

    `env` adds variables to the named servers' environments."""
    started = {
        name: start(name, model, log_dir, **(env or {}).get(name, {}))
        for name, model in models.items()
    }
    try:
        for server in started.values():
            server.wait_ready()
        yield started
    finally:
        for server in started.values():
            server.stop()
