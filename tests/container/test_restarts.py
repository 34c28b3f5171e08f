"""When `serve` restarts vLLM (container.restarts), as tables of cases; and the supervisor's
process handling on stand-in servers (no engine: a failing program, a program that leaves an
orphan behind, one that ignores SIGTERM)."""

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support import processes, reaper
from vllm_sagemaker.container import restarts
from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.core.restart_policy import RestartPolicy


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, RestartPolicy(True, 3, 3600.0, 30.0)),
        ({"PROCESS_AUTO_RECOVERY": "false"}, RestartPolicy(False, 3, 3600.0, 30.0)),
        ({"PROCESS_AUTO_RECOVERY": "TRUE"}, RestartPolicy(True, 3, 3600.0, 30.0)),
        ({"PROCESS_MAX_START_RETRIES": "0"}, RestartPolicy(True, 0, 3600.0, 30.0)),
        ({"PROCESS_MAX_START_RETRIES": " 100 "}, RestartPolicy(True, 100, 3600.0, 30.0)),
        ({"SAGEMAKER_RESTART_WINDOW_SECONDS": "60"}, RestartPolicy(True, 3, 60.0, 30.0)),
        ({"SAGEMAKER_STOP_TIMEOUT_SECONDS": "2.5"}, RestartPolicy(True, 3, 3600.0, 2.5)),
        ({"PROCESS_MAX_START_RETRIES": ""}, RestartPolicy(True, 3, 3600.0, 30.0)),
    ],
)
def test_policy_from_env(env: dict[str, str], expected: RestartPolicy) -> None:
    assert RestartPolicy.from_env(env) == expected


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PROCESS_AUTO_RECOVERY": "maybe"}, "PROCESS_AUTO_RECOVERY"),
        ({"PROCESS_MAX_START_RETRIES": "101"}, "PROCESS_MAX_START_RETRIES"),
        ({"PROCESS_MAX_START_RETRIES": "-1"}, "PROCESS_MAX_START_RETRIES"),
        ({"PROCESS_MAX_START_RETRIES": "three"}, "PROCESS_MAX_START_RETRIES"),
        ({"SAGEMAKER_RESTART_WINDOW_SECONDS": "0"}, "SAGEMAKER_RESTART_WINDOW_SECONDS"),
        ({"SAGEMAKER_RESTART_WINDOW_SECONDS": "inf"}, "SAGEMAKER_RESTART_WINDOW_SECONDS"),
        ({"SAGEMAKER_STOP_TIMEOUT_SECONDS": "soon"}, "SAGEMAKER_STOP_TIMEOUT_SECONDS"),
        ({"SAGEMAKER_STOP_TIMEOUT_SECONDS": "nan"}, "SAGEMAKER_STOP_TIMEOUT_SECONDS"),
    ],
)
def test_bad_policy_names_its_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        RestartPolicy.from_env(env)


POLICY = RestartPolicy(max_restarts=2, window_s=100.0)


@pytest.mark.parametrize(
    ("policy", "earlier", "now", "allowed"),
    [
        (POLICY, [], 0.0, True),
        (POLICY, [10.0], 20.0, True),
        (POLICY, [10.0, 20.0], 30.0, False),
        # The first restart has left the window: one more fits.
        (POLICY, [10.0, 20.0], 110.0, True),
        (POLICY, [10.0, 20.0], 109.9, False),
        (POLICY, [0.0, 10.0, 200.0], 205.0, True),
        (RestartPolicy(max_restarts=0), [], 0.0, False),
        (RestartPolicy(enabled=False), [], 0.0, False),
    ],
)
def test_may_restart(
    policy: RestartPolicy, earlier: list[float], now: float, allowed: bool
) -> None:
    assert restarts.may_restart(policy, earlier, now) is allowed


@pytest.mark.parametrize(
    ("returncode", "described", "status"),
    [
        (1, "exited with status 1", 1),
        (0, "exited with status 0", 0),
        (-9, "was killed by SIGKILL", 137),
        (-15, "was killed by SIGTERM", 143),
        (-40, "was killed by signal 40", 168),
    ],
)
def test_how_an_exit_reads(returncode: int, described: str, status: int) -> None:
    assert restarts.describe(returncode) == described
    assert restarts.exit_status(returncode) == status


