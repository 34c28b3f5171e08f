"""POST to a container with SageMaker-like retries: timeouts, connection errors, 408, 429 and
5xx are retried with backoff; another status is the model's refusal (`Refused`) at once.

With a `Pace` (batch work), a 429 is the container throttling batch work for live traffic
(`Throttled`): it is retried after its Retry-After without counting as a retry, and it halves
the calls in flight."""

import asyncio
import random
from collections.abc import Awaitable, Callable

import httpx

from vllm_sagemaker.deploy.batch.pace import Pace

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_BACKOFF_S = 8.0
# The wait after a 429 without a usable Retry-After.
THROTTLE_WAIT_S = 1.0


class InvocationFailed(Exception):
    """No answer after the retries, or a call that cannot succeed; the message says why."""


class Refused(InvocationFailed):
    """The model refused the request with a status that another try would not change."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message[:500]}")
        self.status = status
        self.message = message


class Retryable(Exception):
    """One attempt failed in a way worth another try; the message says how."""


class Throttled(Retryable):
    """The container answered 429: try again after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float = THROTTLE_WAIT_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def retry_after_s(value: str | None) -> float:
    """Seconds from a Retry-After header (delta-seconds; anything else: THROTTLE_WAIT_S)."""
    try:
        return min(max(float(value or ""), 0.0), MAX_BACKOFF_S)
    except ValueError:
        return THROTTLE_WAIT_S


def backoff_s(attempt: int) -> float:
    """The wait before retry `attempt` (1-based): doubling up to MAX_BACKOFF_S, jittered so
    throttled callers do not come back together."""
    return min(2 ** (attempt - 1), MAX_BACKOFF_S) * random.uniform(0.5, 1.0)


async def with_retries(
    attempt: Callable[[], Awaitable[bytes]], retries: int, pace: Pace | None = None
) -> bytes:
    """`attempt()`'s answer, trying again after each `Retryable` up to `retries` times; with a
    `pace`, after each `Throttled` as often as it comes, once its Retry-After has passed."""
    failure = ""
    number = 0
    while True:
        try:
            answer = await attempt()
        except Throttled as error:
            if pace is None:
                failure = str(error)
            else:
                pace.throttled()
                await asyncio.sleep(error.retry_after_s * random.uniform(1.0, 1.5))
                continue
        except Retryable as error:
            failure = str(error)
        else:
            if pace is not None:
                pace.answered()
            return answer
        number += 1
        if number > retries:
            raise InvocationFailed(f"{failure} (after {retries} retries)")
        await asyncio.sleep(backoff_s(number))


async def post(
    client: httpx.AsyncClient,
    path: str,
    body: bytes,
    headers: dict[str, str],
    retries: int,
    timeout_s: float,
    pace: Pace | None = None,
) -> bytes:
    """The 200 answer's body."""

    async def attempt() -> bytes:
        try:
            response = await client.post(path, content=body, headers=headers, timeout=timeout_s)
        except httpx.TimeoutException:
            raise Retryable(f"no answer within {timeout_s:g} s") from None
        except httpx.TransportError as error:
            raise Retryable(f"{type(error).__name__}: {error}") from None
        if response.status_code == 200:
            return response.content
        if response.status_code == 429:
            wait = retry_after_s(response.headers.get("retry-after"))
            raise Throttled(f"HTTP 429: {response.text[:500]}", wait)
        if response.status_code in RETRY_STATUSES:
            raise Retryable(f"HTTP {response.status_code}: {response.text[:500]}")
        raise Refused(response.status_code, response.text)

    return await with_retries(attempt, retries, pace)


class NotReady(Exception):
    """The container never answered /ping with 200."""


async def wait_ready(client: httpx.AsyncClient, seconds: float) -> None:
    """Call /ping (as SageMaker does) until it answers 200; NotReady after `seconds`."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            if (await client.get("/ping", timeout=2)).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise NotReady(f"{client.base_url}/ping did not answer 200 in {seconds:g} s")
        await asyncio.sleep(0.5)
