"""The batch admission rules (handler.batches.admission.rules), with no engine: shrink at once when
live requests suffer, grow back gradually, the whole window after a quiet spell."""

import math

import pytest

from vllm_sagemaker.handler.batches.admission import rules as admission
from vllm_sagemaker.handler.batches.admission.rules import Settings, State

S = Settings(full=256, slo_ratio=2.0, quiet_s=2.0, grow_every_s=1.0, shrink_every_s=0.5)


def test_a_new_controller_gives_the_whole_window() -> None:
    assert admission.initial(S) == State(window=256, reason="quiet")


@pytest.mark.parametrize(
    ("state", "expected_window", "expected_reason"),
    [
        (State(window=256, reason="quiet"), 16, "live arrived"),  # a sixteenth
        (State(window=100, reason="grow"), 16, "live arrived"),  # grew past the cap meanwhile
        (State(window=12, reason="grow"), 12, "grow"),  # already under the cap
        (State(window=1, reason="quiet"), 1, "quiet"),  # nothing to give back
    ],
)
def test_live_arrival_after_quiet_steps_back_before_it_hurts(
    state: State, expected_window: int, expected_reason: str
) -> None:
    after = admission.live_arrived(state, S, now=10.0)
    assert (after.window, after.reason) == (expected_window, expected_reason)


@pytest.mark.parametrize(
    ("state", "latency", "batch_running", "now", "window", "reason"),
    [
        # learning: no baseline yet, no batch running -> baseline learned, nothing changes
        (State(window=256), 0.05, False, 1.0, 256, "quiet"),
        # within 2x of the baseline: nothing changes
        (
            State(window=64, baseline_s=0.05, recent_s=0.05, reason="grow"),
            0.09,
            True,
            5.0,
            64,
            "grow",
        ),
        # live suffers: the window halves at once
        (
            State(window=64, baseline_s=0.05, recent_s=0.12, reason="grow"),
            0.2,
            True,
            5.0,
            32,
            "shrink",
        ),
        # again within shrink_every_s of the last halving: held
        (
            State(window=32, baseline_s=0.05, recent_s=0.2, changed_at=4.8, reason="shrink"),
            0.3,
            True,
            5.0,
            32,
            "shrink",
        ),
        # after shrink_every_s: halves again
        (
            State(window=32, baseline_s=0.05, recent_s=0.2, changed_at=4.0, reason="shrink"),
            0.3,
            True,
            5.0,
            16,
            "shrink",
        ),
        # never below the floor
        (
            State(window=1, baseline_s=0.05, recent_s=0.2, reason="shrink"),
            0.3,
            True,
            9.0,
            1,
            "shrink",
        ),
    ],
)
def test_observe(
    state: State, latency: float, batch_running: bool, now: float, window: int, reason: str
) -> None:
    after = admission.observe(state, S, latency, batch_running, now)
    assert (after.window, after.reason) == (window, reason)


def test_the_baseline_is_learned_only_while_no_batch_runs() -> None:
    state = admission.observe(State(window=8), S, 0.04, batch_running=False, now=0.0)
    assert state.baseline_s == pytest.approx(0.04)
    busy = admission.observe(state, S, 1.0, batch_running=True, now=1.0)
    assert busy.baseline_s == pytest.approx(0.04)
    weight = 1 - math.exp(-1.0 / admission.RECENT_S)
    assert busy.recent_s == pytest.approx((1 - weight) * 0.04 + weight * 1.0)


@pytest.mark.parametrize(
    ("gap_s", "window"),
    [
        # 8 requests/s: one fast request after a slow spell does not undo it; still halves
        (0.125, 32),
        # half a request/s: the request two seconds later is most of what is known; it meets
        # the target and the window is kept
        (2.0, 64),
    ],
)
def test_recent_latency_is_a_mean_over_time_not_over_requests(gap_s: float, window: int) -> None:
    slow = State(window=64, baseline_s=0.05, recent_s=0.3, sampled_at=10.0, reason="grow")
    after = admission.observe(slow, S, 0.06, batch_running=True, now=10.0 + gap_s)
    assert after.window == window


