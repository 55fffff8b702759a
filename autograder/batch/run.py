"""Grade every submission of one or more assignments in parallel, then merge into the gradebook.

    python -m autograder.cli.batch [ASSIGNMENT ...] [--workers N] [--submitted DIR] [--csv FILE] [--no-merge]
                     [--regrade] [--root DIR] [--no-progress] [--no-sandbox] [--dask ADDRESS|local[:N]]

Submissions are read from submitted/<student>/<assignment>/*.ipynb (nbgrader's layout; a renamed
notebook is matched by its graded cells; a folder or notebook that is a symbolic link is refused).

Before the first student: the sandbox must work (bubblewrap; autograder/batch/sandbox_gate.py: the
batch refuses with one error saying what to install, unless --no-sandbox, and then every feedback
page and the table's `sandbox` column say the grades were made without it), the cached models are
built, the sandbox's import probe checks that the course library imports inside the sandbox,
gradebook.db is backed up (gradebook.db.backup, a consistent copy made with sqlite's backup API)
and the **self-check** grades every assignment's reference solutions (source/) in the grading
sandbox: anything less than full marks stops the batch with one error, before any student is graded.

Then N workers (default: one per core) each grade one student at a time with
autograder/grading/one_notebook.py, in its own process (which dies with the batch: PR_SET_PDEATHSIG), in a fresh
copy of a scratch course prepared once per assignment, under a hard time limit. The workers
never open the course's gradebook.db. Each finished result is first stored as a record
(.grading/<assignment>/<hash of the student id>/: the report, the autograded notebook, the feedback
HTML; written atomically, the record file last), then merged by the main process, serially:
that student's rows of gradebook.db (a locked gradebook is retried for up to
LLMRL_GRADEBOOK_WAIT seconds, default 120), autograded/<student>/<assignment>/ and
feedback/<student>/<assignment>/. After every merge the gradebook must pass sqlite's
integrity_check and every other student's rows must be exactly as before; otherwise the backup
is put back and the batch stops with one error.

A record whose submission, source notebooks and grader are unchanged is reused (merged again, not
graded again): a batch that was killed re-runs only the students that are missing. --regrade
grades everyone again.

Outputs, each written atomically (a temporary file, then a rename):
- the batch table (--csv, default batch_grades.csv): one row per student and notebook with
  points, status (graded / missing / failed / review / pending), reason, seconds, sandbox
  (bubblewrap, or none: why); written at the start with every student pending and after every
  merge, so it never shows a stale batch;
- grades.csv (nbgrader's export of the whole gradebook), at the end.

Past one machine, autograder/batch/fanout.py splits the class into shards that this same batch grades
on the workers of a Dask cluster, and merges what they send back here, as this batch merges its own.

A full disk under the course folder stops the batch cleanly: what was merged stays, nothing is
half-written, one error says which file could not be written.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import closing
from pathlib import Path

from autograder.batch import sandbox_gate, warm_workers
from autograder.batch.gradebook_merge import (backup_gradebook, copy_outputs, course_duedates, export_grades,
                                              gradebook_problem, load_record, merge, prepare_gradebook,
                                              restore_gradebook, save_record, with_gradebook_retry)
from autograder.batch.jobs import (BatchStop, COLUMNS, Job, Result, SELF_CHECK, _digest_files, _digest_side,
                                   _kill_all, find_jobs, grader_version, run_job, settings_digest, source_digest)
from autograder.course.layout import PipelineError, ROOT
from autograder.grading import one_notebook as grading
from autograder.sandbox import safe_files as files

TABLE_COLUMNS = [*COLUMNS, "sandbox"]  # the batch table's: "bubblewrap", or "none: why" (--no-sandbox)

# ----------------------------------------------------------------------------- batch

def self_check(assignments: list[str], root: Path, templates: dict, work: Path, workers: int,
               env: dict[str, str] | None = None) -> None:
    """Every assignment's reference solutions must score full marks in the grading sandbox (`env`:
    the grading processes' environment, sandbox_gate.job_env)."""
    jobs = [Job(a, SELF_CHECK, list(grading.source_notebooks(a, root).values()), env=dict(env or {}), self_check=True)
            for a in assignments]
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        results = list(pool.map(lambda ij: run_job(ij[1], templates[ij[1].assignment], work / "self-check", root,
                                                   ij[0]), enumerate(jobs)))
    for r in results:
        if r.report is None:
            raise PipelineError(f"self-check failed: grading {r.job.assignment}'s reference solutions in the sandbox "
                                f"did not work ({r.error}); no student was graded")
        for nb in r.report["notebooks"]:
            bad = [c for c in nb["cells"] if not c["needs_manual_grade"] and c["points"] != c["max_points"]]
            if bad or nb["needs_manual_review"]:
                c = bad[0] if bad else {"grade_id": "-", "error": "; ".join(nb["review_reasons"])}
                raise PipelineError(
                    f"self-check failed: the reference solution of {r.job.assignment}/{nb['notebook']} scores "
                    f"{nb['points']:g} of {nb['max_points']:g} in the grading sandbox ({c['grade_id']}: "
                    f"{c['error']}); no student was graded")


