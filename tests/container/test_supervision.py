"""`serve` keeps vLLM up (container.supervisor), on the real engine: a vLLM server killed while
it starts leaves an orphaned engine core (vLLM issue #55510) that is gone before the next start;
past PROCESS_MAX_START_RETRIES `serve` exits 1 with nothing left running; SIGTERM while vLLM is
being started again stops `serve` at once. No test waits for a model to load: each acts as soon
as the process it needs exists. (A dead engine restarted in place, with a batch that finishes
and requests in flight that fail, is in tests/handler/batches/test_batches_durable.py, on its
server.)"""

import contextlib
import signal
from pathlib import Path

import psutil

from tests.support import reaper, servers, waiting
from vllm_sagemaker.container import restarts

# A hang guard only: the processes these tests wait for start within seconds.
TIMEOUT_S = 300


def vllm_server(server: servers.Server, other_than: int | None = None) -> psutil.Process:
    """vLLM's server, `serve`'s child, once it runs (one other than `other_than`). An orphaned
    engine core is `serve`'s child too, until it is gone."""

    def found() -> psutil.Process | None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(server.process.pid).children():
                if child.pid != other_than and "vllm_cli" in " ".join(child.cmdline()):
                    return child
        return None

    return waiting.until(found, TIMEOUT_S, f"{server.name} started no vLLM server")


def nothing_left(server: servers.Server) -> None:
    """`serve` has exited and no process of its session is left."""
    assert server.process.poll() is not None
    assert reaper.session_members(server.process.pid) == []


def test_an_orphaned_engine_core_is_gone_before_the_restart_and_the_limit_ends_serve(
    models: dict[str, Path], tmp_path: Path
) -> None:
    server = servers.start("limit", models["chat"], tmp_path, PROCESS_MAX_START_RETRIES="1")
    try:
        first = vllm_server(server)
        core = server.engine_core(TIMEOUT_S)
        first.kill()
        second = vllm_server(server, other_than=first.pid)
        assert not core.is_running(), "the old engine core was gone before vLLM started again"
        server.engine_core(TIMEOUT_S)
        second.kill()
        assert server.process.wait(TIMEOUT_S) == restarts.GAVE_UP
        nothing_left(server)
        log = server.log_path.read_text()
        assert log.count("serve: vLLM was killed by SIGKILL; its processes are gone") == 1
        assert "the 1 restarts PROCESS_MAX_START_RETRIES allows within 3600 s" in log
    finally:
        server.stop()


def test_sigterm_while_vllm_is_restarted_stops_serve_at_once(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """The stop timeout is far beyond the test's wait: `serve` ends because vLLM stops on the
    signal, not because it was killed."""
    server = servers.start(
        "stopped-restarting", models["chat"], tmp_path, SAGEMAKER_STOP_TIMEOUT_SECONDS="3600"
    )
    try:
        first = vllm_server(server)
        first.kill()
        vllm_server(server, other_than=first.pid)
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(TIMEOUT_S)
        nothing_left(server)
        log = server.log_path.read_text()
        assert log.count("starting it again") == 1
        assert "serve: SIGTERM: stopping vLLM" in log
        assert "did not stop within" not in log
    finally:
        server.stop()
