"""Grade notebooks of one assignment in a scratch copy of the course; print the result as JSON.

    autograder/grade ASSIGNMENT NOTEBOOK.ipynb [NOTEBOOK.ipynb ...] [--keep]

The scratch course holds a copy of source/ASSIGNMENT and nothing else, so the course's own
gradebook.db, submitted/ and autograded/ never change. nbgrader restores the locked test cells
(hidden tests included) from source/ before it runs the notebook, exactly as `make autograde` does.

Output: {"assignment", "notebooks": [{"notebook", "file", "cells": [{"grade_id", "points",
"max_points", "error"}], "points", "max_points"}], "points", "max_points"}. A cell's "error" is
the last line of the exception it raised (null when it passed). Exit status 0 when grading ran,
1 with one "error: ..." line on stderr when the input is unusable.

Safety (autograder/safety.py, autograder/sandbox.py): each kernel runs sandboxed with resource
limits, per-cell and per-notebook timeouts, capped output and a tamper guard. A notebook whose
code replaced a library function the tests rely on scores 0 and gets "needs_manual_review": true
with the reasons; "review_notes" lists suspicious code that did not change the score. Each entry
of "notebooks" also has "status": "graded", "missing" (no usable file: 0 points, with "reason")
and "events" (tampering, notebook_timeout, kernel_died, cells_skipped).

Batch grading (autograder/batch.py) calls this file once per student with --template (a scratch
course prepared once), --student, --out (autograded notebook and feedback) and --lenient
(unusable files count as missing notebooks instead of stopping).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run from the command line, the cached models are checked (and built if missing) by a second
# process while this one imports nbgrader: on 2 cores that saves the 3-4 s torch import per
# submission. grade() waits for it before any kernel starts. --no-warm: the caller already did it.
_WARMING = (subprocess.Popen([sys.executable, "-m", "llmrl.cache"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
            if __name__ == "__main__" and "--no-warm" not in sys.argv[1:] else None)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course  # noqa: E402  (autograder/course.py, next to this file)
from course import ROOT, PipelineError  # noqa: E402

STUDENT = "scratch_student"
MAX_NOTEBOOK_MB = 64  # a bigger "notebook" is refused before anything parses it


def _grade_ids(nb) -> set[str]:
    return {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if isinstance(c.metadata.get("nbgrader"), dict) and "grade_id" in c.metadata["nbgrader"]}


def _read_notebook(arg: str):
    import nbformat

    path = Path(arg)
    if not path.is_file():
        raise PipelineError(f"{arg}: no such file")
    if path.stat().st_size > MAX_NOTEBOOK_MB << 20:
        raise PipelineError(f"{arg} is not a valid notebook (larger than {MAX_NOTEBOOK_MB} MB)")
    try:
        nb = nbformat.read(path, as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
        for c in nb.cells:
            if not isinstance(c.get("source"), str) or not isinstance(c.get("metadata"), dict):
                raise ValueError("a cell without source or metadata")
    except Exception as e:  # JSON or nbformat errors: one line is enough for the user
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PipelineError(f"{arg} is not a valid notebook ({type(e).__name__}: {first[:200]})") from None
    return nb


def source_notebooks(assignment: str, root: Path = ROOT) -> dict[str, Path]:
    source_dir = root / "source" / assignment
    sources = sorted(source_dir.glob("*.ipynb")) if source_dir.is_dir() else []
    if not sources:
        known = sorted(p.name for p in (root / "source").glob("*") if p.is_dir()) if (root / "source").is_dir() else []
        raise PipelineError(f"unknown assignment {assignment!r}: no source/{assignment}/*.ipynb "
                            f"(assignments: {', '.join(known) or 'none'})")
    return {p.stem: p for p in sources}


def match_notebooks(assignment: str, paths: list[str], root: Path = ROOT,
                    problems: dict[str, str] | None = None) -> dict[str, Path]:
    """Source notebook name -> submitted file, or PipelineError naming the file that does not fit.

    With a `problems` dict (lenient mode) a file that does not fit is recorded there (file ->
    reason) instead, and grading goes on with the others.
    """
    import nbformat

    sources = source_notebooks(assignment, root)
    source_ids = {name: _grade_ids(nbformat.read(p, as_version=4)) for name, p in sources.items()}
    chosen: dict[str, Path] = {}
    for arg in paths:
        path = Path(arg)
        try:
            nb = _read_notebook(arg)
            ids = _grade_ids(nb)
            overlapping = [name for name, want in source_ids.items() if ids & want]
            if path.stem in overlapping:
                name = path.stem
            elif len(overlapping) == 1:
                name = overlapping[0]  # a renamed copy, e.g. "llm_as_policy (1).ipynb"
            elif path.stem in sources and problems is not None:
                name = path.stem  # every graded cell renamed or deleted: nbgrader adds them back
            else:
                raise PipelineError(
                    f"{arg} belongs to no notebook of assignment {assignment!r} "
                    f"(it shares no graded cell with {', '.join(p.name for p in sources.values())})"
                )
            if name in chosen:
                raise PipelineError(f"{arg} and {chosen[name]} are both submissions of {assignment}/{name}.ipynb")
        except PipelineError as e:
            if problems is None:
                raise
            problems[str(arg)] = str(e)
            continue
        chosen[name] = path
    return chosen


def _max_points(nb_path: Path) -> list[tuple[str, float]]:
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    return [(c.metadata["nbgrader"]["grade_id"], float(c.metadata["nbgrader"].get("points", 0)))
            for c in nb.cells if isinstance(c.metadata.get("nbgrader"), dict) and c.metadata["nbgrader"].get("grade")]


def make_template(assignment: str, root: Path = ROOT, target: Path | None = None) -> Path:
    """A scratch course with source/<assignment> and a gradebook that knows it (generate_assignment).

    Grading a submission copies it, so nbgrader's set-up is paid once per batch, not per student.
    """
    source_notebooks(assignment, root)
    target = Path(tempfile.mkdtemp(prefix="llmrl-template-")) if target is None else target
    shutil.copytree(root / "source" / assignment, target / "source" / assignment, ignore=course.COPY_IGNORE)
    course.record_assignment(assignment, target)
    shutil.rmtree(target / "release", ignore_errors=True)
    return target


def _warm_model_cache() -> None:
    """Build the course's cached models outside the sandbox (kernels only read the cache): wait for
    the process started at import, or build them in this process."""
    global _WARMING
    if _WARMING is None:
        from llmrl.cache import warm
        warm()
        return
    out, _ = _WARMING.communicate()
    code, _WARMING = _WARMING.returncode, None
    if code != 0:
        lines = (out or "").strip().splitlines()
        raise PipelineError(f"building the cached models (python -m llmrl.cache) failed: "
                            f"{lines[-1] if lines else f'exit status {code}'}")


def grade(assignment: str, paths: list[str], keep: bool = False, *, template: Path | None = None,
          student: str = STUDENT, out: Path | None = None, lenient: bool = False, root: Path = ROOT,
          warm: bool = True) -> dict:
    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    import safety

    started = time.monotonic()
    problems: dict[str, str] | None = {} if lenient else None
    sources = source_notebooks(assignment, root)
    if warm:
        _warm_model_cache()
    chosen = match_notebooks(assignment, paths, root, problems)
    if not chosen and not lenient:
        raise PipelineError("no notebook to grade")
    scratch = Path(tempfile.mkdtemp(prefix="llmrl-grade-"))
    reports = scratch / "grader-reports"  # the kernel cannot see or write this (sandbox.py hides the scratch)
    saved_env = {k: os.environ.get(k) for k in ("LLMRL_GRADER_REPORT_DIR", "LLMRL_SANDBOX_HIDE")}
    try:
        if template is not None:
            shutil.copytree(template, scratch, dirs_exist_ok=True)
        else:
            make_template(assignment, root, scratch)
        notes: dict[str, list[str]] = {}
        for name, path in chosen.items():
            target = scratch / "submitted" / student / assignment / f"{name}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            notes[name] = safety.scan_notebook(_read_notebook(str(path)))
        os.environ["LLMRL_GRADER_REPORT_DIR"] = str(reports)
        os.environ["LLMRL_SANDBOX_HIDE"] = os.pathsep.join(str(p) for p in (scratch, template) if p)
        cfg = course.load_config(scratch)
        cfg.Application.log_level = "ERROR"
        api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
        if chosen:
            r = api.autograde(assignment, student, force=True, create=True)
            if not r.get("success"):
                detail = (r.get("error") or r.get("log") or "").strip().splitlines()
                raise PipelineError(f"nbgrader autograde failed: {detail[-1] if detail else 'no detail'}")
        report = {"assignment": assignment, "student": student, "notebooks": [], "points": 0.0, "max_points": 0.0,
                  "needs_manual_review": False, "sandbox": _sandbox_line()}
        with Gradebook(f"sqlite:///{scratch / 'gradebook.db'}") as gb:
            for name, src in sources.items():
                entry = _notebook_entry(gb, scratch, assignment, student, name, src, chosen, problems or {},
                                        reports, notes.get(name, []))
                report["notebooks"].append(entry)
        for entry in report["notebooks"]:
            report["points"] += entry["points"]
            report["max_points"] += entry["max_points"]
            report["needs_manual_review"] |= entry["needs_manual_review"]
        if out is not None and chosen:
            _export(api, scratch, assignment, student, out, report)
        report["seconds"] = round(time.monotonic() - started, 1)
        return report
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if keep:
            print(f"scratch course kept in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def _sandbox_line() -> str:
    import sandbox

    status = sandbox.bwrap_status()
    lim = sandbox.limits()
    where = "bubblewrap (no network, course files hidden, own folder writable)" if status == "ok" else f"NONE: {status}"
    return f"{where}; limits: {lim['mem_mb']} MB memory, {lim['cpu_s']} s CPU, {lim['fsize_mb']} MB per file"


def _notebook_entry(gb, scratch, assignment, student, name, src, chosen, problems, reports, notes) -> dict:
    import nbformat

    if name not in chosen:
        reason = "; ".join(problems.values()) if problems else f"no {name}.ipynb submitted"
        cells = [{"grade_id": gid, "points": 0.0, "max_points": pts, "needs_manual_grade": False, "error": None}
                 for gid, pts in _max_points(src)]
        return {"notebook": name, "file": None, "status": "missing", "reason": reason, "cells": cells,
                "points": 0.0, "max_points": sum(c["max_points"] for c in cells), "needs_manual_review": False,
                "review_reasons": [], "review_notes": [], "events": {}}
    graded = nbformat.read(scratch / "autograded" / student / assignment / f"{name}.ipynb", as_version=4)
    errors = {}
    for c in graded.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                errors[gid] = f"{o.get('ename')}: {o.get('evalue')}".strip()[:300]
    sub = gb.find_submission_notebook(name, assignment, student)
    order = {gid: i for i, gid in enumerate(_grade_ids_in_order(graded))}
    cells = [{"grade_id": g.name,
              "points": None if g.score is None else float(g.score),
              "max_points": float(g.max_score),
              "needs_manual_grade": bool(g.needs_manual_grade),
              "error": errors.get(g.name)}
             for g in sorted(sub.grades, key=lambda g: order.get(g.name, 1 << 30))]
    events_file = reports / f"{name}.json"
    events = json.loads(events_file.read_text()) if events_file.exists() else {"missing": "no grader report"}
    review = []
    for t in events.get("tampering", []):
        review.append(f"test cell {t['cell']}: replaced {', '.join(sorted(set(t['before'] + t['during'])))}")
    if events.get("missing"):
        review.append("the grader's execution report is missing")
    if review:  # policy: a notebook that changed what the tests rely on scores 0 until a person looks
        for c in cells:
            c["points"] = 0.0
    entry = {"notebook": name, "file": str(chosen[name]), "status": "graded", "reason": None, "cells": cells,
             "points": float(sum(c["points"] or 0 for c in cells)), "max_points": float(sub.max_score),
             "needs_manual_review": bool(review), "review_reasons": review, "review_notes": notes, "events": events}
    return entry


def _export(api, scratch, assignment, student, out: Path, report: dict) -> None:
    """The autograded notebooks and their HTML feedback (no hidden tests) into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    graded_dir = scratch / "autograded" / student / assignment
    for p in graded_dir.glob("*.ipynb"):
        shutil.copyfile(p, out / p.name)
    r = api.generate_feedback(assignment, student, force=True)
    if r.get("success"):
        for p in (scratch / "feedback" / student / assignment).glob("*.html"):
            shutil.copyfile(p, out / p.name)
    else:
        report["feedback_error"] = ((r.get("error") or r.get("log") or "").strip().splitlines() or ["failed"])[-1]


def _grade_ids_in_order(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if isinstance(c.metadata.get("nbgrader"), dict) and "grade_id" in c.metadata["nbgrader"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autograder/grade", description=__doc__,
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
                        help="do not check the cached models first (the caller built them: batch grading)")
    args = parser.parse_args(argv)
    if not args.notebooks and not args.lenient:
        parser.error("give at least one notebook")
    try:
        report = grade(args.assignment, args.notebooks, keep=args.keep, template=args.template,
                       student=args.student, out=args.out, lenient=args.lenient, root=args.root.resolve(),
                       warm=not args.no_warm)
    except PipelineError as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    text = json.dumps(report, indent=2)
    if args.report:
        args.report.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
