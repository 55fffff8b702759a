"""The answer kernel's view of the course library (autograder/sandbox/library_view.py) holds nothing a
graded function could hand its work to, and its sandbox shows no other copy of the library.

The view is built from the real library into a folder of the test's own; its modules are read with
`ast` and imported in subprocesses that put the view first on the path, as an unsandboxed kernel
would; the sandbox tests start bubblewrap as the grader does (.ci/run installs it).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import corpus
from autograder.course.layout import ROOT
from autograder.execution.tworun import answer_cells
from autograder.review.task_map import ANYWHERE, TASKS
from autograder.sandbox import bubblewrap as sandbox
from autograder.sandbox import library_view

pytestmark = pytest.mark.fast

NOTEBOOKS = sorted({(t.assignment, t.notebook) for t in TASKS})


@pytest.fixture(scope="module")
def view(tmp_path_factory) -> Path:
    return library_view.build(root=tmp_path_factory.mktemp("view"))


def _run(view: Path, code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(view), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=cwd or view, timeout=300)


def test_the_view_defines_no_function_or_class_but_the_allowed_ones(view):
    allow = library_view.allow_list()
    found = {}
    for path in sorted((view / "llmrl").rglob("*.py")):
        if path.name == f"{library_view.MARKER}.py":
            continue
        rel = path.relative_to(view).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        tree = ast.parse(path.read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n in tree.body}
        found[module] = names
        home = library_view.alias_target(module, rel.name == "__init__", path.read_text())
        if home is not None:  # an old path: nothing but the alias to its home's view
            assert names == set() and ast.get_docstring(tree).endswith(
                f"the old path of {home} (autograder/sandbox/library_view.py)."), module
            continue
        assert names <= set(allow.get(module, {})), f"{module} keeps {sorted(names - set(allow.get(module, {})))}"
        # no docstring of the library's (they state the formulas): the view's only string literals are
        # its own header and the constants it keeps
        assert ast.get_docstring(tree).endswith("declarations only (autograder/sandbox/library_view.py)."), module
    assert set().union(*found.values()) == {n for names in allow.values() for n in names}
    # every module of the library is there, under its own name
    real = set(library_view._modules(library_view.library_source()))
    assert set(found) == real


def test_every_function_the_task_map_names_is_absent_in_the_view(view):
    targets = sorted({lib.target for t in TASKS for lib in t.library} | {lean.target for lean in ANYWHERE})
    assert len(targets) >= 25, targets  # the map names every library version of a graded task
    out = _run(view, """
import importlib, json, sys
from llmrl._grading_view import Absent
res = {}
for target in json.loads(sys.argv[1]):
    module, name = target.rsplit(".", 1)
    obj = getattr(importlib.import_module(module), name)
    res[target] = isinstance(obj, Absent)
print(json.dumps(res))
""", json.dumps(targets))
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert [t for t, absent in res.items() if not absent] == []


def test_the_allow_list_keeps_no_graded_task_and_says_why(view):
    allow = library_view.allow_list()
    targets = {lib.target for t in TASKS for lib in t.library} | {lean.target for lean in ANYWHERE}
    for module, names in allow.items():
        for name, reason in names.items():
            assert f"{module}.{name}" not in targets, f"{module}.{name} does a graded task"
            assert len(reason.split()) >= 8, f"{module}.{name}: the reason is too short to review"
    # what the view keeps works as the real declarations do: a LossBatch the tests send unpickles
    out = _run(view, """
import pickle, torch
from llmrl.losses import LossBatch
from llmrl.utils import grading_mode, set_threads
b = pickle.loads(pickle.dumps(LossBatch(torch.zeros(1, 2), torch.zeros(1, 2, 3), torch.zeros(1, 2),
                                        torch.ones(1, 2, dtype=torch.bool), torch.ones(1), torch.ones(1))))
set_threads(1)
print(b.eps_low, b.eps_high, b.rare_prob, type(b).__module__, grading_mode())
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.2", "0.2", "0.5", "llmrl.rl.losses", "False"]


