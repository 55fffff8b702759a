"""Grade every submission of one or more assignments in parallel, then merge into the gradebook.

    autograder/batch [ASSIGNMENT ...] [--workers N] [--submitted DIR] [--csv FILE] [--no-merge]
                     [--regrade] [--root DIR] [--no-progress]

Submissions are read from submitted/<student>/<assignment>/*.ipynb (nbgrader's layout; a renamed
notebook is matched by its graded cells; a folder or notebook that is a symbolic link is refused).

Before the first student: the cached models are built, the sandbox's import probe checks that
the course library imports inside the sandbox, gradebook.db is backed up (gradebook.db.backup,
a consistent copy made with sqlite's backup API) and the **self-check** grades every assignment's
reference solutions (source/) in the grading sandbox: anything less than full marks stops the
batch with one error, before any student is graded.

Then N workers (default: one per core) each grade one student at a time with
autograder/grade.py, in its own process (which dies with the batch: PR_SET_PDEATHSIG), in a fresh
copy of a scratch course prepared once per assignment, under a hard time limit. The workers
never open the course's gradebook.db. Each finished result is first stored as a record
(.grading/<assignment>/<hash of the student id>/: the report, the autograded notebook, the feedback
HTML; written atomically, the record file last), then merged by the main process, serially:
that student's rows of gradebook.db (a locked gradebook is retried for up to
LLMRL_GRADEBOOK_WAIT seconds, default 120), autograded/<student>/<assignment>/ and
feedback/<student>/<assignment>/. After every merge the gradebook must pass sqlite's
integrity_check and every other student's rows must be exactly as before; otherwise the backup
is put back and the batch stops with one error.

A record whose submission, source notebooks and grader are unchanged is reused (merged again, not
graded again): a batch that was killed re-runs only the students that are missing. --regrade
grades everyone again.

Outputs, each written atomically (a temporary file, then a rename):
- the batch table (--csv, default batch_grades.csv): one row per student and notebook with
  points, status (graded / missing / failed / review / pending), reason, seconds; written at the
  start with every student pending and after every merge, so it never shows a stale batch;
- grades.csv (nbgrader's export of the whole gradebook), at the end.

A full disk under the course folder stops the batch cleanly: what was merged stays, nothing is
half-written, one error says which file could not be written.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course  # noqa: E402
import course_collect  # noqa: E402
import files  # noqa: E402
import grade as grading  # noqa: E402
from course import ROOT, PipelineError  # noqa: E402

HERE = Path(__file__).resolve().parent
GRADE_PY = HERE / "grade.py"
STATE = ".grading"
SELF_CHECK = "llmrl-self-check"
GRADER_FILES = ("grade.py", "tworun.py", "kernels.py", "wire.py", "remote.py", "sandbox.py", "nbgrader_config.py",
                "safety.py", "files.py", "feedback.py", "answer_key.py")
COLUMNS = ["student", "assignment", "notebook", "points", "max_points", "status", "reason", "seconds", "kernel_cpu_s",
           "late_penalty"]
# nbgrader's side files of a submission (`nbgrader submit` writes them, the formgrader's collect copies
# them into submitted/): the submission time (late penalties; the formgrader counts a submission as
# autograded when the gradebook holds that time) and the secret `release_feedback` needs. Both are
# copied byte for byte into autograded/, as nbgrader's own autograde does.
SIDE_FILES = ("timestamp.txt", "submission_secret.txt")
MAX_SIDE_FILE = 4096  # bytes: each is one short line


class BatchStop(PipelineError):
    """The batch cannot go on (full disk, damaged or locked gradebook); what was merged stays."""


@dataclass
class Job:
    assignment: str
    student: str
    files: list[Path]
    env: dict[str, str] = field(default_factory=dict)
    problem: str | None = None         # a submission that cannot be graded at all (a symlinked folder)
    self_check: bool = False
    notes: list[str] = field(default_factory=list)  # files not graded and why (course.match_submission)
    side: dict[str, bytes] = field(default_factory=dict)  # SIDE_FILES of the submission folder, as they are

    @property
    def timestamp(self) -> str | None:
        """timestamp.txt's text (grade.read_timestamp decides whether nbgrader can read it)."""
        data = self.side.get("timestamp.txt")
        return None if data is None else data.decode("utf-8", "replace")


