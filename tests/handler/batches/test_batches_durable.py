"""A server-side batch survives its server: SIGTERM and kill -9 mid-run, then a restart on the
same store, answer every custom_id exactly once and never send a finished line again. Live
traffic keeps that promise too: batch lines it preempts run again and are written once (also when
a SIGTERM lands mid-preemption), and batch-marked invocations it throttles (429) are retried by
`vllm-sagemaker batch` until every line is answered once.

The server runs few lines at a time (SAGEMAKER_BATCH_MAX_INFLIGHT). Each test freezes the engine
(vLLM's /pause) before its batch starts, so the stop lands mid-run by construction on any machine,
however fast: the batch's first lines are ones the server refuses without the engine (they are
answered, as error lines), the next ones fill the window and wait in the frozen engine, and nothing
else can move until the test acts."""

import signal
import sqlite3
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.handler.batches.test_batches_api import (
    chat_line,
    client,
    jsonl,
    lines_of,
    refused_line,
    submit,
    wait,
)
from tests.support import cli, processes, reaper, server_deaths, servers, waiting
from tests.support.json_lines import parse_lines
from vllm_sagemaker.handler.batches.admission import rules as admission

TOKENS = 64
IN_FLIGHT = 8
# The lines a batch held mid-run has answered before the test stops its server.
REFUSED = 10
PREEMPTIONS = "vllm_sagemaker:batch_preemptions_total"
THROTTLED = "vllm_sagemaker:batch_throttled_total"


class Restartable:
    """The chat model served on one batch store, started again after each stop."""

    def __init__(self, model: Path, root: Path) -> None:
        self.model, self.root, self.starts = model, root, 0
        self.store = root / "store"
        self.server = self.start()

    def start(self) -> servers.Server:
        self.starts += 1
        server = servers.start(
            f"durable-{self.starts}",
            self.model,
            self.root,
            SAGEMAKER_BATCH_STORE=str(self.store),
            SAGEMAKER_BATCH_MAX_INFLIGHT=str(IN_FLIGHT),
            VLLM_SERVER_DEV_MODE="1",
            # The last test kills the engine twice: once restarted, once past the limit. It
            # sees requests inside vLLM's routes on vLLM's /load (a frozen engine publishes no
            # counts).
            PROCESS_MAX_START_RETRIES="1",
            SM_VLLM_ENABLE_SERVER_LOAD_TRACKING="true",
        )
        server.wait_ready()
        return server

    def restart(self) -> servers.Server:
        self.server = self.start()
        return self.server

    def running(self) -> servers.Server:
        """The server, started again if an earlier test left it stopped."""
        if self.server.process.poll() is not None:
            self.restart()
        return self.server

    def status(self, batch_id: str) -> str:
        with sqlite3.connect(self.store / "store.sqlite3") as db:
            (status,) = db.execute(
                "SELECT status FROM batches WHERE id = ?", (batch_id,)
            ).fetchone()
        return status

    def wait_answered(self, batch_id: str, count: int, timeout: float = 300) -> None:
        """Until `count` result lines are on disk (read there, not from the batch's counts,
        which are published twice a second); `timeout` only guards against a hang."""
        waiting.until(
            lambda: self.answered(batch_id) >= count,
            timeout,
            f"fewer than {count} lines answered",
            0.01,
        )

    def answered(self, batch_id: str) -> int:
        """Whole result lines already on disk for a running batch."""
        directory = self.store / "batches" / batch_id
        return sum(
            (directory / name).read_bytes().count(b"\n")
            for name in ("output.jsonl", "errors.jsonl")
            if (directory / name).exists()
        )


@pytest.fixture(scope="module")
def durable(
    models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Restartable]:
    restartable = Restartable(models["chat"], tmp_path_factory.mktemp("durable"))
    try:
        yield restartable
    finally:
        restartable.server.stop()


def long_batch(sdk: openai.OpenAI, count: int, refused: int = 0) -> str:
    """A batch of `count` lines; the first `refused` are answered at once, without the engine."""
    lines = [refused_line(f"d{i}") for i in range(refused)]
    lines += [chat_line(f"d{i}", tokens=TOKENS, ignore_eos=True) for i in range(refused, count)]
    return submit(sdk, lines).id


def assert_each_line_once(sdk: openai.OpenAI, batch_id: str, count: int, refused: int = 0) -> None:
    """The batch completes with each custom_id once: the first `refused` as error lines."""
    done = wait(sdk, batch_id, timeout=300)
    assert done.status == "completed"
    output, errors = lines_of(sdk, done.output_file_id), lines_of(sdk, done.error_file_id)
    everything = Counter(line["custom_id"] for line in output + errors)
    assert everything == Counter(f"d{i}" for i in range(count))
    assert sorted(line["custom_id"] for line in errors) == sorted(f"d{i}" for i in range(refused))
    assert {line["response"]["body"]["usage"]["completion_tokens"] for line in output} == {TOKENS}
    assert done.request_counts is not None
    assert done.request_counts.model_dump() == {
        "total": count,
        "completed": count - refused,
        "failed": refused,
    }


