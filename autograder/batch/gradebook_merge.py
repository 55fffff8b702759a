"""The batch's records (.grading/) and its merges into the course's gradebook.db: backup, retries on
a locked database, integrity checks, restore, the outputs copied into autograded/ and feedback/.
"""

from __future__ import annotations
import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from autograder.batch import sandbox_gate
from autograder.batch.jobs import BatchStop, Job, Result, SIDE_FILES, STATE, _key
from autograder.course.layout import PipelineError
from autograder.course.nbgrader_app import record_assignment
from autograder.export.grades_csv import write_grades_csv
from autograder.grading import one_notebook as grading
from autograder.sandbox import safe_files as files

# ----------------------------------------------------------------------------- records

def _record_dir(root: Path, assignment: str, student: str) -> Path:
    return root / STATE / assignment / _key(student)


def load_record(root: Path, job: Job, sub_digest: str, src_digest: str, version: str) -> Result | None:
    folder = _record_dir(root, job.assignment, job.student)
    try:
        rec = json.loads(files.read_regular(folder / "record.json", 64 << 20))
    except (OSError, ValueError):
        return None
    if (rec.get("student") != job.student or rec.get("submission") != sub_digest or rec.get("source") != src_digest
            or rec.get("grader") != version or not isinstance(rec.get("report"), dict)):
        return None
    return Result(job, rec["report"], None, float(rec.get("seconds", 0.0)), folder / "files", reused=True)


def save_record(root: Path, r: Result, sub_digest: str, src_digest: str, version: str) -> None:
    folder = _record_dir(root, r.job.assignment, r.job.student)
    stored = folder / "files"
    if r.out is not None and r.out.is_dir():
        for p in sorted(r.out.iterdir()):
            if p.suffix in (".ipynb", ".html") and files.is_regular(p):
                files.copy_regular(p, stored / p.name)
    rec = {"student": r.job.student, "assignment": r.job.assignment, "submission": sub_digest, "source": src_digest,
           "grader": version, "report": r.report, "seconds": r.seconds}
    files.atomic_write_text(folder / "record.json", json.dumps(rec))
    r.out = stored


# ----------------------------------------------------------------------------- gradebook

def _is_locked(e: BaseException) -> bool:
    text = str(e).lower()
    return "locked" in text or "busy" in text


def _is_full(e: BaseException) -> bool:
    text = str(e).lower()
    return "disk is full" in text or "no space" in text or isinstance(e, files.DiskFull)


