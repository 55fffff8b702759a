"""Grade every submission of one or more assignments in parallel, then merge into the gradebook.

    autograder/batch [ASSIGNMENT ...] [--workers N] [--submitted DIR] [--csv FILE] [--no-merge]

Submissions are read from submitted/<student>/<assignment>/*.ipynb (nbgrader's layout; a renamed
notebook is matched by its graded cells). For each assignment a scratch course is prepared once
(nbgrader generate_assignment); then N workers (default: one per core) each grade one student at a
time with autograder/grade.py in a fresh copy of it, in its own process, under a hard time limit.
Nothing a submission does can reach the course's gradebook or another student's files: the
workers never open the course's gradebook.db. The main process merges each finished result into
gradebook.db serially (only that student's rows), copies the autograded notebook to
autograded/<student>/<assignment>/ and the feedback (HTML without hidden tests) to
feedback/<student>/<assignment>/, and at the end writes

- grades.csv (nbgrader's export of the whole gradebook),
- the batch table (--csv, default batch_grades.csv): one row per student and notebook with
  points, status (graded / missing / failed / review), reason and seconds,

and prints a summary (graded, failed with reason, flagged for review, wall and CPU time).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course  # noqa: E402
import grade as grading  # noqa: E402
from course import ROOT, PipelineError  # noqa: E402

GRADE_PY = Path(__file__).resolve().parent / "grade.py"


@dataclass
class Job:
    assignment: str
    student: str
    files: list[Path]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    job: Job
    report: dict | None
    error: str | None
    seconds: float
    out: Path | None = None


def find_jobs(assignments: list[str], submitted: Path) -> list[Job]:
    jobs = []
    for a in assignments:
        for folder in sorted(submitted.glob(f"*/{a}")):
            if folder.is_dir():
                files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".ipynb")
                jobs.append(Job(a, folder.parent.name, files))
    return jobs


def notebook_timeout() -> int:
    return int(os.environ.get("LLMRL_GRADE_NOTEBOOK_TIMEOUT", 600))


def run_job(job: Job, template: Path, outdir: Path, root: Path, n_notebooks: int) -> Result:
    """Grade one student in a subprocess; kill its whole process group if it overstays."""
    started = time.monotonic()
    out = outdir / job.assignment / job.student
    report_file = outdir / job.assignment / f"{job.student}.json"
    report_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(GRADE_PY), job.assignment, *map(str, job.files), "--template", str(template),
           "--student", job.student, "--out", str(out), "--lenient", "--report", str(report_file),
           "--root", str(root), "--no-warm"]  # warmed once below, before the workers start
    env = dict(os.environ, **job.env)
    limit = n_notebooks * int(env.get("LLMRL_GRADE_NOTEBOOK_TIMEOUT", notebook_timeout())) + 120
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return Result(job, None, f"grading took longer than {limit} s and was stopped", time.monotonic() - started)
    seconds = time.monotonic() - started
    if proc.returncode != 0 or not report_file.exists():
        lines = [l for l in (err or "").splitlines() if l.startswith("error:")] or (err or "").strip().splitlines()
        reason = (lines[-1] if lines else f"exit status {proc.returncode}").removeprefix("error: ")
        return Result(job, None, reason[:300], seconds)
    return Result(job, json.loads(report_file.read_text()), None, seconds, out)


# ----------------------------------------------------------------------------- gradebook

def prepare_gradebook(assignment: str, root: Path) -> None:
    """Make sure the course's gradebook knows the assignment's current cells (release/ untouched)."""
    release_dir = Path(tempfile.mkdtemp(prefix="llmrl-release-"))
    try:
        course.record_assignment(assignment, root, release_dir, failure=f"cannot record {assignment} in the gradebook")
    finally:
        shutil.rmtree(release_dir, ignore_errors=True)


def merge(gb, result: Result, root: Path) -> None:
    """Write one student's grades into the course gradebook; touches only that student's rows."""
    report, job = result.report, result.job
    gb.update_or_create_student(job.student)
    gb.update_or_create_submission(job.assignment, job.student)
    for nb in report["notebooks"]:
        for cell in nb["cells"]:
            g = gb.find_grade(cell["grade_id"], nb["notebook"], job.assignment, job.student)
            g.auto_score = cell["points"]
            g.needs_manual_grade = bool(cell["needs_manual_grade"] or nb["needs_manual_review"])
            if nb["needs_manual_review"]:
                g.manual_score = 0.0  # zero until a person has looked (the reasons are in the batch table)
    gb.db.commit()
    if result.out is not None and result.out.is_dir():
        for kind, pattern in (("autograded", "*.ipynb"), ("feedback", "*.html")):
            target = root / kind / job.student / job.assignment
            for p in result.out.glob(pattern):
                target.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, target / p.name)


def snapshot(root: Path) -> dict:
    """(assignment, student, notebook, cell) -> (auto, manual) for every grade in the gradebook."""
    from nbgrader.api import Gradebook

    db = root / "gradebook.db"
    if not db.exists():
        return {}
    rows = {}
    with Gradebook(f"sqlite:///{db}") as gb:
        for a in gb.assignments:
            for sub in a.submissions:
                for nb in sub.notebooks:
                    for g in nb.grades:
                        rows[(a.name, sub.student_id, nb.name, g.name)] = (g.auto_score, g.manual_score)
    return rows


# ----------------------------------------------------------------------------- batch

def run_batch(assignments: list[str], root: Path = ROOT, submitted: Path | None = None, workers: int | None = None,
              merge_results: bool = True, csv_path: Path | None = None, progress: bool = True,
              jobs: list[Job] | None = None) -> dict:
    from nbgrader.api import Gradebook

    started = time.monotonic()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    submitted = submitted or root / "submitted"
    jobs = find_jobs(assignments, submitted) if jobs is None else jobs
    workers = max(1, workers or os.cpu_count() or 1)
    grading._warm_model_cache()  # once, before the workers: kernels only read the cache
    work = Path(tempfile.mkdtemp(prefix="llmrl-batch-"))
    templates, n_notebooks, results = {}, {}, []
    try:
        for a in sorted({j.assignment for j in jobs}):
            templates[a] = grading.make_template(a, root, work / "templates" / a)
            n_notebooks[a] = len(grading.source_notebooks(a, root))
            if merge_results:
                prepare_gradebook(a, root)
        bar = None
        if progress:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(jobs), unit="submission", desc="grading", file=sys.stderr)
        gb = Gradebook(f"sqlite:///{root / 'gradebook.db'}") if merge_results and jobs else None
        try:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(run_job, j, templates[j.assignment], work / "out", root, n_notebooks[j.assignment])
                           for j in jobs]
                for f in as_completed(futures):
                    r = f.result()
                    if gb is not None and r.report is not None:
                        try:
                            merge(gb, r, root)
                        except Exception as e:  # a gradebook problem: report it, keep the others
                            gb.db.rollback()
                            r.error, r.report = f"merging into the gradebook failed: {e}", None
                    results.append(r)
                    if bar is not None:
                        bar.set_postfix_str(f"{r.job.student}/{r.job.assignment}", refresh=False)
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()
            if gb is not None:
                if results:
                    from nbgrader.plugins import CsvExportPlugin
                    CsvExportPlugin(to=str(root / "grades.csv")).export(gb)
                gb.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    wall = time.monotonic() - started
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    # Sandboxed kernels are not in RUSAGE_CHILDREN (bwrap's PID namespace): each reports its own.
    cpu += sum((nb.get("events") or {}).get("kernel_cpu_s", 0.0) for r in results if r.report
               for nb in r.report["notebooks"])
    results.sort(key=lambda r: (r.job.assignment, r.job.student))
    rows = table_rows(results)
    if csv_path is not None:
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["student"])
            w.writeheader()
            w.writerows(rows)
    return {"results": results, "rows": rows, "wall_s": wall, "cpu_s": cpu, "workers": workers}


def table_rows(results: list[Result]) -> list[dict]:
    rows = []
    for r in results:
        base = {"student": r.job.student, "assignment": r.job.assignment}
        if r.report is None:
            rows.append(dict(base, notebook="*", points=0.0, max_points="", status="failed", reason=r.error,
                             seconds=round(r.seconds, 1), kernel_cpu_s=""))
            continue
        for nb in r.report["notebooks"]:
            status = "review" if nb["needs_manual_review"] else nb["status"]
            reason = "; ".join(nb["review_reasons"]) if nb["needs_manual_review"] else (nb["reason"] or "")
            notes = "; ".join(nb.get("review_notes", []))
            ev = nb.get("events") or {}
            extra = [k for k in ("notebook_timeout", "kernel_died") if ev.get(k)]
            reason = "; ".join(x for x in (reason, ", ".join(extra), ("look at: " + notes) if notes else "") if x)
            rows.append(dict(base, notebook=nb["notebook"], points=nb["points"], max_points=nb["max_points"],
                             status=status, reason=reason, seconds=round(r.seconds, 1),
                             kernel_cpu_s=round(ev.get("kernel_cpu_s", 0.0), 1)))
    return rows


def summary(batch: dict) -> str:
    results = batch["results"]
    failed = [r for r in results if r.report is None]
    review = [r for r in results if r.report and r.report["needs_manual_review"]]
    missing = [(r, nb) for r in results if r.report for nb in r.report["notebooks"] if nb["status"] == "missing"]
    n = len(results)
    lines = [f"graded {n - len(failed)} of {n} submissions in {batch['wall_s']:.0f} s with {batch['workers']} workers "
             f"({60 * n / max(batch['wall_s'], 1e-9):.1f} per minute); CPU time {batch['cpu_s']:.0f} s, "
             f"CPU / wall = {batch['cpu_s'] / max(batch['wall_s'], 1e-9):.2f}"]
    if results:
        secs = sorted(r.seconds for r in results)
        lines.append(f"seconds per submission: median {secs[len(secs) // 2]:.1f}, max {secs[-1]:.1f}")
    for r in failed:
        lines.append(f"FAILED  {r.job.student}/{r.job.assignment}: {r.error}")
    for r, nb in missing:
        lines.append(f"missing {r.job.student}/{r.job.assignment}/{nb['notebook']}: 0 points ({nb['reason']})")
    for r in review:
        reasons = [x for nb in r.report["notebooks"] for x in nb["review_reasons"]]
        lines.append(f"REVIEW  {r.job.student}/{r.job.assignment}: 0 until reviewed: {'; '.join(reasons)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autograder/batch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", help="default: every assignment with source notebooks")
    parser.add_argument("--root", type=Path, default=ROOT, help="course directory (default: this repository)")
    parser.add_argument("--submitted", type=Path, help="default: ROOT/submitted")
    parser.add_argument("--workers", type=int, default=None, help="parallel graders (default: one per core)")
    parser.add_argument("--csv", type=Path, default=None, help="batch table (default: ROOT/batch_grades.csv)")
    parser.add_argument("--no-merge", action="store_true", help="grade only; leave gradebook.db, autograded/ alone")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    assignments = args.assignments or sorted(p.name for p in (root / "source").iterdir()
                                             if p.is_dir() and any(p.glob("*.ipynb")))
    try:
        for a in assignments:
            grading.source_notebooks(a, root)
        batch = run_batch(assignments, root, args.submitted, args.workers, not args.no_merge,
                          args.csv or root / "batch_grades.csv", progress=not args.no_progress)
    except PipelineError as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(summary(batch))
    print(f"table: {args.csv or root / 'batch_grades.csv'}" +
          ("" if args.no_merge else f"; gradebook: {root / 'gradebook.db'}, grades.csv, autograded/, feedback/"))
    return 1 if any(r.report is None for r in batch["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
