"""The client's one error path: an error a user can cause is one line; a bug keeps its traceback."""

import subprocess
from pathlib import Path
from typing import Any

import botocore.exceptions
import httpx
import pytest

from tests.support import cli
from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.errors import line_of

NOT_AWS = "not AWS's answer: check AWS_ENDPOINT_URL and any proxy on the way (HTTPS_PROXY)"
# What every answer of AWS carries, and no proxy's page.
AWS_HEADERS = {"x-amz-request-id": "4442587FB7D0A2F9", "content-type": "application/xml"}
PAGE = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


def answer(
    code: str, message: str, operation: str = "CreateModel", headers: Any = None, **error: str
) -> Exception:
    """The ClientError botocore raises for an error answer, with the answer's headers."""
    response = {
        "Error": {"Code": code, "Message": message, **error},
        "ResponseMetadata": {"HTTPHeaders": headers or {}},
    }
    return botocore.exceptions.ClientError(response, operation)


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            FileNotFoundError(2, "No such file", "/proc/x/out.jsonl"),
            "/proc/x/out.jsonl does not exist (nor does /proc/x)",
        ),
        (FileNotFoundError(2, "No such file", "/tmp"), "/tmp does not exist"),
        (
            IsADirectoryError(21, "Is a directory", "data"),
            "data is a directory: give a file's path",
        ),
        (PermissionError(13, "Permission denied", "/root/x"), "/root/x: permission denied"),
        (
            NotADirectoryError(20, "Not a directory", "a/b"),
            "a/b: a part of the path is not a directory",
        ),
        (storage.Unreachable("cannot read s3://b/k: gone"), "cannot read s3://b/k: gone"),
        (
            subprocess.CalledProcessError(1, ["docker", "build", "."]),
            "docker build . failed with exit status 1",
        ),
        (subprocess.CalledProcessError(-9, "make"), "make was stopped by SIGKILL"),
        (
            botocore.exceptions.NoRegionError(),
            "no AWS region: give --region, or set AWS_REGION (or AWS_DEFAULT_REGION)",
        ),
        (
            answer("ValidationException", "bad name"),
            "AWS refused CreateModel: ValidationException: bad name",
        ),
        # A proxy's page, or moto's for what it does not implement: its status, never "AWS
        # refused" (botocore makes the status's phrase the message).
        (
            answer("502", "Bad Gateway", "DescribeEndpoint"),
            f"DescribeEndpoint was answered HTTP 502 Bad Gateway, {NOT_AWS}",
        ),
        (
            answer("501", "Not Implemented", "DescribeEndpoint"),
            f"DescribeEndpoint was answered HTTP 501 Not Implemented, {NOT_AWS}",
        ),
        (
            answer("500", PAGE),
            f"CreateModel was answered HTTP 500 Internal Server Error, {NOT_AWS}",
        ),
        (
            answer("404", "Not Found", "HeadObject"),
            f"HeadObject was answered HTTP 404 Not Found, {NOT_AWS}",
        ),
        # S3: what does not exist (a HEAD's answer has no body: its status and AWS's headers)
        (answer("404", "Not Found", "HeadObject", AWS_HEADERS), "the object does not exist"),
        (
            answer("NoSuchKey", "The specified key does not exist.", "GetObject"),
            "the object does not exist",
        ),
        (
            answer("NoSuchBucket", "no bucket", "ListObjectsV2", BucketName="no-such-bucket"),
            "bucket no-such-bucket does not exist",
        ),
        (
            botocore.exceptions.EndpointConnectionError(endpoint_url="https://x"),
            'Could not connect to the endpoint URL: "https://x": check the network, the region '
            "and AWS_ENDPOINT_URL",
        ),
        (httpx.InvalidURL("no scheme"), "not a URL: no scheme"),
        (httpx.ConnectError("refused"), "cannot reach the server: refused"),
        (ValueError("a bug"), None),
        (KeyError("a bug"), None),
    ],
)
def test_what_a_user_is_told(error: Exception, line: str | None) -> None:
    assert line_of(error) == line


def test_one_line_and_the_traceback_under_debug(tmp_path: Path) -> None:
    """`deploy invoke --body @missing.json`: one line naming the body file, exit 2; with
    --debug (anywhere) or VLLM_SAGEMAKER_DEBUG=1, Python's traceback."""
    missing = tmp_path / "missing.json"
    args = ("deploy", "invoke", "--name", "llm", "--body", f"@{missing}", "--dry-run")
    done = cli.run(*args, text=True)
    assert done.returncode == 2
    assert done.stderr == f"deploy: cannot read the --body file: {missing} does not exist\n"
    for debug_args, env in (((*args, "--debug"), {}), (args, {"VLLM_SAGEMAKER_DEBUG": "1"})):
        shown = cli.run(*debug_args, env=env, text=True)
        assert shown.returncode == 1
        assert "Traceback" in shown.stderr and "FileNotFoundError" in shown.stderr
