"""The answer-key check from the command line: the task map, or one notebook's static notes.

    python -m autograder.cli.review [ASSIGNMENT NOTEBOOK.ipynb]
"""

from __future__ import annotations
from pathlib import Path
from autograder.review.static_notes import review_notes
from autograder.review.task_map import what_the_library_can_do

def main(argv=None) -> int:
    """python -m autograder.cli.review ASSIGNMENT NOTEBOOK.ipynb: print the static notes (or the map)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m autograder.cli.review", description=main.__doc__)
    p.add_argument("assignment", nargs="?")
    p.add_argument("notebook", nargs="?", type=Path)
    args = p.parse_args(argv)
    if not args.assignment:
        print(what_the_library_can_do())
        return 0
    if args.notebook is None or not args.notebook.exists():
        print(f"error: give a notebook file, got {args.notebook}", file=sys.stderr)
        return 1
    notes = review_notes(args.assignment, args.notebook, args.notebook.stem)
    print("\n".join(notes) if notes else "no graded function leans on the library")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
