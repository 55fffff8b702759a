"""The course folder: where sources, releases and samples live, what a lab is, the pipeline's error.

The lowest layer of the grader: every other part may import it; it imports nothing of the grader.
"""

from __future__ import annotations
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

# The folder holding the autograder package; it is the course folder too (source/, release/, gradebook.db), in this
# repository as in the hub's course folder (hub/deploy/course.py copies the package there).
PACKAGE_HOME = Path(__file__).resolve().parents[2]
ROOT = PACKAGE_HOME
CONFIG = ROOT / "autograder" / "nbgrader_config.py"
SAMPLES = ROOT / "autograder" / "samples"

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
NBGRADER_KEYS = ("grade", "grade_id", "locked", "schema_version", "solution", "task")
GRADE_ID_RE = re.compile(r"^[a-zA-Z0-9_\-]+$")
# Cell metadata that only describes how jupytext laid out the text file.
JUPYTEXT_CELL_KEYS = ("lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker")
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
# A student's own working files that must never reach a release or a scratch course.
COPY_IGNORE = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc", "artifacts")

class PipelineError(Exception):
    """A problem the author must fix; the message names the file (and cell)."""


# ----------------------------------------------------------------------------- discovery

@dataclass(frozen=True)
class Lab:
    """One notebook of one assignment."""

    assignment: str
    name: str
    root: Path = ROOT

    @property
    def jupytext(self) -> Path:
        return self.root / "notebooks" / self.assignment / f"{self.name}.py"

    @property
    def source(self) -> Path:
        return self.root / "source" / self.assignment / f"{self.name}.ipynb"

    @property
    def release(self) -> Path:
        return self.root / "release" / self.assignment / f"{self.name}.ipynb"


def discover(selected: list[str] | tuple[str, ...] = (), root: Path = ROOT) -> list[Lab]:
    """Every notebooks/<assignment>/<name>.py, restricted to `selected` assignments if given."""
    labs = [
        Lab(p.parent.name, p.stem, root)
        for p in sorted((root / "notebooks").glob("*/*.py"))
        if not p.name.startswith(("_", "."))
    ]
    known = sorted({lab.assignment for lab in labs})
    for a in selected:
        if a not in known:
            raise PipelineError(
                f"assignment {a!r} has no notebooks/{a}/*.py; known assignments: {', '.join(known) or 'none'}"
            )
    return [lab for lab in labs if not selected or lab.assignment in selected]


def assignments(labs: list[Lab]) -> list[str]:
    return sorted({lab.assignment for lab in labs})


def rel(path: Path, root: Path = ROOT) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


DEMO = ROOT / "build" / "demo-course"
DEMO_MARK = ".llmrl-demo-course"  # only a folder holding this file is ever deleted by `make demo`
def course_labs(folder: Path, selected: list[str] | tuple[str, ...] = ()) -> list[Lab]:
    """The notebooks of a course folder that has source/ but no notebooks/ (a demo course)."""
    labs = [Lab(p.parent.name, p.stem, folder) for p in sorted((folder / "source").glob("*/*.ipynb"))]
    if not labs:
        raise PipelineError(f"{folder} holds no source/<assignment>/*.ipynb: not a course folder")
    unknown = [a for a in selected if a not in assignments(labs)]
    if unknown:
        raise PipelineError(f"{folder} has no assignment {', '.join(unknown)} "
                            f"(it has {', '.join(assignments(labs))})")
    return [lab for lab in labs if not selected or lab.assignment in selected]