def db_locked(db: Path | None) -> bool:
    """True while another process holds a lock that keeps us from writing `db`."""
    if db is None or not db.exists():
        return False
    try:
        con = sqlite3.connect(db, timeout=0.5, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute("ROLLBACK")
        finally:
            con.close()
    except sqlite3.OperationalError as e:
        return _is_locked(e)
    except sqlite3.DatabaseError:  # not a database at all: not locked (the caller's error says what is wrong)
        return False
    return False


def with_gradebook_retry(what: str, fn, wait: float | None = None, db: Path | None = None):
    """Call fn(); a locked gradebook is retried with growing pauses for up to `wait` seconds.

    nbgrader reports a locked database as a generic "error accessing the nbgrader database": with
    `db` given, any error while `db` is locked counts as the lock."""
    wait = float(os.environ.get("LLMRL_GRADEBOOK_WAIT", 120)) if wait is None else wait
    deadline = time.monotonic() + wait
    pause = 0.5
    while True:
        try:
            return fn()
        except Exception as e:
            if _is_full(e):
                raise BatchStop(f"no space left on the device while {what}; the gradebook keeps what was merged "
                                f"before: free some space and run the batch again") from None
            locked = _is_locked(e) or db_locked(db)
            if not locked or time.monotonic() >= deadline:
                if locked:
                    raise BatchStop(f"gradebook.db stayed locked by another process for {wait:.0f} s while {what}; "
                                    f"close it (the formgrader?) and run the batch again") from None
                raise
            time.sleep(min(pause, max(0.1, deadline - time.monotonic())))
            pause = min(pause * 2, 5.0)


def prepare_gradebook(assignment: str, root: Path) -> None:
    """Make sure the course's gradebook knows the assignment's current cells (release/ untouched)."""
    release_dir = files.scratch_dir("release")
    try:
        with_gradebook_retry(f"recording {assignment} in the gradebook", lambda: record_assignment(
            assignment, root, release_dir, failure=f"cannot record {assignment} in the gradebook"),
            db=root / "gradebook.db")
    finally:
        files.rmtree(release_dir)


def course_duedate(assignment: str, root: Path):
    """The assignment's due date in the course's gradebook (`nbgrader db assignment add A
    --duedate=...`, or the formgrader's "Manage assignments"): a UTC datetime, or None."""
    from nbgrader.api import Gradebook, MissingEntry

    db = root / "gradebook.db"
    if not files.is_regular(db):
        return None
    try:
        with Gradebook(f"sqlite:///{db}") as gb:
            try:
                return gb.find_assignment(assignment).duedate
            except MissingEntry:
                return None
    except Exception as e:
        if _is_locked(e):
            raise  # with_gradebook_retry waits for it
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PipelineError(f"cannot read {assignment}'s due date from {db} ({first[:200]}); nothing was "
                            f"graded") from None


def course_duedates(assignments, root: Path) -> dict:
    """{assignment: course_duedate}, each read with with_gradebook_retry (a gradebook another
    process holds is waited for)."""
    return {a: with_gradebook_retry("reading the due dates", lambda a=a: course_duedate(a, root),
                                    db=root / "gradebook.db") for a in assignments}


def _connect(db: Path, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=timeout)


def backup_gradebook(root: Path) -> Path | None:
    """A consistent copy of gradebook.db (sqlite's backup API) next to it, written atomically."""
    db = root / "gradebook.db"
    if not db.exists():
        return None
    target = root / "gradebook.db.backup"
    tmp = root / f".gradebook.db.backup.{os.getpid()}.tmp"

    def copy():
        src = _connect(db, 5)
        try:
            dst = sqlite3.connect(tmp)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
    try:
        with_gradebook_retry("backing up gradebook.db", copy)
        os.replace(tmp, target)
    except OSError as e:
        if files._full(e):
            raise BatchStop(f"no space left on the device for the gradebook's backup ({target}); nothing was "
                            f"graded: free some space and run the batch again") from None
        raise
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def gradebook_problem(root: Path, student: str | None, before: str | None,
                      min_rows: int = 0) -> tuple[str | None, str, int]:
    """(what is wrong with gradebook.db or None, digest of the other students' rows, number of rows).

    Wrong: sqlite's integrity_check fails, the other students' rows differ from `before`, or the
    gradebook holds fewer grade rows than `min_rows` (a merge never deletes one)."""
    db = root / "gradebook.db"
    try:
        con = _connect(db, 30)
        try:
            check = con.execute("PRAGMA integrity_check").fetchone()[0]
            if check != "ok":
                return f"sqlite integrity_check says: {check}", "", 0
            rows = con.execute(
                "SELECT s.student_id, s.assignment_id, n.notebook_id, g.cell_id, g.auto_score, g.manual_score, "
                "g.extra_credit, g.needs_manual_grade FROM grade g JOIN submitted_notebook n ON g.notebook_id = n.id "
                "JOIN submitted_assignment s ON n.assignment_id = s.id "
                "WHERE s.student_id IS NOT ? ORDER BY 1, 2, 3, 4", (student,)).fetchall()
            total = con.execute("SELECT COUNT(*) FROM grade").fetchone()[0]
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        if _is_locked(e):
            raise
        return f"{type(e).__name__}: {e}", "", 0
    digest = hashlib.sha256(repr(rows).encode()).hexdigest()
    if before is not None and digest != before:
        return "rows of other students changed during the merge", digest, total
    if total < min_rows:
        return f"{min_rows - total} grade rows disappeared since the last merge", digest, total
    return None, digest, total


def restore_gradebook(root: Path, backup: Path | None, why: str) -> None:
    db = root / "gradebook.db"
    if backup is None:
        raise BatchStop(f"gradebook.db failed its check ({why}) and there was no gradebook before this batch")
    files.copy_regular(backup, db, max_bytes=4 << 30)
    for side in (".gradebook.db-journal", "gradebook.db-journal", "gradebook.db-wal", "gradebook.db-shm"):
        if (root / side).exists():
            (root / side).unlink()
    raise BatchStop(f"gradebook.db failed its check after a merge ({why}); the copy taken before this batch "
                    f"({backup.name}) was put back. The graded results are kept in {STATE}/: run the batch "
                    f"again to merge them")


def merge(gb, result: Result, root: Path) -> None:
    """Write one student's grades into the course gradebook; touches only that student's rows."""
    from nbgrader.utils import parse_utc

    report, job = result.report, result.job
    gb.update_or_create_student(job.student)
    stamp = report.get("timestamp")  # timestamp.txt as grade.py read it (None: none was handed in)
    gb.update_or_create_submission(job.assignment, job.student, **({"timestamp": parse_utc(stamp)} if stamp else {}))
    grading.write_grades(gb, job.assignment, job.student, report["notebooks"])


def copy_outputs(result: Result, root: Path) -> None:
    if result.out is None or not result.out.is_dir():
        return
    from autograder.export import feedback_pages as feedback

    job = result.job
    # Feedback with something a person has not graded yet stays back (course.py feedback releases it
    # once it is graded, or when the instructor forces it); an older copy of it is taken out.
    held = {nb["notebook"] for nb in (result.report or {}).get("notebooks", []) if not feedback.releasable(nb)}
    without = sandbox_gate.unsandboxed(result.report)
    for kind, suffix in (("autograded", ".ipynb"), ("feedback", ".html")):
        target = root / kind / job.student / job.assignment
        for p in sorted(result.out.iterdir()):
            if p.suffix == suffix and files.is_regular(p):
                if kind == "feedback" and p.stem in held:
                    if files.is_regular(target / p.name):
                        (target / p.name).unlink()
                    continue
                if kind == "autograded":
                    _copy_marked(p, target / p.name, without)
                else:
                    files.copy_regular(p, target / p.name)
    for name in SIDE_FILES:  # the formgrader and release_feedback read them there; an older one goes
        target = root / "autograded" / job.student / job.assignment / name
        if name in job.side:
            files.atomic_write_bytes(target, job.side[name])
        elif files.is_regular(target):
            target.unlink()


def _copy_marked(src: Path, target: Path, without: str) -> None:
    """The autograded notebook into autograded/, carrying the mark of a grade made without the sandbox
    (feedback_pages.UNSANDBOXED_MARK, read when `make feedback` makes its page again) exactly when it
    was: a mark the student's own notebook carried is taken out. Unmarked notebooks are copied byte for byte."""
    from autograder.export.feedback_pages import UNSANDBOXED_MARK

    data = files.read_regular(src, 256 << 20)
    if not without and UNSANDBOXED_MARK.encode() not in data:
        files.atomic_write_bytes(target, data)
        return
    nb = json.loads(data)
    meta = nb.setdefault("metadata", {})
    own = meta.get("llmrl") if isinstance(meta.get("llmrl"), dict) else {}
    own.pop(UNSANDBOXED_MARK, None)
    if without:
        own[UNSANDBOXED_MARK] = without
    if own:
        meta["llmrl"] = own
    else:
        meta.pop("llmrl", None)
    files.atomic_write_text(target, json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def snapshot(root: Path) -> dict:
    """(assignment, student, notebook, cell) -> (auto, manual) for every grade in the gradebook."""
    from nbgrader.api import Gradebook

    db = root / "gradebook.db"
    if not db.exists():
        return {}
    rows = {}
    with Gradebook(f"sqlite:///{db}") as gb:
        for a in gb.assignments:
            for sub in a.submissions:
                for nb in sub.notebooks:
                    for g in nb.grades:
                        rows[(a.name, sub.student_id, nb.name, g.name)] = (g.auto_score, g.manual_score)
    return rows


def export_grades(gb, root: Path, failed: dict | None = None) -> None:
    """grades.csv (write_grades_csv); `failed`: (assignment, student) -> why this batch failed them."""
    tmp = root / f".grades.csv.{os.getpid()}.tmp"
    try:
        write_grades_csv(root, failed, path=tmp)
        os.replace(tmp, root / "grades.csv")
    except OSError as e:
        if files._full(e):
            raise BatchStop("no space left on the device for grades.csv; the gradebook holds every merged grade: "
                            "free some space and run the batch again") from None
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


