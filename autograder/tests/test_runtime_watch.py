"""The answer-key check's runtime watch (autograder/review/runtime_watch.py), run here in-process:
library code known by its content wherever it came from (a copied file, unpickled, unmarshalled, rebuilt
from a code object found by gc, typed into the notebook), tracers set before the watch or replacing it,
and how the watch's and the probe's reports become notes or a hold. The static check and the task map
are tested in test_answer_key.py, whose helpers these tests share.
"""

from __future__ import annotations

import pytest

from autograder import corpus
from autograder.review import answer_key as ag_answer_key
from autograder.review import runtime_watch
from autograder.review import static_notes
from autograder.tests.test_answer_key import NB, _fast, _lean_notebook, _runtime  # noqa: F401  (_fast: autouse)


# ----------------------------------------------------------------------------- the watch: copies by content

def _watched(call, assignment="lab11", notebook="llm_as_policy"):
    """What the watch sees in one call (in this process, as in the student's kernel)."""
    ns = {}
    exec(compile(ag_answer_key.watch_module(assignment, notebook), "<watch>", "exec"), ns)
    w = ns["start"]()
    try:
        call()
    finally:
        seen = w.stop()
    return seen


def _copy_targets(seen):
    return {c[0] for c in seen["copies"]}


def test_the_watch_knows_the_library_by_content_wherever_its_code_comes_from(tmp_path, monkeypatch):
    """A copied file, a module loaded from a file under another name, unpickled and unmarshalled
    code, a code object found through the garbage collector and rebuilt under another file name:
    each runs the same bytecode as the library's complete version, and the watch names it."""
    import gc
    import importlib.util
    import marshal
    import pickle
    import shutil
    import sys
    import types

    import numpy as np

    import llmrl.lm.toylm
    from autograder.corpus import evasion

    args = (np.array([0.2, 0.8]), np.array([1.0, 0.0]), 0.5)
    monkeypatch.chdir(tmp_path)
    shutil.copy(llmrl.lm.toylm.__file__, "optimum_notes.py")
    spec = importlib.util.spec_from_file_location("llmrl.lm._optimum_notes", "optimum_notes.py")  # beside its home: its ..utils import
    copied = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, copied)   # its dataclasses look their module up
    spec.loader.exec_module(copied)
    found = next(o for o in gc.get_objects() if type(o) is types.FunctionType and o.__name__ == "tilted_optimum"
                 and o.__module__ == "llmrl.lm.toylm")
    rebuilt = types.FunctionType(found.__code__.replace(co_filename="<mine>", co_name="mine"), found.__globals__)
    unmarshalled = types.FunctionType(marshal.loads(marshal.dumps(rebuilt.__code__)), found.__globals__)
    unpickled = pickle.loads(evasion._pickled_rebuilt("llmrl.lm.toylm", "tilted_optimum", "<pickled>"))
    for fn in (copied.tilted_optimum, rebuilt, unmarshalled, unpickled):
        seen = _watched(lambda: fn(*args))
        assert _copy_targets(seen) == {"llmrl.lm.toylm.tilted_optimum"}, seen
        assert seen["tracer"] == [], seen
        t = next(t for t in ag_answer_key.TASKS if t.function == "tilted_optimum")
        notes = runtime_watch._entry_notes(t, static_notes.library(), seen["lib"], seen["copies"], set(), "a graded call")
        assert any("ran a copy of llmrl.lm.toylm.tilted_optimum" in n for n in notes), notes
    assert "optimum_notes.py" in str(_watched(lambda: copied.tilted_optimum(*args))["copies"])
    # the library's own function: named by where it lives, and not called a copy
    seen = _watched(lambda: llmrl.lm.toylm.tilted_optimum(*args))
    assert "llmrl.lm.toylm.tilted_optimum" in seen["lib"]
    t = next(t for t in ag_answer_key.TASKS if t.function == "tilted_optimum")
    notes = runtime_watch._entry_notes(t, static_notes.library(), seen["lib"], seen["copies"], set(), "a graded call")
    assert notes == ["task4_tilted_optimum: tilted_optimum ran llmrl.lm.toylm.tilted_optimum (seen at "
                     "run time), which does this task"], notes


