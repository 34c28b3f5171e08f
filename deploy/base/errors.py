"""The client's one error path: an error a user can cause, as the one line that says what failed,
the value, and what to do.

Every client command (`transform`, `batch`, `deploy ...`) ends here when an error reaches the top
(`container.cli`): a missing or unwritable path, no credentials or region, access denied, a URL
nobody answers, a tool the command runs (`deploy image`'s builder) that failed; the AWS ones are
`deploy.base.aws_lines`'s (credentials: `deploy.base.credentials`). Such an error is
one line on stderr and exit status 1; anything else is a bug and keeps its traceback. `--debug`
(or VLLM_SAGEMAKER_DEBUG=1) shows the traceback of any error.
"""

import shlex
import signal
import subprocess

import httpx

from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.aws_lines import aws_line


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


def explain(error: BaseException) -> str | None:
    """The line for an error a user can cause; None for anything else (a bug)."""
    if isinstance(error, storage.Unreachable):
        return str(error)
    if isinstance(error, subprocess.CalledProcessError):
        command = error.cmd if isinstance(error.cmd, str) else shlex.join(map(str, error.cmd))
        if error.returncode < 0:
            return f"{command} was stopped by {_signal_name(-error.returncode)}"
        return f"{command} failed with exit status {error.returncode}"
    if isinstance(error, OSError):
        return _path_error(error)
    told = aws_line(error)
    if told is not None:
        return told
    if isinstance(error, httpx.InvalidURL):
        return f"not a URL: {error}"
    if isinstance(error, httpx.TransportError):
        return f"cannot reach {_url(error)}: {error or type(error).__name__}"
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _url(error: httpx.TransportError) -> str:
    try:
        return str(error.request.url)
    except RuntimeError:  # raised before a request was made
        return "the server"
