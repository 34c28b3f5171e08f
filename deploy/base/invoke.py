"""POST to a container with SageMaker-like retries: timeouts, connection errors, 408, 429 and
5xx are retried with backoff; another status is the model's refusal (`Refused`) at once.

With a `Pace` (batch work), a 429 is the container throttling batch work for live traffic
(`Throttled`): it is retried after its Retry-After without counting as a retry, and it halves
the calls in flight.

A container started with an API key (`SM_VLLM_API_KEY`) answers 401 to a call without it or
with another one; no retry or other line can change that, so `KeyRefused` stops the run with one
line naming `--api-key` and `VLLM_API_KEY`. Every client that calls a container is made by
`client`, which sends the key (the one place the header is written).

Before the first call a client waits for the container as SageMaker does, calling `/ping` until it
answers 200 (`wait_ready`). `readiness` tells what each ping says: a container that is starting
(503, a ping that connects but gets no answer yet, a connection closed unanswered) is waited for,
with one line saying so; nobody there (a refused connection, a host that does not resolve, a bad
URL, a server that is not a container) stops the command at once, with one line."""

import argparse
import asyncio
import enum
import os
import random
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable

import httpx
from tqdm import tqdm

from vllm_sagemaker.deploy.base import error_answers
from vllm_sagemaker.deploy.base.pace import Pace
from vllm_sagemaker.handler.core.config import VLLM_API_KEY_VAR
from vllm_sagemaker.handler.core.errors import status_phrase

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_BACKOFF_S = 8.0
# The wait after a 429 without a usable Retry-After.
THROTTLE_WAIT_S = 1.0
# How long a container that answers but is not ready yet is waited for (`--wait-ready`).
READY_WAIT_S = 600.0
# SageMaker's: a container answers /ping within 2 s.
PING_TIMEOUT_S = 2.0
PING_EVERY_S = 0.5


class InvocationFailed(Exception):
    """No answer after the retries, or a call that cannot succeed; the message says why."""


class Refused(InvocationFailed):
    """The model refused the request with a status that another try would not change."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class KeyRefused(Exception):
    """The container answered 401: it wants an API key, or another one; the message says so."""


def key_refused(where: str, sent: bool) -> KeyRefused:
    """The one line a 401 gives, for a call made with (`sent`) or without a key."""
    if sent:
        return KeyRefused(
            f"{where} refused the API key (HTTP 401): pass the container's key with --api-key "
            f"or {VLLM_API_KEY_VAR}"
        )
    return KeyRefused(
        f"{where} wants an API key (HTTP 401): pass it with --api-key or set {VLLM_API_KEY_VAR}"
    )


def add_api_key_argument(parser: argparse.ArgumentParser, note: str = "") -> None:
    """`--api-key`, the same on every command that calls a container. The variable is read when
    the command runs (`api_key`), never shown as a default: it is a secret."""
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help="the container's API key, sent as 'Authorization: Bearer KEY' "
        f"(default: ${VLLM_API_KEY_VAR}){note}",
    )


def api_key(given: str | None) -> str | None:
    """The key to send: `--api-key`, else VLLM_API_KEY (the variable a local `serve`, vLLM's
    own and our handler, reads its key from), else none (an empty value is none). Not
    OPENAI_API_KEY: that often holds a real OpenAI secret, which would go to every URL a client
    is pointed at."""
    return given or os.environ.get(VLLM_API_KEY_VAR) or None


def client(url: str, key: str | None) -> httpx.AsyncClient:
    """An HTTP client for the container at `url`, sending `Authorization: Bearer <key>` on every
    call when there is a key (`/ping` and `/execution-parameters` need none, and ignore it);
    `NotReady` for a URL no container can have."""
    problem = url_problem(url)
    if problem:
        raise NotReady(f"{url} is not a container's URL: {problem}")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers)


def url_problem(url: str) -> str | None:
    """What makes `url` unfit for a container (None: nothing): it must be http(s)://HOST[:PORT]."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        return f"it is not a URL ({error})"
    if "://" not in url:
        return f"it has no scheme: write http://{url}"
    if parsed.scheme not in ("http", "https"):
        return f"{parsed.scheme}:// is not http:// or https://"
    if not parsed.host:
        return "it has no host"
    return None


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
    """The 200 answer's body; `KeyRefused` on a 401."""

    async def attempt() -> bytes:
        try:
            response = await client.post(path, content=body, headers=headers, timeout=timeout_s)
        except httpx.TimeoutException:
            raise Retryable(f"no answer within {timeout_s:g} s") from None
        except httpx.TransportError as error:
            raise Retryable(f"{type(error).__name__}: {error}") from None
        if response.status_code == 200:
            return response.content
        if response.status_code == 401:
            where = str(client.base_url).rstrip("/")
            raise key_refused(where, "authorization" in client.headers)
        if response.status_code == 429:
            wait = retry_after_s(response.headers.get("retry-after"))
            raise Throttled(error_answers.said(response.content, 429), wait)
        if response.status_code in RETRY_STATUSES:
            raise Retryable(error_answers.said(response.content, response.status_code))
        status = response.status_code
        raise Refused(status, error_answers.message(response.content) or status_phrase(status))

    return await with_retries(attempt, retries, pace)


