"""How many batch lines may run beside live traffic: the admission rules, as pure functions.

The batch window is driven by what live requests measure, not by a fixed fraction:

- live latency is compared with a baseline learned while no batch work ran (an exponentially
  weighted mean of the same measure), or with `slo_s` when a target is set. The recent latency
  is a mean over time, not over requests (`RECENT_S`): at half a request per second, one slow
  request weighed on the next five and kept the window shut for ten seconds;
- a live request arriving caps the window at `under_live` (a sixteenth) before it can suffer;
- the window halves at once when live requests run slower than `slo_ratio` times the baseline
  (at most once per `shrink_every_s`, so one slow spell does not empty it);
- it grows back by `grow_by` lines every `grow_every_s` while live requests meet the target, or
  once no live request has been seen for `stale_s` (no request is suffering), up to
  `under_live` (with no target known yet and live traffic fresh, it holds);
- after `quiet_s` without any live request the batch gets the whole window;
- running lines still beyond the window PREEMPT_AFTER_S after it shrank are preempted
  (`to_preempt`), a few at a time: short lines finish on their own, long ones give way.

Beside the window, a cap that follows the API server itself (`loop_lag`): batch lines and live
requests share its one event loop, first in, first out, so batch output the loop cannot keep up
with queues ahead of every live request before it even reaches the engine (113-218 ms in
benchmarks/timeline.py with the whole window on 2 cores). While the loop wakes later than
`lag_target_s` the cap halves (at most every `shrink_every_s`); while it keeps up, the cap grows
by an eighth every `grow_every_s`, up to the whole window. It holds with or without live
traffic, so the backlog is not there when a live request arrives; lines above the cap finish on
their own (only the window preempts). `limit` is the smaller of the two.

`State.reason` says why the window last changed, for the log line and the metrics.
"""

import math
from dataclasses import dataclass, replace

# Weight of a new latency sample in the baseline (learned while no batch runs).
SMOOTHING = 0.2
# Time constant of the recent live latency: a sample weighs 1 - exp(-gap / RECENT_S), where gap
# is the time since the previous one (0.12 at 8 requests/s, 0.86 at 0.5 requests/s).
RECENT_S = 1.0
# At most this many running lines are preempted per look (every 0.1 s), and only once the window
# has been exceeded this long: preempting every line beyond a shrunken window at once (32-token
# lines that would have finished within a second) cost the batch 2/3 of its throughput and
# gave live requests a p99 of 48x idle instead of 3-6x.
PREEMPT_AT_ONCE = 8
PREEMPT_AFTER_S = 2.0


@dataclass(frozen=True)
class Settings:
    full: int
    slo_ratio: float = 2.0
    slo_s: float | None = None
    quiet_s: float = 10.0
    grow_every_s: float = 0.5
    shrink_every_s: float = 0.5
    stale_s: float = 1.0
    floor: int = 1
    lag_target_s: float = 0.01

    @property
    def under_live(self) -> int:
        """The window while live requests arrive, before their latency says more."""
        return max(self.floor, self.full // 16)

    @property
    def grow_by(self) -> int:
        return max(1, self.under_live // 8)


@dataclass(frozen=True)
class State:
    window: int
    baseline_s: float | None = None
    recent_s: float | None = None
    sampled_at: float = float("-inf")
    changed_at: float = float("-inf")
    reason: str = "quiet"
    # The API server's cap (`loop_lag`); None: none yet, the whole window.
    cap: int | None = None
    cap_changed_at: float = float("-inf")

    def target_s(self, settings: Settings) -> float | None:
        """The live latency the controller holds the batch to, once it knows one."""
        if settings.slo_s is not None:
            return settings.slo_s
        return None if self.baseline_s is None else settings.slo_ratio * self.baseline_s


def initial(settings: Settings) -> State:
    return State(window=settings.full)


def _mean(previous: float | None, sample: float, weight: float = SMOOTHING) -> float:
    return sample if previous is None else (1 - weight) * previous + weight * sample


def _recent(state: State, sample: float, now: float) -> float:
    """The recent live latency with `sample` taken in, weighted by the time since the last."""
    return _mean(state.recent_s, sample, 1 - math.exp(-(now - state.sampled_at) / RECENT_S))


def live_arrived(state: State, settings: Settings, now: float) -> State:
    """A live request started: the batch steps back to `under_live` before it hurts."""
    if state.window <= settings.under_live:
        return state
    return replace(state, window=settings.under_live, changed_at=now, reason="live arrived")


def observe(
    state: State, settings: Settings, latency_s: float, batch_running: bool, now: float
) -> State:
    """A live request's latency: learn the baseline while no batch ran, shrink when slow."""
    baseline = state.baseline_s if batch_running else _mean(state.baseline_s, latency_s)
    recent = _recent(state, latency_s, now)
    state = replace(state, baseline_s=baseline, recent_s=recent, sampled_at=now)
    target = state.target_s(settings)
    slow = target is not None and state.recent_s is not None and state.recent_s > target
    if not slow or state.window <= settings.floor:
        return state
    if state.reason == "shrink" and now - state.changed_at < settings.shrink_every_s:
        return state
    window = max(settings.floor, state.window // 2)
    return replace(state, window=window, changed_at=now, reason="shrink")


def tick(
    state: State, settings: Settings, live_in_flight: int, last_live_s: float, now: float
) -> State:
    """Time passed: a quiet spell gives the whole window; meeting the target (or no live request
    for `stale_s`) grows it, up to `under_live` (a live arrival would cap anything above that
    again, and preempt what grew)."""
    idle_s = 0.0 if live_in_flight else now - last_live_s
    if idle_s >= settings.quiet_s:
        if state.reason == "quiet" and state.window == settings.full:
            return state
        return replace(state, window=settings.full, changed_at=now, reason="quiet")
    target = state.target_s(settings)
    meeting = idle_s >= settings.stale_s or (
        target is not None and state.recent_s is not None and state.recent_s <= target
    )
    if (
        not meeting
        or state.window >= settings.under_live
        or now - state.changed_at < settings.grow_every_s
    ):
        return state
    window = min(settings.under_live, state.window + settings.grow_by)
    return replace(state, window=window, changed_at=now, reason="grow")


def to_preempt(running: int, window: int, exceeded_for_s: float) -> int:
    """How many running lines to stop now (they are queued again): those beyond the window once
    it has been exceeded for PREEMPT_AFTER_S, at most PREEMPT_AT_ONCE."""
    if exceeded_for_s < PREEMPT_AFTER_S:
        return 0
    return max(0, min(running - window, PREEMPT_AT_ONCE))


def loop_lag(state: State, settings: Settings, lag_s: float, running: int, now: float) -> State:
    """The API server's event loop woke `lag_s` late with `running` batch lines in flight: the
    cap halves from what runs while the loop lags, and grows by an eighth while it keeps up."""
    cap = settings.full if state.cap is None else state.cap
    if lag_s > settings.lag_target_s:
        if now - state.cap_changed_at < settings.shrink_every_s:
            return state
        return replace(state, cap=max(settings.floor, min(cap, running) // 2), cap_changed_at=now)
    if cap >= settings.full or now - state.cap_changed_at < settings.grow_every_s:
        return state
    return replace(state, cap=min(settings.full, cap + max(1, cap // 8)), cap_changed_at=now)


def limit(state: State, settings: Settings) -> int:
    """Batch lines allowed in flight: the window, within the API server's cap."""
    return min(state.window, settings.full if state.cap is None else state.cap)
