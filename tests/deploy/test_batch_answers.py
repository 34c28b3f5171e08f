"""`vllm-sagemaker batch` on a real engine answers every line once: bad lines become error
lines, failed ones go to the error file, and a run killed with -9 resumes, its answers staged in a
private file when the output is compressed."""

import gzip
import stat
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from tests.deploy.batching import (
    REFUSED,
    batch,
    completion,
    held_mid_run,
    jsonl,
    line_count,
    read,
    refused_first,
)
from tests.support import cli, processes
from tests.support.servers import Server
from vllm_sagemaker.deploy.batch.minibatches import LINES_PER_REQUEST
from vllm_sagemaker.deploy.batch.staging import staged_path


def files(tmp_path: Path, server: Server) -> list[str]:
    """`-i in.jsonl -o out.jsonl --endpoint URL` in `tmp_path`."""
    return cli.options(
        input_file=str(tmp_path / "in.jsonl"),
        output_file=str(tmp_path / "out.jsonl"),
        endpoint=server.url,
    )


def four_hundred_lines() -> list[Any]:
    records: list[Any] = [completion(f"r{i}") for i in range(400)]
    records[10] = b"{this is not json"
    records[20] = completion("r5")
    records[30] = {**completion("r30"), "url": "/v1/no-such-route"}
    return records


def test_bad_lines_become_error_lines(chat_server: Server, tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(jsonl(four_hundred_lines()))
    done = batch(
        *files(tmp_path, chat_server),
    )
    assert done.returncode == 0, done.stderr
    lines = read((tmp_path / "out.jsonl").read_bytes())
    assert len(lines) == 400
    good = [line for line in lines if line["error"] is None]
    assert len(good) == 397
    assert all(line["response"]["status_code"] == 200 for line in good)
    assert Counter(line["custom_id"] for line in good) == Counter(
        f"r{i}" for i in range(400) if i not in (10, 20, 30)
    )
    errors = {line["error"]["code"]: line for line in lines if line["error"] is not None}
    assert set(errors) == {"invalid_json_line", "duplicate_custom_id", "invalid_url"}
    assert errors["invalid_json_line"]["custom_id"] is None
    assert errors["invalid_json_line"]["error"]["message"].startswith("line 11: ")
    assert errors["duplicate_custom_id"]["custom_id"] == "r5"
    assert errors["invalid_url"]["custom_id"] == "r30"
    assert [line["custom_id"] for line in lines[:3]] == ["r0", "r1", "r2"]
    assert b"397 succeeded, 3 failed" in done.stderr


def test_failed_lines_go_to_the_error_file(chat_server: Server, tmp_path: Path) -> None:
    records = [completion("a"), completion("b", tokens=99999), b"[]"]
    (tmp_path / "in.jsonl").write_bytes(jsonl(records))
    done = batch(
        *files(tmp_path, chat_server),
        "--error-file",
        str(tmp_path / "errors.jsonl"),
    )
    assert done.returncode == 0, done.stderr
    assert [line["custom_id"] for line in read((tmp_path / "out.jsonl").read_bytes())] == ["a"]
    errors = read((tmp_path / "errors.jsonl").read_bytes())
    assert errors[0]["custom_id"] == "b" and errors[0]["response"]["status_code"] == 400
    assert errors[1]["error"]["code"] == "invalid_json_line"


def test_kill_9_then_resume_answers_every_line_once(chat_server: Server, tmp_path: Path) -> None:
    """The engine is frozen before the run starts, so the kill lands mid-run by construction:
    the run has answered its first REFUSED lines and holds the next ones in the engine."""
    lines = [completion(f"r{i}", f"line {i}", tokens=24) for i in range(1500)]
    (tmp_path / "in.jsonl").write_bytes(jsonl(refused_first(lines)))
    args = [
        *files(tmp_path, chat_server),
        "--max-inflight",
        "64",
    ]
    output = tmp_path / "out.jsonl"
    with chat_server.paused():
        runner = processes.spawn([cli.VLLM_SAGEMAKER, "batch", *args], stderr=subprocess.DEVNULL)
        held_mid_run(runner, REFUSED, output)
        processes.kill(runner)
    assert line_count(output) == REFUSED
    with output.open("ab") as torn:
        torn.write(b'{"id": "batch_req_torn", "custom_id": "r')
    done = batch(*args, "--resume")
    assert done.returncode == 0, done.stderr
    answers = read(output.read_bytes())
    assert [line["custom_id"] for line in answers] == [f"r{i}" for i in range(1500)]
    statuses = [line["response"]["status_code"] for line in answers]
    assert statuses == [400] * REFUSED + [200] * (1500 - REFUSED)
    assert f"{REFUSED} from before".encode() in done.stderr


def test_a_staged_output_is_private_and_gone_once_delivered(
    chat_server: Server, tmp_path: Path
) -> None:
    """A `.gz` output is staged: held mid-run (the engine frozen once the refused lines are
    answered), its answers are in a 0600 file in a 0700 directory and the output does not exist
    yet; killed there and resumed, the run delivers every line once and removes both."""
    lines = [completion(f"r{i}") for i in range(REFUSED + LINES_PER_REQUEST)]
    (tmp_path / "in.jsonl").write_bytes(jsonl(refused_first(lines)))
    output, staging = tmp_path / "out.jsonl.gz", tmp_path / "staging"
    args = [
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(output),
            endpoint=chat_server.url,
            output_tmp_dir=str(staging),
            max_inflight="64",
        )
    ]
    staged = Path(staged_path(str(output), str(staging)))
    with chat_server.paused():
        runner = processes.spawn([cli.VLLM_SAGEMAKER, "batch", *args], stderr=subprocess.DEVNULL)
        held_mid_run(runner, REFUSED, staged)
        assert stat.S_IMODE(staged.stat().st_mode) == 0o600
        assert stat.S_IMODE(staged.parent.stat().st_mode) == 0o700
        assert not output.exists()
        processes.kill(runner)
    done = batch(*args, "--resume")
    assert done.returncode == 0, done.stderr
    answers = read(gzip.decompress(output.read_bytes()))
    assert [line["custom_id"] for line in answers] == [f"r{i}" for i in range(len(lines))]
    assert f"{REFUSED} from before".encode() in done.stderr
    assert list(staging.iterdir()) == []
