"""The live traffic of the latency benchmarks: Poisson arrivals of streamed 8-token chats, and
each request's first-byte and total time, on threads at a higher CPU priority than the servers."""

import contextlib
import http.client
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

LIVE_TOKENS = 8
CLIENT_NICE = -10


def live_body(stream_path: str) -> bytes:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": LIVE_TOKENS,
        "min_tokens": LIVE_TOKENS,
        "stream": True,
    }
    if stream_path == "/v1/chat/completions":
        body["model"] = "chat"
    return json.dumps(body).encode()


@dataclass(frozen=True)
class Stamps:
    """One streamed request on the machine-wide monotonic clock."""

    status: int
    sent: float
    first_byte: float
    done: float


def streamed(url: str, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> Stamps:
    """POST `body` and read the answer: when it was sent, when its first body byte came (the
    first token of a stream), when it ended. Plain `http.client` on the caller's thread: a new
    `httpx` client per request (an SSL context each) stalled the client itself for seconds."""
    address = httpx.URL(url)
    connection = http.client.HTTPConnection(address.host, address.port, timeout=600)
    sent = time.monotonic()
    try:
        connection.request(
            "POST", path, body, {"Content-Type": "application/json", **(headers or {})}
        )
        reply = connection.getresponse()
        reply.read(1)
        first_byte = time.monotonic()
        reply.read()
    finally:
        connection.close()
    return Stamps(reply.status, sent, first_byte, time.monotonic())


@dataclass
class LiveTraffic:
    """Poisson arrivals at `rate`/s until stopped; each request's first-byte and total time."""

    url: str
    path: str
    rate: float
    seed: int = 7
    # Each answered (200) request, in the order the answers ended.
    answered: list[Stamps] = field(default_factory=list)
    # Statuses of the answers that were not 200, and how many of each.
    failures: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._driver = threading.Thread(target=self._drive)
        self._random = random.Random(self.seed)
        self._body = live_body(self.path)

    def _one(self) -> None:
        stamps = streamed(self.url, self.path, self._body)
        if stamps.status == 200:
            self.answered.append(stamps)
        else:
            self.failures[stamps.status] += 1

    @property
    def first(self) -> list[float]:
        """Each answered request's time to its first body byte."""
        return [s.first_byte - s.sent for s in self.answered]

    @property
    def total(self) -> list[float]:
        return [s.done - s.sent for s in self.answered]

    def opening_s(self) -> float | None:
        """The first byte of the first request sent (None: none answered)."""
        opening = min(self.answered, key=lambda s: s.sent, default=None)
        return None if opening is None else opening.first_byte - opening.sent

    def _drive(self) -> None:
        # Linux keeps a nice value per thread, and threads inherit their creator's: this one and
        # the requests it starts run above the servers, the rest of the client does not.
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), CLIENT_NICE)
        while not self._stop.wait(self._random.expovariate(self.rate)):
            thread = threading.Thread(target=self._one)
            thread.start()
            self._threads.append(thread)

    def __enter__(self) -> "LiveTraffic":
        self._driver.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._driver.join()
        for thread in self._threads:
            thread.join()
