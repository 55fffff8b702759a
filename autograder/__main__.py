"""python -m autograder COMMAND ...: the course's commands (autograder/cli/course.py)."""

import sys

from autograder.cli.course import main

sys.exit(main())
