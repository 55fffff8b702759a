"""The submissions to grade on submit, in sqlite: one file (the hub's state/on-submit.sqlite, root's)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

MAX_ATTEMPTS = 2                          # a grading cut short twice is held (a crash, retried once)
# arriving: being copied out of the inbound (not graded yet; forgotten after a restart, then found again)
STATES = ("arriving", "queued", "running", "graded", "held", "refused", "error", "replaced")


class Queue:
    """The submissions to grade, in sqlite (one file, root's), safe to share between the service's threads."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock = threading.Lock()
        self.db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        with self.lock:
            self.db.execute("""CREATE TABLE IF NOT EXISTS jobs (
                id INTEGER PRIMARY KEY AUTOINCREMENT, student TEXT NOT NULL, assignment TEXT NOT NULL,
                folder TEXT NOT NULL, key TEXT NOT NULL UNIQUE, submitted_at TEXT NOT NULL DEFAULT '',
                mode TEXT NOT NULL DEFAULT 'score', queued_at REAL NOT NULL, state TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0, started_at REAL, finished_at REAL,
                message TEXT NOT NULL DEFAULT '', summary TEXT NOT NULL DEFAULT '')""")
            # when the service first saw each assignment switched on: what was handed in before is not graded
            self.db.execute("CREATE TABLE IF NOT EXISTS switched_on (assignment TEXT PRIMARY KEY, since REAL NOT NULL)")
        os.chmod(self.path, 0o600)

    def close(self) -> None:
        self.db.close()

    def switched_on(self, modes: dict[str, str], now: float | None = None) -> dict[str, float]:
        """assignment -> since when it is graded on submit (kept across restarts; forgotten when off)."""
        now = time.time() if now is None else now
        with self.lock:
            on = {a for a, m in modes.items() if m != "off"}
            known = {r[0]: r[1] for r in self.db.execute("SELECT assignment, since FROM switched_on")}
            for a in set(known) - on:
                self.db.execute("DELETE FROM switched_on WHERE assignment = ?", (a,))
            for a in on - set(known):
                self.db.execute("INSERT INTO switched_on (assignment, since) VALUES (?, ?)", (a, now))
                known[a] = now
            return {a: known[a] for a in on}

    def known(self, key: str) -> bool:
        with self.lock:
            return self.db.execute("SELECT 1 FROM jobs WHERE key = ?", (key,)).fetchone() is not None

    def add(self, student: str, assignment: str, folder: str, key: str, submitted_at: str, mode: str,
            now: float | None = None, state: str = "queued", message: str = "") -> tuple[int, list[int]]:
        """(the new job's id, the ids of that student's queued submissions of the assignment it replaces)."""
        now = time.time() if now is None else now
        with self._transaction():
            older = self._replace_queued(student, assignment, now) if state == "queued" else []
            cur = self.db.execute(
                "INSERT INTO jobs (student, assignment, folder, key, submitted_at, mode, queued_at, state, message)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (student, assignment, folder, key, submitted_at, mode, now,
                                                        state, message))
        return cur.lastrowid, older

    def ready(self, job_id: int, submitted_at: str, now: float | None = None) -> list[int]:
        """An arriving job, copied out of the inbound, queued as handed in at `submitted_at`; the ids of
        the student's older queued submissions of the assignment it replaces, in the same transaction
        (no worker takes one of them in between)."""
        now = time.time() if now is None else now
        with self._transaction():
            row = self.db.execute("SELECT student, assignment FROM jobs WHERE id = ?", (job_id,)).fetchone()
            self.db.execute("UPDATE jobs SET state = 'queued', submitted_at = ?, attempts = 0, started_at = NULL"
                            " WHERE id = ?", (submitted_at, job_id))
            return self._replace_queued(row["student"], row["assignment"], now, before=job_id)

    def requeue(self, job_id: int) -> None:
        """A job whose grading was cut short, back in the queue (its tries are counted by take)."""
        with self.lock:
            self.db.execute("UPDATE jobs SET state = 'queued' WHERE id = ?", (job_id,))

    def _replace_queued(self, student: str, assignment: str, now: float, before: int | None = None) -> list[int]:
        """Within a transaction: the student's queued submissions of the assignment (those before job
        `before`) marked replaced; their ids."""
        sql, args = "SELECT id FROM jobs WHERE student = ? AND assignment = ? AND state = 'queued'", [student, assignment]
        if before is not None:
            sql, args = sql + " AND id < ?", args + [before]
        older = [r[0] for r in self.db.execute(sql, args)]
        self.db.executemany("UPDATE jobs SET state = 'replaced', finished_at = ?, message = ? WHERE id = ?",
                            [(now, "replaced by a newer submission before it was graded", i) for i in older])
        return older

    @contextlib.contextmanager
    def _transaction(self):
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def recover(self, now: float | None = None) -> list[sqlite3.Row]:
        """After a restart: every job left running is queued again, or held after MAX_ATTEMPTS tries."""
        now = time.time() if now is None else now
        with self.lock:
            self.db.execute("DELETE FROM jobs WHERE state = 'arriving'")  # its folder is found again
            rows = list(self.db.execute("SELECT * FROM jobs WHERE state = 'running'"))
            for r in rows:
                if r["attempts"] >= MAX_ATTEMPTS:
                    self.db.execute("UPDATE jobs SET state = 'held', finished_at = ?, message = ? WHERE id = ?",
                                    (now, f"its grading was cut short {r['attempts']} times", r["id"]))
                else:
                    self.db.execute("UPDATE jobs SET state = 'queued' WHERE id = ?", (r["id"],))
        return rows

    def _started_since(self, since: float) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for r in self.db.execute("SELECT student, started_at FROM jobs WHERE started_at IS NOT NULL AND started_at >= ?"
                                 " AND attempts >= 1", (since,)):
            out.setdefault(r["student"], []).append(r["started_at"])
        return out

    def take(self, rate_per_hour: int, now: float | None = None) -> sqlite3.Row | None:
        """The next job to grade, marked running; None when nothing may start now.

        Fair: a student with a grading under way waits; of the others, the one whose last grading
        started longest ago goes first (never served: first of all), then the oldest submission."""
        now = time.time() if now is None else now
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                queued = list(self.db.execute("SELECT * FROM jobs WHERE state = 'queued' ORDER BY queued_at, id"))
                busy = {r[0] for r in self.db.execute("SELECT student FROM jobs WHERE state = 'running'")}
                recent = self._started_since(now - 3600)
                last = {r[0]: r[1] for r in self.db.execute(
                    "SELECT student, MAX(started_at) FROM jobs WHERE started_at IS NOT NULL GROUP BY student")}
                ready = [r for r in queued if r["student"] not in busy
                         and len(recent.get(r["student"], [])) < rate_per_hour]
                if not ready:
                    self.db.execute("COMMIT")
                    return None
                pick = min(ready, key=lambda r: (last.get(r["student"]) or 0.0, r["queued_at"], r["id"]))
                self.db.execute("UPDATE jobs SET state = 'running', attempts = attempts + 1, started_at = ?, "
                                "message = '' WHERE id = ?", (now, pick["id"]))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            return self.db.execute("SELECT * FROM jobs WHERE id = ?", (pick["id"],)).fetchone()

    def waiting_for_rate(self, rate_per_hour: int, now: float | None = None) -> list[tuple[sqlite3.Row, float]]:
        """(queued job, when its student may be graded again) for students at the rate limit."""
        now = time.time() if now is None else now
        with self.lock:
            recent = self._started_since(now - 3600)
            out = []
            for r in self.db.execute("SELECT * FROM jobs WHERE state = 'queued' ORDER BY id"):
                starts = sorted(recent.get(r["student"], []))
                if len(starts) >= rate_per_hour:
                    out.append((r, starts[len(starts) - rate_per_hour] + 3600))
            return out

    def finish(self, job_id: int, state: str, message: str = "", summary: dict | None = None,
               now: float | None = None) -> None:
        assert state in STATES, state
        now = time.time() if now is None else now
        with self.lock:
            self.db.execute("UPDATE jobs SET state = ?, finished_at = ?, message = ?, summary = ? WHERE id = ?",
                            (state, now, message, json.dumps(summary or {}), job_id))

    def put_back(self, job_id: int) -> None:
        """A grading stopped by the service's own stop (not a crash): queued again, the try not counted."""
        with self.lock:
            self.db.execute("UPDATE jobs SET state = 'queued', attempts = MAX(attempts - 1, 0) WHERE id = ? "
                            "AND state = 'running'", (job_id,))

    def get(self, job_id: int) -> sqlite3.Row | None:
        with self.lock:
            return self.db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()

    def rows(self, **where) -> list[sqlite3.Row]:
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(f"{k} = ?" for k in where) if where else "") + " ORDER BY id"
        with self.lock:
            return list(self.db.execute(sql, tuple(where.values())))

    def position(self, job_id: int) -> int:
        """How many queued jobs were queued before this one (a rough place in the line)."""
        with self.lock:
            r = self.db.execute("SELECT queued_at FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if r is None:
                return 0
            return self.db.execute("SELECT COUNT(*) FROM jobs WHERE state IN ('queued', 'running') AND queued_at < ?",
                                   (r[0],)).fetchone()[0]