def test_a_fixed_target_replaces_the_learned_baseline() -> None:
    fixed = Settings(full=64, slo_s=0.5)
    state = State(window=64, baseline_s=0.01, recent_s=0.4, reason="grow")
    assert admission.observe(state, fixed, 0.45, True, 1.0).window == 64
    assert admission.observe(state, fixed, 2.0, True, 1.0).window == 32


@pytest.mark.parametrize(
    ("state", "in_flight", "last_live", "now", "window", "reason"),
    [
        # quiet for quiet_s: the whole window at once
        (State(window=4, reason="shrink", changed_at=0.0), 0, 1.0, 3.0, 256, "quiet"),
        # not quiet long enough, live meets the target: grows by grow_by (an eighth of 16)
        (
            State(window=4, baseline_s=0.05, recent_s=0.06, reason="shrink", changed_at=0.0),
            0,
            1.5,
            3.0,
            6,
            "grow",
        ),
        # live still in flight: no quiet spell, grows if meeting the target
        (
            State(window=4, baseline_s=0.05, recent_s=0.06, reason="grow", changed_at=1.0),
            2,
            0.0,
            2.5,
            6,
            "grow",
        ),
        # grew less than grow_every_s ago: held
        (
            State(window=20, baseline_s=0.05, recent_s=0.06, reason="grow", changed_at=2.5),
            2,
            0.0,
            3.0,
            20,
            "grow",
        ),
        # live suffering: never grows
        (
            State(window=4, baseline_s=0.05, recent_s=0.2, reason="shrink", changed_at=0.0),
            1,
            0.0,
            9.0,
            4,
            "shrink",
        ),
        # never above under_live while live traffic is around
        (
            State(window=15, baseline_s=0.05, recent_s=0.06, reason="grow", changed_at=0.0),
            1,
            0.0,
            9.0,
            16,
            "grow",
        ),
        (
            State(window=16, baseline_s=0.05, recent_s=0.06, reason="grow", changed_at=0.0),
            1,
            0.0,
            9.0,
            16,
            "grow",
        ),
        # no target known yet (no SLO, no live request seen while no batch ran): held
        (State(window=4, reason="shrink", changed_at=0.0), 1, 0.0, 9.0, 4, "shrink"),
        # live suffered, but no live request for stale_s: nothing suffers now, it grows
        (
            State(window=4, baseline_s=0.05, recent_s=0.2, reason="shrink", changed_at=0.0),
            0,
            0.5,
            1.5,
            6,
            "grow",
        ),
        # ... and not before stale_s
        (
            State(window=4, baseline_s=0.05, recent_s=0.2, reason="shrink", changed_at=0.0),
            0,
            0.8,
            1.5,
            4,
            "shrink",
        ),
        # already quiet and full: unchanged (changed_at kept)
        (State(window=256, reason="quiet", changed_at=1.0), 0, 0.0, 9.0, 256, "quiet"),
    ],
)
def test_tick(
    state: State, in_flight: int, last_live: float, now: float, window: int, reason: str
) -> None:
    after = admission.tick(state, S, in_flight, last_live, now)
    assert (after.window, after.reason) == (window, reason)


@pytest.mark.parametrize(
    ("running", "window", "exceeded_for_s", "stopped"),
    [
        (8, 8, 0.0, 0),  # within the window: nothing stops
        (3, 8, 0.0, 0),
        (8, 2, 0.5, 0),  # just shrunk: short lines finish on their own
        (8, 2, admission.PREEMPT_AFTER_S, 6),  # still beyond it: the excess
        (300, 16, 9.0, admission.PREEMPT_AT_ONCE),  # a few at a time
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


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (State(window=256), 256),
        (State(window=256, cap=40), 40),
        (State(window=16, cap=40), 16),
    ],
)
def test_the_limit_is_the_window_within_the_cap(state: State, expected: int) -> None:
    assert admission.limit(state, LAG) == expected
