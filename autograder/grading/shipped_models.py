"""The check of the course's models before any kernel starts. The models ship inside the library and
kernels only read them; the library's store layer (llmrl.store.shipped) compares each file's sha256
with their manifest and trains nothing. The grader calls that layer directly, not the library's tools.

    python -m autograder.grading.shipped_models    (autograder/cli/grade.py starts it before its imports)

prints nothing and exits 0 when every model matches its manifest, else prints what is wrong and exits 1.
"""

from __future__ import annotations

import sys

# The start of the grader's error when the check fails; the store layer's message follows it.
CHECK_FAILED = "the course's shipped models failed their check (llmrl.store.shipped)"


def problem() -> str | None:
    """None when every shipped model matches its manifest, else the store layer's message saying which
    file is missing or changed."""
    from llmrl.store.shipped import ShippedModelError, verify

    try:
        verify()
    except ShippedModelError as e:
        return str(e)
    return None


def main() -> int:
    found = problem()
    if found:
        print(found, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
