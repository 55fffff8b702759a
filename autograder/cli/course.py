"""The course pipeline: jupytext sources -> nbgrader source notebooks -> releases -> grades.

    python -m autograder build     [ASSIGNMENT...]   notebooks/A/x.py -> source/A/x.ipynb
    python -m autograder execute   [ASSIGNMENT...]   run source notebooks in place (nbval reference)
    python -m autograder release   [ASSIGNMENT...]   nbgrader generate_assignment -> release/A/
    python -m autograder validate  [ASSIGNMENT...]   sources pass every test, releases fail every test cell
    python -m autograder submissions [ASSIGNMENT...] the sample students into build/demo-course/submitted/
    python -m autograder autograde [ASSIGNMENT...]   the sandboxed batch on submitted/, grades.csv, score table
    python -m autograder demo      [ASSIGNMENT...]   the sample students graded in build/demo-course/
    python -m autograder feedback  [ASSIGNMENT...] [--force]  feedback/ from the gradebook (held until graded)
    python -m autograder scores    [ASSIGNMENT...]   score table and grades.csv from the gradebook
    python -m autograder sandbox                     does grading here run in the sandbox? (make demo asks first)
    (autograde, feedback, scores: --course DIR works on another course folder, e.g. build/demo-course)
    (autograde, demo, sandbox: --no-sandbox grades without bubblewrap, on purpose: every feedback page says so)

An assignment is a folder notebooks/<assignment>/; each <name>.py in it (jupytext percent format,
names starting with "_" are skipped) becomes the notebook source/<assignment>/<name>.ipynb.
The Makefile calls these commands; the tests import the functions.

"""

from __future__ import annotations
import argparse
import sys
from pathlib import Path
from autograder.authoring.execute import _parallel, execute_one, release, validate
from autograder.authoring.notebooks import build, stale_sources
from autograder.authoring.samples import demo, make_demo_course
from autograder.batch import sandbox_gate
from autograder.batch.course_run import autograde
from autograder.course.layout import DEMO, PipelineError, ROOT, assignments, course_labs, discover, rel
from autograder.export.release_feedback import feedback
from autograder.export.grades_csv import score_table, write_grades_csv


# ----------------------------------------------------------------------------- command line

def _parser() -> argparse.ArgumentParser:
    """The command line (this module's docstring is its --help)."""
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "execute", "release", "validate", "submissions", "autograde",
                                            "demo", "feedback", "scores", "sandbox", "list"])
    parser.add_argument("assignments", nargs="*", help="restrict to these assignments (default: all)")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="course directory (default: this repository); build and list only")
    parser.add_argument("--demo-dir", type=Path, default=DEMO,
                        help=f"demo and submissions: the demo course folder (default: {rel(DEMO)})")
    parser.add_argument("--course", type=Path, default=ROOT,
                        help="autograde, feedback, scores: the course folder graded (default: this repository; "
                             f"e.g. {rel(DEMO)})")
    parser.add_argument("--force", action="store_true",
                        help="feedback: release notebooks whose written answers are not graded yet too")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="autograde, demo: grade without the sandbox (bubblewrap) on purpose; without this a "
                             "machine where it does not work is refused. Every feedback page and batch_grades.csv "
                             "then say the grades were made without it")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["nbgrader"]:  # `course.py nbgrader ARGS`: nbgrader's own command line, sped up
        from nbgrader.apps.nbgraderapp import main as nbgrader_main

        sys.argv = ["nbgrader", *argv[1:]]
        return nbgrader_main()
    args = parser.parse_args(argv)
    try:
        if args.command == "sandbox":  # before make demo builds anything: no notebook is needed
            print(sandbox_line(args.no_sandbox))
            return 0
        if args.root.resolve() != ROOT and args.command not in ("build", "list"):
            raise PipelineError(f"--root works with build and list only, not {args.command}")
        course_dir = args.course.resolve()
        if course_dir != ROOT and args.command in ("autograde", "feedback", "scores"):
            labs = course_labs(course_dir, args.assignments)  # a course folder without notebooks/ (the demo)
        else:
            labs = discover(args.assignments, root=args.root.resolve())
        if not labs:
            print("no notebooks under notebooks/*/*.py: nothing to do")
            return 0
        _run(args, labs, course_dir)
    except PipelineError as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 1
    return 0


def _run(args: argparse.Namespace, labs: list, course_dir: Path) -> None:
    """The command on these notebooks; PipelineError when it fails."""
    if args.command == "list":
        print("\n".join(f"{lab.assignment}/{lab.name}" for lab in labs))
    elif args.command == "build":
        for p in build(labs):
            print(f"wrote {rel(p)}")
        for p in stale_sources(labs, root=args.root.resolve()):
            p.unlink()
            print(f"removed {rel(p)} (its notebooks/ source is gone)")
        print(f"built {len(labs)} notebook(s): source/ in sync with notebooks/")
    elif args.command == "execute":
        missing = [rel(lab.source) for lab in labs if not lab.source.exists()]
        if missing:
            raise PipelineError(f"{', '.join(missing)} missing: run `make build` first")
        done, errors = _parallel(execute_one, [str(lab.source) for lab in labs])
        for d in done:
            print(f"executed {d}")
        if errors:
            raise PipelineError("\n".join(errors))
    elif args.command == "release":
        release(labs)
        print("released " + ", ".join(f"release/{a}/" for a in assignments(labs)))
    elif args.command == "validate":
        validate(labs)
    elif args.command == "submissions":
        folder = make_demo_course(labs, args.demo_dir)
        print(f"wrote the sample submissions into {rel(folder / 'submitted')}/ (a demo course; the course's "
              f"own submitted/ is left alone)")
    elif args.command == "autograde":
        autograde(labs, course_dir, no_sandbox=args.no_sandbox)
    elif args.command == "demo":
        table = demo(labs, args.demo_dir, no_sandbox=args.no_sandbox)
        folder = args.demo_dir.resolve()
        print()
        print(table)
        print(f"\nThe demo course is {rel(folder)}/ (its own gradebook.db, submitted/, autograded/, feedback/, "
              f"grades.csv); the course's gradebook.db and submitted/ were not touched. Written answers: "
              f"`cd {rel(folder)} && {Path(sys.executable).parent / 'jupyter'} lab` opens the formgrader on it, then "
              f"`make feedback COURSE_DIR={rel(folder)}` (docs/instructors.md, \"Grading the written answers\").")
    elif args.command == "feedback":
        feedback(labs, force=args.force, root=course_dir)
    elif args.command == "scores":
        if not (course_dir / "gradebook.db").exists():
            print(f"no {rel(course_dir / 'gradebook.db')}: nothing is graded yet (make autograde)")
        else:
            print(score_table(labs, course_dir))
            print(f"\nwrote {rel(write_grades_csv(course_dir))}")


def sandbox_line(no_sandbox: bool) -> str:
    """What grading here will do, as one line; PipelineError (the refusal) when the sandbox does not
    work and `no_sandbox` is not given."""
    without = sandbox_gate.decide(no_sandbox)
    if without:
        return f"WARNING: grading runs WITHOUT the sandbox ({without}); every feedback page will say so"
    return "grading runs in the sandbox (bubblewrap works here)"


if __name__ == "__main__":
    sys.exit(main())
