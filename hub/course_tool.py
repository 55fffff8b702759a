"""The instructor's commands in the course folder on the hub (copied there by hub/deploy.py).

    python course_tool.py prepare ASSIGNMENT... [--students a,b,c]
        nbgrader generate_assignment for each assignment (writes release/, records its cells in
        gradebook.db) and adds the students to the gradebook, so the formgrader lists them before
        they hand anything in.
    python course_tool.py autograde ASSIGNMENT... [--workers N]
        the course's batch grader (autograder/batch.py: sandboxed, parallel, merged into gradebook.db,
        autograded/, feedback/, grades.csv, batch_grades.csv) on submitted/, as collected by the
        formgrader; then does what nbgrader's own autograde does with the two files a submission
        carries (timestamp.txt, submission_secret.txt) and the batch does not: records the
        submission's time in the gradebook (the formgrader counts a submission as autograded only
        when that time matches submitted/) and copies both into autograded/ (releasing feedback
        needs them to find each student's submission).

Run it in the course folder, as the instructor (the folder's owner), with the hub's Python.

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
import shutil
import subprocess
import sys
import time
from pathlib import Path

COURSE = Path(__file__).resolve().parent
GRADER = COURSE / "autograder"
# nbgrader's side files of a submission (written by `nbgrader submit`, copied by `collect`).
CARRIED = ("timestamp.txt", "submission_secret.txt")
MAX_SIDE_FILE = 4096  # bytes: both files are one short line


def prepare(assignments: list[str], students: list[str]) -> None:
    sys.path.insert(0, str(GRADER))
    import course  # the grader's pipeline (autograder/course.py): nbgrader with the course's settings

    from nbgrader.api import Gradebook

    for a in assignments:
        course.record_assignment(a, COURSE, failure=f"nbgrader generate_assignment {a} failed")
        print(f"generated release/{a}/ and recorded {a} in gradebook.db")
    with Gradebook(f"sqlite:///{COURSE / 'gradebook.db'}") as gb:
        known = {x.id: x for x in gb.students}
        for s in students:  # the account as the name until a class list is imported (nbgrader db student import)
            if s not in known or not known[s].last_name:
                gb.update_or_create_student(s, last_name=s, first_name="")
    if students:
        print(f"students in gradebook.db: {', '.join(students)}")


def graded_by_batch(assignment: str, since: float) -> set[str]:
    """Students whose results the batch just merged (its table, written after `since`: every status
    but "failed")."""
    import csv

    table = COURSE / "batch_grades.csv"
    if not table.exists() or table.stat().st_mtime < since:
        return set()
    with open(table, newline="") as f:
        return {r["student"] for r in csv.DictReader(f) if r.get("assignment") == assignment and r.get("status") != "failed"}


def carry_side_files(assignment: str, students: set[str]) -> list[Path]:
    """timestamp.txt and submission_secret.txt from submitted/<student>/<assignment>/ to autograded/.

    Only for the students this batch graded (an older autograded/ must not look up to date), only
    regular files, small, never through a link: the submission folder came from a student."""
    copied = []
    for folder in sorted((COURSE / "submitted").glob(f"*/{assignment}")):
        student = folder.parent.name
        if student not in students:
            continue
        target = COURSE / "autograded" / student / assignment
        if folder.is_symlink() or folder.parent.is_symlink() or not target.is_dir() or target.is_symlink():
            continue
        for name in CARRIED:
            src = folder / name
            if src.is_symlink() or not src.is_file() or src.stat().st_size > MAX_SIDE_FILE:
                continue
            dest = target / name
            if dest.is_symlink():
                dest.unlink()
            shutil.copyfile(src, dest)
            copied.append(dest)
    return copied


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


def record_timestamps(assignment: str, students: set[str]) -> list[str]:
    """The gradebook's submission time of each autograded student = submitted/'s timestamp.txt."""
    sys.path.insert(0, str(GRADER))
    import course  # noqa: F401  (the grader's nbgrader speed-ups and warning filters)

    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.utils import parse_utc

    done = []
    with Gradebook(f"sqlite:///{COURSE / 'gradebook.db'}") as gb:
        for stamp in sorted((COURSE / "autograded").glob(f"*/{assignment}/timestamp.txt")):
            student = stamp.parent.parent.name
            if student not in students or stamp.is_symlink() or stamp.stat().st_size > MAX_SIDE_FILE:
                continue
            try:
                when = parse_utc(stamp.read_text().strip())
                gb.find_submission(assignment, student)
            except (ValueError, MissingEntry):
                continue  # not graded by this batch (failed), or a timestamp nbgrader cannot read
            gb.update_or_create_submission(assignment, student, timestamp=when)
            done.append(student)
    return done


def autograde(assignments: list[str], workers: int | None) -> int:
    settings_file = COURSE / "course_tool.json"
    settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}
    cmd = [sys.executable, str(GRADER / "batch.py"), *assignments, "--root", str(COURSE), "--no-progress"]
    if workers:
        cmd += ["--workers", str(workers)]
    started = time.time()
    code = subprocess.call(hiding_view(settings) + cmd, cwd=COURSE)
    for a in assignments:
        graded = graded_by_batch(a, started)
        carry_side_files(a, graded)
        recorded = record_timestamps(a, graded)
        if recorded:
            print(f"{a}: submission times recorded and nbgrader's submission files carried into autograded/ for "
                  f"{len(recorded)} student(s) (the formgrader and the feedback release need them)")
    return code


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
    args = p.parse_args(argv)
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
