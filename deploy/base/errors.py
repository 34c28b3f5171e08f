"""The client's one error path: an error a user can cause, as the one line that says what failed,
the value, and what to do.

Every client command (`transform`, `batch`, `deploy ...`) ends here when an error reaches the top
(`container.cli`): a missing or unwritable path, no credentials or region, access denied, a URL
nobody answers, a tool the command runs (`deploy image`'s builder) that failed. Such an error is
one line on stderr and exit status 1; anything else is a bug and keeps its traceback. `--debug`
(or VLLM_SAGEMAKER_DEBUG=1) shows the traceback of any error.
"""

import shlex
import subprocess

import botocore.exceptions
import httpx

from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.region import REGION_HELP

# What lets boto3 find AWS, for the lines that say it could not.
CREDENTIALS_HELP = (
    "configure credentials (`aws configure`, AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY)"
)
_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
_EXPIRED = frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired"})
_BAD_KEYS = frozenset(
    {"InvalidClientTokenId", "SignatureDoesNotMatch", "UnrecognizedClientException"}
)


def _path_error(error: OSError) -> str:
    path = error.filename if error.filename is not None else "the path"
    if isinstance(error, IsADirectoryError):
        return f"{path} is a directory: give a file's path"
    if isinstance(error, NotADirectoryError):
        return f"{path}: a part of the path is not a directory"
    if isinstance(error, FileNotFoundError):
        return f"{path} does not exist (nor, for an output, the directory it would go in)"
    if isinstance(error, PermissionError):
        return f"{path}: permission denied"
    return f"{path}: {error.strerror or error}"


def _aws_answer(error: botocore.exceptions.ClientError) -> str:
    detail = error.response.get("Error", {})
    code, message = detail.get("Code", ""), detail.get("Message", "")
    operation = error.operation_name
    if code in _DENIED:
        return (
            f"AWS refused {operation} (access denied: {message}): the credentials' policy must "
            "allow it"
        )
    if code in _EXPIRED:
        return f"AWS refused {operation}: the credentials have expired; {CREDENTIALS_HELP}"
    if code in _BAD_KEYS:
        return (
            f"AWS refused {operation}: the credentials are not valid ({code}); {CREDENTIALS_HELP}"
        )
    return f"AWS refused {operation}: {code}: {message}"


def explain(error: BaseException) -> str | None:
    """The line for an error a user can cause; None for anything else (a bug)."""
    if isinstance(error, storage.Unreachable):
        return str(error)
    if isinstance(error, subprocess.CalledProcessError):
        command = error.cmd if isinstance(error.cmd, str) else shlex.join(map(str, error.cmd))
        return f"{command} failed with exit status {error.returncode}"
    if isinstance(error, OSError):
        return _path_error(error)
    if isinstance(error, botocore.exceptions.NoCredentialsError):
        return f"no AWS credentials found: {CREDENTIALS_HELP}"
    if isinstance(error, botocore.exceptions.PartialCredentialsError):
        return f"incomplete AWS credentials ({error}): {CREDENTIALS_HELP}"
    if isinstance(error, botocore.exceptions.NoRegionError):
        return f"no AWS region: {REGION_HELP}"
    if isinstance(error, botocore.exceptions.ProfileNotFound):
        return f"{error}: check AWS_PROFILE or --profile"
    if isinstance(
        error,
        (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError),
    ):
        return f"{error}: check the network, the region and AWS_ENDPOINT_URL"
    if isinstance(error, botocore.exceptions.ClientError):
        return _aws_answer(error)
    if isinstance(error, botocore.exceptions.BotoCoreError):
        return str(error)
    if isinstance(error, httpx.InvalidURL):
        return f"not a URL: {error}"
    if isinstance(error, httpx.TransportError):
        return f"cannot reach {_url(error)}: {error or type(error).__name__}"
    return None


def _url(error: httpx.TransportError) -> str:
    try:
        return str(error.request.url)
    except RuntimeError:  # raised before a request was made
        return "the server"