def stopped_mid_batch(durable: Restartable, count: int) -> tuple[servers.Server, str]:
    """A batch of `count` lines held mid-run by construction: the engine is frozen before it
    starts, its first REFUSED lines are answered (as error lines, without the engine), and the
    next IN_FLIGHT lines wait in the frozen engine. Nothing more can be answered until the test
    acts. The server and the batch's id."""
    server, batch_id = fill_the_window(durable, count, refused=REFUSED)
    durable.wait_answered(batch_id, REFUSED)
    # The refused lines' slots, freed, go to lines that wait in the frozen engine.
    wait_metric(server, "vllm_sagemaker:batch_running", IN_FLIGHT)
    return server, batch_id


def test_sigterm_never_cancels_and_a_restart_finishes(durable: Restartable) -> None:
    server, batch_id = stopped_mid_batch(durable, 200)
    assert server.stop() == 0
    assert durable.status(batch_id) == "in_progress"
    assert_each_line_once(client(durable.restart()), batch_id, 200, refused=REFUSED)


def test_kill_9_then_restart_runs_only_what_was_not_answered(durable: Restartable) -> None:
    server, batch_id = stopped_mid_batch(durable, 300)
    processes.kill(server.process)
    assert durable.answered(batch_id) == REFUSED
    server = durable.restart()
    assert_each_line_once(client(server), batch_id, 300, refused=REFUSED)
    # Every line the engine can run ran once, all on the new server.
    assert server.metric("vllm:request_success_total") == 300 - REFUSED


# A real-time chat; and one the engine refuses at once, frozen or not (still live traffic).
LIVE = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
REFUSED_LIVE = {**LIVE, "max_tokens": 99999}


def live_request(
    server: servers.Server, body: dict | bytes
) -> tuple[threading.Thread, list[httpx.Response | httpx.HTTPError]]:
    """One real-time call of /invocations (a JSON body, or raw bytes such as JSON Lines) on a
    thread: it waits while the engine is frozen. Its outcome, the answer or the error the client
    met reading it, lands in the list."""
    outcome: list[httpx.Response | httpx.HTTPError] = []
    sent = {"content": body} if isinstance(body, bytes) else {"json": body}

    def send() -> None:
        try:
            outcome.append(httpx.post(server.url + "/invocations", timeout=300, **sent))
        except httpx.HTTPError as error:
            outcome.append(error)

    thread = threading.Thread(target=send)
    thread.start()
    return thread, outcome


def wait_metric(server: servers.Server, name: str, at_least: float, timeout: float = 120) -> float:
    """Until the server's metric reaches `at_least`; `timeout` only guards against a hang."""

    def reached() -> float | None:
        value = server.metric(name)
        return value if value >= at_least else None

    return waiting.until(reached, timeout, lambda: f"{name} stayed at {server.metric(name)}")


def fill_the_window(
    durable: Restartable, count: int, refused: int = 0
) -> tuple[servers.Server, str]:
    """A batch of `count` lines (see `long_batch`) on a frozen engine, once its lines fill the
    whole batch window (they wait in the engine); the server and the batch's id."""
    server = durable.running()
    # An earlier live request keeps the window small until a quiet spell has passed.
    wait_metric(server, "vllm_sagemaker:batch_window", IN_FLIGHT)
    server.pause()
    batch_id = long_batch(client(server), count, refused)
    wait_metric(server, "vllm_sagemaker:batch_running", IN_FLIGHT)
    return server, batch_id


def preempt_mid_batch(
    durable: Restartable, count: int, live_body: dict
) -> tuple[str, threading.Thread]:
    """A full batch window on a frozen engine, then a live request: the window drops to
    `under_live`, and the lines still beyond it after PREEMPT_AFTER_S are preempted (aborted on
    the engine, queued again). The batch's id and the live request's thread."""
    server, batch_id = fill_the_window(durable, count)
    # The counter keeps what earlier tests on this server preempted: wait for this batch's own.
    preempted = server.metric(PREEMPTIONS)
    live, _ = live_request(server, live_body)
    under_live = admission.Settings(full=IN_FLIGHT).under_live
    wait_metric(server, PREEMPTIONS, preempted + IN_FLIGHT - under_live)
    return batch_id, live


def test_a_preempted_line_runs_again_and_is_written_once(durable: Restartable) -> None:
    finished_before = durable.running().metric("vllm:request_success_total")
    batch_id, live = preempt_mid_batch(durable, 60, LIVE)
    server = durable.server
    httpx.post(server.url + "/resume", timeout=60).raise_for_status()
    assert_each_line_once(client(server), batch_id, 60)
    live.join()
    # The engine finished each line once (plus the live request): no preempted line was
    # finished on the engine and then run again.
    assert server.metric("vllm:request_success_total") - finished_before == 60 + 1


