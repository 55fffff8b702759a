"""Grading on submit: a student's feedback on the hub minutes after they submit (docs/hub.md,
"Feedback on submit").

A hub-managed service (jupyterhub_config.py starts `python -m hub.on_submit serve SETTINGS` as root;
it ends with the hub) watches each student's own inbound, the folder `nbgrader submit` writes into
on the hub (deploy.py: users/<student>/inbound). For an assignment whose setting is not "off"
(`python course_tool.py on-submit ASSIGNMENT off|feedback|score`, the instructor's file
on_submit.json in the course folder), each new submission is:

1. copied out of the inbound the way the course's collect copies it (autograder/collect/exchange.py:
   regular files owned by the student only, never a link, capped; the time the batch would grade,
   which is the inbound files' time when the student's timestamp.txt disagrees with it), into a
   spool folder of the grading account's;
2. queued in a sqlite file out of everyone's reach but root's (state/on-submit.sqlite). The queue is
   fair between students: at most one grading of a student at a time, the student served longest ago
   goes first, a newer submission replaces that student's queued older one, and a student who had
   `rate_per_hour` gradings in the last hour waits (the status page says until when). A restart
   keeps the queue: a submission is known by its folder and the time its files were written, so it is
   never queued twice; one that was being graded when the service stopped is graded again, and one
   whose grading was cut short twice (a crash) is shown as held;
3. graded by the course's batch grader for one student (course_tool.py grade-one: the same sandbox,
   two runs, answer kernel, runtime watch and holds, the self-check of the reference solutions once
   per version of the assignment), as the grading account (`<instructor>-grader`, never a student,
   never in a student's server), in a view of the machine without the exchange, the students'
   folders, the repository, the queue or the other submissions (course_tool.hiding_view);
4. stored apart from the instructor's gradebook: on-submit/results/<assignment>/<student>/<job>/
   (readable by the instructor; course_tool.py on-submit-grades, accept-on-submit and autograde's
   comparison read it). The gradebook itself is written only by the instructor's batch or by
   `course_tool.py accept-on-submit`;
5. delivered into the student's own folder ~/<assignment>/on-submit-feedback/: status.html (queued,
   being graded, the score per task and concern, held for review, or what was wrong with the
   submission), status.json (the same for programs) and, unless held, the batch's feedback page of
   each notebook (with the points hidden in the "feedback" setting). The files are written by a
   process running as the student, opened without following links: a student can only ever
   overwrite their own files.

Stdlib only at import time (the service imports the grader's collect lazily).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import hashlib
import html
import json
import os
import pwd
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODES = ("off", "feedback", "score")
MODES_FILE = "on_submit.json"            # in the course folder: {"hw4": "score", "lab11": "feedback"}
FEEDBACK_DIR = "on-submit-feedback"      # in the student's assignment folder
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # an assignment or notebook name we write
SETTLE_S = 2.0                            # a submission folder untouched this long is complete
MAX_ATTEMPTS = 2                          # a grading cut short twice is held (a crash, retried once)
HELD = "held for review"

# arriving: being copied out of the inbound (not graded yet; forgotten after a restart, then found again)
STATES = ("arriving", "queued", "running", "graded", "held", "refused", "error", "replaced")


@dataclass
class Settings:
    """What the service reads from the hub's settings file (deploy.py write_settings)."""
    students: list
    users_dir: Path
    course_dir: Path
    state: Path
    exchange: Path
    repo: Path
    env: Path
    cache: Path
    grader: str
    instructor: str
    dir: Path                  # on-submit/: spool/, results/, course/
    workers: int
    rate_per_hour: int
    poll_s: float

    @classmethod
    def read(cls, path: Path) -> "Settings":
        s = json.loads(Path(path).read_text())
        o = s["on_submit"]
        return cls(students=list(s["students"]), users_dir=Path(s["users_dir"]), course_dir=Path(s["course_dir"]),
                   state=Path(s["state"]), exchange=Path(s["exchange"]), repo=Path(s["repo"]), env=Path(s["env"]),
                   cache=Path(s["cache"]), grader=s["grader"], instructor=s["instructor"], dir=Path(o["dir"]),
                   workers=int(o["workers"]), rate_per_hour=int(o["rate_per_hour"]), poll_s=float(o["poll_s"]))

    @property
    def spool(self) -> Path:
        return self.dir / "spool"

    @property
    def results(self) -> Path:
        return self.dir / "results"

    @property
    def grader_course(self) -> Path:
        return self.dir / "course"

    def home_of(self, student: str) -> Path:
        return self.users_dir / student / "home"


