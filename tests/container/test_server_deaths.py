"""A test whose server died says so (tests/support/server_deaths.py): the log lines that report
a death,
as a table; and a pytest run whose stand-in servers crash, give up or stay up, as a user of the
suite would read its report. (The real engine's SIGILL, its fault handler's stacks and vLLM's
line for it: tests/handler/batches/test_batches_durable.py, the restart test.)"""

import textwrap

import pytest

from tests import ROOT
from tests.support.server_deaths import Death, deaths_in

WORKER_SIGILL = (
    "(EngineCore pid=2844) ERROR 11-25 22:40:21 [multiproc_executor.py:316] Worker proc "
    "VllmWorker-0 died unexpectedly (exit code: -4), shutting down executor."
)
RESTART = (
    "serve: vLLM exited with status 1; its processes are gone; starting it again (restart 1, "
    "at most 3 within 3600 s)"
)


@pytest.mark.parametrize(
    ("line", "reported", "signal"),
    [
        (WORKER_SIGILL, True, "SIGILL"),
        ("Fatal Python error: Illegal instruction", True, "SIGILL"),
        ("(Worker pid=7) Fatal Python error: Segmentation fault", True, "SIGSEGV"),
        ("Fatal Python error: Aborted", True, "SIGABRT"),
        (RESTART, True, None),
        ("serve: vLLM was killed by SIGKILL; its processes are gone", True, "SIGKILL"),
        ("RuntimeError: Process ApiServer_1 (PID: 77) died with exit code -11", True, "SIGSEGV"),
        ("RuntimeError: Process ApiServer_1 (PID: 77) died with exit code 1", True, None),
        ("Worker proc VllmWorker-0 died unexpectedly (exit code: None)", True, None),
        ("Engine core process EngineCore_DP0 died unexpectedly.", True, None),
        ("INFO 11-25 [sagemaker pid=3] invocation id=1 status=200", False, None),
        ("INFO 11-25 [sagemaker pid=3] amx tiles=none", False, None),
    ],
)
def test_death_lines(line: str, reported: bool, signal: str | None) -> None:
    expected = [Death(line, signal)] if reported else []
    assert deaths_in(f"INFO before\n{line}\nINFO after\n") == expected


def test_only_fatal_signals_are_crashes() -> None:
    deaths = deaths_in(f"{WORKER_SIGILL}\n{RESTART}\nserve: vLLM was killed by SIGKILL; x\n")
    assert [d.crash for d in deaths] == [True, False, False]


# Inner tests, each with a stand-in for `serve` that prints a line, then dies as told or waits
# to be killed.
INNER = textwrap.dedent(
    """
    import subprocess, sys

    import httpx

    from tests.support import processes, servers

    STAND_IN = (
        "import os, signal, sys\\n"
        "print('serve: the stand-in started', flush=True)\\n"
        "if sys.argv[1] == 'crash': os.kill(os.getpid(), signal.SIGILL)\\n"
        "if sys.argv[1] == 'give-up': sys.exit(1)\\n"
        "signal.pause()\\n"
    )


    def stand_in(name, how, tmp_path):
        log = tmp_path / f"{name}.log"
        with log.open("wb") as out:
            process = processes.spawn(
                [sys.executable, "-X", "faulthandler", "-c", STAND_IN, how],
                stdout=out, stderr=subprocess.STDOUT,
            )
        server = servers.Server(name, "m", servers.free_port(), log, process)
        servers.STARTED.append(server)
        if how != "live":
            process.wait()
        return server


    def test_crashed(tmp_path):
        server = stand_in("crashy", "crash", tmp_path)
        httpx.get(server.url + "/ping")


    def test_gave_up(tmp_path):
        server = stand_in("quitter", "give-up", tmp_path)
        httpx.get(server.url + "/ping")


    def test_alive(tmp_path):
        server = stand_in("steady", "live", tmp_path)
        try:
            assert False, "the test's own failure"
        finally:
            processes.kill(server.process)
    """
)


def test_a_failing_test_names_its_servers_death(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "tests.support.server_deaths", "-rf", "-vv")
    assert result.ret == 1
    out = result.stdout.str()
    summary = {
        line.split(" ")[1].split("::")[1]: line
        for line in result.stdout.lines
        if line.startswith("FAILED ")
    }
    assert set(summary) == {"test_crashed", "test_gave_up", "test_alive"}
    assert (
        "a server crashed: crashy: SIGILL (Fatal Python error: Illegal instruction)"
        in (summary["test_crashed"])
    )
    assert (
        "a server is gone: quitter: serve has exited with status 1; the test saw: "
        in (summary["test_gave_up"])
    )
    assert "ConnectError" in summary["test_gave_up"]
    assert "crashed" not in summary["test_alive"]
    sections = out.split("servers that died")
    assert len(sections) == 3, "one section for each of the two tests whose server died"
    crashed, gave_up = sections[1], sections[2]
    assert "Fatal Python error: Illegal instruction" in crashed
    assert "The log's last 40 lines:" in crashed
    assert "serve: the stand-in started" in crashed
    assert "serve has exited with status 1" in gave_up
    assert "serve: the stand-in started" in gave_up