def run_batch(assignments: list[str], root: Path = ROOT, submitted: Path | None = None, workers: int | None = None,
              merge_results: bool = True, csv_path: Path | None = None, progress: bool = True,
              jobs: list[Job] | None = None, regrade: bool = False, check: bool = True, on_merged=None,
              no_sandbox: bool = False) -> dict:
    """Grade `jobs` (default: every submission of `assignments` in `submitted`) and merge them into
    root's gradebook. `no_sandbox`: grade without the sandbox (the instructor's --no-sandbox); without
    it a machine where the sandbox does not work is refused (PipelineError) before anything else."""
    started = time.monotonic()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    submitted = submitted or root / "submitted"
    jobs = find_jobs(assignments, submitted, root) if jobs is None else jobs
    workers = max(1, workers or os.cpu_count() or 1)
    files.sweep()  # scratch folders of earlier batches that were killed
    work = files.scratch_dir("batch")
    results: dict[int, Result] = {}
    version = grader_version()
    try:
        names = sorted({j.assignment for j in jobs})
        if not names:
            return _finish([], started, usage0, workers, csv_path, 0)
        without, templates, src_digests = _prepare(names, jobs, root, work, workers, no_sandbox, check)
        backup = None
        if merge_results:
            for a in names:
                prepare_gradebook(a, root)
            backup = backup_gradebook(root)
        digests, reused = reusable_records(jobs, root, src_digests, version, regrade)
        if merge_results:
            results.update(reused)
        todo = [i for i in range(len(jobs)) if i not in results]
        _write_table(csv_path, jobs, results)
        bar = progress_bar(len(jobs), len(results)) if progress else None
        gb = open_gradebook(root) if merge_results else None
        try:
            state: dict = {}
            for i in sorted(results):  # results reused from an earlier run: merged again
                merge_one(gb, results[i], root, backup, on_merged, state)
            _write_table(csv_path, jobs, results)
            # closing: an error here (a merge that fails) stops the pool and its graders at once
            with closing(_graded(todo, jobs, templates, work, root, workers)) as graded:
                for i, r in graded:
                    mark_sandbox(r, without)
                    if r.report is not None and merge_results:
                        save_record(root, r, digests[i], src_digests[r.job.assignment], version)
                        merge_one(gb, r, root, backup, on_merged, state)
                    results[i] = r
                    _write_table(csv_path, jobs, results)
                    if bar is not None:
                        bar.set_postfix_str(f"{r.job.student}/{r.job.assignment}", refresh=False)
                        bar.update(1)
            if gb is not None and results:
                export_with_failures(gb, root, results)
        finally:
            if bar is not None:
                bar.close()
            if gb is not None:
                gb.close()
    except files.DiskFull as e:
        raise disk_full(e) from None
    finally:
        files.rmtree(work)
    return _finish([results[i] for i in sorted(results)], started, usage0, workers, csv_path, len(todo), jobs)


