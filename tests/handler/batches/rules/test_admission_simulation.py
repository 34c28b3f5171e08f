"""The admission rules (handler.batches.admission.rules) driving a model of an engine under Poisson
live arrivals, in simulated time: no clock, no engine, the same answer on any machine.

Two engine models, each a decode step whose cost grows with the batch lines beside it:

- GPU-like: a step costs 20 ms with 16 sequences and 20.5 ms with 256 (the GPU's step is bound
  by reading the weights, not by the sequences), and the API server has a core of its own;
- CPU-like: every sequence adds 0.4 ms to a step (256 sequences: 110 ms), and batch lines in
  flight slow the API server's event loop that live requests share: 0.05 ms per line on
  average to its wake-ups, and to a live request that times a heavy-tailed factor (the square
  of an exponential: twice that on average, nine times or more for one request in 20).

A live request waits for the step in flight (a uniform share of it), then runs its own prefill
in a step of its own (the live-first scheduler), then its first token reaches the client
through the API server's loop; each is jittered. Batch lines take what the rules allow
(`limit`) at once, but leave only as they finish or are preempted, and the engine runs at most
240 of them (fifteen sixteenths of 256 slots).

Each case runs live traffic alone first (the baseline the default target is learned from), or,
for a never-idle server, beside a batch from the start (issue 65).
"""

import functools
import heapq
import math
import random
from dataclasses import dataclass

import pytest

from vllm_sagemaker.handler.batches.admission import rules
from vllm_sagemaker.handler.batches.admission.rules import Settings, State

ENGINE_SEQS = 240
IDLE_S = 60.0
BATCH_S = 600.0
# How often the batch's lines in flight and the API server's lag are looked at (the window's
# LAG_EVERY_S); at most PREEMPT_AT_ONCE lines are preempted every two looks (every 0.1 s).
LOOK_S = 0.05
BATCH_TOKENS = 32


@dataclass(frozen=True)
class Engine:
    step_s: float
    per_seq_s: float
    loop_per_line_s: float

    def latency_s(self, lines: int, rng: random.Random) -> float:
        """One live request's time to its first byte beside `lines` batch lines in flight."""
        waited = rng.uniform(0, self.step_at(lines))
        own = self.step_s * rng.lognormvariate(0, 0.2)
        loop = self.loop_per_line_s * lines * rng.expovariate(1) ** 2
        return 0.004 + waited + own + loop

    def step_at(self, lines: int) -> float:
        return self.step_s + self.per_seq_s * min(lines, ENGINE_SEQS)

    def lag_s(self, lines: int) -> float:
        """How late the API server's loop wakes with `lines` in flight."""
        return self.loop_per_line_s * lines


GPU = Engine(step_s=0.020, per_seq_s=0.000002, loop_per_line_s=0.0)
CPU = Engine(step_s=0.003, per_seq_s=0.0004, loop_per_line_s=0.00005)


@dataclass(frozen=True)
class Outcome:
    # The target the rules learned (None: they never learned one).
    target_s: float | None
    p95_s: float
    # Mean of what the rules allowed over the second half of the batch's run.
    window: float
    # The largest window at which no more than one live request in 20 would miss the aim.
    room: int


def p95(samples: list[float]) -> float:
    return rules.quantile(tuple(samples), 0.95)


def room(engine: Engine, target_s: float, full: int, seed: int) -> int:
    """The largest window whose live requests meet `target_s` at the 95th percentile."""
    rng = random.Random(seed)
    best = 0
    for lines in range(0, full + 1, 8):
        if p95([engine.latency_s(lines, rng) for _ in range(1000)]) <= target_s:
            best = lines
    return best


@functools.cache
def simulate(
    engine: Engine, rate: float, settings: Settings, seed: int, idle_s: float = IDLE_S
) -> Outcome:
    """Live requests alone for `idle_s` (the baseline), then beside a batch for BATCH_S. With
    `idle_s` 0 the batch starts with the live traffic and never pauses: no live request ever
    runs while no batch line does (a never-idle server). Seeded, so the same arguments give
    the same outcome: the never-idle cases reuse the idle-first ones (cached)."""
    rng = random.Random(seed)
    state = rules.initial(settings)
    # (time, tie-break, kind, batch lines beside the request, its latency)
    events: list[tuple[float, float, str, int, float]] = []

    def at(time: float, kind: str, lines: int = 0, latency: float = 0.0) -> None:
        heapq.heappush(events, (time, len(events) + rng.random(), kind, lines, latency))

    at(rng.expovariate(rate), "arrive")
    at(idle_s, "look")
    in_flight, last_live = 0, -math.inf
    # Batch lines in flight, and since when more run than the window allows.
    running, beyond_since = 0.0, math.inf
    measured: list[float] = []
    windows: list[int] = []
    while events:
        now, _, kind, lines, latency = heapq.heappop(events)
        if now > idle_s + BATCH_S:
            break
        state = rules.tick(state, settings, in_flight, last_live, now)
        if kind == "arrive":
            state = rules.live_arrived(state, settings, now)
            in_flight += 1
            took = engine.latency_s(int(running), rng)
            at(now + took, "answer", int(running), took)
            at(now + rng.expovariate(rate), "arrive")
        elif kind == "answer":
            state = rules.observe(state, settings, latency, lines, now)
            in_flight -= 1
            last_live = now
            if now >= idle_s + BATCH_S / 2:
                measured.append(latency)
        else:
            running, beyond_since = _follow(engine, state, settings, running, beyond_since, now)
            state = rules.loop_lag(state, settings, engine.lag_s(int(running)), int(running), now)
            at(now + LOOK_S, "look")
        if now >= idle_s + BATCH_S / 2:
            windows.append(rules.limit(state, settings))
    target = state.target_s(settings)
    aim = rules.AIM * (idle_target(engine, settings, seed) if target is None else target)
    fits = room(engine, aim, settings.full, seed)
    return Outcome(target, p95(measured), sum(windows) / len(windows), fits)


