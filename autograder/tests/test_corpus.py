"""Every corpus entry (autograder/corpus/<assignment>.py) gets the score its spec says.

The corpus is built from the current source and release notebooks and graded once, in parallel,
by the batch grader in a scratch course (module fixture); the tests then read the results. The
scratch course's gradebook is also the one the batch merges into, so the same run checks that
merging loses and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import nbformat
import pytest

from autograder.batch import gradebook_merge
from autograder.batch import run as batch_run
from autograder import corpus
from autograder.course.layout import ROOT
from autograder.execution import tworun

pytestmark = pytest.mark.slow  # minutes: the whole corpus is graded (make test-fast skips it)

ASSIGNMENTS = corpus.available()
BUILT = corpus.build_all(ASSIGNMENTS) if ASSIGNMENTS else []
PLANTED = [Path("/tmp/llmrl-planted.txt"), ROOT / "lib" / "llmrl" / "planted.py", ROOT / ".corpus-canary-ipynb",
           ROOT / ".corpus-canary-html"]
GRADEBOOK_BEFORE = hashlib.sha256((ROOT / "gradebook.db").read_bytes()).hexdigest() \
    if (ROOT / "gradebook.db").exists() else None


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if not BUILT:
        pytest.skip("no assignment has both a corpus spec and its notebooks")
    for p in PLANTED:
        assert not p.exists(), f"{p} exists before the corpus runs: remove it"
    work = tmp_path_factory.mktemp("corpus")
    # More workers than cores: a grading waits on its kernels part of the time (CORPUS_WORKERS).
    workers = int(os.environ.get("LLMRL_CORPUS_WORKERS", 0)) or corpus.CORPUS_WORKERS
    result = corpus.grade_corpus(BUILT, work, workers=workers)
    print("\n" + corpus.table(BUILT, result) + "\n" + batch_run.summary(result["batch"]))
    return result


def test_the_lab11_pilot_has_a_corpus():
    assert "lab11" in ASSIGNMENTS, "lab11's corpus spec or notebooks are missing"


@pytest.mark.parametrize("built", BUILT, ids=[f"{b.assignment}/{b.entry.notebook}:{b.entry.name}" for b in BUILT])
def test_entry_gets_its_expected_score(graded, built):
    got, problems = corpus.compare(built, graded["results"].get(built.student))
    assert not problems, f"{built.entry.what}: " + "; ".join(problems)


def _by_check(name):
    return [b for b in BUILT if b.entry.check == name]


def _autograded(graded, b) -> Path:
    return graded["root"] / "autograded" / b.student / b.assignment / f"{b.entry.notebook}.ipynb"


def _streams(graded, b) -> str:
    nb = nbformat.read(_autograded(graded, b), as_version=4)
    return "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream")


def test_hostile_code_read_and_wrote_nothing(graded):
    attacks = _by_check("no_leak")
    assert len(attacks) >= 2, "the corpus has fewer than two reading attacks"
    for b in attacks:
        text = _streams(graded, b)
        blocked = re.findall(r"^BLOCKED (.+) \w+$", text, flags=re.M)
        leaks = re.findall(r"^LEAK (.+)$", text, flags=re.M)
        # "own folder" is the one write that must work; everything else must be blocked.
        assert [l for l in leaks if not l.startswith("own folder")] == [], f"{b.student}: the sandbox let through {leaks}"
        tries = sum(code.count("_try(\"") for code in b.files.values())
        assert len(blocked) >= tries - 1, f"{b.student}: the attack cell did not run its checks: {text[:500]}"
        if any("CACHE" in code for code in b.files.values()):
            assert "CACHE readable" in text, f"{b.student}: the model cache must stay readable in the sandbox"
    for p in PLANTED:
        assert not p.exists(), f"a submission planted {p}"


def _hidden_lines(assignment, notebook) -> set[str]:
    src = nbformat.read(ROOT / "source" / assignment / f"{notebook}.ipynb", as_version=4)
    hidden, public = set(), set()
    for c in src.cells:
        blocks = re.findall(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", c.source, flags=re.S)
        for block in blocks:
            hidden |= {l.strip() for l in block.splitlines() if len(l.strip()) > 20 and not l.strip().startswith("#")}
        outside = c.source
        for block in blocks:
            outside = outside.replace(block, "")
        public |= {l.strip() for l in outside.splitlines()}
    shown = "\n".join(public)  # a line the visible cells also show, alone or inside a longer line, is no secret
    return {h for h in hidden - public if h not in shown}


def _feedback_text(graded, b) -> str:
    import html as h

    path = graded["root"] / "feedback" / b.student / b.assignment / f"{b.entry.notebook}.html"
    if not path.exists():  # held back while a written answer awaits grading: the batch's record has it
        from autograder.export import feedback_pages as feedback

        r = graded["results"][b.student]
        nb = next(n for n in r.report["notebooks"] if n["notebook"] == b.entry.notebook)
        assert not feedback.releasable(nb), f"no feedback for {b.student}"
        path = r.out / f"{b.entry.notebook}.html"
    assert path.exists(), f"no feedback for {b.student}"
    return h.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_hidden_tests_reach_no_feedback_even_when_a_submission_prints_its_history(graded):
    entries = _by_check("no_hidden")
    assert len(entries) >= 2
    for b in entries:
        text = _feedback_text(graded, b)
        shown = [l for l in _hidden_lines(b.assignment, b.entry.notebook) if l in text]
        assert "BEGIN HIDDEN TESTS" not in text and shown == [], f"{b.student}: feedback shows {shown[:3]}"
        # and the attack did run: its output is in the feedback
        assert "assert" in _streams(graded, b) or "visible tests" in _streams(graded, b), b.student


def test_links_and_fifos_a_kernel_plants_are_never_followed(graded):
    entries = _by_check("no_planted")
    assert len(entries) >= 2
    for b in entries:
        for kind, suffix in (("autograded", ".ipynb"), ("feedback", ".html")):
            folder = graded["root"] / kind / b.student / b.assignment
            found = sorted(os.listdir(folder))
            assert found == [f"{b.entry.notebook}{suffix}"], f"{b.student}: {kind}/ holds {found}"
            assert (folder / found[0]).is_file() and not (folder / found[0]).is_symlink()
        text = _feedback_text(graded, b)
        assert "root:x:0:0" not in text, f"{b.student}: /etc/passwd reached the feedback"
        assert [l for l in _hidden_lines(b.assignment, b.entry.notebook) if l in text] == []
    for p in PLANTED:
        assert not p.exists(), f"a submission planted {p}"
    db = ROOT / "gradebook.db"
    assert (hashlib.sha256(db.read_bytes()).hexdigest() if db.exists() else None) == GRADEBOOK_BEFORE, \
        "the course's gradebook.db changed while the corpus ran"


def test_one_huge_message_does_not_reach_the_graders_memory(graded):
    entries = _by_check("small_memory")
    assert entries
    # Against the other students' grading processes of the same batch, not a fixed figure: what a
    # grading process holds depends on the library it imports (about 130 MB before the models were
    # shipped with it, about 320 MB after). Holding the 100 MB message once would add at least 100 MB
    # (the first grader reached 400 MB to 1.2 GB), so 60 MB above the median catches it.
    others = sorted(r.report["grader_max_rss_mb"] for s, r in graded["results"].items()
                    if r.report is not None and r.report.get("grader_max_rss_mb") and s not in {b.student for b in entries})
    assert len(others) >= 10, others
    typical = others[len(others) // 2]
    for b in entries:
        report = graded["results"][b.student].report
        assert report["grader_max_rss_mb"] < typical + 60, (b.student, report["grader_max_rss_mb"], typical)


def test_repaired_metadata_is_named_for_a_reviewer(graded):
    entries = _by_check("notes")
    assert len(entries) >= 3
    for b in entries:
        report = graded["results"][b.student].report
        nb = next(n for n in report["notebooks"] if n["notebook"] == b.entry.notebook)
        notes = [n for n in nb["review_notes"] if "metadata" in n]
        assert notes and all(re.match(r"^cell \d+", n) for n in notes), (b.student, nb["review_notes"])


def test_course_gradebook_and_folders_untouched(graded):
    """The corpus is graded in a scratch course: none of it reaches the course's own files.

    (The course's gradebook.db is not compared byte for byte: in a working tree shared with other
    people, their `make release` rewrites it while the corpus runs; test_pipeline checks the hash
    for autograder/bin/grade in isolation.)"""
    from nbgrader.api import Gradebook

    students = {b.student for b in BUILT}
    db = ROOT / "gradebook.db"
    if db.exists():
        with Gradebook(f"sqlite:///{db}") as gb:
            assert students.isdisjoint(s.id for s in gb.students), "corpus students in the course's gradebook"
    for folder in ("submitted", "autograded", "feedback"):
        if (ROOT / folder).is_dir():
            assert students.isdisjoint(p.name for p in (ROOT / folder).iterdir()), f"corpus students in {folder}/"
    grades = ROOT / "grades.csv"
    if grades.exists():
        assert not any(s in grades.read_text() for s in students)


def test_output_is_capped(graded):
    for b in _by_check("small_output"):
        path = _autograded(graded, b)
        assert path.stat().st_size < 3_000_000, f"{b.student}: autograded notebook is {path.stat().st_size} bytes"


def _events(graded, b) -> dict:
    report = graded["results"][b.student].report
    return next(n for n in report["notebooks"] if n["notebook"] == b.entry.notebook)["events"]


def test_notebook_deadline_and_dead_kernel_are_recorded(graded):
    for b in _by_check("notebook_timeout"):
        ev = _events(graded, b)
        assert ev["notebook_timeout"] and ev["cells_skipped"] > 0, ev
    for b in _by_check("kernel_died"):
        assert _events(graded, b)["kernel_died"], _events(graded, b)


def test_reference_entries_raise_no_false_alarm(graded):
    for b in BUILT:
        if b.entry.name in ("reference", "rewritten"):
            report = graded["results"][b.student].report
            nb = next(n for n in report["notebooks"] if n["notebook"] == b.entry.notebook)
            assert nb["review_notes"] == [] and nb["review_reasons"] == [], (b.student, nb["review_notes"])
            assert nb["events"].get("student_kernel") in (None, tworun.ANSWER_KERNEL), nb["events"]
            assert not nb["events"].get("tests_setup_errors"), nb["events"]


def test_gradebook_holds_exactly_the_reports(graded):
    from nbgrader.api import Gradebook

    rows = gradebook_merge.snapshot(graded["root"])
    for b in BUILT:
        r = graded["results"][b.student]
        assert r.report is not None, f"{b.student}: {r.error}"
        for nb in r.report["notebooks"]:
            for c in nb["cells"]:
                auto, manual = rows[(b.assignment, b.student, nb["notebook"], c["grade_id"])]
                score = manual if manual is not None else auto
                # None: a written answer for a person, or a notebook not handed in ("missing", not 0)
                unscored = c["needs_manual_grade"] or nb["status"] == "missing"
                assert score == c["points"] or (score is None and unscored), (b.student, c, auto, manual)
    with Gradebook(f"sqlite:///{graded['root'] / 'gradebook.db'}") as gb:
        assert len(gb.students) == len(BUILT)
    csv = (graded["root"] / "grades.csv").read_text()
    assert all(b.student in csv for b in BUILT)


def test_regrading_one_student_changes_no_other(graded, tmp_path):
    """Merge a second result for one student: every other student's grade rows stay as they were."""
    root = graded["root"]
    target = next(b for b in BUILT if b.entry.name == "untouched")
    before = gradebook_merge.snapshot(root)
    others_files = {p: _digest(p) for p in (root / "autograded").rglob("*.ipynb") if target.student not in p.parts}
    # the student hands in the reference solution instead
    ref = next(b for b in BUILT if b.assignment == target.assignment and b.entry.notebook == target.entry.notebook
               and b.entry.name == "reference")
    sub = tmp_path / f"{target.entry.notebook}.ipynb"
    sub.write_text(ref.files[f"{ref.entry.notebook}.ipynb"])
    out = batch_run.run_batch([target.assignment], root, jobs=[batch_run.Job(target.assignment, target.student, [sub])],
                          csv_path=tmp_path / "one.csv", progress=False)
    assert out["results"][0].report is not None, out["results"][0].error
    after = gradebook_merge.snapshot(root)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed and all(k[1] == target.student for k in changed), sorted(changed)[:5]
    for p, d in others_files.items():
        assert _digest(p) == d, f"{p} changed"