# Runs the supervisor on a stand-in server: `python -c SUPERVISE MAX_RESTARTS STOP_TIMEOUT_S
# PROGRAM ARGS...`; exits with the status `serve` would.
SUPERVISE = """
import os, sys
from vllm_sagemaker.core.restart_policy import RestartPolicy
from vllm_sagemaker.container.supervisor import Supervisor
policy = RestartPolicy(max_restarts=int(sys.argv[1]), stop_timeout_s=float(sys.argv[2]))
sys.exit(Supervisor([sys.executable, "-c", *sys.argv[3:]], os.environ, policy).run())
"""
# A server that leaves behind a child ignoring SIGTERM (as vLLM's engine core outlives a killed
# API server), says whether the one its previous run left is gone, and exits with argv[2].
ORPHANING = """
import os, pathlib, signal, subprocess, sys
left = pathlib.Path(sys.argv[1])
if left.exists():
    try:
        os.kill(int(left.read_text()), 0)
        print("previous orphan alive", flush=True)
    except ProcessLookupError:
        print("previous orphan gone", flush=True)
child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); "
child += "time.sleep(600)"
orphan = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE)
orphan.stdout.readline()
left.write_text(str(orphan.pid))
print("run", os.environ["SAGEMAKER_SERVER_RESTARTS"], flush=True)
sys.exit(int(sys.argv[2]))
"""
# A server that ignores SIGTERM.
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("run", flush=True)
time.sleep(600)
"""


def supervise(max_restarts: int, stop_timeout_s: float, *program: str) -> subprocess.Popen[str]:
    return processes.spawn(
        [sys.executable, "-c", SUPERVISE, str(max_restarts), str(stop_timeout_s), *program],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_failing_server_restarts_to_the_limit_and_leaves_nothing(tmp_path: Path) -> None:
    left = str(tmp_path / "orphan")
    supervisor = supervise(2, 30, ORPHANING, left, "3")
    out, err = supervisor.communicate(timeout=120)
    assert supervisor.returncode == restarts.GAVE_UP
    assert out.splitlines() == [
        "run 0",
        "previous orphan gone",
        "run 1",
        "previous orphan gone",
        "run 2",
    ]
    assert err.count("starting it again") == 2
    assert (
        "vLLM exited with status 3; the 2 restarts PROCESS_MAX_START_RETRIES allows within 3600 s"
        in err
    )
    assert not psutil.pid_exists(int((tmp_path / "orphan").read_text()))
    processes.kill(supervisor)


def test_a_clean_exit_is_not_restarted(tmp_path: Path) -> None:
    supervisor = supervise(2, 30, ORPHANING, str(tmp_path / "orphan"), "0")
    out, err = supervisor.communicate(timeout=120)
    assert (supervisor.returncode, out, err) == (0, "run 0\n", "")
    assert not psutil.pid_exists(int((tmp_path / "orphan").read_text()))
    processes.kill(supervisor)


def test_a_usage_error_is_not_restarted(tmp_path: Path) -> None:
    supervisor = supervise(2, 30, ORPHANING, str(tmp_path / "orphan"), "2")
    out, err = supervisor.communicate(timeout=120)
    assert (supervisor.returncode, out) == (restarts.USAGE_ERROR, "run 0\n")
    assert err == f"serve: {restarts.USAGE_ERROR_MESSAGE}\n"
    assert not psutil.pid_exists(int((tmp_path / "orphan").read_text()))
    processes.kill(supervisor)


def test_a_server_that_ignores_sigterm_is_killed_after_the_stop_timeout() -> None:
    supervisor = supervise(2, 1, STUBBORN)
    assert supervisor.stdout is not None
    assert supervisor.stdout.readline() == "run\n"
    supervisor.send_signal(signal.SIGTERM)
    _, err = supervisor.communicate(timeout=120)
    assert supervisor.returncode == 128 + signal.SIGKILL
    assert "SIGTERM: stopping vLLM" in err
    assert "did not stop within 1 s" in err
    assert "starting it again" not in err
    assert reaper.session_members(supervisor.pid) == []
    processes.kill(supervisor)
