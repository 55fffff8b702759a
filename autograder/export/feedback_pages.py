"""Feedback HTML that says "awaiting grading" for what no person has graded yet.

nbgrader's feedback shows an ungraded written answer as "Score: 0 / 4". Here (nbgrader_config.py:
GenerateFeedback's preprocessors and exporter) each graded cell that still needs a person shows so
instead: a written answer without a manual score "awaiting grading", a test cell of a notebook held
for review (the batch: an answer outside the grader's format, the answer-key check) "held for
review", with no points, as in the gradebook. The notebook's heading gives the points so far and the
points still to be graded, or says that the notebook is held for review.

The summary names each graded cell by its task and concern ("Task 1a response_logprobs: values"),
a failed test cell shows its failure's message above its code, and the maths is drawn by a MathJax
inlined from the installed jupyter-server-mathjax package (no network needed to read the page).

A notebook graded without the grading sandbox (the instructor's --no-sandbox: autograder/batch/
sandbox_gate.py) says so at the top of its page, in a red box above the score: UNSANDBOXED_ENV in the
grading process's environment while it grades, the autograded notebook's mark (metadata
llmrl.graded_without_sandbox, which the batch writes into autograded/ and removes when the grade was
sandboxed) when the page is made again later (`make feedback`).

`releasable(report_notebook)` and `pending_in_gradebook(...)` decide whether a notebook's feedback
may go to the student (autograder/cli/course.py `feedback`, autograder/batch/run.py): only once nothing in
it awaits grading, unless the instructor forces it.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath, import_plugin
from nbgrader.preprocessors import GetGrades
from traitlets.config import Config

AWAITING = "awaiting grading"
HIDE_SCORES_ENV = "LLMRL_FEEDBACK_SCORES"  # "hidden": pages without points (grading on submit, hub/on_submit/)
# Set by the batch in each grading process: "" (sandboxed) or why the grades are made without the sandbox.
UNSANDBOXED_ENV = "LLMRL_GRADED_WITHOUT_SANDBOX"
UNSANDBOXED_MARK = "graded_without_sandbox"  # the autograded notebook's metadata["llmrl"][UNSANDBOXED_MARK]


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
# that a copy of the grader's .py files (hub/deploy/course.py) has it. nbgrader's own macros call nbgrader's
# score(): the heading macro and the two blocks that call it are repeated with macros of their own.
TEMPLATE = r"""{%- extends 'index.html.j2' -%}