def _prepare(names: list[str], jobs: list[Job], root: Path, work: Path, workers: int, no_sandbox: bool,
             check: bool):
    """What every submission's grading needs, before the first: the sandbox decision (a machine
    without it is refused unless no_sandbox), the model cache, the warm grader, each assignment's
    template with its due date and digest, and the self-check of the reference solutions.
    Returns (without, templates, source digests)."""
    without = sandbox_gate.decide(no_sandbox)  # before anything is built or graded
    env = sandbox_gate.job_env(without)
    for j in jobs:
        j.env.update(env)
    grading._warm_model_cache()  # once, before the workers: kernels only read the cache
    grading.check_environment([ROOT, root])
    warm_workers.expect(work, sum(not j.problem for j in jobs))  # its warm grader starts meanwhile
    # late penalties are applied in each student's scratch course: it gets the course's due date
    due = course_duedates(names, root)
    templates = {a: grading.make_template(a, root, work / "templates" / a, duedate=due[a]) for a in names}
    src_digests = source_digests(names, root, due, bool(without))
    if check:
        self_check(names, root, templates, work, workers, env)
    return without, templates, src_digests


def _graded(todo: list[int], jobs: list[Job], templates: dict, work: Path, root: Path, workers: int):
    """(index, Result) of each job in `todo` as it finishes, `workers` at a time; an interruption
    (Ctrl-C, an error of the caller's) cancels the rest and kills every grading process."""
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        futures = {pool.submit(run_job, jobs[i], templates[jobs[i].assignment], work, root, i): i for i in todo}
        for f in as_completed(futures):
            yield futures[f], f.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        _kill_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def export_with_failures(gb, root: Path, results: dict[int, Result]) -> None:
    """grades.csv, naming the students this run failed."""
    failed = {(r.job.assignment, r.job.student): r.error for r in results.values() if r.report is None}
    with_gradebook_retry("exporting grades.csv", lambda: export_grades(gb, root, failed), db=root / "gradebook.db")


def disk_full(e: files.DiskFull) -> BatchStop:
    return BatchStop(f"no space left on the device while writing {e.path}; the gradebook and the files written "
                     f"before are intact: free some space and run the batch again (it grades only the students "
                     f"that are missing)")


def source_digests(names: list[str], root: Path, due: dict, without_sandbox: bool) -> dict[str, str]:
    """What a record of each assignment must have been graded against: the source notebooks, the due
    date, the course's settings; a record graded with the sandbox is not reused without it, nor the
    other way round."""
    return {a: source_digest(a, root) + f"|due {due[a]}|{settings_digest(root)}"
               + ("|without the sandbox" if without_sandbox else "") for a in names}


def reusable_records(jobs: list[Job], root: Path, src_digests: dict, version: str,
                     regrade: bool) -> tuple[dict[int, str], dict[int, Result]]:
    """(each job's submission digest, job index -> the stored result that can be merged again)."""
    digests = {i: _digest_files(j.files) + _digest_side(j.side) for i, j in enumerate(jobs)}
    reused = {}
    for i, j in enumerate(jobs):
        rec = None if regrade or j.problem else load_record(root, j, digests[i], src_digests[j.assignment], version)
        if rec is not None:
            reused[i] = rec
    return digests, reused


def progress_bar(total: int, done: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="submission", desc="grading", file=sys.stderr, initial=done)


def open_gradebook(root: Path):
    from nbgrader.api import Gradebook

    return with_gradebook_retry("opening gradebook.db", lambda: Gradebook(f"sqlite:///{root / 'gradebook.db'}"),
                                db=root / "gradebook.db")


def merge_stored(results: list[Result], root: Path) -> None:
    """Merge results graded elsewhere (the hub's grading on submit, accepted by the instructor:
    hub/course_tool.py accept-on-submit) exactly as the batch merges its own: the gradebook backed up,
    each student's rows checked before and after, autograded/ and feedback/, grades.csv."""
    for a in sorted({r.job.assignment for r in results}):
        prepare_gradebook(a, root)
    backup = backup_gradebook(root)
    gb = open_gradebook(root)
    try:
        state: dict = {}
        for r in results:
            merge_one(gb, r, root, backup, None, state)
            if r.report is None:
                raise BatchStop(f"{r.job.student}/{r.job.assignment}: {r.error}")
        with_gradebook_retry("exporting grades.csv", lambda: export_grades(gb, root, {}), db=root / "gradebook.db")
    finally:
        gb.close()


