"""AMX tile data is granted in every vLLM process before any kernel runs (handler/engine/amx.py,
issue 37): the rules as a table; on the real engine, every vLLM process of a server logs its
grant, and what it logs matches the host's CPU flags; on a host with AMX, the path that died of
SIGILL (vLLM's AMX attention in a first step of 4 tokens or fewer, before anything else had asked
for tile data) answers with the grant and dies without it.
"""

import errno
import re
from pathlib import Path

import httpx
import pytest

from tests.support import server_deaths, servers
from vllm_sagemaker.handler.engine import amx
from vllm_sagemaker.handler.engine.amx import TileData


def cpu_flags() -> set[str]:
    """The host's CPU flags, as the kernel shows them (it hides what it does not support)."""
    text = Path("/proc/cpuinfo").read_text()
    match = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return set(match[1].split()) if match else set()


HAS_AMX = "amx_tile" in cpu_flags()
NO_AMX = "this CPU has no AMX tiles (no amx_tile in /proc/cpuinfo), so no AMX kernel can run"


@pytest.mark.parametrize(
    ("state", "asks", "error", "line"),
    [
        (TileData(offered=False, permitted=False), False, False, "amx tiles=none"),
        (TileData(offered=True, permitted=False), True, True, "amx tiles=refused"),
        (TileData(offered=True, permitted=True), False, False, "amx tiles=granted"),
        (
            TileData(offered=True, permitted=False, refused=errno.ENOSPC),
            True,
            True,
            'amx tiles=refused reason="No space left on device"',
        ),
    ],
)
def test_rules(state: TileData, asks: bool, error: bool, line: str) -> None:
    assert amx.needs_request(state) is asks
    is_error, logged = amx.report(state)
    assert is_error is error
    assert logged.startswith(line)
    assert ("advice=" in logged) is error


def test_the_grant_here_matches_the_cpu() -> None:
    """In this test process: granted where the CPU has AMX, none offered where it has not."""
    assert amx.grant() == TileData(offered=HAS_AMX, permitted=HAS_AMX)


def amx_lines(server: servers.Server) -> dict[int, str]:
    """Each process's `amx` line in the server's log: pid -> what it logged of its tiles."""
    text = server.log_path.read_text(errors="replace")
    return {
        int(pid): tiles
        for pid, tiles in re.findall(r"\[sagemaker pid=(\d+)\] amx tiles=(\w+)", text)
    }


@pytest.mark.parametrize("name", ["chat", "platform"])
def test_every_vllm_process_asked_before_its_kernels(
    engines: dict[str, servers.Server], name: str
) -> None:
    """The engine core and the worker (the processes that run kernels) and the API servers each
    logged their grant; on this host each says what the CPU offers."""
    server = engines[name]
    logged = amx_lines(server)
    running = [server.engine_core(), server.worker()]
    assert [logged.get(p.pid) for p in running] == ["granted" if HAS_AMX else "none"] * 2
    assert set(logged.values()) == {"granted" if HAS_AMX else "none"}


@pytest.mark.skipif(not HAS_AMX, reason=NO_AMX)
@pytest.mark.parametrize("granted", [True, False], ids=["with the grant", "without it"])
def test_a_first_step_of_two_tokens_on_amx(
    models: dict[str, Path], tmp_path: Path, granted: bool
) -> None:
    """A fresh engine (warm-up skipped: --enforce-eager) whose first request is 2 tokens runs
    vLLM's AMX attention before oneDNN would have asked for tile data. With our plugin it
    answers; without it (VLLM_PLUGINS names no plugin) its worker dies of SIGILL in that
    kernel, which is the death issue 37 saw."""
    plugins = {} if granted else {"VLLM_PLUGINS": "", "PROCESS_MAX_START_RETRIES": "0"}
    server = servers.start("amx", models["chat"], tmp_path, **plugins)
    try:
        server.wait_ready()
        first = {"model": server.model, "prompt": "x", "max_tokens": 2}
        if granted:
            answer = httpx.post(server.url + "/v1/completions", json=first, timeout=300)
            assert answer.status_code == 200, answer.text
            assert amx_lines(server)[server.worker().pid] == "granted"
            assert server_deaths.deaths_in(server.log_path.read_text()) == []
        else:
            try:
                answer = httpx.post(server.url + "/v1/completions", json=first, timeout=300)
                failed = answer.status_code >= 500
            except httpx.HTTPError:
                failed = True
            assert failed, "the first step ran without the grant"
            assert server.process.wait(timeout=300) == 1
            log = server.log_path.read_text()
            assert "SIGILL" in {d.signal for d in server_deaths.deaths_in(log)}
            assert "cpu_attn.py" in log[log.index("Fatal Python error: Illegal instruction") :]
    finally:
        server.stop()
