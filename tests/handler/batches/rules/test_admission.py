"""The batch admission rules (handler.batches.admission.rules), with no engine: halve when a live
request misses the target, grow while they meet it, the whole window after a quiet spell; the API
server's cap halves once per effect."""

import math
from dataclasses import replace

import pytest

from vllm_sagemaker.core.config import BatchApiSettings
from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.handler.batches.admission import rules as admission
from vllm_sagemaker.handler.batches.admission.rules import Settings, State

S = Settings(full=256, slo_ratio=2.0, quiet_s=2.0, grow_every_s=1.0, shrink_every_s=0.5)


def test_a_new_controller_gives_the_whole_window() -> None:
    assert admission.initial(S) == State(window=256, earned=1, reason="quiet")


@pytest.mark.parametrize(
    ("state", "expected_window", "expected_reason"),
    [
        # after a quiet spell: a sixteenth at once
        (State(window=256, reason="quiet"), 16, "live arrived"),
        # ... even when live latency allowed more before it (the window climbs back to that)
        (State(window=256, earned=100, reason="quiet"), 16, "live arrived"),
        # ... never above what the API server's cap let run
        (State(window=256, cap=8, reason="quiet"), 8, "live arrived"),
        (State(window=1, reason="quiet"), 1, "live arrived"),
        # under live traffic the window is the measurement's
        (State(window=100, earned=100, reason="grow"), 100, "grow"),
        (State(window=12, earned=12, reason="shrink"), 12, "shrink"),
        # ... and a batch paused to learn the target stays paused
        (State(window=0, reason="learn"), 0, "learn"),
    ],
)
def test_a_live_arrival_after_a_quiet_spell_steps_back_before_it_hurts(
    state: State, expected_window: int, expected_reason: str
) -> None:
    after = admission.live_arrived(state, S, now=10.0)
    assert (after.window, after.reason, after.earned) == (
        expected_window,
        expected_reason,
        state.earned,
    )


# A target of 100 ms (the baseline's p95 is 50 ms), an aim of 85 ms.
LEARNED = (0.05,) * 10


@pytest.mark.parametrize(
    ("state", "latency", "running", "window", "reason"),
    [
        # missed the aim (85 ms), if not the target: halves from what ran, at once
        (State(window=64, idle=LEARNED, reason="grow"), 0.09, 64, 32, "shrink"),
        (State(window=64, idle=LEARNED, reason="grow"), 0.2, 64, 32, "shrink"),
        (State(window=64, idle=LEARNED, reason="grow"), 0.2, 40, 20, "shrink"),
        # again within shrink_every_s of the last halving: held
        (State(window=32, idle=LEARNED, changed_at=4.8, reason="shrink"), 0.3, 32, 32, "shrink"),
        # after shrink_every_s: halves again
        (State(window=32, idle=LEARNED, changed_at=4.0, reason="shrink"), 0.3, 32, 16, "shrink"),
        # never below the floor
        (State(window=1, idle=LEARNED, reason="shrink"), 0.3, 1, 1, "shrink"),
        # met it with the window in use and room to spare: an eighth more
        (State(window=64, idle=LEARNED, reason="grow"), 0.04, 64, 72, "grow"),
        (State(window=64, idle=LEARNED, reason="shrink"), 0.04, 48, 72, "grow"),
        # met it near the target: a sixty-fourth more
        (State(window=64, idle=LEARNED, reason="grow"), 0.08, 64, 65, "grow"),
        # ... which for a small window is a fraction of a line, kept as credit
        (State(window=16, idle=LEARNED, reason="shrink"), 0.08, 16, 16, "shrink"),
        (State(window=16, idle=LEARNED, credit=0.9, reason="shrink"), 0.08, 16, 17, "grow"),
        # climbing back after a quiet spell: doubles up to what live latency allowed before
        (State(window=16, earned=100, idle=LEARNED, reason="live arrived"), 0.08, 16, 32, "grow"),
        (State(window=64, earned=100, idle=LEARNED, reason="grow"), 0.08, 64, 100, "grow"),
        # ... and a miss on the way halves it as ever
        (State(window=64, earned=100, idle=LEARNED, reason="grow"), 0.2, 64, 32, "shrink"),
        # met it, but the window was not in use: it says nothing of the window
        (State(window=64, idle=LEARNED, reason="grow"), 0.04, 47, 64, "grow"),
        # the whole window already
        (State(window=256, idle=LEARNED, reason="grow"), 0.01, 256, 256, "grow"),
    ],
)
def test_each_live_request_beside_the_batch_moves_the_window(
    state: State, latency: float, running: int, window: int, reason: str
) -> None:
    after = admission.observe(state, S, latency, running, now=5.0)
    assert (after.window, after.reason) == (window, reason)
    if window != state.window:
        # what live latency allows now: the halved window, or the most it has grown to
        assert after.earned == (window if reason == "shrink" else max(window, state.earned))


