"""The course's grading pipeline, as a package (docs/architecture.md, "The grader").

    cli/        command lines: python -m autograder (the course's commands), .cli.grade, .cli.batch,
                .cli.lms, .cli.corpus, .cli.review; bin/ holds shell wrappers of them
    course/     the course folder (paths, labs, the pipeline's error), nbgrader with the course's
                settings, the class list
    authoring/  jupytext -> source -> release, execute and validate, the sample students and demo course
    collect/    submissions in: nbgrader's exchange (CourseCollect), Canvas/Moodle downloads
    grading/    one notebook graded in a scratch course
    batch/      every student in parallel, records, merges into the gradebook
    export/     grades.csv and the score table, feedback pages, grades out to an LMS
    execution/  the two runs: feedback run and grading run, kernels, remote calls, the wire format
    sandbox/    bubblewrap and limits for every kernel, file helpers that never follow a link
    review/     the answer-key check (task map, static analysis, runtime watch), code flags, catch rates
    formgrader/ nbgrader's formgrader with its Manual Grading page made inert (a server extension)
    kit/        the student kit (what a student downloads)
    corpus/     the grading corpus: submissions with the score each must get (tests)

Layers import downward only: cli > authoring, batch > grading > review, execution > export, collect >
course > sandbox (docs/architecture.md has the exact rules; autograder/tests/test_package_layers.py
checks them).
"""

import os
import sys
from pathlib import Path

# The folder holding this package is the course folder: it holds source/ (the hidden tests). It may be on
# PYTHONPATH to find the package (autograder/bin's wrappers, the hub's course service), but no child process
# may inherit it there: a kernel would have the course on its path, and the sandbox refuses (rightly) a
# Python path that shows the course. Children that need the package run from that folder (`-m`) or are
# given it explicitly (course/nbgrader_app.py).
_HOME = Path(__file__).resolve().parents[1]
if "PYTHONPATH" in os.environ:
    _kept = [p for p in os.environ["PYTHONPATH"].split(os.pathsep) if p and Path(p).resolve() != _HOME]
    if _kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(_kept)
    else:
        del os.environ["PYTHONPATH"]

# nbformat's schema check loads jsonschema, which builds about 40 parsers for an "iri" format checker
# the notebook schema never uses (seconds per process): marking that optional module absent skips it.
# It must happen before anything imports jsonschema, so here (course/nbgrader_app.py has the rest).
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)