def default_workers() -> int:
    """One worker per free core: the cores less one for the hub and the students' servers."""
    return max(1, (os.cpu_count() or 1) - 1)


# ----------------------------------------------------------------------------- the instructor's switch

def read_modes(course_dir: Path) -> dict[str, str]:
    """assignment -> mode from the course folder's on_submit.json; ValueError naming what is wrong."""
    path = Path(course_dir) / MODES_FILE
    if not os.path.lexists(path):
        return {}
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_size > 65536:
        raise ValueError(f"{path} is not a small regular file")
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object of assignment: mode")
    bad = {a: m for a, m in data.items() if not (isinstance(a, str) and NAME_RE.match(a)) or m not in MODES}
    if bad:
        raise ValueError(f"{path}: {bad} (each mode is one of {', '.join(MODES)})")
    return dict(data)


def write_modes(course_dir: Path, modes: dict[str, str]) -> None:
    path = Path(course_dir) / MODES_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(sorted(modes.items())), indent=1) + "\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- the queue

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
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                older = [r[0] for r in self.db.execute(
                    "SELECT id FROM jobs WHERE student = ? AND assignment = ? AND state = 'queued'", (student, assignment))]
                if state == "queued" and older:
                    self.db.executemany("UPDATE jobs SET state = 'replaced', finished_at = ?, message = ? WHERE id = ?",
                                        [(now, "replaced by a newer submission before it was graded", i) for i in older])
                cur = self.db.execute(
                    "INSERT INTO jobs (student, assignment, folder, key, submitted_at, mode, queued_at, state, message)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (student, assignment, folder, key, submitted_at, mode, now,
                                                            state, message))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return cur.lastrowid, older if state == "queued" else []

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


# ----------------------------------------------------------------------------- what the student reads