def test_sigterm_during_preemption_keeps_exactly_once(durable: Restartable) -> None:
    """The live request that preempts the lines is one the engine refuses, answered at once: a
    request left in a frozen engine is never answered through vLLM's shutdown, which then waits
    for its connection forever (a state only /pause reaches; a running engine's requests get
    500 and the server stops within a second)."""
    batch_id, live = preempt_mid_batch(durable, 60, REFUSED_LIVE)
    live.join()
    assert durable.server.stop() == 0
    assert durable.status(batch_id) == "in_progress"
    assert_each_line_once(client(durable.restart()), batch_id, 60)


def test_the_runner_waits_out_429s_and_answers_every_line_once(
    durable: Restartable, tmp_path: Path
) -> None:
    """A server-side batch fills the window on a frozen engine, so the runner's batch-marked
    mini-batches find no room and get 429 with Retry-After. With --max-retries 0, only a 429
    that is not counted as a retry lets the run finish."""
    source = tmp_path / "in.jsonl"
    source.write_bytes(jsonl([chat_line(f"r{i}") for i in range(30)]))
    output = tmp_path / "out.jsonl"
    server, batch_id = fill_the_window(durable, 40)
    # The counter keeps what earlier tests on this server throttled: wait for this run's own.
    throttled = server.metric(THROTTLED)
    try:
        command = ["batch", "-i", str(source), "-o", str(output), "--endpoint", server.url]
        runner = processes.spawn(
            [cli.VLLM_SAGEMAKER, *command, "--max-retries", "0"],
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_metric(server, THROTTLED, throttled + 1)
    finally:
        httpx.post(server.url + "/resume", timeout=60).raise_for_status()
    _, stderr = runner.communicate(timeout=600)
    assert runner.returncode == 0, stderr
    assert "calls throttled for live traffic" in stderr
    answers = parse_lines(output.read_bytes())
    assert [line["custom_id"] for line in answers] == [f"r{i}" for i in range(30)]
    assert all(line["response"]["status_code"] == 200 for line in answers)
    assert_each_line_once(client(server), batch_id, 40)


def ping_fails(server: servers.Server) -> bool:
    try:
        return httpx.get(server.url + "/ping", timeout=10).status_code != 200
    except httpx.HTTPError:
        return True


def in_vllm(server: servers.Server) -> int:
    """Requests inside vLLM's inference routes now (vLLM's server load tracking)."""
    return httpx.get(server.url + "/load", timeout=60).json()["server_load"]


def test_a_dead_engine_restarts_in_place_its_batch_finishes_and_nothing_is_dropped(
    durable: Restartable,
) -> None:
    """The engine's worker dies of SIGILL mid-batch (as it did on AMX hosts, issue 37): its
    Python stacks and the death are in the log, and the death is what a failing test would be
    told; `serve` (the same process) kills what is left of vLLM and starts it again; /ping
    fails, then answers 200; nothing of the old server is left; a chat succeeds; the batch
    finishes with every custom_id once; /metrics counts the restart.
    Then a real-time request and a mini-batch wait in the frozen engine and the engine core is
    killed again, with nobody pinging: the request gets a 5xx, the mini-batch's answer is cut
    off (both are sent again by SageMaker), and the death is past PROCESS_MAX_START_RETRIES=1, so
    `serve` exits 1 with nothing left running."""
    server, batch_id = stopped_mid_batch(durable, 100)
    old = server.family()
    since = server.log_path.stat().st_size
    server.worker().send_signal(signal.SIGILL)
    waiting.until(lambda: ping_fails(server), 120, "/ping kept answering 200")
    server.wait_ready()
    assert [p.pid for p in old[1:] if p.is_running()] == []
    assert old[0].is_running(), "the same serve process restarted vLLM"
    chat = client(server).chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert chat.choices[0].message.content is not None
    assert_each_line_once(client(server), batch_id, 100, refused=REFUSED)
    assert server.metric("vllm_sagemaker:server_restarts") == 1
    log = server.log_path.read_text()
    assert log.count("serve: vLLM exited with status 1; its processes are gone; starting it") == 1
    death = server.log_path.read_bytes()[since:].decode()
    assert "Fatal Python error: Illegal instruction" in server_deaths.fault_stack(death)
    # vLLM names the worker; its exit code, read before the worker is reaped, may be None.
    assert "Worker proc VllmWorker-0 died unexpectedly" in death
    assert {d.signal for d in server_deaths.deaths_in(death) if d.crash} == {"SIGILL"}

    server.pause()
    live, live_outcome = live_request(server, LIVE)
    records = jsonl([LIVE, LIVE])
    mini_batch, mini_batch_outcome = live_request(server, records)
    waiting.until(lambda: in_vllm(server) >= 3, 120, "the requests never reached vLLM's routes")
    family = server.family()
    server.engine_core().kill()
    live.join()
    mini_batch.join()
    [answer] = live_outcome
    assert isinstance(answer, httpx.Response) and answer.status_code >= 500, answer
    [cut] = mini_batch_outcome
    assert isinstance(cut, httpx.RemoteProtocolError), cut
    assert server.process.wait(timeout=300) == 1
    assert reaper.session_members(server.process.pid) == []
    assert not [p for p in family if p.is_running()]
    assert "PROCESS_MAX_START_RETRIES allows within 3600 s" in server.log_path.read_text()
