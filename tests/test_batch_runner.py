"""`vllm-sagemaker batch` on real engines: bad lines, error files, kill -9 and resume, private
staging, S3 through moto, HTTP GET/PUT, stdin/stdout, API keys, and an engine started for the
run."""

import gzip
import http.server
import json
import os
import stat
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import boto3
import pytest

from tests import cli, processes, waiting
from tests.conftest import API_KEY
from tests.json_lines import parse_lines
from tests.local_http import serving
from tests.servers import SERVE, Server
from vllm_sagemaker.deploy.batch import local_engine
from vllm_sagemaker.deploy.batch.runner import LINES_PER_REQUEST
from vllm_sagemaker.deploy.batch.staging import staged_path, why_not_private
from vllm_sagemaker.handler.core.config import API_KEY_VAR

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


def stopped_early(tmp_path: Path, output: str) -> subprocess.CompletedProcess[bytes]:
    """A run to `output` that stops before its first answer (its input does not exist)."""
    done = batch(
        *cli.options(
            input_file=str(tmp_path / "missing.jsonl"),
            output_file=output,
            endpoint="http://127.0.0.1:9",
            output_tmp_dir=str(tmp_path / "staging"),
        )
    )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"batch: cannot read {tmp_path / 'missing.jsonl'}: No such file or directory"
    ]
    return done


@pytest.mark.parametrize("output", ["new/out.jsonl", "new/out.jsonl.gz", "s3://none/out.jsonl"])
def test_a_run_that_stops_before_its_first_answer_creates_nothing(
    tmp_path: Path, output: str
) -> None:
    """No output file, no parent folder, no staging directory."""
    stopped_early(tmp_path, output if output.startswith("s3://") else str(tmp_path / output))
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_stops_before_its_first_answer_keeps_an_earlier_output(tmp_path: Path) -> None:
    earlier = tmp_path / "out.jsonl"
    earlier.write_text("an answer of an earlier run\n")
    stopped_early(tmp_path, str(earlier))
    assert earlier.read_text() == "an answer of an earlier run\n"


def stat_of(kind: int, mode: int, uid: int) -> os.stat_result:
    return os.stat_result((kind | mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    ("found", "problem"),
    [
        (stat_of(stat.S_IFDIR, 0o700, 1000), None),
        (stat_of(stat.S_IFDIR, 0o750, 1000), "is open to other users (mode 750)"),
        (stat_of(stat.S_IFDIR, 0o701, 1000), "is open to other users (mode 701)"),
        (stat_of(stat.S_IFDIR, 0o700, 0), "belongs to another user (uid 0)"),
        (stat_of(stat.S_IFLNK, 0o777, 1000), "is a symbolic link"),
        (stat_of(stat.S_IFREG, 0o600, 1000), "is not a directory"),
    ],
)
def test_what_makes_a_staging_directory_private(found: os.stat_result, problem: str) -> None:
    assert why_not_private(found, 1000) == problem


def test_a_staging_directory_others_can_enter_is_refused(tmp_path: Path) -> None:
    """Another user may have made the directory a run would stage in (its name is known): the
    run refuses it before it reads the input."""
    output = str(tmp_path / "out.jsonl.gz")
    shared = Path(staged_path(output, str(tmp_path))).parent
    shared.mkdir()
    shared.chmod(0o755)
    done = batch(
        *cli.options(
            input_file=str(tmp_path / "missing.jsonl"),
            output_file=output,
            endpoint="http://127.0.0.1:9",
            output_tmp_dir=str(tmp_path),
        )
    )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"batch: the staging directory {shared} is open to other users (mode 755): remove it, "
        "or stage elsewhere with --output-tmp-dir"
    ]
    assert sorted(tmp_path.iterdir()) == [shared]


def rerank(custom_id: str) -> dict[str, Any]:
    body = {"query": "cat", "documents": ["a cat sits", "stocks fell"]}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/rerank", "body": body}


@pytest.mark.parametrize(
    ("key", "env", "refusal"),
    [
        (API_KEY, "", None),
        (None, API_KEY, None),  # VLLM_API_KEY when --api-key is not given
        (
            None,
            "",
            "{url} wants an API key (HTTP 401): pass it with --api-key or set VLLM_API_KEY",
        ),
        (
            "wrong",
            API_KEY,
            "{url} refused the API key (HTTP 401): pass the container's key with --api-key or "
            "VLLM_API_KEY",
        ),
    ],
)
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
    neither `serve`'s command line nor vLLM's (any local user can read those), nor printed."""
    key = local_engine.new_key()
    extra = ["--max-model-len", "128", "--host", "0.0.0.0"]
    args, env = local_engine.command(SERVE, "/models/m", extra, 8123, key)
    assert env[API_KEY_VAR] == key
    done = processes.run([*args, "--dry-run"], env=env, text=True)
    assert done.returncode == 0, done.stderr
    vllm = json.loads(done.stdout.splitlines()[0])
    assert [vllm[i + 1] for i, arg in enumerate(vllm) if arg == "--host"][-1] == "127.0.0.1"
    assert "--api-key" not in vllm
    assert "VLLM_API_KEY=<from SM_VLLM_API_KEY>" in done.stderr
    assert key not in " ".join([*args, done.stdout, done.stderr])


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
