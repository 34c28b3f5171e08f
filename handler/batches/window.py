"""The one admission controller of batch work in this process, fed by live traffic.

`BatchWindow` counts the real-time requests the middleware wraps (`live()`), times each to its
first response byte, and hands out slots to batch lines; its size follows the rules of
`handler.batches.admission`. Lines already running are never aborted when the window shrinks:
they run at a lower engine priority, so the engine serves real-time requests first.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator

from handler.batches import admission
from handler.logs import logger

# How often a waiting batch line looks at the window again when nothing else wakes it.
RECHECK_S = 0.25


class BatchWindow:
    """Slots for batch lines, sized by live traffic (or always full when `yields` is False)."""

    def __init__(self, settings: admission.Settings, yields: bool) -> None:
        self.settings = settings
        self.yields = yields
        self.state = admission.initial(settings)
        self.live_in_flight = 0
        self.last_live = -float("inf")
        self.running = 0
        self.preempted = 0
        self._changed = asyncio.Event()

    @contextlib.contextmanager
    def live(self) -> Iterator[Callable[[], None]]:
        """Around one real-time request; call what it yields when its answer starts."""
        started = time.monotonic()
        answered = False
        batch_running = self.running > 0
        self.live_in_flight += 1
        self._update(admission.live_arrived(self.state, self.settings, started))

        def answer_started() -> None:
            nonlocal answered
            if not answered:
                answered = True
                now = time.monotonic()
                latency = now - started
                self._update(
                    admission.observe(self.state, self.settings, latency, batch_running, now)
                )

        try:
            yield answer_started
        finally:
            self.live_in_flight -= 1
            self.last_live = time.monotonic()
            self._changed.set()

    def _update(self, state: admission.State) -> None:
        if state.window != self.state.window:
            logger.info(
                "batch window %d -> %d (%s; live %.0f ms, target %s)",
                self.state.window,
                state.window,
                state.reason,
                (state.recent_s or 0) * 1000,
                f"{state.target_s(self.settings) * 1000:.0f} ms"
                if state.target_s(self.settings) is not None
                else "learning",
            )
            self._changed.set()
        self.state = state

    def limit(self) -> int:
        if not self.yields:
            return self.settings.full
        now = time.monotonic()
        self._update(
            admission.tick(self.state, self.settings, self.live_in_flight, self.last_live, now)
        )
        return self.state.window

    async def acquire(self) -> None:
        """Wait for a slot: one is released, the window changes, or time lets it grow."""
        while self.running >= self.limit():
            await self.changed(RECHECK_S)
        self.running += 1

    async def changed(self, timeout: float) -> None:
        """Until the window changes or a slot is released, at most `timeout` seconds."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    def release(self) -> None:
        self.running -= 1
        self._changed.set()
