"""The one client of a container's `/invocations` (`transform`, `batch`, `deploy batch --local`):
it waits for `/ping` as SageMaker does (`wait_ready`), reads `/execution-parameters`, and POSTs
with retries: timeouts, connection errors, 408, 429 and 5xx with backoff; another status is the
model's final answer (`NotRetryable`) at once; a 401 is `Unauthorized`. With a `Pace` (batch
work), a 429 is the container keeping its engine for live traffic: waited out, never counted as a
retry, and it halves the calls in flight. With a `FromZero` (batch work on an inference component),
AWS's no-capacity answer (`NoCapacity`) is a component scaling from zero: waited out too, said
once, up to a bound."""

import argparse
import asyncio
import enum
import os
import random
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NewType

import httpx

from vllm_sagemaker.core.config import VLLM_API_KEY_VAR
from vllm_sagemaker.core.errors import status_phrase
from vllm_sagemaker.deploy.base import error_answers
from vllm_sagemaker.deploy.base.errors import ClientError
from vllm_sagemaker.deploy.base.pace import Pace
from vllm_sagemaker.deploy.base.results import Progress

# An HTTP status a container or SageMaker answers: never an exit status (`errors.ExitStatus`).
HttpStatus = NewType("HttpStatus", int)
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_BACKOFF_S = 8.0
# The wait after a 429 without a usable Retry-After.
THROTTLE_WAIT_S = 1.0
# How long a container that answers but is not ready yet is waited for (`--wait-ready`).
READY_WAIT_S = 600.0
# SageMaker's: a container answers /ping within 2 s.
PING_TIMEOUT_S = 2.0
PING_EVERY_S = 0.5
# How long batch work waits for an inference component to scale from zero before the run stops:
# AWS says several minutes; this leaves room for an instance and a large model's load.
SCALE_FROM_ZERO_S = 30 * 60.0
# The wait (jittered) between tries while it scales from zero.
FROM_ZERO_WAIT_S = 15.0


class NotReady(ClientError):
    """Nobody there, a bad URL, or a container not ready in time."""


class Unauthorized(ClientError):
    """A 401: the container wants an API key, or another one."""


class InvocationFailed(ClientError):
    """No answer after the retries, or a call that cannot succeed."""


class NotRetryable(InvocationFailed):
    """An HTTP status another try would not change; it fails the run with exit status 1."""

    def __init__(self, http_status: HttpStatus, message: str) -> None:
        super().__init__(f"HTTP {http_status}: {message}")
        self.http_status = http_status


class Retryable(Exception):
    """An attempt worth another try; the message says why it failed."""


class Throttled(Retryable):
    """A 429: try again after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float = THROTTLE_WAIT_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NoCapacity(Retryable):
    """AWS's no-capacity answer: the inference component has no copy, it scales from zero."""


