"""Stop requests and the exit status (`handler.process.lifecycle`), without an engine."""

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support import processes
from vllm_sagemaker.handler.process.lifecycle import StopRequests


@pytest.fixture
def restored_handlers() -> Iterator[None]:
    saved = {stop: signal.getsignal(stop) for stop in (signal.SIGTERM, signal.SIGINT)}
    yield
    for stop, handler in saved.items():
        signal.signal(stop, handler)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_is_noted_and_still_reaches_the_handler_before(
    stop: signal.Signals, restored_handlers: None
) -> None:
    received: list[int] = []
    signal.signal(stop, lambda signum, _frame: received.append(signum))
    stops = StopRequests()
    stops.watch()
    assert not stops.requested
    signal.raise_signal(stop)
    assert stops.requested
    assert received == [stop]


def test_an_ignored_signal_stays_ignored(restored_handlers: None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stops = StopRequests()
    stops.watch()
    signal.raise_signal(signal.SIGTERM)
    assert stops.requested


def run(code: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [
            sys.executable,
            "-c",
            "from vllm_sagemaker.handler.process.lifecycle import StopRequests\n" + code,
        ],
        text=True,
        timeout=300,
    )


def test_a_default_sigterm_still_ends_the_process() -> None:
    done = run("import signal\nStopRequests().watch()\nsignal.raise_signal(signal.SIGTERM)\n")
    assert done.returncode == -signal.SIGTERM


def test_exit_is_status_1_without_a_stop_request() -> None:
    done = run("StopRequests().exit_unless_requested('the engine is dead')\nprint('alive')")
    assert done.returncode == 1
    assert "the engine is dead; exiting with status 1" in done.stdout
    assert "alive" not in done.stdout


def test_a_requested_stop_keeps_its_own_status() -> None:
    done = run(
        "stops = StopRequests()\nstops.requested = True\n"
        "stops.exit_unless_requested('the engine is dead')\nprint('alive')"
    )
    assert done.returncode == 0 and done.stdout == "alive\n"
