"""A live request's prefill runs in an engine step of its own while a batch runs (the
live-first scheduler, `handler.engine.live_first`), on a real engine, proven by the engine's
steps rather than by timing.

The server runs the scheduler with the timeline probe on top (`benchmarks.timeline_probe`, the
same notes the timeline benchmark reads): every step notes how many sequences it scheduled and
how many of them were batch work. The engine is frozen while batch lines run, a live request is
queued behind them, and the engine is let go: the step that starts the live request holds no
batch work, the next ones do again, and every batch line is answered once. With vLLM's own
scheduler (`TIMELINE_PLAIN=1`) the live request's first step carries every running batch
sequence, and the test fails.
"""

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import ROOT
from tests.handler.batches.test_batches_api import chat_line, client, submit
from tests.support import model_factory, servers, waiting
from vllm_sagemaker.handler.engine.live_first import holds_batch, reserve

LIVE_ID = "live-probe"
BATCH_LINES = 8
# Tokens a batch line generates: as many as the tiny model's 4,096-token context leaves its
# prompt, so the test has the whole batch (about 4,000 engine steps) to freeze the engine in.
LINE_TOKENS = 4000
# Scenarios tried before the test gives up on freezing the engine while batch work is in it.
ATTEMPTS = 5


@pytest.mark.parametrize(
    ("live_waiting", "live_prefilling", "free_slots", "held"),
    [
        (False, False, 10, False),  # no live request: the batch steps
        (True, False, 10, True),  # one waits and fits: its prefill runs alone
        (False, True, 0, True),  # one is in its (chunked) prefill
        (True, False, 0, False),  # one waits but no slot is free: the batch frees one
        (True, True, 0, True),
    ],
)
def test_when_batch_work_sits_a_step_out(
    live_waiting: bool, live_prefilling: bool, free_slots: int, held: bool
) -> None:
    assert holds_batch(live_waiting, live_prefilling, free_slots) == held


@pytest.mark.parametrize(("max_running", "kept"), [(256, 16), (1024, 64), (8, 1), (1, 1)])
def test_batch_lines_leave_slots_for_live_requests(max_running: int, kept: int) -> None:
    assert reserve(max_running) == kept


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[servers.Server, Path]]:
    root = tmp_path_factory.mktemp("live-first")
    notes = root / "notes"
    notes.mkdir()
    model = model_factory.make_chat_model(root / "chat")
    env = {
        "SM_VLLM_SCHEDULER_CLS": "benchmarks.timeline_probe.TimelineScheduler",
        "TIMELINE_DIR": str(notes),
        "PYTHONPATH": str(ROOT),
        # vLLM's /pause and /resume.
        "VLLM_SERVER_DEV_MODE": "1",
    }
    with servers.running({"probed": model}, root, {"probed": env}) as running:
        yield running["probed"], notes


def noted(directory: Path) -> list[dict[str, Any]]:
    found = [
        json.loads(line)
        for path in directory.glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line
    ]
    return sorted(found, key=lambda event: event["t"])


def added(directory: Path, live_id: str) -> bool:
    """The engine has queued the live request."""
    return any(e["event"] == "engine_add" and live_id in e["id"] for e in noted(directory))


def batch_stepped(directory: Path, since: float) -> bool:
    """The engine has run a step with batch work in it since `since` (the probe notes the
    machine-wide monotonic clock)."""
    return any(e["event"] == "step" and e["batch"] and e["t"] > since for e in noted(directory))


def live_beside_a_batch(
    server: servers.Server, notes: Path, live_id: str
) -> tuple[str, dict[str, Any]]:
    """A batch runs; as soon as the engine steps with it, the engine is frozen, a live request
    is queued and the engine is let go. The batch's id, and the probe's note of the live
    request's arrival in the engine."""
    started = time.monotonic()
    lines = [chat_line(f"r{i}", LINE_TOKENS, min_tokens=LINE_TOKENS) for i in range(BATCH_LINES)]
    batch = submit(client(server), lines)
    # The probe's own notes, not /metrics: a scrape took seconds on a busy machine, longer than
    # the whole batch.
    waiting.until(lambda: batch_stepped(notes, started), 300, "no batch line ran", 0.02)
    answered: list[httpx.Response] = []
    with server.paused():
        live = threading.Thread(
            target=lambda: answered.append(
                httpx.post(
                    server.url + "/invocations",
                    json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                    headers={"X-Amzn-SageMaker-Inference-Id": live_id},
                    timeout=300,
                )
            )
        )
        live.start()
        waiting.until(
            lambda: added(notes, live_id), 120, "the engine never queued the live request"
        )
    live.join()
    assert answered[0].status_code == 200, answered[0].text
    arrival = next(e for e in noted(notes) if e["event"] == "engine_add" and live_id in e["id"])
    return batch.id, arrival


def test_live_prefill_runs_without_batch_work(probed: tuple[servers.Server, Path]) -> None:
    """The freeze lands while batch work is in the engine on a machine of any speed, except
    when the machine stalls for as long as the whole batch (seen: 10-25 s on a 2-core VM): then
    the scenario runs again with a new batch."""
    server, notes = probed
    sdk = client(server)
    for attempt in range(ATTEMPTS):
        live_id = f"{LIVE_ID}-{attempt}"
        batch_id, queued = live_beside_a_batch(server, notes, live_id)
        # Batch work was in the engine, running or queued, when the live request arrived (vLLM's
        # own scheduler would put either into the live request's first step).
        if queued["running"] + queued["waiting_batch"] > 0:
            break
    else:
        pytest.fail(f"the batch had finished before the engine froze, {ATTEMPTS} times")
    steps = [e for e in noted(notes) if e["event"] == "step" and e["seqs"]]
    first = next(i for i, step in enumerate(steps) if any(live_id in r for r in step["live"]))
    assert steps[first]["batch"] == 0, steps[first]
    assert steps[first]["seqs"] == 1, steps[first]
    # The next step holds the batch again: every sequence that was running keeps its slot
    # (batch lines still reaching the engine one by one may join it; how many had arrived when
    # it froze depends on the machine).
    assert steps[first + 1]["batch"] >= queued["running"], (steps[first + 1], queued)

    waiting.until(
        lambda: sdk.batches.retrieve(batch_id).status == "completed", 600, "batch not completed"
    )
    done = sdk.batches.retrieve(batch_id)
    assert done.output_file_id is not None
    output = sdk.files.content(done.output_file_id).text.splitlines()
    counts = Counter(json.loads(line)["custom_id"] for line in output)
    assert counts == Counter(f"r{i}" for i in range(BATCH_LINES))
