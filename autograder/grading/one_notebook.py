"""Grade notebooks of one assignment in a scratch copy of the course; print the result as JSON.

    autograder/bin/grade ASSIGNMENT NOTEBOOK.ipynb [NOTEBOOK.ipynb ...] [--keep]

The scratch course holds a copy of source/ASSIGNMENT and nothing else, in a private temporary
folder: the course's own gradebook.db, submitted/, autograded/ and feedback/ are never opened.
A submitted file must be a regular file (a symbolic link is refused, never followed).

How a notebook is scored (autograder/execution/tworun.py): nbgrader restores the locked cells from the
source; the notebook then runs once for the feedback (hidden tests removed) and once for the
score, where the tests run in a kernel of their own that never executes the student's code and
calls the student's functions in the student's kernel. A test cell earns its points exactly when
it ran without an error there; nothing a cell displays counts. nbgrader's gradebook (of the
scratch course) records the points; the feedback HTML shows the student's cells and outputs from
the feedback run and, for each test cell, its points and the first line of its failure.

Output: {"assignment", "notebooks": [{"notebook", "file", "cells": [{"grade_id", "points",
"max_points", "needs_manual_grade", "error"}], "points", "max_points", "points_held", "late_penalty", "status",
"reason", "needs_manual_review", "review_reasons", "review_notes", "events"}], "points", "max_points",
"late_penalty", "timestamp", "seconds_late", "needs_manual_review", "sandbox", "seconds"}. A cell's
"error" is the message of its failure (null when it passed). With --timestamp (nbgrader's
timestamp.txt, which the batch passes on) the scratch course records that submission time, and
nbgrader's AssignLatePenalties applies the course's policy against the due date of the template (the
batch's: the course gradebook's) or --duedate ("late_penalty": points taken off, by notebook and in all). "status" is "graded" or "missing" (no usable file: 0 points, with "reason").
"review_reasons" (the notebook then scores 0 until a person looks) are answers of the student's
kernel outside the grader's format and the answer-key check's notes (autograder/review/answer_key.py: a
graded function that leans on the course library's own version of its task); "review_notes" list
code and metadata a reviewer should see
(nbgrader metadata the grader restored, suspicious calls) without changing the score. "events"
says what happened in the two runs (notebook_timeout, kernel_died, cells_skipped,
student_kernel, calls, restarts, kernel_cpu_s). Exit status 0 when grading ran, 1 with one
"error: ..." line on stderr when the input is unusable or the environment is broken (the course
library cannot be imported inside the sandbox, a shipped model is missing or changed).

Batch grading (autograder/batch/run.py) calls this file once per student with --template (a scratch
course prepared once), --student, --out (autograded notebook and feedback) and --lenient
(unusable files count as missing notebooks instead of stopping); --self-check grades the
reference solutions with the grading run only.
"""

from __future__ import annotations

import asyncio
import copy
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from autograder.course.layout import COPY_IGNORE, PipelineError, ROOT
from autograder.course.nbgrader_app import load_config, record_assignment
from autograder.sandbox import safe_files as files
STUDENT = "scratch_student"
MAX_NOTEBOOK_MB = 64  # a bigger "notebook" is refused before anything parses it


def _grade_ids(nb) -> set[str]:
    out = set()
    for c in nb.cells:
        m = c.metadata.get("nbgrader")
        if isinstance(m, dict) and isinstance(m.get("grade_id"), str):
            out.add(m["grade_id"])
    return out


def _read_notebook(arg: str):
    import nbformat

    path = Path(arg)
    if not os.path.lexists(path):
        raise PipelineError(f"{arg}: no such file")
    try:
        data = files.read_regular(path, MAX_NOTEBOOK_MB << 20)
    except files.NotRegular as e:
        raise PipelineError(f"{arg} is not a valid notebook ({e.strerror}; the grader never follows links)") from None
    except ValueError:
        raise PipelineError(f"{arg} is not a valid notebook (larger than {MAX_NOTEBOOK_MB} MB)") from None
    except OSError as e:
        raise PipelineError(f"{arg}: cannot be read ({e.strerror})") from None
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
        for c in nb.cells:
            if not isinstance(c, dict) or not isinstance(c.get("source"), str) or not isinstance(c.get("metadata"), dict):
                raise ValueError("a cell without source or metadata")
            if c.get("cell_type") not in ("code", "markdown", "raw"):
                raise ValueError(f"a cell of type {c.get('cell_type')!r}")
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


