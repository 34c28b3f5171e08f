"""`vllm-sagemaker batch` under a container's 429s, with no engine: the calls in flight halve on
a throttle and grow back by one per round, a 429 is waited out and never counted as a retry."""

import asyncio
import re

import pytest

from vllm_sagemaker.deploy.base import invocations, pace
from vllm_sagemaker.deploy.base.pace import Pace


@pytest.mark.parametrize(
    ("limit", "after_cut", "after_answer"),
    [
        (64.0, 32.0, 64.0),  # capped at most (64)
        (10.0, 5.0, 10.1),
        (1.0, 1.0, 2.0),  # never below one call
        (1.5, 1.0, 1.5 + 1 / 1.5),
    ],
)
def test_aimd(limit: float, after_cut: float, after_answer: float) -> None:
    assert pace.cut(limit) == after_cut
    assert pace.grow(limit, most=64) == pytest.approx(after_answer)


def test_one_busy_spell_halves_once() -> None:
    calls = Pace(most=32, calm_s=60)
    for _ in range(5):
        calls.throttled()
    assert (calls.allowed(), calls.throttles) == (16, 5)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("2", 2.0), ("0", 0.0), ("600", invocations.MAX_BACKOFF_S), (None, 1.0), ("soon", 1.0)],
)
def test_retry_after(header: str | None, seconds: float) -> None:
    assert invocations.retry_after_s(header) == seconds


def test_a_throttled_call_is_waited_out_without_using_a_retry() -> None:
    """Five 429s then an answer, with no retries allowed: answered; the limit was cut to one
    call, and the answer grew it by one."""
    answers = [invocations.Throttled("429", 0.0)] * 5 + [b"ok"]
    calls = Pace(most=8, calm_s=0)

    async def attempt() -> bytes:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert asyncio.run(invocations.with_retries(attempt, retries=0, pace=calls)) == b"ok"
    assert calls.throttles == 5
    assert calls.allowed() == 2


def test_without_a_pace_a_429_is_an_ordinary_retry() -> None:
    async def attempt() -> bytes:
        raise invocations.Throttled("HTTP 429: busy", 0.0)

    with pytest.raises(
        invocations.InvocationFailed, match=re.escape("429: busy (after 0 retries)")
    ):
        asyncio.run(invocations.with_retries(attempt, retries=0))


def test_calls_wait_for_the_limit() -> None:
    """With the limit cut to one, a second call starts only when the first is done."""
    calls = Pace(most=2)
    calls.throttled()
    order: list[str] = []

    async def call(name: str) -> None:
        async with calls:
            order.append(f"{name} starts")
            await asyncio.sleep(0)
            order.append(f"{name} ends")

    async def both() -> None:
        await asyncio.gather(call("a"), call("b"))

    asyncio.run(both())
    assert order == ["a starts", "a ends", "b starts", "b ends"]
