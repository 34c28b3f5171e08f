"""POST to a container with SageMaker-like retries: timeouts, connection errors, 408, 429 and
5xx are retried with backoff; another status is the model's refusal (`Refused`) at once."""

import asyncio
import random
from collections.abc import Awaitable, Callable

import httpx

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_BACKOFF_S = 8.0


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


def backoff_s(attempt: int) -> float:
    """The wait before retry `attempt` (1-based): doubling up to MAX_BACKOFF_S, jittered so
    throttled callers do not come back together."""
    return min(2 ** (attempt - 1), MAX_BACKOFF_S) * random.uniform(0.5, 1.0)


async def with_retries(attempt: Callable[[], Awaitable[bytes]], retries: int) -> bytes:
    """`attempt()`'s answer, trying again after each `Retryable` up to `retries` times."""
    failure = ""
    for number in range(retries + 1):
        if number:
            await asyncio.sleep(backoff_s(number))
        try:
            return await attempt()
        except Retryable as error:
            failure = str(error)
    raise InvocationFailed(f"{failure} (after {retries} retries)")


async def post(
    client: httpx.AsyncClient,
    path: str,
    body: bytes,
    headers: dict[str, str],
    retries: int,
    timeout_s: float,
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
        if response.status_code in RETRY_STATUSES:
            raise Retryable(f"HTTP {response.status_code}: {response.text[:500]}")
        raise Refused(response.status_code, response.text)

    return await with_retries(attempt, retries)


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
