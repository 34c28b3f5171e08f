"""`vllm-sagemaker batch` on real engines: bad lines, error files, kill -9 and resume, S3 through
moto, HTTP GET/PUT, stdin/stdout, and an engine started for the run."""

import gzip
import http.server
import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import boto3
import pytest

from tests import cli, processes, waiting
from tests.json_lines import parse_lines
from tests.local_http import serving
from tests.servers import Server
from vllm_sagemaker.deploy.batch.runner import LINES_PER_REQUEST

# The lines a run held mid-run has answered when the test kills it: three whole mini-batches.
REFUSED = 3 * LINES_PER_REQUEST


def batch(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return cli.run("batch", *args, stdin=stdin)


def files(tmp_path: Path, server: Server) -> list[str]:
    """`-i in.jsonl -o out.jsonl --endpoint URL` in `tmp_path`."""
    return cli.options(
        input_file=str(tmp_path / "in.jsonl"),
        output_file=str(tmp_path / "out.jsonl"),
        endpoint=server.url,
    )


def completion(custom_id: str, prompt: str = "hello", tokens: int = 2) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": tokens}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": body}


def jsonl(records: list[Any]) -> bytes:
    return b"".join(
        (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records
    )


def read(data: bytes) -> list[dict[str, Any]]:
    return parse_lines(data)


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


def line_count(path: Path) -> int:
    """Whole lines in a file (0 while it does not exist)."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


def held_mid_run(runner: subprocess.Popen[bytes], written: int, *outputs: Path) -> None:
    """Until the runner has written `written` lines to `outputs`. With the engine frozen and
    the input made by `refused_first`, nothing more can be written until the engine resumes."""

    def written_so_far() -> bool:
        assert runner.poll() is None, f"the runner ended ({runner.returncode}) before the kill"
        return sum(map(line_count, outputs)) >= written

    waiting.until(written_so_far, 300, f"the runner wrote fewer than {written} lines", 0.01)


def refused_first(lines: list[Any], refused: int = REFUSED) -> list[Any]:
    """`lines` with the first `refused` made ones the server refuses without the engine (whole
    mini-batches of them): with the engine frozen, a run answers exactly those and holds."""
    assert refused % LINES_PER_REQUEST == 0
    return [
        {**line, "body": {**line["body"], "max_tokens": 99999}} if i < refused else line
        for i, line in enumerate(lines)
    ]


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


def test_s3_gzip_input_and_output(chat_server: Server, aws: dict[str, str]) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="batches")
    records = [completion(f"s{i}") for i in range(50)]
    s3.put_object(Bucket="batches", Key="in/requests.jsonl.gz", Body=gzip.compress(jsonl(records)))
    done = batch(
        "-i",
        "s3://batches/in/requests.jsonl.gz",
        "-o",
        "s3://batches/out/results.jsonl",
        "--endpoint",
        chat_server.url,
    )
    assert done.returncode == 0, done.stderr
    body = s3.get_object(Bucket="batches", Key="out/results.jsonl")["Body"].read()
    assert [line["custom_id"] for line in read(body)] == [f"s{i}" for i in range(50)]
    missing = batch("-i", "s3://batches/in/nothing.jsonl", "-o", "-", "--endpoint", chat_server.url)
    assert missing.returncode == 1
    assert b"cannot read s3://batches/in/nothing.jsonl" in missing.stderr


class Recorder(http.server.BaseHTTPRequestHandler):
    """Serves GET /input and records PUTs, answering 201 as some stores do."""

    files: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def do_PUT(self) -> None:
        self.files[self.path] = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_store() -> Iterator[str]:
    with serving(Recorder) as url:
        yield url


def test_http_get_and_put(chat_server: Server, http_store: str) -> None:
    Recorder.files["/in.jsonl"] = jsonl([completion(f"h{i}") for i in range(5)])
    done = batch(
        "-i",
        http_store + "/in.jsonl",
        "-o",
        http_store + "/out.jsonl?sig=1",
        "--endpoint",
        chat_server.url,
    )
    assert done.returncode == 0, done.stderr
    uploaded = read(Recorder.files["/out.jsonl?sig=1"])
    assert [line["custom_id"] for line in uploaded] == [f"h{i}" for i in range(5)]
    missing = batch("-i", http_store + "/none.jsonl", "-o", "-", "--endpoint", chat_server.url)
    assert missing.returncode == 1
    assert b"HTTP 404" in missing.stderr


def test_stdin_to_stdout(chat_server: Server) -> None:
    done = batch(
        "-i",
        "-",
        "-o",
        "-",
        "--endpoint",
        chat_server.url,
        stdin=jsonl([completion("x"), completion("y")]),
    )
    assert done.returncode == 0, done.stderr
    assert [line["custom_id"] for line in read(done.stdout)] == ["x", "y"]


def test_a_missing_input_stops_before_any_engine_starts(tmp_path: Path) -> None:
    done = batch(
        "-i",
        str(tmp_path / "nope.jsonl"),
        "-o",
        str(tmp_path / "out.jsonl"),
        "--model",
        "/no/such/model",
    )
    assert done.returncode == 1
    assert b"cannot read" in done.stderr and b"nope.jsonl" in done.stderr


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
