"""The two runs inside nbgrader's autograde: StageNotebooks, TwoRunExecute and the verdicts applied
to the notebook nbgrader saves.
"""

from __future__ import annotations
import asyncio
import copy
import os
from pathlib import Path
from nbformat import NotebookNode
from traitlets import Bool, Integer
from nbgrader.preprocessors import NbGraderPreprocessor
from autograder.execution.broker import NotebookResult, Settings
from autograder.sandbox import library_view
from autograder.execution.tworun import apply, run_notebook

# ----------------------------------------------------------------------------- nbgrader preprocessors

STAGED: dict[str, NotebookNode] = {}     # notebook name -> the notebook as nbgrader sanitized it (pass 1)
RESULTS: dict[str, NotebookResult] = {}  # notebook name -> its result (computed between the passes)


class StageNotebooks(NbGraderPreprocessor):
    """First nbgrader pass of autograder/grading/one_notebook.py: keep the sanitized notebook, run nothing."""

    def preprocess(self, nb, resources):
        STAGED[resources["nbgrader"]["notebook"]] = copy.deepcopy(nb)
        return nb, resources


def source_notebook(config, assignment: str, notebook: str):
    import nbformat
    from nbgrader.coursedir import CourseDirectory

    cd = CourseDirectory(config=config)
    path = Path(cd.format_path(cd.source_directory, ".", assignment)) / f"{notebook}.ipynb"
    return nbformat.read(path, as_version=4)


def settings_from_env(**kw) -> Settings:
    def num(name, default):
        try:
            return float(os.environ.get(name, default))
        except ValueError:
            return float(default)
    s = Settings(cell_timeout=num("LLMRL_GRADE_CELL_TIMEOUT", 300), notebook_timeout=num("LLMRL_GRADE_NOTEBOOK_TIMEOUT", 600))
    for k, v in kw.items():
        setattr(s, k, v)
    return s


class TwoRunExecute(NbGraderPreprocessor):
    """Replaces nbgrader's Execute in autograding: the feedback run and the grading run (above)."""

    cell_cap = Integer(500_000, help="bytes of output kept per cell").tag(config=True)
    notebook_cap = Integer(5_000_000, help="bytes of output kept per notebook").tag(config=True)
    feedback = Bool(True, help="run the notebook for the feedback (False: grading run only)").tag(config=True)

    def preprocess(self, nb, resources):
        name = resources["nbgrader"]["notebook"]
        result = RESULTS.pop(name, None)
        if result is None:  # plain `nbgrader autograde`: run it now
            src = source_notebook(self.config, resources["nbgrader"]["assignment"], name)
            s = settings_from_env(cell_cap=self.cell_cap, notebook_cap=self.notebook_cap, feedback=self.feedback,
                                  library_view=library_view.build())
            result = asyncio.run(run_notebook(nb, src, s))
            REPORTS[name] = result
        apply(nb, result)
        return nb, resources


REPORTS: dict[str, NotebookResult] = {}
