"""nbgrader settings of the course (nbgrader 0.9.6).

The course directory is the repository root: source/, release/, submitted/, autograded/,
feedback/ and gradebook.db all sit there. The Makefile and autograder/grade pass this file
with --config; the two-line nbgrader_config.py at the root loads it for plain `nbgrader` calls.
"""

import os

from nbgrader.preprocessors import ClearHiddenTests, GetGrades
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
# feedback pipeline would show them).
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]

# Students get the same stub everywhere.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
