"""A tiny course for the grader's own tests: one assignment, one notebook, no torch in its cells.

Grading one of its submissions takes a few seconds, so the fault tests (a killed batch, a full
disk, a locked or damaged gradebook) can grade whole batches of them. The notebook has the shape
of the course's labs: a set-up cell, a solution cell, a test cell with visible and hidden tests.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import nbformat

ASSIGNMENT, NOTEBOOK = "tiny", "tiny"
# The real batch grader on this course (add "--root", its folder).
BATCH = [str(Path(__file__).resolve().parents[1] / "bin" / "batch"), ASSIGNMENT, "--no-progress"]
POINTS = 2.0
SECOND, SECOND_POINTS = "test_double_int", 1.0  # make_course(second_test=True): a second test cell


def _meta(gid: str, grade: bool, solution: bool, locked: bool, points: float | None = None) -> dict:
    m = {"grade": grade, "grade_id": gid, "locked": locked, "schema_version": 3, "solution": solution, "task": False}
    if points is not None:
        m["points"] = points
    return {"nbgrader": m}


def source_notebook(extra_setup: str = "", second_test: bool = False):
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    cells = [
        # an overview table in a blockquote, as the labs have them (the feedback renders it as a table)
        nbformat.v4.new_markdown_cell("# A tiny notebook\n\n> | task | points |\n> |---|---|\n> | `double` | 2 |"),
        nbformat.v4.new_code_cell("import math\n" + extra_setup),
        nbformat.v4.new_code_cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
                                  metadata=_meta("double", False, True, False)),
        nbformat.v4.new_code_cell("assert double(2) == 4, f'double(2) should be 4, got {double(2)}'\n"
                                  "print('visible test passed')\n"
                                  "### BEGIN HIDDEN TESTS\n"
                                  "assert double(-1.5) == -3.0, 'negative numbers too'\n"
                                  "assert math.isclose(double(0.1), 0.2)\n"
                                  "### END HIDDEN TESTS",
                                  metadata=_meta("test_double", True, False, True, POINTS)),
        nbformat.v4.new_code_cell("print('the experiment:', [double(i) for i in range(3)])"),
    ]
    if second_test:  # after the first test cell: its tests run once the first cell's have
        cells.insert(4, nbformat.v4.new_code_cell("assert double(3) == 6", metadata=_meta(SECOND, True, False, True,
                                                                                          SECOND_POINTS)))
    for i, c in enumerate(cells):
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        c["id"] = gid or f"cell-{i:03d}"
    nb.cells = cells
    return nb


def make_course(root: Path, extra_setup: str = "", second_test: bool = False) -> Path:
    """root/source/tiny/tiny.ipynb and root/release/tiny/tiny.ipynb (nbgrader generate_assignment)."""
    from autograder.course import nbgrader_app

    path = root / "source" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(source_notebook(extra_setup, second_test), path)
    nbgrader_app.record_assignment(ASSIGNMENT, root)
    return root


def submission(root: Path, answer: str | None = None, extra_cells: list[str] = ()):
    """The release with `answer` as the solution cell's code (None: the stub), plus free cells."""
    nb = nbformat.read(root / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb", as_version=4)
    nb = copy.deepcopy(nb)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "double" and answer is not None:
            c.source = answer
    for i, code in enumerate(extra_cells):
        cell = nbformat.v4.new_code_cell(code)
        cell["id"] = f"extra-{i}"
        nb.cells.insert(2, cell)
    return nb


RIGHT = "def double(x):\n    return x + x"
WRONG = "def double(x):\n    return x * 2 + 1"


def submit(root: Path, student: str, nb) -> Path:
    path = root / "submitted" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
