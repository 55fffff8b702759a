"""How many of the corpus's wrong answers the visible tests catch, and how many all tests catch.

    python -m autograder.corpus.catch_rates [ASSIGNMENT ...] [--messages]      (make catch-rates)

A *wrong answer* is one edit of a corpus entry named `wrong-*` (autograder/corpus/<assignment>.py):
one task's solution replaced by a realistic mistake. Each is applied ALONE to the reference
notebook (the release with the source's solutions filled in), and the notebook is evaluated twice
per test cell: with the release's test cell (the visible tests a student sees) and with the
source's (visible and hidden tests, what the grader runs). A wrong answer is *caught* by a test
cell when that cell raises.

Entries named `rewritten` or `right-*` are alternative correct answers: every test cell must pass
with all of their edits applied. The reference itself must pass every test cell, which also checks
that no test depends on a cell this evaluator skips.

No nbgrader and no Jupyter kernel: one Python process per notebook executes the set-up cell (the
first code cell: imports), then forks once per variant; the child executes the solution cells and
the test cells in notebook order (experiment cells are skipped; a wrong answer runs only its own
task's test cells) and reports which test cells raised, with the exception's first line. A whole
assignment takes seconds to a minute. This is a measuring instrument for the tests' strength, not a grader: it trusts the corpus's code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from autograder import corpus

ROOT = corpus.ROOT
VARIANT_TIMEOUT_S = 120  # one variant (all test cells of one notebook); a hung answer counts as caught


def _src(cell) -> str:
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


@dataclass
class Variant:
    """One notebook to evaluate: the reference with some solution cells replaced."""

    assignment: str
    notebook: str
    kind: str                     # "reference", "wrong", "right" or "other" (measured, no expectation here)
    entry: str                    # corpus entry name
    task: str | None              # the solution cell a wrong answer replaces
    what: str                     # one line: what the entry says
    solutions: dict               # grade_id -> code of every solution cell
    holdout: str = ""             # "" (corpus), "A" or "B" (the hold-out sets: corpus._holdout_<a>, corpus._holdout2)
    own_tests: tuple = ()         # the test cells of the task it replaces (one per concern)
    result: dict = field(default_factory=dict)  # test gid -> {"visible": msg|None, "full": msg|None}

    @property
    def label(self) -> str:
        return f"{self.notebook}:{self.entry}" + (f"/{self.task}" if self.task else "")


@dataclass
class Plan:
    assignment: str
    notebook: str
    setup: str                    # the first code cell
    order: list                   # [("solution", gid) | ("test", gid)] in notebook order
    visible: dict                 # test gid -> release test source
    full: dict                    # test gid -> source test source
    points: dict                  # test gid -> points
    variants: list
    tasks: dict = field(default_factory=dict)   # solution gid -> [its test gids], one per concern


def _solutions_of(nb) -> dict:
    return {_meta(c)["grade_id"]: _src(c) for c in nb["cells"]
            if c["cell_type"] == "code" and _meta(c).get("solution")}


def entry_solutions(assignment: str, entry, root: Path = ROOT) -> dict:
    """grade_id -> code of every solution cell once the entry's edits are applied."""
    return _solutions_of(json.loads(corpus.build_entry(assignment, entry, root).files[f"{entry.notebook}.ipynb"]))


