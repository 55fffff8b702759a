"""Feedback HTML that says "awaiting grading" for what no person has graded yet.

nbgrader's feedback shows an ungraded written answer as "Score: 0 / 4". Here (nbgrader_config.py:
GenerateFeedback's preprocessors and exporter) each graded cell that still needs a person, a written
answer without a manual score or a test cell held for review, shows "awaiting grading" instead, and
the notebook's heading gives the points so far and the points still to be graded.

`releasable(report_notebook)` and `pending_in_gradebook(...)` decide whether a notebook's feedback
may go to the student (autograder/course.py `feedback`, autograder/batch.py): only once nothing in
it awaits grading, unless the instructor forces it.
"""

from __future__ import annotations

import copy
import os

from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import GetGrades
from traitlets.config import Config

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "templates")
AWAITING = "awaiting grading"


def _needs_person(grade) -> bool:
    # nbgrader's own flag: set by autograde for a changed written answer (an unchanged one scores 0
    # by itself) and by the batch for a notebook held for review; the formgrader clears it on grading.
    return bool(grade.needs_manual_grade)


class GetGradesPending(GetGrades):
    """GetGrades, plus `pending` on each graded cell a person still has to grade and, in the
    resources, the points graded so far and the points pending."""

    def preprocess(self, nb, resources):
        resources["nbgrader"]["pending_points"] = 0.0
        resources["nbgrader"]["pending_cells"] = []
        nb, resources = super().preprocess(nb, resources)
        return nb, resources

    def _get_score(self, cell, resources) -> None:
        super()._get_score(cell, resources)
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        pending = _needs_person(grade)
        cell.metadata.nbgrader["pending"] = pending
        if pending:
            resources["nbgrader"]["pending_points"] += float(grade.max_score)
            resources["nbgrader"]["pending_cells"].append(cell.metadata["nbgrader"]["grade_id"])


def _nbgrader_templates() -> str:
    import nbgrader

    return os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback template with "awaiting grading" (templates/llmrl_feedback extends it)."""

    def __init__(self, config=None, **kwargs):
        # Settings of this class win over GenerateFeedback's for HTMLExporter (a more specific section).
        c = Config(copy.deepcopy(config)) if config is not None else Config()
        c.FeedbackExporter.template_name = "llmrl_feedback"
        c.FeedbackExporter.extra_template_basedirs = [TEMPLATES, _nbgrader_templates()]
        # nbgrader's own folder too, so that ours can extend 'feedback/index.html.j2'; the rest is
        # GenerateFeedback's (bootstrap's stylesheet)
        inherited = list(c.HTMLExporter.extra_template_paths) if "extra_template_paths" in c.HTMLExporter else []
        c.FeedbackExporter.extra_template_paths = inherited + [_nbgrader_templates()]
        super().__init__(config=c, **kwargs)


def releasable(notebook_report: dict) -> bool:
    """A notebook of grade.py's report whose feedback may go to the student now."""
    return not notebook_report.get("needs_manual_review") and not any(
        c.get("needs_manual_grade") for c in notebook_report.get("cells", []))


def pending_in_gradebook(gb, assignment: str, student: str, notebook: str) -> list[str]:
    """grade_ids of one submitted notebook that a person still has to grade (gradebook rows)."""
    nb = gb.find_submission_notebook(notebook, assignment, student)
    return [g.name for g in nb.grades if _needs_person(g)]
