"""The old name of :mod:`llmrl.tools.models` (check the shipped models, or rebuild them).

Kept because the Makefile's ``make warm``, the grader (autograder/cli/grade.py,
autograder/grading/one_notebook.py) and the hub's set-up (hub/deploy/course.py) run
``python -m llmrl.tools.cache`` or import ``warm`` from here: ``warm`` is
:func:`llmrl.tools.models.verify_shipped`, which builds nothing.
"""

from __future__ import annotations

import sys

from .models import main as _main
from .models import verify_shipped

warm = verify_shipped


def main(argv: list[str] | None = None) -> int:
    return _main(argv, prog="python -m llmrl.tools.cache")


if __name__ == "__main__":
    sys.exit(main())
