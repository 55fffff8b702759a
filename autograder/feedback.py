"""Feedback HTML that says "awaiting grading" for what no person has graded yet.

nbgrader's feedback shows an ungraded written answer as "Score: 0 / 4". Here (nbgrader_config.py:
GenerateFeedback's preprocessors and exporter) each graded cell that still needs a person shows so
instead: a written answer without a manual score "awaiting grading", a test cell of a notebook held
for review (the batch: an answer outside the grader's format, the answer-key check) "held for
review", with no points, as in the gradebook. The notebook's heading gives the points so far and the
points still to be graded, or says that the notebook is held for review.

`releasable(report_notebook)` and `pending_in_gradebook(...)` decide whether a notebook's feedback
may go to the student (autograder/course.py `feedback`, autograder/batch.py): only once nothing in
it awaits grading, unless the instructor forces it.
"""

from __future__ import annotations

import copy

from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath, import_plugin
from nbgrader.preprocessors import GetGrades
from traitlets.config import Config

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
        resources["nbgrader"]["held_for_review"] = False
        nb, resources = super().preprocess(nb, resources)
        return nb, resources

    def _get_score(self, cell, resources) -> None:
        super()._get_score(cell, resources)
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        pending = _needs_person(grade)
        cell.metadata.nbgrader["pending"] = pending
        # an automatically graded cell that needs a person: its notebook is held for review
        held = pending and not cell.metadata.nbgrader.get("solution") and not cell.metadata.nbgrader.get("task")
        cell.metadata.nbgrader["held"] = held
        resources["nbgrader"]["held_for_review"] |= held
        if pending:
            resources["nbgrader"]["pending_points"] += float(grade.max_score)
            resources["nbgrader"]["pending_cells"].append(cell.metadata["nbgrader"]["grade_id"])


