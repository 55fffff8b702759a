"""`make bench-grading`: how fast the trusted grader grades, beside plain `nbgrader autograde`.

    python -m autograder.bench_grading [--workers N] [--modes cold,warm] [--no-plain] [--json FILE] [--keep DIR]

A fixed set of corpus submissions (`BENCH_ENTRIES`: per assignment the reference, the untouched
release, a correct answer written differently and a wrong one; autograder/corpus builds them from the
current notebooks) is graded in one run, one grader after the other, with the same number of workers
(default: one per core):

1. by this grader, *cold*: the batch of autograder/batch/run.py with LLMRL_GRADE_WARM=0, every
   grading process and kernel started afresh (the grader as it was before its warm workers);
2. by this grader, *warm*: the same batch as `make autograde` runs it, with its warm workers
   (autograder/batch/warm_workers.py: grading processes forked from a server that has imported the
   grader, kernels forked from zygotes into sandboxes of their own);
3. by plain nbgrader: `nbgrader autograde ASSIGNMENT --student S` per submission with nbgrader's own
   preprocessors (one kernel, no sandbox, no feedback page), one course folder per worker so that no
   two processes share a gradebook. nbgrader runs with the start-up speed-ups the course's grader
   has (autograder/course/nbgrader_app.py), so the comparison is of the grading, not of jsonschema.

Both of this grader's runs use the sandbox, the two runs, the answer kernel and the runtime watch,
and write each student's feedback page; neither runs the self-check (every notebook's reference is
one of the submissions).

It prints, for each, submissions per minute per core (submissions / grading wall minutes / workers,
the workers being the cores) and the median seconds a submission took with the workers running side by
side, the ratios, and where this grader's time goes: the worker's start, nbgrader's two passes, the
kernels' start, the feedback run, the answer kernel, the tests' kernel, the graded calls under the
watch, the watch's probe, the feedback page, and what bubblewrap's set-up costs per kernel. The
parts overlap (the feedback run runs beside the grading run), so they say where the time goes, not
how it adds up. Timings are a benchmark, never a test: a loaded machine shows up as a lower rate for
every grader, which is why they run in one go and the ratios are the figures to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HOME = Path(__file__).resolve().parents[1]  # the folder holding autograder/
# The corpus entries graded, per assignment (the notebook with the tasks: lab21's projects notebook
# is written answers only). Fixed, so that figures of different days compare. lab19's `rewritten` is
# left out: its best_of_n_stats is quadratic in Python loops, so the notebook's experiment with it runs
# into the 300 s cell limit in every grader (plain nbgrader's too): its 300 s would be the figure.
BENCH_ENTRIES = {"lab11": ("reference", "untouched", "rewritten", "wrong-a"),
                 "lab19": ("reference", "untouched", "wrong-a", "wrong-b"),
                 "lab21": ("reference", "untouched", "rewritten", "wrong-a"),
                 "hw4": ("reference", "untouched", "rewritten", "wrong-a")}
SKIP_NOTEBOOKS = {"projects"}
# The parts of one submission's grading, as the reports name them (one_notebook.py's stages_s and the
# two runs' events["timings_s"], tworun.py), with the words the table prints.
STAGES = (("worker_start", "worker process start (python, imports) and its report"),
          ("course", "scratch course, submission read and checked"),
          ("nbgrader_restore", "nbgrader pass 1 (restore locked cells)"),
          ("kernels", "the two runs (all kernels, side by side)"),
          ("nbgrader_score", "nbgrader pass 2 (scores)"),
          ("feedback_html", "feedback page and autograded notebook"))
TIMINGS = (("kernel_start", "kernel start (launch to first answer, all kernels)"),
           ("feedback_cells", "feedback run: the notebook's cells"),
           ("answer_cells", "answer kernel: the student's cells"),
           ("answer_setup", "answer kernel: grader code and watch loaded"),
           ("probe", "runtime watch: the probe of each graded function"),
           ("tests_setup", "tests' kernel: grader code and set-up cells"),
           ("tests", "tests' kernel: the test cells"),
           ("calls", "graded calls in the answer kernel, under the watch"),
           ("kernel_shutdown", "kernels shut down"))


class BenchError(Exception):
    """The benchmark cannot run as asked (one line)."""


# ----------------------------------------------------------------------------- the submissions

def corpus_submissions(entries: dict | None = None, root: Path = HOME) -> list:
    """The corpus's Built entries named by `entries` (assignment -> entry names), in a fixed order."""
    from autograder import corpus

    entries = BENCH_ENTRIES if entries is None else entries
    available = corpus.available(root)
    missing = [a for a in entries if a not in available]
    if missing:
        raise BenchError(f"no corpus (spec or notebooks) for {', '.join(missing)}: run `make build release` first")
    chosen = []
    for b in corpus.build_all(sorted(entries), root):
        if b.entry.name in entries[b.assignment] and b.entry.notebook not in SKIP_NOTEBOOKS:
            chosen.append(b)
    found = {(b.assignment, b.entry.name) for b in chosen}
    absent = [f"{a}/{n}" for a, names in entries.items() for n in names if (a, n) not in found]
    if absent:
        raise BenchError(f"the corpus has no entries {', '.join(absent)}")
    return chosen


