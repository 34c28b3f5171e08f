"""How many batch lines may be in flight: all of the window when the server is idle, a fraction
of it while real-time requests are in flight, and all of it again once they have stopped.

`LiveTraffic` counts the real-time requests of this process (the middleware wraps each one);
`Window` hands out slots to batch lines. Lines already running are never aborted when the window
shrinks: they run at a lower engine priority, so the engine serves real-time requests first.
"""

import asyncio
import contextlib
import time
from collections.abc import Iterator

# The window under live load is this fraction of the full window (at least one line).
UNDER_LOAD_DIVISOR = 16
# The window grows back this long after the last real-time request finished.
IDLE_AFTER_S = 0.5


class LiveTraffic:
    """Real-time requests in flight in this process."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_seen = -float("inf")
        self.changed = asyncio.Event()

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        self.in_flight += 1
        self.changed.set()
        try:
            yield
        finally:
            self.in_flight -= 1
            self.last_seen = time.monotonic()
            self.changed.set()

    def busy(self) -> bool:
        return self.in_flight > 0 or time.monotonic() - self.last_seen < IDLE_AFTER_S


class Window:
    """Slots for batch lines: `full` when idle; `full // UNDER_LOAD_DIVISOR` while `live` is
    busy, unless the window does not yield (`yields` False)."""

    def __init__(self, full: int, live: LiveTraffic, yields: bool) -> None:
        self.full = full
        self.live = live
        self.yields = yields
        self.running = 0
        self._released = asyncio.Event()

    def limit(self) -> int:
        if self.yields and self.live.busy():
            return max(1, self.full // UNDER_LOAD_DIVISOR)
        return self.full

    async def acquire(self) -> None:
        """Wait for a slot: one is released, live traffic changes, or the window grows back."""
        while self.running >= self.limit():
            self._released.clear()
            self.live.changed.clear()
            waits = [
                asyncio.ensure_future(self._released.wait()),
                asyncio.ensure_future(self.live.changed.wait()),
            ]
            try:
                await asyncio.wait(waits, timeout=IDLE_AFTER_S, return_when="FIRST_COMPLETED")
            finally:
                for wait in waits:
                    wait.cancel()
        self.running += 1

    def release(self) -> None:
        self.running -= 1
        self._released.set()
