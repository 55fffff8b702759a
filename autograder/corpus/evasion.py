"""Submissions that hide a lean on the course library from the answer-key check, and ones whose
function crashes the kernel: graded by the real batch grader in `make test`.

Shared spec (like hostile.py): `entries(assignment)` gives the entries that run on that
assignment's notebook. Each evasion entry hands graded tasks to the library's complete versions in
a way the first answer-key check (source text only) did not see (the library copied into the kernel's folder and
imported from there, a function fetched by unpickling, a code object found through the garbage
collector and rebuilt under another file name, code unmarshalled from bytes pasted into the
notebook, a function that dies or stalls only when the probe calls it, a trace or profile function
set before the grader's calls). Against the grader before the answer kernel every answer was right (all tests
passed), so only the hold for review told it from an honest notebook. Since then the answer
kernel holds none of the library's code: an attack that reaches for the library itself (a copy of
its files, a pickled reference, a walk of the garbage collector) finds nothing that computes and its
task loses its tests (`lose`); one that brings the library's bytecode in as pasted bytes (marshal, a
crafted pickle) still computes, and the watch names the copy. Every attack sits in a solution cell:
a cell the student added runs only its definitions in the answer kernel. `reasons` lists what the
review reasons must say, one entry per attack, so each attack is checked on its own.

The crash entries are honest notebooks whose one function kills the kernel: they lose exactly the
tests that call that function and are held for review (a graded call that kills the kernel cannot
be watched), with every other test's verdict intact.

Pickles and marshalled code are made here, when the corpus is built, by the same Python that
grades: a student would paste such bytes into a cell.
"""

from __future__ import annotations

import marshal
import pickle

from autograder.corpus import Entry, _code, solve, source_json, tests_of

L11, L19, L21, HW4 = "llm_as_policy", "failure_modes", "tasks", "llm_rl"


def then(gid: str, code: str):
    """The reference solution of `gid`, followed by `code` (which may rebind what it defined)."""
    from autograder.corpus import SpecError, _cell, _code

    def edit(nb, solutions):
        if gid not in solutions:
            raise SpecError(f"{gid!r} is not a solution cell of the source")
        _cell(nb, gid)["source"] = solutions[gid] + "\n\n" + _code(code)
    return edit


def tests_calling(assignment: str, notebook: str, function: str) -> tuple:
    """The test cells of the source notebook whose code calls `function` (by name, hidden tests
    included): the cells a function that crashes must cost, however the tests are split into cells."""
    import re

    nb = source_json(assignment, notebook)
    out = []
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("nbgrader") or {}
        text = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] == "code" and meta.get("grade") and not meta.get("solution") \
                and re.search(rf"\b{re.escape(function)}\s*\(", text):
            out.append(meta["grade_id"])
    return tuple(out)


# ----------------------------------------------------------------------------- blobs a student pastes

def _pickled_reference(module: str, name: str) -> bytes:
    """pickle.dumps of a library function: a reference by name, so loads() imports the real one."""
    import importlib

    return pickle.dumps(getattr(importlib.import_module(module), name), protocol=4)


def _code_of(module: str, name: str, filename: str):
    import importlib

    fn = getattr(importlib.import_module(module), name)
    fn = getattr(fn, "__wrapped__", fn)
    return fn.__code__.replace(co_filename=filename)


def _marshalled(module: str, name: str, filename: str) -> bytes:
    return marshal.dumps(_code_of(module, name, filename))


def _marshalled_module(module: str) -> bytes:
    """The whole module's code, compiled from its file under another name and marshalled."""
    import importlib

    path = importlib.import_module(module).__file__
    with open(path, encoding="utf-8") as f:
        return marshal.dumps(compile(f.read(), "losses_notes.py", "exec"))


class _Call:
    """Pickles as a call of `fn(*args)`: how a crafted pickle builds objects when it is loaded."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args

    def __call__(self, *args):  # pickle wants the first item of a reduce to be callable; at load time
        raise TypeError("only its pickle is used")  # the call it stands for is made instead


def _pickled_rebuilt(module: str, name: str, filename: str) -> bytes:
    """A pickle that, when loaded, unmarshals the library function's code (renamed file) and makes a
    new function of it over the library module's globals: nothing in it names a file of llmrl."""
    import importlib
    import types

    globals_ = _Call(vars, _Call(importlib.import_module, module))
    code = _Call(marshal.loads, _marshalled(module, name, filename))
    function_type = _Call(getattr, _Call(importlib.import_module, "types"), "FunctionType")
    return pickle.dumps(_Call(function_type, code, globals_, name), protocol=4)


# ----------------------------------------------------------------------------- attack code