def write_course(course: Path, source_root: Path, submissions: dict) -> list[tuple[str, str, list[Path]]]:
    """A course folder with source/ of the assignments and `submissions` ((assignment, student) ->
    {file name: text}) under submitted/; returns (assignment, student, files) in a fixed order."""
    out = []
    for a in sorted({a for a, _ in submissions}):
        shutil.copytree(source_root / "source" / a, course / "source" / a,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "artifacts"))
    for (a, student), texts in sorted(submissions.items()):
        folder = course / "submitted" / student / a
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (folder / name).write_text(text)
        out.append((a, student, sorted(folder.glob("*.ipynb"))))
    return out


# ----------------------------------------------------------------------------- this grader

def run_trusted(course: Path, subs: list[tuple[str, str, list[Path]]], workers: int) -> dict:
    """The batch grader on the course's submissions: {"results": [Result], "wall_s", "setup_s"}."""
    from autograder.batch import run as batch

    jobs = [batch.Job(a, student, files) for a, student, files in subs]
    started = time.monotonic()
    out = batch.run_batch(sorted({a for a, _, _ in subs}), course, workers=workers, jobs=jobs, check=False,
                          csv_path=course / "batch_grades.csv", progress=False)
    ended = time.monotonic()
    results = out["results"]
    bad = [f"{r.job.student}: {r.error}" for r in results if r.report is None]
    if bad:
        raise BenchError(f"this grader failed on {len(bad)} submission(s): {bad[0]}")
    first = min(r.started for r in results)
    last = max(r.ended for r in results)
    return {"results": results, "wall_s": last - first, "setup_s": first - started, "batch_s": ended - started}


# ----------------------------------------------------------------------------- plain nbgrader

PLAIN_CONFIG = """\
# Plain nbgrader (autograder/bench_grading.py): nbgrader's own autograde preprocessors, one kernel, no sandbox.
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = "bench"
c.Execute.timeout = 300
c.Execute.startup_timeout = 120
c.Execute.extra_arguments = ["--InteractiveShell.xmode=Minimal"]
"""
# nbgrader's command line with the start-up speed-ups of autograder/course/nbgrader_app.py.
PLAIN_MAIN = ("import sys; sys.path.insert(0, {home!r}); import autograder.course.nbgrader_app; "
              "from nbgrader.apps.nbgraderapp import main; sys.argv[0] = 'nbgrader'; main()")


def _plain_course(course: Path, assignments: list[str]) -> None:
    """Record the assignments in the course's gradebook (nbgrader generate_assignment, with the course's
    settings for its notebooks' mark schemes), then plain settings for autograde."""
    from autograder.course import nbgrader_app

    for a in assignments:
        nbgrader_app.record_assignment(a, course)
    (course / "nbgrader_config.py").write_text(PLAIN_CONFIG.format(root=str(course)))


