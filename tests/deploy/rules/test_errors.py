"""The client's one error path: an error a user can cause is one line; a bug keeps its traceback."""

from pathlib import Path

import botocore.exceptions
import httpx
import pytest

from tests.support import cli
from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.errors import explain


def client_error(code: str, message: str, operation: str = "CreateModel") -> Exception:
    return botocore.exceptions.ClientError({"Error": {"Code": code, "Message": message}}, operation)


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            FileNotFoundError(2, "No such file", "/proc/x/out.jsonl"),
            "/proc/x/out.jsonl does not exist",
        ),
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
            botocore.exceptions.NoCredentialsError(),
            "no AWS credentials found",
        ),
        (botocore.exceptions.NoRegionError(), "no AWS region: give --region, or set AWS_REGION"),
        (
            client_error("AccessDeniedException", "not allowed"),
            "AWS refused CreateModel (access denied: not allowed)",
        ),
        (client_error("ExpiredTokenException", "expired"), "have expired (ExpiredTokenException)"),
        (
            client_error("ValidationException", "bad name"),
            "AWS refused CreateModel: ValidationException: bad name",
        ),
        (
            botocore.exceptions.EndpointConnectionError(endpoint_url="https://x"),
            "check the network, the region and AWS_ENDPOINT_URL",
        ),
        (httpx.InvalidURL("no scheme"), "not a URL: no scheme"),
        (httpx.ConnectError("refused"), "cannot reach the server: refused"),
        (ValueError("a bug"), None),
        (KeyError("a bug"), None),
    ],
)
def test_what_a_user_is_told(error: Exception, line: str | None) -> None:
    told = explain(error)
    if line is None:
        assert told is None
        return
    assert told is not None and line in told, told
    assert "\n" not in told


def test_one_line_and_the_traceback_under_debug(tmp_path: Path) -> None:
    """`deploy invoke --body @missing.json`: one line, exit 1; with --debug (anywhere) or
    VLLM_SAGEMAKER_DEBUG=1, Python's traceback."""
    missing = tmp_path / "missing.json"
    args = ("deploy", "invoke", "--name", "llm", "--body", f"@{missing}", "--dry-run")
    done = cli.run(*args, text=True)
    assert done.returncode == 1
    assert (
        done.stderr
        == f"deploy: {missing} does not exist (nor, for an output, the directory it would go in)\n"
    )
    for debug_args, env in (((*args, "--debug"), {}), (args, {"VLLM_SAGEMAKER_DEBUG": "1"})):
        shown = cli.run(*debug_args, env=env, text=True)
        assert shown.returncode == 1
        assert "Traceback" in shown.stderr and "FileNotFoundError" in shown.stderr
