"""No orphans: what a test run starts dies with it, however the run ends, and the engine that
`vllm-sagemaker batch --model` starts dies with the runner. No engine needed: the stand-ins are
processes with children, as `serve` has its engine."""

import contextlib
import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests.support import processes, waiting

# A process with a child of its own, as `serve` has its engine core; it prints its pid.
FAMILY = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(flush=True)\n"
    "time.sleep(600)\n"
)
# A test run: starts FAMILY through tests.support.processes, prints its group, and once the test has
# looked at the group (a line on stdin), ends as told.
TEST_RUN = (
    "import subprocess, sys, time\n"
    "from tests.support import processes\n"
    "family = processes.spawn([sys.executable, '-c', sys.argv[2]], stdout=subprocess.PIPE)\n"
    "family.stdout.readline()\n"
    "print(family.pid, flush=True)\n"
    "sys.stdin.readline()\n"
    "time.sleep(600) if sys.argv[1] == 'hang' else None\n"
)
# An engine that prints when it runs.
ENGINE = "import time\nprint(flush=True)\ntime.sleep(600)\n"
# A runner: starts ENGINE with deploy.batch.local_engine.spawn_tied, as it starts `serve`.
RUNNER = (
    "import os, sys, time\n"
    "from vllm_sagemaker.deploy.batch.local_engine import spawn_tied\n"
    "engine = [sys.executable, '-c', sys.argv[1]]\n"
    "spawn_tied(engine, dict(os.environ), sys.stdout.buffer)\n"
    "time.sleep(600)\n"
)


def group_members(pgid: int) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return found


def wait_gone(pgid: int, timeout: float = 120) -> None:
    """Every process of the group has ended (fails after `timeout`, a guard against a hang)."""
    waiting.until(
        lambda: not group_members(pgid), timeout, lambda: f"still running: {group_members(pgid)}"
    )


def start_test_run(how: str) -> tuple[subprocess.Popen[bytes], int]:
    """A test run that started a family; the run and the family's group, both running. The run
    holds until the family is seen whole (a run that ended at once would have its family ended
    by then), then goes on as `how` says."""
    run = processes.spawn(
        [sys.executable, "-c", TEST_RUN, how, FAMILY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=os.getcwd(),
    )
    assert run.stdin is not None and run.stdout is not None
    pgid = int(run.stdout.readline())
    assert len(group_members(pgid)) == 2, "the family and its child run"
    run.stdin.write(b"go on\n")
    run.stdin.flush()
    return run, pgid


def test_a_killed_test_run_leaves_nothing_running() -> None:
    run, pgid = start_test_run("hang")
    run.send_signal(signal.SIGKILL)
    run.wait()
    wait_gone(pgid)
    processes.kill(run)


def test_a_test_run_that_forgets_to_stop_what_it_started_leaves_nothing_running() -> None:
    run, pgid = start_test_run("exit")
    assert run.wait() == 0
    wait_gone(pgid)
    processes.kill(run)


def test_stop_ends_the_whole_group_and_gives_the_exit_status() -> None:
    family = processes.spawn([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE)
    assert family.stdout is not None
    family.stdout.readline()
    assert processes.stop(family) == -signal.SIGTERM
    # SIGKILL reaches the rest of the group asynchronously: it ends soon after, not at once.
    wait_gone(family.pid)


def test_run_gives_output_and_status() -> None:
    done = processes.run(
        [sys.executable, "-c", "import sys; print(sys.stdin.read()); exit(3)"], b"hi"
    )
    assert (done.returncode, done.stdout) == (3, b"hi\n")


@pytest.mark.skipif(sys.platform != "linux", reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_the_local_engine_dies_with_a_killed_runner() -> None:
    runner = processes.spawn([sys.executable, "-c", RUNNER, ENGINE], stdout=subprocess.PIPE)
    assert runner.stdout is not None
    runner.stdout.readline()
    [engine] = psutil.Process(runner.pid).children()
    assert os.getpgid(engine.pid) == engine.pid, "the engine runs in a session of its own"
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    try:
        engine.wait(120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(engine.pid, signal.SIGKILL)
        processes.kill(runner)