def test_the_view_keeps_the_literal_constants(view):
    import llmrl.addition
    import llmrl.labs.lab11
    import llmrl.labs.lab19

    out = _run(view, """
import json
from llmrl.labs.lab11 import EXPECTED
from llmrl.labs.lab19 import REFERENCE_SEEDS
from llmrl.addition import PROMPT_LEN, BUCKETS
print(json.dumps([EXPECTED, REFERENCE_SEEDS, PROMPT_LEN, BUCKETS]))
""")
    assert out.returncode == 0, out.stderr
    want = json.loads(json.dumps([llmrl.labs.lab11.EXPECTED, llmrl.labs.lab19.REFERENCE_SEEDS,
                                  llmrl.addition.PROMPT_LEN, llmrl.addition.BUCKETS]))
    assert json.loads(out.stdout) == want


def test_an_absent_name_imports_and_fails_on_any_use_naming_itself(view):
    out = _run(view, """
import pickle, types
from llmrl.sampling import gather_logprobs
from llmrl import toylm
import llmrl.labs.lab11 as lab11
uses = {"call": lambda: gather_logprobs(1, 2), "attribute": lambda: gather_logprobs.keywords,
        "index": lambda: lab11.reference_kl_estimators[0], "iterate": lambda: list(toylm.tilted_optimum),
        "truth": lambda: bool(toylm.soft_values), "subclass": lambda: types.new_class("X", (toylm.ToyLM,)),
        "unpickled": lambda: pickle.loads(pickle.dumps(gather_logprobs))()}
for what, use in uses.items():
    try:
        use()
    except ImportError as e:
        print(what, "|", str(e).split(" is not available")[0])
    else:
        print(what, "| no error")
try:
    from llmrl.sampling import no_such_name
except ImportError as e:
    print("unknown | ImportError")
print(repr(gather_logprobs))
print(hasattr(gather_logprobs, "__code__"), hasattr(gather_logprobs, "__wrapped__"))
""")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # imported by their old paths, named where the library defines them
    assert lines[:7] == ["call | llmrl.lm.sampling.gather_logprobs", "attribute | llmrl.lm.sampling.gather_logprobs",
                         "index | llmrl.labs.lab11.reference_kl_estimators", "iterate | llmrl.lm.toylm.tilted_optimum",
                         "truth | llmrl.lm.toylm.soft_values", "subclass | llmrl.lm.toylm.ToyLM",
                         "unpickled | llmrl.lm.sampling.gather_logprobs"]
    assert lines[7] == "unknown | ImportError"  # a name the library does not have is a plain ImportError
    assert "not available while your functions are graded" in lines[8]
    assert lines[9] == "False False"  # no code object or wrapped function to be had from it


def test_an_old_path_is_its_homes_module_in_the_view_too(view):
    # the notebooks' old paths (llmrl.sampling, llmrl.losses) and the homes (llmrl.lm.sampling, ...)
    # are one module of the view: the same absent names, the same kept declarations
    out = _run(view, """
import llmrl.sampling, llmrl.lm.sampling, llmrl.losses, llmrl.rl.losses
from llmrl import sampling
from llmrl.sampling import gather_logprobs as old
from llmrl.lm.sampling import gather_logprobs as new
from llmrl.losses import LossBatch
from llmrl.utils import grading_mode
import llmrl.hw4.trainer, llmrl.hw4.run_manager
print(llmrl.sampling is llmrl.lm.sampling is sampling, old is new, llmrl.losses is llmrl.rl.losses,
      LossBatch is llmrl.rl.losses.LossBatch, llmrl.hw4.trainer is llmrl.hw4.run_manager)
""")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 5


def test_the_allow_list_must_name_a_declaration_where_it_is_defined(tmp_path):
    allow = tmp_path / "library_view.json"
    allow.write_text(json.dumps({"llmrl.losses": {"LossBatch": "the tests hand it to a student's function"}}))
    with pytest.raises(library_view.ViewError, match=r"llmrl.losses \(the old path of llmrl.rl.losses\)"):
        library_view.build(root=tmp_path / "view", allow_file=allow)