def test_feedback_has_no_hidden_tests(graded):
    done = 0
    for b in BUILT:
        if b.entry.name != "reference":
            continue
        text = _feedback_text(graded, b)
        assert "BEGIN HIDDEN TESTS" not in text
        shown = [l for l in _hidden_lines(b.assignment, b.entry.notebook) if l in text]
        assert shown == [], f"{b.student}: feedback shows hidden test lines {shown[:3]}"
        done += 1
    assert done


MARK = re.compile(r"^[^\n]*BEGIN MARK SCHEME[^\n]*$(.*?)^[^\n]*END MARK SCHEME[^\n]*$", re.M | re.S)


def test_feedback_drops_mark_schemes_and_graders_keep_the_rubric(graded):
    """Rubrics and optional answers (BEGIN/END MARK SCHEME in the source) never reach the feedback;
    the autograded notebook, which the formgrader shows, keeps each rubric_<W> cell whole."""
    done = 0
    for b in BUILT:
        if b.entry.name != "reference":
            continue
        src = nbformat.read(ROOT / "source" / b.assignment / f"{b.entry.notebook}.ipynb", as_version=4)
        secret = {l.strip() for c in src.cells for region in MARK.findall(c.source)
                  for l in region.splitlines() if len(l.strip()) > 20}
        if not secret:
            continue
        text = _feedback_text(graded, b)
        shown = sorted(l for l in secret if l in text)
        assert "MARK SCHEME" not in text and shown == [], f"{b.student}: feedback shows {shown[:3]}"
        rubrics = {c.metadata["nbgrader"]["grade_id"]: c.source for c in src.cells
                   if str((c.metadata.get("nbgrader") or {}).get("grade_id", "")).startswith("rubric_")}
        graded_nb = nbformat.read(_autograded(graded, b), as_version=4)
        kept = {(c.metadata.get("nbgrader") or {}).get("grade_id"): c.source for c in graded_nb.cells}
        for gid, source in rubrics.items():
            assert kept.get(gid) == source, f"{b.student}: the autograded notebook lost {gid}'s rubric"
        done += 1
    assert done >= 2, "fewer than two notebooks with mark-scheme regions in the corpus"


def test_feedback_shows_each_failed_test_with_its_message_only(graded):
    """A failing test cell carries one error output: the first line of the failure, nothing else."""
    for b in BUILT:
        if not b.entry.lose or b.entry.review:
            continue
        nb = nbformat.read(_autograded(graded, b), as_version=4)
        for c in nb.cells:
            gid = (c.metadata.get("nbgrader") or {}).get("grade_id")
            if gid in b.entry.lose:
                assert len(c.outputs) == 1 and c.outputs[0]["output_type"] == "error", (b.student, gid, c.outputs)
                assert "\n" not in c.outputs[0]["evalue"] and len(c.outputs[0]["evalue"]) <= 300


def test_batch_table_has_a_row_per_notebook_with_reasons(graded):
    rows = graded["batch"]["rows"]
    by_student = {}
    for r in rows:
        by_student.setdefault(r["student"], []).append(r)
    for b in BUILT:
        mine = [r for r in by_student[b.student] if r["notebook"] == b.entry.notebook]
        assert len(mine) == 1
        if b.entry.review:
            assert mine[0]["status"] == "review" and mine[0]["reason"]
        if b.entry.status == "missing":
            assert mine[0]["status"] == "missing" and mine[0]["reason"]
