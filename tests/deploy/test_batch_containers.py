"""The container `vllm-sagemaker batch` calls: one that wants an API key, the engine a run
starts for --model (on localhost, with a key of its own), one still starting (waited for), and one
that stops mid-run (its answers kept for --resume)."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KEYED_CALLS
from tests.deploy.batching import batch, completion, jsonl, read
from tests.support import cli, processes, waiting
from tests.support.local_http import fronting
from tests.support.servers import SERVE, Server
from vllm_sagemaker.core.config import API_KEY_VAR, BATCH_YIELD_VAR
from vllm_sagemaker.deploy.batch import local_engine
from vllm_sagemaker.deploy.batch.minibatches import LINES_PER_REQUEST


def rerank(custom_id: str) -> dict[str, Any]:
    body = {"query": "cat", "documents": ["a cat sits", "stocks fell"]}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/rerank", "body": body}


@pytest.mark.parametrize(("key", "env", "refusal"), KEYED_CALLS)
def test_a_keyed_container_answers_with_its_key(
    score_server: Server, tmp_path: Path, key: str | None, env: str, refusal: str | None
) -> None:
    """The score server requires API_KEY: with it every line is answered; without it, or with
    another, one line says so and nothing is written (not even the output's folder)."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([rerank(f"k{i}") for i in range(40)]))
    output = tmp_path / "new" / "out.jsonl"
    args = cli.options(
        input_file=str(tmp_path / "in.jsonl"), output_file=str(output), endpoint=score_server.url
    )
    done = cli.run("batch", *args, *(["--api-key", key] if key else []), env={"VLLM_API_KEY": env})
    if refusal is None:
        assert done.returncode == 0, done.stderr
        answers = read(output.read_bytes())
        assert [line["custom_id"] for line in answers] == [f"k{i}" for i in range(40)]
        assert {line["response"]["status_code"] for line in answers} == {200}
        return
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == ["batch: " + refusal.format(url=score_server.url)]
    assert not output.parent.exists()


def test_the_engine_of_a_run_listens_on_localhost_with_its_key() -> None:
    """What `serve` would start for `--model` (its own dry run): vLLM binds 127.0.0.1 whatever
    the options say, and requires the run's key, which travels in environments only: it is in
    neither `serve`'s command line nor vLLM's (any local user can read those), nor printed. With
    no live traffic to serve, its batch window never yields."""
    key = local_engine.new_key()
    extra = ["--max-model-len", "128", "--host", "0.0.0.0"]
    args, env = local_engine.command(SERVE, "/models/m", extra, 8123, key)
    assert env[API_KEY_VAR] == key
    assert env[BATCH_YIELD_VAR] == "false", "no live request reaches it: the window never yields"
    done = processes.run([*args, "--dry-run"], env=env, text=True)
    assert done.returncode == 0, done.stderr
    vllm = json.loads(done.stdout.splitlines()[0])
    assert [vllm[i + 1] for i, arg in enumerate(vllm) if arg == "--host"][-1] == "127.0.0.1"
    assert "--api-key" not in vllm
    assert "VLLM_API_KEY=<from SM_VLLM_API_KEY>" in done.stderr
    assert key not in " ".join([*args, done.stdout, done.stderr])


def test_model_starts_an_engine_for_the_run(models: dict[str, Path], tmp_path: Path) -> None:
    lines = [
        {
            "custom_id": f"e{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"input": f"text {i}"},
        }
        for i in range(20)
    ]
    (tmp_path / "in.jsonl").write_bytes(jsonl(lines))
    done = batch(
        "-i",
        str(tmp_path / "in.jsonl"),
        "-o",
        str(tmp_path / "out.jsonl"),
        "--model",
        str(models["embed"]),
        "--max-model-len",
        "128",
        "--enforce-eager",
    )
    assert done.returncode == 0, done.stderr
    out = read((tmp_path / "out.jsonl").read_bytes())
    assert [len(line["response"]["body"]["data"][0]["embedding"]) for line in out] == [384] * 20


def test_a_starting_container_is_waited_for(chat_server: Server, tmp_path: Path) -> None:
    """A container that answers /ping 503 (its engine loading) is waited for, with one line that
    says so; the test lets it turn ready only once the runner has said it waits (an event, not
    a clock), and then every line is answered. Nothing but /ping was sent before."""
    ids = [f"w{i}" for i in range(40)]
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion(i) for i in ids]))
    log = tmp_path / "stderr.txt"
    with fronting(chat_server.url) as (url, container):
        args = cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(tmp_path / "out.jsonl"),
            endpoint=url,
        )
        with log.open("wb") as stderr:
            runner = processes.spawn([cli.VLLM_SAGEMAKER, "batch", *args], stderr=stderr)
        waiting.until(lambda: b"waiting for" in log.read_bytes(), 60, "no line says it waits")
        assert runner.poll() is None, log.read_text()
        container.ready.set()
        assert runner.wait(300) == 0, log.read_text()
    lines = log.read_text().splitlines()
    assert lines[0] == f"batch: waiting for {url} to be ready (HTTP 503 on /ping) up to 600 s"
    assert len(lines) == 2 and "40 lines answered (40 succeeded" in lines[1]
    answers = read((tmp_path / "out.jsonl").read_bytes())
    assert [line["custom_id"] for line in answers] == ids
    assert {line["response"]["status_code"] for line in answers} == {200}
    assert container.early == []


def test_a_run_stopped_with_answers_kept_names_resume(chat_server: Server, tmp_path: Path) -> None:
    """A container that stops mid-run (it answers the first mini-batch, then 500) stops the run
    once its retries are used up; its answers are kept, so the line names --resume, which
    finishes the file on a container that answers. One mini-batch is in flight at a time
    (--max-inflight 32), so exactly the first is answered."""
    ids = [f"s{i}" for i in range(2 * LINES_PER_REQUEST)]
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion(i) for i in ids]))
    args = cli.options(
        input_file=str(tmp_path / "in.jsonl"),
        output_file=str(tmp_path / "out.jsonl"),
        max_inflight=str(LINES_PER_REQUEST),
        max_retries="0",
    )
    with fronting(chat_server.url, posts_left=1) as (url, container):
        container.ready.set()
        done = batch(*args, "--endpoint", url)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines()[-1] == (
        "batch: HTTP 500: the container stopped (after 0 retries); "
        f"{LINES_PER_REQUEST} lines are answered and kept: run the same command with --resume "
        "to finish"
    )
    resumed = batch(*args, "--endpoint", chat_server.url, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert [line["custom_id"] for line in read((tmp_path / "out.jsonl").read_bytes())] == ids
    assert f"{LINES_PER_REQUEST} from before".encode() in resumed.stderr