NBGRADER_KEYS = ("grade", "grade_id", "locked", "points", "schema_version", "solution", "task")


def repair_metadata(nb, source_nb) -> list[str]:
    """Give every cell of a submission the nbgrader metadata the course gave it; notes for a reviewer.

    A cell whose grade_id the course has gets the course's metadata and cell type back (a test
    cell turned into a solution cell, changed points or flags); nbgrader metadata with an unknown
    grade_id (an extra graded cell with points of its own), a second copy of a grade_id, or
    metadata that is not a well-formed dictionary is removed, so the cell counts as an ordinary
    one. nbgrader then restores locked cells and adds missing test cells as usual."""
    src = {}
    for c in source_nb.cells:
        m = c.metadata.get("nbgrader")
        if isinstance(m, dict) and isinstance(m.get("grade_id"), str):
            src[m["grade_id"]] = c
    notes, seen = [], {}
    valid = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if isinstance(c.metadata.get("nbgrader"), dict)
             and isinstance(c.metadata["nbgrader"].get("grade_id"), str)}
    for i, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.metadata:
            continue
        meta = cell.metadata["nbgrader"]
        where = f"cell {i + 1}"
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if not isinstance(gid, str) or gid not in src:
            # The release gives every graded cell its grade_id as cell id: a cell whose metadata was
            # broken is still recognised by it.
            cid = cell.get("id")
            if isinstance(cid, str) and cid in src and cid not in valid and cid not in seen:
                notes.append(f"{where} ({cid}): its nbgrader metadata was broken "
                             f"({'not a dictionary' if not isinstance(meta, dict) else f'grade_id {gid!r}'}); "
                             f"restored from the course")
                gid, meta = cid, {}
                cell.metadata["nbgrader"] = meta
            elif not isinstance(meta, dict):
                notes.append(f"{where}: its nbgrader metadata is not a dictionary ({type(meta).__name__}); removed, "
                             f"the cell counts as an ordinary cell")
                del cell.metadata["nbgrader"]
                continue
            else:
                what = "an extra graded cell" if meta.get("grade") else "a cell with nbgrader metadata"
                notes.append(f"{where}: {what} with grade_id {gid!r}, which is no cell of this assignment; its "
                             f"metadata was removed{' (its points do not count)' if meta.get('grade') else ''}")
                del cell.metadata["nbgrader"]
                continue
        if gid in seen:
            notes.append(f"{where}: a second cell with grade_id {gid!r} (the first is cell {seen[gid] + 1}); its "
                         f"metadata was removed")
            del cell.metadata["nbgrader"]
            continue
        seen[gid] = i
        want = src[gid].metadata["nbgrader"]
        changed = [k for k in NBGRADER_KEYS if meta.get(k) != want.get(k)]
        if cell.cell_type != src[gid].cell_type:
            changed.append("cell type")
        if changed and meta:
            notes.append(f"{where} ({gid}): nbgrader metadata changed ({', '.join(changed)}); restored from the course")
        keep = {k: v for k, v in meta.items() if k == "checksum" and isinstance(v, str)}
        cell.metadata["nbgrader"] = dict(copy.deepcopy(dict(want)), **keep)
        if cell.cell_type != src[gid].cell_type:
            cell.cell_type = src[gid].cell_type
            if cell.cell_type == "code":
                cell["outputs"], cell["execution_count"] = [], None
            else:
                cell.pop("outputs", None)
                cell.pop("execution_count", None)
    return notes