# nbgrader's feedback page (its feedback/index.html.j2, which this extends) where a cell no person has
# graded yet shows "awaiting grading" instead of a score of 0. Kept here, not in a template folder, so
# that a copy of the grader's .py files (hub/deploy.py) has it. nbgrader's own macros call nbgrader's
# score(): the heading macro and the two blocks that call it are repeated with macros of their own.
TEMPLATE = r"""{%- extends 'index.html.j2' -%}

{% macro llmrl_points(cell) -%}
{%- if cell.metadata.nbgrader.held -%}
<span class="held-for-review">Held for review</span>, {{ cell.metadata.nbgrader.points | float | round(2) }} points
{%- elif cell.metadata.nbgrader.pending -%}
<span class="awaiting-grading">Awaiting grading</span>, {{ cell.metadata.nbgrader.points | float | round(2) }} points
{%- else -%}
Score: {{ cell.metadata.nbgrader.score | float | round(2) }} / {{ cell.metadata.nbgrader.points | float | round(2) }}
{%- endif -%}
{%- endmacro %}

{% macro llmrl_score(cell) -%}
  <span class="pull-right">
      {{ llmrl_points(cell) }} <a href="#top">(Top)</a>
  </span>
{%- endmacro %}

{#- nbgrader's heading, markdown cell and input again, calling the macros above (the parent's
    blocks would call the parent's macros). -#}
{% macro llmrl_heading(cell) -%}
{%- if cell.metadata.nbgrader.solution or cell.metadata.nbgrader.task -%}
<a name="comment-{{ cell.metadata.nbgrader.grade_id }}"></a>
{%- endif -%}
{%- if cell.metadata.nbgrader.grade -%}
<a name="{{ cell.metadata.nbgrader.grade_id }}"></a>
{%- endif -%}
<div class="panel-heading">
{%- if cell.metadata.nbgrader.solution -%}
  <span class="nbgrader-label">Student's answer</span>
  {%- if cell.metadata.nbgrader.grade -%}
  {{ llmrl_score(cell) }}
  {%- else -%}
  <span class="pull-right"><a href="#top">(Top)</a></span>
  {%- endif -%}
{%- elif cell.metadata.nbgrader.task -%}
  <span class="nbgrader-label">Student's task</span>
  {{ llmrl_score(cell) }}
{%- elif cell.metadata.nbgrader.grade -%}
  <span class="nbgrader-label">Grade cell: <code>{{ cell.metadata.nbgrader.grade_id }}</code></span>
  {{ llmrl_score(cell) }}
{%- endif -%}
</div>
{%- endmacro %}

{% block body %}
<body>
  <style>
    /* markdown tables as JupyterLab shows them (the page's bootstrap takes every cell's padding away) */
    .rendered_html table { margin: 0.6em 0 1em; border-collapse: collapse; }
    .rendered_html th, .rendered_html td { padding: 0.25em 0.9em; text-align: left; vertical-align: top;
                                           border-bottom: 1px solid #ddd; }
    .rendered_html thead th { border-bottom: 2px solid #bbb; }
    .held-for-review { color: #8a6d3b; font-weight: bold; }
    /* a failing test's message is one long line: wrap it, so that it reads without scrolling sideways */
    .output_subarea.output_text pre { white-space: pre-wrap; overflow-wrap: anywhere; }
    .panel-primary > .panel-heading .held-for-review { color: #fff; }
  </style>
  <a name="top"></a>
  <div class="container">
    <div class="panel panel-default">
      <div class="panel-heading">
        {%- set pending = resources.nbgrader.pending_points | default(0) | float -%}
        {%- set graded_max = resources.nbgrader.max_score | float - pending -%}
        {% if resources.nbgrader.held_for_review %}
        <h4>{{ resources.nbgrader.notebook }} (Held for review: no points yet, of {{ resources.nbgrader.max_score | float | round(2) }})</h4>
        <p class="held-for-review">A person will look at this notebook before it is scored: until then it has no points. This page will be updated once it has been reviewed.</p>
        {% elif pending > 0 %}
        <h4>{{ resources.nbgrader.notebook }} (Score so far: {{ resources.nbgrader.score | float | round(2) }} / {{ graded_max | round(2) }}; {{ pending | round(2) }} more points awaiting grading)</h4>
        <p class="awaiting-grading">Some answers are awaiting grading by a person: their points are not in the score yet. This page will be updated once they are graded.</p>
        {% else %}
        <h4>{{ resources.nbgrader.notebook }} (Score: {{ resources.nbgrader.score | float | round(2) }} / {{ resources.nbgrader.max_score | float | round(2) }})</h4>
        {% endif %}
        {% if resources.nbgrader.late_penalty > 0 %}
        <p class="late-penalty">Submitted after the due date: the course's late policy took {{ resources.nbgrader.late_penalty | float | round(2) }} points off this notebook; the score above is after the penalty.</p>
        {% endif %}
        <div id="toc">
          <ol>
          {% for cell in nb.cells %}
            {% if cell.metadata.nbgrader and cell.metadata.nbgrader.grade and not cell.metadata.nbgrader.solution %}
            <li><a href="#{{ cell.metadata.nbgrader.grade_id }}">Test cell</a> ({{ llmrl_points(cell) }})</li>
            {% elif cell.cell_type == "code" and cell.metadata.nbgrader and cell.metadata.nbgrader.grade %}
            <li><a href="#{{ cell.metadata.nbgrader.grade_id }}">Coding free-response</a> ({{ llmrl_points(cell) }})</li>
            {% elif cell.cell_type == "markdown" and cell.metadata.nbgrader and cell.metadata.nbgrader.grade %}
            <li><a href="#{{ cell.metadata.nbgrader.grade_id }}">Written response</a> ({{ llmrl_points(cell) }})</li>
            {% elif cell.cell_type == "markdown" and cell.metadata.nbgrader and cell.metadata.nbgrader.task %}
            <li><a href="#{{ cell.metadata.nbgrader.grade_id }}">Task</a> ({{ llmrl_points(cell) }})</li>
            {% endif %}
            {% if cell.metadata.nbgrader and cell.metadata.nbgrader.comment %}
            <li><a href="#comment-{{ cell.metadata.nbgrader.grade_id }}">Comment</a></li>
            {% endif %}
          {% endfor %}
          {% if resources.nbgrader.late_penalty > 0 %}
            <li class="late-penalty">Late submission penalty (Score: -{{ resources.nbgrader.late_penalty | float | round(2) }})</li>
          {% endif %}
          </ol>
        </div>
      </div>
      <div class="panel-body">
        <div id="notebook" class="border-box-sizing">
          <div class="container" id="notebook-container">
            {{ super.super() }}
          </div>
        </div>
      </div>
    </div>
  </div>
</body>
{%- endblock body %}

{% macro llmrl_cell(cell, graded, area) -%}
  {%- if graded -%}
  <div class="panel panel-primary nbgrader_cell">
    {{ llmrl_heading(cell) }}
    <div class="panel-body">
      <div class="{{ area }}">
        {{ caller() }}
      </div>
    </div>
    {{ nbgrader_footer(cell) }}
  </div>
  {%- else -%}
  <div class="inner_cell">
    <div class="{{ area }}">
      {{ caller() }}
    </div>
  </div>
  {%- endif -%}
{%- endmacro %}

{% block markdowncell scoped %}
{%- set nbg = cell.metadata.nbgrader if 'nbgrader' in cell.metadata else {} -%}
<div class="cell border-box-sizing text_cell rendered">
  {{ self.empty_in_prompt() }}
  {% call llmrl_cell(cell, nbg.solution or nbg.grade or nbg.task, "text_cell_render border-box-sizing rendered_html") -%}
  {{ cell.source | markdown2html | strip_files_prefix }}
  {%- endcall %}
</div>
{% endblock markdowncell %}

{% block input %}
{%- set nbg = cell.metadata.nbgrader if 'nbgrader' in cell.metadata else {} -%}
{% call llmrl_cell(cell, nbg.solution or nbg.grade, "input_area") -%}
{{ cell.source | highlight_code(metadata=cell.metadata) }}
{%- endcall %}
{% endblock input %}
"""