def test_a_call_to_a_name_the_answer_kernel_does_not_hold_is_noted_by_that_name():
    """In the answer kernel the library is a view (autograder/sandbox/library_view.py) bound where the
    library lives: a graded function that calls a library name reaches its placeholder, the call
    fails, and the watch still says which name it was meant to be."""
    import sys
    import types
    from pathlib import Path

    import llmrl
    from autograder.sandbox import library_view

    view = types.ModuleType("llmrl._grading_view")
    where = str(Path(llmrl.__file__).parent / "_grading_view.py")   # where the sandbox binds it
    exec(compile(library_view._ABSENT_SOURCE, where, "exec"), view.__dict__)
    absent = view.Absent("llmrl.lm.toylm.tilted_optimum")   # the view names a function where it lives

    def delegating():
        try:
            return absent(1, 2, 3)
        except ImportError as e:
            return str(e)

    seen = _watched(delegating)
    assert seen["lib"] == ["absent:llmrl.lm.toylm.tilted_optimum"], seen
    t = next(t for t in ag_answer_key.TASKS if t.function == "tilted_optimum")
    notes = runtime_watch._entry_notes(t, static_notes.library(), seen["lib"], seen["copies"], set(), "a graded call")
    assert notes == ["task4_tilted_optimum: tilted_optimum called llmrl.lm.toylm.tilted_optimum (seen at run time), "
                     "which does this task; the grader does not hold it, so the call failed"], notes
    assert "llmrl._grading_view" not in sys.modules


def test_code_the_notebook_typed_is_a_copy_only_when_it_is_long():
    """The same bytecode typed into a cell: a one-line library function (gather_logprobs) is a
    plausible coincidence and gets no note; a 4-line one (tilted_optimum) copied line for line does."""
    import numpy as np
    import torch

    # (Python 3.11 compiles `torch.f(...)` differently when the cell itself imports torch, as the
    # library's module does: the cell here does too)
    short = ("import torch\n\ndef response_logprobs(logits, tokens, prompt_len):\n"
             "    return gather(logits[:, prompt_len - 1:-1], "
             "tokens[:, prompt_len:])\n\ndef gather(logits, targets):\n"
             "    return torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)\n")
    import inspect

    import llmrl.lm.toylm
    long = "import numpy as np\n\n" + inspect.getsource(llmrl.lm.toylm.tilted_optimum).replace("def tilted_optimum",
                                                                                             "def my_optimum")
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "import numpy as np\nimport torch\n"
                     "from llmrl.lm.toylm import _as_prob_vector, _as_rewards, _check_beta"},
                    {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "task1a_response_logprobs",
                                                                     "solution": True}}, "source": short},
                    {"cell_type": "code", "metadata": {}, "source": long}]}
    text = ag_answer_key.text_fingerprints(nb)
    ns = {}
    for c in nb["cells"]:
        exec(compile(c["source"], "<cell>", "exec"), ns)
    t1a = next(t for t in ag_answer_key.TASKS if t.function == "response_logprobs")
    seen = _watched(lambda: ns["response_logprobs"](torch.randn(2, 4, 5), torch.zeros(2, 4, dtype=torch.long), 2))
    assert _copy_targets(seen) == {"llmrl.lm.sampling.gather_logprobs"}, seen
    assert runtime_watch._entry_notes(t1a, static_notes.library(), seen["lib"], seen["copies"], text, "a graded call") == []
    # without the notebook's text, the same code is a copy of unknown origin
    assert runtime_watch._entry_notes(t1a, static_notes.library(), seen["lib"], seen["copies"], set(), "a graded call")
    t4 = next(t for t in ag_answer_key.TASKS if t.function == "tilted_optimum")
    seen = _watched(lambda: ns["my_optimum"](np.array([0.5, 0.5]), np.array([1.0, 0.0]), 1.0))
    notes = runtime_watch._entry_notes(t4, static_notes.library(), seen["lib"], seen["copies"], text, "a graded call")
    assert len(notes) == 1 and "typed into the notebook line for line from llmrl.lm.toylm.tilted_optimum" in notes[0]


