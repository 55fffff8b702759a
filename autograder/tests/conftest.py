import sys
from pathlib import Path

# autograder/course.py and autograder/grade.py are scripts, not a package: import them by path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers of these tests (tiny.py)

import course  # noqa: E402,F401  (first, so that its start-up speedups apply before nbformat loads)
