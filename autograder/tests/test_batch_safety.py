"""Fast checks of the grading-safety parts: the sandbox, the static review notes, the corpus specs,
the batch command line. The expensive end-to-end checks are in test_corpus.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import corpus
import safety
import sandbox
from course import ROOT


# ----------------------------------------------------------------------------- sandboxed kernel

def _run_tiny_notebook(tmp_path, cells, env=None):
    """Run a small notebook through SafeExecute (the grader's executor) in tmp_path/work."""
    from nbgrader.apps import NbGraderAPI  # noqa: F401  (nbgrader's config classes)
    from traitlets.config import Config

    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    cfg = Config()
    cfg.Execute.timeout = 20
    cfg.SafeExecute.guard = False  # no torch import: this test is about the sandbox
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        pp = safety.SafeExecute(config=cfg)
        nb, _ = pp.preprocess(nb, {"metadata": {"path": str(work)}})
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb, work


def _text(cell):
    return "".join(o.get("text", "") + o.get("evalue", "") for o in cell.outputs)


@pytest.mark.skipif(sandbox.bwrap_status() != "ok", reason=f"no sandbox here: {sandbox.bwrap_status()}")
def test_sandboxed_kernel_sees_no_course_files_has_no_network_and_writes_only_its_folder(tmp_path):
    secret = tmp_path / "secret.txt"  # a scratch course's hidden file: under /tmp, hidden with it
    secret.write_text("hidden")
    nb, work = _run_tiny_notebook(tmp_path, [
        f"import os, socket\nprint(sorted(os.listdir({str(ROOT)!r})))",
        f"print(open({str(secret)!r}).read())",
        f"open({str(ROOT / 'gradebook.db')!r}, 'w')",
        "socket.create_connection(('1.1.1.1', 53), timeout=3)",
        "open('mine.txt', 'w').write('ok'); print(open('mine.txt').read())",
        "import llmrl; print('library ok')",
        "import subprocess; print(subprocess.run(['mount', '-o', 'remount,rw', '/'], capture_output=True).returncode)",
    ])
    outs = [_text(c) for c in nb.cells]
    assert outs[0].strip() == str(sorted(sandbox.VISIBLE)), outs[0]
    assert "FileNotFoundError" in outs[1] or "No such file" in outs[1], outs[1]
    assert "Read-only" in outs[2], outs[2]
    assert "unreachable" in outs[3] or "OSError" in outs[3] or "Errno" in outs[3], outs[3]
    assert outs[4].strip() == "ok" and (work / "mine.txt").read_text() == "ok"
    assert "library ok" in outs[5]
    assert outs[6].strip() != "0", "the kernel could remount the file system"


def test_without_bwrap_the_kernel_still_runs_with_limits_and_a_warning(tmp_path, capfd):
    sandbox.bwrap_status.cache_clear()
    try:
        nb, _ = _run_tiny_notebook(tmp_path, [
            "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)",
        ], env={"LLMRL_SANDBOX": "0", "LLMRL_GRADE_MEM_MB": "3000"})
    finally:
        sandbox.bwrap_status.cache_clear()
    assert _text(nb.cells[0]).strip() == "3000"
    assert "WITHOUT a sandbox" in capfd.readouterr().err


def test_bwrap_command_hides_the_course_and_binds_two_folders(tmp_path):
    argv = sandbox.bwrap_argv(tmp_path / "w", tmp_path / "rt", [tmp_path])
    text = " ".join(argv)
    assert f"--tmpfs {ROOT}" in text and "--unshare-all" in text and "--cap-drop ALL" in text
    assert f"--ro-bind {ROOT / 'lib'} {ROOT / 'lib'}" in text
    assert f"--bind {tmp_path / 'w'} {tmp_path / 'w'}" in text and f"--bind {tmp_path / 'rt'} {tmp_path / 'rt'}" in text
    assert f"--remount-ro {ROOT}" in text and "--remount-ro /tmp" in text


# ----------------------------------------------------------------------------- static review notes

@pytest.mark.parametrize("code, note", [
    ("torch.allclose = lambda *a, **k: True", "assigns torch.allclose"),
    ("np.testing.assert_allclose = print", "assigns np.testing.assert_allclose"),
    ("setattr(torch, 'allclose', f)", "calls setattr()"),
    ("open('/work/main/source/lab11/x.ipynb').read()", "opens"),
    ("import subprocess\nsubprocess.run(['ls'])", "calls subprocess.run()"),
    ("import sys\nsys.modules['torch'] = None", "uses sys.modules"),
])
def test_scan_flags_suspicious_code(code, note):
    assert any(note in n for n in safety.scan_source(code)), safety.scan_source(code)


def test_scan_is_quiet_on_ordinary_code():
    code = "import torch\nx = torch.ones(3)\nx.grad = None\nmodel.weight = w\nprint(open('notes.txt').read())\n%matplotlib inline"
    assert safety.scan_source(code.replace("%matplotlib inline", "")) == []


# ----------------------------------------------------------------------------- corpus specs

def test_spec_edits_fail_loudly_when_the_notebook_changed(tmp_path):
    lab = corpus.available()[0] if corpus.available() else pytest.skip("no corpus")
    spec = corpus.load_spec(lab)
    first = spec.ENTRIES[0]
    with pytest.raises(corpus.SpecError, match="no cell 'no_such_cell'"):
        corpus.build_entry(lab, corpus.copy_entry(first, edits=[corpus.solve("no_such_cell", "x = 1")]))
    sol = next(c.metadata.nbgrader["grade_id"] for c in nbformat.read(
        ROOT / "source" / lab / f"{first.notebook}.ipynb", as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code")
    with pytest.raises(corpus.SpecError, match="no longer contains"):
        corpus.build_entry(lab, corpus.copy_entry(first, edits=[corpus.sub(sol, "text that is not there", "")]))
    with pytest.raises(corpus.SpecError, match="not a graded cell"):
        corpus.build_entry(lab, corpus.copy_entry(first, lose=("no_such_test",)))


def test_every_spec_builds_against_the_current_notebooks():
    built = corpus.build_all()
    assert built
    for b in built:
        assert b.expected_total <= b.max_points
        for name, text in b.files.items():
            if b.entry.file_text is None:
                nbformat.validate(nbformat.reads(text, as_version=4))


def test_each_task_has_two_wrong_answers_that_lose_it():
    """Coverage rule of the corpus: every test cell is lost by at least two 'wrong' entries."""
    for lab in corpus.available():
        spec = corpus.load_spec(lab)
        for nb in {e.notebook for e in spec.ENTRIES}:
            src = nbformat.read(ROOT / "source" / lab / f"{nb}.ipynb", as_version=4)
            tests = [c.metadata.nbgrader["grade_id"] for c in src.cells
                     if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata.nbgrader.get("solution")]
            for t in tests:
                n = sum(t in e.lose for e in spec.ENTRIES if e.notebook == nb and e.name.startswith("wrong"))
                assert n >= 2, f"{lab}/{nb}: only {n} wrong answer(s) lose {t}"
            names = {e.name for e in spec.ENTRIES if e.notebook == nb}
            assert {"reference", "untouched"} <= names
            assert tests == [] or "rewritten" in names, f"{lab}/{nb}: no correct answer written differently"


# ----------------------------------------------------------------------------- command lines

def test_batch_refuses_an_unknown_assignment():
    proc = subprocess.run([sys.executable, str(ROOT / "autograder" / "batch.py"), "no_such_lab", "--no-merge"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no_such_lab" in proc.stderr


def test_grade_refuses_an_oversized_file(tmp_path):
    big = tmp_path / "huge.ipynb"
    with open(big, "wb") as f:
        f.truncate((65 << 20))
    proc = subprocess.run([str(ROOT / "autograder" / "grade"), corpus.available()[0], str(big)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "larger than" in proc.stderr
