"""`make autograde`: the batch grader on a course's submitted/, then grades.csv and the score table.
"""

from __future__ import annotations
from pathlib import Path
from autograder.course.layout import DEMO, Lab, PipelineError, ROOT, assignments, rel
from autograder.batch import run as batch
from autograder.export.grades_csv import score_table

# ----------------------------------------------------------------------------- grading (the batch)

def grade_course(labs: list[Lab], root: Path = ROOT, progress: bool = True, workers: int | None = None,
                 no_sandbox: bool = False) -> dict:
    """The sandboxed batch grader (autograder/batch/run.py) on root/submitted/, then grades.csv
    (`no_sandbox`: the instructor's --no-sandbox; without it a machine without the sandbox is refused).

    grades.csv is removed before grading and written again only when the batch finished: a run
    that fails never leaves a table of an earlier run behind. Raises PipelineError (the batch's)."""
    submitted = root / "submitted"
    names = [a for a in assignments(labs) if any(p.is_dir() for p in submitted.glob(f"*/{a}"))]
    for a in assignments(labs):
        if a not in names:
            print(f"no submissions for {a} in {rel(submitted, root)}/")
    grades = root / "grades.csv"
    if grades.exists():
        grades.unlink()
    if not names:
        return {"results": [], "assignments": []}
    try:
        result = batch.run_batch(names, root, submitted, workers=workers, csv_path=root / "batch_grades.csv",
                                 progress=progress, no_sandbox=no_sandbox)
    except PipelineError as e:
        if grades.exists():
            grades.unlink()
        raise PipelineError(f"{e} (grades.csv was not written: run the command again once this is fixed)") from None
    print(batch.summary(result))
    result["assignments"] = names
    return result


def autograde(labs: list[Lab], root: Path = ROOT, progress: bool = True, no_sandbox: bool = False) -> None:
    submitted = root / "submitted"
    if not submitted.is_dir() or not any(submitted.iterdir()):
        print(f"{rel(submitted, root)}/ is empty: copy submissions to submitted/<student>/<assignment>/<name>.ipynb "
              f"(or run `make demo` to grade the sample students in {rel(DEMO)}/, apart from this gradebook)")
        return
    result = grade_course(labs, root, progress=progress, no_sandbox=no_sandbox)
    print()
    print(score_table(labs, root, _failed(result)))
    print(f"\ngrades.csv, batch_grades.csv, autograded/, feedback/<student>/<assignment>/*.html (no hidden tests; "
          f"notebooks awaiting manual grading are held back: grade them in the formgrader, then `make feedback`)")


def _failed(result: dict) -> dict:
    return {(r.job.assignment, r.job.student): r.error for r in result.get("results", []) if r.report is None}