class FromZero:
    """A run's wait for `what` (`error_answers.from_zero`) to scale from zero: said once on
    stderr; `InvocationFailed` once `most_s` have passed since the first call that met no
    capacity with no call answered since."""

    def __init__(self, what: str, most_s: float = SCALE_FROM_ZERO_S) -> None:
        self.what = what
        self.most_s = most_s
        self.said = False
        self.since: float | None = None

    def met(self) -> None:
        """A call met no capacity: say the wait the first time; stop past the bound."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
        minutes = f"{self.most_s / 60:g} min"
        if not self.said:
            self.said = True
            takes = error_answers.FROM_ZERO_TAKES
            print(
                f"batch: {self.what}: waiting up to {minutes} for a copy ({takes}); these tries "
                "do not count against --max-retries",
                file=sys.stderr,
                flush=True,
            )
        if now - self.since >= self.most_s:
            raise InvocationFailed(
                f"{self.what}, and no copy came within {minutes}: look at its scaling (`deploy "
                "component --scale-to-zero` makes the alarm that starts a copy)"
            )

    def answered(self) -> None:
        self.since = None


def add_api_key_argument(parser: argparse.ArgumentParser, note: str = "") -> None:
    """`--api-key`; its variable is read by `api_key`, never shown as a default (a secret)."""
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help="the container's API key, sent as 'Authorization: Bearer KEY' "
        f"(default: ${VLLM_API_KEY_VAR}){note}",
    )


def api_key(given: str | None) -> str | None:
    """`--api-key`, else VLLM_API_KEY (what a local `serve` reads its key from), else none. Not
    OPENAI_API_KEY: that often holds a real OpenAI secret, which would go to any URL."""
    return given or os.environ.get(VLLM_API_KEY_VAR) or None


def add_wait_ready_argument(parser: argparse.ArgumentParser, note: str = "") -> None:
    parser.add_argument(
        "--wait-ready",
        type=float,
        default=READY_WAIT_S,
        metavar="SECONDS",
        help="how long to wait for a container that answers but is not ready yet (/ping 503, "
        f"no answer yet) (default {READY_WAIT_S:g}; 0: do not wait); a refused connection or a "
        f"bad URL fails at once{note}",
    )


def client(url: str, key: str | None) -> httpx.AsyncClient:
    """A client for the container at `url` that sends `key` (the one place the header is
    written); `NotReady` for a URL no container can have."""
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


def retry_after_s(value: str | None) -> float:
    """Seconds from a Retry-After header (delta-seconds; anything else: THROTTLE_WAIT_S)."""
    try:
        return min(max(float(value or ""), 0.0), MAX_BACKOFF_S)
    except ValueError:
        return THROTTLE_WAIT_S


async def with_retries(
    attempt: Callable[[], Awaitable[bytes]],
    retries: int,
    pace: Pace | None = None,
    from_zero: FromZero | None = None,
) -> bytes:
    """`attempt()`'s answer after up to `retries` `Retryable`s (with `pace`: `Throttled`s free;
    with `from_zero`: `NoCapacity`s free, up to its bound)."""
    tries = 0
    while True:
        try:
            answer = await attempt()
        except Retryable as error:
            if pace is not None and isinstance(error, Throttled):
                pace.throttled()
                await asyncio.sleep(error.retry_after_s * random.uniform(1.0, 1.5))
                continue
            if from_zero is not None and isinstance(error, NoCapacity):
                from_zero.met()
                await asyncio.sleep(FROM_ZERO_WAIT_S * random.uniform(1.0, 1.5))
                continue
            tries += 1
            if tries > retries:
                raise InvocationFailed(f"{error} (after {retries} retries)") from None
            # Doubling up to MAX_BACKOFF_S, jittered.
            await asyncio.sleep(min(2 ** (tries - 1), MAX_BACKOFF_S) * random.uniform(0.5, 1.0))
            continue
        if pace is not None:
            pace.answered()
        if from_zero is not None:
            from_zero.answered()
        return answer


@dataclass
class Container:
    """A ready container: `/execution-parameters`, and `/invocations` with retries (paced)."""

    client: httpx.AsyncClient
    headers: Mapping[str, str]
    retries: int
    timeout_s: float
    pace: Pace | None = None

    async def execution_parameters(self) -> dict:
        """The container's answer, empty when it has none (SageMaker then uses defaults)."""
        try:
            response = await self.client.get("/execution-parameters", timeout=10)
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return {}
        return answer if isinstance(answer, dict) else {}

    async def invoke(self, body: bytes) -> bytes:
        """The 200 answer's body; `ModelRefused`, `KeyRefused`, or `InvocationFailed`."""
        return await with_retries(lambda: self._attempt(body), self.retries, self.pace)

    async def _attempt(self, body: bytes) -> bytes:
        try:
            response = await self.client.post(
                "/invocations", content=body, headers=self.headers, timeout=self.timeout_s
            )
        except httpx.TimeoutException:
            raise Retryable(f"no answer within {self.timeout_s:g} s") from None
        except httpx.TransportError as error:
            raise Retryable(f"{type(error).__name__}: {error}") from None
        status = response.status_code
        if status == 200:
            return response.content
        if status == 401:
            where = str(self.client.base_url).rstrip("/")
            if "authorization" in self.client.headers:
                said = "refused the API key (HTTP 401): pass the container's key with --api-key or"
            else:
                said = "wants an API key (HTTP 401): pass it with --api-key or set"
            raise Unauthorized(f"{where} {said} {VLLM_API_KEY_VAR}")
        if status == 429:
            wait = retry_after_s(response.headers.get("retry-after"))
            raise Throttled(error_answers.said(response.content, 429), wait)
        if status in RETRY_STATUSES:
            raise Retryable(error_answers.said(response.content, status))
        raise NotRetryable(
            HttpStatus(status), error_answers.message(response.content) or status_phrase(status)
        )


class Readiness(enum.Enum):
    READY = enum.auto()
    STARTING = enum.auto()
    NOBODY = enum.auto()


def readiness(outcome: int | Exception) -> tuple[Readiness, str]:
    """What one /ping's status or transport error says of a container, and why. Starting: 503
    while the engine loads (502, 504 from a proxy), no answer yet (vLLM binds its port before
    it accepts), a connection closed unanswered (Docker's port proxy). Nobody there: the rest."""
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
    # Why a connection failed, from the first cause that says it plainly.
    cause: BaseException | None = outcome
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return Readiness.NOBODY, "connection refused"
        if isinstance(cause, socket.gaierror):
            return Readiness.NOBODY, f"host not found: {cause.strerror}"
        if isinstance(cause, ssl.SSLError):
            why = f"TLS failed ({cause.strerror}): is it http:// rather than https://?"
            return Readiness.NOBODY, why
        cause = cause.__cause__ or cause.__context__
    return Readiness.NOBODY, str(outcome) or type(outcome).__name__


async def wait_ready(
    client: httpx.AsyncClient, seconds: float, command: str, bar: bool = True
) -> None:
    """Call /ping until it answers 200: a container starting is waited for up to `seconds`, said
    in one line and, on a terminal when `bar`, a bar; `NotReady` when nobody is there, or late."""
    url = str(client.base_url).rstrip("/")
    loop = asyncio.get_running_loop()
    begun = loop.time()
    progress: Progress | None = None
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
                progress = Progress("waiting", round(seconds), "s", quiet=not bar)
            progress.update(round(waited) - progress.bar.n)
            await asyncio.sleep(PING_EVERY_S)
    finally:
        if progress is not None:
            progress.close()
