"""POST to a container with SageMaker-like retries: timeouts, connection errors, 408, 429 and
5xx are retried with backoff; another status is a failure at once."""

import asyncio

import httpx

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class InvocationFailed(Exception):
    """No 200 after the retries; the message says what the last attempt got."""


async def post(
    client: httpx.AsyncClient,
    path: str,
    body: bytes,
    headers: dict[str, str],
    retries: int,
    timeout_s: float,
) -> bytes:
    """The 200 answer's body."""
    failure = ""
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(min(2 ** (attempt - 1), 8))
        try:
            response = await client.post(path, content=body, headers=headers, timeout=timeout_s)
        except httpx.TimeoutException:
            failure = f"no answer within {timeout_s:g} s"
            continue
        except httpx.TransportError as error:
            failure = f"{type(error).__name__}: {error}"
            continue
        if response.status_code == 200:
            return response.content
        failure = f"HTTP {response.status_code}: {response.text[:500]}"
        if response.status_code not in RETRY_STATUSES:
            raise InvocationFailed(failure)
    raise InvocationFailed(f"{failure} (after {retries} retries)")


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
