"""Grade notebooks of one assignment in a scratch copy of the course; print the result as JSON.

    autograder/grade ASSIGNMENT NOTEBOOK.ipynb [NOTEBOOK.ipynb ...] [--keep]

The scratch course holds a copy of source/ASSIGNMENT and nothing else, so the course's own
gradebook.db, submitted/ and autograded/ never change. nbgrader restores the locked test cells
(hidden tests included) from source/ before it runs the notebook, exactly as `make autograde` does.

Output: {"assignment", "notebooks": [{"notebook", "file", "cells": [{"grade_id", "points",
"max_points", "error"}], "points", "max_points"}], "points", "max_points"}. A cell's "error" is
the last line of the exception it raised (null when it passed). Exit status 0 when grading ran,
1 with one "error: ..." line on stderr when the input is unusable.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course  # noqa: E402  (autograder/course.py, next to this file)
from course import ROOT, PipelineError  # noqa: E402

STUDENT = "scratch_student"


def _grade_ids(nb) -> set[str]:
    return {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if isinstance(c.metadata.get("nbgrader"), dict) and "grade_id" in c.metadata["nbgrader"]}


def match_notebooks(assignment: str, paths: list[str], root: Path = ROOT) -> dict[str, Path]:
    """Source notebook name -> submitted file, or PipelineError naming the file that does not fit."""
    import nbformat

    source_dir = root / "source" / assignment
    sources = sorted(source_dir.glob("*.ipynb")) if source_dir.is_dir() else []
    if not sources:
        known = sorted(p.name for p in (root / "source").glob("*") if p.is_dir()) if (root / "source").is_dir() else []
        raise PipelineError(f"unknown assignment {assignment!r}: no source/{assignment}/*.ipynb "
                            f"(assignments: {', '.join(known) or 'none'})")
    source_ids = {p.stem: _grade_ids(nbformat.read(p, as_version=4)) for p in sources}
    chosen: dict[str, Path] = {}
    for arg in paths:
        path = Path(arg)
        if not path.is_file():
            raise PipelineError(f"{arg}: no such file")
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception as e:  # JSON or nbformat errors: one line is enough for the user
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PipelineError(f"{arg} is not a valid notebook ({type(e).__name__}: {first})") from None
        ids = _grade_ids(nb)
        overlapping = [name for name, want in source_ids.items() if ids & want]
        if path.stem in overlapping:
            name = path.stem
        elif len(overlapping) == 1:
            name = overlapping[0]  # a renamed copy, e.g. "llm_as_policy (1).ipynb"
        else:
            raise PipelineError(
                f"{arg} belongs to no notebook of assignment {assignment!r} "
                f"(it shares no graded cell with {', '.join(p.name for p in sources)})"
            )
        if name in chosen:
            raise PipelineError(f"{arg} and {chosen[name]} are both submissions of {assignment}/{name}.ipynb")
        chosen[name] = path
    return chosen


def grade(assignment: str, paths: list[str], keep: bool = False) -> dict:
    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    chosen = match_notebooks(assignment, paths)
    scratch = Path(tempfile.mkdtemp(prefix="llmrl-grade-"))
    try:
        shutil.copytree(ROOT / "source" / assignment, scratch / "source" / assignment, ignore=course.COPY_IGNORE)
        for name, path in chosen.items():
            target = scratch / "submitted" / STUDENT / assignment / f"{name}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        cfg = course.load_config(scratch)
        cfg.Application.log_level = "ERROR"
        api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
        for step, result in (("generate_assignment", lambda: api.generate_assignment(assignment, force=True, create=True)),
                             ("autograde", lambda: api.autograde(assignment, STUDENT, force=True, create=True))):
            r = result()
            if not r.get("success"):
                detail = (r.get("error") or r.get("log") or "").strip().splitlines()
                raise PipelineError(f"nbgrader {step} failed: {detail[-1] if detail else 'no detail'}")
        report = {"assignment": assignment, "notebooks": [], "points": 0.0, "max_points": 0.0}
        with Gradebook(f"sqlite:///{scratch / 'gradebook.db'}") as gb:
            for name, path in chosen.items():
                graded = nbformat.read(scratch / "autograded" / STUDENT / assignment / f"{name}.ipynb", as_version=4)
                errors = {}
                for c in graded.cells:
                    gid = c.metadata.get("nbgrader", {}).get("grade_id")
                    for o in c.get("outputs", []):
                        if o.get("output_type") == "error":
                            errors[gid] = f"{o.get('ename')}: {o.get('evalue')}".strip()
                sub = gb.find_submission_notebook(name, assignment, STUDENT)
                order = {gid: i for i, gid in enumerate(_grade_ids_in_order(graded))}
                cells = [{"grade_id": g.name,
                          "points": None if g.score is None else float(g.score),
                          "max_points": float(g.max_score),
                          "needs_manual_grade": bool(g.needs_manual_grade),
                          "error": errors.get(g.name)}
                         for g in sorted(sub.grades, key=lambda g: order.get(g.name, 1 << 30))]
                entry = {"notebook": name, "file": str(path), "cells": cells,
                         "points": float(sub.score), "max_points": float(sub.max_score)}
                report["notebooks"].append(entry)
                report["points"] += entry["points"]
                report["max_points"] += entry["max_points"]
        return report
    finally:
        if keep:
            print(f"scratch course kept in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def _grade_ids_in_order(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if isinstance(c.metadata.get("nbgrader"), dict) and "grade_id" in c.metadata["nbgrader"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autograder/grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignment", help="e.g. lab11")
    parser.add_argument("notebooks", nargs="+", help="submitted .ipynb files of that assignment")
    parser.add_argument("--keep", action="store_true", help="keep the scratch course and print where it is")
    args = parser.parse_args(argv)
    try:
        report = grade(args.assignment, args.notebooks, keep=args.keep)
    except PipelineError as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
