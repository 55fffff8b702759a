"""The instructor's commands in the course folder on the hub (copied there by hub/deploy/course.py).

    python course_tool.py prepare ASSIGNMENT... [--students a,b,c]
        nbgrader generate_assignment for each assignment (writes release/, records its cells in
        gradebook.db) and adds the students to the gradebook, so the formgrader lists them before
        they hand anything in.
    python course_tool.py autograde ASSIGNMENT... [--workers N]
        the course's batch grader (autograder/batch/run.py: sandboxed, parallel, merged into gradebook.db,
        autograded/, feedback/, grades.csv, batch_grades.csv) on submitted/, as collected by the
        formgrader. The batch also does what nbgrader's own autograde does with the two files a
        submission carries (timestamp.txt, submission_secret.txt): it records the submission's time
        in the gradebook (late penalties; the formgrader counts a submission as autograded only when
        that time matches submitted/) and copies both into autograded/ (releasing feedback needs them).
        That time is the one the formgrader's Collect graded (autograder/collect/exchange.py: the inbound
        files' time where the student's timestamp.txt is earlier, missing or unreadable; collected/).

    python course_tool.py on-submit ASSIGNMENT off|feedback|score
        grading on submit for one assignment (hub/on_submit; docs/hub.md "Feedback on submit"):
        off (the default), feedback (students see which tests pass, the points stay hidden until you
        release them) or score (the points too). Without a mode: each assignment's setting.
    python course_tool.py on-submit-grades ASSIGNMENT
        each student's latest submission graded on submit (stored apart from gradebook.db).
    python course_tool.py accept-on-submit ASSIGNMENT [--students a,b]
        takes the on-submit grades into gradebook.db (and autograded/, feedback/) for the students
        whose collected submission (submitted/) is the one graded on submit; the others are named.
    python course_tool.py grade-one ...
        the on-submit service's grading of one submission (run by the service as the grading
        account, not by hand).

Run it in the course folder, as the instructor (the folder's owner), with the hub's Python.
`autograde` ends with the students whose on-submit grade differs from the batch's.

On the hub the grader runs as the instructor, who owns nbgrader's exchange: a kernel that sees the
machine could read every submission in its inbound folder and every released feedback, and the
course repository's source notebooks (hidden tests). So the batch itself runs in a view of the
machine without them (bubblewrap: course_tool.json's "hide" folders are empty there, its "show"
folders, the Python environment and the course library, read-only); the grader's own sandbox then
hides the course folder from each kernel, as it hides its course directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

COURSE = Path(__file__).resolve().parent


def prepare(assignments: list[str], students: list[str]) -> None:
    from autograder.course import nbgrader_app

    from nbgrader.api import Gradebook

    for a in assignments:
        nbgrader_app.record_assignment(a, COURSE, failure=f"nbgrader generate_assignment {a} failed")
        print(f"generated release/{a}/ and recorded {a} in gradebook.db")
    with Gradebook(f"sqlite:///{COURSE / 'gradebook.db'}") as gb:
        known = {x.id: x for x in gb.students}
        for s in students:  # the account as the name until a class list is imported (nbgrader db student import)
            if s not in known or not known[s].last_name:
                gb.update_or_create_student(s, last_name=s, first_name="")
    if students:
        print(f"students in gradebook.db: {', '.join(students)}")


def hiding_view(settings: dict) -> list[str]:
    """bwrap arguments: the machine as it is, with the "hide" folders empty and the "show" ones put back
    read-only; [] (with a warning) where bubblewrap cannot run."""
    exe = shutil.which("bwrap")
    if exe is None or subprocess.run([exe, "--dev-bind", "/", "/", "true"], capture_output=True).returncode != 0:
        print("warning: bubblewrap does not work here: the batch grader runs with the exchange and the course "
              "repository in view of the students' kernels", file=sys.stderr)
        return []
    argv = [exe, "--dev-bind", "/", "/", "--die-with-parent"]  # dev-bind: /dev/urandom and friends stay usable
    for h in settings.get("hide", []):
        if Path(h).is_dir():
            argv += ["--tmpfs", h]
    for s in settings.get("show", []):
        if Path(s).exists():
            argv += ["--ro-bind", s, s]
    for w in settings.get("writable", []):  # the model cache: the batch builds what is missing
        if Path(w).exists():
            argv += ["--bind", w, w]
    return argv + ["--"]


def autograde(assignments: list[str], workers: int | None) -> int:
    settings_file = COURSE / "course_tool.json"
    settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}
    cmd = [sys.executable, "-m", "autograder.cli.batch", *assignments, "--root", str(COURSE), "--no-progress"]
    if workers:
        cmd += ["--workers", str(workers)]
    status = subprocess.call(hiding_view(settings) + cmd, cwd=COURSE)
    for a in assignments:
        for line in compare_on_submit(a):
            print(line)
    return status


# ----------------------------------------------------------------------------- grading on submit

MODES_FILE = "on_submit.json"   # hub/on_submit reads it
MODES = ("off", "feedback", "score")


def results_dir() -> Path | None:
    """The on-submit service's results (hub/on_submit), named in course_tool.json by hub/deploy."""
    settings_file = COURSE / "course_tool.json"
    settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}
    return Path(settings["on_submit_results"]) if settings.get("on_submit_results") else None


