"""The instructor's commands in the course folder on the hub (copied there by hub/deploy.py).

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
    return subprocess.call(hiding_view(settings) + cmd, cwd=COURSE)


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
