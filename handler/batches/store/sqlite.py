"""The durable state of the Files (and Batches) API: one SQLite database beside the file bodies.

Everything that must survive a crash goes through `Store`: rows change only inside transactions,
and a file's row is written only after its body is complete on disk, so a crash leaves either
the whole file or nothing. SQLite in WAL mode with a busy timeout lets the API-server processes
of a container share one store. The other backend, `handler.batches.store.s3.store.S3Store`,
offers the same methods over S3, for replicas sharing one bucket: both are a
`handler.batches.store.interface.BatchStore`. Where the work differs (a whole batch here, chunks
there), the store says so through its claims (`Work`) and its own `add_chunks`, `results_dir`,
`fail_batch`, `finish_chunk`, `chunk_results` and `assemble_batch`: here a batch is one chunk,
its results the files its run appends, which become the batch's output and error files as it
finishes; the runner asks nothing else.

A batch row holds the Batch object as the API shows it, plus the lease of the runner that owns
it: a runner claims a batch only when nobody holds a live lease on it, renews the lease while it
works and changes the batch only while the lease is its own, so the API-server processes sharing
the store never run one batch twice, and a batch whose runner died is taken over when its lease
runs out.

Layout under the store directory (SAGEMAKER_BATCH_STORE):
    store.sqlite3                 the rows
    files/<id>                    file bodies, complete
    files/<id>.partial            a body being written (removed on failure)
    batches/<id>/output.jsonl     a running batch's results so far
                                  (handler.batches.running.results)
    batches/<id>/errors.jsonl
    batches/<id>/chunk.json       its tallies once its lines are all answered (`finish_chunk`)
"""

import contextlib
import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from vllm_sagemaker.handler.batches.store.chunking import Chunk
from vllm_sagemaker.handler.batches.store.types import (
    UNFINISHED,
    Batch,
    Claim,
    Page,
    StoredFile,
    StoreError,
    Work,
)

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
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    status TEXT NOT NULL,
    object TEXT NOT NULL,
    owner TEXT,
    lease_until REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_by_status ON batches (status, seq);
