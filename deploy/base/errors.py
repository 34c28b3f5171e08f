"""The client's one error model: `ClientError`, a failure a user can cause, carrying the one line
that says what failed, the value, and what to do, and the exit status the command ends with.

It is raised where the failure is known and printed in one place, the top (`container.cli`), as
`COMMAND: LINE`. An error of a library (an OS error, an HTTP transport error, boto3's and AWS's,
credentials') is made a `ClientError` by `client_error`, which hands each kind to the one
function that translates it (AWS: `deploy.base.aws_lines`; credentials:
`deploy.base.credentials`). Anything else is a bug and keeps its traceback. `--debug` (or
VLLM_SAGEMAKER_DEBUG=1) shows the traceback of any error.
"""

import shlex
import signal
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

# Exit statuses: the run failed (1); an option or input was refused before anything ran (2).
FAILED = 1
USAGE_ERROR = 2


class ClientError(Exception):
    """A failure a user can cause: `line` says what failed and what to do; the command ends with
    exit status `status`."""

    status = FAILED

    def __init__(self, line: str, status: int | None = None) -> None:
        super().__init__(line)
        self.line = line
        if status is not None:
            self.status = status


class Refused(ClientError):
    """An option or input refused before anything ran: exit status USAGE_ERROR."""

    status = USAGE_ERROR


def refuse(problem: str | None) -> None:
    """Refused, when there is a problem."""
    if problem:
        raise Refused(problem)


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


def client_error(error: BaseException) -> ClientError | None:
    """`error` as the ClientError a user reads; None for a bug."""
    if isinstance(error, ClientError):
        return error
    line = _library_line(error)
    return None if line is None else ClientError(line)


def explain(error: BaseException) -> str | None:
    """The line for an error a user can cause; None for anything else (a bug)."""
    found = client_error(error)
    return None if found is None else found.line


def _library_line(error: BaseException) -> str | None:
    # Imported here: the options' checks raise `Refused` with no boto3 or httpx loaded.
    import httpx

    from vllm_sagemaker.deploy.base import storage
    from vllm_sagemaker.deploy.base.aws_lines import aws_line

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


def _url(error: "httpx.TransportError") -> str:
    try:
        return str(error.request.url)
    except RuntimeError:  # raised before a request was made
        return "the server"
