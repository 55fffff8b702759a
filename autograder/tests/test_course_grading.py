"""The instructor's grading workflow (collect, grade, written answers, feedback) on a tiny course with a written answer.

`make demo` grades the sample students in a course folder of its own; `make autograde` is the
sandboxed batch, which matches misnamed, duplicated and extra notebooks per student; grade tables
keep automatic and manual points apart and say "missing" and "awaiting grading"; feedback with an
ungraded written answer stays back until it is graded (or the instructor forces it) and says
"awaiting grading" instead of 0.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.authoring import samples
from autograder.course import layout
from autograder.export import grades_csv
from autograder.export import release_feedback
from autograder.batch import run as batch_run
from autograder.tests import tiny
from autograder.tests import written
from autograder.course.layout import ROOT, PipelineError

HIDDEN_LINE = "negative numbers too"  # a line of tiny's hidden tests


def _tree(folder: Path) -> dict:
    """path -> sha256 of every file under folder (empty when it does not exist)."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _csv(path: Path) -> dict:
    with open(path, newline="") as f:
        return {r["student_id"]: r for r in csv.DictReader(f)}


def _batch_rows(root: Path) -> dict:
    with open(root / "batch_grades.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def _answer(nb, text: str):
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == written.WRITTEN:
            c.source = text
    return nb


# ----------------------------------------------------------------------------- make demo

def test_demo_grades_the_samples_in_its_own_course_and_never_touches_the_instructors(tmp_path):
    instructor = written.make_course(tmp_path / "course")
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{instructor / 'gradebook.db'}") as gb:
        gb.update_or_create_student("alice")
    tiny.submit(instructor, "alice", tiny.submission(instructor, tiny.WRONG))
    (instructor / "grades.csv").write_text("the instructor's own table\n")
    theirs = {name: _tree(instructor / name) for name in ("submitted",)}
    theirs_db = hashlib.sha256((instructor / "gradebook.db").read_bytes()).hexdigest()
    repo = {"db": _tree(ROOT / "gradebook.db") if (ROOT / "gradebook.db").is_dir() else
            (hashlib.sha256((ROOT / "gradebook.db").read_bytes()).hexdigest() if (ROOT / "gradebook.db").exists()
             else None), "submitted": _tree(ROOT / "submitted")}

    demo_dir = tmp_path / "build" / "demo-course"
    demo_dir.mkdir(parents=True)
    (demo_dir / layout.DEMO_MARK).write_text("")
    (demo_dir / "left-from-last-run.txt").write_text("stale")
    table = samples.demo([written.lab(instructor)], demo_dir, instructor, progress=False, workers=2)

    # the instructor's course and the repository's own grading files are as they were
    assert hashlib.sha256((instructor / "gradebook.db").read_bytes()).hexdigest() == theirs_db
    assert {name: _tree(instructor / name) for name in theirs} == theirs
    assert (instructor / "grades.csv").read_text() == "the instructor's own table\n"
    assert not (instructor / "autograded").exists() and not (instructor / "feedback").exists()
    assert repo["submitted"] == _tree(ROOT / "submitted")
    if repo["db"] is not None:
        assert hashlib.sha256((ROOT / "gradebook.db").read_bytes()).hexdigest() == repo["db"]

    # the demo course was made again from scratch and holds the sample students only
    assert not (demo_dir / "left-from-last-run.txt").exists()
    assert sorted(p.name for p in (demo_dir / "submitted").iterdir()) == ["reference", "untouched"]
    with Gradebook(f"sqlite:///{demo_dir / 'gradebook.db'}") as gb:
        assert sorted(s.id for s in gb.students) == ["reference", "untouched"]

    # automatic points out of automatic points, the written answer pending beside them
    lines = {ln.split()[1]: ln for ln in table.splitlines()[1:]}
    assert table.splitlines()[0].split()[:3] == ["assignment", "student", "automatic"]
    ref, untouched = lines["reference"], lines["untouched"]
    assert "2 / 2" in ref and "pending / 3" in ref and "awaiting grading" in ref and "5" not in ref.split("pending")[0]
    assert "0 / 2" in untouched and "0 / 3" in untouched and "0 / 5" in untouched  # an unchanged answer scores 0
    rows = _csv(demo_dir / "grades.csv")
    assert (rows["reference"]["automatic"], rows["reference"]["automatic_max"], rows["reference"]["manual_pending"],
            rows["reference"]["total"], rows["reference"]["status"]) == ("2", "2", "3", "", "awaiting grading")

    # plain nbgrader commands in the demo folder work on the demo course (its nbgrader_config.py),
    # and nbgrader's export writes the course's table
    (demo_dir / "grades.csv").unlink()
    proc = subprocess.run([sys.executable, "-m", "autograder", "nbgrader", "export", "--log-level=ERROR"], cwd=demo_dir,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    assert _csv(demo_dir / "grades.csv") == rows


def test_demo_refuses_a_folder_it_did_not_make(tmp_path):
    instructor = written.make_course(tmp_path / "course")
    mine = tmp_path / "my-notes"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(PipelineError, match="is not a demo course"):
        samples.make_demo_course([written.lab(instructor)], mine, instructor)
    with pytest.raises(PipelineError, match="would replace the course"):
        samples.make_demo_course([written.lab(instructor)], instructor, instructor)
    assert (mine / "thesis.tex").read_text() == "precious"


# ----------------------------------------------------------------------------- one class: matching, grade tables, feedback

def _stripped(nb):
    """The notebook as a student's tool that drops cell metadata would save it."""
    for c in nb.cells:
        c.metadata = {}
    return nb


def _put(root: Path, student: str, name: str, nb_or_text) -> None:
    path = root / "submitted" / student / tiny.ASSIGNMENT / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(nb_or_text, str):
        path.write_text(nb_or_text)
    else:
        nbformat.write(nb_or_text, path)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = written.make_course(tmp_path_factory.mktemp("class") / "course")
    from nbgrader.api import Gradebook

    right = lambda: tiny.submission(root, tiny.RIGHT)  # noqa: E731
    _put(root, "ann", "tiny.ipynb", _answer(right(), "It adds x to itself, e.g. double(3) = 3 + 3."))
    _put(root, "bob", "tiny.ipynb", tiny.submission(root, tiny.WRONG))
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.update_or_create_student("cat")  # on the class list, handed in nothing
    notes = nbformat.v4.new_notebook()
    notes.cells = [nbformat.v4.new_code_cell("print('my own notes')")]
    _put(root, "dan", "notes.ipynb", notes)  # the wrong notebook only
    _put(root, "eve", "tiny.ipynb", tiny.submission(root, tiny.WRONG))
    _put(root, "eve", "tiny (1).ipynb", right())  # a second copy: the file with the exact name counts
    _put(root, "fay", "Tiny-final.ipynb", right())  # misnamed
    _put(root, "ivy", "tiny.ipynb", _stripped(right()))  # saved by a tool that drops cell metadata
    _put(root, "gus", "tiny.ipynb", right())
    _put(root, "gus", "scratch.ipynb", notes)  # an extra notebook
    _put(root, "hal", "tiny.ipynb", '{"cells": [')  # not a notebook at all
    (root / "grades.csv").write_text("a table of an earlier run\n")
    result = samples.grade_course([written.lab(root)], root, progress=False, workers=2)
    return {"root": root, "result": result}


def test_misnamed_duplicated_and_extra_notebooks_are_matched_or_reported_per_student(graded):
    root, result = graded["root"], graded["result"]
    assert [r.job.student for r in result["results"] if r.report is None] == [], "nobody may fail"
    by = {r.job.student: r for r in result["results"]}
    points = {s: r.report["points"] for s, r in by.items()}
    assert points == {"ann": 2.0, "bob": 0.0, "dan": 0.0, "eve": 0.0, "fay": 2.0, "gus": 2.0, "hal": 0.0,
                      "ivy": 0.0}, points
    rows = _batch_rows(root)
    assert "tiny (1).ipynb: not graded: another copy of tiny.ipynb (tiny.ipynb was graded)" in rows["eve"]["reason"]
    assert "Tiny-final.ipynb: graded as tiny.ipynb (it holds that notebook's graded cells)" in rows["fay"]["reason"]
    assert "tiny.ipynb: not graded: by its name it is tiny.ipynb, but it holds none of its graded cells" in (
        rows["ivy"]["reason"]) and rows["ivy"]["status"] == "missing"
    assert rows["fay"]["status"] == "graded"
    assert "scratch.ipynb: not graded: no notebook of tiny" in rows["gus"]["reason"] and rows["gus"]["status"] == "graded"
    assert "notes.ipynb: not graded: no notebook of tiny" in rows["dan"]["reason"] and rows["dan"]["status"] == "missing"
    assert "tiny.ipynb: not graded: is not a valid notebook" in rows["hal"]["reason"] and rows["hal"]["status"] == "missing"
    summary = batch_run.summary(result)
    assert "eve/tiny: tiny (1).ipynb: not graded" in summary


def test_grade_tables_keep_automatic_and_manual_apart_and_say_missing(graded):
    root = graded["root"]
    rows = _csv(root / "grades.csv")
    assert set(rows) == {"ann", "bob", "cat", "dan", "eve", "fay", "gus", "hal", "ivy"}
    pick = lambda r: (r["automatic"], r["automatic_max"], r["manual"], r["manual_max"], r["manual_pending"],  # noqa
                      r["total"], r["max_score"], r["status"])
    assert pick(rows["ann"]) == ("2", "2", "0", "3", "3", "", "5", "awaiting grading")
    assert pick(rows["bob"]) == ("0", "2", "0", "3", "0", "0", "5", "graded")  # an unchanged answer: 0 by itself
    for who in ("cat", "dan", "hal", "ivy"):
        assert rows[who]["status"] == "missing" and rows[who]["automatic"] == rows[who]["total"] == "", rows[who]
    assert rows["cat"]["notes"] == "no submission" and rows["dan"]["notes"] == "tiny.ipynb missing"
    assert "explain_double" in rows["ann"]["notes"]
    table = samples.score_table([written.lab(root)], root)
    line = {ln.split()[1]: ln for ln in table.splitlines()[1:]}
    assert "2 / 2" in line["ann"] and "pending / 3" in line["ann"] and "pending" in line["ann"].split("/ 3")[1]
    assert "missing" in line["cat"] and " 0 " not in line["cat"] and "0 /" not in line["cat"]


def test_a_run_that_fails_leaves_no_stale_grades_csv(tmp_path):
    root = tiny.make_course(tmp_path / "course")
    src = root / "source" / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.ipynb"
    nb = nbformat.read(src, as_version=4)
    nb.cells[2].source = nb.cells[2].source.replace("return 2 * x", "return 2 * x + 1")  # a broken reference
    nbformat.write(nb, src)
    tiny.submit(root, "ann", tiny.submission(root, tiny.RIGHT))
    (root / "grades.csv").write_text("a table of an earlier run\n")
    with pytest.raises(PipelineError, match="self-check failed.*grades.csv was not written"):
        samples.grade_course([layout.Lab(tiny.ASSIGNMENT, tiny.NOTEBOOK, root)], root, progress=False, workers=1)
    assert not (root / "grades.csv").exists()


def test_feedback_waits_for_the_written_answer_unless_forced(graded):
    """(Last in this file: it grades ann's written answer in the shared gradebook.)"""
    root, lab = graded["root"], written.lab(graded["root"])
    page = root / "feedback" / "ann" / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.html"
    assert not page.exists(), "the batch released feedback with an ungraded written answer"
    assert (root / "feedback" / "bob" / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.html").exists()
    assert (root / "autograded" / "ann" / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.ipynb").exists()

    done = release_feedback.feedback([lab], root=root)
    assert any(h.startswith("ann/tiny/tiny: 1 cell(s) awaiting grading (explain_double)") for h in done["held"]), done
    assert not page.exists() and "bob/tiny/tiny" in done["released"] and not done["problems"], done

    done = release_feedback.feedback([lab], force=True, root=root)
    assert "ann/tiny/tiny (forced: 1 cell(s) awaiting grading)" in done["released"], done
    html = page.read_text()
    assert "Awaiting grading" in html and "3.0 more points awaiting grading" in html
    assert "Score: 0.0 / 3.0" not in html and "Score: 2.0 / 2.0" in html
    assert written.RUBRIC_TEXT not in html and HIDDEN_LINE not in html

    # what the formgrader does when a grader enters 2.5 points (nbgrader's GradeHandler.put)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        g = gb.find_grade(written.WRITTEN, tiny.NOTEBOOK, tiny.ASSIGNMENT, "ann")
        g.manual_score, g.needs_manual_grade = 2.5, False
        gb.db.commit()
    page.unlink()
    done = release_feedback.feedback([lab], root=root)
    assert "ann/tiny/tiny" in done["released"] and not any(h.startswith("ann/") for h in done["held"]), done
    html = page.read_text()
    assert "Awaiting grading" not in html and "Score: 2.5 / 3.0" in html and "Score: 4.5 / 5.0" in html
    row = _csv(grades_csv.write_grades_csv(root))["ann"]
    assert (row["automatic"], row["manual"], row["manual_pending"], row["total"], row["status"]) == (
        "2", "2.5", "0", "4.5", "graded")
    line = next(ln for ln in samples.score_table([lab], root).splitlines() if ln.split()[1] == "ann")
    assert "2 / 2" in line and "2.5 / 3" in line and "4.5 / 5" in line and "graded" in line


# ----------------------------------------------------------------------------- feedback pages

@pytest.mark.fast
def test_feedback_renders_the_tables_of_every_release_notebook_as_jupyterlab_does():
    """Tables inside a blockquote (the labs' overview tables, "> | task | ... |") or a list item are
    tables in the feedback page, as in JupyterLab, not paragraphs of pipes (nbconvert's default)."""
    import re

    from nbconvert.exporters import HTMLExporter

    from autograder.export import feedback_pages as feedback

    plain = HTMLExporter()
    quoted = 0
    for path in sorted((ROOT / "release").glob("*/*.ipynb")):
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type != "markdown" or "|" not in cell.source:
                continue
            html = feedback.FeedbackExporter.markdown2html(plain, {"cell": cell}, cell.source)
            where = f"{path.relative_to(ROOT)} cell {i}"
            assert not re.search(r"\|\s*:?-{3,}", html), f"{where}: a table left as text:\n{html[:800]}"
            if re.search(r"^> *\|", cell.source, re.M):
                quoted += 1
                assert re.search(r"<blockquote>.*<table>", html, re.S), where
    assert quoted >= 3, "lab19's and lab21's overview tables are quoted: the check must see them"