def plan(assignment: str, root: Path = ROOT, holdout: bool = True) -> list[Plan]:
    """The variants of every notebook of one assignment, built from its corpus spec (and, with
    `holdout`, its hold-out set)."""
    spec = corpus.load_spec(assignment)
    held = corpus.holdout(assignment) if holdout else []
    plans = {}
    for nbname in sorted({e.notebook for e in spec.ENTRIES}):
        source = json.loads((root / "source" / assignment / f"{nbname}.ipynb").read_text())
        release = json.loads((root / "release" / assignment / f"{nbname}.ipynb").read_text())
        rel_tests = {_meta(c)["grade_id"]: _src(c) for c in release["cells"]
                     if c["cell_type"] == "code" and _meta(c).get("grade") and not _meta(c).get("solution")}
        order, full, points = [], {}, {}
        setup = None
        for c in source["cells"]:
            if c["cell_type"] != "code":
                continue
            m = _meta(c)
            if setup is None and not m:
                setup = _src(c)
            elif m.get("solution"):
                order.append(("solution", m["grade_id"]))
            elif m.get("grade"):
                order.append(("test", m["grade_id"]))
                full[m["grade_id"]] = _src(c)
                points[m["grade_id"]] = float(m.get("points", 0))
        if not order:  # a notebook of written answers only (lab21 projects): nothing to measure
            continue
        reference = corpus.build_entry(assignment, corpus.standard_entries(nbname)[0], root)
        ref_solutions = _solutions_of(json.loads(reference.files[f"{nbname}.ipynb"]))
        plans[nbname] = Plan(assignment, nbname, setup or "", order, rel_tests, full, points,
                             [Variant(assignment, nbname, "reference", "reference", None,
                                      "the source's own solutions", ref_solutions)],
                             corpus.task_tests(source))
    for e in spec.ENTRIES + held:
        if e.notebook not in plans:
            continue
        is_held = corpus.holdout_set(e.name) if e in held else ""
        p = plans[e.notebook]
        ref = p.variants[0].solutions
        if e.name.startswith("wrong-"):
            for i, edit in enumerate(e.edits):
                one = corpus.copy_entry(e, name=f"{e.name}-{i}", edits=[edit], lose=())
                sols = _solutions_of(json.loads(corpus.build_entry(assignment, one, root).files[f"{e.notebook}.ipynb"]))
                changed = [g for g in ref if sols.get(g) != ref[g]]
                if len(changed) != 1:
                    raise corpus.SpecError(f"corpus {assignment}:{e.name}: edit {i + 1} changes {changed or 'nothing'}; "
                                           "a wrong answer replaces exactly one solution cell")
                p.variants.append(Variant(assignment, e.notebook, "wrong", e.name, changed[0], e.what, sols,
                                          is_held, tuple(p.tasks.get(changed[0], ()))))
        elif e.name == "rewritten" or e.name.startswith("right-"):
            sols = _solutions_of(json.loads(corpus.build_entry(assignment, e, root).files[f"{e.notebook}.ipynb"]))
            p.variants.append(Variant(assignment, e.notebook, "right", e.name, None, e.what, sols, is_held))
    return list(plans.values())


# ----------------------------------------------------------------------------- the worker process

_WORKER = r'''
import json, os, signal, sys, traceback
job = json.load(sys.stdin)
ns = {"__name__": "__main__"}
exec(compile(job["setup"], "<set-up cell>", "exec"), ns)

def first_line(e):
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300]}" if msg else type(e).__name__

def run(variant):
    g = dict(ns)
    out = {}
    for kind, gid in job["order"]:
        if kind == "solution":
            try:
                exec(compile(variant["solutions"][gid], f"<{gid}>", "exec"), g)
            except BaseException as e:
                out["_solution_" + gid] = first_line(e)
            continue
        if variant["tests"] is not None and gid not in variant["tests"]:
            continue
        res = {}
        for which in ("visible", "full"):
            try:
                exec(compile(job[which][gid], f"<{gid} {which}>", "exec"), g)
                res[which] = None
            except BaseException as e:
                res[which] = first_line(e)
        out[gid] = res
    return out

results = []
for variant in job["variants"]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            data = json.dumps(run(variant)).encode()
        except BaseException as e:
            data = json.dumps({"_crash": first_line(e)}).encode()
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    def _timeout(*_):
        os.kill(pid, signal.SIGKILL)
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(job["timeout"])
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    signal.alarm(0)
    results.append(json.loads(data) if data else {"_crash": "timeout or killed"})
with open(job["out"], "w") as f:
    json.dump(results, f)
'''


