"""nbgrader settings of the course (nbgrader 0.9.6).

The course directory is the repository root: source/, release/, submitted/, autograded/,
feedback/ and gradebook.db all sit there. The Makefile and autograder/bin/grade pass this file
with --config; the two-line nbgrader_config.py at the root loads it for plain `nbgrader` calls.
"""

import os

from nbgrader.preprocessors import ClearHiddenTests, ClearMarkScheme
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

c.CourseDirectory.root = ROOT
c.CourseDirectory.course_id = "llmrl"
# Plots written while a notebook runs stay out of the student release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "artifacts"]

# Running a notebook (validate, autograde). Under nbgrader the environment variable
# NBGRADER_EXECUTION is set, experiment cells shrink (llmrl.utils.grading_mode()) and a
# whole notebook grades in seconds; a cell that still takes minutes is a bug, not a slow laptop.
c.Execute.timeout = 300          # seconds per cell
c.Execute.startup_timeout = 120  # seconds for the kernel to start on a loaded machine
c.Execute.interrupt_on_timeout = True
# Short tracebacks: a failing hidden assert must not print its source into the feedback.
c.Execute.extra_arguments = ["--InteractiveShell.xmode=Minimal"]

# Feedback shows the student's grades but never the hidden tests (nbgrader's default
# feedback pipeline would show them). A cell no person has graded yet (a written answer, a notebook
# held for review) says "awaiting grading", not 0 (autograder/export/feedback_pages.py, templates/llmrl_feedback).
# The plugins below are named by module path in the grader's package, autograder/, which sits in the
# course folder. The grader's own commands run from there (python -m autograder...) and the hub's
# course service has it on PYTHONPATH; plain `nbgrader` or `jupyter` commands started in the course
# folder do not, so the folder holding the package is put on their path here, once.
import sys  # noqa: E402

if ROOT not in sys.path:
    sys.path.append(ROOT)
from autograder.export.feedback_pages import FeedbackExporter, GetGradesPending  # noqa: E402

c.GenerateFeedback.preprocessors = [GetGradesPending, ClearHiddenTests, ClearMarkScheme, CSSHTMLHeaderPreprocessor]
c.GenerateFeedback.exporter_class = FeedbackExporter
# grades.csv (`nbgrader export` too): automatic and manual points apart, pending and missing marked.
c.ExportApp.plugin_class = "autograder.export.grades_csv.GradesCsv"

# Late submissions: `nbgrader submit` writes the submission time into timestamp.txt, the batch grader
# carries it (the gradebook's submission time, autograded/) and nbgrader's AssignLatePenalties applies
# this policy against the assignment's due date (`nbgrader db assignment add A --duedate=...`), per
# notebook, when it is autograded. "none" (the course's choice, nbgrader's default) records how late
# a submission was (grades.csv says "late by ...") and takes nothing off; "zero" takes all of a late
# notebook's points at autograding time; c.AssignLatePenalties.plugin_class (a LateSubmissionPlugin of
# your own) can do anything else. A course folder's own nbgrader_config.py may set it: the grader's
# scratch courses read that file too (load_config(settings_from=)).
c.LateSubmissionPlugin.penalty_method = "none"
# The course's collect (the formgrader's Collect, `nbgrader collect`; autograder/collect/exchange.py): only
# folders owned by the student they name count, of those the one written last; only the student's own
# regular files are copied (no links, FIFOs, devices; size and count caps), everything else refused and
# named; one student's problem never stops the class. It compares timestamp.txt with the inbound files'
# ctime and grades the files' time when the student's is off by more than a minute, earlier or later.
c.ExchangeFactory.collect = "autograder.collect.exchange.CourseCollect"

# Text for graders and instructors only (CONTRIBUTING.md, "Answers and rubrics for graders"): lines
# between BEGIN MARK SCHEME and END MARK SCHEME (in markdown as <!-- BEGIN MARK SCHEME --> comments)
# are removed from the release and from feedback. nbgrader allows them only in "task" cells; the
# course also puts them in locked read-only cells (the rubric above each written answer: autograde
# restores locked cells from the gradebook, so the formgrader shows the rubric to graders) and in
# plain cells (answers to optional exercises, kept in the source only).
c.ClearMarkScheme.enforce_metadata = False

# Students get the same stub everywhere.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# ----------------------------------------------------------------------------- grading safety
# Owned by the grading-safety work (autograder/execution/, autograder/sandbox/,
# docs/grading-safety.md). nbgrader's Execute is replaced by TwoRunExecute: a sandboxed feedback run of the notebook
# without its hidden tests, and a grading run whose tests execute in a kernel of their own that never
# runs student code; a test cell's points depend only on whether it raised there. The limits can be
# changed per run with environment variables (seconds).
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, IgnorePattern,  # noqa: E402
                                    LimitOutput, SaveAutoGrades)
from autograder.execution.nbgrader_preprocessors import TwoRunExecute  # noqa: E402

c.Autograde.autograde_preprocessors = [TwoRunExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
c.TwoRunExecute.cell_cap = 500_000        # bytes of output kept per cell (display updates included)
c.TwoRunExecute.notebook_cap = 5_000_000  # and per notebook; nbgrader's LimitOutput then trims lines
c.LimitOutput.max_lines = 200
c.LimitOutput.max_length = 20_000
# A test cell the student deleted is put back (after the cell it followed in the source) and run.
c.OverwriteCells.add_missing_cells = True