def utc(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def summary_of(result: dict, mode: str) -> dict:
    """The status's notebooks (per task and concern) from course_tool.py grade-one's result."""
    from autograder.export.feedback_pages import test_label

    report = result.get("report") or {}
    nbs = []
    for nb in report.get("notebooks", []):
        tests = []
        for c in nb.get("cells", []):
            if c.get("needs_manual_grade") and not nb.get("needs_manual_review"):
                tests.append({"grade_id": c["grade_id"], "label": "Written answer: " + c["grade_id"].replace("_", " "),
                              "verdict": "awaiting grading", "points": None, "max_points": c.get("max_points")})
                continue
            passed = c.get("points") == c.get("max_points")
            tests.append({"grade_id": c["grade_id"], "label": test_label(c["grade_id"]),
                          "verdict": "passed" if passed else "failed", "points": c.get("points"),
                          "max_points": c.get("max_points"), "message": (c.get("error") or "")[:500]})
        nbs.append({"notebook": nb.get("notebook"), "status": nb.get("status"), "points": nb.get("points"),
                    "max_points": nb.get("max_points"), "late_penalty": nb.get("late_penalty") or 0,
                    "reason": nb.get("reason") or "", "held": bool(nb.get("needs_manual_review")), "tests": tests})
    out = {"notebooks": nbs, "notes": list(result.get("notes") or []), "timestamp": report.get("timestamp"),
           "late": bool(result.get("late")) or any(n["late_penalty"] for n in nbs)}
    if mode != "score":  # the points stay with the instructor until they release them
        for n in out["notebooks"]:
            n["points"] = n["max_points"] = n["late_penalty"] = None
            for t in n["tests"]:
                t["points"] = t["max_points"] = None
    return out


def status_page(status: dict) -> str:
    """status.html: what the student reads. Everything from the submission is escaped."""
    e = html.escape
    a = e(status["assignment"])
    state = status["state"]
    head = {"queued": "queued for grading", "running": "being graded", "graded": "graded",
            "held": HELD, "refused": "not graded", "error": "not graded on submit"}.get(state, e(state))
    lines = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
             "<meta http-equiv='refresh' content='20'>" if state in ("queued", "running") else "",
             f"<title>{a}: feedback on submit</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto}td,th{padding:.2em .8em;"
             "text-align:left}.passed{color:#3c763d}.failed{color:#c9302c}.msg{color:#555;font-size:90%}</style>",
             "</head><body>", f"<h2>{a}: your submission of {e(status.get('submitted_at') or '?')} is {head}</h2>"]
    if status.get("message"):
        lines.append(f"<p>{e(status['message'])}</p>")
    if state == "graded":
        s = status["summary"]
        if s.get("late"):
            lines.append("<p>It was submitted after the due date: it is marked late, as the instructor's grading "
                         "will mark it.</p>")
        if status["mode"] != "score":
            lines.append("<p>Your instructor shows which tests pass now and the points when they release the "
                         "grades.</p>")
        for note in s.get("notes", []):
            lines.append(f"<p class='msg'>{e(note)}</p>")
        for nb in s["notebooks"]:
            name = e(str(nb["notebook"]))
            waiting = sum(t["max_points"] or 0 for t in nb["tests"] if t["verdict"] == "awaiting grading")
            score = "" if nb["points"] is None else f": {nb['points']:g} of {nb['max_points'] - waiting:g} points" + (
                f" so far ({waiting:g} more for written answers a person grades)" if waiting else "")
            lines.append(f"<h3>{name}{score}</h3>")
            if nb["status"] != "graded":
                lines.append(f"<p>{e(nb['status'])}: {e(nb['reason'])}</p>")
                continue
            if status.get("pages") and f"{nb['notebook']}.html" in status["pages"]:
                lines.append(f"<p><a href='{e(nb['notebook'])}.html'>The feedback page of {name}</a> (your cells, "
                             f"each test's result and its message).</p>")
            lines.append("<table><tr><th>task and concern</th><th>result</th>"
                         + ("<th>points</th>" if status["mode"] == "score" else "") + "</tr>")
            for t in nb["tests"]:
                pts = "" if status["mode"] != "score" else (
                    "<td></td>" if t["points"] is None else f"<td>{t['points']:g} / {t['max_points']:g}</td>")
                msg = f"<div class='msg'>{e(t['message'])}</div>" if t.get("message") and t["verdict"] == "failed" else ""
                lines.append(f"<tr><td>{e(t['label'])}{msg}</td><td class='{e(t['verdict'])}'>{e(t['verdict'])}</td>"
                             f"{pts}</tr>")
            lines.append("</table>")
    lines.append(f"<p class='msg'>Updated {e(status['updated'])}. Grading on submit is feedback for you; your "
                 f"grade is what your instructor's grading gives.</p></body></html>")
    return "\n".join(l for l in lines if l)


# Runs as the student (their uid and groups): writes the pages into ~/<assignment>/on-submit-feedback
# without following a link anywhere, then removes the earlier pages that this one does not list.
_DELIVER = r'''
import json, os, sys
d = json.load(sys.stdin)
F = os.O_NOFOLLOW | os.O_CLOEXEC
def sub(fd, name):
    try:
        os.mkdir(name, 0o755, dir_fd=fd)
    except FileExistsError:
        pass
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | F, dir_fd=fd)
fd = os.open(d["home"], os.O_RDONLY | os.O_DIRECTORY | F)
for part in (d["assignment"], d["folder"]):
    nfd = sub(fd, part); os.close(fd); fd = nfd
for name, text in d["files"].items():
    tmp = "." + name + ".tmp"
    try:
        os.unlink(tmp, dir_fd=fd)
    except FileNotFoundError:
        pass
    w = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | F, 0o644, dir_fd=fd)
    with os.fdopen(w, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
for name in d["remove"]:
    try:
        import stat as S
        if S.S_ISREG(os.lstat(name, dir_fd=fd).st_mode):
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
print("ok")
'''


def _pdeathsig() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG, after the uid change
    except OSError:
        pass


# ----------------------------------------------------------------------------- the service

