"""How many batch lines may run beside live traffic: the admission rules, as pure functions.

The window is driven by what live requests measure against a target, up to the whole window:

- The target is `slo_s` when set, else `slo_ratio` times the tail of live latency while no batch
  ran (`baseline_s`: the 95th percentile of the last IDLE_SAMPLES such requests). Both sides of
  the default are tails: batch work may at most double a live request's p95.
- A server whose batch started before any live request and never pauses has no such request,
  so no target, and the window would hold `under_live` for good (issue 65). It makes the idle
  spell itself (`observe`): the first live request measured beside batch work with no target
  pauses the batch (a window of 0: reason "learn"; running lines finish, or are preempted),
  and the live requests that then run beside no batch line are the baseline. After
  LEARN_SAMPLES of them the window steps to `under_live` (reason "learned"), as after a
  quiet spell, and the measurement takes it from there. The pause lasts LEARN_SAMPLES live
  requests, once (40 s at 0.5 requests/s); a quiet spell ends it early, with the baseline
  of the requests it measured. A window of 0, not a small one: beside a sixteenth, live p95
  was 2.3x idle on 2 CPU cores (benchmarks/live_target.py, revision a09b1be) and 3x on the
  simulation's CPU-like engine, so a baseline taken beside batch work would lift the target
  by as much; beside no line, it is the baseline an idle server learns.
- Each live request that ran beside batch work is a sample of the window it met (`observe`),
  compared with the aim, AIM of the target (the margin that keeps the p95 within it):
  - slower than the aim: the window halves from what ran (at most once per
    `shrink_every_s`, so one slow spell does not empty it), and that is what live latency
    allows now (`earned`);
  - within it, with the window in use: the window grows, by an eighth while none of the last
    BESIDE_SAMPLES live requests missed the aim and their p95 is within half of it (room
    to spare: a GPU, whose step costs little more with more sequences, reaches the whole
    window within seconds), by a sixty-fourth otherwise. Halving on a miss and growing by a
    sixty-fourth on a hit settle where about one request in 45 misses
    (ln(65/64) / ln(2 * 65/64)).
  - A window that is not in use (fewer lines run than USED of it) does not grow: a request
    that met the target beside 10 lines says nothing of 500.
- Two fast first reactions stay for what no live request has measured yet, and the
  measurement lifts both:
  - a live request arriving after a quiet spell steps the window back at once to
    `under_live` (a sixteenth) before it can suffer: the lines the whole window admitted are
    running when it arrives. Each live request that then meets the aim doubles the window,
    up to `earned` (TCP's slow start after an idle spell), and growth goes on from there;
  - the API server's cap (`loop_lag`, below) holds the batch in quiet spells, so the first
    live request after a batch-only spell finds no backlog there; under live traffic it never
    holds the batch below `earned`: the measured latency already counts the loop's lag.
- After `quiet_s` without any live request the batch gets the whole window.
- Running lines still beyond the window PREEMPT_AFTER_S after it shrank are preempted
  (`to_preempt`), a few at a time: short lines finish on their own, long ones give way.

The API server's cap (`loop_lag`): batch lines and live requests share its one event loop, first
in, first out, so batch output the loop cannot keep up with queues ahead of every live request
before it even reaches the engine (113-218 ms in benchmarks/timeline.py with the whole window on
2 cores). It holds with or without live traffic, so the backlog is not there when a live request
arrives after a batch-only spell; lines above the cap finish on their own (only the window
preempts). While the loop wakes later than `lag_target_s` the cap halves from the lines in
flight, once per effect, as TCP reduces once per window of data:

- only once the lines in flight have come down to it (the last halving took effect: from 512
  lines that takes 2-3 s on the simulation's CPU-like engine), at most every `shrink_every_s`.
  Halving every `shrink_every_s` on time alone took that engine's cap from 512 to 8 lines while
  its first halving was still taking effect, and 15 s to climb back to 100;
- again only if the last halving, once it took effect, brought the lag down to LAG_EFFECT of the
  highest lag from it until then (a moving average is still catching up with the lines it
  halved from). A lag that did not come down is not the batch's doing: the cap holds there
  (`cap_held`) while the loop lags (a constant 12 ms took it to one line for good before: now
  to 256 of 512, or 64 beside the batch's own lag);
- never below `under_live`, the window a live arrival steps back to after a quiet spell: chance
  dips of a noisy lag that is not the batch's read as a halving's effect, and would walk the cap
  down to a line (12 ms on average: 1-9 lines before).

While the loop keeps up the cap grows by an eighth every `grow_every_s`, up to the whole window,
and the next lag above the target is judged afresh. On the simulation's CPU-like engine, whose
loop lags 10 ms at 200 lines, the cap settles within 5 s of a batch-only spell into a sawtooth
of 102-204 lines. `limit` is the smaller of the window and the cap, the cap taken no lower than
`earned` under live traffic.

`State.reason` says why the window last changed, for the log line; anything but "quiet" means
live traffic is about.
"""