class NotReady(Exception):
    """The container cannot take calls: nobody there, a bad URL, or not ready in time."""


class Readiness(enum.Enum):
    READY = enum.auto()
    STARTING = enum.auto()
    NOBODY = enum.auto()


def readiness(outcome: int | Exception) -> tuple[Readiness, str]:
    """What one /ping says of a container, from its status or the transport error, and why.

    Ready: 200. Starting, worth waiting for: a status another try may change (`RETRY_STATUSES`:
    503 while the engine loads, 502 or 504 from a proxy in front), a ping that connected but got
    no answer in time (vLLM binds its port before its server accepts), a connection closed
    without an answer (Docker's port proxy, before the container listens). Nobody there, not
    worth waiting for: a refused connection, a host that does not resolve or does not answer a
    connection, TLS that fails, another status (404: not a container)."""
    if isinstance(outcome, int):
        if outcome == 200:
            return Readiness.READY, "HTTP 200 on /ping"
        waits = outcome in RETRY_STATUSES
        return (Readiness.STARTING if waits else Readiness.NOBODY), f"HTTP {outcome} on /ping"
    if isinstance(outcome, httpx.ConnectTimeout):
        return Readiness.NOBODY, "no connection in time: is the host up and the port open?"
    if isinstance(outcome, httpx.TimeoutException):
        return Readiness.STARTING, "no answer to /ping in time"
    if isinstance(outcome, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)):
        return Readiness.STARTING, "the connection closed without an answer"
    return Readiness.NOBODY, _failed_connection(outcome)


def _failed_connection(error: BaseException) -> str:
    """Why a connection failed, from the first cause that says it plainly."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return f"host not found: {cause.strerror}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed ({cause.strerror}): is it http:// rather than https://?"
        cause = cause.__cause__ or cause.__context__
    return str(error) or type(error).__name__


def add_wait_ready_argument(parser: argparse.ArgumentParser, note: str = "") -> None:
    """`--wait-ready`, the same on every command that waits for a container."""
    parser.add_argument(
        "--wait-ready",
        type=float,
        default=READY_WAIT_S,
        metavar="SECONDS",
        help="how long to wait for a container that answers but is not ready yet (/ping 503, "
        f"no answer yet) (default {READY_WAIT_S:g}; 0: do not wait); a refused connection or a "
        f"bad URL fails at once{note}",
    )


async def wait_ready(
    client: httpx.AsyncClient, seconds: float, command: str, bar: bool = True
) -> None:
    """Call /ping (as SageMaker does) until it answers 200. A container that is starting is
    waited for up to `seconds`, with one line on stderr saying so (`command: waiting ...`) and,
    on a terminal when `bar`, a progress bar; `NotReady` at once when nobody is there, or once
    `seconds` have passed."""
    url = str(client.base_url).rstrip("/")
    loop = asyncio.get_running_loop()
    begun = loop.time()
    progress: tqdm | None = None
    try:
        while True:
            outcome: int | Exception
            try:
                outcome = (await client.get("/ping", timeout=PING_TIMEOUT_S)).status_code
            except httpx.HTTPError as error:
                outcome = error
            state, why = readiness(outcome)
            if state is Readiness.READY:
                return
            if state is Readiness.NOBODY:
                raise NotReady(
                    f"no container at {url} ({why}): check the URL, and that the container runs"
                )
            waited = loop.time() - begun
            if waited >= seconds:
                raise NotReady(
                    f"{url} was not ready after {seconds:g} s ({why}): wait longer with "
                    "--wait-ready, or look at the container's log"
                )
            if progress is None:
                print(
                    f"{command}: waiting for {url} to be ready ({why}) up to {seconds:g} s",
                    file=sys.stderr,
                    flush=True,
                )
                # disable=None: on a terminal only; gone once the wait ends.
                progress = tqdm(
                    total=round(seconds),
                    desc="waiting",
                    bar_format="{desc}: {bar} {n}/{total} s",
                    leave=False,
                    disable=None if bar else True,
                )
            progress.update(round(waited) - progress.n)
            await asyncio.sleep(PING_EVERY_S)
    finally:
        if progress is not None:
            progress.close()