COPY_PACKAGE = '''
import os, shutil, sys
import llmrl

# the course library, copied into this kernel's own folder and imported from there
shutil.copytree(os.path.dirname(llmrl.__file__), "mylib",
                ignore=shutil.ignore_patterns("__pycache__", "models", "*.json"))
sys.path.insert(0, os.getcwd())
'''

COPY_ONE_FILE = '''
import importlib.util, shutil, sys
from llmrl import overopt as _real

shutil.copy(_real.__file__, "fit_notes.py")            # one file of the library, under another name
_spec = importlib.util.spec_from_file_location("llmrl.labs.fit_notes", "fit_notes.py")  # beside its home: its ..utils import
_fit_notes = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _fit_notes
_spec.loader.exec_module(_fit_notes)
'''

# True when the answer-key probe is among the callers. Each solution cell that uses it defines it (a
# fresh kernel, which the grader starts when the probe killed the first one, runs solution cells only).
UNDER_PROBE = '''def _under_probe():
    import sys
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name.startswith("_llmrl_answer_key"):
            return True
        f = f.f_back
    return False


'''

SPY_TRACE = '''
import sys

_frames_seen = []
def _spy(frame, event, arg):           # sees every call the grader makes in this kernel
    if len(_frames_seen) < 1000:
        _frames_seen.append(frame.f_code.co_name)
    return None
sys.settrace(_spy)
'''

SPY_PROFILE = '''
import sys, threading

_calls_seen = [0]
def _count(frame, event, arg):
    _calls_seen[0] += 1
threading.setprofile(_count)           # for every thread started from now on
sys.setprofile(_count)
'''


def _lab11() -> list[Entry]:
    return [
        Entry("evade-copies-a", L11, "1a imports a copy of the library from its own folder, 3 is unpickled "
              "(a reference to lab11.reference_kl_estimators), 4's tilted_optimum is found through the garbage "
              "collector and rebuilt under another file name, 1b is unmarshalled from pasted bytes", [
                  solve("task1a_response_logprobs", COPY_PACKAGE + _code('''
                      import mylib.lm.sampling as _mine

                      def response_logprobs(logits, tokens, prompt_len):
                          return _mine.gather_logprobs(logits[:, prompt_len - 1:-1], tokens[:, prompt_len:])
                  ''')),
                  solve("task1b_sequence_logprob", f'''
                      import marshal, types

                      sequence_logprob = types.FunctionType(marshal.loads({_marshalled(
                          "llmrl.labs.lab11", "reference_sequence_logprob", "<my sum>")!r}), vars(lab11),
                          "sequence_logprob")
                  '''),
                  solve("task3_kl_estimators", f'''
                      import pickle

                      kl_estimators = pickle.loads({_pickled_reference("llmrl.labs.lab11", "reference_kl_estimators")!r})
                  '''),
                  then("task4_tilted_optimum", '''
                      import gc, types

                      for _o in gc.get_objects():
                          if type(_o) is types.FunctionType and _o.__name__ == "tilted_optimum" \\
                                  and _o.__module__ == "llmrl.lm.toylm":
                              tilted_optimum = types.FunctionType(
                                  _o.__code__.replace(co_filename="<my optimum>"), _o.__globals__, "tilted_optimum")
                              break
                  '''),
              ], review=True, lose=tests_of("lab11", L11, "task1a_response_logprobs", "task1b_sequence_logprob",
                                         "task3_kl_estimators"),
              reasons=("task1a_response_logprobs: response_logprobs uses module mylib.lm.sampling, which is not installed "
                       "(a file written at run time)",
                       "task1b_sequence_logprob: sequence_logprob ran a copy of llmrl.labs.lab11.reference_sequence_logprob",
                       "task1b_sequence_logprob: sequence_logprob uses unmarshalled code (marshal.loads)",
                       "task3_kl_estimators: kl_estimators uses unpickling (pickle.loads)",
                       "task4_tilted_optimum: tilted_optimum uses a walk of the garbage collector (gc.get_objects)")),
        Entry("crash-segfault", L11, "correct, but sample_with_temperature segfaults (ctypes): only task 2's test "
              "fails, and the notebook is held (a graded call that kills the kernel cannot be watched)", [
                  solve("task2_sample_with_temperature", '''
                      def sample_with_temperature(logits, temperature, generator=None):
                          import ctypes
                          return ctypes.string_at(0)     # reads address 0: the kernel dies
                  ''')], review=True, lose=tests_calling("lab11", L11, "sample_with_temperature"),
              reasons=("sample_with_temperature killed the student's kernel in 2 graded call(s)",)),
    ]