def make_template(assignment: str, root: Path = ROOT, target: Path | None = None, duedate=None) -> Path:
    """A scratch course with source/<assignment> and a gradebook that knows it (generate_assignment),
    with the settings of the course at `root` (its own nbgrader_config.py too) and the assignment's
    due date there (a datetime in UTC, as nbgrader stores it; None: no due date, nothing is late).

    Grading a submission copies it, so nbgrader's set-up is paid once per batch, not per student.
    """
    from nbgrader.api import Gradebook

    source_notebooks(assignment, root)
    target = files.scratch_dir("template") if target is None else target
    shutil.copytree(root / "source" / assignment, target / "source" / assignment, ignore=COPY_IGNORE)
    record_assignment(assignment, target, settings_from=root)
    if duedate is not None:
        with Gradebook(f"sqlite:///{target / 'gradebook.db'}") as gb:
            gb.update_or_create_assignment(assignment, duedate=duedate)
    shutil.rmtree(target / "release", ignore_errors=True)
    return target


def read_timestamp(text: str | None) -> str | None:
    """nbgrader's timestamp.txt (its text) as the grader passes it on: None when there is none (an
    empty file too, as nbgrader reads it); PipelineError naming the text when nbgrader could not
    read it as a time (nbgrader's own autograde fails such a student too): a late student must
    not become an on-time one by breaking the file."""
    if text is None or not text.strip():
        return None
    from nbgrader.utils import parse_utc

    text = text.strip()
    try:
        if len(text) > 100 or not text.isprintable():
            raise ValueError("too long, or not one line of text")
        parse_utc(text)
    except (ValueError, OverflowError, TypeError):  # dateutil's ParserError is a ValueError
        raise PipelineError(f"timestamp.txt holds {text[:60]!r}, which is not a time nbgrader can read "
                            f"(it writes e.g. '2026-11-30 13:30:00.000000 UTC'): the submission time is unknown, "
                            f"so it was not graded; fix or remove the file and run the batch again") from None
    return text


_WARMING = None  # the command line's early checks (autograder/cli/grade.py): processes started before the imports
_PROBING = None


def adopt_early_checks(warming, probing) -> None:
    """The shipped models' check and the sandbox probe the command line started before importing nbgrader."""
    global _WARMING, _PROBING
    _WARMING, _PROBING = warming, probing


def _wait(proc, what: str) -> str:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        lines = (out or "").strip().splitlines()
        raise PipelineError(f"{what}: {lines[-1] if lines else f'exit status {proc.returncode}'}")
    return out


def _warm_model_cache() -> None:
    """Check the course's shipped models against their manifest outside the sandbox, before any kernel
    starts (kernels only read them; nothing is built): wait for the process the command line started
    (autograder/grading/shipped_models.py), or check them in this process. PipelineError when one is
    missing or changed. (The name is the batch's and the hub's, from when the models were built here.)"""
    global _WARMING
    from autograder.grading import shipped_models

    if _WARMING is None:
        found = shipped_models.problem()
        if found:
            raise PipelineError(f"{shipped_models.CHECK_FAILED}: {found}")
        return
    proc, _WARMING = _WARMING, None
    _wait(proc, shipped_models.CHECK_FAILED)


def _library_view() -> Path:
    """The answer kernel's view of the course library (autograder/sandbox/library_view.py), built once."""
    from autograder.sandbox import library_view

    try:
        return library_view.build()
    except library_view.ViewError as e:
        raise PipelineError(f"the answer kernel's view of the course library: {e}") from None


def check_environment(course_roots: list[Path] | None = None) -> None:
    """The course library must import inside the sandbox: PipelineError with the probe's line."""
    global _PROBING
    if _PROBING is not None:
        proc, _PROBING = _PROBING, None
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise PipelineError((out or "").strip().splitlines()[-1] if (out or "").strip() else "the sandbox probe failed")
        return
    from autograder.sandbox import bubblewrap as sandbox

    problem = sandbox.probe(course_roots) or sandbox.probe(course_roots, view=_library_view())
    if problem:
        raise PipelineError(problem)


def _scratch_config(scratch: Path, preprocessors=None, root: Path = ROOT):
    cfg = load_config(scratch, settings_from=root)
    cfg.Application.log_level = "ERROR"
    if preprocessors is not None:
        cfg.Autograde.autograde_preprocessors = preprocessors
    return cfg


def _autograde(cfg, assignment: str, student: str) -> None:
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
    r = api.autograde(assignment, student, force=True, create=True)
    if not r.get("success"):
        detail = [ln for ln in (r.get("error") or r.get("log") or "").strip().splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(detail) if not ln.startswith((" ", "Traceback")) and "traceback" not in ln),
                      detail[-1] if detail else "no detail")
        raise PipelineError(f"nbgrader autograde failed: {reason}")
    return api


