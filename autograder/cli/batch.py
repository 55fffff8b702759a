"""Grade every submission of one or more assignments in parallel, then merge into the gradebook.
"""

from __future__ import annotations
import argparse
import sys
from pathlib import Path
from autograder.batch import fanout
from autograder.batch.run import run_batch
from autograder.course.layout import PipelineError, ROOT
from autograder.grading import one_notebook as grading
from autograder.batch.run import summary

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autograder/bin/batch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", help="default: every assignment with source notebooks")
    parser.add_argument("--root", type=Path, default=ROOT, help="course directory (default: this repository)")
    parser.add_argument("--submitted", type=Path, help="default: ROOT/submitted")
    parser.add_argument("--workers", type=int, default=None, help="parallel graders (default: one per core)")
    parser.add_argument("--csv", type=Path, default=None, help="batch table (default: ROOT/batch_grades.csv)")
    parser.add_argument("--no-merge", action="store_true", help="grade only; leave gradebook.db, autograded/ alone")
    parser.add_argument("--regrade", action="store_true", help="grade every student again, even unchanged ones")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade without the sandbox (bubblewrap) on purpose; without this a machine where it "
                             "does not work is refused. Every feedback page and the table then say so")
    parser.add_argument("--dask", metavar="ADDRESS",
                        help="grade on a Dask cluster: its scheduler's address (tcp://host:8786), or local[:N] for N "
                             "worker processes on this machine (autograder/batch/fanout.py, docs/instructors.md)")
    parser.add_argument("--shards", type=int, default=None,
                        help="with --dask: how many shards the class is split into (default: one per worker)")
    parser.add_argument("--retries", type=int, default=2,
                        help="with --dask: how often a shard whose worker died is sent again (default 2)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    assignments = args.assignments or sorted(p.name for p in (root / "source").iterdir()
                                             if p.is_dir() and any(p.glob("*.ipynb")))
    try:
        for a in assignments:
            grading.source_notebooks(a, root)
        csv_path = args.csv or root / "batch_grades.csv"
        if args.dask:
            if args.no_merge:
                raise PipelineError("--no-merge does not go with --dask: the cluster's results are merged here")
            batch = fanout.run_on_cluster(assignments, root, args.dask, args.submitted, shards=args.shards,
                                          graders=args.workers, csv_path=csv_path, progress=not args.no_progress,
                                          regrade=args.regrade, no_sandbox=args.no_sandbox, retries=args.retries)
        else:
            batch = run_batch(assignments, root, args.submitted, args.workers, not args.no_merge, csv_path,
                              progress=not args.no_progress, regrade=args.regrade, no_sandbox=args.no_sandbox)
    except PipelineError as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 1
    print(summary(batch))
    print(f"table: {args.csv or root / 'batch_grades.csv'}" +
          ("" if args.no_merge else f"; gradebook: {root / 'gradebook.db'}, grades.csv, autograded/, feedback/"))
    return 1 if any(r.report is None for r in batch["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
