"""Jobs on disk: one SQLite database (WAL) for their state, one folder per job for its inputs and outputs.

Why SQLite in WAL mode: state changes are small, frequent and must survive ``kill -9``; WAL lets the HTTP handlers
read progress while a worker thread writes it, and every commit is on disk before the call returns. Why files
beside it rather than blobs in it: videos are large, PyAV and FileResponse want paths, and removing a job's data is
one ``rmtree``.

Layout under ``root``::

    jobs.sqlite            states, progress, per-item errors (WAL: readers never wait for the writer's commit)
    <id>/in/source         the source photo
    <id>/in/source.2 …     more photos of the source person, if given (2 to MAX_SOURCE_PHOTOS)
    <id>/in/0000 …         the targets (photos) or the video, as uploaded
    <id>/out/…             finished outputs (each written to a temporary file, then renamed)
    <id>/work/…            the video engine's resumable working folder
    <id>/result.zip|.mp4   the result, renamed into place before the job is marked done
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import FacefuseError
from .files import remove_tree, sync_dir, write_synced


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"  # rows written by versions whose DELETE kept a cancelled job; DELETE now removes it
    EXPIRED = "expired"


ACTIVE = (JobState.QUEUED, JobState.RUNNING)
FINISHED = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class JobKind(str, Enum):
    PHOTOS = "photos"
    VIDEO = "video"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    options TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    expires REAL,
    frames_done INTEGER NOT NULL DEFAULT 0,
    frames_total INTEGER NOT NULL DEFAULT 0,
    fps REAL,
    eta_s REAL,
    error TEXT,
    result TEXT,
    warnings TEXT
);
CREATE TABLE IF NOT EXISTS items (
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    output TEXT,
    error TEXT,
    finished REAL,
    PRIMARY KEY (job_id, idx)
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, created);
"""

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]+")


def clean_name(name: str, fallback: str) -> str:
    """A display/file name from an upload or archive member: its last path part only, plain characters, short.

    Directory parts are dropped, so ``../../etc/passwd`` or ``C:\\x\\y.jpg`` can never name a place on disk; they
    are only labels in any case (inputs are stored under their index).
    """
    base = re.split(r"[/\\]", name)[-1]
    base = _UNSAFE_NAME.sub("_", base).strip(" .")[:80]
    return base or fallback


@dataclass(frozen=True)
class JobItem:
    index: int
    name: str
    state: str
    output: str | None
    error: dict[str, Any] | None
    finished: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "state": self.state, "output": self.output,
                "error": self.error}


@dataclass(frozen=True)
class JobRecord:
    id: str
    kind: JobKind
    state: JobState
    options: dict[str, Any]
    created: float
    started: float | None
    finished: float | None
    expires: float | None
    frames_done: int
    frames_total: int
    fps: float | None
    eta_s: float | None
    error: dict[str, Any] | None
    result: str | None
    warnings: list[str]

    @property
    def percent(self) -> float:
        if self.state is JobState.DONE:
            return 100.0
        return round(100.0 * self.frames_done / self.frames_total, 1) if self.frames_total else 0.0

    def to_dict(self, items: Sequence[JobItem] = (), errors: Sequence[JobItem] = ()) -> dict[str, Any]:
        """The job as ``GET /v1/jobs/{id}`` shows it; ``items`` and ``errors`` are the page of items and of failed
        items the caller chose (a 10,000-photo job is never listed whole)."""
        return {
            "id": self.id, "kind": self.kind.value, "state": self.state.value,
            "created_at": self.created, "started_at": self.started, "finished_at": self.finished,
            "expires_at": self.expires,
            "progress": {"percent": self.percent, "frames_done": self.frames_done, "frames_total": self.frames_total,
                         "fps": None if self.fps is None else round(self.fps, 2),
                         "eta_s": None if self.eta_s is None else round(self.eta_s, 1)},
            "items": [item.to_dict() for item in items],
            "errors": [item.to_dict() for item in errors],
            "error": self.error,
            "warnings": self.warnings,
            "options": self.options,
        }


def _record(row: sqlite3.Row) -> JobRecord:
    return JobRecord(id=row["id"], kind=JobKind(row["kind"]), state=JobState(row["state"]),
                     options=json.loads(row["options"]), created=row["created"], started=row["started"],
                     finished=row["finished"], expires=row["expires"], frames_done=row["frames_done"],
                     frames_total=row["frames_total"], fps=row["fps"], eta_s=row["eta_s"],
                     error=json.loads(row["error"]) if row["error"] else None, result=row["result"],
                     warnings=json.loads(row["warnings"]) if row["warnings"] else [])