async def _run_all(staged: dict, sources: dict, settings: dict) -> dict:
    import nbformat
    from autograder.execution import tworun

    async def one(name):
        src = nbformat.read(sources[name], as_version=4)
        return name, await tworun.run_notebook(staged[name], src, settings[name])

    return dict(await asyncio.gather(*(one(n) for n in staged)))


def _answer_key_static(assignment: str, nb, name: str) -> tuple[list[str], list[str]]:
    """(reasons for review, notes): the answer-key check of autograder/review/answer_key.py on the notebook."""
    try:
        from autograder.review import answer_key

        return answer_key.review_notes(assignment, nb, name), []
    except Exception as e:  # the check is a reviewer's aid: it never stops grading
        return [], [f"the answer-key check could not read this notebook ({type(e).__name__}: {str(e)[:200]})"]


def _answer_key_probe(assignment: str, name: str):
    """(the probe: (code, expression, keys), the watch module's source), or (None, None)."""
    try:
        from autograder.review import answer_key

        if not answer_key.tasks_for(assignment, name):
            return None, None
        code, expression = answer_key.runtime_probe(assignment, name)
        return (code, expression, answer_key.probe_keys(assignment, name)), answer_key.watch_module(assignment, name)
    except Exception:
        return None, None


def _answer_key_runtime(assignment: str, name: str, result, nb) -> list[str]:
    """Reasons for review from the probe's answer and from the watch over the graded calls."""
    if result is None:
        return []
    try:
        from autograder.review import answer_key

        text = answer_key.text_fingerprints(nb)
        notes = []
        if result.probe_answer is not None:
            notes += answer_key.runtime_notes(assignment, name, result.probe_answer, text=text)
        notes += answer_key.watch_notes(assignment, name, result.watch, result.probe_ends, text=text)
        return list(dict.fromkeys(notes))  # what the probe and the tests' calls both saw is said once
    except Exception as e:
        return [f"{name}: the answer-key runtime check could not be read ({type(e).__name__}): review the graded "
                f"functions"]


def _stage_submissions(assignment: str, chosen: dict, sources: dict, course_dir: Path, student: str,
                       stamp: str | None) -> tuple[dict, dict, dict]:
    """Each chosen notebook, its nbgrader metadata repaired from the source, written into the scratch course
    as the student's submission (with timestamp.txt); by notebook: notes, answer-key reasons, the notebook."""
    import nbformat

    from autograder.review import code_flags as safety

    notes: dict[str, list[str]] = {}
    leans: dict[str, list[str]] = {}
    submitted: dict = {}
    for name, path in chosen.items():
        nb = _read_notebook(str(path))
        submitted[name] = nb
        notes[name] = repair_metadata(nb, nbformat.read(sources[name], as_version=4)) + safety.scan_notebook(nb)
        leans[name], extra = _answer_key_static(assignment, nb, name)
        notes[name] += extra
        target = course_dir / "submitted" / student / assignment / f"{name}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
    if stamp and chosen:  # nbgrader's autograde records it; AssignLatePenalties applies the course's policy
        files.atomic_write_text(course_dir / "submitted" / student / assignment / "timestamp.txt", stamp + "\n")
    return notes, leans, submitted


def _run_staged(assignment: str, sources: dict, root: Path, scratch: Path, self_check: bool) -> dict:
    """The two runs (autograder/execution/tworun.py) of every notebook nbgrader staged, in the sandbox,
    with the answer-key probe unless this is the reference's self-check; the results by notebook."""
    from autograder.execution import nbgrader_preprocessors, tworun
    from autograder.execution import sandboxed_kernel as kernels

    settings = {}
    view = _library_view()
    for name in nbgrader_preprocessors.STAGED:
        probe, watch = (None, None) if self_check else _answer_key_probe(assignment, name)
        settings[name] = nbgrader_preprocessors.settings_from_env(
            course_roots=[ROOT, root], scratch=scratch, feedback=not self_check,
            library_view=view, probe=probe, watch=watch)
    try:
        staged = nbgrader_preprocessors.STAGED
        return asyncio.run(_run_all(dict(staged), {n: sources[n] for n in staged}, settings))
    except (tworun.GradingError, kernels.KernelStartError, OSError, RuntimeError) as e:
        if isinstance(e, files.DiskFull):
            raise
        raise PipelineError(f"the grader could not run the notebooks: {type(e).__name__}: "
                            f"{str(e).strip().splitlines()[0] if str(e).strip() else 'no detail'}") from None