"""


class Store:
    """The embedded store: one container's processes share it; a batch runs whole."""

    # How often a run renews its lease, publishes its counts and looks for a cancel.
    check_every_s = 0.5

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.files_dir = self.root / "files"
        self.batches_dir = self.root / "batches"
        try:
            # A store it creates is the server's user's alone: uploaded files are users' data.
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.files_dir.mkdir(exist_ok=True)
            self.batches_dir.mkdir(exist_ok=True)
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

    def open_body(self, file_id: str, chunk: Chunk | None = None) -> IO[bytes]:
        """A file's bytes. Batches run whole here: there is no chunk to read alone."""
        if chunk is not None:
            raise StoreError("the embedded store runs batches whole, not in chunks")
        return self.body_path(file_id).open("rb")

    def add_file(self, stored: StoredFile) -> None:
        """Make a completely written `<id>.partial` body a file: rename, then insert its row."""
        self._move_body(self.partial_path(stored.id), stored.id)
        with self.transaction() as db:
            _insert_file(db, stored)

    def _move_body(self, source: Path, file_id: str) -> None:
        try:
            os.replace(source, self.body_path(file_id))
        except OSError as error:
            raise StoreError(f"the file body could not be stored: {error}") from None

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

    def batch_dir(self, batch_id: str) -> Path:
        return self.batches_dir / batch_id

    def add_batch(self, batch: Batch) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO batches (id, status, object) VALUES (?, ?, ?)",
                (batch["id"], batch["status"], json.dumps(batch)),
            )

    def batch(self, batch_id: str) -> Batch | None:
        with contextlib.closing(self._connect()) as db:
            row = db.execute("SELECT object FROM batches WHERE id = ?", (batch_id,)).fetchone()
        return json.loads(row["object"]) if row else None

    def batches(self, limit: int, after: str | None) -> tuple[list[Batch], bool]:
        """One page of batches, newest first, after the batch `after`; and whether more follow."""
        where, params = "", []
        if after:
            where = "WHERE seq < (SELECT seq FROM batches WHERE id = ?)"
            params.append(after)
        with contextlib.closing(self._connect()) as db:
            rows = db.execute(
                f"SELECT object FROM batches {where} ORDER BY seq DESC LIMIT ?",
                (*params, limit + 1),
            ).fetchall()
        items = [json.loads(row["object"]) for row in rows]
        return items[:limit], len(items) > limit

    def change_batch(
        self, batch_id: str, change: Callable[[Batch], Batch | None], owner: str | None = None
    ) -> Batch | None:
        """Apply `change` to the batch in one transaction and return the batch as it now is.

        `change` returns the new object, or None to leave it as it is. With `owner`, nothing
        changes unless that runner holds the batch (None is returned): a runner whose lease was
        taken over can no longer write."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT object, owner FROM batches WHERE id = ?", (batch_id,)
            ).fetchone()
            if row is None or (owner is not None and row["owner"] != owner):
                return None
            batch = json.loads(row["object"])
            changed = change(batch)
            if changed is None:
                return batch
            db.execute(
                "UPDATE batches SET status = ?, object = ? WHERE id = ?",
                (changed["status"], json.dumps(changed), batch_id),
            )
            return changed

    def claim(
        self, owner: str, lease_s: float, max_running: int, now: float | None = None
    ) -> Claim | None:
        """Take the oldest unfinished batch nobody holds, unless `max_running` batches already
        have a live lease; the lease lasts `lease_s`."""
        moment = time.time() if now is None else now
        marks = ", ".join("?" * len(UNFINISHED))
        with self.transaction() as db:
            (running,) = db.execute(
                f"SELECT COUNT(*) FROM batches WHERE status IN ({marks}) AND lease_until > ?",
                (*UNFINISHED, moment),
            ).fetchone()
            if running >= max_running:
                return None
            row = db.execute(
                f"SELECT id, object FROM batches WHERE status IN ({marks}) AND lease_until <= ? "
                "ORDER BY seq LIMIT 1",
                (*UNFINISHED, moment),
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE batches SET owner = ?, lease_until = ? WHERE id = ?",
                (owner, moment + lease_s, row["id"]),
            )
            batch = json.loads(row["object"])
            work = Work.VALIDATE if batch["status"] == "validating" else Work.LINES
            return Claim(batch, owner, work)

    def renew(self, claim: Claim, lease_s: float) -> Claim | None:
        """Extend the runner's lease; None when the batch is no longer its own."""
        with self.transaction() as db:
            renewed = db.execute(
                "UPDATE batches SET lease_until = ? WHERE id = ? AND owner = ?",
                (time.time() + lease_s, claim.batch["id"], claim.owner),
            ).rowcount
        return claim if renewed else None

    def release(self, claim: Claim) -> None:
        """Give the batch up (at shutdown): another runner may take it at once."""
        with self.transaction() as db:
            db.execute(
                "UPDATE batches SET owner = NULL, lease_until = 0 WHERE id = ? AND owner = ?",
                (claim.batch["id"], claim.owner),
            )

    def add_chunks(self, batch_id: str, lengths: list[int]) -> None:
        """How a validated batch's lines are run: here whole, as one chunk, by one runner, so
        there is nothing to write."""

    def results_dir(self, claim: Claim) -> Path:
        """Where the claim's run appends its results: beside the batch, so a new run resumes."""
        return self.batch_dir(claim.batch["id"])

    def fail_batch(
        self, batch_id: str, owner: str | None, change: Callable[[Batch], Batch]
    ) -> Batch | None:
        """Give the batch its failure (`change`) and release it, if `owner` holds it."""
        if owner is None:
            return None
        return self.finish_batch(batch_id, owner, [], change)

    def finish_chunk(
        self, batch_id: str, chunk: Chunk | None, files: dict[str, Path], tallies: dict[str, Any]
    ) -> bool:
        """The batch's one chunk is finished: note its results files and tallies beside them,
        for `chunk_results` and `assemble_batch` (which changes the batch only for its holder)."""
        if chunk is not None:
            raise StoreError("the embedded store runs batches whole, not in chunks")
        record = {"files": {kind: str(path) for kind, path in files.items()}, "tallies": tallies}
        target = self._chunk_path(batch_id)
        written = target.with_suffix(".partial")
        try:
            written.write_text(json.dumps(record))
            os.replace(written, target)
        except OSError as error:
            raise StoreError(f"the batch's results could not be noted: {error}") from None
        return True

    def chunk_results(self, batch_id: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """The batch's one chunk, once finished: index 0 and its tallies."""
        yield 0, self._finished_chunk(batch_id)["tallies"]

    def assemble_batch(
        self,
        batch_id: str,
        owner: str,
        outputs: dict[str, StoredFile],
        change: Callable[[Batch], Batch],
    ) -> Batch | None:
        """The batch's one chunk's results of each kind in `outputs` become that file, and the
        batch takes its final state, in one transaction (`finish_batch`)."""
        files = self._finished_chunk(batch_id)["files"]
        made = []
        for kind, stored in outputs.items():
            source = Path(files[kind])
            made.append((dataclasses.replace(stored, bytes=source.stat().st_size), source))
        return self.finish_batch(batch_id, owner, made, change)

    def _chunk_path(self, batch_id: str) -> Path:
        return self.batch_dir(batch_id) / "chunk.json"

    def _finished_chunk(self, batch_id: str) -> dict[str, Any]:
        try:
            record: dict[str, Any] = json.loads(self._chunk_path(batch_id).read_text())
        except FileNotFoundError:
            raise StoreError(f"batch {batch_id} has no finished chunk") from None
        return record

    def finish_batch(
        self,
        batch_id: str,
        owner: str,
        outputs: list[tuple[StoredFile, Path]],
        change: Callable[[Batch], Batch],
    ) -> Batch | None:
        """Make the results files of a batch files and change the batch, in one transaction.

        The bodies are hard-linked from `source`, which stays until the caller removes it, so a
        crash at any point leaves the results where a new run finds them; repeating is safe."""
        for stored, source in outputs:
            target = self.body_path(stored.id)
            try:
                if not target.exists():
                    os.link(source, target)
            except OSError as error:
                raise StoreError(f"the results file could not be stored: {error}") from None
        with self.transaction() as db:
            row = db.execute(
                "SELECT object, owner FROM batches WHERE id = ?", (batch_id,)
            ).fetchone()
            if row is None or row["owner"] != owner:
                return None
            for stored, _ in outputs:
                _insert_file(db, stored, "OR IGNORE")
            changed = change(json.loads(row["object"]))
            db.execute(
                "UPDATE batches SET status = ?, object = ?, owner = NULL, lease_until = 0 "
                "WHERE id = ?",
                (changed["status"], json.dumps(changed), batch_id),
            )
            return changed


def _insert_file(db: sqlite3.Connection, stored: StoredFile, conflict: str = "") -> None:
    db.execute(
        f"INSERT {conflict} INTO files (id, bytes, created_at, filename, purpose, expires_at) "
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