def _item(row: sqlite3.Row) -> JobItem:
    return JobItem(index=row["idx"], name=row["name"], state=row["state"], output=row["output"],
                   error=json.loads(row["error"]) if row["error"] else None, finished=row["finished"])


class JobStore:
    """Thread-safe access to the jobs database and the job folders under ``root``."""

    def __init__(self, root: Path, retention_s: float) -> None:
        self.root = root
        self.retention_s = retention_s
        root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(root / "jobs.sqlite", check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives the process being killed (what resume relies on) without an fsync
        # per commit; a power cut may lose the last commits, which only moves a job back (files are synced first)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ---- folders ------------------------------------------------------------------------------------------------

    def folder(self, job_id: str) -> Path:
        return self.root / job_id

    def source_paths(self, job_id: str) -> list[Path]:
        """The source photo, then the other photos of the source person in the order they were given."""
        inputs = self.folder(job_id) / "in"
        others = sorted(inputs.glob("source.*"), key=lambda path: int(path.suffix[1:]))
        return [inputs / "source", *others]

    def target_path(self, job_id: str, index: int) -> Path:
        return self.folder(job_id) / "in" / f"{index:04d}"

    def output_dir(self, job_id: str) -> Path:
        return self.folder(job_id) / "out"

    def work_dir(self, job_id: str) -> Path:
        return self.folder(job_id) / "work"

    def result_path(self, record: JobRecord) -> Path | None:
        return self.folder(record.id) / record.result if record.result else None

    def remove_partials(self, job_id: str) -> None:
        """Temporary files a killed process was writing (``.part-*``); the finished files beside them stay."""
        for folder in (self.folder(job_id), self.output_dir(job_id)):
            for partial in folder.glob(".part-*"):
                partial.unlink(missing_ok=True)

    def keep_result_only(self, job_id: str) -> None:
        """A finished job needs only its result: its inputs, the photo outputs (now inside the zip) and the video
        segments go, so the disk holds what the client can still download."""
        for folder in ("in", "out", "work"):
            remove_tree(self.folder(job_id) / folder)

    def remove_files(self, job_id: str) -> None:
        remove_tree(self.folder(job_id))

    def remove_orphans(self) -> None:
        """Folders with no job row: uploads cut off by a crash before their row was written, or leftovers."""
        with self._lock:
            known = {row[0] for row in self._db.execute("SELECT id FROM jobs WHERE state != 'expired'")}
        for entry in self.root.iterdir():
            if entry.is_dir() and entry.name not in known:
                remove_tree(entry)

    # ---- jobs ---------------------------------------------------------------------------------------------------

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    def create(self, kind: JobKind, options: dict[str, Any], sources: Sequence[bytes],
               targets: Sequence[tuple[str, bytes]], job_id: str | None = None) -> JobRecord:
        """Writes the inputs, then the row: a crash in between leaves only an orphan folder, never a job without
        its files. ``sources``: the source photo, then any other photos of the same person. ``job_id`` is one from
        :meth:`new_id` the caller already reserved disk under."""
        job_id = job_id or self.new_id()
        partial = self.root / f".{job_id}.partial"
        (partial / "in").mkdir(parents=True)
        for number, source in enumerate(sources, start=1):  # the hidden folder, renamed at the end, is atomic
            write_synced(partial / "in" / ("source" if number == 1 else f"source.{number}"), source)
        for index, (_, data) in enumerate(targets):
            write_synced(partial / "in" / f"{index:04d}", data)
        partial.rename(self.folder(job_id))
        sync_dir(self.root)
        frames_total = len(targets) if kind is JobKind.PHOTOS else 0
        with self._tx() as db:
            db.execute("INSERT INTO jobs (id, kind, state, options, created, frames_total) VALUES (?, ?, ?, ?, ?, ?)",
                       (job_id, kind.value, JobState.QUEUED.value, json.dumps(options), time.time(), frames_total))
            db.executemany("INSERT INTO items (job_id, idx, name) VALUES (?, ?, ?)",
                           [(job_id, i, name) for i, (name, _) in enumerate(targets)])
        record = self.get(job_id)
        assert record is not None
        return record

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _record(row) if row else None

    def items(self, job_id: str, offset: int = 0, limit: int = -1, state: str | None = None) -> list[JobItem]:
        """The job's items in order, ``limit`` of them from ``offset`` (-1: all), only those in ``state`` if given."""
        query = "SELECT * FROM items WHERE job_id = ?" + (" AND state = ?" if state else "")
        with self._lock:
            rows = self._db.execute(query + " ORDER BY idx LIMIT ? OFFSET ?",
                                    (job_id, *([state] if state else []), limit, offset)).fetchall()
        return [_item(row) for row in rows]

    def item_counts(self, job_id: str) -> dict[str, int]:
        """How many of the job's items are pending, done and failed."""
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM items WHERE job_id = ? GROUP BY state",
                                    (job_id,)).fetchall()
        found = {state: count for state, count in rows}
        return {state: found.get(state, 0) for state in ("pending", "done", "failed")}

    def resumable(self) -> list[JobRecord]:
        """Jobs to (re)start, oldest first: queued ones, and those a stopped or killed process left running."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM jobs WHERE state IN ('queued', 'running') ORDER BY created")
            return [_record(row) for row in rows]

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        found = {state: count for state, count in rows}
        return {state.value: found.get(state.value, 0) for state in JobState}

    def start(self, job_id: str) -> bool:
        """Marks the job running; false when it is no longer queued or running (cancelled meanwhile)."""
        with self._tx() as db:
            changed = db.execute("UPDATE jobs SET state = 'running', started = COALESCE(started, ?) "
                                 "WHERE id = ? AND state IN ('queued', 'running')", (time.time(), job_id)).rowcount
        return changed == 1

    def progress(self, job_id: str, frames_done: int, frames_total: int, fps: float | None,
                 eta_s: float | None) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET frames_done = ?, frames_total = ?, fps = ?, eta_s = ? WHERE id = ?",
                       (frames_done, frames_total, fps, eta_s, job_id))

    def item_finished(self, job_id: str, index: int, output: str | None, error: FacefuseError | None, *,
                      frames_done: int, fps: float | None, eta_s: float | None) -> None:
        """Records one item and the job's progress in one commit, after the item's output file (if any) was
        renamed into place."""
        state = "failed" if error else "done"
        with self._tx() as db:
            db.execute("UPDATE items SET state = ?, output = ?, error = ?, finished = ? WHERE job_id = ? AND idx = ?",
                       (state, output, json.dumps(error.to_dict()) if error else None, time.time(), job_id, index))
            db.execute("UPDATE jobs SET frames_done = ?, fps = ?, eta_s = ? WHERE id = ?",
                       (frames_done, fps, eta_s, job_id))

    def finish(self, job_id: str, state: JobState, *, result: str | None = None,
               error: FacefuseError | None = None, warnings: Sequence[str] = ()) -> bool:
        """Ends a running job; false when it was cancelled meanwhile (a cancel wins over a late finish)."""
        now = time.time()
        with self._tx() as db:
            changed = db.execute(
                "UPDATE jobs SET state = ?, result = ?, error = ?, warnings = ?, finished = ?, expires = ?, eta_s = 0 "
                "WHERE id = ? AND state = 'running'",
                (state.value, result, json.dumps(error.to_dict()) if error else None, json.dumps(list(warnings)),
                 now, now + self.retention_s, job_id)).rowcount
        return changed == 1

    def delete(self, job_id: str) -> JobState | None:
        """Removes the job's rows and returns the state it had (None for an unknown job); its files are the
        caller's to remove once no worker writes them (:meth:`JobRunner.delete`)."""
        with self._tx() as db:
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        return JobState(row[0])

    def expire_due(self, now: float | None = None) -> list[str]:
        """Finished jobs past their retention become ``expired`` and lose their files; their rows stay so a
        client asking later hears "expired" rather than "never existed"."""
        now = time.time() if now is None else now
        with self._tx() as db:
            ids = [row[0] for row in db.execute(
                "SELECT id FROM jobs WHERE state IN ('done', 'failed', 'cancelled') AND expires <= ?", (now,))]
            db.executemany("UPDATE jobs SET state = 'expired' WHERE id = ?", [(i,) for i in ids])
        for job_id in ids:
            remove_tree(self.folder(job_id))
        return ids
