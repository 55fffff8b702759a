"""The authoring -> release -> autograde pipeline, checked on every notebook under notebooks/.

A notebook added under notebooks/<assignment>/ is covered here without any change: the tests are
parametrized over what `layout.discover()` finds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.authoring import execute as ag_execute
from autograder.authoring import notebooks as ag_notebooks
from autograder.authoring import samples
from autograder.course import layout
from autograder.course import nbgrader_app
from autograder.course.layout import ROOT, PipelineError

LABS = layout.discover()
ASSIGNMENTS = layout.assignments(LABS)
GRADE = ROOT / "autograder" / "bin" / "grade"
lab_ids = [f"{lab.assignment}/{lab.name}" for lab in LABS]


def run_grade(assignment: str, *paths) -> subprocess.CompletedProcess:
    return subprocess.run([str(GRADE), assignment, *map(str, paths)], capture_output=True, text=True, timeout=600)


def grade_json(assignment: str, *paths) -> dict:
    proc = run_grade(assignment, *paths)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def read(path: Path):
    return nbformat.read(path, as_version=4)


def test_the_course_has_notebooks():
    assert LABS, "no notebooks/*/*.py found"


# ----------------------------------------------------------------------------- build in sync

@pytest.mark.parametrize("lab", LABS, ids=lab_ids)
def test_source_notebook_is_built_from_the_current_jupytext_file(lab):
    assert lab.source.exists(), f"{layout.rel(lab.source)} missing: run make build"
    assert ag_notebooks.normalized(read(lab.source)) == ag_notebooks.normalized(ag_notebooks.convert(lab.jupytext)), (
        f"{layout.rel(lab.source)} differs from {layout.rel(lab.jupytext)}: run make build execute release"
    )


@pytest.mark.parametrize("lab", LABS, ids=lab_ids)
def test_source_notebook_is_stored_executed(lab):
    nb = read(lab.source)
    unexecuted = [i + 1 for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()
                  and c.execution_count is None]
    assert not unexecuted, f"{layout.rel(lab.source)}: cells {unexecuted} have no stored run: make execute A={lab.assignment}"


def test_no_source_or_release_notebook_without_a_jupytext_file():
    wanted = {layout.rel(p) for lab in LABS for p in (lab.source, lab.release)}
    found = {layout.rel(p) for d in ("source", "release") for p in (ROOT / d).glob("*/*.ipynb")}
    assert found - wanted == set()


def test_release_is_generated_from_the_current_source(tmp_path):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    shutil.copytree(ROOT / "source", tmp_path / "source", ignore=layout.COPY_IGNORE)
    cfg = nbgrader_app.load_config(tmp_path)
    cfg.Application.log_level = "ERROR"
    api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
    for a in ASSIGNMENTS:
        result = api.generate_assignment(a, force=True, create=True)
        assert result["success"], result.get("error")
    for lab in LABS:
        fresh = tmp_path / "release" / lab.assignment / f"{lab.name}.ipynb"
        assert ag_notebooks.normalized(read(lab.release)) == ag_notebooks.normalized(read(fresh)), (
            f"{layout.rel(lab.release)} is out of date: run make release A={lab.assignment}"
        )


# ----------------------------------------------------------------------------- release content

def _blocks(source: str, begin: str, end: str) -> list[str]:
    return re.findall(re.escape(begin) + r"(.*?)" + re.escape(end), source, flags=re.S)


@pytest.mark.parametrize("lab", LABS, ids=lab_ids)
@pytest.mark.fast
def test_release_holds_no_solution_no_hidden_test_and_no_output(lab):
    src, rel_nb = read(lab.source), read(lab.release)
    release_text = "\n".join(c.source for c in rel_nb.cells)
    for marker in layout.SOLUTION_MARKERS + layout.HIDDEN_MARKERS:
        assert marker not in release_text
    secret, public = set(), set()
    for c in src.cells:
        inside = _blocks(c.source, *layout.SOLUTION_MARKERS) + _blocks(c.source, *layout.HIDDEN_MARKERS)
        lines = {l.strip() for block in inside for l in block.splitlines()}
        secret |= lines
        outside = c.source
        for block in inside:
            outside = outside.replace(block, "")
        public |= {l.strip() for l in outside.splitlines()}
    # Lines that also occur outside the blocks (a bare `return`, a comment) are not secrets.
    secret = {l for l in secret - public if len(l) > 12 and not l.startswith("#")}
    leaked = sorted(l for l in secret if l in {x.strip() for x in release_text.splitlines()})
    assert leaked == [], f"{layout.rel(lab.release)} shows solution or hidden-test lines: {leaked}"
    assert all(not c.get("outputs") for c in rel_nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("lab", LABS, ids=lab_ids)
def test_every_solution_cell_is_stubbed_in_the_release(lab):
    stubs = [c for c in read(lab.release).cells if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]
    assert all("raise NotImplementedError()" in c.source for c in stubs)


# ----------------------------------------------------------------------------- grading

@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_sources_score_full_marks_and_releases_zero(assignment):
    labs = [lab for lab in LABS if lab.assignment == assignment]
    db = ROOT / "gradebook.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest() if db.exists() else None

    full = grade_json(assignment, *[lab.source for lab in labs])
    assert full["max_points"] > 0
    for nb in full["notebooks"]:
        for cell in nb["cells"]:
            if not cell["needs_manual_grade"]:
                assert cell["points"] == cell["max_points"], f"{nb['notebook']}/{cell['grade_id']}: {cell['error']}"

    zero = grade_json(assignment, *[lab.release for lab in labs])
    for nb in zero["notebooks"]:
        for cell in nb["cells"]:
            assert not cell["points"], f"the unmodified release earns points in {nb['notebook']}/{cell['grade_id']}"
    assert zero["points"] == 0 and zero["max_points"] == full["max_points"]

    after = hashlib.sha256(db.read_bytes()).hexdigest() if db.exists() else None
    assert before == after, "autograder/bin/grade changed the course's gradebook.db"


@pytest.mark.fast
def test_grade_never_writes_the_course_gradebook_even_through_links_a_kernel_plants(tmp_path):
    """A kernel that puts links named like nbgrader's outputs (and the gradebook) into its folder:
    the grader never reads or writes there, so nothing outside the scratch course changes."""
    lab = LABS[0]
    db = ROOT / "gradebook.db"
    made = not db.exists()
    if made:
        db.write_bytes(b"a stand-in for the course's gradebook")
    canary = ROOT / ".grade-canary"
    try:
        before = hashlib.sha256(db.read_bytes()).hexdigest()
        nb = samples.sample_submissions(lab)["reference"]
        attack = nbformat.v4.new_code_cell(
            "import os\n"
            f"for name, target in [({lab.name + '.ipynb'!r}, {str(db)!r}), ({lab.name + '.html'!r}, {str(db)!r}),\n"
            f"                     ('gradebook.db', {str(db)!r}), ('x.html', {str(canary)!r})]:\n"
            "    if os.path.lexists(name):\n"
            "        os.remove(name)\n"
            "    os.symlink(target, name)\n"
            "print(sorted(os.listdir('.')))")
        nb.cells.insert(1, attack)
        path = tmp_path / f"{lab.name}.ipynb"
        nbformat.write(nb, path)
        out = tmp_path / "out"
        proc = subprocess.run([str(GRADE), lab.assignment, str(path), "--out", str(out)], capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        nb_report = next(n for n in report["notebooks"] if n["notebook"] == lab.name)
        assert all(c["points"] == c["max_points"] for c in nb_report["cells"] if not c["needs_manual_grade"])
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before, "the course's gradebook.db changed"
        assert not canary.exists()
        assert sorted(p.name for p in out.iterdir()) == [f"{lab.name}.html", f"{lab.name}.ipynb"]
        assert all(p.is_file() and not p.is_symlink() for p in out.iterdir())
    finally:
        if made:
            db.unlink()
        if canary.exists():
            canary.unlink()


SAMPLES = sorted(layout.SAMPLES.glob("*/*/*.py"))


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{p.parent.parent.name}:{p.parent.name}" for p in SAMPLES])
def test_hand_written_samples_score_what_they_say(sample, tmp_path):
    """Each sample names its expected score ("Expected: 2 of 5 points"): the hidden tests catch the mistake."""
    m = re.search(r"Expected: (\d+(?:\.\d+)?) of (\d+(?:\.\d+)?) points", sample.read_text())
    assert m, f"{layout.rel(sample)}: say 'Expected: N of M points' in its description"
    lab = layout.Lab(sample.parent.name, sample.stem)
    nb = samples.sample_submissions(lab)[sample.parent.parent.name]
    path = tmp_path / f"{lab.name}.ipynb"
    nbformat.write(nb, path)
    # one sample's feedback page is read as a student reads it (test_feedback_page_as_a_student_reads_it)
    feedback_sample = sample.parent.parent.name == FEEDBACK_SAMPLE
    report = grade_json(lab.assignment, path, *(["--out", tmp_path / "out"] if feedback_sample else []))
    assert (report["points"], report["max_points"]) == (float(m.group(1)), float(m.group(2))), report
    if feedback_sample:
        check_feedback_page((tmp_path / "out" / f"{lab.name}.html").read_text(), report["notebooks"][0])


FEEDBACK_SAMPLE = "k3_flipped"  # lab11: three of task 3's four cells and one of task 2's fail


def check_feedback_page(page: str, nb_report: dict) -> None:
    """The feedback page as a student reads it: the summary names every graded cell by
    its task and concern and marks the failed ones; a failed cell shows its failure's message above
    its code; the maths needs no network (MathJax inlined from the installed package, no script
    fetched from anywhere)."""
    import html as h

    assert not re.search(r"<script[^>]+src=", page), "the feedback page loads a script from elsewhere"
    assert "MathJax from the installed jupyter-server-mathjax package" in page and "MathJax.Hub.Config" in page
    assert "Test cell</a>" not in page, "the summary still lists bare 'Test cell' links"
    toc = page[page.index('<div id="toc">'):page.index("</div>", page.index('<div id="toc">'))]
    failed = [c for c in nb_report["cells"] if c["points"] != c["max_points"]]
    assert failed, nb_report
    for c in nb_report["cells"]:
        m = re.match(r"test_task(\d+[a-z]?)_(\w+?)_(values|contract|edge|grad|rng)$", c["grade_id"])
        assert m, c["grade_id"]
        item = re.search(rf'<li class="(\w*)"><a href="#{c["grade_id"]}">Task {m[1]} {m[2]}: ([^<]+)</a>', toc)
        assert item, f"the summary does not name {c['grade_id']} by its task and concern"
        assert (item[1] == "failed") == (c in failed), (c["grade_id"], item[1])
    for c in failed:
        anchor = page.index(f'<a name="{c["grade_id"]}"></a>')
        box = page.index("This test failed:", anchor)
        code = page.index('<div class="input_area">', anchor)
        assert box < code, f"{c['grade_id']}: the failure's message comes after the code"
        shown = h.unescape(re.sub(r"<[^>]+>", "", page[box:code]))
        assert c["error"].split(":")[0] in shown and c["error"][-20:].strip() in shown.replace("\n", " "), (c["error"], shown)


def test_grade_rejects_a_file_that_is_not_json(tmp_path):
    bad = tmp_path / "broken.ipynb"
    bad.write_text('{"cells": [')
    proc = run_grade(ASSIGNMENTS[0], bad)
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "broken.ipynb" in lines[0] and "not a valid notebook" in lines[0]


def test_grade_needs_no_writable_model_cache_since_the_models_ship_with_the_library(tmp_path):
    """The course's models ship inside the library (llmrl.store.shipped); the grader checks them against
    their manifest before any kernel starts and trains nothing, so a model cache that cannot be made
    (here a file where the folder would be) does not stop grading. A damaged shipped file is an
    error, not a rebuild (lib/tests/test_shipped.py)."""
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("not a folder")
    lab = LABS[0]
    proc = subprocess.run([str(GRADE), lab.assignment, str(lab.source)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, LLMRL_CACHE=str(blocker)))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # the reference scores every automatic point (the written report's points wait for a person)
    assert [nb["status"] for nb in report["notebooks"]] == ["graded"] and report["points"] > 0, report
    assert blocker.read_text() == "not a folder"


@pytest.mark.fast
def test_a_changed_shipped_model_stops_grading_with_the_store_layers_message(tmp_path, monkeypatch):
    """The grader checks the shipped models with the library's store layer (llmrl.store.shipped), in the
    process the command line starts early (python -m autograder.grading.shipped_models) or in its own:
    either way a changed file is one PipelineError naming it, and nothing is rebuilt."""
    from llmrl.store import shipped

    from autograder.grading import one_notebook, shipped_models

    assert shipped_models.problem() is None
    proc = subprocess.run([sys.executable, "-m", "autograder.grading.shipped_models"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")

    models = tmp_path / "models"
    shutil.copytree(shipped.MODELS_DIR, models)
    damaged = models / shipped.FILES["sft"]
    damaged.write_bytes(damaged.read_bytes() + b"\0")
    before = damaged.read_bytes()
    early = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; from llmrl.store import shipped; "
                              f"shipped.MODELS_DIR = Path({str(models)!r}); "
                              "from autograder.grading import shipped_models; sys.exit(shipped_models.main())"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    monkeypatch.setattr(one_notebook, "_WARMING", early)
    with pytest.raises(PipelineError) as started_early:
        one_notebook._warm_model_cache()
    monkeypatch.setattr(shipped, "MODELS_DIR", models)
    with pytest.raises(PipelineError) as in_process:
        one_notebook._warm_model_cache()
    for err in (started_early, in_process):
        assert str(err.value).startswith(f"{shipped_models.CHECK_FAILED}: "), str(err.value)
        assert f"{damaged} is not the shipped model 'sft'" in str(err.value), str(err.value)
    assert damaged.read_bytes() == before


def test_grade_rejects_a_notebook_of_no_assignment(tmp_path):
    foreign = tmp_path / "my_homework.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)")]
    nbformat.write(nb, foreign)
    proc = run_grade(ASSIGNMENTS[0], foreign)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "my_homework.ipynb" in lines[0] and "belongs to no notebook" in lines[0]


def test_grade_rejects_an_unknown_assignment():
    proc = run_grade("no_such_lab", LABS[0].release)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "no_such_lab" in proc.stderr


# ----------------------------------------------------------------------------- validate is per cell

def test_validate_names_each_test_cell_a_stub_would_pass_and_each_failing_source_cell(tmp_path):
    lab = LABS[0]
    graded = ag_execute.graded_test_cells(read(lab.release))
    subs = samples.sample_submissions(lab)
    answered, stubbed = tmp_path / "answered.ipynb", tmp_path / "stubbed.ipynb"
    nbformat.write(subs["reference"], answered)
    nbformat.write(subs["untouched"], stubbed)
    # A "release" whose stubs already pass: every graded cell must be reported by name.
    with pytest.raises(PipelineError) as err:
        ag_execute.validate_one(str(answered), invert=True)
    for gid in graded:
        assert gid in str(err.value)
    # A "source" whose solutions are stubs: every failing graded cell is named.
    with pytest.raises(PipelineError) as err:
        ag_execute.validate_one(str(stubbed), invert=False)
    for gid in graded:
        assert gid in str(err.value)


# ----------------------------------------------------------------------------- nbval is strict

def test_nbval_notices_a_changed_printed_number(tmp_path):
    """Strict nbval with the sanitize file compares printed numbers (the sanitizer is not too broad)."""
    lab = next((l for l in LABS if any(o.get("name") == "stdout" and re.search(r"\d", o.get("text", ""))
                                        for c in read(l.source).cells for o in c.get("outputs", []))), None)
    if lab is None:
        pytest.skip("no source notebook prints a number")
    nb = read(lab.source)
    for i, c in enumerate(nb.cells):
        outs = [o for o in c.get("outputs", []) if o.get("name") == "stdout" and re.search(r"\d", o.get("text", ""))]
        if outs:
            outs[0]["text"] = re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), outs[0]["text"], count=1)
            nb.cells = nb.cells[: i + 1]  # nothing after the changed cell needs to run
            break
    target = tmp_path / lab.source.name
    nbformat.write(nb, target)
    shutil.copytree(lab.source.parent, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.ipynb", "artifacts"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval",
                           "--nbval-current-env", "--nbval-sanitize-with",
                           str(ROOT / "autograder" / "nbval_sanitize.cfg"), str(target)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 1 and "1 failed" in proc.stdout, proc.stdout[-2000:]


def test_nbval_waits_longer_than_5_s_for_a_finished_cells_outputs(tmp_path):
    """The repository's conftest.py raises nbval's fixed 5 s wait for outputs (CI failed a finished
    lab21 cell on it); a probe plugin reads the value off every collected source cell."""
    (tmp_path / "nbval_probe.py").write_text(
        "def pytest_collection_finish(session):\n"
        "    print('OUTPUT_TIMEOUTS', sorted({getattr(i, 'output_timeout', None) for i in session.items}))\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "nbval_probe",
                           "--collect-only", "-q", "--nbval", "--nbval-current-env", str(LABS[0].source)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("OUTPUT_TIMEOUTS"))
    assert line == "OUTPUT_TIMEOUTS [120]", line


# ----------------------------------------------------------------------------- build errors

HEADER = "# %%"
GOOD_SOLUTION = ('# %% nbgrader={"grade": false, "grade_id": "f", "locked": false, "schema_version": 3, '
                 '"solution": true, "task": false}\n'
                 "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n")
GOOD_TEST = ('# %% nbgrader={"grade": true, "grade_id": "test_f", "locked": true, "points": 1, '
             '"schema_version": 3, "solution": false, "task": false}\nassert f() == 1\n')


def write_lab(root: Path, cells: list[str]) -> Path:
    path = root / "notebooks" / "labx" / "bad.py"
    path.parent.mkdir(parents=True)
    path.write_text("# %% [markdown]\n# A title\n\n" + "\n\n".join(cells))
    return path


def test_a_well_formed_source_builds(tmp_path):
    write_lab(tmp_path, [GOOD_SOLUTION, GOOD_TEST])
    written = ag_notebooks.build(layout.discover(root=tmp_path))
    nb = read(written[0])
    assert [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells] == [None, "f", "test_f"]


def test_a_text_edit_keeps_the_stored_outputs_and_a_code_edit_drops_them(tmp_path):
    import nbformat

    path = write_lab(tmp_path, [GOOD_SOLUTION, GOOD_TEST])
    target = ag_notebooks.build(layout.discover(root=tmp_path))[0]
    nb = read(target)
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    code[0].execution_count = 1
    nbformat.write(nb, target)
    path.write_text(path.read_text().replace("# A title", "# Another title"))  # the text only
    assert ag_notebooks.build(layout.discover(root=tmp_path)) == [target]
    nb = read(target)
    assert nb.cells[0].source == "Another title"
    assert [c.get("outputs") for c in nb.cells if c.cell_type == "code"][0][0]["text"] == "ran\n"
    path.write_text(path.read_text().replace("return 1", "return 2"))  # the code: the outputs are stale
    ag_notebooks.build(layout.discover(root=tmp_path))
    assert all(not c.outputs for c in read(target).cells if c.cell_type == "code")


@pytest.mark.parametrize("bad_cell, words", [
    (GOOD_TEST.replace('"grade": true', '"grade": True'), "did not parse"),
    (GOOD_TEST.replace(', "task": false', ""), "lacks task"),
    (GOOD_TEST.replace('"points": 1, ', ""), "lacks points"),
    (GOOD_TEST.replace('"test_f"', '"f"'), "grade_id 'f' is also used by"),
    (GOOD_TEST.replace('"locked": true', '"locked": false'), "must be locked"),
    (GOOD_TEST + "### BEGIN SOLUTION\n", "solution markers in a cell that is not a solution cell"),
    ("# %%\nx = 1\n### BEGIN HIDDEN TESTS\nassert x\n### END HIDDEN TESTS\n", "without nbgrader metadata"),
], ids=["python-True", "missing-key", "missing-points", "duplicate-grade-id", "unlocked-test",
        "stray-solution-marker", "hidden-tests-outside-a-test-cell"])
def test_bad_metadata_fails_the_build_naming_file_line_and_cell(tmp_path, bad_cell, words):
    path = write_lab(tmp_path, [GOOD_SOLUTION, bad_cell])
    line = path.read_text().splitlines().index(bad_cell.splitlines()[0]) + 1  # the bad cell's header
    with pytest.raises(PipelineError) as err:
        ag_notebooks.build(layout.discover(root=tmp_path))
    assert f"{path}:{line} (cell 3)" in str(err.value)
    assert words in str(err.value)
    assert not (tmp_path / "source").exists(), "nothing may be written when a source is bad"


@pytest.mark.fast
def test_make_build_exits_non_zero_and_names_the_file_and_cell(tmp_path):
    bad = GOOD_TEST.replace('"solution": false', '"solution": False')
    path = write_lab(tmp_path, [GOOD_SOLUTION, bad])
    proc = subprocess.run([sys.executable, "-m", "autograder", "--root", str(tmp_path), "build"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: {path}:11 (cell 3): the header's metadata did not parse"), proc.stderr


def test_a_file_without_cell_headers_is_refused(tmp_path):
    path = tmp_path / "notebooks" / "labx" / "helper.py"
    path.parent.mkdir(parents=True)
    path.write_text("def helper():\n    return 1\n")
    with pytest.raises(PipelineError, match="helper.py: no '# %%' cell header"):
        ag_notebooks.build(layout.discover(root=tmp_path))


def test_an_unknown_assignment_is_refused():
    with pytest.raises(PipelineError, match="no_such_lab"):
        layout.discover(["no_such_lab"])