def _lab19() -> list[Entry]:
    return [
        Entry("evade-copies-b", L19, "1c from one library file copied under another name (loaded with "
              "importlib), 1b from a crafted pickle that unmarshals the library's code, 2 from the losses module "
              "unmarshalled whole, 3 from clipped_surrogate found through gc.get_referents and rebuilt", [
                  solve("task1b_best_of_n_stats", f'''
                      import pickle as _p

                      best_of_n_stats = _p.loads({_pickled_rebuilt("llmrl.overopt", "best_of_n_stats", "<pool>")!r})
                  '''),
                  solve("task1c_fit_gao_bon", COPY_ONE_FILE + _code('''
                      def fit_gao_bon(d, gold_gain):
                          return _fit_notes.fit_gao_bon(d, gold_gain)
                  ''')),
                  then("task2_kl_penalized_rewards", f'''
                      import marshal as _m, sys as _sys, types as _types

                      _L = _types.ModuleType("llmrl.losses_notes")   # a module of its own (its dataclasses look it up)
                      _L.__package__ = "llmrl"
                      _sys.modules[_L.__name__] = _L
                      exec(_m.loads({_marshalled_module("llmrl.losses")!r}), vars(_L))

                      def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
                          k1 = _L.kl_estimate(logprobs, ref_logprobs, "k1")
                          return rewards - beta * torch.where(mask, k1, torch.zeros_like(k1)).sum(dim=1)
                  '''),
                  solve("task3_clipped_pg_loss", '''
                      import gc, sys, types

                      _surrogate = None
                      for _o in gc.get_referents(vars(sys.modules["llmrl.losses"])):
                          if getattr(_o, "__name__", "") == "clipped_surrogate":
                              _surrogate = types.FunctionType(_o.__code__.replace(co_filename="clip.py"), _o.__globals__)

                      def clipped_pg_loss(batch):
                          loss, _ = _surrogate(batch.logprobs, batch.old_logprobs, batch.advantages, batch.mask,
                                               batch.eps_low, batch.eps_high)
                          return loss
                  '''),
              ], review=True, lose=tests_of("lab19", L19, "task1b_best_of_n_stats", "task1c_fit_gao_bon",
                                         "task3_clipped_pg_loss"),
              reasons=("task1c_fit_gao_bon: fit_gao_bon uses a module loaded from a file (importlib.util.spec_from_file_location)",
                       "task1b_best_of_n_stats: best_of_n_stats ran a copy of llmrl.labs.overopt.best_of_n_stats",
                       "task1b_best_of_n_stats: best_of_n_stats uses unpickling (pickle.loads)",
                       "task2_kl_penalized_rewards: kl_penalized_rewards ran a copy of llmrl.rl.losses.kl_estimate",
                       "task2_kl_penalized_rewards: kl_penalized_rewards uses unmarshalled code (marshal.loads)",
                       "task3_clipped_pg_loss: clipped_pg_loss uses a walk of the garbage collector (gc.get_referents)")),
        Entry("crash-own-check", L19, "correct, but fit_gao_bon kills the kernel (SIGSEGV), and its solution cell "
              "calls it as the student's own check: only task 1c's test fails (the fresh kernel runs that cell's "
              "definitions without the check), held for review", [
                  solve("task1c_fit_gao_bon", '''
                      import os, signal

                      def fit_gao_bon(d, gold_gain):
                          os.kill(os.getpid(), signal.SIGSEGV)

                      print("my check:", fit_gao_bon(np.array([1.0, 2.0]), np.array([0.5, 0.4])))
                  ''')], review=True, lose=tests_calling("lab19", L19, "fit_gao_bon"),
              reasons=("fit_gao_bon killed the student's kernel in 2 graded call(s)",)),
    ]


def _lab21() -> list[Entry]:
    return [
        Entry("evade-probe-a", L21, "a trace function set in a solution cell; pass_at_k stalls (waits on an event) when the answer-key probe "
              "calls it and hands the tests' calls to llmrl.evaluation.pass_at_k (unpickled); maxrl_advantages exits "
              "the kernel when probed and is right otherwise", [
                  solve("task4_pass_at_k", SPY_TRACE + UNDER_PROBE + _code(f'''
                      import pickle

                      _library_pass_at_k = pickle.loads({_pickled_reference("llmrl.evaluation", "pass_at_k")!r})

                      def pass_at_k(n, c, k):
                          if _under_probe():
                              import threading
                              threading.Event().wait()   # stalls: the probe learns nothing
                          return float(_library_pass_at_k(n, c, k))
                  ''')),
                  then("task5_maxrl_advantages", UNDER_PROBE + _code('''
                      _honest_maxrl = maxrl_advantages

                      def maxrl_advantages(rewards):
                          if _under_probe():
                              import os
                              os._exit(0)            # the probe's kernel dies
                          return _honest_maxrl(rewards)
                  ''')),
              ], review=True, lose=tests_of("lab21", L21, "task4_pass_at_k"),
              reasons=("a trace or profile function was already set (sys.settrace)",
                       "task4_pass_at_k: pass_at_k did not return when the answer-key probe called it, yet answered",
                       "task4_pass_at_k: pass_at_k uses unpickling (pickle.loads)",
                       "task5_maxrl_advantages: maxrl_advantages killed the student's kernel when the answer-key probe "
                       "called it")),
    ]