def test_the_message_a_student_reads_fits_the_feedback_line(view):
    from autograder.execution.broker import MESSAGE_CHARS

    out = _run(view, "import llmrl.rl.step as s\ntry:\n    s.minibatches({}, 1)\nexcept ImportError as e:\n    print(e)")
    line = f"LibraryNotAvailable: {out.stdout.strip()}"
    assert "llmrl.rl.step.minibatches" in line and "Write this step in your function" in line
    assert len(line) <= MESSAGE_CHARS, len(line)


def test_the_view_is_built_once_per_library(view, tmp_path):
    again = library_view.build(root=view.parent)
    assert again == view
    other = tmp_path / "lib" / "llmrl"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text('"""x"""\n__version__ = "9"\n')
    (other / "sampling.py").write_text("def gather_logprobs(logits, targets):\n    return logits\nLIMIT = 3\n")
    empty = tmp_path / "allow.json"
    empty.write_text("{}")
    built = library_view.build(src=other, root=tmp_path / "views", allow_file=empty)
    assert built != view and (built / "llmrl" / "sampling.py").read_text().count("def ") == 0
    assert "LIMIT = 3" in (built / "llmrl" / "sampling.py").read_text()
    with pytest.raises(library_view.ViewError, match="keeps"):
        library_view.view_module("llmrl.x", "A = 1\n", {"gone": "a reason long enough to be read here"}, set())


# ----------------------------------------------------------------------------- what a graded function uses

# Where a graded function of one task needs the answer of another, it is the student's own function
# (in the same notebook): these are all such uses, read from what the reference solutions call in the
# answer kernel on the task map's probe inputs. Everything else a graded function runs is torch, numpy,
# Python's standard library or its own helpers; of the course library, nothing but the view's kept
# declarations (LossBatch). Where a lab's tests need the library's own computation (lab19's hidden
# entropy test measures the shipped SFT model: llmrl.labs.lab19.policy_entropy on load_checkpoint("sft")),
# it runs in the tests' kernel, which has the whole library and sends the student's function tensors;
# TESTS_USING_THE_LIBRARY lists those test cells.
STUDENTS_OWN = {
    ("lab11", "token_level_optimum"): {"tilted_optimum"},
    ("hw4", "reinforce_loss"): {"approx_kl_from_logprobs"},
    ("hw4", "grpo_loss"): {"approx_kl_from_logprobs"},
    ("lab21", "opd_pg_loss"): {"reverse_kl_rewards"},
}
TESTS_USING_THE_LIBRARY = {
    ("lab11", "llm_as_policy"): {"test_task4_tilted_optimum_values": {"toylm.scenario", "toylm.kl_divergence",
                                                                      "toylm.tilted_optimum"},
                                 "test_task5_token_level_optimum_values": {"toylm.soft_values", "toylm.tilted_optimum",
                                                                           "toylm.scenario"}},
    ("lab19", "failure_modes"): {"test_task1c_fit_gao_bon_values": {"overopt.bon_kl"},
                                 "test_task4_token_entropy_values": {"lab19.policy_entropy",
                                                                     "llmrl.sft.checkpoints.load_checkpoint"}},
}

