"""`vllm-sagemaker batch` on real engines: bad lines, error files, kill -9 and resume, private
staging, S3 through moto, HTTP GET/PUT, stdin/stdout, API keys, and an engine started for the
run."""

import gzip
import http.server
import json
import os
import socket
import ssl
import stat
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import boto3
import httpx
import pytest

from tests.conftest import KEYED_CALLS
from tests.support import cli, processes, waiting
from tests.support.json_lines import parse_lines
from tests.support.local_http import fronting, serving
from tests.support.servers import SERVE, Server, free_port
from tests.support.waiting import A_DAY_S
from vllm_sagemaker.deploy.base import invoke
from vllm_sagemaker.deploy.base.invoke import Readiness
from vllm_sagemaker.deploy.batch import local_engine
from vllm_sagemaker.deploy.batch.minibatches import LINES_PER_REQUEST
from vllm_sagemaker.deploy.batch.run import stopped
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


def caused(error: Exception, cause: BaseException) -> Exception:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("outcome", "state", "why"),
    [
        (200, Readiness.READY, "HTTP 200 on /ping"),
        # the engine is loading, or a proxy in front waits for the container
        (503, Readiness.STARTING, "HTTP 503 on /ping"),
        (502, Readiness.STARTING, "HTTP 502 on /ping"),
        (504, Readiness.STARTING, "HTTP 504 on /ping"),
        # something answers, but not a container: no wait makes it one
        (404, Readiness.NOBODY, "HTTP 404 on /ping"),
        (401, Readiness.NOBODY, "HTTP 401 on /ping"),
        # connected, no answer yet (vLLM binds its port before its server accepts)
        (httpx.ReadTimeout("timed out"), Readiness.STARTING, "no answer to /ping in time"),
        # closed unanswered (Docker's port proxy before the container listens)
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            Readiness.STARTING,
            "the connection closed without an answer",
        ),
        (
            httpx.ReadError("[Errno 104] Connection reset by peer"),
            Readiness.STARTING,
            "the connection closed without an answer",
        ),
        (
            caused(
                httpx.ConnectError("All connection attempts failed"),
                ConnectionRefusedError(111, "Connect call failed"),
            ),
            Readiness.NOBODY,
            "connection refused",
        ),
        (
            caused(
                httpx.ConnectError("[Errno -2] Name or service not known"),
                socket.gaierror(-2, "Name or service not known"),
            ),
            Readiness.NOBODY,
            "host not found: Name or service not known",
        ),
        (
            caused(
                httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number"),
                ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            ),
            Readiness.NOBODY,
            "TLS failed ([SSL: WRONG_VERSION_NUMBER] wrong version number): is it http:// "
            "rather than https://?",
        ),
        (
            httpx.ConnectTimeout("timed out"),
            Readiness.NOBODY,
            "no connection in time: is the host up and the port open?",
        ),
        (
            httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'."),
            Readiness.NOBODY,
            "Request URL has an unsupported protocol 'ftp://'.",
        ),
    ],
)
def test_what_a_ping_says_of_a_container(
    outcome: int | Exception, state: Readiness, why: str
) -> None:
    """Starting is worth a wait; nobody there is not, and fails at once."""
    assert invoke.readiness(outcome) == (state, why)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://localhost:8080", None),
        ("https://runtime.example.com/", None),
        ("http://[::1]:8080", None),
        ("127.0.0.1:18931", "it has no scheme: write http://127.0.0.1:18931"),
        ("localhost:8080", "it has no scheme: write http://localhost:8080"),
        ("ftp://host/", "ftp:// is not http:// or https://"),
        ("http://", "it has no host"),
        ("http://[::1", "it is not a URL (Invalid port: ':1')"),
    ],
)
def test_what_makes_a_url_unfit_for_a_container(url: str, problem: str | None) -> None:
    assert invoke.url_problem(url) == problem