{% macro llmrl_points(cell) -%}
{%- if resources.llmrl_hide_scores and not cell.metadata.nbgrader.held and not cell.metadata.nbgrader.pending -%}
{%- set verdict = cell | llmrl_verdict -%}
{{ "Passed" if verdict == "passed" else ("Failed" if verdict == "failed" else "Graded") }} (points hidden until your instructor releases them)
{%- elif cell.metadata.nbgrader.held -%}
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
  <span class="nbgrader-label">{{ cell | llmrl_label }}</span>
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
    /* a test cell's verdict, above its code: the failure's message first */
    .llmrl-failure { background: #fbeaea; border-left: 4px solid #c9302c; padding: 0.5em 0.8em; margin-bottom: 0.8em; }
    .llmrl-failure code { white-space: pre-wrap; overflow-wrap: anywhere; background: none; color: #8a1f1d; }
    .llmrl-hint { color: #555; font-size: 90%; margin-top: 0.3em; }
    .llmrl-passed { background: #eaf6ea; border-left: 4px solid #3c763d; padding: 0.3em 0.8em; margin-bottom: 0.8em; }
    #toc li.failed > a { color: #c9302c; }
    #toc .llmrl-mark { color: #c9302c; font-weight: bold; }
    .panel-primary > .panel-heading .nbgrader-label { font-size: 115%; font-weight: bold; }
    .llmrl-unsandboxed { background: #c9302c; color: #fff; padding: 0.8em 1em; margin: 1em 0; font-size: 115%;
                         border-radius: 4px; }
  </style>
  <a name="top"></a>
  <div class="container">
    {% if resources.llmrl_unsandboxed %}
    <div class="llmrl-unsandboxed" id="graded-without-sandbox" role="alert">
      <strong>Graded without the grading sandbox.</strong>
      The tests ran as usual, but this submission's code was not kept apart from the grading machine
      ({{ resources.llmrl_unsandboxed | e }}). Ask your instructor before relying on this grade.</div>
    {% endif %}
    <div class="panel panel-default">
      <div class="panel-heading">
        {%- set pending = resources.nbgrader.pending_points | default(0) | float -%}
        {%- set graded_max = resources.nbgrader.max_score | float - pending -%}
        {% if resources.llmrl_hide_scores and not resources.nbgrader.held_for_review %}
        <h4>{{ resources.nbgrader.notebook }} (which tests pass: the points are hidden until your instructor releases them)</h4>
        {% elif resources.nbgrader.held_for_review %}
        <h4>{{ resources.nbgrader.notebook }} (Held for review: no points yet, of {{ resources.nbgrader.max_score | float | round(2) }})</h4>
        <p class="held-for-review">A person will look at this notebook before it is scored: until then it has no points. This page will be updated once it has been reviewed.</p>
        {% elif pending > 0 %}
        <h4>{{ resources.nbgrader.notebook }} (Score so far: {{ resources.nbgrader.score | float | round(2) }} / {{ graded_max | round(2) }}; {{ pending | round(2) }} more points awaiting grading)</h4>
        <p class="awaiting-grading">Some answers are awaiting grading by a person: their points are not in the score yet. This page will be updated once they are graded.</p>
        {% else %}
        <h4>{{ resources.nbgrader.notebook }} (Score: {{ resources.nbgrader.score | float | round(2) }} / {{ resources.nbgrader.max_score | float | round(2) }})</h4>
        {% endif %}
        {% if resources.nbgrader.late_penalty > 0 and resources.llmrl_hide_scores %}
        <p class="late-penalty">Submitted after the due date: the course's late policy takes points off this notebook.</p>
        {% elif resources.nbgrader.late_penalty > 0 %}
        <p class="late-penalty">Submitted after the due date: the course's late policy took {{ resources.nbgrader.late_penalty | float | round(2) }} points off this notebook; the score above is after the penalty.</p>
        {% endif %}
        <div id="toc">
          <ol>
          {% for cell in nb.cells %}
            {% if cell.metadata.nbgrader and cell.metadata.nbgrader.grade and not cell.metadata.nbgrader.solution %}
            <li class="{{ cell | llmrl_verdict }}"><a href="#{{ cell.metadata.nbgrader.grade_id }}">{{ cell | llmrl_label }}</a> ({{ llmrl_points(cell) }}){% if cell | llmrl_verdict == "failed" %} <span class="llmrl-mark">failed</span>{% endif %}</li>
            {% elif cell.cell_type == "code" and cell.metadata.nbgrader and cell.metadata.nbgrader.grade %}
            <li><a href="#{{ cell.metadata.nbgrader.grade_id }}">Coding free-response <code>{{ cell.metadata.nbgrader.grade_id }}</code></a> ({{ llmrl_points(cell) }})</li>
            {% elif cell.cell_type == "markdown" and cell.metadata.nbgrader and cell.metadata.nbgrader.grade %}
            <li><a href="#{{ cell.metadata.nbgrader.grade_id }}">{{ cell | llmrl_label }}</a> ({{ llmrl_points(cell) }})</li>
            {% elif cell.cell_type == "markdown" and cell.metadata.nbgrader and cell.metadata.nbgrader.task %}
            <li><a href="#{{ cell.metadata.nbgrader.grade_id }}">Task</a> ({{ llmrl_points(cell) }})</li>
            {% endif %}
            {% if cell.metadata.nbgrader and cell.metadata.nbgrader.comment %}
            <li><a href="#comment-{{ cell.metadata.nbgrader.grade_id }}">Comment</a></li>
            {% endif %}
          {% endfor %}
          {% if resources.nbgrader.late_penalty > 0 and not resources.llmrl_hide_scores %}
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
      {%- set failure = cell | llmrl_failure -%}
      {%- if failure %}
      <div class="llmrl-failure"><strong>This test failed:</strong> <code>{{ failure }}</code>
        <div class="llmrl-hint">Below is the code of the test you can see in your notebook. A message that none of
        its lines prints comes from the grader's further tests of the same concern.</div></div>
      {%- elif cell | llmrl_verdict == "passed" %}
      <div class="llmrl-passed"><strong>Passed.</strong></div>
      {%- endif %}
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


# ----------------------------------------------------------------------------- names and verdicts of cells

# The concerns a task's tests are split by (one test cell per concern, named test_<task>_<concern>:
# docs/grading-safety.md, "How strong the tests are"), as the summary names them.
CONCERNS = {"values": "values", "contract": "types, shapes and inputs", "edge": "extreme inputs",
            "grad": "gradient", "rng": "random generator", "ties": "ties", "bounds": "clip bounds",
            "clip": "clip_eps", "kl": "KL term"}
_TEST_ID = re.compile(r"^test_task(\d+[a-z]?)_(\w+?)(?:_(" + "|".join(CONCERNS) + r"))?$")
_FIRST_LINE = re.compile(r"^#\s*Task (\d+[a-z]?), ([^:]+):")


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def cell_label(cell) -> str:
    """What the summary and the cell's heading call a graded cell: "Task 1a response_logprobs: values"
    for a test cell (from its grade_id, which the grader restores from the course, and its first
    comment line, which says the concern in the cell's own words), "Written answer report q1 kl
    estimator" for a written one. Plain text: the template escapes it."""
    nbg = cell.get("metadata", {}).get("nbgrader", {}) or {}
    gid = str(nbg.get("grade_id", ""))
    if cell.get("cell_type") == "markdown":
        return "Written answer: " + gid.replace("_", " ")
    m = _TEST_ID.match(gid)
    if not m:
        return f"Test cell {gid}"
    number, name, concern = m.groups()
    first = _FIRST_LINE.match(_source(cell).lstrip())
    what = first.group(2).strip() if first and first.group(1) == number else CONCERNS.get(concern or "", "all tests")
    return f"Task {number} {name}: {what}"


def test_label(grade_id: str) -> str:
    """A test cell's name from its grade_id alone ("Task 1a response_logprobs: values"), as the
    summary of a report without the notebook's cells says it (hub/on_submit/pages.py)."""
    m = _TEST_ID.match(str(grade_id))
    if not m:
        return f"Test cell {grade_id}"
    number, name, concern = m.groups()
    return f"Task {number} {name}: {CONCERNS.get(concern or '', 'all tests')}"


def cell_verdict(cell) -> str:
    """"passed", "failed", or "" (not scored yet: awaiting a person, held for review)."""
    nbg = cell.get("metadata", {}).get("nbgrader", {}) or {}
    if nbg.get("pending") or nbg.get("held") or nbg.get("score") is None:
        return ""
    return "passed" if float(nbg["score"]) >= float(nbg.get("points", 0)) else "failed"


def cell_failure(cell) -> str:
    """The failure's message of a failed test cell (its error output, one line), "" otherwise."""
    if cell_verdict(cell) != "failed":
        return ""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            ename, evalue = str(out.get("ename", "Error")), str(out.get("evalue", ""))
            return f"{ename}: {evalue}" if evalue else ename
    return "a test in this cell failed (it gave no message)"


# ----------------------------------------------------------------------------- maths without the network

# nbconvert's pages load MathJax from a CDN, so a student who opens the page offline sees raw LaTeX.
# Here MathJax 2 comes from the installed jupyter-server-mathjax package, inlined into the page
# (its core and the combined TeX configuration, about 430 kB), with MathML output: the browser
# draws the formulas itself, and no file is fetched from anywhere.
_MATHJAX_BLOCK = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
_MATHJAX_CONFIG = r"""<script type="text/x-mathjax-config">
MathJax.Hub.Config({
  jax: ["input/TeX", "output/NativeMML"], extensions: ["tex2jax.js"],
  tex2jax: {inlineMath: [["$", "$"], ["\\(", "\\)"]], displayMath: [["$$", "$$"], ["\\[", "\\]"]],
            processEscapes: true, processEnvironments: true},
  messageStyle: "none", showMathMenu: false,
  menuSettings: {explorer: false, assistiveMml: false}
});
</script>"""


def _inline_script(code: str) -> str:
    """A script's text made safe inside <script>...</script>."""
    return "<script>" + re.sub(r"</(script)", r"<\\/\1", code, flags=re.I).replace("<!--", "<\\!--") + "</script>"


def mathjax_inline() -> str:
    """MathJax, configured and inlined, from the installed jupyter_server_mathjax package."""
    import jupyter_server_mathjax

    static = Path(jupyter_server_mathjax.__file__).resolve().parent / "static"
    core = (static / "MathJax.js").read_text(encoding="utf-8")
    combined = (static / "config" / "TeX-AMS-MML_HTMLorMML-full.js").read_text(encoding="utf-8")
    return "<!-- MathJax from the installed jupyter-server-mathjax package: works offline -->\n" + \
        _MATHJAX_CONFIG + "\n" + _inline_script(core) + "\n" + _inline_script(combined)


def offline_maths(html: str) -> str:
    """The page with nbconvert's MathJax-from-a-CDN block replaced by the inlined MathJax."""
    inline = mathjax_inline()
    return _MATHJAX_BLOCK.sub(lambda m: inline, html, count=1)


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

    def default_filters(self):
        """nbconvert's filters, and the names and verdicts of graded cells (the environment is rebuilt
        from these whenever the template changes)."""
        yield from super().default_filters()
        yield from (("llmrl_label", cell_label), ("llmrl_verdict", cell_verdict), ("llmrl_failure", cell_failure))

    def from_notebook_node(self, nb, resources=None, **kw):
        # Graded on submit with the scores hidden (hub/on_submit/settings.py, the "feedback" setting): each
        # test says passed or failed, no page shows a point.
        resources = {} if resources is None else resources
        resources["llmrl_hide_scores"] = os.environ.get(HIDE_SCORES_ENV) == "hidden"
        resources["llmrl_unsandboxed"] = unsandboxed_reason(nb)
        output, resources = super().from_notebook_node(nb, resources, **kw)
        return offline_maths(output), resources

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


def unsandboxed_reason(nb) -> str:
    """Why this notebook's grade was made without the sandbox, or "" (it was sandboxed).

    While grading, the grading process's UNSANDBOXED_ENV decides (a mark a student wrote into their
    own notebook counts for nothing then); a page made later from autograded/ reads the mark the batch
    wrote there."""
    if UNSANDBOXED_ENV in os.environ:
        return os.environ[UNSANDBOXED_ENV]
    meta = (nb.get("metadata") or {}).get("llmrl") or {}
    return str(meta.get(UNSANDBOXED_MARK) or "") if isinstance(meta, dict) else ""


def releasable(notebook_report: dict) -> bool:
    """A notebook of grade.py's report whose feedback may go to the student now."""
    return not notebook_report.get("needs_manual_review") and not any(
        c.get("needs_manual_grade") for c in notebook_report.get("cells", []))


def pending_in_gradebook(gb, assignment: str, student: str, notebook: str) -> list[str]:
    """grade_ids of one submitted notebook that a person still has to grade (gradebook rows)."""
    nb = gb.find_submission_notebook(notebook, assignment, student)
    return [g.name for g in nb.grades if _needs_person(g)]