def mark_sandbox(r: Result, without: str) -> None:
    """Mark a report graded without the sandbox (the batch's --no-sandbox, or a kernel that found no
    sandbox): its record, the table and the autograded notebook carry the reason."""
    if r.report is not None:
        reason = without or sandbox_gate.unsandboxed(r.report)
        if reason:
            r.report["graded_without_sandbox"] = reason


def merge_one(gb, r: Result, root: Path, backup: Path | None, on_merged, state: dict) -> None:
    """One result into the open gradebook `gb`: that student's rows checked before and after (the
    backup is put back on a problem), then autograded/ and feedback/."""
    if gb is None or r.report is None:
        return
    who = f"{r.job.student}/{r.job.assignment}"
    why, before, _ = with_gradebook_retry("checking gradebook.db", lambda: gradebook_problem(
        root, r.job.student, None, state.get("rows", 0)))
    if why is not None:
        gb.close()
        restore_gradebook(root, backup, f"{why}, before merging {who}")

    def do():
        try:
            merge(gb, r, root)
        except Exception:
            gb.db.rollback()
            raise
    try:
        with_gradebook_retry(f"merging {who}", do, db=root / "gradebook.db")
    except BatchStop:
        raise
    except Exception as e:
        r.error, r.report = f"merging into the gradebook failed: {e}", None
        return
    why, _, total = with_gradebook_retry("checking gradebook.db", lambda: gradebook_problem(
        root, r.job.student, before, state.get("rows", 0)))
    if why is not None:
        gb.close()
        restore_gradebook(root, backup, f"{why}, after merging {who}")
    state["rows"] = total
    copy_outputs(r, root)
    if on_merged is not None:
        on_merged(r)


def _finish(results, started, usage0, workers, csv_path, graded, jobs=None) -> dict:
    wall = time.monotonic() - started
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    # Sandboxed kernels are not in RUSAGE_CHILDREN (bwrap's PID namespace): each reports its own.
    cpu += sum((nb.get("events") or {}).get("kernel_cpu_s", 0.0) or 0.0 for r in results if r.report and not r.reused
               for nb in r.report["notebooks"])
    results = sorted(results, key=lambda r: (r.job.assignment, r.job.student))
    rows = table_rows(results)
    if csv_path is not None:
        _write_csv(csv_path, rows)
    return {"results": results, "rows": rows, "wall_s": wall, "cpu_s": cpu, "workers": workers,
            "graded": graded, "reused": sum(r.reused for r in results)}


def _write_csv(path: Path, rows: list[dict]) -> None:
    files.write_csv(path, TABLE_COLUMNS, rows)


def _write_table(csv_path: Path | None, jobs: list[Job], results: dict) -> None:
    """The batch table as it stands: finished students with their rows, the others pending."""
    if csv_path is None:
        return
    rows = []
    for i, j in enumerate(jobs):
        if i in results:
            rows += table_rows([results[i]])
        else:
            rows.append({"student": j.student, "assignment": j.assignment, "notebook": "*", "points": "",
                         "max_points": "", "status": "pending", "reason": "not graded yet", "seconds": "",
                         "kernel_cpu_s": "", "late_penalty": "", "sandbox": ""})
    rows.sort(key=lambda r: (r["assignment"], r["student"]))
    _write_csv(csv_path, rows)