def _nbgrader(course: Path, args: list[str], tries: int = 2) -> float:
    """Seconds of one plain nbgrader command. A failure is tried once more (the two workers' kernels
    share this machine's caches and home, unsandboxed; hw4's rewritten answer failed so once in two
    benchmarks on 2026-12-08 and passed when run again); it is said on stderr with nbgrader's own
    error, and a second failure stops the benchmark with it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMRL_SANDBOX", "NBGRADER_"))}
    for attempt in range(1, tries + 1):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-c", PLAIN_MAIN.format(home=str(HOME)), *args], cwd=course,
                              env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode == 0:
            return time.monotonic() - started
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        # nbgrader's last line only says "see the above traceback": keep the lines that name the error
        said = [ln.strip() for ln in lines if re.search(r"Error|error|Exception|Traceback|failed", ln)][:6]
        why = " | ".join(dict.fromkeys(said + lines[-1:]))[:1500] or f"exit status {proc.returncode}"
        if attempt == tries:
            raise BenchError(f"plain nbgrader {' '.join(args)} failed {tries} times; the last: {why}")
        print(f"note: plain nbgrader {' '.join(args)} failed ({why}); trying it once more", file=sys.stderr)
    raise AssertionError("unreachable")


def run_plain(course: Path, subs: list[tuple[str, str, list[Path]]], workers: int) -> dict:
    """`nbgrader autograde A --student S` for every submission, `workers` at a time, each worker on a
    course folder of its own (a copy of `course`, its gradebook included)."""
    _plain_course(course, sorted({a for a, _, _ in subs}))
    copies = []
    for w in range(workers):
        c = course.parent / f"{course.name}-worker{w}"
        shutil.copytree(course, c)
        (c / "nbgrader_config.py").write_text(PLAIN_CONFIG.format(root=str(c)))
        copies.append(c)
    queues = [[s for i, s in enumerate(subs) if i % workers == w] for w in range(workers)]

    def work(w):
        return [(a, student, _nbgrader(copies[w], ["autograde", a, "--student", student, "--force"]))
                for a, student, _ in queues[w]]

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = [x for part in pool.map(work, range(workers)) for x in part]
    wall = time.monotonic() - started
    return {"seconds": [s for _, _, s in done], "wall_s": wall, "scores": _plain_scores(copies, subs)}


def _plain_scores(copies: list[Path], subs) -> dict:
    from nbgrader.api import Gradebook

    scores = {}
    for c in copies:
        with Gradebook(f"sqlite:///{c / 'gradebook.db'}") as gb:
            for a, student, _ in subs:
                try:
                    scores[student] = float(gb.find_submission(a, student).score)
                except Exception:  # this copy did not grade that student
                    continue
    return scores


# ----------------------------------------------------------------------------- the sandbox alone

def sandbox_setup_seconds(repeat: int = 5) -> float | None:
    """Median seconds bubblewrap takes to set up a kernel's sandbox and run /usr/bin/true in it, less
    the same command without it (None where bubblewrap does not work)."""
    from autograder.sandbox import bubblewrap as sandbox
    from autograder.sandbox import safe_files as files

    if sandbox.bwrap_status() != "ok":
        return None
    d = files.scratch_dir("bench")
    try:
        (d / "work").mkdir()
        argv = sandbox.bwrap_argv(d / "work", d, None) + ["/usr/bin/true"]

        def once(cmd):
            t = time.monotonic()
            subprocess.run(cmd, check=True, capture_output=True)
            return time.monotonic() - t

        with_bwrap = statistics.median(once(argv) for _ in range(repeat))
        without = statistics.median(once(["/usr/bin/true"]) for _ in range(repeat))
        return max(0.0, with_bwrap - without)
    finally:
        files.rmtree(d)


# ----------------------------------------------------------------------------- the figures

def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def per_minute_per_core(n: int, wall_s: float, cores: int) -> float:
    if wall_s <= 0 or cores <= 0:
        raise ValueError(f"wall_s and cores must be positive (got {wall_s}, {cores})")
    return n / (wall_s / 60) / cores


def breakdown(results: list) -> dict[str, float | None]:
    """Median seconds per submission of each part (STAGES, then TIMINGS summed over a report's notebooks)."""
    parts: dict[str, list[float]] = {k: [] for k, _ in STAGES + TIMINGS}
    for r in results:
        rep = r.report or {}
        stages = rep.get("stages_s") or {}
        parts["worker_start"].append(r.seconds - float(rep.get("seconds") or 0.0))
        for k, _ in STAGES[1:]:
            parts[k].append(float(stages.get(k, 0.0)))
        for k, _ in TIMINGS:
            parts[k].append(sum(float((nb.get("events") or {}).get("timings_s", {}).get(k, 0.0))
                                for nb in rep.get("notebooks", [])))
    return {k: _median(v) for k, v in parts.items()}


def _trusted_figures(trusted: dict, workers: int) -> dict:
    results = trusted["results"]
    n, secs = len(results), [r.seconds for r in results]
    return {"wall_s": round(trusted["wall_s"], 2), "setup_s": round(trusted["setup_s"], 1),
            "per_minute_per_core": round(per_minute_per_core(n, trusted["wall_s"], workers), 2),
            "median_s": round(_median(secs), 1), "max_s": round(max(secs), 1),
            "warm_workers": sum(bool(r.report.get("warm_worker")) for r in results),
            "kernels_per_submission": _median(_kernels(r.report) for r in results),
            "warm_kernels_per_submission": _median(sum((nb.get("events") or {}).get("warm_kernels", 0)
                                                       for nb in r.report["notebooks"]) for r in results),
            "kernel_cpu_s": round(_median(sum((nb.get("events") or {}).get("kernel_cpu_s", 0.0) or 0.0
                                              for nb in r.report["notebooks"]) for r in results), 1),
            "parts_median_s": {k: (None if v is None else round(v, 2)) for k, v in breakdown(results).items()},
            "points": {r.job.student: r.report["points"] for r in results},
            "seconds": {r.job.student: round(r.seconds, 1) for r in results},
            "load_after": _load(trusted)}


def _load(run: dict) -> float | None:
    return None if run.get("load_after") is None else round(run["load_after"], 1)


def summarize(trusted: dict, plain: dict | None, workers: int, sandbox_s: float | None = None) -> dict:
    """The benchmark's figures. `trusted`: mode ("cold": every process and kernel started afresh, as
    before the warm workers; "warm": autograder/batch/warm_workers.py) -> run_trusted's result;
    `plain`: run_plain's result or None."""
    if not trusted:
        raise ValueError("no run of this grader to summarize")
    n = {len(t["results"]) for t in trusted.values()}
    if len(n) != 1:
        raise ValueError(f"the runs graded different numbers of submissions: {sorted(n)}")
    out = {"submissions": n.pop(), "workers": workers,
           "trusted": {mode: _trusted_figures(t, workers) for mode, t in trusted.items()},
           "sandbox_setup_s": None if sandbox_s is None else round(sandbox_s, 3)}
    if plain is not None:
        m = len(plain["seconds"])
        out["plain"] = {"wall_s": round(plain["wall_s"], 2),
                        "per_minute_per_core": round(per_minute_per_core(m, plain["wall_s"], workers), 2),
                        "median_s": round(_median(plain["seconds"]), 1), "max_s": round(max(plain["seconds"]), 1),
                        "points": plain.get("scores", {}), "load_after": _load(plain)}
        out["plain_over"] = {mode: round(out["plain"]["per_minute_per_core"] / f["per_minute_per_core"], 2)
                             for mode, f in out["trusted"].items()}
    if {"cold", "warm"} <= set(trusted):
        t = out["trusted"]
        out["warm_over_cold"] = round(t["warm"]["per_minute_per_core"] / t["cold"]["per_minute_per_core"], 2)
    return out


def _kernels(report: dict) -> int:
    """How many kernels one submission's grading started (the feedback run's, the tests', the answer kernels)."""
    n = 0
    for nb in report.get("notebooks", []):
        ev = nb.get("events") or {}
        if ev.get("timings_s", {}).get("kernel_start") is None:
            continue
        n += (1 if "feedback_cells" in ev.get("timings_s", {}) else 0) + 2 + int(ev.get("restarts") or 0) + \
            int(ev.get("tests_kernel_restarts") or 0)
    return n


MODES = {"cold": "this grader, cold", "warm": "this grader, warm"}


def _load_note(figures: dict) -> str:
    load = figures.get("load_after")
    return "" if load is None else f" (load average at its end {load:.1f})"


def table(fig: dict) -> str:
    w, lines = fig["workers"], []
    lines.append(f"{fig['submissions']} submissions, {w} workers on {os.cpu_count()} cores "
                 f"(load average before: {fig.get('load', '?')})")
    for mode, t in fig["trusted"].items():
        lines.append(f"  {MODES.get(mode, mode) + ':':<24}{t['per_minute_per_core']:5.2f} per minute per core; median "
                     f"{t['median_s']:.1f} s a submission (max {t['max_s']:.1f}); grading {t['wall_s']:.0f} s after "
                     f"{t['setup_s']:.0f} s of set-up; {t['warm_workers']} forked by warm workers{_load_note(t)}")
    if "plain" in fig:
        p = fig["plain"]
        lines.append(f"  {'plain nbgrader:':<24}{p['per_minute_per_core']:5.2f} per minute per core; median "
                     f"{p['median_s']:.1f} s a submission (max {p['max_s']:.1f}); grading {p['wall_s']:.0f} s"
                     f"{_load_note(p)}")
        for mode, r in fig["plain_over"].items():
            lines.append(f"  plain nbgrader / {MODES.get(mode, mode)}: {r:.2f}x")
    if "warm_over_cold" in fig:
        lines.append(f"  warm / cold: {fig['warm_over_cold']:.2f}x")
    modes = list(fig["trusted"])
    lines.append("where this grader's time goes (median seconds per submission; the parts overlap):")
    lines.append(f"  {'':<62} " + " ".join(f"{m:>5}" for m in modes))

    def row(label, key, indent):
        vals = " ".join(_fmt(fig["trusted"][m]["parts_median_s"].get(key)) for m in modes)
        lines.append(f"{' ' * indent}{label:<{64 - indent}} {vals}")

    for k, label in STAGES:
        row(label, k, 2)
        if k == "kernels":
            for kk, ll in TIMINGS:
                row(ll, kk, 4)
    for m in modes:
        t = fig["trusted"][m]
        lines.append(f"  {m}: kernels started per submission {t['kernels_per_submission']} "
                     f"({t['warm_kernels_per_submission']} of them warm); CPU seconds in them {t['kernel_cpu_s']}")
    if fig.get("sandbox_setup_s") is not None:
        lines.append(f"  bubblewrap's set-up of one kernel's sandbox: {1000 * fig['sandbox_setup_s']:.0f} ms")
    if fig.get("points_differ"):
        lines.append(f"  POINTS DIFFER: {fig['points_differ']}")
    return "\n".join(lines)


def _fmt(x) -> str:
    return "    -" if x is None else f"{x:5.1f}"


def _with_warm(mode: str):
    """The environment of one mode: LLMRL_GRADE_WARM=0 for "cold"."""
    import contextlib

    @contextlib.contextmanager
    def env():
        old = os.environ.get("LLMRL_GRADE_WARM")
        os.environ["LLMRL_GRADE_WARM"] = "0" if mode == "cold" else "1"
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("LLMRL_GRADE_WARM", None)
            else:
                os.environ["LLMRL_GRADE_WARM"] = old
    return env()


def run(submissions: list, work: Path, workers: int, modes=("cold", "warm"), plain: bool = True,
        source_root: Path = HOME) -> dict:
    """Grade `submissions` ((assignment, student, {file: text})) with this grader in each of `modes`
    and with plain nbgrader, one after the other, under `work`; the figures."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1 (got {workers})")
    if not submissions:
        raise ValueError("no submissions to grade")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"modes must be some of {', '.join(MODES)} (got {', '.join(modes) or 'none'})")
    load = os.getloadavg()[0]
    texts = {(a, s): files for a, s, files in submissions}
    trusted = {}
    for mode in modes:
        course = work / f"trusted-{mode}"
        subs = write_course(course, source_root, texts)
        with _with_warm(mode):
            trusted[mode] = run_trusted(course, subs, workers)
        trusted[mode]["load_after"] = os.getloadavg()[0]  # the last minute's: what the run shared the cores with
        print(table(summarize(trusted, None, workers)), file=sys.stderr, flush=True)  # kept if a later run fails
    plain_result = None
    if plain:
        plain_course = work / "plain"
        plain_result = run_plain(plain_course, write_course(plain_course, source_root, texts), workers)
        plain_result["load_after"] = os.getloadavg()[0]
    fig = summarize(trusted, plain_result, workers, sandbox_setup_seconds())
    fig["load"] = round(load, 1)
    points = {m: t["points"] for m, t in fig["trusted"].items()}
    if plain_result is not None:
        points["plain"] = fig["plain"]["points"]
    first = next(iter(points.values()))
    # the same submission scores the same with every grader (honest ones only are in the set)
    fig["points_differ"] = {s: {m: p.get(s) for m, p in points.items()} for s in first
                            if len({None if p.get(s) is None else round(p[s], 6) for p in points.values()}) > 1}
    return fig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.bench_grading", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="workers for every grader (default: cores)")
    p.add_argument("--modes", default="cold,warm", help="this grader's runs: cold, warm or both (default)")
    p.add_argument("--no-plain", action="store_true", help="this grader only")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--keep", type=Path, help="keep the scratch courses here")
    args = p.parse_args(argv)
    try:
        built = corpus_submissions()
        subs = [(b.assignment, b.student, b.files) for b in built]
        work = args.keep or Path(tempfile.mkdtemp(prefix="llmrl-bench-"))
        try:
            fig = run(subs, work, args.workers, modes=tuple(m for m in args.modes.split(",") if m),
                      plain=not args.no_plain)
        finally:
            if args.keep is None:
                shutil.rmtree(work, ignore_errors=True)
    except (BenchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(table(fig))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(fig, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
