"""The one admission controller of batch work in this process, fed by live traffic.

`BatchWindow` counts the real-time requests the middleware wraps (`live()`), times each to its
first response byte, and hands out slots to batch work: the lines of `/v1/batches` batches and the
records of batch-marked invocations (`priority=batch`). Its size follows the rules of
`handler.batches.admission.rules`. It takes slots like an `asyncio.Semaphore` (`locked`, `acquire`,
`release`), so the record pipeline uses it where it would use its own slots. Its state is on
`/metrics` (`handler.batches.admission.metrics`), and one log line says when it changes course.
"""

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator

from vllm_sagemaker.handler.batches.admission import metrics, rules
from vllm_sagemaker.handler.metrics import gauges
from vllm_sagemaker.handler.process.logs import logger

# How often a waiting batch line looks at the window again when nothing else wakes it.
RECHECK_S = 0.25
# While batch work runs, the event loop's lag is sampled this often, as a moving average with
# this weight for the newest sample (one late wake-up, a garbage collection, moves it a quarter).
LAG_EVERY_S = 0.05
LAG_WEIGHT = 0.25


class BatchWindow:
    """Slots for batch work, sized by live traffic (or always full when `yields` is False)."""

    def __init__(self, settings: rules.Settings, yields: bool) -> None:
        self.settings = settings
        self.yields = yields
        self.state = rules.initial(settings)
        self.live_in_flight = 0
        self.last_live = -float("inf")
        self.running = 0
        self.lag_s = 0.0
        self._changed = asyncio.Event()
        self._lag_watch: asyncio.Task[None] | None = None
        gauges.follow(metrics.WINDOW, lambda: rules.limit(self._current(), self.settings))
        gauges.follow(metrics.LOOP_LAG, lambda: self.lag_s)
        gauges.follow(metrics.RUNNING, lambda: self.running)
        gauges.follow(metrics.LIVE_LATENCY, lambda: self.state.recent_s or 0.0)
        gauges.follow(metrics.LIVE_TAIL, lambda: self.state.tail_s or 0.0)
        gauges.follow(metrics.LIVE_TARGET, lambda: self.state.target_s(self.settings) or 0.0)

    @contextlib.contextmanager
    def live(self) -> Iterator[Callable[[], None]]:
        """Around one real-time request; call what it yields when its answer starts."""
        started = time.monotonic()
        answered = False
        running = self.running
        self.live_in_flight += 1
        if self.yields:
            self._update(rules.live_arrived(self.state, self.settings, started))

        def answer_started() -> None:
            nonlocal answered
            if not answered and self.yields:
                answered = True
                now = time.monotonic()
                latency = now - started
                self._update(rules.observe(self.state, self.settings, latency, running, now))

        try:
            yield answer_started
        finally:
            self.live_in_flight -= 1
            self.last_live = time.monotonic()
            self._notify()

    def _update(self, state: rules.State) -> None:
        """Take the new state; log when the window changes course while batch work runs (a
        server without batch work logs nothing)."""
        if state.reason != self.state.reason and self.running:
            target = state.target_s(self.settings)
            logger.info(
                "batch window %s: %d -> %d (live p95 %.0f ms, target %s)",
                state.reason,
                self.state.window,
                state.window,
                (state.tail_s or 0) * 1000,
                "learning" if target is None else f"{target * 1000:.0f} ms",
            )
        if state.cap is not None and state.cap < (self.state.cap or self.settings.full):
            logger.info(
                "batch cap: %d -> %d (the API server's event loop %.0f ms late)",
                self.state.cap or self.settings.full,
                state.cap,
                self.lag_s * 1000,
            )
        if state.cap_held and not self.state.cap_held:
            # it halves no further while the loop lags: at its floor, or its last halving did
            # not bring the lag down
            cap = state.cap or self.settings.full
            logger.info(
                "batch cap: holds at %d (the API server's event loop %.0f ms late, %s)",
                cap,
                self.lag_s * 1000,
                "its floor"
                if cap <= self.settings.under_live
                else "%.0f ms when it last halved: not the batch's doing"
                % ((state.cap_lag_s or 0) * 1000),
            )
        if rules.limit(state, self.settings) != rules.limit(self.state, self.settings):
            self._notify()
        self.state = state

    def _current(self) -> rules.State:
        """The state as time has left it (a quiet spell may have passed since the last look)."""
        if not self.yields:
            return self.state
        now = time.monotonic()
        return rules.tick(self.state, self.settings, self.live_in_flight, self.last_live, now)

    def limit(self) -> int:
        """Batch lines allowed in flight now: the window within the API server's cap."""
        self._update(self._current())
        return rules.limit(self.state, self.settings)

    def live_limit(self) -> int:
        """The window live traffic leaves: running lines beyond it are preempted (lines beyond
        the API server's cap only finish)."""
        self._update(self._current())
        return self.state.window

    def locked(self) -> bool:
        """No slot is free now."""
        return self.running >= self.limit()

    async def acquire(self) -> None:
        """Wait for a slot: one is released, the window changes, or time lets it grow."""
        while self.locked():
            await self.changed(RECHECK_S)
        self.running += 1
        if self.yields and (self._lag_watch is None or self._lag_watch.done()):
            self._lag_watch = asyncio.create_task(self._watch_lag())

    async def _watch_lag(self) -> None:
        """While batch work runs: how late the event loop wakes from a LAG_EVERY_S sleep (a
        moving average), which sets the API server's cap (`rules.loop_lag`); the cap goes
        once no batch work is left."""
        while self.running:
            asked = time.monotonic()
            await asyncio.sleep(LAG_EVERY_S)
            now = time.monotonic()
            self.note_lag(now - asked - LAG_EVERY_S, now)
        # No batch work left: the next batch starts from the whole window (its own load is
        # what the cap will follow).
        self.lag_s = 0.0
        self._update(dataclasses.replace(self.state, cap=None, cap_lag_s=None, cap_held=False))

    def note_lag(self, late_s: float, now: float) -> None:
        """One wake-up of the event loop `late_s` seconds late: into the moving average, and
        the cap it sets."""
        self.lag_s += LAG_WEIGHT * (max(0.0, late_s) - self.lag_s)
        self._update(rules.loop_lag(self.state, self.settings, self.lag_s, self.running, now))

    def release(self) -> None:
        self.running -= 1
        self._notify()

    async def room(self, hold_s: float) -> bool:
        """Whether a slot frees within `hold_s` seconds (batch-marked invocations wait this
        long before they are throttled)."""
        deadline = time.monotonic() + hold_s
        while self.locked():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self.changed(min(left, RECHECK_S))
        return True

    def _notify(self) -> None:
        """Wake everything waiting in `changed` (each waits on the event current when it began,
        so no waiter can clear another's wake-up)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self, timeout: float) -> None:
        """Until the window changes or a slot is released, at most `timeout` seconds.

        `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` can swallow a cancellation
        that arrives as the wait ends, and the preempter, which loops on this, then never
        stopped (a server hung in its shutdown)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()
