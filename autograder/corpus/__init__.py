"""A corpus of submissions with the score each must get, built from the CURRENT notebooks.

Each assignment has a spec, autograder/corpus/<assignment>.py, with a list ENTRIES of `Entry`s.
An entry names one notebook and a list of edits applied to a starting point:

- "solved" (default): the release notebook with every solution cell holding the source's
  solution (the reference answer), so an entry only says what differs from a correct student;
- "release": the release as handed out (every task a stub).

Edits refer to cells by grade_id, never by position or text of the lab, so entries stay valid
when a lab's prose, order or other tasks change:

    solve(gid, code)        the solution cell's code becomes `code`
    sub(gid, old, new)      replace `old` by `new` in the reference solution (fails if `old` is gone)
    test_source(gid, code)  the test cell's code becomes `code` (e.g. "pass")
    delete(gid)             delete the cell
    strip_metadata(gid)     the cell loses its nbgrader metadata (no longer a graded cell)
    set_points(gid, n)      the cell's nbgrader metadata claims n points
    insert(code, after=gid) a new free code cell after cell gid (or "start", or "end")

Expectations are derived from the source notebook too: every graded cell has full points except
the test cells listed in `lose` (0 points), or `zero=True` (everything 0). `review=True` means
the grader must flag the notebook for manual review (and then give 0). `status` is the notebook's
status in the report ("graded" or "missing"). `filename` renames the file, `file_text` writes raw
text instead of a notebook, `absent=True` submits no file. `env` sets grading limits (seconds)
for that entry only, so timeout entries stay short. `check` names an extra assertion in
autograder/tests/test_corpus.py (e.g. "no_leak").

`make corpus` (autograder/cli/corpus.py) builds every entry of every assignment whose notebooks
exist, grades them all with autograder/batch/run.py in a scratch course and prints entry, expected,
got; autograder/tests/test_corpus.py asserts the same.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


class SpecError(Exception):
    """A corpus spec that does not fit the current notebook (names the entry and the cell)."""


Edit = Callable[[dict, dict], None]  # (notebook being built, solutions by grade_id) -> None


def _cell(nb, gid: str):
    for c in nb["cells"]:
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid or c.get("id") == gid:
            return c
    raise SpecError(f"no cell {gid!r}")


def _code(source: str) -> str:
    import textwrap

    return textwrap.dedent(source).strip("\n")


def solve(gid: str, code: str) -> Edit:
    def edit(nb, solutions):
        c = _cell(nb, gid)
        if not c["metadata"].get("nbgrader", {}).get("solution"):
            raise SpecError(f"{gid!r} is not a solution cell")
        c["source"] = _code(code)
    edit.__doc__ = f"solve {gid}"
    return edit


def sub(gid: str, old: str, new: str) -> Edit:
    def edit(nb, solutions):
        ref = solutions.get(gid)
        if ref is None:
            raise SpecError(f"{gid!r} is not a solution cell of the source")
        if old not in ref:
            raise SpecError(f"the reference solution of {gid!r} no longer contains {old!r}: update the spec")
        _cell(nb, gid)["source"] = ref.replace(old, new, 1)
    return edit


def test_source(gid: str, code: str) -> Edit:
    def edit(nb, solutions):
        _cell(nb, gid)["source"] = _code(code)
    return edit


def delete(gid: str) -> Edit:
    def edit(nb, solutions):
        c = _cell(nb, gid)
        nb["cells"].remove(c)
    return edit


def strip_metadata(gid: str) -> Edit:
    def edit(nb, solutions):
        c = _cell(nb, gid)
        c["metadata"].pop("nbgrader", None)
        c["id"] = f"student-{gid[:20]}"
    return edit


def set_points(gid: str, points: float) -> Edit:
    def edit(nb, solutions):
        _cell(nb, gid)["metadata"]["nbgrader"]["points"] = points
    return edit


_inserted = [0]


def insert(code: str, after: str = "start") -> Edit:
    def edit(nb, solutions):
        import nbformat

        _inserted[0] += 1
        new = nbformat.v4.new_code_cell(_code(code))
        new["id"] = f"corpus-extra-{_inserted[0]}"
        if after == "start":
            # after the first code cell (the imports), so the notebook's own set-up has run
            i = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code") + 1
        elif after == "end":
            i = len(nb["cells"])
        else:
            i = nb["cells"].index(_cell(nb, after)) + 1
        nb["cells"].insert(i, new)
    return edit


@dataclass
class Entry:
    name: str
    notebook: str
    what: str
    edits: list = field(default_factory=list)
    base: str = "solved"                  # "solved" or "release"
    lose: tuple = ()                      # test cells that must score 0 (all others: full points)
    zero: bool = False                    # every graded cell scores 0
    review: bool = False                  # must be flagged for manual review (and score 0)
    status: str = "graded"                # "graded" or "missing"
    filename: str | None = None           # submit under another file name
    file_text: str | None = None          # submit this text instead of a notebook
    absent: bool = False                  # submit no file at all
    env: dict = field(default_factory=dict)
    check: str | None = None              # extra assertion in test_corpus.py
    expect: dict = field(default_factory=dict)  # grade_id -> points (None: waits for a person), overrides
    reasons: tuple = ()                   # texts the review reasons must contain (one per attack; review=True)


@dataclass
class Built:
    assignment: str
    entry: Entry
    student: str                          # folder name under submitted/
    files: dict                           # file name -> text
    expected_cells: dict                  # grade_id -> expected points
    max_points: float

    @property
    def expected_total(self) -> float:
        """Points the autograder gives (cells graded by hand count 0 here)."""
        return float(sum(v for v in self.expected_cells.values() if v is not None))

    @property
    def manual(self) -> int:
        return sum(v is None for v in self.expected_cells.values())


# ----------------------------------------------------------------------------- building

def _strip_markers(source: str) -> str:
    return "\n".join(l for l in source.splitlines() if l.strip() not in SOLUTION_MARKERS)


def graded_points(nb) -> dict[str, float]:
    return {c["metadata"]["nbgrader"]["grade_id"]: float(c["metadata"]["nbgrader"].get("points", 0))
            for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade")}


def available(root: Path = ROOT) -> list[str]:
    """Assignments with a spec whose every notebook has a source and a release."""
    out = []
    for spec in sorted(HERE.glob("*.py")):
        if spec.stem.startswith("_") or spec.stem in SHARED_SPECS or spec.stem in TOOLS:
            continue
        mod = load_spec(spec.stem)
        names = {e.notebook for e in mod.ENTRIES}
        if names and all((root / d / spec.stem / f"{n}.ipynb").exists() for d in ("source", "release") for n in names):
            out.append(spec.stem)
    return out


SHARED_SPECS = {"hostile", "evasion", "delegation"}
TOOLS = {"catch_rates"}  # modules of this folder that are no spec (catch_rates.py measures the tests on the corpus)
# Workers for grading the corpus: one more than the cores, since each grading waits on its kernels
# (startup, the calls between its two kernels) part of the time.
CORPUS_WORKERS = (os.cpu_count() or 1) + 1  # specs that place their entries on every assignment (autograder/corpus/hostile.py)


def load_spec(assignment: str):
    return importlib.import_module(f"autograder.corpus.{assignment}")


def holdout(assignment: str) -> list[Entry]:
    """The assignment's hold-out set (autograder/corpus/_holdout_<assignment>.py): wrong
    answers and correct alternatives that autograder/corpus/catch_rates.py measures but make test does not
    grade with nbgrader (each entry would cost a kernel run). Empty when the module does not exist."""
    first = (list(importlib.import_module(f"autograder.corpus._holdout_{assignment}").HOLDOUT)
             if (HERE / f"_holdout_{assignment}.py").exists() else [])
    # the second set (written after the contract tests, measured once): entries named *-ho2-*
    return first + list(importlib.import_module("autograder.corpus._holdout2").SECOND.get(assignment, []))


def holdout_set(entry_name: str) -> str:
    """"B" for the second hold-out set (written after the tests), "A" for the first."""
    return "B" if "-ho2-" in entry_name else "A"


def source_json(assignment: str, notebook: str) -> dict:
    """The source notebook of `assignment`, as JSON (what the specs read its test cells from)."""
    return json.loads((ROOT / "source" / assignment / f"{notebook}.ipynb").read_text())


def tests_of(assignment: str, notebook: str, *tasks: str) -> tuple:
    """The test cells of these tasks (solution grade_ids) in the source notebook, task by task."""
    tests = task_tests(source_json(assignment, notebook))
    return tuple(t for task in tasks for t in tests[task])


def task_tests(nb) -> dict[str, list[str]]:
    """{solution grade_id: [its test cells' grade_ids]}: the graded test cells that follow a solution
    cell, up to the next solution cell, belong to its task (a task's tests are split by concern,
    test_<task>_<concern>)."""
    out: dict[str, list[str]] = {}
    current = None
    for c in nb["cells"]:
        m = c.get("metadata", {}).get("nbgrader", {}) or {}
        if c.get("cell_type") != "code" or not m:
            continue
        if m.get("solution"):
            current = m["grade_id"]
            out.setdefault(current, [])
        elif m.get("grade") and current is not None:
            out[current].append(m["grade_id"])
    return out


def tests(task_gid: str, *concerns: str) -> tuple[str, ...]:
    """The grade_ids of a task's test cells for these concerns (test_<task>_<concern>), for `lose=`."""
    return tuple(f"test_{task_gid}_{c}" for c in concerns)


def concern_of(test_gid: str, task_gid: str) -> str:
    """The concern a test cell grades: its grade_id after test_<task>_ ("all" for a single cell)."""
    rest = test_gid.removeprefix(f"test_{task_gid}")
    return rest.lstrip("_") or "all"


def build_entry(assignment: str, entry: Entry, root: Path = ROOT) -> Built:
    import nbformat

    src_path = root / "source" / assignment / f"{entry.notebook}.ipynb"
    rel_path = root / "release" / assignment / f"{entry.notebook}.ipynb"
    source = json.loads(src_path.read_text())
    release = json.loads(rel_path.read_text())
    solutions = {c["metadata"]["nbgrader"]["grade_id"]: _strip_markers("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
                 for c in source["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    points = graded_points(source)
    nb = nbformat.reads(json.dumps(release), as_version=4)
    if entry.base == "solved":
        for gid, code in solutions.items():
            _cell(nb, gid)["source"] = code
    elif entry.base != "release":
        raise SpecError(f"{assignment}:{entry.name}: base must be 'solved' or 'release'")
    for edit in entry.edits:
        try:
            edit(nb, solutions)
        except SpecError as e:
            raise SpecError(f"corpus {assignment}:{entry.name}: {e}") from None
    for gid in entry.lose:
        if gid not in points:
            raise SpecError(f"corpus {assignment}:{entry.name}: lose names {gid!r}, not a graded cell of "
                            f"{src_path.name} ({', '.join(points)})")
    zero = entry.zero or entry.review or entry.base == "release" or entry.status == "missing"
    # Answers graded by hand (a graded solution cell, e.g. a markdown write-up): an answered one
    # waits for a person (None); an untouched one scores 0 by itself (nbgrader sees no change).
    manual = {c["metadata"]["nbgrader"]["grade_id"] for c in source["cells"]
              if c.get("metadata", {}).get("nbgrader", {}).get("grade") and c["metadata"]["nbgrader"].get("solution")}
    expected = {gid: (0.0 if zero or gid in entry.lose else None if gid in manual else pts)
                for gid, pts in points.items()}
    for gid, pts in entry.expect.items():
        if gid not in points:
            raise SpecError(f"corpus {assignment}:{entry.name}: expect names {gid!r}, not a graded cell")
        expected[gid] = pts
    filename = entry.filename or f"{entry.notebook}.ipynb"
    if entry.absent:
        files = {}
    elif entry.file_text is not None:
        files = {filename: entry.file_text}
    else:
        files = {filename: nbformat.writes(nb)}
    student = f"{assignment}-{entry.notebook}-{entry.name}".replace("_", "-")
    return Built(assignment, entry, student, files, expected, float(sum(points.values())))


def build_all(assignments: list[str] | None = None, root: Path = ROOT) -> list[Built]:
    out = []
    for a in assignments if assignments is not None else available(root):
        spec = load_spec(a)
        extra = [e for shared in sorted(SHARED_SPECS) for e in load_spec(shared).entries(a, root)]
        names = [(e.notebook, e.name) for e in spec.ENTRIES + extra]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise SpecError(f"corpus {a}: duplicate entry names {sorted(dupes)}")
        out += [build_entry(a, e, root) for e in spec.ENTRIES + extra]
    return out


def write(built: list[Built], submitted: Path) -> None:
    """nbgrader's layout: submitted/<student>/<assignment>/<file>."""
    for b in built:
        folder = submitted / b.student / b.assignment
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in b.files.items():
            (folder / name).write_text(text)


def standard_entries(notebook: str) -> list[Entry]:
    """The two entries every notebook gets without writing them: the reference and the untouched release."""
    return [Entry("reference", notebook, "the source's own solutions, handed in through the release"),
            Entry("untouched", notebook, "the release handed in as is", base="release")]


def copy_entry(e: Entry, **changes) -> Entry:
    e = copy.copy(e)
    for k, v in changes.items():
        setattr(e, k, v)
    return e


# ----------------------------------------------------------------------------- grading the corpus

def grade_corpus(built: list[Built], work: Path, workers: int | None = None, progress: bool = False,
                 source_root: Path = ROOT) -> dict:
    """Grade every entry with the batch grader in a scratch course under `work`.

    Returns {"batch": run_batch's result, "root": the scratch course, "results": student -> Result}.
    """
    import shutil
    from autograder.batch import run as batch

    root = work / "course"
    for a in sorted({b.assignment for b in built}):
        shutil.copytree(source_root / "source" / a, root / "source" / a,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "artifacts"))
    write(built, root / "submitted")
    jobs = [batch.Job(b.assignment, b.student, sorted((root / "submitted" / b.student / b.assignment).glob("*")),
                      dict(b.entry.env)) for b in built]
    # No self-check: every notebook's reference is an entry of the corpus, graded and compared like the
    # others (the self-check graded each reference a second time before the first entry; it is tested
    # on its own in test_grading_faults.py and test_course_grading.py)
    out = batch.run_batch(sorted({b.assignment for b in built}), root, workers=workers, jobs=jobs, check=False,
                          csv_path=work / "corpus_grades.csv", progress=progress)
    return {"batch": out, "root": root, "results": {r.job.student: r for r in out["results"]}}


def compare(b: Built, result) -> tuple[float | None, list[str]]:
    """(points the entry got for its notebook, mismatches with the spec)."""
    if result is None or result.report is None:
        return None, [f"not graded: {getattr(result, 'error', 'no result')}"]
    nb = next((n for n in result.report["notebooks"] if n["notebook"] == b.entry.notebook), None)
    if nb is None:
        return None, [f"the report has no notebook {b.entry.notebook}"]
    problems = []
    got = {c["grade_id"]: c["points"] or 0.0 for c in nb["cells"]}
    manual = {c["grade_id"] for c in nb["cells"] if c["needs_manual_grade"]}
    for gid, want in b.expected_cells.items():
        if want is None:
            if gid not in manual:
                problems.append(f"{gid}: expected to wait for manual grading, got {got.get(gid)} points")
            continue
        if gid in manual and not nb["needs_manual_review"]:
            problems.append(f"{gid}: expected {want:g} points, got 'needs manual grading'")
        elif abs(got.get(gid, -1) - want) > 1e-6:
            cell = next((c for c in nb["cells"] if c["grade_id"] == gid), {})
            problems.append(f"{gid}: expected {want:g}, got {got.get(gid)} ({cell.get('error')})")
    if nb["status"] != b.entry.status:
        problems.append(f"status {nb['status']!r}, expected {b.entry.status!r} ({nb.get('reason')})")
    if nb["needs_manual_review"] != b.entry.review:
        problems.append(f"needs_manual_review is {nb['needs_manual_review']} ({nb['review_reasons']})")
    if b.entry.review and nb["status"] == "graded":
        # held for review: the points are 0 in the tables, but the tests' verdicts a person confirms must
        # be right (exactly the cells of `lose` failed; every other automatic test passed)
        for c in nb["cells"]:
            if c["grade_id"] not in b.expected_cells or c["needs_manual_grade"] and c["error"] is None:
                continue
            failed = c["error"] is not None
            if failed != (c["grade_id"] in b.entry.lose):
                problems.append(f"{c['grade_id']}: held for review, but its test {'failed' if failed else 'passed'} "
                                f"({c['error']})")
        for text in b.entry.reasons:
            if not any(text in r for r in nb["review_reasons"]):
                problems.append(f"no review reason says {text!r} (reasons: {nb['review_reasons']})")
    return float(nb["points"]), problems


def table(built: list[Built], graded: dict) -> str:
    rows = [("entry", "expected", "got", "", "what")]
    for b in built:
        got, problems = compare(b, graded["results"].get(b.student))
        exp = f"{b.expected_total:g}/{b.max_points:g}" + (" review" if b.entry.review else "") + \
            (" missing" if b.entry.status == "missing" else "")
        r = graded["results"].get(b.student)
        nb = next((n for n in (r.report or {}).get("notebooks", []) if n["notebook"] == b.entry.notebook), None) if r else None
        g = "error" if got is None else f"{got:g}/{b.max_points:g}" + (" review" if nb and nb["needs_manual_review"] else "") + \
            (" missing" if nb and nb["status"] == "missing" else "")
        n_manual = sum(c["needs_manual_grade"] for c in nb["cells"]) if nb and not nb["needs_manual_review"] else 0
        g += f" +{n_manual} manual" if n_manual and got is not None else ""
        rows.append((f"{b.assignment}/{b.entry.notebook}:{b.entry.name}", exp, g, "ok" if not problems else "MISMATCH",
                     b.entry.what if not problems else "; ".join(problems)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows)
