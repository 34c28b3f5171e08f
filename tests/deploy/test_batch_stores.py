"""Where `vllm-sagemaker batch` reads and writes, on a real engine: S3 (gzip) through moto,
HTTP GET and PUT, stdin and stdout; a missing input or bucket is one line."""

import gzip
import http.server
from collections.abc import Iterator
from typing import ClassVar

import boto3
import pytest

from tests.deploy.batching import batch, completion, jsonl, read
from tests.support.local_http import serving
from tests.support.servers import Server


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
    for uri, gone in [
        ("s3://batches/in/nothing.jsonl", "does not exist"),
        ("s3://no-bucket/in.jsonl", "no-bucket does not exist"),
    ]:
        missing = batch("-i", uri, "-o", "-", "--endpoint", chat_server.url)
        assert missing.returncode == 1
        (line,) = missing.stderr.decode().splitlines()
        assert line.startswith(f"batch: cannot read {uri}: ") and line.endswith(gone), line


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
