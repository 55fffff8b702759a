"""The student-kit install test runs only when asked for (`make test-kit`, which `make test` runs):
it creates a new virtual environment and installs the kit into it with pip (about a minute), which a
plain `pytest autograder/tests` should not do. `make test-kit` sets LLMRL_KIT_TESTS=1. The kit's
files (what is in it, what must never be) are checked without installing in
autograder/tests/test_student_kit_files.py, in every pytest run."""

import os

import pytest

collect_ignore_glob = [] if os.environ.get("LLMRL_KIT_TESTS", "") not in ("", "0") else ["test_*.py"]

FIGURES: dict[str, str] = {}  # what the install test measured, printed at the end of the run


@pytest.fixture(scope="session")
def figures() -> dict[str, str]:
    return FIGURES


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.write_sep("-", "student kit")
        for key, value in FIGURES.items():
            terminalreporter.write_line(f"{key}: {value}")
