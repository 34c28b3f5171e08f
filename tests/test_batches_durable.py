"""A server-side batch survives its server: SIGTERM and kill -9 mid-run, then a restart on the
same store, answer every custom_id exactly once and never send a finished line again.

The server runs few lines at a time (SAGEMAKER_BATCH_MAX_INFLIGHT), so a batch finishes in many
rounds, and the tests freeze its engine (vLLM's /pause) as soon as the first lines are on disk, so
the stop lands mid-run on any machine, however fast."""

import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests import processes, servers
from tests.test_batches_api import chat_line, client, lines_of, submit, wait

TOKENS = 64
IN_FLIGHT = 8


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
        deadline = time.monotonic() + timeout
        while self.answered(batch_id) < count:
            assert time.monotonic() < deadline, f"fewer than {count} lines answered"
            time.sleep(0.01)

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


def long_batch(sdk: openai.OpenAI, count: int) -> str:
    lines = [chat_line(f"d{i}", tokens=TOKENS, ignore_eos=True) for i in range(count)]
    return submit(sdk, lines).id


def assert_each_line_once(sdk: openai.OpenAI, batch_id: str, count: int) -> None:
    done = wait(sdk, batch_id, timeout=300)
    assert done.status == "completed"
    output = lines_of(sdk, done.output_file_id)
    assert Counter(line["custom_id"] for line in output) == Counter(f"d{i}" for i in range(count))
    assert {line["response"]["body"]["usage"]["completion_tokens"] for line in output} == {TOKENS}
    assert done.request_counts is not None
    assert done.request_counts.model_dump() == {"total": count, "completed": count, "failed": 0}


def test_sigterm_never_cancels_and_a_restart_finishes(durable: Restartable) -> None:
    """The engine is frozen before the stop, so the stop lands mid-batch on any machine."""
    sdk = client(durable.running())
    batch_id = long_batch(sdk, 200)
    durable.wait_answered(batch_id, 10)
    durable.server.pause()
    assert durable.server.stop() == 0
    assert durable.status(batch_id) == "in_progress"
    assert_each_line_once(client(durable.restart()), batch_id, 200)


def test_kill_9_then_restart_runs_only_what_was_not_answered(durable: Restartable) -> None:
    sdk = client(durable.running())
    batch_id = long_batch(sdk, 300)
    durable.wait_answered(batch_id, 20)
    durable.server.pause()
    processes.kill(durable.server.process)
    answered = durable.answered(batch_id)
    assert 20 <= answered < 300
    server = durable.restart()
    assert_each_line_once(client(server), batch_id, 300)
    assert server.metric("vllm:request_success_total") == 300 - answered
