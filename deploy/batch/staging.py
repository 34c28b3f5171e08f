"""Where `vllm-sagemaker batch` appends its answers while a run goes on, and how they reach the
output at the end.

A plain local output is appended to in place. A remote (`s3://`, `http(s)://`), compressed
(`.gz`) or standard-output (`-`) output is staged: its answers are appended to a local file,
delivered once the run is complete, then removed with their directory.

`--resume` must find an interrupted run's staged answers again (after a `kill -9` too), so the
staging directory cannot have a random `mkdtemp` name: it is named after the user and the output
(`vllm-sagemaker-batch-<uid>-<hash of the URI>`, under `--output-tmp-dir`, the system's temporary
directory by default). What `mkdtemp` gets from its random name is checked instead: the directory
is created 0700 and a run refuses one that is a symbolic link, another user's, or open to other
users, before it reads the input; the staged file is 0600. A run that stops keeps both for
`--resume`.

Nothing is created before the first answer: a run that stops earlier (an unreadable input, an
engine that never answers, a container that wants an API key) leaves no output file, no parent
folder and no staging directory, and does not empty an earlier output. An output that could not
be written (a directory, a folder that takes no file) stops the run before anything else is done.
"""

import contextlib
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO

from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.handler.core.batch_lines import Outcome, repair

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def staged_path(uri: str, tmp_dir: str) -> str:
    """Where answers for `uri` are appended while the run goes on: the file itself for a plain
    local path, else a file in a directory of `tmp_dir` named after the user and the URI (so
    `--resume` finds it)."""
    if storage.is_local(uri) and not storage.compressed(uri):
        return uri
    digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
    directory = Path(tmp_dir) / f"vllm-sagemaker-batch-{os.getuid()}-{digest}"
    return str(directory / "answers.jsonl")


def why_not_private(found: os.stat_result, uid: int) -> str | None:
    """What makes a directory (as `os.lstat` sees it) unfit to hold `uid`'s answers, or None."""
    if stat.S_ISLNK(found.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(found.st_mode):
        return "is not a directory"
    if found.st_uid != uid:
        return f"belongs to another user (uid {found.st_uid})"
    if found.st_mode & 0o077:
        return f"is open to other users (mode {stat.S_IMODE(found.st_mode):o})"
    return None


def check_private(directory: Path) -> None:
    """Refuse a staging directory that is not private (`storage.Unreachable`: one line)."""
    problem = why_not_private(os.lstat(directory), os.getuid())
    if problem:
        raise storage.Unreachable(
            f"the staging directory {directory} {problem}: remove it, or stage elsewhere "
            "with --output-tmp-dir"
        )


def private_dir(directory: Path) -> None:
    """`directory`, made 0700 (whatever the umask) unless it exists, and checked private."""
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, PRIVATE_DIR_MODE)
            os.chmod(directory, PRIVATE_DIR_MODE)
    except OSError as error:
        raise storage.Unreachable(f"cannot create {directory}: {error.strerror}") from None
    check_private(directory)


class Sink:
    """One output of a run (the output or the error file): the local file its answers are
    appended to, opened at the first answer and emptied then unless the run resumes."""

    def __init__(self, uri: str, tmp_dir: str | None, resume: bool) -> None:
        self.uri = uri
        self.path = staged_path(uri, tmp_dir or tempfile.gettempdir())
        self.staged = self.path != uri
        self.resume = resume
        self.file: IO[bytes] | None = None
        # Found before any work: an output that is a directory, or in a folder that takes no file.
        storage.check_writable(uri)
        if self.staged:
            if os.path.lexists(Path(self.path).parent):
                check_private(Path(self.path).parent)
            storage.check_writable(str(Path(self.path).parent), directory=True)

    def earlier(self) -> list[Outcome]:
        """With `--resume`, the answers an earlier run wrote (a half-written last line cut off)."""
        if not self.resume or not os.path.exists(self.path):
            return []
        return repair(self.path)

    def write(self, data: bytes, /) -> None:
        if self.file is None:
            self.file = self._open()
        self.file.write(data)

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def deliver(self) -> None:
        """The run is complete: the output (empty when nothing was answered) goes to its URI,
        and the staged file and its directory are removed."""
        if self.file is None:
            self.file = self._open()
        self.file.close()
        storage.publish(self.path, self.uri)
        if self.staged:
            os.unlink(self.path)
            os.rmdir(Path(self.path).parent)

    def _open(self) -> IO[bytes]:
        directory = Path(self.path).parent
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if self.resume else os.O_TRUNC)
        mode = 0o666
        if self.staged:
            private_dir(directory)
            flags |= os.O_NOFOLLOW
            mode = PRIVATE_FILE_MODE
        try:
            directory.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path, flags, mode)
        except OSError as error:
            raise storage.Unreachable(f"cannot write {self.path}: {error.strerror}") from None
        if self.staged:
            os.fchmod(descriptor, PRIVATE_FILE_MODE)
        return os.fdopen(descriptor, "ab")