def evaluate(p: Plan, python: str = sys.executable, timeout: int = VARIANT_TIMEOUT_S) -> Plan:
    """Run every variant of one notebook; fills each variant's `result`."""
    import tempfile

    job = {"setup": p.setup, "order": p.order, "visible": p.visible, "full": p.full, "timeout": timeout,
           # a wrong answer runs only its own task's test cells (what it is measured by); the others all
           "variants": [{"solutions": v.solutions, "tests": list(v.own_tests) if v.kind == "wrong" else None}
                        for v in p.variants]}
    env = dict(os.environ, LLMRL_FAST="1", MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("NBGRADER_EXECUTION", None)
    with tempfile.TemporaryDirectory(prefix="llmrl-catch-") as tmp:
        job["out"] = str(Path(tmp) / "results.json")
        proc = subprocess.run([python, "-c", _WORKER], input=json.dumps(job), capture_output=True, text=True,
                              cwd=tmp, env=env, timeout=timeout * (len(p.variants) + 2))
        if proc.returncode != 0 or not Path(job["out"]).exists():
            raise RuntimeError(f"{p.assignment}/{p.notebook}: the evaluator failed:\n{proc.stderr[-3000:]}")
        results = json.loads(Path(job["out"]).read_text())
    for v, r in zip(p.variants, results):
        v.result = r
    return p


def failed(v: Variant, test: str, which: str) -> str | None:
    """The failure message of one test cell for one variant (None: it passed)."""
    if "_crash" in v.result:
        return v.result["_crash"]
    return (v.result.get(test) or {}).get(which)


def caught(v: Variant, which: str) -> str | None:
    """The first failure message among the test cells of the variant's own task (None: all passed)."""
    for t in v.own_tests:
        msg = failed(v, t, which)
        if msg:
            return msg
    return None


def concerns_failed(v: Variant, which: str) -> list[str]:
    """The concerns (test_<task>_<concern>) of its own task whose test cell fails."""
    return [corpus.concern_of(t, v.task) for t in v.own_tests if failed(v, t, which)]


def _in_set(v: Variant, holdout) -> bool:
    """holdout: False (the corpus), True (both hold-out sets), "A" or "B" (one of them), None (all)."""
    if holdout is None:
        return True
    if holdout is True or holdout is False:
        return bool(v.holdout) == holdout
    return v.holdout == holdout


def _wrong(plans: list[Plan], holdout) -> list[Variant]:
    return [v for p in plans for v in p.variants if v.kind == "wrong" and _in_set(v, holdout)]


def rates(plans: list[Plan], holdout=False) -> dict:
    """{"visible": (caught, n), "full": (caught, n)} over the wrong answers (the corpus's by default;
    holdout="A" or "B": one hold-out set's, True: both, None: everything), each caught when a test
    cell of its own task fails."""
    wrong = _wrong(plans, holdout)
    vis = sum(caught(v, "visible") is not None for v in wrong)
    full = sum(caught(v, "full") is not None for v in wrong)
    return {"visible": (vis, len(wrong)), "full": (full, len(wrong))}


def by_concern(plans: list[Plan], holdout: bool | None = None) -> dict:
    """{(assignment, concern): {"visible": k, "full": k, "n": n}}: n wrong answers whose task has a
    test cell of that concern, k of them failing it."""
    out: dict = {}
    for p in plans:
        for v in p.variants:
            if v.kind != "wrong" or not _in_set(v, holdout):
                continue
            for t in v.own_tests:
                d = out.setdefault((p.assignment, corpus.concern_of(t, v.task)), {"visible": 0, "full": 0, "n": 0})
                d["n"] += 1
                d["visible"] += failed(v, t, "visible") is not None
                d["full"] += failed(v, t, "full") is not None
    return out


def problems(plans: list[Plan]) -> dict[str, list[str]]:
    """What breaks the contract, by kind: "broken" (a variant crashed or names no test cell),
    "correct_fails" (the reference or an alternative correct answer, hold-out ones included, fails a
    test cell), "uncaught" (a corpus wrong answer passes its own task's tests, hidden ones included;
    the hold-out set is measured, not required)."""
    out = {"broken": [], "correct_fails": [], "uncaught": []}
    for p in plans:
        for v in p.variants:
            if v.kind == "other":
                continue
            if "_crash" in v.result:
                out["broken"].append(f"{v.label}: {v.result['_crash']}")
            elif v.kind in ("reference", "right"):
                for t in p.full:
                    for which in ("visible", "full"):
                        if failed(v, t, which):
                            out["correct_fails"].append(f"{v.label} fails {t} ({which}): {failed(v, t, which)}")
            elif not v.own_tests:
                out["broken"].append(f"{v.label}: no test cell for the task it replaces ({v.task})")
            elif caught(v, "full") is None and not v.holdout:
                out["uncaught"].append(f"{v.label} ({v.what}): passes {', '.join(v.own_tests)}, hidden tests included")
    return out


def table(plans: list[Plan], messages: bool = False) -> str:
    lines = []
    for p in plans:
        for held, name in ((False, "corpus"), ("A", "hold-out A"), ("B", "hold-out B")):
            wrong = [v for v in p.variants if v.kind == "wrong" and _in_set(v, held)]
            if not wrong:
                continue
            r = rates([p], held)
            lines.append(f"{p.assignment}/{p.notebook} {name}: visible tests catch {r['visible'][0]}/{r['visible'][1]}, "
                         f"visible + hidden {r['full'][0]}/{r['full'][1]}")
            for v in wrong:
                vis, full = caught(v, "visible"), caught(v, "full")
                mark = "visible" if vis else "hidden " if full else "MISSED "
                conc = concerns_failed(v, "full")
                lines.append(f"  {mark}  {v.entry}/{v.task}" + (f"  [{', '.join(conc)}]" if conc else ""))
                if messages and (vis or full):
                    lines.append("           " + textwrap.shorten(vis or full, 150))
        bad = [v for v in p.variants if v.kind in ("reference", "right") and any(failed(v, t, "full") for t in p.full)]
        for v in bad:
            lines.append(f"  WRONG  correct answer {v.label} fails a test")
    return "\n".join(lines)


def summary(plans: list[Plan]) -> str:
    """Rates by assignment (corpus, hold-out) and by concern."""
    lines = []
    by = {}
    for p in plans:
        by.setdefault(p.assignment, []).append(p)
    for held, name in ((False, "corpus"), ("A", "hold-out A (written before the contract tests)"),
                       ("B", "hold-out B (written after them, measured once)")):
        lines.append(f"{name}:")
        for a, ps in list(by.items()) + [("all", plans)]:
            r = rates(ps, held)
            if r["full"][1]:
                lines.append(f"  {a:6s} visible {r['visible'][0]:3d}/{r['visible'][1]:<3d} ({100 * r['visible'][0] / r['visible'][1]:5.1f}%)  "
                             f"visible + hidden {r['full'][0]:3d}/{r['full'][1]:<3d} ({100 * r['full'][0] / r['full'][1]:5.1f}%)")
    lines.append("by concern (corpus and hold-out together: wrong answers of a task with that concern that fail its cell):")
    for (a, c), d in sorted(by_concern(plans).items()):
        lines.append(f"  {a:6s} {c:10s} visible {d['visible']:3d}/{d['n']:<3d}  visible + hidden {d['full']:3d}/{d['n']}")
    return "\n".join(lines)


def measure(assignments: list[str] | None = None, root: Path = ROOT, python: str = sys.executable,
            holdout: bool = True) -> list[Plan]:
    names = assignments or corpus.available(root)
    return [evaluate(p, python) for a in names for p in plan(a, root, holdout)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.corpus.catch_rates", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("assignments", nargs="*")
    ap.add_argument("--messages", action="store_true", help="print each caught answer's failure message")
    ap.add_argument("--json", type=Path, help="also write the per-answer results here")
    ap.add_argument("--no-holdout", action="store_true", help="the corpus only, without the hold-out set")
    args = ap.parse_args(argv)
    plans = measure(args.assignments, holdout=not args.no_holdout)
    print(table(plans, args.messages))
    print()
    print(summary(plans))
    if args.json:
        args.json.write_text(json.dumps([{"assignment": v.assignment, "notebook": v.notebook, "kind": v.kind,
                                          "entry": v.entry, "task": v.task, "holdout": v.holdout,
                                          "own_tests": list(v.own_tests), "result": v.result}
                                         for p in plans for v in p.variants], indent=1))
    bad = [f"{kind}: {b}" for kind, items in problems(plans).items() for b in items]
    for b in bad:
        print("PROBLEM", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