# A server that has measured all but the last of the live requests it learns its target from.
ALMOST = (0.05,) * (admission.LEARN_SAMPLES - 1)


@pytest.mark.parametrize(
    ("state", "latency", "running", "window", "reason", "idle"),
    [
        # no target (no SLO, no live request yet while no batch ran): the batch pauses, fast
        # or slow as the request was, and the request measured the batch, not the server
        (State(window=16, reason="live arrived"), 0.01, 16, 0, "learn", 0),
        (State(window=16, reason="live arrived"), 9.0, 16, 0, "learn", 0),
        (State(window=16, credit=0.5, reason="live arrived"), 0.01, 4, 0, "learn", 0),
        # paused: a request beside lines still running (they finish or are preempted) is no
        # baseline, and the batch stays paused
        (State(window=0, reason="learn"), 0.2, 5, 0, "learn", 0),
        (State(window=0, idle=ALMOST, reason="learn"), 0.2, 1, 0, "learn", len(ALMOST)),
        # a request beside no batch line is the baseline, as on an idle server
        (State(window=0, reason="learn"), 0.05, 0, 0, "learn", 1),
        # the last one it learns from: the window steps to a sixteenth, as after a quiet spell
        (State(window=0, idle=ALMOST, reason="learn"), 0.05, 0, 16, "learned", len(ALMOST) + 1),
        # a server that measured even one request while no batch ran has its target: no pause
        (State(window=16, idle=(0.05,), reason="live arrived"), 0.01, 16, 18, "grow", 1),
        # a request while no batch ran, outside a pause: the baseline, the window unchanged
        (State(window=16, reason="live arrived"), 0.05, 0, 16, "live arrived", 1),
    ],
)
def test_a_server_with_no_target_pauses_the_batch_to_learn_it(
    state: State, latency: float, running: int, window: int, reason: str, idle: int
) -> None:
    """A batch that started before any live request and never pauses leaves no live request
    beside no batch line: the window makes that spell itself, for LEARN_SAMPLES requests."""
    after = admission.observe(state, S, latency, running, now=5.0)
    assert (after.window, after.reason, len(after.idle)) == (window, reason, idle)
    if reason in ("learn", "learned"):
        assert after.credit == 0.0
        assert after.earned == state.earned


def test_a_server_with_a_fixed_target_never_pauses_the_batch() -> None:
    fixed = Settings(full=256, slo_s=0.5)
    after = admission.observe(State(window=16, reason="live arrived"), fixed, 0.01, 16, 5.0)
    assert (after.window, after.reason) == (18, "grow")


