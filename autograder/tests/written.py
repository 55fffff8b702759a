"""The tiny course (tiny.py) with a written answer: a locked rubric cell, then a markdown answer
cell that a person grades (3 points), as lab21's write-ups and hw4's report have them."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from autograder.tests import tiny

WRITTEN, RUBRIC, WRITTEN_POINTS = "explain_double", "rubric_explain_double", 3.0
RUBRIC_TEXT = "**1 point** says that doubling adds x to itself"
ANSWER = "Doubling adds the number to itself."


def source_notebook():
    nb = tiny.source_notebook()
    rubric = nbformat.v4.new_markdown_cell(
        "**Explain `double`: 3 points, graded by hand.**\n\n<!-- BEGIN MARK SCHEME -->\n"
        f"{RUBRIC_TEXT}; **2 points** for an example.\n<!-- END MARK SCHEME -->",
        metadata=tiny._meta(RUBRIC, False, False, True))
    answer = nbformat.v4.new_markdown_cell(f"### BEGIN SOLUTION\n{ANSWER}\n### END SOLUTION",
                                           metadata=tiny._meta(WRITTEN, True, True, False, WRITTEN_POINTS))
    rubric["id"], answer["id"] = RUBRIC, WRITTEN
    nb.cells[4:4] = [rubric, answer]  # after the test cell
    return nb


def make_course(root: Path) -> Path:
    from autograder.course import layout
    from autograder.course import nbgrader_app

    path = root / "source" / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(source_notebook(), path)
    nbgrader_app.record_assignment(tiny.ASSIGNMENT, root)
    return root


def lab(root: Path):
    from autograder.course import layout

    return layout.Lab(tiny.ASSIGNMENT, tiny.NOTEBOOK, root)