def _add_runtime_notes(assignment: str, results: dict, submitted: dict, notes: dict, leans: dict,
                       self_check: bool) -> None:
    """The answer-key check's findings from the runs (its probe, the watch over the graded calls),
    added to each notebook's reasons for review and notes."""
    for name, result in results.items():
        leans[name] += [n for n in _answer_key_runtime(assignment, name, None if self_check else result,
                                                        submitted.get(name))
                        if n not in leans[name]]
        if result.events.get("answer_key_probe"):
            notes[name].append(f"the answer-key probe: {result.events['answer_key_probe']}; the graded calls "
                               f"themselves were watched")


def _score(course_dir: Path, assignment: str, student: str, root: Path, results: dict):
    """nbgrader's autograde again, scoring the runs' results (TwoRunExecute) with the course's late
    policy; returns nbgrader's API for the feedback export."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput,
                                        SaveAutoGrades)

    from autograder.execution import nbgrader_preprocessors

    nbgrader_preprocessors.RESULTS.clear()
    nbgrader_preprocessors.RESULTS.update(results)
    pre = [nbgrader_preprocessors.TwoRunExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
           AssignLatePenalties, CheckCellMetadata]
    return _autograde(_scratch_config(course_dir, pre, root), assignment, student)


def _grades_report(assignment: str, student: str, course_dir: Path, sources: dict, chosen: dict,
                   problems: dict | None, results: dict, notes: dict, leans: dict, stamp: str | None) -> dict:
    """The report's grades, read from the scratch gradebook: one entry per notebook of the assignment
    (graded, missing or unusable) and their totals."""
    from nbgrader.api import Gradebook

    report = {"assignment": assignment, "student": student, "notebooks": [], "points": 0.0, "max_points": 0.0,
              "needs_manual_review": False, "sandbox": _sandbox_line(), "timestamp": stamp if chosen else None,
              "seconds_late": 0.0, "late_penalty": 0.0}
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        if stamp and chosen:
            report["seconds_late"] = float(gb.find_submission(assignment, student).total_seconds_late)
        for name, src in sources.items():
            entry = _notebook_entry(gb, course_dir, assignment, student, name, src, chosen, problems or {},
                                    results.get(name), notes.get(name, []), leans.get(name, []))
            report["notebooks"].append(entry)
    for entry in report["notebooks"]:
        report["points"] += entry["points"]
        report["max_points"] += entry["max_points"]
        report["needs_manual_review"] |= entry["needs_manual_review"]
        report["late_penalty"] += entry["late_penalty"]
    return report


def grade(assignment: str, paths: list[str], keep: bool = False, *, template: Path | None = None,
          student: str = STUDENT, out: Path | None = None, lenient: bool = False, root: Path = ROOT,
          warm: bool = True, probe: bool = True, self_check: bool = False, timestamp: str | None = None,
          duedate: str | None = None) -> dict:
    from nbgrader.api import Gradebook

    from autograder.execution import nbgrader_preprocessors

    started = time.monotonic()
    stages: dict[str, float] = {}

    def stage(name: str) -> None:
        stages[name] = round(time.monotonic() - started - sum(stages.values()), 2)

    problems: dict[str, str] | None = {} if lenient else None
    sources = source_notebooks(assignment, root)
    if warm:
        _warm_model_cache()
    if probe:
        check_environment([ROOT, root])
    stage("checks")
    stamp = read_timestamp(timestamp)
    chosen = match_notebooks(assignment, paths, root, problems)
    if not chosen and not lenient:
        raise PipelineError("no notebook to grade")
    scratch = files.scratch_dir("grade")
    _scratch_gradebooks_unsynced(scratch)
    try:
        if template is not None:
            shutil.copytree(template, scratch / "course", dirs_exist_ok=True)
        else:
            make_template(assignment, root, scratch / "course", duedate=_duedate(duedate))
        course_dir = scratch / "course"
        notes, leans, submitted = _stage_submissions(assignment, chosen, sources, course_dir, student, stamp)
        stage("course")
        results: dict = {}
        if chosen:
            nbgrader_preprocessors.STAGED.clear()
            _autograde(_scratch_config(course_dir, [nbgrader_preprocessors.StageNotebooks], root), assignment, student)
            stage("nbgrader_restore")
            results = _run_staged(assignment, sources, root, scratch, self_check)
            _add_runtime_notes(assignment, results, submitted, notes, leans, self_check)
            stage("kernels")
            api = _score(course_dir, assignment, student, root, results)
            stage("nbgrader_score")
        report = _grades_report(assignment, student, course_dir, sources, chosen, problems, results, notes, leans, stamp)
        if out is not None and chosen:
            # The feedback is made from the scratch gradebook: first it gets what the course's gradebook
            # will hold (a notebook held for review has no points there, and says so in its feedback).
            with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
                write_grades(gb, assignment, student, [e for e in report["notebooks"] if e["status"] == "graded"])
            _export(api, course_dir, assignment, student, out, report)
            stage("feedback_html")
        report["seconds"] = round(time.monotonic() - started, 1)
        report["stages_s"] = stages
        # forked from the batch's warm workers (autograder/batch/warm_workers.py), kernels from their zygotes
        report["warm_worker"] = os.environ.get("LLMRL_GRADE_WARM_WORKER") == "1"
        report["grader_max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        return report
    finally:
        if keep:
            print(f"scratch course kept in {scratch}", file=sys.stderr)
        else:
            files.rmtree(scratch)


_UNSYNCED: list[str] = []   # scratch folders whose gradebooks need no durability


def _scratch_gradebooks_unsynced(scratch: Path) -> None:
    """A scratch course's gradebook is thrown away with the scratch folder: nbgrader's hundred-odd
    commits per notebook need not wait for the disk there (sqlite's synchronous=OFF, journal in memory).
    Only gradebooks inside `scratch` are affected; the course's own gradebook (which the batch alone
    writes, autograder/batch/gradebook_merge.py) keeps sqlite's defaults."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not _UNSYNCED:
        @event.listens_for(Engine, "connect")
        def _unsynced(dbapi_connection, _record):
            try:
                cur = dbapi_connection.cursor()
                files_ = [row[2] for row in cur.execute("PRAGMA database_list").fetchall()]
                if files_ and files_[0] and any(files_[0].startswith(d + os.sep) for d in _UNSYNCED):
                    cur.execute("PRAGMA synchronous=OFF")
                    cur.execute("PRAGMA journal_mode=MEMORY")
                cur.close()
            except Exception:  # not sqlite, or no file: left as it is
                pass
    _UNSYNCED.append(str(Path(scratch).resolve()))