import math
from dataclasses import dataclass, replace

from vllm_sagemaker.core.config import DEFAULT_LIVE_RATIO

# Live requests measured while no batch ran that the baseline keeps (the newest).
IDLE_SAMPLES = 64
# Live requests measured beside batch work whose tail says how much room is left (the newest).
BESIDE_SAMPLES = 20
# Live requests a server with no target measures with its batch paused before the batch goes
# on: the baseline's tail is then the second slowest of 20, as the tail beside batch work is
# (it reads a little low, so the target errs on the live side: 84-90 ms against a true 94 ms
# in the simulation's GPU-like engine).
LEARN_SAMPLES = BESIDE_SAMPLES
# The percentile of the baseline and of the tail beside batch work: nearest rank (the fourth
# slowest of 64, the second slowest of 20).
TAIL_QUANTILE = 0.95
# Time constant of the recent live latency on /metrics: a sample weighs
# 1 - exp(-gap / RECENT_S), where gap is the time since the previous one.
RECENT_S = 1.0
# The window is held to this share of the target (its aim): held to the target itself, the
# live p95 landed at 0.95-1.11 times it (benchmarks/live_target.py, 2 CPU cores, 60 s phases).
AIM = 0.85
# Growth of the window on a live request that met the aim: 1 / ROOM_GROWTH of it while the
# latest BESIDE_SAMPLES all met the aim with their p95 within ROOM of it, else
# 1 / NEAR_GROWTH.
ROOM = 0.5
ROOM_GROWTH = 8
NEAR_GROWTH = 64
# The window is in use when at least this share of what it allows runs.
USED = 0.75
# At most this many running lines are preempted per look (every 0.1 s), and only once the window
# has been exceeded this long: preempting every line beyond a shrunken window at once (32-token
# lines that would have finished within a second) cost the batch 2/3 of its throughput and
# gave live requests a p99 of 48x idle instead of 3-6x.
PREEMPT_AT_ONCE = 8
PREEMPT_AFTER_S = 2.0
# The API server's cap halves again only if its last halving, once it took effect, brought the
# loop's lag down to this share of what it was: halving the lines halves a lag the batch alone
# causes (1/2) and leaves one it does not cause as it was (1), so 3/4 is the batch causing at
# least half of the lag.
LAG_EFFECT = 0.75