def on_submit_latest(assignment: str) -> dict[str, dict]:
    """student -> the record of their latest submission graded on submit."""
    root = results_dir()
    out = {}
    if root is None or not (root / assignment).is_dir():
        return out
    for student_dir in sorted((root / assignment).iterdir()):
        latest = student_dir / "latest.json"
        if latest.is_file() and not latest.is_symlink():
            try:
                out[student_dir.name] = json.loads(latest.read_text())
            except ValueError:
                continue
    return out


def _stored_points(rec: dict) -> tuple[float, float] | None:
    """The points of the stored report (also for the "feedback" setting, whose status hides them)."""
    if rec.get("state") != "graded":
        return None
    try:
        report = json.loads((Path(rec["folder_path"]) / "result.json").read_text())["report"]
        return (sum(nb["points"] for nb in report["notebooks"]), sum(nb["max_points"] for nb in report["notebooks"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _batch_points(assignment: str) -> dict[str, tuple[float, float, str]]:
    """student -> (points, max points, status) from batch_grades.csv."""
    import csv

    path = COURSE / "batch_grades.csv"
    out: dict[str, list] = {}
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("assignment") != assignment:
                continue
            p = out.setdefault(row["student"], [0.0, 0.0, "graded"])
            try:
                p[0] += float(row["points"] or 0)
                p[1] += float(row["max_points"] or 0)
            except ValueError:
                pass
            if row.get("status") not in ("graded", "missing"):
                p[2] = row.get("status") or "?"
    return {k: tuple(v) for k, v in out.items()}


def _collected_stamp(assignment: str, student: str) -> str | None:
    p = COURSE / "submitted" / student / assignment / "timestamp.txt"
    return p.read_text().strip() if p.is_file() and not p.is_symlink() else None


def compare_on_submit(assignment: str) -> list[str]:
    """Where the on-submit grades and the batch's differ (the batch's table against the stored results)."""
    latest = on_submit_latest(assignment)
    if not latest:
        return []
    batch = _batch_points(assignment)
    differ, same = [], 0
    for student, rec in sorted(latest.items()):
        if student not in batch:
            differ.append(f"  {student}: graded on submit ({rec.get('state')}), not in the batch (not collected?)")
            continue
        ours = _stored_points(rec)
        b = batch[student]
        other = rec.get("submitted_at") != _collected_stamp(assignment, student)
        when = f" (on submit: the submission of {rec.get('submitted_at')}, the batch: {_collected_stamp(assignment, student)})"             if other else ""
        if rec.get("state") == "held" or b[2] == "review":
            if (rec.get("state") == "held") != (b[2] == "review"):
                differ.append(f"  {student}: on submit {rec.get('state')}, batch {b[2]}{when}")
            else:
                same += 1
            continue
        if ours is None or abs(ours[0] - b[0]) > 1e-9 or abs(ours[1] - b[1]) > 1e-9:
            shown = "not graded" if ours is None else f"{ours[0]:g}/{ours[1]:g}"
            differ.append(f"  {student}: on submit {shown}, batch {b[0]:g}/{b[1]:g}{when}")
        else:
            same += 1
    head = f"{assignment}: on-submit grades agree with the batch for {same} of {len(latest)} students"
    return [head + (":" if differ else "")] + ([f"{assignment}: they differ for {len(differ)}:"] + differ if differ else [])


def set_on_submit(assignment: str | None, mode: str | None) -> int:
    path = COURSE / MODES_FILE
    modes = json.loads(path.read_text()) if path.is_file() else {}
    if assignment is None:
        known = sorted(p.name for p in (COURSE / "source").iterdir() if p.is_dir())
        for a in known:
            print(f"{a}: {modes.get(a, 'off')}")
        return 0
    if not (COURSE / "source" / assignment).is_dir():
        print(f"error: {assignment} is not an assignment of this course (source/{assignment} is missing)",
              file=sys.stderr)
        return 1
    if mode is None:
        print(f"{assignment}: {modes.get(assignment, 'off')}")
        return 0
    modes[assignment] = mode
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(sorted(modes.items())), indent=1) + "\n")
    os.replace(tmp, path)
    print(f"{assignment}: grading on submit is {mode}" + ({"feedback": " (students see which tests pass; points "
                                                          "hidden until you release grades)",
                                                          "score": " (students see their points)",
                                                          "off": ""}[mode]))
    return 0


def on_submit_grades(assignment: str) -> int:
    latest = on_submit_latest(assignment)
    if not latest:
        print(f"{assignment}: nothing graded on submit yet")
        return 0
    for student, rec in sorted(latest.items()):
        pts = _stored_points(rec)
        shown = "" if pts is None else f" {pts[0]:g}/{pts[1]:g}"
        print(f"{student:<24} {rec.get('state', '?'):<8}{shown:<10} submitted {rec.get('submitted_at')}"
              + (f"  ({rec['message']})" if rec.get("message") else ""))
    return 0


def accept_on_submit(assignment: str, students: list[str]) -> int:
    """The on-submit grades into the gradebook, through the batch's own merge (autograder/batch/run.py)."""
    from autograder.batch.jobs import Job, Result, SIDE_FILES
    from autograder.batch.run import merge_stored

    latest = on_submit_latest(assignment)
    results, skipped = [], []
    for student, rec in sorted(latest.items()):
        if students and student not in students:
            continue
        folder = Path(rec.get("folder_path", ""))
        if rec.get("state") != "graded":
            skipped.append(f"{student}: on submit it is {rec.get('state')} ({rec.get('message') or 'no grade'})")
            continue
        if rec.get("submitted_at") != _collected_stamp(assignment, student):
            skipped.append(f"{student}: the collected submission ({_collected_stamp(assignment, student)}) is not the "
                           f"one graded on submit ({rec.get('submitted_at')}): collect, or run the batch")
            continue
        try:
            result = json.loads((folder / "result.json").read_text())
        except (OSError, ValueError) as e:
            skipped.append(f"{student}: the stored result cannot be read ({e})")
            continue
        side = {n: (folder / n).read_bytes() for n in SIDE_FILES if (folder / n).is_file()}
        job = Job(assignment, student, [], side=side)
        results.append(Result(job, result["report"], None, float(result.get("seconds") or 0), out=folder))
    if results:
        merge_stored(results, COURSE)
    for r in results:
        nbs = r.report["notebooks"]
        print(f"accepted {r.job.student}: {sum(n['points'] for n in nbs):g}/{sum(n['max_points'] for n in nbs):g}")
    for line in skipped:
        print(f"not accepted {line}")
    return 0


def grade_one(assignment: str, submitted: Path, out: Path, duedate: str | None, mode: str) -> int:
    """One submission, as the on-submit service grades it (as the grading account, in its course folder).

    The batch's own steps for one student: the model cache and the sandbox probe, the self-check of
    the reference solutions (once per version of the assignment, the grader and the due date), the
    scratch course (kept for the next submission), then the worker (autograder/batch/jobs.py run_job).
    Writes out/result.json, the autograded notebooks and the feedback pages."""
    import datetime
    import hashlib

    from autograder.batch.jobs import find_jobs, grader_version, run_job, settings_digest, source_digest
    from autograder.batch.run import self_check
    from autograder.course.layout import PipelineError
    from autograder.export.feedback_pages import HIDE_SCORES_ENV
    from autograder.grading import one_notebook as grading
    from autograder.sandbox import safe_files as files

    due = datetime.datetime.fromisoformat(duedate) if duedate else None
    result: dict = {"report": None, "error": None, "notes": [], "handed_in": []}
    try:
        jobs = find_jobs([assignment], submitted, COURSE)
        folder = next(iter(sorted(submitted.iterdir()))) / assignment if submitted.is_dir() else None
        result["handed_in"] = sorted(p.name for p in folder.iterdir() if p.name not in ("timestamp.txt",
                                     "submission_secret.txt")) if folder and folder.is_dir() else []
        if not jobs:
            raise PipelineError("the submission holds no folder of this assignment")
        job = jobs[0]
        result["notes"] = list(job.notes)
        if job.problem:
            raise PipelineError(job.problem)
        grading._warm_model_cache()
        grading.check_environment([COURSE])
        key = hashlib.sha256(f"{source_digest(assignment, COURSE)}|{due}|{settings_digest(COURSE)}|"
                             f"{grader_version()}".encode()).hexdigest()[:16]
        state = COURSE / ".on-submit" / f"{assignment}-{key}"
        template = state / "template"
        if not (state / "checked").exists():
            work = files.scratch_dir("on-submit-check")
            try:
                if template.exists():
                    files.rmtree(template)
                grading.make_template(assignment, COURSE, template, duedate=due)
                self_check([assignment], COURSE, {assignment: template}, work, 1)
            finally:
                files.rmtree(work)
            (state / "checked").write_text("the reference solutions scored full marks\n")
        if mode != "score":
            job.env[HIDE_SCORES_ENV] = "hidden"
        work = files.scratch_dir("on-submit")
        try:
            r = run_job(job, template, work, COURSE, 0)
            result.update(report=r.report, error=r.error, seconds=round(r.seconds, 1))
            if r.out is not None and r.out.is_dir():
                for p in r.out.iterdir():
                    if files.is_regular(p) and p.suffix in (".ipynb", ".html"):
                        files.copy_regular(p, out / p.name)
        finally:
            files.rmtree(work)
        stamp = (result["report"] or {}).get("timestamp")
        if due is not None and stamp:
            from nbgrader.utils import parse_utc

            when = parse_utc(stamp).astimezone(datetime.timezone.utc).replace(tzinfo=None)
            result["late"] = when > due.replace(tzinfo=None)
    except PipelineError as e:
        result["error"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    (out / "result.json").write_text(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python course_tool.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("prepare")
    pp.add_argument("assignments", nargs="+")
    pp.add_argument("--students", default="")
    pa = sub.add_parser("autograde")
    pa.add_argument("assignments", nargs="+")
    pa.add_argument("--workers", type=int, default=None)
    po = sub.add_parser("on-submit")
    po.add_argument("assignment", nargs="?")
    po.add_argument("mode", nargs="?", choices=MODES)
    pg = sub.add_parser("on-submit-grades")
    pg.add_argument("assignment")
    pc = sub.add_parser("accept-on-submit")
    pc.add_argument("assignment")
    pc.add_argument("--students", default="")
    p1 = sub.add_parser("grade-one")
    p1.add_argument("assignment")
    p1.add_argument("--submitted", required=True, type=Path)
    p1.add_argument("--out", required=True, type=Path)
    p1.add_argument("--duedate", default="-")
    p1.add_argument("--mode", choices=MODES[1:], default="score")
    args = p.parse_args(argv)
    if args.command == "on-submit":
        return set_on_submit(args.assignment, args.mode)
    if args.command == "on-submit-grades":
        return on_submit_grades(args.assignment)
    if args.command == "accept-on-submit":
        return accept_on_submit(args.assignment, [s for s in args.students.split(",") if s])
    if args.command == "grade-one":
        return grade_one(args.assignment, args.submitted, args.out, None if args.duedate == "-" else args.duedate,
                         args.mode)
    if args.command == "prepare":
        try:
            prepare(args.assignments, [s for s in args.students.split(",") if s])
        except Exception as e:  # the grader's PipelineError and nbgrader's errors: one line for the person
            print(f"error: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}", file=sys.stderr)
            return 1
        return 0
    return autograde(args.assignments, args.workers)


if __name__ == "__main__":
    sys.exit(main())
