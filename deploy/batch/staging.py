"""Where `vllm-sagemaker batch` appends its answers while it runs (docs/batch-files.md): a plain
local output in place; any other (`s3://`, `http(s)://`, `.gz`, `-`) in a private directory named
after the user and the output (so `--resume` finds it after a `kill -9`), delivered at the end.
A run holds its output (`flock` on a lock file holding its pid) before it reads anything.
Answers that cannot be delivered are kept for `--resume` (or `--resume-from OLD`)."""

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from vllm_sagemaker.core.batch_lines import Outcome, repair
from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.errors import ClientError

ANSWERS = "answers.jsonl"
LOCK = "lock"
# How often a run tries again to take a lock whose file another run removed as it ended.
LOCK_TRIES = 5


class Busy(storage.Unreachable):
    """Another run holds the output; the line names it."""


class Undelivered(ClientError):
    """Answers that cannot reach their output: the line says where they are kept."""


def is_staged(uri: str) -> bool:
    return not storage.is_local(uri) or storage.compressed(uri)


def staging_dir(uri: str, tmp_dir: str) -> Path:
    """`uri`'s directory in `tmp_dir`, named after the user and the output as it resolves: a
    local path's real path, a URL without its query (a presigned URL's signature changes)."""
    name = os.path.realpath(uri) if storage.is_local(uri) else uri.split("?", 1)[0]
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return Path(tmp_dir) / f"vllm-sagemaker-batch-{os.getuid()}-{digest}"


def lock_dir(uri: str, tmp_dir: str | None) -> Path:
    """Where a run holds `uri`: its staging dir; a plain local output's in the system's tmp."""
    return staging_dir(uri, (tmp_dir if is_staged(uri) else None) or tempfile.gettempdir())


def staged_path(uri: str, tmp_dir: str | None) -> str:
    """Where a run appends `uri`'s answers: `uri` itself, or staged in its directory."""
    return str(lock_dir(uri, tmp_dir) / ANSWERS) if is_staged(uri) else uri


def kept_in(uri: str, tmp_dir: str | None) -> str:
    """Where a stopped run's answers for `uri` are, as its line says it."""
    path = staged_path(uri, tmp_dir)
    return uri if path == uri else f"{path} (staged for {uri})"


def busy_line(uri: str, directory: str, pid: int | None, staged: bool) -> str:
    """The line of a run refused because another run (`pid`, when known) holds the output."""
    who = f"another run (pid {pid})" if pid else "another run"
    name = "standard output (-)" if uri == "-" else uri
    if not staged:
        return f"{who} is writing {name}: wait for it to end"
    return (
        f"{who} is writing {name}, staged in {directory}: wait for it to end, or give this run "
        "another --output-tmp-dir"
    )


def why_not_private(found: os.stat_result, uid: int) -> str | None:
    """What makes a directory (`os.lstat`'s) unfit to hold `uid`'s answers, or None."""
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
    problem = why_not_private(os.lstat(directory), os.getuid())
    if problem:
        raise storage.Unreachable(
            f"the staging directory {directory} {problem}: remove it, or stage elsewhere "
            "with --output-tmp-dir"
        )


def private_dir(directory: Path) -> list[Path]:
    """`directory`, made 0700 unless it exists, checked private; the folders it made, outside in."""
    made = [folder for folder in reversed(directory.parents) if not folder.exists()]
    with storage.told("create", str(directory)):
        directory.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
            os.chmod(directory, 0o700)
            made.append(directory)
    check_private(directory)
    return made


def lock(directory: Path, uri: str, staged: bool) -> tuple[int, list[Path]]:
    """Hold `uri` by its lock file in `directory`: the descriptor and the folders made; `Busy`."""
    made: list[Path] = []
    for _ in range(LOCK_TRIES):
        made += private_dir(directory)
        with storage.told("write", str(directory / LOCK)):
            descriptor = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
            os.close(descriptor)
            pid = int(text) if text.isdigit() else None
            raise Busy(busy_line(uri, str(directory), pid, staged)) from None
        # Taken, unless the run that held it removed the file as it ended.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(directory / LOCK).st_ino == os.fstat(descriptor).st_ino:
                os.ftruncate(descriptor, 0)
                os.write(descriptor, f"{os.getpid()}\n".encode())
                return descriptor, made
        os.close(descriptor)
    raise Busy(busy_line(uri, str(directory), None, staged))