def _duedate(text: str | None):
    """--duedate (without --template: the batch puts the course's due date into its template)."""
    if not text:
        return None
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(text)
    except (ValueError, OverflowError) as e:
        raise PipelineError(f"--duedate {text[:60]!r} is not a time ({type(e).__name__})") from None


def _sandbox_line() -> str:
    from autograder.sandbox import bubblewrap as sandbox

    status = sandbox.bwrap_status()
    lim = sandbox.limits()
    where = ("bubblewrap (no network; only the system, the Python environment, the course library and the model "
             "cache, read-only; own folder writable)" if status == "ok" else f"NONE: {status}")
    return f"{where}; limits: {lim['mem_mb']} MB memory, {lim['cpu_s']} s CPU, {lim['fsize_mb']} MB per file"


def _notebook_entry(gb, course_dir, assignment, student, name, src, chosen, problems, result, notes,
                    leans=()) -> dict:
    import nbformat

    if name not in chosen:
        reason = "; ".join(problems.values()) if problems else f"no {name}.ipynb submitted"
        cells = [{"grade_id": gid, "points": 0.0, "max_points": pts, "needs_manual_grade": False, "error": None}
                 for gid, pts in _max_points(src)]
        return {"notebook": name, "file": None, "status": "missing", "reason": reason, "cells": cells,
                "points": 0.0, "max_points": sum(c["max_points"] for c in cells), "late_penalty": 0.0,
                "needs_manual_review": False,
                "review_reasons": [], "review_notes": [], "events": {}}
    graded = nbformat.read(course_dir / "autograded" / student / assignment / f"{name}.ipynb", as_version=4)
    errors = {}
    for c in graded.cells:
        gid = (c.metadata.get("nbgrader") or {}).get("grade_id")
        for o in c.get("outputs", []):
            if o.get("output_type") == "error" and gid:
                errors[gid] = f"{o.get('ename')}: {o.get('evalue')}".strip().rstrip(":")[:300]
    sub = gb.find_submission_notebook(name, assignment, student)
    order = {gid: i for i, gid in enumerate(_grade_ids_in_order(graded))}
    cells = [{"grade_id": g.name,
              "points": None if g.score is None else float(g.score),
              "max_points": float(g.max_score),
              "needs_manual_grade": bool(g.needs_manual_grade),
              "error": errors.get(g.name)}
             for g in sorted(sub.grades, key=lambda g: order.get(g.name, 1 << 30))]
    events = result.events if result is not None else {"missing": "no grading result"}
    review = list(result.review) if result is not None else ["the grader's result for this notebook is missing"]
    # A graded function that leans on the course library's own version of its task (answer_key.py):
    # held for review like a broken protocol, with the notes as reasons.
    review += [f"answer key: {n}" for n in leans]
    # the automatic points the tests gave, held (0 in the tables) until a person confirms them
    held = float(sum(c["points"] or 0 for c in cells)) if review else None
    if review:  # policy: such a notebook scores 0 until a person looks
        for c in cells:
            c["points"] = 0.0
    return {"notebook": name, "file": str(chosen[name]), "status": "graded", "reason": None, "cells": cells,
            "points": float(sum(c["points"] or 0 for c in cells)), "max_points": float(sub.max_score),
            "points_held": held,
            # nbgrader's AssignLatePenalties by the course's policy; none while held for review (0 points)
            "late_penalty": 0.0 if review else float(sub.late_submission_penalty or 0.0),
            "needs_manual_review": bool(review), "review_reasons": review, "review_notes": notes, "events": events}


