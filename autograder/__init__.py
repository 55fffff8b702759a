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

import sys

# nbformat's schema check loads jsonschema, which builds about 40 parsers for an "iri" format checker
# the notebook schema never uses (seconds per process): marking that optional module absent skips it.
# It must happen before anything imports jsonschema, so here (course/nbgrader_app.py has the rest).
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)