def test_the_watch_says_when_a_tracer_was_set_before_or_replaced_it():
    import sys

    def spy(frame, event, arg):
        return None

    sys.setprofile(spy)
    try:
        seen = _watched(lambda: None)
    finally:
        sys.setprofile(None)
    assert any("already set (sys.setprofile)" in t for t in seen["tracer"]), seen
    seen = _watched(lambda: sys.settrace(spy))     # the call switches the watch off
    assert sys.gettrace() is None
    assert any("replaced or removed during the call" in t for t in seen["tracer"]), seen
    real = sys.settrace
    sys.settrace = lambda f: None                   # a hook that does nothing
    try:
        seen = _watched(lambda: None)
    finally:
        sys.settrace = real
    assert any("saw no call" in t for t in seen["tracer"]), seen


def test_the_probe_reports_a_tracer_already_set():
    nb = _lean_notebook("lab11", [corpus.insert(
        "import sys\n_spy = lambda frame, event, arg: None\nsys.settrace(_spy)", after="start")])
    import sys

    try:
        answer, _ = _runtime("lab11", nb)
    finally:
        sys.settrace(None)
    notes = ag_answer_key.runtime_notes("lab11", "llm_as_policy", answer, submission=nb)
    assert any("found a trace or profile function already set" in n for n in notes), notes


W = {"calls": 3, "answered": 3, "died": 0, "timeout": 0, "lib": [], "copies": [], "tracer": []}


@pytest.mark.parametrize("watch, probe, want", [
    ({"sample_with_temperature": dict(W)}, {}, []),
    ({"sample_with_temperature": dict(W, died=1)}, {}, ["killed the student's kernel in 1 graded call"]),
    ({"sample_with_temperature": dict(W)}, {"sample_with_temperature": "died"},
     ["killed the student's kernel when the answer-key probe called it"]),
    ({"sample_with_temperature": dict(W)}, {"sample_with_temperature": "stalled"},
     ["did not return when the answer-key probe called it, yet answered 3 of the tests' calls"]),
    # an infinite loop everywhere: it earns nothing and hides nothing, no hold
    ({"sample_with_temperature": dict(W, answered=0, timeout=3)}, {"sample_with_temperature": "stalled"}, []),
    ({"sample_with_temperature": dict(W, tracer=["a trace or profile function was already set (sys.settrace)"])}, {},
     ["graded calls of sample_with_temperature: a trace or profile function was already set"]),
    ({"sample_with_temperature": dict(W, lib=["llmrl.lm.sampling.sample_token"])}, {},
     ["sample_with_temperature ran llmrl.lm.sampling.sample_token (seen at run time)"]),

    # a name seen by its old path (llmrl.sampling is llmrl.lm.sampling): the note names its home
    ({"sample_with_temperature": dict(W, lib=["absent:llmrl.sampling.sample_token"])}, {},
     ["sample_with_temperature called llmrl.lm.sampling.sample_token (seen at run time)"]),
])
def test_what_the_graded_calls_and_the_probe_calls_hold_for_review(watch, probe, want):
    notes = ag_answer_key.watch_notes("lab11", "llm_as_policy", watch, probe, text=set())
    assert len(notes) == len(want) and all(w in n for w, n in zip(want, notes)), notes
    assert all(n.startswith(("task2_sample_with_temperature: ", "llm_as_policy: ")) for n in notes), notes


@pytest.mark.parametrize("watch", [None, [], {"f": "x"}, {"sample_with_temperature": {"lib": "x", "copies": [[1, 2]],
                                                                                      "tracer": None}}])
def test_a_garbled_watch_is_no_crash(watch):
    assert isinstance(ag_answer_key.watch_notes("lab11", "llm_as_policy", watch, {"x": "died"}, text=set()), list)


def test_each_class_of_issue_28_has_two_graded_entries():
    """autograder/corpus/evasion.py: every class has at least two attacks in entries graded by the real
    grader in make test (test_corpus.py checks that each entry's review reasons say them)."""
    from autograder.corpus import evasion

    entries = {e.name: e for a in NB for e in evasion.entries(a)}
    for cls, attacks in evasion.CLASSES.items():
        assert len(attacks) >= 2, cls
        for name, text in attacks:
            assert any(text in r for r in entries[name].reasons), (cls, name, text)
    assert all(e.review for e in entries.values())
    names = [b.entry.name for b in corpus.build_all(list(NB)) if b.entry.name in entries]
    assert sorted(names) == sorted(entries), "every evasion entry is in the corpus test_corpus.py grades"