_TRACE = r"""
import json, sys
from IPython.core.inputtransformer2 import TransformerManager
cells, calls = json.loads(sys.stdin.read())
ns = {"__name__": "__main__", "get_ipython": lambda: None}
failed = {}
for key, code in cells:  # as the kernel does, a cell's error is recorded and the next cell runs
    try:
        exec(compile(TransformerManager().transform_cell(code), f"<{key}>", "exec"), ns)
    except Exception as e:
        failed[key] = f"{type(e).__name__}: {e}"
import math, numpy as np, torch
from types import SimpleNamespace
from llmrl.losses import LossBatch
g = torch.Generator().manual_seed(0)
R = lambda *s: torch.randn(*s, generator=g)
I = lambda high, *s: torch.randint(0, high, s, generator=g)
def M(*s):
    m = torch.rand(*s, generator=g) > 0.4
    m[..., 0] = True
    return m
G = lambda: torch.Generator().manual_seed(0)
env = dict(torch=torch, np=np, math=math, LossBatch=LossBatch, SimpleNamespace=SimpleNamespace, R=R, I=I, M=M, G=G)
out = {}
for function, probe in calls:
    args, kwargs = eval(probe, env)
    seen = set()
    def profile(frame, event, arg):
        if event == "call":
            seen.add((frame.f_code.co_filename, frame.f_code.co_name))
    sys.setprofile(profile)
    try:
        res = ns[function](*args, **kwargs)
        if hasattr(res, "__next__"):
            list(res)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    finally:
        sys.setprofile(None)
    out[function] = {"error": error, "calls": sorted(seen)}
print(json.dumps({"calls": out, "failed": failed}))
"""


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_graded_functions_use_only_their_notebook_torch_and_numpy_in_the_answer_kernel(view, assignment, notebook):
    entry = corpus.build_entry(assignment, corpus.standard_entries(notebook)[0])
    submission = nbformat.reads(entry.files[f"{notebook}.ipynb"], as_version=4)
    source = nbformat.read(ROOT / "source" / assignment / f"{notebook}.ipynb", as_version=4)
    cells = [(key, code) for key, code, _ in answer_cells(submission, source)]
    tasks = [t for t in TASKS if (t.assignment, t.notebook) == (assignment, notebook)]
    calls = [(t.function, t.probe) for t in tasks]
    env = dict(os.environ, PYTHONPATH=str(view), PYTHONDONTWRITEBYTECODE="1", NBGRADER_EXECUTION="autograde")
    proc = subprocess.run([sys.executable, "-c", _TRACE], input=json.dumps([cells, calls]), capture_output=True,
                          text=True, env=env, cwd=view, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    # the student's cells define without error; a course set-up cell may stop where it loads the
    # course's data (lab19's reference runs), which no graded function reads
    assert [k for k in result["failed"] if not k.startswith("set-up")] == [], result["failed"]
    result = result["calls"]
    graded = {t.function for t in tasks}
    view_files = str(view / "llmrl")
    for t in tasks:
        r = result[t.function]
        assert r["error"] is None, f"{t.function} failed on its probe in the answer kernel: {r['error']}"
        library = sorted({f"{Path(f).name}:{name}" for f, name in r["calls"] if f.startswith(view_files)})
        # of the view, only the dataclass LossBatch's generated code may run (its file is "<string>")
        assert library == [], f"{t.function} ran the course library's view: {library}"
        own = {name for f, name in r["calls"] if f.startswith("<solution cell") or f.startswith("<your cell")}
        others = (own & graded) - {t.function}
        assert others == STUDENTS_OWN.get((assignment, t.function), set()), (t.function, others)


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_the_tests_that_use_the_library_are_these(assignment, notebook):
    source = nbformat.read(ROOT / "source" / assignment / f"{notebook}.ipynb", as_version=4)
    found = {}
    for c in source.cells:
        meta = c.metadata.get("nbgrader", {})
        if c.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        used = set()
        for n in ast.walk(ast.parse(c.source)):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and \
                    n.value.id in ("toylm", "overopt", "lab11", "lab19", "lab21", "sampling", "losses", "evaluation"):
                used.add(f"{n.value.id}.{n.attr}")
            elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("llmrl"):
                used |= {f"{n.module}.{a.name}" for a in n.names}
        if used:
            found[meta["grade_id"]] = used
    assert found == TESTS_USING_THE_LIBRARY.get((assignment, notebook), {})


# ----------------------------------------------------------------------------- the answer kernel's sandbox

def _plant(tmp: Path) -> tuple[Path, Path]:
    """A wheel of the real library and a copy of it, in a folder that goes on PYTHONPATH."""
    src = library_view.library_source()
    folder = tmp / "elsewhere"
    folder.mkdir()
    wheel = folder / "llmrl-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for p in sorted(src.rglob("*.py")):
            z.write(p, f"llmrl/{p.relative_to(src)}")
    copy = folder / "llmrl_copy"
    copy.mkdir()
    (copy / "sampling.py").write_text((src / "sampling.py").read_text())
    return wheel, copy


def _sandboxed(argv: list[str], runtime: Path, code: str) -> subprocess.CompletedProcess:
    env = sandbox.kernel_env(runtime, {})
    return subprocess.run(argv + [sandbox.PYTHON, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_the_answer_sandbox_shows_the_view_and_no_copy_of_the_library(view, tmp_path, monkeypatch):
    assert sandbox.bwrap_status() == "ok", "bubblewrap is needed (apt-get install bubblewrap; .ci/run installs it)"
    wheel, copy = _plant(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(wheel.parent))
    sandbox._exposed.cache_clear()
    try:
        runtime = tmp_path / "rt"
        work = runtime / "work"
        work.mkdir(parents=True)
        sandbox.prepare_runtime(runtime)
        real = library_view.library_source()
        look = f"""
import json, os, sys
import llmrl.sampling, llmrl
from llmrl._grading_view import Absent
pkg = os.path.dirname(llmrl.__file__)
print(json.dumps({{"pkg": pkg, "absent": isinstance(llmrl.sampling.gather_logprobs, Absent),
    "beside": sorted(os.listdir(os.path.dirname(pkg))), "wheel": os.path.getsize({str(wheel)!r}),
    "copy": os.listdir({str(copy)!r}), "cache": os.path.exists({str(sandbox.cache_dir())!r}),
    "env": sorted(k for k in os.environ if "LIBRARY" in k)}}))
"""
        answer = _sandboxed(sandbox.bwrap_argv(work, runtime, None, view), runtime, look)
        assert answer.returncode == 0, answer.stderr
        seen = json.loads(answer.stdout)
        assert seen["pkg"] == str(real) and seen["absent"]
        if not sandbox._is_site_dir(real.parent):  # an editable install's source folder: only the view of it
            assert seen["beside"] == ["llmrl"]
        assert seen["wheel"] == 0 and seen["copy"] == [] and not seen["cache"] and seen["env"] == []
        # the tests' kernel, started without the view, has the whole library (and sees the planted files)
        tests = _sandboxed(sandbox.bwrap_argv(work, runtime, None), runtime,
                           "import llmrl.sampling as s, os; print(callable(s.gather_logprobs), "
                           f"os.path.getsize({str(wheel)!r}) > 0)")
        assert tests.stdout.split() == ["True", "True"], tests.stderr
        # the probe agrees, and refuses a sandbox that would show a copy
        assert sandbox.probe(view=view) is None
        monkeypatch.setattr(sandbox, "library_copies", lambda roots, depth=4: [])
        problem = sandbox.probe(view=view)
        assert problem is not None and "copies of the course library" in problem and str(wheel) in problem
    finally:
        monkeypatch.delenv("PYTHONPATH")
        sandbox._exposed.cache_clear()


def test_answer_cells_run_the_students_definitions_not_the_courses_experiments():
    source = nbformat.read(ROOT / "source" / "lab11" / "llm_as_policy.ipynb", as_version=4)
    # first a cell of the student's with nothing but an experiment in it (nothing of it runs)
    entry = corpus.build_entry("lab11", corpus.Entry("x", "llm_as_policy", "", [
        corpus.insert("EPS = 1e-9\n\ndef _my_shift(x):\n    return x[:, :-1]\n\nwhile True:\n    pass", after="start"),
        corpus.insert("print(sum(range(10)))", after="start")]))
    sub = nbformat.reads(entry.files["llm_as_policy.ipynb"], as_version=4)
    cells = answer_cells(sub, source)
    keys = [k for k, _, _ in cells]
    own = [code for k, code, _ in cells if k.startswith("your cell")]
    assert own == ["EPS = 1e-09\n\ndef _my_shift(x):\n    return x[:, :-1]"]  # the loop does not run
    assert keys[0].startswith("set-up cell") and all(k.startswith(("set-up", "solution", "your")) for k in keys)
    solutions = [k for k in keys if k.startswith("solution")]
    assert solutions == [f"solution cell {c.metadata['nbgrader']['grade_id']}" for c in source.cells
                         if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]
    # no experiment cell of the course: every set-up cell chosen defines a name the code above reads
    experiments = [i for i, c in enumerate(source.cells) if c.cell_type == "code" and "temperature_sweep" in c.source]
    assert experiments and not any(k == f"set-up cell {i + 1}" for i in experiments for k in keys)
