"""Fast checks of the grading-safety parts: the sandbox, the kernels' output caps, the wire format,
calls into the student's kernel, the static review notes, the corpus specs, the command lines.
The end-to-end checks are in test_corpus.py (every hostile entry) and test_grading_faults.py
(batches under faults)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import corpus
from autograder.execution import sandboxed_kernel as kernels
from autograder.review import code_flags as safety
from autograder.sandbox import bubblewrap as sandbox
from autograder.execution import tworun
from autograder.execution import wire_format as wire
from autograder.course.layout import ROOT

SANDBOXED = pytest.mark.skipif(sandbox.bwrap_status() != "ok", reason=f"no sandbox here: {sandbox.bwrap_status()}")


def _run(cells: list[str], env: dict | None = None, timeout: float = 30, book=None):
    """Run cells one by one in a sandboxed grading kernel; (replies, outputs per cell, work folder)."""
    async def go():
        k = kernels.Kernel("test", env=env)
        book_ = book or kernels.Outputs()
        await k.start()
        try:
            replies, outs = [], []
            for code in cells:
                sink = book_.cell()
                replies.append(await k.execute(code, timeout=timeout, sink=sink))
                outs.append(sink.outputs)
            return replies, outs, k.work
        finally:
            await k.shutdown()
    return asyncio.run(go())


def _text(outputs) -> str:
    return "".join(o.get("text", "") + str(o.get("evalue", "")) + str(o.get("data", {}).get("text/plain", ""))
                   for o in outputs)


# ----------------------------------------------------------------------------- the sandbox

@pytest.fixture
def model_cache():
    """The model cache the sandbox exposes, existing and not empty while the test runs. On a clean
    machine nothing may have written it yet (another lane of `make test` usually has): a marker file
    stands in for the models, and what the fixture made it removes again."""
    cache = sandbox.cache_dir()
    made_dir = not cache.exists()
    cache.mkdir(parents=True, exist_ok=True)
    marker = None
    if not any(cache.iterdir()):
        marker = cache / "test_batch_safety-marker.txt"
        marker.write_text("written by autograder/tests/test_batch_safety.py while it runs; safe to delete\n")
    yield cache
    if marker is not None:
        marker.unlink(missing_ok=True)
    if made_dir:
        try:
            cache.rmdir()  # only if still empty: another test may have cached a model meanwhile
        except OSError:
            pass


@SANDBOXED
def test_sandboxed_kernel_sees_only_the_system_the_environment_the_library_and_the_cache(tmp_path, model_cache):
    secret = tmp_path / "secret.txt"
    secret.write_text("hidden")
    replies, outs, work = _run([
        f"import os\nprint(sorted(os.listdir({str(ROOT)!r})))",
        f"print(open({str(secret)!r}).read())",
        f"open({str(ROOT / 'gradebook.db')!r}, 'w')",
        "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)",
        "open('mine.txt', 'w').write('ok'); print(open('mine.txt').read())",
        "import llmrl; print('library ok')",
        "import subprocess; print(subprocess.run(['mount', '-o', 'remount,rw', '/'], capture_output=True).returncode)",
        "print((sorted(os.listdir('/')), sorted(os.listdir('/etc'))))",
        "print(os.path.exists('/home'), sorted(os.listdir(os.path.expanduser('~root/.cache'))) "
        "if os.path.exists(os.path.expanduser('~root/.cache')) else [], "
        f"[p for p in os.listdir('/tmp') if not os.getcwd().startswith('/tmp/' + p) and not {str(ROOT)!r}.startswith('/tmp/' + p)])",
        "print(sorted(os.environ))",
        f"print(os.listdir({str(model_cache)!r}) != [])",
    ])
    text = [_text(o) for o in outs]
    assert text[0].strip() == str(sorted(p.name for p in (ROOT / "lib", ROOT / ".venv") if p.exists())), text[0]
    assert "No such file" in text[1], text[1]
    assert "Read-only" in text[2] or "No such file" in text[2], text[2]
    assert "unreachable" in text[3] or "Errno" in text[3], text[3]
    assert text[4].strip() == "ok" and (work / "mine.txt").read_text() == "ok" if work.exists() else True
    assert "library ok" in text[5]
    assert text[6].strip() != "0", "the kernel could remount the file system"
    top, etc = eval(text[7])  # noqa: S307 (two lists printed by the kernel above)
    assert "home" not in top and "srv" not in top and "opt" not in top, top
    assert set(etc) <= set(sandbox.ETC), etc
    in_home = [model_cache.name] if model_cache.parent == Path("/root/.cache") else []
    assert text[8].strip() == f"False {in_home} []", text[8]  # no /home; of ~/.cache the model cache only
    names = eval(text[9])  # noqa: S307
    leaked = [n for n in names if n not in sandbox.ENV_KEEP and n not in (
        "HOME", "TMPDIR", "MPLCONFIGDIR", "IPYTHONDIR", "LLMRL_CACHE", "PYTHONDONTWRITEBYTECODE", "MPLBACKEND",
        "JPY_PARENT_PID", "JPY_SESSION_NAME", "PWD", "PYDEVD_USE_FRAME_EVAL", "CLICOLOR", "FORCE_COLOR", "TERM",
        "PAGER", "GIT_PAGER", "LLMRL_SANDBOX_COURSES", "CLICOLOR_FORCE")]
    assert leaked == [], f"the kernel sees the grader's environment: {leaked}"
    assert "True" in text[10], "the model cache must be readable"


@SANDBOXED
def test_other_course_folders_and_home_are_not_visible():
    replies, outs, _ = _run(["import glob; print(glob.glob('/work/*/source/*/*.ipynb'), glob.glob('/home/*'), "
                             f"glob.glob({str(ROOT)!r} + '/source/*'))"])
    assert _text(outs[0]).strip() == "[] [] []", _text(outs[0])


def test_without_bwrap_the_kernel_still_runs_with_limits_and_a_warning(capfd):
    sandbox.bwrap_status.cache_clear()
    try:
        replies, outs, _ = _run(["import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)"],
                                env={"LLMRL_SANDBOX": "0", "LLMRL_GRADE_MEM_MB": "3000"})
    finally:
        sandbox.bwrap_status.cache_clear()
    assert _text(outs[0]).strip() == "3000"
    assert "WITHOUT a sandbox" in capfd.readouterr().err


@pytest.mark.fast
def test_bwrap_command_starts_from_an_empty_root_and_binds_two_folders_writable(tmp_path):
    argv = sandbox.bwrap_argv(tmp_path / "w", tmp_path / "rt")
    text = " ".join(argv)
    assert "--ro-bind / /" not in text and "--bind / /" not in text
    assert "--unshare-all" in text and "--cap-drop ALL" in text and "--ro-bind /usr /usr" in text
    assert f"--ro-bind {ROOT / 'lib'} {ROOT / 'lib'}" in text
    assert f"--bind {tmp_path / 'w'} {tmp_path / 'w'}" in text and f"--bind {tmp_path / 'rt'} {tmp_path / 'rt'}" in text
    assert "--remount-ro /" in text and f"{ROOT} " not in text.replace(f"{ROOT}/", "")


@pytest.mark.fast
def test_a_python_path_that_would_show_the_course_is_refused(monkeypatch):
    sandbox._exposed.cache_clear()
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    try:
        with pytest.raises(sandbox.SandboxError, match="holds the course's"):
            sandbox.exposed([ROOT])
    finally:
        sandbox._exposed.cache_clear()


@SANDBOXED
def test_the_probe_says_why_the_course_library_does_not_import(tmp_path):
    shadow = tmp_path / "shadow" / "llmrl"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('this llmrl is broken')\n")
    proc = subprocess.run([sys.executable, "-m", "autograder.sandbox.bubblewrap", "--probe"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(tmp_path / "shadow")))
    assert proc.returncode == 1
    assert "cannot be imported inside the grading sandbox" in proc.stdout and "this llmrl is broken" in proc.stdout
    ok = subprocess.run([sys.executable, "-m", "autograder.sandbox.bubblewrap", "--probe"], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout


# ----------------------------------------------------------------------------- output caps

def test_display_updates_count_against_the_cell_that_owns_the_display():
    book = kernels.Outputs(cell_cap=1000, notebook_cap=5000)
    first = book.cell()
    first.handle("display_data", {"data": {"text/plain": "x"}, "metadata": {}, "transient": {"display_id": "d"}})
    later = book.cell()
    for _ in range(20):
        later.handle("update_display_data", {"data": {"text/plain": "y" * 900}, "metadata": {},
                                             "transient": {"display_id": "d"}})
    later.handle("update_display_data", {"data": {"text/plain": "z" * 5000}, "metadata": {},
                                         "transient": {"display_id": "d"}})
    assert first.used <= 1000 and book.total <= 5000
    assert first.outputs[0]["data"]["text/plain"] == "y" * 900
    assert "dropped" in first.outputs[-1]["text"]


def test_streams_merge_clear_output_frees_the_budget_and_errors_are_always_kept():
    book = kernels.Outputs(cell_cap=100, notebook_cap=1000)
    c = book.cell()
    c.handle("stream", {"name": "stdout", "text": "a" * 60})
    c.handle("stream", {"name": "stdout", "text": "b" * 30})
    assert len(c.outputs) == 1 and c.used == 90
    c.handle("clear_output", {"wait": False})
    assert c.outputs == [] and c.used == 0 and book.total == 0
    c.handle("stream", {"name": "stdout", "text": "c" * 200})
    c.handle("error", {"ename": "ValueError", "evalue": "boom", "traceback": ["x" * 500]})
    assert c.outputs[-1]["output_type"] == "error" and c.outputs[-1]["ename"] == "ValueError"


@SANDBOXED
def test_a_100_mb_message_does_not_reach_the_graders_memory():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    replies, outs, _ = _run(["import sys; sys.stdout.write('x' * 100_000_000); sys.stdout.flush()",
                             "print('still talking')"])
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 60, f"the grader grew by {grown_mb:.0f} MB"
    assert replies[0].ok and replies[1].ok
    assert "still talking" in _text(outs[1]), "the output channel did not come back after the oversized message"


# ----------------------------------------------------------------------------- the wire format

def _answer(value, **extra) -> bytes:
    enc = wire.Encoder([])
    header = {"ok": True, "value": enc.node(value, top=True), **extra}
    return wire.pack(header, enc.buffers)


@pytest.mark.fast
def test_the_wire_brings_values_back_as_exact_builtin_types():
    import numpy as np
    import torch

    class MyTensor(torch.Tensor):
        pass

    class MyFloat(float):
        def __eq__(self, other):
            return True

    value = (torch.arange(4.0).as_subclass(MyTensor), np.arange(3).view(np.ndarray), MyFloat(1.5), np.float32(2.5),
             {"k": [1, True, None, "s", b"b", 1 + 2j]}, torch.tensor([True, False]), torch.ones(2, dtype=torch.bfloat16))
    header, buffers = wire.validate(_answer(value))
    out = wire.Decoder(buffers).value(header["value"])
    assert type(out) is tuple and type(out[0]) is torch.Tensor and torch.equal(out[0], torch.arange(4.0))
    assert type(out[1]) is np.ndarray and type(out[2]) is float and out[2] == 1.5
    assert type(out[3]) is np.float32 and type(out[4]["k"][1]) is bool and out[4]["k"][5] == 1 + 2j
    assert out[5].dtype == torch.bool and out[6].dtype == torch.bfloat16


@pytest.mark.parametrize("change, words", [
    (lambda h: h["value"].update(dtype="object"), "dtype"),
    (lambda h: h["value"].update(shape=[5]), "holds"),
    (lambda h: h.update(value={"t": "pickle", "v": "..."}), "unknown value kind"),
    (lambda h: h.update(extra=1), "unknown header fields"),
    (lambda h: h.update(value={"t": "list", "v": [h["value"], h["value"]]}), "used twice"),
])
@pytest.mark.fast
def test_the_wire_refuses_what_is_not_the_format(change, words):
    import torch

    header, buffers = wire.unpack(_answer(torch.ones(4)))
    header = json.loads(json.dumps(header))
    change(header)
    header.pop("buflens")
    data = wire.pack(header, [bytes(b) for b in buffers])
    with pytest.raises(wire.WireError, match=words):
        wire.validate(data)


def test_the_wire_refuses_deep_nesting_and_huge_headers():
    deep = {"t": "none"}
    for _ in range(wire.LIMITS["depth"] + 5):
        deep = {"t": "list", "v": [deep]}
    with pytest.raises(wire.WireError, match="nested"):
        wire.validate(wire.pack({"ok": True, "value": deep}, []))
    with pytest.raises(wire.WireError):
        wire.validate(b"not a message at all")


def test_exceptions_come_back_as_the_nearest_builtin_class():
    class MyError(ValueError):
        pass

    e = wire.rebuild_exception(wire.exception(MyError("bad temperature")))
    assert type(e) is ValueError and "bad temperature" in str(e)
    assert type(wire.rebuild_exception(wire.exception(NotImplementedError()))) is NotImplementedError
    assert type(wire.rebuild_exception({"t": "exc", "types": ["SystemExit", "BaseException"], "msg": "x"})) is RuntimeError


# ----------------------------------------------------------------------------- calls into the student's kernel

def _grade_tiny(solution: str, test: str, free: list[str] = (), settings: dict | None = None):
    """Run a two-cell notebook (solution, test) through the feedback and grading runs."""
    src = nbformat.v4.new_notebook()
    meta_sol = {"nbgrader": {"grade": False, "grade_id": "sol", "locked": False, "schema_version": 3,
                             "solution": True, "task": False}}
    meta_test = {"nbgrader": {"grade": True, "grade_id": "test", "locked": True, "points": 1, "schema_version": 3,
                              "solution": False, "task": False}}
    src.cells = [nbformat.v4.new_code_cell("import torch, numpy as np"),
                 nbformat.v4.new_code_cell(solution, metadata=meta_sol),
                 nbformat.v4.new_code_cell(test, metadata=meta_test)]
    sub = nbformat.from_dict(json.loads(json.dumps(src)))
    for code in free:
        sub.cells.insert(2, nbformat.v4.new_code_cell(code))
    s = tworun.Settings(**({"cell_timeout": 30, "notebook_timeout": 120} | (settings or {})))
    return asyncio.run(tworun.run_notebook(sub, src, s))


@pytest.mark.slow
def test_calls_keep_the_semantics_tests_rely_on():
    solution = '''
def f(x, g=None, out=None):
    """doubles x; draws with g; raises for negative; writes into out; a generator when x is an int"""
    if isinstance(x, int):
        return (i for i in range(x))
    if (x < 0).any():
        raise ValueError("negative input")
    if out is not None:
        out += 1
    noise = torch.rand(x.shape, generator=g) if g is not None else 0
    return x * 2 + 0 * noise, torch.rand(1).item()
'''
    test = '''
x = torch.tensor([1.0, 2.0], requires_grad=True)
y, r = f(x)
y.sum().backward()
assert torch.equal(x.grad, torch.tensor([2.0, 2.0])), x.grad
assert type(y) is torch.Tensor and y.requires_grad
g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
f(torch.ones(2), g1)
assert not torch.equal(g1.get_state(), g2.get_state()), "the generator's state must come back advanced"
torch.manual_seed(0); a = f(torch.ones(1))[1]
torch.manual_seed(0); b = f(torch.ones(1))[1]
assert a == b, "the global random state must travel with the call"
buf = torch.zeros(2)
f(torch.ones(2), out=buf)
assert torch.equal(buf, torch.ones(2)), "an argument changed in place must come back changed"
try:
    f(torch.tensor([-1.0]))
except ValueError as e:
    assert "negative" in str(e)
else:
    raise AssertionError("no ValueError")
assert list(f(3)) == [0, 1, 2]
with torch.no_grad():
    assert not f(torch.ones(1, requires_grad=True))[0].requires_grad
'''
    r = _grade_tiny(solution, test)
    assert r.verdicts == {"test": None}, r.verdicts
    assert r.review == []


@pytest.mark.slow
def test_a_call_that_hangs_or_kills_the_kernel_fails_that_test_and_the_next_calls_still_work():
    solution = '''
import os, time
def f(x):
    if x == "hang":
        while True:
            time.sleep(0.01)
    if x == "die":
        os._exit(3)
    return x
'''
    test = '''
try:
    f("hang")
except Exception:
    raise AssertionError("the grader's timeout was caught as an ordinary exception")
'''
    r = _grade_tiny(solution, test, settings={"cell_timeout": 5})
    assert r.verdicts["test"].startswith("StudentTimeout"), r.verdicts
    r = _grade_tiny(solution, "try:\n    f('die')\nexcept Exception:\n    pass\n")
    assert r.verdicts["test"].startswith("StudentKernelDied"), r.verdicts   # no `except Exception` swallows it
    # the next calls get a new kernel: test_a_function_that_crashes_the_kernel_costs_only_the_tests_that_call_it


@pytest.mark.slow
def test_an_answer_outside_the_format_fails_and_flags_the_notebook_for_review():
    # the student's function replaces the grader's serve function in its own kernel (after the first call)
    solution = ("def f(x):\n    import sys\n"
                "    sys.modules['_llmrl_remote'].serve = lambda text: 'bm90IGEgbWVzc2FnZQ=='\n    return x")
    r = _grade_tiny(solution, "assert f(1) == 1\nassert f(2) == 2")
    assert r.verdicts["test"].startswith("StudentProtocolError"), r.verdicts
    assert r.review and "outside the grader's format" in r.review[0]


def _grade_cells(cells, settings: dict | None = None):
    """Run a notebook given as (kind, code) cells, kind "setup", "solution" or "test" (1 point each)."""
    src = nbformat.v4.new_notebook()
    for i, (kind, code) in enumerate(cells):
        meta = {}
        if kind in ("solution", "test"):
            meta = {"nbgrader": {"grade": kind == "test", "grade_id": f"{kind}{i}", "locked": kind == "test",
                                 "schema_version": 3, "solution": kind == "solution", "task": False}}
            if kind == "test":
                meta["nbgrader"]["points"] = 1
        src.cells.append(nbformat.v4.new_code_cell(code, metadata=meta))
    sub = nbformat.from_dict(json.loads(json.dumps(src)))
    s = tworun.Settings(**({"cell_timeout": 30, "notebook_timeout": 180} | (settings or {})))
    return asyncio.run(tworun.run_notebook(sub, src, s))


SEGFAULT = "__import__('ctypes').string_at(0)"


@pytest.mark.slow
def test_a_function_that_crashes_the_kernel_costs_only_the_tests_that_call_it():
    """The failure this guards against: a correct lab11 whose one function segfaults scored 0/18. The
    fresh student's kernel ran the course's experiment cells (chosen because a function's own variable,
    `logits`, has the name of one of their globals), which call the crashing function, so every restarted
    kernel died before the first call; and after 3 restarts no function ran at all. Here: four tests call the
    crashing function, a solution cell runs it at its top level (a student's own check) and an
    experiment cell calls it; the other function's tests must pass."""
    cells = [
        ("setup", "import torch"),
        ("solution", f"def crash(x):\n    {SEGFAULT}\n\ndef ok(logits):\n    return logits + 1\n\n"
                     "print('my own check:', crash(0))"),
        ("setup", f"logits = torch.zeros(2)\nprint('experiment:', crash(logits))"),
        ("test", "assert ok(1) == 2"),
        *[("test", f"assert crash({i}) is None") for i in range(4)],
        ("test", "assert ok(torch.ones(1)).item() == 2.0"),
    ]
    r = _grade_cells(cells)
    crash_tests = [f"test{i}" for i in range(4, 8)]
    assert [gid for gid, v in r.verdicts.items() if v is not None] == crash_tests, r.verdicts
    assert all(r.verdicts[t].startswith("StudentKernelDied") for t in crash_tests), r.verdicts
    # two crashes, then the function is not run again (no more kernels are spent on it)
    assert r.events["crashed_calls"] == {"crash": 2}, r.events
    assert "not run" in r.verdicts["test7"], r.verdicts
    # the solution cell's own check killed the fresh kernel: its definitions ran without it
    assert "solution cell solution1" in r.events["fresh_kernel_cells"], r.events


def test_setup_cells_ignore_a_functions_own_variables():
    defined, used, _ = tworun.names("def f(logits, mask=None):\n    kl = logits * SCALE\n"
                                    "    return [k for k in kl] + np.log(mask)\nclass C:\n    x = OTHER")
    assert defined == {"f", "C"} and used == {"SCALE", "np", "OTHER"}, used
    src = nbformat.v4.new_notebook()
    src.cells = [nbformat.v4.new_code_cell("import numpy as np"),
                 nbformat.v4.new_code_cell("logits = np.zeros(3)\nprint(f(logits))"),   # an experiment
                 nbformat.v4.new_code_cell("SCALE = 2")]
    assert tworun.setup_cells(src, used) == [0, 2]
    assert tworun.definitions_only("import os\nx = 1\ndef f():\n    return x\nf()\n%time f()") == \
        "import os\n\ndef f():\n    return x"
    assert tworun.definitions_only("print(1)") is None


@pytest.mark.fast
def test_setup_cells_are_chosen_by_what_the_tests_read():
    src = nbformat.v4.new_notebook()
    src.cells = [nbformat.v4.new_code_cell("import math\nimport numpy as np"),
                 nbformat.v4.new_code_cell("model = train_for_an_hour()"),
                 nbformat.v4.new_code_cell("SCALE = math.pi"),
                 nbformat.v4.new_code_cell("_x = 1", metadata={"tags": ["grader-setup"]})]
    assert tworun.setup_cells(src, {"SCALE"}) == [0, 2, 3]
    assert tworun.setup_cells(src, {"model"}) == [1, 3]
    assert tworun.names("def f():\n    return g(y)\nz = 1\nfor i in range(3): pass")[:2] == (
        {"f", "z", "i"}, {"g", "y", "range"})


@pytest.mark.fast
def test_hidden_tests_are_removed_for_the_feedback_run():
    code = "a = 1\n### BEGIN HIDDEN TESTS\nassert secret()\n### END HIDDEN TESTS\nb = 2"
    assert tworun.strip_hidden(code) == "a = 1\nb = 2"


# ----------------------------------------------------------------------------- static review notes

@pytest.mark.parametrize("code, note", [
    ("torch.allclose = lambda *a, **k: True", "assigns torch.allclose"),
    ("np.testing.assert_allclose = print", "assigns np.testing.assert_allclose"),
    ("setattr(torch, 'allclose', f)", "calls setattr()"),
    ("open('/work/main/source/lab11/x.ipynb').read()", "opens"),
    ("import subprocess\nsubprocess.run(['ls'])", "calls subprocess.run()"),
    ("import sys\nsys.modules['torch'] = None", "uses sys.modules"),
])
@pytest.mark.fast
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
    """Coverage rule of the graded corpus: every task is lost (in at least one of its concern cells) by
    at least two 'wrong' entries. That each concern cell is failed by two wrong answers is checked
    on the corpus and its hold-out sets together, measured, in test_catch_rates.py."""
    for lab in corpus.available():
        spec = corpus.load_spec(lab)
        for nb in {e.notebook for e in spec.ENTRIES}:
            src = nbformat.read(ROOT / "source" / lab / f"{nb}.ipynb", as_version=4)
            tests = [c.metadata.nbgrader["grade_id"] for c in src.cells
                     if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata.nbgrader.get("solution")]
            solutions = [c.metadata.nbgrader["grade_id"] for c in src.cells
                         if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]
            # a task's cells are test_<task> and test_<task>_<concern> (corpus.concern_of's naming)
            tasks = {task: [t for t in tests if t == f"test_{task}" or t.startswith(f"test_{task}_")]
                     for task in solutions}
            assert sorted(t for cells in tasks.values() for t in cells) == sorted(tests), f"{lab}/{nb}: a test of no task"
            for task, cells in tasks.items():
                n = sum(any(c in e.lose for c in cells) for e in spec.ENTRIES
                        if e.notebook == nb and e.name.startswith("wrong"))
                assert n >= 2, f"{lab}/{nb}: only {n} wrong answer(s) lose a cell of {task} ({cells})"
            names = {e.name for e in spec.ENTRIES if e.notebook == nb}
            assert {"reference", "untouched"} <= names
            assert tests == [] or "rewritten" in names, f"{lab}/{nb}: no correct answer written differently"


def test_each_class_of_issue_13_has_two_hostile_entries():
    hostile = corpus.load_spec("hostile")
    built = [b for b in corpus.build_all() if b.entry.name.startswith("h") and b.entry.name[1].isdigit()]
    for cls in "1234567":
        names = {b.entry.name for b in built if b.entry.name.startswith(f"h{cls}-")}
        assert len(names) >= 2, f"class {cls}: only {sorted(names)}"
    assert set(hostile.PLACES) | set(hostile.EVERYWHERE) == {b.entry.name for b in built}
    controls = {(b.assignment, b.entry.notebook) for b in corpus.build_all() if b.entry.name == "wrong-control"}
    dressed = {(b.assignment, b.entry.notebook) for b in built if b.entry.name.startswith(hostile.CONTROLLED)}
    assert controls == dressed


# ----------------------------------------------------------------------------- command lines

def test_batch_refuses_an_unknown_assignment():
    proc = subprocess.run([str(ROOT / "autograder" / "bin" / "batch"), "no_such_lab", "--no-merge"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no_such_lab" in proc.stderr


def test_grade_refuses_an_oversized_file(tmp_path):
    big = tmp_path / "huge.ipynb"
    with open(big, "wb") as f:
        f.truncate((65 << 20))
    proc = subprocess.run([str(ROOT / "autograder" / "bin" / "grade"), corpus.available()[0], str(big)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "larger than" in proc.stderr


@pytest.mark.fast
def test_grade_refuses_a_notebook_that_is_a_symbolic_link(tmp_path):
    link = tmp_path / "llm_as_policy.ipynb"
    link.symlink_to(ROOT / "source" / "lab11" / "llm_as_policy.ipynb")  # the solutions, if it were followed
    proc = subprocess.run([str(ROOT / "autograder" / "bin" / "grade"), "lab11", str(link)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "symbolic link" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_submission_leaning_on_the_library_is_held_for_review_with_the_answer_keys_notes(tmp_path):
    """The grader runs the answer-key check (autograder/review/answer_key.py), static and at run time."""
    from autograder.corpus._library_leans import LEANS

    entry = LEANS["lab11"][0]
    built = corpus.build_entry("lab11", entry)
    path = tmp_path / f"{entry.notebook}.ipynb"
    path.write_text(next(iter(built.files.values())))
    proc = subprocess.run([str(ROOT / "autograder" / "bin" / "grade"), "lab11", str(path)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    nb = json.loads(proc.stdout)["notebooks"][0]
    reasons = [r for r in nb["review_reasons"] if r.startswith("answer key: ")]
    assert nb["needs_manual_review"] and nb["points"] == 0
    assert any("(seen at run time)" in r for r in reasons) and any("delegates to" in r for r in reasons), reasons


# ----------------------------------------------------------------------------- CSV tables

def test_grade_tables_never_hold_a_spreadsheet_formula(tmp_path):
    """A student id or a file name is written by the student: `=HYPERLINK(...)` or `@SUM(...)` in a
    cell would run when the instructor opens the table. Such cells arrive as text (a leading
    apostrophe); numbers, negative ones included, stay numbers."""
    import csv

    from autograder.sandbox import safe_files as files

    hostile = ["=HYPERLINK(\"http://x\",\"a\")", "+1+1", "-1+cmd|' /C calc'!A0", "@SUM(A1)", "\tx", "\rx"]
    rows = [{"student": s, "points": p} for s, p in zip(hostile, [1, -2, "-2.5", 3.0, "+4", "1e3"])]
    path = tmp_path / "t.csv"
    files.write_csv(path, ["student", "points"], rows)
    with path.open(newline="") as f:
        back = list(csv.DictReader(f))
    for got, sent in zip(back, rows):
        assert got["student"] == "'" + sent["student"], got
        assert got["points"] == str(sent["points"]), got
    assert files.spreadsheet_safe("bob") == "bob" and files.spreadsheet_safe("-") == "'-"
