"""The client's one error model: `ClientError` (one line and an exit status), raised where a
failure is known and printed at the top (`container.cli`) as `COMMAND: LINE`. `client_error` makes
a library's error one; anything else is a bug and keeps its traceback."""

import enum
import shlex
import signal
import subprocess
from pathlib import Path


class ExitStatus(enum.IntEnum):
    """What a client command exits with: never an HTTP status (`deploy.base.invocations`'s)."""

    DONE = 0
    FAILED = 1  # AWS, the container or the run failed
    USAGE_ERROR = 2  # an option or input was refused before anything ran
    INTERRUPTED = 130  # Ctrl-C (`deploy.base.interrupts`)


class Problem(str):
    """What is wrong with an option, as data: `option` (as typed, or the options together as
    the line names them), its `value` as the line shows it ("" for none) and `why`; rendered
    here only, as `OPTION VALUE: WHY` (`sep` for a line that goes on without a colon)."""

    option: str
    value: str
    why: str

    def __new__(cls, option: str, why: str, value: object = "", sep: str = ": ") -> "Problem":
        shown = f" {value}" if value != "" else ""
        line = super().__new__(cls, f"{option}{shown}{sep}{why}")
        line.option, line.value, line.why = option, str(value), why
        return line


class ClientError(Exception):
    """A failure a user can cause: `line` says what failed and what to do."""

    exit_status = ExitStatus.FAILED

    def __init__(self, line: str, exit_status: ExitStatus | None = None) -> None:
        super().__init__(line)
        self.line = line
        if exit_status is not None:
            self.exit_status = exit_status


class UsageError(ClientError):
    """An option or input the command will not run with (exit status 2), its line a `Problem`
    or, for an input, a plain line."""

    exit_status = ExitStatus.USAGE_ERROR


def stop_at(problem: str | None) -> None:
    """A `UsageError` for `problem`, when there is one."""
    if problem:
        raise UsageError(problem)


def client_error(error: BaseException) -> ClientError | None:
    """`error` as the ClientError a user reads; None for a bug."""
    if isinstance(error, ClientError):
        return error
    # Imported here: the options' checks raise `UsageError` with no boto3 or httpx loaded.
    from vllm_sagemaker.deploy.base import credentials, error_answers

    for translate in (credentials.credentials_line, error_answers.aws_line, os_line, _http_line):
        line = translate(error)
        if line is not None:
            return ClientError(line)
    return None


def line_of(error: BaseException) -> str | None:
    found = client_error(error)
    return None if found is None else found.line


def os_line(error: BaseException) -> str | None:
    if isinstance(error, subprocess.CalledProcessError):
        command = error.cmd if isinstance(error.cmd, str) else shlex.join(map(str, error.cmd))
        if error.returncode >= 0:
            return f"{command} failed with exit status {error.returncode}"
        try:
            stopped = signal.Signals(-error.returncode).name
        except ValueError:
            stopped = f"signal {-error.returncode}"
        return f"{command} was stopped by {stopped}"
    if not isinstance(error, OSError):
        return None
    path = error.filename
    if path is None:  # a line of its own (`storage.Unreachable`)
        return error.strerror or str(error)
    if isinstance(error, IsADirectoryError):
        return f"{path} is a directory: give a file's path"
    if isinstance(error, NotADirectoryError):
        return f"{path}: a part of the path is not a directory"
    if isinstance(error, FileNotFoundError):
        parent = Path(path).parent
        return f"{path} does not exist" + ("" if parent.is_dir() else f" (nor does {parent})")
    return f"{path}: {(error.strerror or str(error)).lower()}"


def _http_line(error: BaseException) -> str | None:
    import httpx

    if isinstance(error, httpx.InvalidURL):
        return f"not a URL: {error}"
    if not isinstance(error, httpx.TransportError):
        return None
    try:
        url = str(error.request.url)
    except RuntimeError:  # raised before a request was made
        url = "the server"
    return f"cannot reach {url}: {error or type(error).__name__}"
