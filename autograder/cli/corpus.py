"""make corpus: build the submission corpus from the current notebooks, grade it in parallel, print a table.

    python -m autograder.cli.corpus [ASSIGNMENT ...] [--workers N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from autograder import corpus
from autograder.batch import run as batch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.cli.corpus", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignments", nargs="*", help="default: every assignment with a spec and notebooks")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--only", default=None, help="only entries whose name contains this text")
    p.add_argument("--root", type=Path, default=corpus.ROOT,
                   help="course directory with source/ and release/ (default: this repository)")
    p.add_argument("--keep", type=Path, default=None, help="keep the scratch course (submissions, gradebook) here")
    args = p.parse_args(argv)
    root = args.root.resolve()
    names = args.assignments or corpus.available(root)
    missing = [a for a in ("lab11", "lab19", "lab21", "hw4") if a not in corpus.available(root)]
    built = [b for b in corpus.build_all(names, root) if not args.only or args.only in b.entry.name]
    work = args.keep or Path(tempfile.mkdtemp(prefix="llmrl-corpus-"))
    try:
        graded = corpus.grade_corpus(built, work, args.workers or corpus.CORPUS_WORKERS, progress=True, source_root=root)
        print(corpus.table(built, graded))
        print()
        print(batch.summary(graded["batch"]))
        if missing:
            print(f"no corpus (spec or notebooks missing) for: {', '.join(missing)}")
        bad = [b for b in built if corpus.compare(b, graded["results"].get(b.student))[1]]
        return 1 if bad else 0
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
