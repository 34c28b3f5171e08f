"""The durable state of the Files (and Batches) API: one SQLite database beside the file bodies.

Everything that must survive a crash goes through `Store`: rows change only inside transactions,
and a file's row is written only after its body is complete on disk, so a crash leaves either
the whole file or nothing. SQLite in WAL mode with a busy timeout lets the API-server processes
of a container share one store. Another backend can replace this class by offering the same
methods.

Layout under the store directory (SAGEMAKER_BATCH_STORE):
    store.sqlite3           the rows
    files/<id>              file bodies, complete
    files/<id>.partial      a body being written (removed on failure, swept at start)
"""

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BUSY_TIMEOUT_MS = 30_000
SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    filename TEXT NOT NULL,
    purpose TEXT NOT NULL,
    expires_at INTEGER
);
CREATE INDEX IF NOT EXISTS files_by_purpose ON files (purpose, seq);
"""


class StoreError(Exception):
    """The store cannot be used (unwritable directory, full disk): a clear 5xx, never corrupt
    state."""


@dataclass(frozen=True)
class StoredFile:
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    expires_at: int | None


@dataclass(frozen=True)
class Page:
    items: list[StoredFile]
    has_more: bool


class Store:
    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.files_dir = self.root / "files"
        try:
            self.files_dir.mkdir(parents=True, exist_ok=True)
            with contextlib.closing(self._connect()) as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as error:
            raise StoreError(f"the batch store {root} cannot be used: {error}") from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.root / "store.sqlite3", timeout=BUSY_TIMEOUT_MS / 1000)
        db.execute("PRAGMA synchronous=NORMAL")
        db.row_factory = sqlite3.Row
        return db

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE), committed on success, rolled back on error."""
        try:
            db = self._connect()
        except sqlite3.Error as error:
            raise StoreError(f"the batch store cannot be opened: {error}") from None
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.commit()
        except sqlite3.OperationalError as error:
            db.rollback()
            raise StoreError(f"the batch store could not be written: {error}") from None
        except BaseException:
            db.rollback()
            raise
        finally:
            db.close()

    def body_path(self, file_id: str) -> Path:
        return self.files_dir / file_id

    def partial_path(self, file_id: str) -> Path:
        return self.files_dir / f"{file_id}.partial"

    def add_file(self, stored: StoredFile) -> None:
        """Make a completely written `<id>.partial` body a file: rename, then insert its row."""
        try:
            os.replace(self.partial_path(stored.id), self.body_path(stored.id))
        except OSError as error:
            raise StoreError(f"the file body could not be stored: {error}") from None
        with self.transaction() as db:
            db.execute(
                "INSERT INTO files (id, bytes, created_at, filename, purpose, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    stored.id,
                    stored.bytes,
                    stored.created_at,
                    stored.filename,
                    stored.purpose,
                    stored.expires_at,
                ),
            )

    def file(self, file_id: str, now: float | None = None) -> StoredFile | None:
        """The file with this id, None when there is none or it has expired."""
        with contextlib.closing(self._connect()) as db:
            row = db.execute("SELECT * FROM files WHERE id = ?", (file_id,)).fetchone()
        stored = _stored(row) if row else None
        if stored is None or _expired(stored, now):
            return None
        return stored

    def files(self, purpose: str | None, limit: int, descending: bool, after: str | None) -> Page:
        """One page of files in a stable order (upload order, or its reverse), after the file
        `after` (a cursor: an id from the previous page)."""
        self.sweep_expired()
        clauses, params = [], []
        if purpose:
            clauses.append("purpose = ?")
            params.append(purpose)
        if after:
            clauses.append(f"seq {'<' if descending else '>'} (SELECT seq FROM files WHERE id = ?)")
            params.append(after)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "DESC" if descending else "ASC"
        with contextlib.closing(self._connect()) as db:
            rows = db.execute(
                f"SELECT * FROM files {where} ORDER BY seq {order} LIMIT ?", (*params, limit + 1)
            ).fetchall()
        items = [_stored(row) for row in rows]
        return Page(items[:limit], len(items) > limit)

    def delete_file(self, file_id: str) -> bool:
        """Remove the file's row, then its body; False when there was no such file."""
        with self.transaction() as db:
            deleted = db.execute("DELETE FROM files WHERE id = ?", (file_id,)).rowcount
        with contextlib.suppress(FileNotFoundError):
            self.body_path(file_id).unlink()
        return bool(deleted)

    def sweep_expired(self, now: float | None = None) -> None:
        """Delete every expired file."""
        moment = int(time.time() if now is None else now)
        with contextlib.closing(self._connect()) as db:
            expired = [
                row["id"]
                for row in db.execute(
                    "SELECT id FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?",
                    (moment,),
                )
            ]
        for file_id in expired:
            self.delete_file(file_id)


def _stored(row: sqlite3.Row) -> StoredFile:
    return StoredFile(
        row["id"],
        row["bytes"],
        row["created_at"],
        row["filename"],
        row["purpose"],
        row["expires_at"],
    )


def _expired(stored: StoredFile, now: float | None) -> bool:
    moment = time.time() if now is None else now
    return stored.expires_at is not None and stored.expires_at <= moment
