"""The grader's tests: the package is imported as `autograder` (pytest runs from the repository root,
pyproject.toml's pythonpath), the helpers of these tests as `autograder.tests.tiny` and so on."""

import autograder.course.nbgrader_app  # noqa: F401  (first: nbgrader's start-up speedups before nbformat loads)

import shutil
import subprocess

import pytest

from autograder.tests import tiny


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: part of `make test-fast` (a few seconds; one of each part of the grader)")



@pytest.fixture(scope="session")
def earlier_course(tmp_path_factory):
    """The tiny course after a batch that graded one student, "earlier": made once for the whole run and
    never changed (test_grading_faults.py and test_late_and_review.py take a copy per test: `course`)."""
    root = tmp_path_factory.mktemp("earlier") / "course"
    tiny.make_course(root)
    tiny.submit(root, "earlier", tiny.submission(root, tiny.RIGHT))
    proc = subprocess.run(tiny.BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.fixture
def course(earlier_course, tmp_path):
    """A copy of `earlier_course` of this test's own."""
    root = tmp_path / "course"
    shutil.copytree(earlier_course, root, symlinks=True)
    return root