def write_grades(gb, assignment: str, student: str, notebooks: list[dict]) -> None:
    """The report's notebooks into a gradebook as the course keeps them (the batch's merge into the
    course's gradebook, and the scratch gradebook the feedback page is made from), then commit."""
    for nb in notebooks:
        review = nb["needs_manual_review"]
        for cell in nb["cells"]:
            g = gb.find_grade(cell["grade_id"], nb["notebook"], assignment, student)
            # None, as nbgrader's own autograde leaves them: a notebook not handed in ("missing" in
            # the grade tables, not 0) and a written answer (for a person to score in the formgrader)
            unscored = nb["status"] == "missing" or (cell["needs_manual_grade"] and not review)
            g.auto_score = None if unscored else cell["points"]
            g.needs_manual_grade = bool(cell["needs_manual_grade"] or review)
            if review:
                g.manual_score = 0.0  # zero until a person has looked (the reasons are in the batch table)
        if nb["status"] == "graded":  # by the course's late policy (grade.py: none while held for review)
            gb.find_submission_notebook(nb["notebook"], assignment, student).late_submission_penalty = (
                nb.get("late_penalty") or None)
    gb.db.commit()


def _export(api, course_dir, assignment, student, out: Path, report: dict) -> None:
    """The autograded notebooks and their HTML feedback (no hidden tests) into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    graded_dir = course_dir / "autograded" / student / assignment
    for p in sorted(graded_dir.glob("*.ipynb")):
        files.copy_regular(p, out / p.name)
    r = api.generate_feedback(assignment, student, force=True)
    if r.get("success"):
        for p in sorted((course_dir / "feedback" / student / assignment).glob("*.html")):
            files.copy_regular(p, out / p.name)
    else:
        report["feedback_error"] = ((r.get("error") or r.get("log") or "").strip().splitlines() or ["failed"])[-1]


def _grade_ids_in_order(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if isinstance(c.metadata.get("nbgrader"), dict) and "grade_id" in c.metadata["nbgrader"]]