def table_rows(results: list[Result]) -> list[dict]:
    rows = []
    for r in results:
        base = {"student": r.job.student, "assignment": r.job.assignment}
        unmatched = "; ".join(r.job.notes)
        if r.report is None:
            rows.append(dict(base, notebook="*", points="", max_points="", status="failed",
                             reason="; ".join(x for x in (r.error, unmatched) if x), seconds=round(r.seconds, 1),
                             kernel_cpu_s="", late_penalty="", sandbox=""))
            continue
        without = sandbox_gate.unsandboxed(r.report)
        base["sandbox"] = f"none: {without}" if without else "bubblewrap"
        if r.report.get("feedback_error"):  # graded, but the student's feedback page could not be made
            unmatched = "; ".join(x for x in (unmatched, f"no feedback page: {r.report['feedback_error']}") if x)
        for nb in r.report["notebooks"]:
            status = "review" if nb["needs_manual_review"] else nb["status"]
            reason = "; ".join(nb["review_reasons"]) if nb["needs_manual_review"] else (nb["reason"] or "")
            if nb["needs_manual_review"] and nb.get("points_held") is not None:
                reason = f"{nb['points_held']:g} of {nb['max_points']:g} automatic points held until a person " \
                         f"confirms them: {reason}"
            notes = "; ".join(nb.get("review_notes", []))
            ev = nb.get("events") or {}
            extra = [k for k in ("notebook_timeout", "kernel_died") if ev.get(k)]
            reason = "; ".join(x for x in (reason, ", ".join(extra), ("look at: " + notes) if notes else "",
                                           unmatched) if x)
            rows.append(dict(base, notebook=nb["notebook"], max_points=nb["max_points"],
                             points="" if nb["status"] == "missing" else nb["points"],  # missing, not 0
                             status=status, reason=reason, seconds=round(r.seconds, 1),
                             kernel_cpu_s=round(ev.get("kernel_cpu_s", 0.0) or 0.0, 1),
                             late_penalty=nb.get("late_penalty") or ""))
    return rows


def summary(batch: dict) -> str:
    results = batch["results"]
    failed = [r for r in results if r.report is None]
    review = [r for r in results if r.report and r.report["needs_manual_review"]]
    missing = [(r, nb) for r in results if r.report for nb in r.report["notebooks"] if nb["status"] == "missing"]
    n = len(results)
    graded = batch.get("graded", n)
    unsandboxed = [r for r in results if sandbox_gate.unsandboxed(r.report)]
    lines = [f"graded {n - len(failed)} of {n} submissions in {batch['wall_s']:.0f} s with {batch['workers']} workers "
             f"({60 * graded / max(batch['wall_s'], 1e-9):.1f} per minute); CPU time {batch['cpu_s']:.0f} s, "
             f"CPU / wall = {batch['cpu_s'] / max(batch['wall_s'], 1e-9):.2f}"]
    if unsandboxed:
        lines.insert(0, f"WITHOUT THE SANDBOX: {len(unsandboxed)} of {n} submissions were graded without it "
                        f"({sandbox_gate.unsandboxed(unsandboxed[0].report)}); their feedback pages and the "
                        f"table's sandbox column say so")
    lines += batch.get("notes", [])  # the fan-out's: shards, lost workers, resends (fanout.py)
    if batch.get("reused"):
        lines.append(f"reused {batch['reused']} results of an earlier run (unchanged submissions); "
                     f"graded {graded} now (--regrade grades everyone again)")
    fresh = [r for r in results if not r.reused]
    if fresh:
        secs = sorted(r.seconds for r in fresh)
        lines.append(f"seconds per submission: median {secs[len(secs) // 2]:.1f}, max {secs[-1]:.1f}")
    for r in failed:
        lines.append(f"FAILED  {r.job.student}/{r.job.assignment}: {r.error}")
    for r in results:
        for note in r.job.notes:
            lines.append(f"file    {r.job.student}/{r.job.assignment}: {note}")
        if r.report and r.report.get("feedback_error"):
            lines.append(f"NO FEEDBACK {r.job.student}/{r.job.assignment}: nbgrader generate_feedback failed "
                         f"({r.report['feedback_error'][:200]})")
    for r, nb in missing:
        lines.append(f"missing {r.job.student}/{r.job.assignment}/{nb['notebook']}: not handed in ({nb['reason']})")
    for r in review:
        reasons = [x for nb in r.report["notebooks"] for x in nb["review_reasons"]]
        lines.append(f"REVIEW  {r.job.student}/{r.job.assignment}: 0 until reviewed: {'; '.join(reasons)}")
    return "\n".join(lines)


