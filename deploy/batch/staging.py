"""Where `vllm-sagemaker batch` appends its answers while a run goes on, and how they reach the
output at the end.

A plain local output is appended to in place. A remote (`s3://`, `http(s)://`), compressed
(`.gz`) or standard-output (`-`) output is staged: its answers are appended to a local file,
delivered once the run is complete, then removed with their directory.

`--resume` must find an interrupted run's staged answers again (after a `kill -9` too), so the
staging directory cannot have a random `mkdtemp` name: it is named after the user and the output
(`vllm-sagemaker-batch-<uid>-<hash>`, under `--output-tmp-dir`, the system's temporary directory
by default), the output as it resolves (`resolved`: `out.jsonl.gz` and `./out.jsonl.gz` are one
output). What `mkdtemp` gets from its random name is checked instead: the directory is created
0700 and a run refuses one that is a symbolic link, another user's, or open to other users,
before it reads the input; the staged file is 0600. A run that stops keeps both for `--resume`.

One output, one run: a run holds its output (`Sink.hold`) with a lock (`flock`) on the file
`lock` in the output's staging directory, where it writes its pid, before it reads anything; a
second run on the same output is refused with one line naming the first's pid (`Busy`). The
kernel lets go of the lock when the process ends, however it ends. A plain local output has its
lock there too, in the system's temporary directory, in a directory that holds nothing else.

Nothing is left before the first answer: a run that stops earlier (an unreadable input, an engine
that never answers, a container that wants an API key) removes the staging directory it made
(and the folders it made for it), creates no output file and no parent folder, and does not
empty an earlier output. An output that could not be written (a directory, a folder that takes
no file) stops the run before anything else is done.
"""

import contextlib
import fcntl
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
ANSWERS = "answers.jsonl"
LOCK = "lock"
# How often a run tries again to take a lock whose file another run removed as it ended.
LOCK_TRIES = 5


class Busy(storage.Unreachable):
    """Another run holds the output; the message names it."""


def resolved(uri: str) -> str:
    """What names an output's staging directory: a local path as it resolves (relative,
    through `..` or a symbolic link, one file is one output), a URL without its query (a
    presigned URL's signature changes from one run to the next; its object does not), `-` and
    `s3://` as given."""
    if storage.is_local(uri):
        return os.path.realpath(uri)
    if storage.is_http(uri):
        return uri.split("?", 1)[0]
    return uri


def is_staged(uri: str) -> bool:
    """Whether `uri`'s answers are staged (anything but a plain local file)."""
    return not storage.is_local(uri) or storage.compressed(uri)


def staging_dir(uri: str, tmp_dir: str) -> Path:
    """The directory of `tmp_dir` named after the user and the output (so `--resume` finds it,
    and a second run on the output finds the first's lock)."""
    digest = hashlib.sha256(resolved(uri).encode()).hexdigest()[:16]
    return Path(tmp_dir) / f"vllm-sagemaker-batch-{os.getuid()}-{digest}"


def lock_dir(uri: str, tmp_dir: str | None) -> Path:
    """Where a run holds `uri`: its staging directory, in `tmp_dir` (default: the system's
    temporary directory); a plain local output's, which holds only the lock, always in the
    system's temporary directory (two runs on one file may give different `--output-tmp-dir`)."""
    return staging_dir(uri, (tmp_dir if is_staged(uri) else None) or tempfile.gettempdir())


def staged_path(uri: str, tmp_dir: str) -> str:
    """Where answers for `uri` are appended while the run goes on: the file itself for a plain
    local path, else a file in its staging directory."""
    return str(staging_dir(uri, tmp_dir) / ANSWERS) if is_staged(uri) else uri


def kept_in(uri: str, tmp_dir: str | None) -> str:
    """Where a stopped run's answers for `uri` are, as its line says it."""
    path = staged_path(uri, tmp_dir or tempfile.gettempdir())
    return uri if path == uri else f"{path} (staged for {uri})"