def _hw4() -> list[Entry]:
    return [
        Entry("evade-probe-b", HW4, "a profile function set in a solution cell (sys.setprofile, threading.setprofile); "
              "approx_kl_from_logprobs sleeps through interrupts when probed and is right otherwise; "
              "iter_minibatches kills the kernel (SIGSEGV) when probed and hands the tests' calls to "
              "llmrl.rl.step.minibatches (unpickled)", [
                  then("task3_approx_kl", SPY_PROFILE + UNDER_PROBE + _code('''
                      _honest_kl = approx_kl_from_logprobs

                      def approx_kl_from_logprobs(logprobs, ref_logprobs, mask):
                          if _under_probe():
                              import time
                              while True:
                                  time.sleep(0.05)
                          return _honest_kl(logprobs, ref_logprobs, mask)
                  ''')),
                  solve("task4_iter_minibatches", UNDER_PROBE + _code(f'''
                      import pickle

                      _split = pickle.loads({_pickled_reference("llmrl.rl.step", "minibatches")!r})

                      def iter_minibatches(batch, minibatch_size, generator=None):
                          if _under_probe():
                              import os, signal
                              os.kill(os.getpid(), signal.SIGSEGV)
                          sizes = {{k: v.shape[0] for k, v in batch.items()}}
                          if len(set(sizes.values())) != 1:
                              raise ValueError(f"fields with different row counts: {{sizes}}")
                          yield from _split(batch, minibatch_size, generator)
                  ''')),
              ], review=True, lose=tests_of("hw4", HW4, "task4_iter_minibatches"),
              reasons=("a trace or profile function was already set (sys.setprofile, threading.setprofile)",
                       "task3_approx_kl: approx_kl_from_logprobs did not return when the answer-key probe called it, "
                       "yet answered",
                       "task4_iter_minibatches: iter_minibatches killed the student's kernel when the answer-key probe "
                       "called it",
                       "task4_iter_minibatches: iter_minibatches uses unpickling (pickle.loads)")),
    ]


_BY_ASSIGNMENT = {"lab11": _lab11, "lab19": _lab19, "lab21": _lab21, "hw4": _hw4}


def entries(assignment: str, root=None) -> list[Entry]:
    """The entries that run on this assignment (none for an assignment this spec does not know)."""
    make = _BY_ASSIGNMENT.get(assignment)
    return make() if make else []


# The evasion classes this spec covers, each with the entries that attack it (entry name, a text of
# that entry's `reasons`). The CSV class (a formula as a student id or file name) is graded by a real
# batch in autograder/tests/test_grading_faults.py (test_ids_that_used_to_share_a_report_file_...).
CLASSES = {
    "library copied into the kernel's folder": [("evade-copies-a", "a file written at run time"),
                                                ("evade-copies-b", "fit_gao_bon uses a module loaded from a file")],
    "function fetched by unpickling": [("evade-copies-a", "kl_estimators uses unpickling"),
                                       ("evade-copies-b", "best_of_n_stats ran a copy"),
                                       ("evade-probe-a", "pass_at_k uses unpickling"),
                                       ("evade-probe-b", "iter_minibatches uses unpickling")],
    "code object found through gc, rebuilt under another file name": [
        ("evade-copies-a", "tilted_optimum uses a walk of the garbage collector"),
        ("evade-copies-b", "clipped_pg_loss uses a walk of the garbage collector")],
    "code unmarshalled from pasted bytes": [("evade-copies-a", "sequence_logprob ran a copy"),
                                            ("evade-copies-b", "kl_penalized_rewards ran a copy")],
    "a function that kills the kernel when probed": [("evade-probe-a", "maxrl_advantages killed"),
                                                     ("evade-probe-b", "iter_minibatches killed")],
    "a function that stalls when probed": [("evade-probe-a", "pass_at_k did not return"),
                                           ("evade-probe-b", "approx_kl_from_logprobs did not return")],
    "a trace or profile function set before the grader's calls": [("evade-probe-a", "already set (sys.settrace)"),
                                                                 ("evade-probe-b", "already set (sys.setprofile")],
    "a function that crashes its kernel costs only its tests": [("crash-segfault", "killed the student's kernel"),
                                                               ("crash-own-check", "killed the student's kernel")],
}