class Service:
    def __init__(self, settings: Settings, log=None):
        self.s = settings
        self.queue = Queue(settings.state / "on-submit.sqlite")
        self.stopping = threading.Event()
        self.running: dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.modes: dict[str, str] = {}
        self.modes_changed = time.time()
        self.checked: set = set()
        self.sync_lock = threading.Lock()
        self.delivered_pages: dict[tuple[str, str], list[str]] = {}
        self.rate_told: dict[int, float] = {}
        self.skipped: set = set()
        self._log = log or (lambda m: print(f"[on-submit] {m}", flush=True))
        self.log_path = settings.dir / "service.log"

    def log(self, msg: str) -> None:
        self._log(msg)
        try:
            with open(self.log_path, "a") as f:
                f.write(f"{utc(time.time())} {msg}\n")
        except OSError:
            pass

    # -- reading the instructor's switch
    def refresh_modes(self) -> None:
        try:
            self.modes = read_modes(self.s.course_dir)
            path = self.s.course_dir / MODES_FILE
            # when the instructor last changed the switch: what is handed in after it is graded
            self.modes_changed = os.lstat(path).st_mtime if self.modes else time.time()
        except (ValueError, OSError) as e:
            self.log(f"on_submit.json not read, the earlier settings stay: {e}")

    # -- finding submissions
    def scan(self) -> int:
        """Queue every new, complete submission of an assignment graded on submit; how many were queued."""
        from autograder.collect import exchange

        self.refresh_modes()
        since = self.queue.switched_on(self.modes, now=min(time.time(), self.modes_changed))
        added = 0
        for student in self.s.students:
            inbound = self.s.users_dir / student / "inbound"
            try:
                names = sorted(os.listdir(inbound))
                uid = pwd.getpwnam(student).pw_uid
            except (OSError, KeyError):
                continue
            for name in names:
                parts = name.split("+")
                # a folder in another's name, or malformed: the batch's collect sets it aside and says why
                if len(parts) != 4 or parts[0] != student:
                    continue
                assignment = parts[1]
                mode = self.modes.get(assignment, "off")
                if mode == "off":
                    continue
                folder = inbound / name
                try:
                    st = os.lstat(folder)
                    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
                        self.skip(folder, "not a folder of the student's own")
                        continue
                    written = exchange.written_at(folder, max_entries=1000)
                except OSError as e:
                    self.skip(folder, f"cannot be read ({e})")
                    continue
                stamp = written.replace(tzinfo=datetime.timezone.utc).timestamp()
                if stamp < since.get(assignment, float("inf")):
                    # handed in before grading on submit was switched on: the batch grades it
                    self.skip(folder, f"handed in before {assignment} was switched on ({utc(since[assignment])})")
                    continue
                if time.time() - stamp < SETTLE_S or not os.path.lexists(folder / "timestamp.txt"):
                    continue  # nbgrader submit is still writing it (timestamp.txt comes last)
                key = f"{name}@{stamp:.6f}"
                if self.queue.known(key):
                    continue
                self.enqueue(student, assignment, mode, folder, key)
                added += 1
        return added

    def skip(self, folder: Path, why: str) -> None:
        """Say once per folder why it is not graded on submit (the service's log)."""
        if folder not in self.skipped:
            self.skipped.add(folder)
            self.log(f"not graded on submit: {folder.name}: {why}")

    def enqueue(self, student: str, assignment: str, mode: str, folder: Path, key: str) -> None:
        from autograder.collect import exchange

        job_id, _ = self.queue.add(student, assignment, folder.name, key, "", mode, state="arriving")
        spool = self.s.spool / str(job_id)
        dest = spool / "submitted" / student / assignment
        try:
            if spool.exists():
                shutil.rmtree(spool)
            dest.parent.mkdir(parents=True)
            report = exchange.copy_submission(folder, dest, pwd.getpwnam(student).pw_uid, exchange.Limits())
            record = exchange.check(folder, dest)
            submitted_at = record["graded_as"].strip()
            notes = [f"not graded: {r}" for r in report.refused]
            if record["replaced"]:
                notes.append(f"your timestamp.txt says {str(record['timestamp_txt'] or 'nothing').strip()[:80]}, "
                             f"your files were written at {record['files_written']}: graded as the latter")
            (spool / "notes.json").write_text(json.dumps(notes))
            self.give_to_grader(spool)
        except (OSError, ValueError) as e:
            self.queue.finish(job_id, "refused", f"your submission could not be read: {e.strerror if isinstance(e, OSError) and e.strerror else e}")
            self.deliver(self.queue.get(job_id))
            return
        with self.queue.lock:
            self.queue.db.execute("UPDATE jobs SET state = 'queued', submitted_at = ?, attempts = 0, started_at = NULL"
                                  " WHERE id = ?", (submitted_at, job_id))
        # the older queued ones of this student are replaced now that this one is complete
        with self.queue.lock:
            older = [r[0] for r in self.queue.db.execute(
                "SELECT id FROM jobs WHERE student = ? AND assignment = ? AND state = 'queued' AND id < ?",
                (student, assignment, job_id))]
            for i in older:
                self.queue.db.execute("UPDATE jobs SET state = 'replaced', finished_at = ?, message = ? WHERE id = ?",
                                      (time.time(), "replaced by a newer submission before it was graded", i))
        for i in older:
            shutil.rmtree(self.s.spool / str(i), ignore_errors=True)
        self.log(f"queued {student}/{assignment} ({folder.name}) as job {job_id}"
                 + (f", replacing {older}" if older else ""))
        self.deliver(self.queue.get(job_id))

    def give_to_grader(self, path: Path) -> None:
        pw = pwd.getpwnam(self.s.grader)
        for p in [path, *path.rglob("*")]:
            os.lchown(p, pw.pw_uid, pw.pw_gid)
            if not p.is_symlink():
                os.chmod(p, 0o700 if p.is_dir() else 0o600)

    # -- the grader's copy of the course
    def sync_course(self, assignment: str) -> None:
        """The grading account's course folder: the instructor's source/<assignment>, grader, settings."""
        src, dst = self.s.course_dir, self.s.grader_course
        with self.sync_lock:
            changed = False
            for rel in (f"source/{assignment}", "autograder", "course_tool.py", "nbgrader_config.py"):
                a, b = src / rel, dst / rel
                if _digest(a) == _digest(b):
                    continue
                changed = True
                if b.is_dir() and not b.is_symlink():
                    shutil.rmtree(b)
                elif os.path.lexists(b):
                    b.unlink()
                b.parent.mkdir(parents=True, exist_ok=True)
                if a.is_dir():
                    shutil.copytree(a, b, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy2(a, b)
            if changed:
                self.give_to_grader(dst)
                os.chmod(dst, 0o700)

    def due_date(self, assignment: str) -> str:
        from autograder.batch.gradebook_merge import course_duedate, with_gradebook_retry

        due = with_gradebook_retry("reading the due date", lambda: course_duedate(assignment, self.s.course_dir),
                                   db=self.s.course_dir / "gradebook.db")
        return "" if due is None else due.isoformat()

    def grader_env(self) -> dict:
        pw = pwd.getpwnam(self.s.grader)
        return {"HOME": pw.pw_dir, "USER": self.s.grader, "LOGNAME": self.s.grader, "LANG": "C.UTF-8",
                "PATH": f"{self.s.env / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LLMRL_CACHE": str(self.s.cache),
                "PYTHONPATH": str(self.s.grader_course), "PYTHONUNBUFFERED": "1"}

    def grader_view(self, job_dir: Path) -> list[str]:
        """course_tool.hiding_view's settings for one job: nothing of the hub but this job's own folder."""
        sys.path.insert(0, str(self.s.repo / "hub"))
        from course_tool import hiding_view

        return hiding_view({
            "hide": [str(self.s.exchange), str(self.s.repo), str(self.s.users_dir), str(self.s.spool),
                     str(self.s.results), str(self.s.state)],
            "show": sorted({str(self.s.repo / ".venv"), str(self.s.repo / "lib"), str(self.s.env)}),
            "writable": [str(job_dir)]})

    # -- grading one job
    def grade(self, row) -> None:
        job_id, student, a, mode = row["id"], row["student"], row["assignment"], row["mode"]
        spool = self.s.spool / str(job_id)
        self.deliver(row)  # "being graded"
        started = time.monotonic()
        try:
            self.sync_course(a)
            due = self.due_date(a)
        except Exception as e:  # noqa: BLE001 - the course's problem, never the student's
            self.queue.finish(job_id, "error", "the course's grader could not be prepared; your instructor's "
                              "grading will grade this submission")
            self.log(f"job {job_id}: preparing the grader failed: {type(e).__name__}: {e}")
            self.deliver(self.queue.get(job_id))
            return
        out = spool / "out"
        if out.exists():
            shutil.rmtree(out)
        out.mkdir()
        self.give_to_grader(out)
        python = str(self.s.env / "bin" / "python")
        cmd = self.grader_view(spool) + [python, str(self.s.grader_course / "course_tool.py"), "grade-one", a,
                                         "--submitted", str(spool / "submitted"), "--out", str(out),
                                         "--duedate", due or "-", "--mode", mode]
        pw = pwd.getpwnam(self.s.grader)
        try:
            proc = subprocess.Popen(cmd, cwd=str(self.s.grader_course), env=self.grader_env(), user=pw.pw_uid,
                                    group=pw.pw_gid, extra_groups=[], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                    preexec_fn=_pdeathsig)
        except OSError as e:
            self.queue.finish(job_id, "error", "the grader could not be started; your instructor's grading will "
                              "grade this submission")
            self.log(f"job {job_id}: {e}")
            return
        with self.lock:
            self.running[job_id] = proc
        try:
            log, _ = proc.communicate(timeout=2 * 600 + 600)
        except subprocess.TimeoutExpired:
            _killpg(proc)
            log, _ = proc.communicate()
        finally:
            with self.lock:
                self.running.pop(job_id, None)
        if self.stopping.is_set():
            self.queue.put_back(job_id)  # the service stops: graded again when it starts
            return
        (spool / "grade.log").write_text(log or "")
        result_file = out / "result.json"
        try:
            result = json.loads(result_file.read_text()) if result_file.is_file() else None
        except ValueError:
            result = None
        if proc.returncode != 0 or result is None:
            tail = "; ".join((log or "").strip().splitlines()[-3:])[:500]
            self.log(f"job {job_id}: the grading exited with {proc.returncode}: {tail}")
            if row["attempts"] < MAX_ATTEMPTS:
                with self.queue.lock:
                    self.queue.db.execute("UPDATE jobs SET state = 'queued' WHERE id = ?", (job_id,))
                return
            self.queue.finish(job_id, "held", f"its grading failed {row['attempts']} times")
            self.store(row, None, spool)
            self.deliver(self.queue.get(job_id))
            return
        notes = json.loads((spool / "notes.json").read_text()) if (spool / "notes.json").is_file() else []
        result["notes"] = notes + list(result.get("notes") or [])
        state, message = self.verdict(result)
        summary = summary_of(result, mode)
        summary["seconds"] = round(time.monotonic() - started, 1)
        self.queue.finish(job_id, state, message, summary)
        stored = self.store(row, result, spool)
        self.log(f"job {job_id} {student}/{a}: {state} in {summary['seconds']} s {message}")
        self.deliver(self.queue.get(job_id), stored)

    @staticmethod
    def verdict(result: dict) -> tuple[str, str]:
        report = result.get("report")
        if report is None:
            return "refused", result.get("error") or "it could not be graded"
        if report.get("needs_manual_review") or any(nb.get("needs_manual_review") for nb in report.get("notebooks", [])):
            return "held", ""
        missing = [nb["notebook"] for nb in report.get("notebooks", []) if nb.get("status") == "missing"]
        if missing and len(missing) == len(report.get("notebooks", [])):
            handed = ", ".join(result.get("handed_in") or []) or "no notebook"
            why = "; ".join(result.get("notes") or [])
            return "refused", (f"none of this assignment's notebooks ({', '.join(f'{m}.ipynb' for m in missing)}) is "
                               f"in it: you handed in {handed}" + (f" ({why})" if why else "")
                               + ". Submit the assignment's own notebook, saved by JupyterLab.")
        return "graded", ""

    def store(self, row, result: dict | None, spool: Path) -> Path:
        """results/<assignment>/<student>/<job>/ (readable by the instructor) and latest.json beside it."""
        inst = pwd.getpwnam(self.s.instructor)
        folder = self.s.results / row["assignment"] / row["student"] / str(row["id"])
        folder.mkdir(parents=True, exist_ok=True)
        out = spool / "out"
        if result is not None and out.is_dir():
            for p in out.iterdir():
                if p.is_file() and not p.is_symlink() and p.suffix in (".ipynb", ".html", ".json"):
                    shutil.copyfile(p, folder / p.name)
        sub = spool / "submitted" / row["student"] / row["assignment"]
        for name in ("timestamp.txt", "submission_secret.txt"):
            if (sub / name).is_file() and not (sub / name).is_symlink():
                shutil.copyfile(sub / name, folder / name)
        job = self.queue.get(row["id"])
        record = {k: job[k] for k in ("id", "student", "assignment", "folder", "submitted_at", "mode", "state",
                                      "message", "attempts", "queued_at", "started_at", "finished_at")}
        record["summary"] = json.loads(job["summary"] or "{}")
        (folder / "job.json").write_text(json.dumps(record, indent=1))
        (folder.parent / "latest.json").write_text(json.dumps(dict(record, folder_path=str(folder)), indent=1))
        for p in [self.s.results / row["assignment"], folder.parent, folder, *folder.iterdir(), folder.parent / "latest.json"]:
            os.chown(p, 0, inst.pw_gid)
            os.chmod(p, 0o750 if p.is_dir() else 0o640)
        shutil.rmtree(spool, ignore_errors=True)
        return folder

    # -- what the student sees
    def deliver(self, row, out: Path | None = None, message: str | None = None) -> None:
        if row is None:
            return
        state = row["state"]
        status = {"assignment": row["assignment"], "job": row["id"], "state": state, "mode": row["mode"],
                  "submitted_at": row["submitted_at"], "updated": utc(time.time()), "message": message or "",
                  "pages": []}
        files: dict[str, str] = {}
        if state == "queued" and not message:
            ahead = self.queue.position(row["id"])
            status["message"] = (f"{ahead} submission{'s' if ahead != 1 else ''} of the class ahead of yours; "
                                 f"this page updates itself." if ahead else "It is next; this page updates itself.")
        elif state == "running":
            status["message"] = "Your notebook is running in the grader; this page updates itself."
        elif state == "held":
            status["message"] = "A person will look at it before it gets feedback or a score."
        elif state in ("refused", "error"):
            status["message"] = row["message"]
        elif state == "graded":
            status["summary"] = json.loads(row["summary"] or "{}")
            if out is not None:
                for p in sorted(out.glob("*.html")):
                    if NAME_RE.match(p.stem) and p.is_file() and not p.is_symlink():
                        files[p.name] = p.read_text(encoding="utf-8", errors="replace")
                        status["pages"].append(p.name)
        key = (row["student"], row["assignment"])
        old_pages = self.delivered_pages.get(key)
        if old_pages is None:
            old_pages = self._pages_on_disk(row["student"], row["assignment"])
        # a page of an earlier submission goes once this one has its status: never a page of another one
        remove = [p for p in old_pages if p not in files] if state in ("graded", "held", "refused", "error") else []
        files["status.json"] = json.dumps(status, indent=1)
        files["status.html"] = status_page(status)
        if self._write_as_student(row["student"], row["assignment"], files, remove):
            if state in ("graded", "held", "refused", "error"):
                self.delivered_pages[key] = status["pages"]

    def _pages_on_disk(self, student: str, assignment: str) -> list[str]:
        folder = self.s.home_of(student) / assignment / FEEDBACK_DIR
        try:
            old = json.loads((folder / "status.json").read_text())
            return [p for p in old.get("pages", []) if isinstance(p, str) and NAME_RE.match(p[:-5] if
                                                                                           p.endswith(".html") else "")]
        except (OSError, ValueError, AttributeError):
            return []

    def _write_as_student(self, student: str, assignment: str, files: dict, remove: list) -> bool:
        if not NAME_RE.match(assignment):
            return False
        pw = pwd.getpwnam(student)
        data = json.dumps({"home": str(self.s.home_of(student)), "assignment": assignment, "folder": FEEDBACK_DIR,
                           "files": files, "remove": remove})
        try:
            proc = subprocess.run([str(self.s.env / "bin" / "python"), "-I", "-c", _DELIVER], input=data, text=True,
                                  capture_output=True, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                                  cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.log(f"feedback for {student}/{assignment} not written: {e}")
            return False
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            self.log(f"feedback for {student}/{assignment} not written (their folder: {last[:300]})")
            return False
        return True

    def tell_rate_limited(self) -> None:
        for row, when in self.queue.waiting_for_rate(self.s.rate_per_hour):
            if self.rate_told.get(row["id"]) == when:
                continue
            self.rate_told[row["id"]] = when
            self.deliver(row, message=f"You have had {self.s.rate_per_hour} submissions of the course graded in "
                                      f"the last hour, the most there can be: this one is graded after {utc(when)}. "
                                      f"Only your latest submission is graded.")

    # -- the loops
    def worker(self) -> None:
        while not self.stopping.is_set():
            row = self.queue.take(self.s.rate_per_hour)
            if row is None:
                self.stopping.wait(1.0)
                continue
            try:
                self.grade(row)
            except Exception as e:  # noqa: BLE001 - one job's failure never stops the service
                self.log(f"job {row['id']}: {type(e).__name__}: {e}")
                if not self.stopping.is_set():
                    self.queue.finish(row["id"], "error", "the grader failed on this submission; your instructor's "
                                      "grading will grade it")
                    self.deliver(self.queue.get(row["id"]))

    def serve(self) -> None:
        for r in self.queue.recover():
            self.log(f"job {r['id']} ({r['student']}/{r['assignment']}) was being graded when the service stopped: "
                     f"{'held' if r['attempts'] >= MAX_ATTEMPTS else 'queued again'}")
            if r["attempts"] >= MAX_ATTEMPTS:
                self.deliver(self.queue.get(r["id"]))
        threads = [threading.Thread(target=self.worker, name=f"on-submit-{i}", daemon=True)
                   for i in range(self.s.workers)]
        for t in threads:
            t.start()
        self.log(f"watching {len(self.s.students)} students' inbounds with {self.s.workers} workers")
        while not self.stopping.is_set():
            try:
                self.scan()
                self.tell_rate_limited()
            except Exception as e:  # noqa: BLE001
                self.log(f"scan: {type(e).__name__}: {e}")
            self.stopping.wait(self.s.poll_s)
        with self.lock:
            procs = list(self.running.values())
        for p in procs:
            _killpg(p)
        for t in threads:
            t.join(timeout=30)
        self.queue.close()

    def stop(self, *_):
        self.stopping.set()


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    if not os.path.lexists(path):
        return "-"
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    for p in sorted(path.rglob("*")):
        if "__pycache__" in p.parts or p.suffix == ".pyc":
            continue
        h.update(str(p.relative_to(path)).encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ----------------------------------------------------------------------------- set-up (deploy.py)

def prepare(settings_path: Path) -> None:
    """The service's folders (root's), as deploy.py's setup calls it once the settings are written."""
    s = Settings.read(settings_path)
    g = pwd.getpwnam(s.grader)
    inst = pwd.getpwnam(s.instructor)
    for folder, uid, gid, mode in ((s.dir, 0, 0, 0o711), (s.spool, 0, 0, 0o711), (s.results, 0, inst.pw_gid, 0o750),
                                   (s.grader_course, g.pw_uid, g.pw_gid, 0o700)):
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            folder.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, uid, gid)
        os.chmod(folder, mode)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hub.on_submit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    ps = sub.add_parser("serve", help="the hub's service (root)")
    ps.add_argument("settings")
    pq = sub.add_parser("queue", help="print the queue (root)")
    pq.add_argument("settings")
    args = p.parse_args(argv)
    s = Settings.read(Path(args.settings))
    sys.path.insert(0, str(s.course_dir))  # the course folder's copy of the grader (its collect)
    if args.command == "queue":
        for r in Queue(s.state / "on-submit.sqlite").rows():
            print(f"{r['id']:>5} {r['state']:<9} {r['student']:<20} {r['assignment']:<8} {r['submitted_at']:<32} "
                  f"{r['message']}")
        return 0
    _pdeathsig_term()
    # one service per queue: a hub restarted while the last one still stops waits for it
    import fcntl

    lock = open(s.state / "on-submit.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    service = Service(s)
    signal.signal(signal.SIGTERM, service.stop)
    signal.signal(signal.SIGINT, service.stop)
    service.serve()
    return 0


def _pdeathsig_term() -> None:
    """The service ends with the hub that started it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