@dataclass
class Result:
    job: Job
    report: dict | None
    error: str | None
    seconds: float
    out: Path | None = None
    reused: bool = False


def _lexists_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def find_jobs(assignments: list[str], submitted: Path, root: Path = ROOT) -> list[Job]:
    jobs = []
    if not submitted.is_dir():
        return jobs
    for a in assignments:
        for student_dir in sorted(submitted.iterdir()):
            folder = student_dir / a
            if not os.path.lexists(folder):
                continue
            if student_dir.is_symlink() or folder.is_symlink() or not folder.is_dir():
                jobs.append(Job(a, student_dir.name, [], problem=f"{folder} is a symbolic link or not a folder; "
                                                                "the grader never follows links"))
                continue
            found = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".ipynb")
            links = [p.name for p in found if not files.is_regular(p)]
            job = Job(a, student_dir.name, [p for p in found if files.is_regular(p)],
                      problem=None if not links or len(links) < len(found) else
                      f"{', '.join(links)}: not a regular file (a symbolic link?); the grader never follows links")
            if job.problem is None:
                job.side, problem = side_files(folder)
                try:
                    grading.read_timestamp(job.timestamp)
                except PipelineError as e:  # this student only: the others are graded
                    problem = problem or str(e)
                job.problem = problem
            if job.problem is None:  # one file per notebook of the assignment; the others are named in notes
                chosen, job.notes = course.match_submission(a, job.files, root)
                job.files = [p for p, _ in chosen]
                job.notes += [f"{n}: a symbolic link, not graded (the grader never follows links)" for n in links]
                stamped = course_collect.collection_note(root, a, job.student, job.timestamp)
                if stamped:  # the collection graded the inbound files' time, not the student's (course_collect.py)
                    job.notes.append(stamped)
            jobs.append(job)
    return jobs


def side_files(folder: Path) -> tuple[dict[str, bytes], str | None]:
    """(SIDE_FILES of a submission folder, as bytes; a problem that stops this student's grading).

    A timestamp.txt that is a link, not a file or too large is a problem (the submission time would
    be unknown); such a submission_secret.txt is left out (nbgrader's release_feedback then skips
    that student, as it does without one)."""
    out, problem = {}, None
    for name in SIDE_FILES:
        path = folder / name
        if not os.path.lexists(path):
            continue
        try:
            out[name] = files.read_regular(path, MAX_SIDE_FILE)
        except (OSError, ValueError) as e:
            why = getattr(e, "strerror", None) or f"larger than {MAX_SIDE_FILE} bytes"
            if name == "timestamp.txt":
                problem = (f"timestamp.txt cannot be read ({why}; the grader never follows links): the submission "
                           f"time is unknown, so it was not graded")
    return out, problem


def notebook_timeout() -> int:
    return int(os.environ.get("LLMRL_GRADE_NOTEBOOK_TIMEOUT", 600))


def _key(student: str) -> str:
    return hashlib.sha256(student.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _digest_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths, key=lambda q: q.name):
        h.update(p.name.encode("utf-8", "surrogateescape") + b"\0")
        try:
            h.update(files.read_regular(p, grading.MAX_NOTEBOOK_MB << 20))
        except (OSError, ValueError) as e:
            h.update(f"unreadable: {e}".encode())
        h.update(b"\0")
    return h.hexdigest()


def _digest_side(side: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name, data in sorted(side.items()):
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def settings_digest(root: Path) -> str:
    """The course folder's own nbgrader_config.py (a late policy, say): a change grades everyone again."""
    try:
        return hashlib.sha256(files.read_regular(root / "nbgrader_config.py", 1 << 20)).hexdigest()[:16]
    except (OSError, ValueError):
        return "-"


def grader_version() -> str:
    h = hashlib.sha256()
    for name in GRADER_FILES:
        h.update((HERE / name).read_bytes())
    return h.hexdigest()[:16]


def source_digest(assignment: str, root: Path) -> str:
    return _digest_files(list(grading.source_notebooks(assignment, root).values()))


# ----------------------------------------------------------------------------- workers

_LIVE: set = set()
_LIVE_LOCK = threading.Lock()


def _child_setup(mem_mb: int):
    """Run in each worker process before it starts: die with the batch, bounded memory."""
    def setup():
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
        if mem_mb > 0:
            resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))
    return setup