def test_a_never_idle_server_learns_its_target_then_grows() -> None:
    """The whole course on a server whose batch never stopped: a live arrival steps the
    window to a sixteenth, the first answer pauses the batch, LEARN_SAMPLES requests beside no
    line set the target, and the window goes on from a sixteenth by measurement."""
    state = admission.live_arrived(admission.initial(S), S, now=1.0)
    state = admission.observe(state, S, 0.04, running=16, now=1.3)
    assert (state.window, state.reason, state.target_s(S)) == (0, "learn", None)
    for index in range(admission.LEARN_SAMPLES):
        state = admission.observe(state, S, 0.04 + index / 1000, running=0, now=2.0 + index)
    # the second slowest of 20: 0.058 s, so a target of 116 ms
    assert state.target_s(S) == pytest.approx(0.116)
    assert (state.window, state.reason) == (S.under_live, "learned")
    state = admission.observe(state, S, 0.03, running=16, now=30.0)
    assert (state.window, state.reason) == (18, "grow")


@pytest.mark.parametrize(
    "latest",
    [
        (0.08,) * 19,  # the tail of the latest is near the aim
        (0.09,) + (0.01,) * 18,  # one of them missed it
    ],
)
def test_growth_waits_for_the_latest_requests_not_one_fast_one(latest: tuple[float, ...]) -> None:
    """A fast request grows the window by a sixty-fourth, not an eighth, while the latest
    BESIDE_SAMPLES say the target is near."""
    near = State(window=64, earned=64, idle=LEARNED, beside=latest, reason="grow")
    assert admission.observe(near, S, 0.01, 64, now=5.0).window == 65


def test_the_target_is_twice_the_p95_of_the_newest_idle_requests() -> None:
    state = State(window=8)
    for index in range(100):
        # 100 requests while no batch ran: the newest 64 are 0.036 .. 0.099 s
        state = admission.observe(state, S, index / 1000, running=0, now=float(index))
    assert state.baseline_s == pytest.approx(0.096)
    assert state.target_s(S) == pytest.approx(0.192)
    assert state.window == 8
    busy = admission.observe(state, S, 5.0, running=8, now=200.0)
    assert busy.baseline_s == pytest.approx(0.096)


def test_a_fixed_target_replaces_the_learned_baseline() -> None:
    fixed = Settings(full=64, slo_s=0.5)
    state = State(window=64, idle=(0.01,), reason="grow")
    assert admission.observe(state, fixed, 0.4, 64, 1.0).window == 64
    assert admission.observe(state, fixed, 2.0, 64, 1.0).window == 32


def test_the_recent_latency_on_metrics_is_a_mean_over_time() -> None:
    state = State(window=8, recent_s=0.3, sampled_at=10.0)
    after = admission.observe(state, S, 0.06, running=0, now=10.0 + admission.RECENT_S)
    weight = 1 - math.exp(-1.0)
    assert after.recent_s == pytest.approx((1 - weight) * 0.3 + weight * 0.06)


@pytest.mark.parametrize(
    ("state", "in_flight", "last_live", "now", "window", "reason"),
    [
        # quiet for quiet_s: the whole window at once
        (State(window=4, reason="shrink", changed_at=0.0), 0, 1.0, 3.0, 256, "quiet"),
        # not quiet long enough: time alone changes nothing
        (State(window=4, reason="shrink", changed_at=0.0), 0, 1.5, 3.0, 4, "shrink"),
        # live still in flight: no quiet spell
        (State(window=4, reason="grow", changed_at=1.0), 2, -9.0, 9.0, 4, "grow"),
        # already quiet and full: unchanged (changed_at kept)
        (State(window=256, reason="quiet", changed_at=1.0), 0, 0.0, 9.0, 256, "quiet"),
        # a pause to learn the target ends with the live traffic
        (State(window=0, reason="learn", changed_at=0.0), 0, 1.0, 3.0, 256, "quiet"),
        (State(window=0, reason="learn", changed_at=0.0), 0, 1.5, 3.0, 0, "learn"),
    ],
)
def test_a_quiet_spell_gives_the_whole_window(
    state: State, in_flight: int, last_live: float, now: float, window: int, reason: str
) -> None:
    after = admission.tick(state, S, in_flight, last_live, now)
    assert (after.window, after.reason, after.earned) == (window, reason, state.earned)