def release(directory: Path, descriptor: int, made: list[Path]) -> None:
    """Let go of a lock, removing its directory and the folders made for it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / LOCK)
    for folder in [directory, *reversed(made)]:
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    os.close(descriptor)


@dataclass
class Sink:
    """One output of a run (the output or the error file): the local file its answers are
    appended to (opened at the first answer, emptied unless the run resumes, from this output's
    answers or from `resume_from`'s), and the lock that keeps other runs off it."""

    uri: str
    tmp_dir: str | None
    resume: bool
    resume_from: str | None = None
    file: IO[bytes] | None = field(default=None, init=False)
    lock: int | None = field(default=None, init=False)
    made: list[Path] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.resume = self.resume or self.resume_from is not None
        self.staged = is_staged(self.uri)
        self.directory = lock_dir(self.uri, self.tmp_dir)
        self.path = staged_path(self.uri, self.tmp_dir)
        try:  # before any work: an output that cannot be written, a staging dir not private
            storage.check_writable(self.uri)
        except ClientError as error:
            raise self.undelivered(error) from error
        if self.staged:
            if os.path.lexists(self.directory):
                check_private(self.directory)
            storage.check_writable(str(self.directory), directory=True)

    def undelivered(self, error: ClientError) -> ClientError:
        """`error`, saying where the answers staged for this output are kept, when there are."""
        if not (self.staged and os.path.exists(self.path)):
            return error
        with open(self.path, "rb") as answers:
            count = sum(1 for _ in answers)
        return Undelivered(
            f"{error.line}; its {count} answered lines are kept in {self.path}: run the same "
            f"command with --resume to deliver them, or with a corrected output and "
            f"--resume-from {self.uri}",
            error.exit_status,
        )

    def hold(self) -> None:
        """Take the output (`Busy` while another run holds it) and `resume_from`'s answers."""
        self.lock, self.made = lock(self.directory, self.uri, self.staged)
        if self.resume_from is None or os.path.exists(self.path):
            return
        old = lock_dir(self.resume_from, self.tmp_dir)
        if (old / ANSWERS).exists():
            held = lock(old, self.resume_from, staged=True)[0]
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(old / ANSWERS, self.path)
            os.unlink(old / ANSWERS)
            release(old, held, [])

    def earlier(self) -> list[Outcome]:
        """With `--resume`, the answers an earlier run wrote (a half-written last line cut off)."""
        if not self.resume or not os.path.exists(self.path):
            return []
        return repair(self.path)

    def write(self, data: bytes, /) -> None:
        self._opened().write(data)

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()

    def close(self) -> None:
        """Let go of the output: its staging dir is removed unless it holds answers (`--resume`)."""
        if self.file is not None:
            self.file.close()
        if self.lock is None:
            return
        if self.staged and os.path.exists(self.path):
            os.close(self.lock)
        else:
            release(self.directory, self.lock, self.made)
        self.lock = None

    def deliver(self) -> None:
        """The run is complete: deliver the output to its URI and remove the staged file."""
        self._opened().close()
        try:
            storage.publish(self.path, self.uri)
        except ClientError as error:
            raise self.undelivered(error) from error
        if self.staged:
            os.unlink(self.path)

    def _opened(self) -> IO[bytes]:
        """The file, opened at the first call (emptied unless the run resumes)."""
        if self.file is not None:
            return self.file
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if self.resume else os.O_TRUNC)
        if self.staged:
            private_dir(self.directory)
        with storage.told("write", self.path):
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path, flags | (os.O_NOFOLLOW if self.staged else 0), 0o666)
        if self.staged:
            os.fchmod(descriptor, 0o600)
        self.file = os.fdopen(descriptor, "ab")
        return self.file