def run_job(job: Job, template: Path, work: Path, root: Path, index: int) -> Result:
    """Grade one student in a subprocess; kill its whole process group if it overstays."""
    started = time.monotonic()
    if job.problem:
        return Result(job, None, job.problem, 0.0)
    jobdir = work / "jobs" / f"{index:05d}-{_key(job.student)}"
    out = jobdir / "out"
    report_file = jobdir / "report.json"
    jobdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(GRADE_PY), job.assignment, *map(str, job.files), "--template", str(template),
           "--student", job.student, "--out", str(out), "--lenient", "--report", str(report_file),
           "--root", str(root), "--no-warm"]  # the batch checked the environment once, below
    if job.self_check:
        cmd.append("--self-check")
    if job.timestamp is not None:  # (find_jobs checked it: a time nbgrader reads; "=": it may start with "-")
        cmd.append(f"--timestamp={job.timestamp.strip()}")
    env = dict(os.environ, **job.env)
    nb_timeout = int(env.get("LLMRL_GRADE_NOTEBOOK_TIMEOUT", notebook_timeout()))
    limit = 2 * nb_timeout + 180  # the feedback run, then the grading run; notebooks run side by side
    mem = int(env.get("LLMRL_GRADE_WORKER_MEM_MB", max(8192, int(env.get("LLMRL_GRADE_MEM_MB", 4096)) + 4096)))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=_child_setup(mem))
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        _, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        return Result(job, None, f"grading took longer than {limit} s and was stopped", time.monotonic() - started)
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    seconds = time.monotonic() - started
    if proc.returncode != 0 or not report_file.exists():
        lines = [l for l in (err or "").splitlines() if l.startswith("error:")] or (err or "").strip().splitlines()
        reason = (lines[-1] if lines else f"exit status {proc.returncode}").removeprefix("error: ")
        if proc.returncode < 0:
            reason = f"the grading process was killed (signal {-proc.returncode}: memory limit?)"
        return Result(job, None, reason[:300], seconds)
    return Result(job, json.loads(report_file.read_text()), None, seconds, out)


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_all() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for p in procs:
        _kill(p)


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
        with_gradebook_retry(f"recording {assignment} in the gradebook", lambda: course.record_assignment(
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
    import feedback

    job = result.job
    # Feedback with something a person has not graded yet stays back (course.py feedback releases it
    # once it is graded, or when the instructor forces it); an older copy of it is taken out.
    held = {nb["notebook"] for nb in (result.report or {}).get("notebooks", []) if not feedback.releasable(nb)}
    for kind, suffix in (("autograded", ".ipynb"), ("feedback", ".html")):
        target = root / kind / job.student / job.assignment
        for p in sorted(result.out.iterdir()):
            if p.suffix == suffix and files.is_regular(p):
                if kind == "feedback" and p.stem in held:
                    if files.is_regular(target / p.name):
                        (target / p.name).unlink()
                    continue
                files.copy_regular(p, target / p.name)
    for name in SIDE_FILES:  # the formgrader and release_feedback read them there; an older one goes
        target = root / "autograded" / job.student / job.assignment / name
        if name in job.side:
            files.atomic_write_bytes(target, job.side[name])
        elif files.is_regular(target):
            target.unlink()


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
    """grades.csv (course.write_grades_csv); `failed`: (assignment, student) -> why this batch failed them."""
    tmp = root / f".grades.csv.{os.getpid()}.tmp"
    try:
        course.write_grades_csv(root, failed, path=tmp)
        os.replace(tmp, root / "grades.csv")
    except OSError as e:
        if files._full(e):
            raise BatchStop("no space left on the device for grades.csv; the gradebook holds every merged grade: "
                            "free some space and run the batch again") from None
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


# ----------------------------------------------------------------------------- batch

def self_check(assignments: list[str], root: Path, templates: dict, work: Path, workers: int) -> None:
    """Every assignment's reference solutions must score full marks in the grading sandbox."""
    jobs = [Job(a, SELF_CHECK, list(grading.source_notebooks(a, root).values()), self_check=True) for a in assignments]
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        results = list(pool.map(lambda ij: run_job(ij[1], templates[ij[1].assignment], work / "self-check", root,
                                                   ij[0]), enumerate(jobs)))
    for r in results:
        if r.report is None:
            raise PipelineError(f"self-check failed: grading {r.job.assignment}'s reference solutions in the sandbox "
                                f"did not work ({r.error}); no student was graded")
        for nb in r.report["notebooks"]:
            bad = [c for c in nb["cells"] if not c["needs_manual_grade"] and c["points"] != c["max_points"]]
            if bad or nb["needs_manual_review"]:
                c = bad[0] if bad else {"grade_id": "-", "error": "; ".join(nb["review_reasons"])}
                raise PipelineError(
                    f"self-check failed: the reference solution of {r.job.assignment}/{nb['notebook']} scores "
                    f"{nb['points']:g} of {nb['max_points']:g} in the grading sandbox ({c['grade_id']}: "
                    f"{c['error']}); no student was graded")


def run_batch(assignments: list[str], root: Path = ROOT, submitted: Path | None = None, workers: int | None = None,
              merge_results: bool = True, csv_path: Path | None = None, progress: bool = True,
              jobs: list[Job] | None = None, regrade: bool = False, check: bool = True, on_merged=None) -> dict:
    from nbgrader.api import Gradebook

    started = time.monotonic()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    submitted = submitted or root / "submitted"
    jobs = find_jobs(assignments, submitted, root) if jobs is None else jobs
    workers = max(1, workers or os.cpu_count() or 1)
    files.sweep()  # scratch folders of earlier batches that were killed
    work = files.scratch_dir("batch")
    results: dict[int, Result] = {}
    version = grader_version()
    try:
        names = sorted({j.assignment for j in jobs})
        if not names:
            return _finish([], started, usage0, workers, csv_path, 0)
        grading._warm_model_cache()  # once, before the workers: kernels only read the cache
        grading.check_environment([ROOT, root])
        # late penalties are applied in each student's scratch course: it gets the course's due date
        due = {a: with_gradebook_retry("reading the due dates", lambda: course_duedate(a, root),
                                       db=root / "gradebook.db") for a in names}
        templates = {a: grading.make_template(a, root, work / "templates" / a, duedate=due[a]) for a in names}
        src_digests = {a: source_digest(a, root) + f"|due {due[a]}|{settings_digest(root)}" for a in names}
        if check:
            self_check(names, root, templates, work, workers)
        backup = None
        if merge_results:
            for a in names:
                prepare_gradebook(a, root)
            backup = backup_gradebook(root)
        digests = {i: _digest_files(j.files) + _digest_side(j.side) for i, j in enumerate(jobs)}
        todo = []
        for i, j in enumerate(jobs):
            rec = None if regrade or j.problem else load_record(root, j, digests[i], src_digests[j.assignment], version)
            if rec is not None and merge_results:
                results[i] = rec
            else:
                todo.append(i)
        _write_table(csv_path, jobs, results)
        bar = None
        if progress:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(jobs), unit="submission", desc="grading", file=sys.stderr, initial=len(results))
        gb = None
        if merge_results:
            gb = with_gradebook_retry("opening gradebook.db", lambda: Gradebook(f"sqlite:///{root / 'gradebook.db'}"),
                                      db=root / "gradebook.db")
        try:
            state: dict = {}
            for i in sorted(results):  # results reused from an earlier run: merged again
                _merge_one(gb, results[i], root, backup, on_merged, state)
            _write_table(csv_path, jobs, results)
            pool = ThreadPoolExecutor(max_workers=workers)
            try:
                futures = {pool.submit(run_job, jobs[i], templates[jobs[i].assignment], work, root, i): i for i in todo}
                for f in as_completed(futures):
                    i = futures[f]
                    r = f.result()
                    if r.report is not None and merge_results:
                        save_record(root, r, digests[i], src_digests[r.job.assignment], version)
                        _merge_one(gb, r, root, backup, on_merged, state)
                    results[i] = r
                    _write_table(csv_path, jobs, results)
                    if bar is not None:
                        bar.set_postfix_str(f"{r.job.student}/{r.job.assignment}", refresh=False)
                        bar.update(1)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                _kill_all()
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
            if gb is not None and results:
                failed = {(r.job.assignment, r.job.student): r.error for r in results.values() if r.report is None}
                with_gradebook_retry("exporting grades.csv", lambda: export_grades(gb, root, failed),
                                     db=root / "gradebook.db")
        finally:
            if bar is not None:
                bar.close()
            if gb is not None:
                gb.close()
    except files.DiskFull as e:
        raise BatchStop(f"no space left on the device while writing {e.path}; the gradebook and the files written "
                        f"before are intact: free some space and run the batch again (it grades only the students "
                        f"that are missing)") from None
    finally:
        files.rmtree(work)
    return _finish([results[i] for i in sorted(results)], started, usage0, workers, csv_path, len(todo), jobs)


def _merge_one(gb, r: Result, root: Path, backup: Path | None, on_merged, state: dict) -> None:
    if gb is None or r.report is None:
        return
    who = f"{r.job.student}/{r.job.assignment}"
    why, before, _ = with_gradebook_retry("checking gradebook.db", lambda: gradebook_problem(
        root, r.job.student, None, state.get("rows", 0)))
    if why is not None:
        gb.close()
        restore_gradebook(root, backup, f"{why}, before merging {who}")

    def do():
        try:
            merge(gb, r, root)
        except Exception:
            gb.db.rollback()
            raise
    try:
        with_gradebook_retry(f"merging {who}", do, db=root / "gradebook.db")
    except BatchStop:
        raise
    except Exception as e:
        r.error, r.report = f"merging into the gradebook failed: {e}", None
        return
    why, _, total = with_gradebook_retry("checking gradebook.db", lambda: gradebook_problem(
        root, r.job.student, before, state.get("rows", 0)))
    if why is not None:
        gb.close()
        restore_gradebook(root, backup, f"{why}, after merging {who}")
    state["rows"] = total
    copy_outputs(r, root)
    if on_merged is not None:
        on_merged(r)


def _finish(results, started, usage0, workers, csv_path, graded, jobs=None) -> dict:
    wall = time.monotonic() - started
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    # Sandboxed kernels are not in RUSAGE_CHILDREN (bwrap's PID namespace): each reports its own.
    cpu += sum((nb.get("events") or {}).get("kernel_cpu_s", 0.0) or 0.0 for r in results if r.report and not r.reused
               for nb in r.report["notebooks"])
    results = sorted(results, key=lambda r: (r.job.assignment, r.job.student))
    rows = table_rows(results)
    if csv_path is not None:
        _write_csv(csv_path, rows)
    return {"results": results, "rows": rows, "wall_s": wall, "cpu_s": cpu, "workers": workers,
            "graded": graded, "reused": sum(r.reused for r in results)}


def _write_csv(path: Path, rows: list[dict]) -> None:
    files.write_csv(path, COLUMNS, rows)


def _write_table(csv_path: Path | None, jobs: list[Job], results: dict) -> None:
    """The batch table as it stands: finished students with their rows, the others pending."""
    if csv_path is None:
        return
    rows = []
    for i, j in enumerate(jobs):
        if i in results:
            rows += table_rows([results[i]])
        else:
            rows.append({"student": j.student, "assignment": j.assignment, "notebook": "*", "points": "",
                         "max_points": "", "status": "pending", "reason": "not graded yet", "seconds": "",
                         "kernel_cpu_s": "", "late_penalty": ""})
    rows.sort(key=lambda r: (r["assignment"], r["student"]))
    _write_csv(csv_path, rows)


def table_rows(results: list[Result]) -> list[dict]:
    rows = []
    for r in results:
        base = {"student": r.job.student, "assignment": r.job.assignment}
        unmatched = "; ".join(r.job.notes)
        if r.report is None:
            rows.append(dict(base, notebook="*", points="", max_points="", status="failed",
                             reason="; ".join(x for x in (r.error, unmatched) if x), seconds=round(r.seconds, 1),
                             kernel_cpu_s="", late_penalty=""))
            continue
        if r.report.get("feedback_error"):  # graded, but the student's feedback page could not be made
            unmatched = "; ".join(x for x in (unmatched, f"no feedback page: {r.report['feedback_error']}") if x)
        for nb in r.report["notebooks"]:
            status = "review" if nb["needs_manual_review"] else nb["status"]
            reason = "; ".join(nb["review_reasons"]) if nb["needs_manual_review"] else (nb["reason"] or "")
            if nb["needs_manual_review"] and nb.get("points_held") is not None:
                reason = f"{nb['points_held']:g} of {nb['max_points']:g} automatic points held until a person " \
                         f"confirms them: {reason}"
            notes = "; ".join(nb.get("review_notes", []))
            ev = nb.get("events") or {}
            extra = [k for k in ("notebook_timeout", "kernel_died") if ev.get(k)]
            reason = "; ".join(x for x in (reason, ", ".join(extra), ("look at: " + notes) if notes else "",
                                           unmatched) if x)
            rows.append(dict(base, notebook=nb["notebook"], max_points=nb["max_points"],
                             points="" if nb["status"] == "missing" else nb["points"],  # missing, not 0
                             status=status, reason=reason, seconds=round(r.seconds, 1),
                             kernel_cpu_s=round(ev.get("kernel_cpu_s", 0.0) or 0.0, 1),
                             late_penalty=nb.get("late_penalty") or ""))
    return rows


def summary(batch: dict) -> str:
    results = batch["results"]
    failed = [r for r in results if r.report is None]
    review = [r for r in results if r.report and r.report["needs_manual_review"]]
    missing = [(r, nb) for r in results if r.report for nb in r.report["notebooks"] if nb["status"] == "missing"]
    n = len(results)
    graded = batch.get("graded", n)
    lines = [f"graded {n - len(failed)} of {n} submissions in {batch['wall_s']:.0f} s with {batch['workers']} workers "
             f"({60 * graded / max(batch['wall_s'], 1e-9):.1f} per minute); CPU time {batch['cpu_s']:.0f} s, "
             f"CPU / wall = {batch['cpu_s'] / max(batch['wall_s'], 1e-9):.2f}"]
    if batch.get("reused"):
        lines.append(f"reused {batch['reused']} results of an earlier run (unchanged submissions); "
                     f"graded {graded} now (--regrade grades everyone again)")
    fresh = [r for r in results if not r.reused]
    if fresh:
        secs = sorted(r.seconds for r in fresh)
        lines.append(f"seconds per submission: median {secs[len(secs) // 2]:.1f}, max {secs[-1]:.1f}")
    for r in failed:
        lines.append(f"FAILED  {r.job.student}/{r.job.assignment}: {r.error}")
    for r in results:
        for note in r.job.notes:
            lines.append(f"file    {r.job.student}/{r.job.assignment}: {note}")
        if r.report and r.report.get("feedback_error"):
            lines.append(f"NO FEEDBACK {r.job.student}/{r.job.assignment}: nbgrader generate_feedback failed "
                         f"({r.report['feedback_error'][:200]})")
    for r, nb in missing:
        lines.append(f"missing {r.job.student}/{r.job.assignment}/{nb['notebook']}: not handed in ({nb['reason']})")
    for r in review:
        reasons = [x for nb in r.report["notebooks"] for x in nb["review_reasons"]]
        lines.append(f"REVIEW  {r.job.student}/{r.job.assignment}: 0 until reviewed: {'; '.join(reasons)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autograder/batch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", help="default: every assignment with source notebooks")
    parser.add_argument("--root", type=Path, default=ROOT, help="course directory (default: this repository)")
    parser.add_argument("--submitted", type=Path, help="default: ROOT/submitted")
    parser.add_argument("--workers", type=int, default=None, help="parallel graders (default: one per core)")
    parser.add_argument("--csv", type=Path, default=None, help="batch table (default: ROOT/batch_grades.csv)")
    parser.add_argument("--no-merge", action="store_true", help="grade only; leave gradebook.db, autograded/ alone")
    parser.add_argument("--regrade", action="store_true", help="grade every student again, even unchanged ones")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    assignments = args.assignments or sorted(p.name for p in (root / "source").iterdir()
                                             if p.is_dir() and any(p.glob("*.ipynb")))
    try:
        for a in assignments:
            grading.source_notebooks(a, root)
        batch = run_batch(assignments, root, args.submitted, args.workers, not args.no_merge,
                          args.csv or root / "batch_grades.csv", progress=not args.no_progress, regrade=args.regrade)
    except PipelineError as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(summary(batch))
    print(f"table: {args.csv or root / 'batch_grades.csv'}" +
          ("" if args.no_merge else f"; gradebook: {root / 'gradebook.db'}, grades.csv, autograded/, feedback/"))
    return 1 if any(r.report is None for r in batch["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