# Markdown as JupyterLab shows it: tables inside a blockquote or a list item too (the labs' overview
# tables are quoted, "> | task | ... |"), which nbconvert's own plugins leave as lines of pipes.
MARKDOWN_PLUGINS = (*MarkdownWithMath.DEFAULT_PLUGINS, "mistune.plugins.table.table_in_quote",
                    "mistune.plugins.table.table_in_list")


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback template with "awaiting grading" (TEMPLATE above), and markdown with
    the tables JupyterLab renders (MARKDOWN_PLUGINS)."""

    def __init__(self, config=None, **kwargs):
        # Settings of this class win over GenerateFeedback's for HTMLExporter (a more specific section):
        # nbgrader's "feedback" template and its folders stay, the page itself is TEMPLATE.
        c = Config(copy.deepcopy(config)) if config is not None else Config()
        c.FeedbackExporter.template_name = "feedback"
        super().__init__(config=c, **kwargs)
        self.raw_template = TEMPLATE  # (not a configurable trait)

    @pass_context
    def markdown2html(self, context, source):
        """HTMLExporter.markdown2html (the same renderer settings) with MARKDOWN_PLUGINS."""
        cell = context.get("cell", {})
        renderer = IPythonRenderer(
            escape=False, attachments=cell.get("attachments", {}), embed_images=self.embed_images,
            path=context.get("resources", {}).get("metadata", {}).get("path", ""),
            anchor_link_text=self.anchor_link_text, exclude_anchor_links=self.exclude_anchor_links,
            **self.lexer_options)
        return MarkdownWithMath(renderer=renderer, plugins=[import_plugin(p) for p in MARKDOWN_PLUGINS]).render(source)


def releasable(notebook_report: dict) -> bool:
    """A notebook of grade.py's report whose feedback may go to the student now."""
    return not notebook_report.get("needs_manual_review") and not any(
        c.get("needs_manual_grade") for c in notebook_report.get("cells", []))


def pending_in_gradebook(gb, assignment: str, student: str, notebook: str) -> list[str]:
    """grade_ids of one submitted notebook that a person still has to grade (gradebook rows)."""
    nb = gb.find_submission_notebook(notebook, assignment, student)
    return [g.name for g in nb.grades if _needs_person(g)]
