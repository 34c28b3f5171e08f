"""How many mini-batches `vllm-sagemaker batch` keeps in flight: additive increase,
multiplicative decrease on the container's 429s (it has no batch room beside live traffic): a 429
halves the limit, once per `calm_s` (one busy spell counts once); each answer adds 1/limit, about
one call per round, up to `most`. A throttled call waits Retry-After and goes again, never
failing."""

import asyncio
import time


def cut(limit: float) -> float:
    return max(1.0, limit / 2)


def grow(limit: float, most: int) -> float:
    return min(float(most), limit + 1 / limit)


class Pace:
    """Slots for calls in flight (`async with pace:`), sized by the answers they get."""

    def __init__(self, most: int, calm_s: float = 1.0) -> None:
        self.most = most
        self.calm_s = calm_s
        self.limit = float(most)
        self.in_flight = 0
        self.throttles = 0
        self._last_cut = -float("inf")
        self._changed = asyncio.Event()

    def allowed(self) -> int:
        return int(self.limit)

    def throttled(self) -> None:
        self.throttles += 1
        now = time.monotonic()
        if now - self._last_cut >= self.calm_s:
            self._last_cut = now
            self.limit = cut(self.limit)

    def answered(self) -> None:
        self.limit = grow(self.limit, self.most)
        self._wake()

    def _wake(self) -> None:
        # Each waiting call waits on the event current when it began.
        self._changed.set()
        self._changed = asyncio.Event()

    async def __aenter__(self) -> None:
        while self.in_flight >= self.allowed():
            await self._changed.wait()
        self.in_flight += 1

    async def __aexit__(self, *_: object) -> None:
        self.in_flight -= 1
        self._wake()