def busy_line(uri: str, directory: str, pid: int | None, staged: bool) -> str:
    """The line of a run refused because another run (`pid`, when its lock file says it) holds
    the output `uri`; a staged output can go elsewhere with --output-tmp-dir."""
    who = f"another run (pid {pid})" if pid else "another run"
    name = "standard output (-)" if uri == "-" else uri
    if not staged:
        return f"{who} is writing {name}: wait for it to end"
    return (
        f"{who} is writing {name}, staged in {directory}: wait for it to end, or give this run "
        "another --output-tmp-dir"
    )


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


def private_dir(directory: Path) -> list[Path]:
    """`directory`, made 0700 (whatever the umask) unless it exists, and checked private; the
    folders made for it, outermost first."""
    made = [folder for folder in reversed(directory.parents) if not folder.exists()]
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, PRIVATE_DIR_MODE)
            os.chmod(directory, PRIVATE_DIR_MODE)
            made.append(directory)
    except OSError as error:
        raise storage.Unreachable(f"cannot create {directory}: {error.strerror}") from None
    check_private(directory)
    return made


def _holder(descriptor: int) -> int | None:
    """The pid a lock file holds (None while its run has not written it yet)."""
    text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


class Sink:
    """One output of a run (the output or the error file): the local file its answers are
    appended to, opened at the first answer and emptied then unless the run resumes, and the
    lock that keeps other runs off the output while this one goes on."""

    def __init__(self, uri: str, tmp_dir: str | None, resume: bool) -> None:
        self.uri = uri
        self.staged = is_staged(uri)
        self.directory = lock_dir(uri, tmp_dir)
        self.path = str(self.directory / ANSWERS) if self.staged else uri
        self.resume = resume
        self.file: IO[bytes] | None = None
        self.lock: int | None = None
        self.made: list[Path] = []
        # Found before any work: an output that is a directory, or in a folder that takes no file.
        storage.check_writable(uri)
        if self.staged:
            if os.path.lexists(self.directory):
                check_private(self.directory)
            storage.check_writable(str(self.directory), directory=True)

    def hold(self) -> None:
        """Take the output for this run, before anything is read: `Busy` while another run
        holds it (its lock is taken), `storage.Unreachable` for a staging directory that is
        not private."""
        lock = self.directory / LOCK
        for _ in range(LOCK_TRIES):
            self.made += private_dir(self.directory)
            try:
                descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError as error:
                raise storage.Unreachable(f"cannot write {lock}: {error.strerror}") from None
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _holder(descriptor)
                os.close(descriptor)
                raise Busy(busy_line(self.uri, str(self.directory), pid, self.staged)) from None
            # Taken, unless the run that held it removed the file as it ended: then again.
            with contextlib.suppress(FileNotFoundError):
                if os.stat(lock).st_ino == os.fstat(descriptor).st_ino:
                    os.ftruncate(descriptor, 0)
                    os.write(descriptor, f"{os.getpid()}\n".encode())
                    self.lock = descriptor
                    return
            os.close(descriptor)
        raise Busy(busy_line(self.uri, str(self.directory), None, self.staged))

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
        """Close the file and let go of the output. A staging directory without answers (the
        output delivered, a plain output, a run stopped before its first answer) is removed,
        with the folders made for it; one with answers is kept for `--resume`."""
        if self.file is not None:
            self.file.close()
        if self.lock is None:
            return
        if not (self.staged and os.path.exists(self.path)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / LOCK)
            for folder in [self.directory, *reversed(self.made)]:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
        os.close(self.lock)
        self.lock = None

    def deliver(self) -> None:
        """The run is complete: the output (empty when nothing was answered) goes to its URI,
        and the staged file is removed (its directory goes when the output is let go)."""
        if self.file is None:
            self.file = self._open()
        self.file.close()
        storage.publish(self.path, self.uri)
        if self.staged:
            os.unlink(self.path)

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