@pytest.mark.parametrize(
    ("running", "window", "exceeded_for_s", "stopped"),
    [
        (8, 8, 0.0, 0),  # within the window: nothing stops
        (3, 8, 0.0, 0),
        (8, 2, 0.5, 0),  # just shrunk: short lines finish on their own
        (8, 2, admission.PREEMPT_AFTER_S, 6),  # still beyond it: the excess
        (300, 16, 9.0, admission.PREEMPT_AT_ONCE),  # a few at a time
        (5, 0, admission.PREEMPT_AFTER_S, 5),  # paused to learn the target: every one
        (0, 1, 9.0, 0),
    ],
)
def test_lines_that_stay_beyond_the_window_are_preempted_a_few_at_a_time(
    running: int, window: int, exceeded_for_s: float, stopped: int
) -> None:
    assert admission.to_preempt(running, window, exceeded_for_s) == stopped


LAG = Settings(full=256, grow_every_s=1.0, shrink_every_s=0.5, lag_target_s=0.01)


@pytest.mark.parametrize(
    ("state", "lag_s", "running", "now", "cap"),
    [
        # the loop keeps up: no cap yet, none needed
        (State(window=256), 0.002, 256, 5.0, None),
        # it lags: half of what runs (not of an unused cap)
        (State(window=256), 0.03, 256, 5.0, 128),
        (State(window=256, cap=200), 0.03, 40, 5.0, 20),
        # lags again within shrink_every_s: unchanged
        (State(window=256, cap=128, cap_changed_at=4.8), 0.03, 128, 5.0, 128),
        # and after it: halved again, never below the floor
        (State(window=256, cap=128, cap_changed_at=4.0), 0.03, 128, 5.0, 64),
        (State(window=256, cap=1, cap_changed_at=0.0), 0.5, 1, 5.0, 1),
        # keeps up again: an eighth more every grow_every_s, up to the whole window
        (State(window=256, cap=64, cap_changed_at=4.5), 0.002, 64, 5.0, 64),
        (State(window=256, cap=64, cap_changed_at=3.0), 0.002, 64, 5.0, 72),
        (State(window=256, cap=250, cap_changed_at=3.0), 0.002, 250, 5.0, 256),
        (State(window=256, cap=3, cap_changed_at=3.0), 0.002, 3, 5.0, 4),
    ],
)
def test_the_api_server_cap_follows_its_event_loop(
    state: State, lag_s: float, running: int, now: float, cap: int | None
) -> None:
    assert admission.loop_lag(state, LAG, lag_s, running, now).cap == cap


# The last halving of the cap, at 5.0 s with 30 ms of lag: 256 lines in flight -> 128.
HALVED = State(window=256, cap=128, cap_changed_at=0.0, cap_lag_s=0.03)