def idle_target(engine: Engine, settings: Settings, seed: int) -> float:
    """The target the rules should hold: the SLO, else the ratio times the engine's true p95
    while no batch runs (of 1000 live requests)."""
    if settings.slo_s is not None:
        return settings.slo_s
    rng = random.Random(seed)
    return settings.slo_ratio * p95([engine.latency_s(0, rng) for _ in range(1000)])


def _follow(
    engine: Engine,
    state: State,
    settings: Settings,
    running: float,
    beyond_since: float,
    now: float,
) -> tuple[float, float]:
    """Batch lines in flight LOOK_S later: a free slot is taken at once; above the limit, lines
    leave only as they finish (BATCH_TOKENS steps each) or are preempted."""
    allowed = rules.limit(state, settings)
    if running <= allowed:
        return float(allowed), math.inf
    beyond_since = min(beyond_since, now)
    finished = running * LOOK_S / (BATCH_TOKENS * engine.step_at(int(running)))
    preempted = rules.to_preempt(int(running), state.window, now - beyond_since) / 2
    return max(float(allowed), running - finished - preempted), beyond_since


RATES = (0.5, 2.0, 4.0)
TARGETS = {
    "default": Settings(full=512),
    "1.5x": Settings(full=512, slo_ratio=1.5),
    "3x": Settings(full=512, slo_ratio=3.0),
    "250 ms": Settings(full=512, slo_s=0.25),
}


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_gpu_like_engine_ends_with_the_window_near_full_within_the_target(
    rate: float, target: str
) -> None:
    outcome = simulate(GPU, rate, TARGETS[target], 1)
    assert outcome.target_s is not None
    assert outcome.window >= 0.95 * 512
    assert outcome.p95_s <= outcome.target_s


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_cpu_like_engine_holds_the_target_with_the_window_it_allows(
    rate: float, target: str, seed: int
) -> None:
    """The live p95 within the target, and the batch given at least half the room the aim
    leaves: the rules settle where about one live request in 45 misses the aim, a tighter tail
    than the p95 the room is measured at."""
    outcome = simulate(CPU, rate, TARGETS[target], seed)
    assert outcome.target_s is not None
    assert outcome.p95_s <= outcome.target_s
    assert outcome.window >= outcome.room / 2


# The window a never-idle server reaches, at least, as a share of the same case's with an idle
# spell first: its batch pauses for LEARN_SAMPLES live requests and grows back from a sixteenth,
# later into the measured half (at 0.5 requests/s on the GPU-like engine: 431 of 512), and a
# few lines either way move a window of 2-3 lines (the 1.5x target on the CPU-like engine).
NEVER_IDLE_SHARE = 0.7


def never_idle_case(engine: Engine, rate: float, settings: Settings, seed: int) -> None:
    """A batch from the start and live traffic throughout: no live request ever runs while no
    batch line does, unless the rules pause the batch to learn the target (issue 65: the
    window held a sixteenth under live traffic, and on the CPU-like engine the live p95 at
    1.5x the target). The live p95 is within the true target (twice the engine's idle p95,
    not the learned one), and the window near the one an idle spell first would give."""
    never_idle = simulate(engine, rate, settings, seed, idle_s=0)
    idle_first = simulate(engine, rate, settings, seed)
    assert never_idle.target_s is not None
    assert never_idle.p95_s <= idle_target(engine, settings, seed)
    assert never_idle.window >= NEVER_IDLE_SHARE * idle_first.window


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_never_idle_gpu_like_engine_learns_its_target_and_grows_the_window(
    rate: float, target: str
) -> None:
    never_idle_case(GPU, rate, TARGETS[target], 1)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_never_idle_cpu_like_engine_learns_its_target_and_holds_it(
    rate: float, target: str, seed: int
) -> None:
    never_idle_case(CPU, rate, TARGETS[target], seed)
