"""The batch's jobs: one student's submission of one assignment, found in submitted/, graded by a
worker process (autograder.cli.grade) under a time and memory limit; the digests that decide
whether a stored record can be reused.
"""

from __future__ import annotations
import ctypes
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from autograder.batch import warm_workers
from autograder.grading.matching import match_submission
from autograder.collect import exchange as course_collect
from autograder.course.layout import PipelineError, ROOT
from autograder.grading import one_notebook as grading
from autograder.sandbox import safe_files as files

PACKAGE = Path(__file__).resolve().parents[1]  # autograder/
STATE = ".grading"
SELF_CHECK = "llmrl-self-check"
# What the grader is made of: a change in any of these grades everyone again (records are not reused).
GRADER_PARTS = ("batch", "course", "execution", "export", "grading", "review", "sandbox")
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
    notes: list[str] = field(default_factory=list)  # files not graded and why (match_submission)
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
    started: float | None = None   # time.monotonic() when its worker started, and when it ended (the benchmark's
    ended: float | None = None     # grading wall time: first start to last end)


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
                chosen, job.notes = match_submission(a, job.files, root)
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
    files_ = [PACKAGE / "nbgrader_config.py"] + [p for part in GRADER_PARTS for p in (PACKAGE / part).rglob("*")
                                                if p.suffix in (".py", ".json")]
    for p in sorted(files_):
        h.update(str(p.relative_to(PACKAGE)).encode() + b"\0" + p.read_bytes())
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
    result = _run_job(job, template, work, root, index, started)
    result.started, result.ended = started, time.monotonic()
    return result


def _run_job(job: Job, template: Path, work: Path, root: Path, index: int, started: float) -> Result:
    jobdir = work / "jobs" / f"{index:05d}-{_key(job.student)}"
    out = jobdir / "out"
    report_file = jobdir / "report.json"
    jobdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "autograder.cli.grade", job.assignment, *map(os.path.abspath, job.files),
           "--template", os.path.abspath(template),
           "--student", job.student, "--out", os.path.abspath(out), "--lenient", "--report",
           os.path.abspath(report_file), "--root", os.path.abspath(root), "--no-warm"]  # the batch checked the environment once, below
    if job.self_check:
        cmd.append("--self-check")
    if job.timestamp is not None:  # (find_jobs checked it: a time nbgrader reads; "=": it may start with "-")
        cmd.append(f"--timestamp={job.timestamp.strip()}")
    env = dict(os.environ, **job.env)
    nb_timeout = int(env.get("LLMRL_GRADE_NOTEBOOK_TIMEOUT", notebook_timeout()))
    limit = 2 * nb_timeout + 180  # the feedback run, then the grading run; notebooks run side by side
    mem = int(env.get("LLMRL_GRADE_WORKER_MEM_MB", max(8192, int(env.get("LLMRL_GRADE_MEM_MB", 4096)) + 4096)))
    # run from the folder holding the package (`-m autograder...`); every path above is absolute
    returncode = err = None
    server = warm_workers.server_for(work)  # a fresh fork of the batch's warm grader, once it has one
    if server is not None:
        try:
            returncode, err = server.run(cmd[3:], env, PACKAGE.parent, mem, limit, _LIVE, _LIVE_LOCK)
        except warm_workers.WarmUnavailable:
            returncode = None  # graded cold below
        except TimeoutError:
            return Result(job, None, f"grading took longer than {limit} s and was stopped", time.monotonic() - started)
    if returncode is None:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=PACKAGE.parent, start_new_session=True, preexec_fn=_child_setup(mem))
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
        returncode = proc.returncode
    seconds = time.monotonic() - started
    if returncode != 0 or not report_file.exists():
        lines = [l for l in (err or "").splitlines() if l.startswith("error:")] or (err or "").strip().splitlines()
        reason = (lines[-1] if lines else f"exit status {returncode}").removeprefix("error: ")
        if returncode < 0:
            reason = f"the grading process was killed (signal {-returncode}: memory limit?)"
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


