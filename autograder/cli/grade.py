"""Grade notebooks of one assignment in a scratch copy of the course; print the result as JSON.

    python -m autograder.cli.grade ASSIGNMENT NOTEBOOK.ipynb [NOTEBOOK.ipynb ...] [--keep]
    autograder/bin/grade ...   (the same, with the course's .venv, from any folder)

autograder/grading/one_notebook.py says what it does and what the JSON holds; the batch grader runs
this command once per student (autograder/batch/jobs.py). Where the sandbox does not work it refuses
to grade (autograder/batch/sandbox_gate.py) unless given --no-sandbox; run by the batch, it takes the
batch's decision.
"""

from __future__ import annotations

import os
import subprocess
import sys


def _start_checks(argv: list[str]):
    """Run from the command line, the shipped models are checked against their manifest
    (autograder/grading/shipped_models.py) and the sandbox's import probe runs, in two other processes
    while this one imports nbgrader."""
    if __name__ != "__main__" or "--no-warm" in argv:
        return None, None
    home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds autograder/
    warm = subprocess.Popen([sys.executable, "-m", "autograder.grading.shipped_models"], cwd=home,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    probe = subprocess.Popen([sys.executable, "-m", "autograder.sandbox.bubblewrap", "--probe"], cwd=home,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return warm, probe


_EARLY = _start_checks(sys.argv[1:])

import argparse  # noqa: E402  (the checks above start first: they run while nbgrader is imported)
import json  # noqa: E402
from pathlib import Path  # noqa: E402

from autograder.batch import sandbox_gate  # noqa: E402
from autograder.course.layout import ROOT, PipelineError  # noqa: E402
from autograder.grading import one_notebook  # noqa: E402
from autograder.grading.one_notebook import STUDENT, grade  # noqa: E402
from autograder.sandbox import safe_files as files  # noqa: E402

one_notebook.adopt_early_checks(*_EARLY)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autograder/bin/grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignment", help="e.g. lab11")
    parser.add_argument("notebooks", nargs="*", help="submitted .ipynb files of that assignment")
    parser.add_argument("--keep", action="store_true", help="keep the scratch course and print where it is")
    parser.add_argument("--template", type=Path, help="scratch course made by make_template (batch grading)")
    parser.add_argument("--student", default=STUDENT, help="student id inside the scratch course")
    parser.add_argument("--out", type=Path, help="copy the autograded notebooks and feedback HTML here")
    parser.add_argument("--lenient", action="store_true",
                        help="unusable files count as missing notebooks (0 points) instead of an error")
    parser.add_argument("--report", type=Path, help="also write the JSON report to this file")
    parser.add_argument("--root", type=Path, default=ROOT, help="course directory holding source/ (default: this repository)")
    parser.add_argument("--no-warm", action="store_true",
                        help="the caller checked the environment (shipped models, sandbox probe): batch grading")
    parser.add_argument("--self-check", action="store_true",
                        help="grading run only, in a fresh student's kernel (the batch's check of the reference)")
    parser.add_argument("--timestamp", help="the submission's time, as nbgrader's timestamp.txt holds it: the "
                                            "course's late-penalty policy applies against the assignment's due date")
    parser.add_argument("--duedate", help="the assignment's due date, e.g. '2026-12-14 23:59:00 UTC' (without "
                                          "--template; the course's gradebook is never opened)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade without the sandbox (bubblewrap) on purpose; the feedback pages say so")
    args = parser.parse_args(argv)
    if not args.notebooks and not args.lenient:
        parser.error("give at least one notebook")
    try:
        without = sandbox_gate.in_grading_process(args.no_sandbox)
        report = grade(args.assignment, args.notebooks, keep=args.keep, template=args.template,
                       student=args.student, out=args.out, lenient=args.lenient, root=args.root.resolve(),
                       warm=not args.no_warm, probe=not args.no_warm, self_check=args.self_check,
                       timestamp=args.timestamp, duedate=args.duedate)
    except PipelineError as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except files.DiskFull as e:
        print(f"error: {e.strerror}", file=sys.stderr)
        return 1
    if without:
        report["graded_without_sandbox"] = without
    text = json.dumps(report, indent=2)
    if args.report:
        files.atomic_write_text(args.report, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