@dataclass(frozen=True)
class Settings:
    full: int
    slo_ratio: float = DEFAULT_LIVE_RATIO
    slo_s: float | None = None
    quiet_s: float = 10.0
    grow_every_s: float = 0.5
    shrink_every_s: float = 0.5
    floor: int = 1
    lag_target_s: float = 0.01

    @property
    def under_live(self) -> int:
        """The window a live arrival first steps back to, until live latency says more."""
        return max(self.floor, self.full // 16)


@dataclass(frozen=True)
class State:
    window: int
    # What live latency last allowed: the window after the last halving or growth (`floor`
    # until a live request has measured one); it outlives quiet spells.
    earned: int = 1
    # Live latencies while no batch ran, the newest IDLE_SAMPLES.
    idle: tuple[float, ...] = ()
    # Live latencies beside batch work, the newest BESIDE_SAMPLES.
    beside: tuple[float, ...] = ()
    # Growth earned short of a whole line (a window of 10 grows by one line every 6.4 hits).
    credit: float = 0.0
    # Live latency, a moving average over time (for /metrics).
    recent_s: float | None = None
    sampled_at: float = float("-inf")
    changed_at: float = float("-inf")
    reason: str = "quiet"
    # The API server's cap (`loop_lag`); None: none yet, the whole window.
    cap: int | None = None
    cap_changed_at: float = float("-inf")
    # The loop's lag the cap's last halving is judged by: the highest from the halving until it
    # took effect (None: no halving since the cap last grew). And whether it halves no further
    # while the loop lags (the last halving did not bring the lag down, or it is at its floor).
    cap_lag_s: float | None = None
    cap_held: bool = False

    @property
    def baseline_s(self) -> float | None:
        """The tail of live latency while no batch ran (None until one such request)."""
        return quantile(self.idle, TAIL_QUANTILE) if self.idle else None

    @property
    def tail_s(self) -> float | None:
        """The p95 of the latest live requests beside batch work (None before any)."""
        return quantile(self.beside, TAIL_QUANTILE) if self.beside else None

    def target_s(self, settings: Settings) -> float | None:
        """The live latency the controller holds the batch to, once it knows one."""
        if settings.slo_s is not None:
            return settings.slo_s
        baseline = self.baseline_s
        return None if baseline is None else settings.slo_ratio * baseline


def quantile(samples: tuple[float, ...], q: float) -> float:
    """The nearest-rank `q` quantile of `samples` (not empty)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def initial(settings: Settings) -> State:
    return State(window=settings.full, earned=settings.floor)


def live_arrived(state: State, settings: Settings, now: float) -> State:
    """A live request started. After a quiet spell the batch steps back at once to
    `under_live` (never above what the API server's cap let run) before the request can
    suffer; live requests that meet the aim then double it back to `earned` (`observe`).
    Under live traffic the window is the measurement's."""
    if state.reason != "quiet":
        return state
    window = min(state.window, settings.under_live, limit(state, settings))
    return replace(state, window=window, changed_at=now, reason="live arrived")


def _recent(state: State, sample: float, now: float) -> float:
    """The recent live latency with `sample` taken in, weighted by the time since the last."""
    if state.recent_s is None:
        return sample
    weight = 1 - math.exp(-(now - state.sampled_at) / RECENT_S)
    return (1 - weight) * state.recent_s + weight * sample


def observe(state: State, settings: Settings, latency_s: float, running: int, now: float) -> State:
    """A live request's latency, with `running` batch lines in flight when it arrived: the
    baseline while none ran; else the window halves when it missed the aim (AIM of the
    target) and grows when it met it with the window in use. With no target to aim at, the
    batch pauses until LEARN_SAMPLES live requests have measured the server without it."""
    state = replace(state, recent_s=_recent(state, latency_s, now), sampled_at=now)
    if not running:
        state = replace(state, idle=(*state.idle, latency_s)[-IDLE_SAMPLES:])
        if state.reason != "learn" or len(state.idle) < LEARN_SAMPLES:
            return state
        return replace(state, window=settings.under_live, changed_at=now, reason="learned")
    state = replace(state, beside=(*state.beside, latency_s)[-BESIDE_SAMPLES:])
    if state.reason == "learn":
        return state
    target = state.target_s(settings)
    if target is None:
        return replace(state, window=0, credit=0.0, changed_at=now, reason="learn")
    aim = AIM * target
    if latency_s > aim:
        if state.reason == "shrink" and now - state.changed_at < settings.shrink_every_s:
            return state
        window = max(settings.floor, min(state.window, running) // 2)
        return replace(
            state, window=window, earned=window, credit=0.0, changed_at=now, reason="shrink"
        )
    if running < USED * limit(state, settings) or state.window >= settings.full:
        return state
    if state.window < state.earned:
        window = min(state.earned, 2 * state.window)
        return replace(state, window=window, credit=0.0, changed_at=now, reason="grow")
    roomy = (state.tail_s or 0.0) <= ROOM * aim and max(state.beside) <= aim
    credit = state.credit + state.window / (ROOM_GROWTH if roomy else NEAR_GROWTH)
    if credit < 1:
        return replace(state, credit=credit)
    window = min(settings.full, state.window + int(credit))
    return replace(
        state, window=window, earned=window, credit=credit % 1, changed_at=now, reason="grow"
    )


def tick(
    state: State, settings: Settings, live_in_flight: int, last_live_s: float, now: float
) -> State:
    """Time passed: a quiet spell (no live request for `quiet_s`) gives the whole window."""
    if live_in_flight or now - last_live_s < settings.quiet_s:
        return state
    if state.reason == "quiet" and state.window == settings.full:
        return state
    return replace(state, window=settings.full, changed_at=now, reason="quiet")


def to_preempt(running: int, window: int, exceeded_for_s: float) -> int:
    """How many running lines to stop now (they are queued again): those beyond the window once
    it has been exceeded for PREEMPT_AFTER_S, at most PREEMPT_AT_ONCE."""
    if exceeded_for_s < PREEMPT_AFTER_S:
        return 0
    return max(0, min(running - window, PREEMPT_AT_ONCE))


def loop_lag(state: State, settings: Settings, lag_s: float, running: int, now: float) -> State:
    """The API server's event loop woke `lag_s` late with `running` batch lines in flight. Above
    `lag_target_s` the cap halves from what runs, once per effect: only once the lines in flight
    have come down to it (the last halving took effect; lines above it only finish), at most
    every `shrink_every_s`, never below `under_live`, and not again when the last halving did
    not bring the lag down to LAG_EFFECT of what it was (that lag is not the batch's: the cap
    holds). While the loop keeps up the cap grows by an eighth every `grow_every_s`, and the
    next lag above the target is judged afresh."""
    cap = settings.full if state.cap is None else state.cap
    if lag_s > settings.lag_target_s:
        if running > cap or now - state.cap_changed_at < settings.shrink_every_s:
            # Until the last halving took effect, the lag it is judged by is the highest since
            # (a moving average is still catching up with the lines it halved from).
            if state.cap_lag_s is not None and lag_s > state.cap_lag_s:
                return replace(state, cap_lag_s=lag_s)
            return state
        halved = max(settings.under_live, min(cap, running) // 2)
        helped = state.cap_lag_s is None or lag_s <= LAG_EFFECT * state.cap_lag_s
        if not helped or halved >= cap:
            return state if state.cap_held else replace(state, cap_held=True)
        return replace(state, cap=halved, cap_changed_at=now, cap_lag_s=lag_s, cap_held=False)
    if cap >= settings.full or now - state.cap_changed_at < settings.grow_every_s:
        return state
    grown = min(settings.full, cap + max(1, cap // 8))
    return replace(state, cap=grown, cap_changed_at=now, cap_lag_s=None, cap_held=False)


def limit(state: State, settings: Settings) -> int:
    """Batch lines allowed in flight: the window, within the API server's cap; under live
    traffic the cap holds the batch no lower than live latency allowed (`earned`)."""
    cap = settings.full if state.cap is None else state.cap
    if state.reason != "quiet":
        cap = max(cap, state.earned)
    return min(state.window, cap)
