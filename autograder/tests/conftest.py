"""The grader's tests: the package is imported as `autograder` (pytest runs from the repository root,
pyproject.toml's pythonpath), the helpers of these tests as `autograder.tests.tiny` and so on."""

import autograder.course.nbgrader_app  # noqa: F401  (first: nbgrader's start-up speedups before nbformat loads)


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: part of `make test-fast` (a few seconds; one of each part of the grader)")

