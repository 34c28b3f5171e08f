"""How the test side waits, in one place, and the switch that slows it down.

Every poll of the suite (a server's /ping, a batch's status, lines on disk, a metric, a log line)
goes through `until`: check, sleep, check again. Its `timeout` only guards against a hang; it is
never what a test asserts.

`VLLM_SAGEMAKER_TEST_SLOWDOWN=N` (default 1) shakes out races: every poll sleeps N times longer,
and a wait that has seen what it waited for sleeps another (N - 1) x `LAG_S` before it returns, so
the test acts late on what it saw, as if the engine ran N times faster than the test process. A
test that observes progress and then acts as if the state had not moved on fails under it; a test
that freezes the engine first (`Server.pause`) passes. Only `tests/` reads the variable.
"""

import os
import time
from collections.abc import Callable
from typing import Literal, TypeVar

SLOWDOWN = float(os.environ.get("VLLM_SAGEMAKER_TEST_SLOWDOWN", "1"))
# What one unit of slow-down adds between seeing a state and acting on it.
LAG_S = 0.2

T = TypeVar("T")


def nap(seconds: float) -> None:
    """The pause between two polls (`SLOWDOWN` times longer under the switch)."""
    time.sleep(seconds * SLOWDOWN)


def lag() -> None:
    """The time the test side takes to act on what it has just seen: none, unless slowed."""
    if SLOWDOWN > 1:
        time.sleep((SLOWDOWN - 1) * LAG_S)


def until(
    check: Callable[[], T | Literal[False] | None],
    timeout: float,
    what: str | Callable[[], str],
    every: float = 0.1,
) -> T:
    """What `check()` returns once it is neither None nor False; an AssertionError saying
    `what` (a text, or a function that describes the state) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (value := check()) is None or value is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what if isinstance(what, str) else what()} after {timeout:g} s")
        nap(every)
    lag()
    return value


# A wait no test sits out: a command given it that waited instead of failing at once would
# never end, and the suite's timeout would fail the test (never a pass by the machine's speed).
A_DAY_S = 86_400