@pytest.mark.parametrize(
    ("answered", "line"),
    [
        (0, "no container at http://x (connection refused)"),
        (
            96,
            "no container at http://x (connection refused); 96 lines are answered and kept: run "
            "the same command with --resume to finish",
        ),
    ],
)
def test_resume_is_named_only_when_answers_are_kept(answered: int, line: str) -> None:
    """With no answer written, --resume would do what a plain run does."""
    error = invoke.NotReady("no container at http://x (connection refused)")
    assert str(stopped(error, answered)) == line


def test_nobody_at_the_endpoint_is_one_line_at_once(tmp_path: Path) -> None:
    """A port where nothing listens is a wrong URL, not a container starting: the run stops at
    once, creates nothing, and does not suggest --resume, which could not help. The wait allowed
    is a day, so a run that took the refusal for a starting container would never end here (the
    suite's timeout fails it): it ends only by the nobody-there rule, with its line."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    dead = f"http://127.0.0.1:{free_port()}"
    done = batch(
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(tmp_path / "out.jsonl"),
            endpoint=dead,
            wait_ready=str(A_DAY_S),
        )
    )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"batch: no container at {dead} (connection refused): check the URL, and that the "
        "container runs"
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.jsonl"]


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


def no_aws(home: Path) -> dict[str, str]:
    """This process's environment without any AWS setting: no credentials, no region."""
    return {
        **{name: value for name, value in os.environ.items() if not name.startswith("AWS_")},
        "HOME": str(home),
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["-o", "/proc/out.jsonl"],
            "cannot write /proc/out.jsonl: no file can be created in /proc",
        ),
        (["-o", "{tmp}/data"], "cannot write {tmp}/data: it is a directory; give a file's path"),
        (["-o", "{tmp}/data/"], "cannot write {tmp}/data/: it is a directory; give a file's path"),
        (["-o", "{tmp}/new/"], "cannot write {tmp}/new/: a file's path cannot end in /"),
        (
            ["--error-file", "/proc/errors.jsonl"],
            "cannot write /proc/errors.jsonl: no file can be created in /proc",
        ),
        (
            ["-o", "{tmp}/out.jsonl.gz", "--output-tmp-dir", "/proc/staging"],
            "cannot write /proc/staging/vllm-sagemaker-batch-",
        ),
        (["-i", "{tmp}/data"], "cannot read {tmp}/data: Is a directory"),
        (["-i", "{tmp}/plain.jsonl.gz"], "cannot read {tmp}/plain.jsonl.gz: Not a gzipped file"),
    ],
)
def test_an_unusable_input_or_output_is_one_line_before_any_work(
    tmp_path: Path, args: list[str], line: str
) -> None:
    """Found before the container is called (none listens here) and before anything is
    created: exit status 1 and one line."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    (tmp_path / "plain.jsonl.gz").write_bytes(jsonl([completion("a")]))
    (tmp_path / "data").mkdir()
    named = {"-i": str(tmp_path / "in.jsonl"), "-o": str(tmp_path / "out.jsonl")}
    given = [arg.format(tmp=tmp_path) for arg in args]
    for option, value in named.items():
        if option not in given:
            given += [option, value]
    done = batch(*given, "--endpoint", f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 1
    (said,) = done.stderr.decode().splitlines()
    assert said.startswith("batch: " + line.format(tmp=tmp_path)), said
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "data",
        "in.jsonl",
        "plain.jsonl.gz",
    ]
    assert list((tmp_path / "data").iterdir()) == []


def test_an_endpoint_without_a_region_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    args = ["-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")]
    done = processes.run(
        [cli.VLLM_SAGEMAKER, "batch", *args, "--sagemaker-endpoint", "llama"],
        env=no_aws(tmp_path),
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "batch: endpoint llama: no AWS region: give --region, or set AWS_REGION "
        "(or AWS_DEFAULT_REGION)"
    ]