@pytest.mark.parametrize(
    ("state", "lag_s", "running", "cap", "cap_lag_s", "held"),
    [
        # the first lag above the target: halves from what runs, and keeps the lag it halved at
        (State(window=256), 0.03, 256, 128, 0.03, False),
        # the last halving has not taken effect (lines above the cap only finish): no other,
        # however long it takes
        (HALVED, 0.02, 200, 128, 0.03, False),
        (HALVED, 0.011, 129, 128, 0.03, False),
        # ... and the lag it is judged by is the highest until then (a moving average is still
        # catching up with the lines it halved from)
        (replace(HALVED, cap_lag_s=0.012), 0.03, 200, 128, 0.03, False),
        # taken effect, and the lag came down to 3/4 of it or less: the batch's doing, halve again
        (HALVED, 0.015, 128, 64, 0.015, False),
        (HALVED, 0.022, 128, 64, 0.022, False),
        (HALVED, 0.015, 90, 45, 0.015, False),
        # taken effect, and it did not: not the batch's doing, the cap holds there
        (HALVED, 0.025, 128, 128, 0.03, True),
        (HALVED, 0.04, 128, 128, 0.03, True),
        (replace(HALVED, cap_held=True), 0.03, 128, 128, 0.03, True),
        # ... until the lag comes down after all
        (replace(HALVED, cap_held=True), 0.02, 128, 64, 0.02, False),
        # never below the floor, a sixteenth of the window (16 of 256)
        (State(window=256, cap=20), 0.03, 20, 16, 0.03, False),
        (State(window=256, cap=16), 0.03, 16, 16, None, True),
        (State(window=256, cap=16, cap_lag_s=0.04), 0.02, 16, 16, 0.04, True),
        # the loop keeps up again: the cap grows, and the next lag above the target is judged
        # afresh
        (replace(HALVED, cap_held=True), 0.005, 128, 144, None, False),
        (replace(HALVED, cap_changed_at=4.5), 0.005, 128, 128, 0.03, False),
    ],
)
def test_the_cap_halves_once_per_effect(
    state: State, lag_s: float, running: int, cap: int, cap_lag_s: float | None, held: bool
) -> None:
    """Like TCP, which reduces once per window: the cap halves again only once the lines in
    flight came down to it, and only while halving brings the lag down (LAG_EFFECT)."""
    after = admission.loop_lag(state, LAG, lag_s, running, now=5.0)
    assert (after.cap, after.cap_lag_s, after.cap_held) == (cap, cap_lag_s, held)
    assert after.cap_changed_at == (5.0 if cap != state.cap else state.cap_changed_at)


def test_the_cap_halves_no_further_under_a_lag_the_batch_does_not_cause() -> None:
    """A constant lag of 12 ms whatever runs: before, the cap halved every shrink_every_s down
    to one line; now the first halving, once it took effect, shows it did not help."""
    state, running = State(window=256), 256
    for tick in range(200):
        now = tick * 0.05
        state = admission.loop_lag(state, LAG, 0.012, running, now)
        running = max(admission.limit(state, LAG), running - 4)
    assert (state.cap, state.cap_held, running) == (128, True, 128)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (State(window=256), 256),
        (State(window=256, cap=40), 40),
        (State(window=16, cap=40), 16),
        # live latency measured more than the cap allows: the measurement decides
        # under live traffic the cap holds no lower than what live latency allowed
        (State(window=256, cap=40, earned=100, reason="grow"), 100),
        (State(window=64, cap=40, earned=64, reason="live arrived"), 64),
        # in a quiet spell the cap holds as the loop measures it
        (State(window=256, cap=40, earned=100, reason="quiet"), 40),
        # paused to learn the target: nothing, whatever the cap
        (State(window=0, cap=40, reason="learn"), 0),
    ],
)
def test_the_limit_is_the_window_within_the_cap(state: State, expected: int) -> None:
    assert admission.limit(state, LAG) == expected


@pytest.mark.parametrize(
    ("env", "slo_s", "ratio"),
    [
        ({}, None, 2.0),
        ({"SAGEMAKER_LIVE_LATENCY_SLO": "250"}, 0.25, 2.0),
        ({"SAGEMAKER_LIVE_LATENCY_RATIO": "1.5"}, None, 1.5),
        ({"SAGEMAKER_LIVE_LATENCY_RATIO": " 3 "}, None, 3.0),
    ],
)
def test_the_live_target_from_the_environment(
    env: dict[str, str], slo_s: float | None, ratio: float
) -> None:
    settings = BatchApiSettings.from_env(env)
    assert (settings.live_slo_s, settings.live_ratio) == (slo_s, ratio)


@pytest.mark.parametrize("ratio", ["1", "0.5", "two", "inf", "-2"])
def test_a_ratio_that_is_not_above_one_is_refused(ratio: str) -> None:
    with pytest.raises(ConfigError, match=r"SAGEMAKER_LIVE_LATENCY_RATIO must be a ratio > 1"):
        BatchApiSettings.from_env({"SAGEMAKER_LIVE_LATENCY_RATIO": ratio})
