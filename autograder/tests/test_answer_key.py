"""The answer-key check (autograder/review/answer_key.py): graded functions that lean on the course library.

Static check on many ways of hiding a call, honest code that must get no note, the map against the
notebooks and the library, the corpus's lean entries (each passes the notebook's tests, hidden ones
included, and is flagged) and the runtime probe, run here in-process on the same code.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from autograder.review import answer_key as ag_answer_key
from autograder.review import static_notes
from autograder import corpus
from autograder.course import layout
from autograder.cli.review import main as review_main
from autograder.corpus._library_leans import LEANS, NOTES

ROOT = Path(__file__).resolve().parents[2]
NB = {"lab11": "llm_as_policy", "lab19": "failure_modes", "lab21": "tasks", "hw4": "llm_rl"}


def notes_for(assignment, *cells):
    """Static notes for a notebook made of these cells: (grade_id, source) or plain source."""
    return ag_answer_key.review_notes(assignment, [c if isinstance(c, tuple) else ("", c) for c in cells], NB[assignment])


def one_note(notes, grade_id, target):
    hits = [n for n in notes if n.startswith(grade_id + ":") and target in n]
    assert hits, f"no note naming {target} for {grade_id}; notes: {notes}"
    return hits[0]


# ----------------------------------------------------------------------------- the map

def _source(lab):
    return json.loads(lab.source.read_text())


@pytest.mark.fast
def test_every_graded_function_of_every_notebook_is_in_the_map():
    mapped = {(t.assignment, t.grade_id, t.function) for t in ag_answer_key.TASKS}
    found = set()
    for lab in layout.discover():
        cells = _source(lab)["cells"]
        for i, c in enumerate(cells):
            meta = c["metadata"].get("nbgrader", {})
            if c["cell_type"] != "code" or not meta.get("solution"):
                continue
            tree = ast.parse("".join(c["source"]))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    found.add((lab.assignment, meta["grade_id"], node.name))
            # the map's test cell is the graded cell right after the solution
            test = next(x for x in cells[i + 1:] if x["metadata"].get("nbgrader", {}).get("grade"))
            for t in ag_answer_key.tasks_for(lab.assignment, lab.name):
                if t.grade_id == meta["grade_id"]:
                    assert t.test_id == test["metadata"]["nbgrader"]["grade_id"], t
    assert found == mapped, f"in the notebooks, not the map: {found - mapped}; in the map only: {mapped - found}"


def test_every_library_function_the_map_names_exists():
    lib = static_notes.library()
    for t in ag_answer_key.TASKS:
        for lean in t.library + ag_answer_key.ANYWHERE:
            assert lib.kind(lean.target) in ("function", "class"), f"{t.grade_id}: {lean.target} is not in llmrl"
            assert lib.canonical(lean.target) == lean.target, f"{lean.target} lives at {lib.canonical(lean.target)}"


def test_the_library_index_follows_re_exports_and_aliases():
    lib = static_notes.library()
    assert lib.canonical("llmrl.rl.evaluation.full_vocab_kl") == "llmrl.rl.losses.full_vocab_kl"
    assert lib.canonical("llmrl.labs.lab11._sampling.gather_logprobs") == "llmrl.lm.sampling.gather_logprobs"
    assert lib.canonical("llmrl.rl.step.group_advantages") == "llmrl.rl.advantages.group_advantages"
    assert "llmrl.rl.losses.kl_estimate" in lib.reach("llmrl.labs.lab11.reference_kl_estimators")
    assert "llmrl.rl.losses.clipped_pg_loss" in lib.reach("llmrl.rl.losses.BUILTIN_LOSSES")
    assert "sampling" in lib.public_names("llmrl") and "kl_estimate" in lib.public_names("llmrl.rl.losses")


def test_the_library_index_reads_an_old_path_as_its_home():
    # llmrl/sampling.py is the old path the notebooks import: the very module llmrl.lm.sampling
    lib = static_notes.library()
    assert lib.canonical("llmrl.sampling") == "llmrl.lm.sampling"
    assert lib.canonical("llmrl.sampling.gather_logprobs") == "llmrl.lm.sampling.gather_logprobs"
    assert lib.canonical("llmrl.evaluation.full_vocab_kl") == "llmrl.rl.losses.full_vocab_kl"  # old path, re-export
    assert lib.canonical("llmrl.hw4.trainer.train") == "llmrl.hw4.run_manager.train"       # hw4's old name
    assert "gather_logprobs" in lib.public_names("llmrl.sampling") == lib.public_names("llmrl.lm.sampling")
    # a library module that still imports an old path (lab19's `from ..losses import clipped_pg_loss`)
    assert "llmrl.rl.losses.clipped_pg_loss" in lib.reach("llmrl.labs.lab19.entropy_run")


@pytest.mark.parametrize("imports, use", [
    ("from llmrl.sampling import gather_logprobs", "gather_logprobs"),
    ("from llmrl.lm.sampling import gather_logprobs", "gather_logprobs"),
    ("import llmrl.sampling as S", "S.gather_logprobs"),
    ("from llmrl.lm import sampling as S", "S.gather_logprobs"),
    ("from llmrl import sampling", "sampling.gather_logprobs"),
])
def test_a_delegation_is_noted_by_the_old_path_and_by_the_new(imports, use):
    note = one_note(notes_for("lab11", imports, (T1A, SIG + f"    return {use}" + BODY)), T1A,
                    "llmrl.lm.sampling.gather_logprobs")
    assert "delegates to llmrl.lm.sampling.gather_logprobs" in note, note


def test_the_grading_safety_page_says_which_tasks_the_library_can_do():
    readme = (ROOT / "docs" / "grading-safety.md").read_text()
    for t in ag_answer_key.TASKS:
        for lean in t.library:
            assert lean.target.removeprefix("llmrl.") in readme or lean.target in readme, \
                f"docs/grading-safety.md does not name {lean.target} ({t.grade_id})"


# ----------------------------------------------------------------------------- honest code: no note

@pytest.mark.parametrize("lab", layout.discover(), ids=lambda lab: f"{lab.assignment}/{lab.name}")
def test_the_reference_and_the_release_get_no_note(lab):
    assert ag_answer_key.review_notes(lab.assignment, lab.source) == []
    assert ag_answer_key.review_notes(lab.assignment, lab.release) == []


def test_no_other_entry_of_the_corpus_gets_a_note():
    """False alarms: the corpus's rewritten, wrong, broken and hostile submissions lean on nothing
    (the entries held for review on purpose, autograder/corpus/evasion.py, aside)."""
    built = corpus.build_all()
    assert len([b for b in built if not b.entry.review]) >= 80, len(built)
    for b in built:
        if b.entry.review:
            continue
        for text in b.files.values():
            try:
                nb = json.loads(text)
            except ValueError:
                continue
            assert ag_answer_key.review_notes(b.assignment, nb, b.entry.notebook) == [], b.student


HONEST = {
    "a library import shadowed by the student's own function": ("lab11", [
        "from llmrl.toylm import tilted_optimum",
        ("task4_tilted_optimum", "def tilted_optimum(p, r, beta):\n    w = np.exp(np.log(p) + r / beta)\n"
                                 "    return w / w.sum()\n\ndef kl_objective(q, p, r, beta):\n    return 0.0"),
    ]),
    "the library used in an experiment cell only": ("lab11", [
        ("task1b_sequence_logprob", "def sequence_logprob(lp, mask):\n    return torch.where(mask, lp, 0.0).sum(-1)"),
        "from llmrl.labs.lab11 import reference_sequence_logprob\nprint(reference_sequence_logprob(x, m))",
    ]),
    "a library helper that does not do the task": ("lab21", [
        "from llmrl.sampling import masked_mean\nfrom llmrl.utils import check_float",
        ("task2_opd_pg_loss", "def opd_pg_loss(s, t, mask):\n    check_float('x', 1.0)\n"
                              "    r = reverse_kl_rewards(s, t, mask)\n    return -masked_mean(r * s, mask)"),
    ]),
    "a helper of the student's own with a library function's name": ("lab11", [
        "def gather_logprobs(logp, idx):\n    return logp.gather(-1, idx.unsqueeze(-1)).squeeze(-1)",
        ("task1a_response_logprobs", "def response_logprobs(l, t, p):\n"
                                     "    return gather_logprobs(torch.log_softmax(l[:, p - 1:-1], -1), t[:, p:])"),
    ]),
    "a lean bound only after its test cell ran (the points came from the student's own code)": ("lab11", [
        ("task1a_response_logprobs", "def response_logprobs(l, t, p):\n"
                                     "    return torch.log_softmax(l[:, p - 1:-1], -1).gather(-1, t[:, p:, None])[..., 0]"),
        ("test_task1a_response_logprobs_values", "assert True"),
        "from llmrl.sampling import gather_logprobs\nresponse_logprobs = lambda l, t, p: gather_logprobs(l, t)",
    ]),
    "torch's and numpy's own functions": ("lab19", [
        ("task4_token_entropy", "def token_entropy(logits, mask):\n"
                                "    return torch.distributions.Categorical(logits=logits).entropy()[mask].mean()"),
    ]),
}


@pytest.mark.parametrize("case", sorted(HONEST))
@pytest.mark.fast
def test_honest_code_gets_no_note(case):
    assignment, cells = HONEST[case]
    cells = [c if isinstance(c, tuple) else ("", c) for c in cells]
    # a test cell of the map is a graded cell: mark it so in a notebook-shaped input
    nb = {"cells": [{"cell_type": "code", "source": src,
                     "metadata": {"nbgrader": {"grade_id": gid, "solution": not gid.startswith("test_"),
                                               "grade": gid.startswith("test_")}} if gid else {}}
                    for gid, src in cells]}
    assert ag_answer_key.review_notes(assignment, nb, NB[assignment]) == []


# ----------------------------------------------------------------------------- ways of hiding a call

T1A = "task1a_response_logprobs"
BODY = "(logits[:, prompt_len - 1:-1], tokens[:, prompt_len:])"
SIG = "def response_logprobs(logits, tokens, prompt_len):\n"

EVASIONS = {
    "direct from-import": ["from llmrl.sampling import gather_logprobs",
                           (T1A, SIG + "    return gather_logprobs" + BODY)],
    "from-import as": ["from llmrl.sampling import gather_logprobs as g", (T1A, SIG + "    return g" + BODY)],
    "module alias": ["import llmrl.sampling as S", (T1A, SIG + "    return S.gather_logprobs" + BODY)],
    "package import": ["import llmrl.sampling", (T1A, SIG + "    return llmrl.sampling.gather_logprobs" + BODY)],
    "from llmrl import *": ["import llmrl.labs.lab11\nfrom llmrl import *",
                            (T1A, SIG + "    return sampling.gather_logprobs" + BODY)],
    "from llmrl.sampling import *": ["from llmrl.sampling import *", (T1A, SIG + "    return gather_logprobs" + BODY)],
    # llmrl.labs.lab11 imports llmrl.sampling as _sampling: the module re-exported through another
    # (llmrl.trainer, now llmrl.rl, used to re-export gather_logprobs itself; since the seeds' rework it no longer imports it)
    "re-export through another module": ["from llmrl.labs.lab11 import _sampling as S",
                                         (T1A, SIG + "    return S.gather_logprobs" + BODY)],
    "private alias inside the library": ["from llmrl.labs import lab11",
                                         (T1A, SIG + "    return lab11._sampling.gather_logprobs" + BODY)],
    "assignment chain": ["from llmrl import sampling", "a = sampling.gather_logprobs\nb = a",
                         (T1A, SIG + "    c = b\n    return c" + BODY)],
    "the graded name bound to the library function": ["from llmrl.labs import lab11",
                                                      (T1A, "response_logprobs = lab11.reference_response_logprobs")],
    "getattr with a constant": ["from llmrl import sampling",
                                (T1A, SIG + "    return getattr(sampling, 'gather_logprobs')" + BODY)],
    "getattr with a concatenation": ["from llmrl import sampling",
                                     (T1A, SIG + "    return getattr(sampling, 'gather_' + 'logprobs')" + BODY)],
    "getattr with a join and a reversal": ["from llmrl import sampling\nNAME = ''.join(reversed('sborpgol_rehtag'))",
                                           (T1A, SIG + "    return getattr(sampling, NAME)" + BODY)],
    "getattr with an f-string and a slice": ["from llmrl import sampling\nP = 'xxgather'[2:]",
                                             (T1A, SIG + "    return getattr(sampling, f'{P}_logprobs')" + BODY)],
    "__getattribute__": ["import llmrl.sampling as s",
                         (T1A, SIG + "    return s.__getattribute__('gather_logprobs')" + BODY)],
    "module __dict__": ["import llmrl.sampling as s", (T1A, SIG + "    return s.__dict__['gather_logprobs']" + BODY)],
    "vars() of the module": ["import llmrl.sampling as s", (T1A, SIG + "    return vars(s).get('gather_logprobs')" + BODY)],
    "operator.attrgetter": ["import operator, llmrl.sampling as s",
                            (T1A, SIG + "    return operator.attrgetter('gather_logprobs')(s)" + BODY)],
    "importlib.import_module": ["import importlib", (T1A, SIG + "    m = importlib.import_module('llmrl.sampling')\n"
                                                           "    return m.gather_logprobs" + BODY)],
    "__import__ with fromlist": [(T1A, SIG + "    m = __import__('llmrl.sampling', fromlist=['x'])\n"
                                        "    return m.gather_logprobs" + BODY)],
    "sys.modules": ["import sys, llmrl.sampling", (T1A, SIG + "    return sys.modules['llmrl.sampling']"
                                                         ".gather_logprobs" + BODY)],
    "functools.partial": ["import functools\nfrom llmrl.labs import lab11",
                          (T1A, "response_logprobs = functools.partial(lab11.reference_response_logprobs)")],
    "a lambda": ["from llmrl.labs import lab11",
                 (T1A, "response_logprobs = lambda l, t, p: lab11.reference_response_logprobs(l, t, p)")],
    "a helper in another cell": ["from llmrl.sampling import gather_logprobs as _g",
                                 "def _score(l, t):\n    return _g(l, t)",
                                 (T1A, SIG + "    return _score" + BODY)],
    "a helper of a helper": ["import llmrl.sampling as s", "def _a(l, t):\n    return s.gather_logprobs(l, t)",
                             "def _b(l, t):\n    return _a(l, t)", (T1A, SIG + "    return _b" + BODY)],
    "a closure factory": ["import llmrl.sampling as s", "def _make():\n    return s.gather_logprobs",
                          "_f = _make()", (T1A, SIG + "    return _f" + BODY)],
    "a nested function": ["import llmrl.sampling as s",
                          (T1A, SIG + "    def inner(a, b):\n        return s.gather_logprobs(a, b)\n"
                                "    return inner" + BODY)],
    "a class with __call__": ["import llmrl.sampling as s",
                              "class _Scorer:\n    def __call__(self, l, t):\n        return s.gather_logprobs(l, t)",
                              (T1A, SIG + "    return _Scorer()" + BODY)],
    "a staticmethod": ["import llmrl.sampling as s", "class _K:\n    go = staticmethod(s.gather_logprobs)",
                       (T1A, SIG + "    return _K.go" + BODY)],
    "a decorator that swaps the function": ["from llmrl.labs import lab11",
                                            "def _swap(f):\n    return lab11.reference_response_logprobs",
                                            (T1A, "@_swap\n" + SIG + "    raise NotImplementedError()")],
    "a default argument": ["import llmrl.sampling as s",
                           (T1A, "def response_logprobs(logits, tokens, prompt_len, g=s.gather_logprobs):\n"
                                 "    return g" + BODY)],
    "a dict of functions": ["import llmrl.sampling as s", "FNS = {'score': s.gather_logprobs}",
                            (T1A, SIG + "    return FNS['score']" + BODY)],
    "a loop over a list": ["import llmrl.sampling as s", "for _fn in [s.gather_logprobs]:\n    pass",
                           (T1A, SIG + "    return _fn" + BODY)],
    "a walrus in a comprehension": ["import llmrl.sampling as s",
                                    (T1A, SIG + "    fs = [(f := s.gather_logprobs)]\n    return f" + BODY)],
    "a conditional import": ["try:\n    from llmrl.sampling import gather_logprobs as g\nexcept ImportError:\n    g = None",
                             (T1A, SIG + "    return g" + BODY)],
    "exec of constant code in a cell": ["exec('from llmrl.sampling import gather_logprobs as g')",
                                        (T1A, SIG + "    return g" + BODY)],
    "exec of constant code in the function": [(T1A, SIG + "    ns = {}\n    exec('from llmrl.sampling import "
                                                     "gather_logprobs as g', ns)\n    return ns['g']" + BODY)],
    "eval of a constant": ["import llmrl.sampling", (T1A, SIG + "    return eval('llmrl.sampling.gather_logprobs')" + BODY)],
    "globals() assignment": ["import llmrl.labs.lab11 as L",
                             "globals()['response_logprobs'] = L.reference_response_logprobs"],
    "globals() lookup": ["from llmrl.sampling import gather_logprobs as _g",
                         (T1A, SIG + "    return globals()['_g']" + BODY)],
    "get_ipython().run_cell": ["get_ipython().run_cell('from llmrl.sampling import gather_logprobs as g')",
                               (T1A, SIG + "    return g" + BODY)],
    "%%writefile and import": ["%%writefile helper_mod.py\nfrom llmrl.sampling import gather_logprobs\n"
                               "def go(l, t):\n    return gather_logprobs(l, t)",
                               "import helper_mod", (T1A, SIG + "    return helper_mod.go" + BODY)],
    "%%writefile and %run": ["%%writefile helper_run.py\nfrom llmrl.sampling import gather_logprobs as go",
                             "%run helper_run.py", (T1A, SIG + "    return go" + BODY)],
    "a library function that calls the one doing the task": [
        "from llmrl import sampling",
        (T1A, SIG + "    class M:\n        def __call__(self, x, logits_from=0):\n            return logits\n"
              "    return sampling.response_logprobs(M(), tokens)")],
    "line magics around the call": ["%load_ext autoreload\nfrom llmrl.sampling import gather_logprobs as g",
                                    (T1A, "%time x = 1\n" + SIG + "    return g" + BODY)],
}


@pytest.mark.parametrize("case", sorted(EVASIONS))
@pytest.mark.fast
def test_each_way_of_hiding_the_call_is_noted(case):
    target = "llmrl.lm.sampling" if "library function that calls" in case else "llmrl."
    note = one_note(notes_for("lab11", *EVASIONS[case]), T1A, target)
    assert ("delegates to llmrl." in note or "itself" in note), note


CANNOT_FOLLOW = {
    "getattr with a computed name": ["import llmrl.sampling as s",
                                     (T1A, SIG + "    n = ''.join(chr(c) for c in [103, 97])\n"
                                           "    return getattr(s, n)" + BODY)],
    "an import by a computed name": ["import importlib",
                                     (T1A, SIG + "    m = importlib.import_module('llm' + str(len('rl')))\n"
                                           "    return m.f" + BODY)],
    "exec of computed code": [(T1A, SIG + "    code = open('x').read()\n    exec(code)\n    return g" + BODY)],
    "sys.modules with a computed key": ["import sys",
                                        (T1A, SIG + "    return sys.modules[input()].f" + BODY)],
}


@pytest.mark.parametrize("case", sorted(CANNOT_FOLLOW))
def test_what_the_check_cannot_follow_gets_its_own_note(case):
    note = one_note(notes_for("lab11", *CANNOT_FOLLOW[case]), T1A, "cannot follow")
    assert "review it" in note and "llmrl.lm.sampling.gather_logprobs" in note, note


def test_a_lean_through_another_graded_function_is_noted_once():
    """hw4's losses call the student's approx_kl_from_logprobs: a lean there is task 3's note only;
    a lean routed through a graded function whose task has no such library function is still noted."""
    cells = ["from llmrl.losses import kl_estimate",
             ("task3_approx_kl", "def approx_kl_from_logprobs(lp, ref, mask):\n"
                                 "    k = kl_estimate(lp, ref, 'k3')\n    return k[mask].mean()"),
             ("task7_reinforce_loss", "def reinforce_loss(lp, ref, mask, adv, beta):\n"
                                      "    return -(adv[:, None] * lp)[mask].mean() + beta * approx_kl_from_logprobs(lp, ref, mask)")]
    notes = notes_for("hw4", *cells)
    one_note(notes, "task3_approx_kl", "llmrl.rl.losses.kl_estimate")
    assert not [n for n in notes if n.startswith("task7")], notes
    routed = ["import llmrl.sampling as s",
              ("task2_completion_mask", "def build_completion_mask(am, p, _x=None):\n"
                                        "    if _x is not None:\n        return s.gather_logprobs(*_x)\n    return am.bool()"),
              ("task1_per_token_logprobs", "def compute_per_token_logprobs(logits, ids):\n"
                                           "    return build_completion_mask(None, 0, (logits[:, :-1], ids[:, 1:]))")]
    one_note(notes_for("hw4", *routed), "task1_per_token_logprobs", "llmrl.lm.sampling.gather_logprobs")


def test_loading_the_reference_solutions_is_noted_in_any_task():
    cells = ["from llmrl.hw4.impl import load_impl\nREF = load_impl('reference')",
             ("task4_iter_minibatches", "def iter_minibatches(batch, size, generator=None):\n"
                                        "    yield from REF.iter_minibatches(batch, size, generator)")]
    one_note(notes_for("hw4", *cells), "task4_iter_minibatches", "llmrl.hw4.impl.load_impl")


def test_a_copy_of_the_library_body_is_noted():
    cells = [("task1c_fit_gao_bon", "def fit_gao_bon(d, gold_gain):\n    d = np.asarray(d, dtype=float)\n"
                                    "    y = np.asarray(gold_gain, dtype=float)\n    A = np.stack([d, -d * d], axis=1)\n"
                                    "    (alpha, beta), *_ = np.linalg.lstsq(A, y, rcond=None)\n"
                                    "    return float(alpha), float(beta)")]
    one_note(notes_for("lab19", *cells), "task1c_fit_gao_bon", "repeats the body of llmrl.labs.overopt.fit_gao_bon")


def test_a_cell_that_does_not_parse_is_said_and_not_fatal():
    notes = notes_for("lab11", (T1A, SIG + "    return (("))
    assert notes and "does not parse" in notes[0]


def test_the_notebook_can_be_given_as_a_path_a_dict_or_a_list(tmp_path):
    b = corpus.build_entry("lab11", LEANS["lab11"][0])
    text = next(iter(b.files.values()))
    path = tmp_path / "llm_as_policy.ipynb"
    path.write_text(text)
    nb = json.loads(text)
    solutions = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in nb["cells"]
                 if c["metadata"].get("nbgrader", {}).get("solution")}
    first = [c for c in nb["cells"] if c["cell_type"] == "code"][0]
    assert ag_answer_key.review_notes("lab11", path) == ag_answer_key.review_notes("lab11", nb) != []
    assert ag_answer_key.review_notes("lab11", solutions, "llm_as_policy") == ag_answer_key.review_notes("lab11", nb)
    assert ag_answer_key.review_notes("lab11", [("", "".join(first["source"]))] + list(solutions.items()), "llm_as_policy")
    with pytest.raises(TypeError, match="notebook must be"):
        ag_answer_key.review_notes("lab11", 42)
    assert ag_answer_key.review_notes("no-such-assignment", nb) == []


# ----------------------------------------------------------------------------- the corpus's lean entries

def _cells_to_run(nb):
    """The set-up cell, the student's cells and the tests (hidden ones included), not the experiments."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for i, c in enumerate(code):
        meta = c["metadata"].get("nbgrader", {})
        if i == 0 or meta.get("solution") or meta.get("grade") or c.get("id", "").startswith("corpus-extra"):
            yield meta.get("grade_id", c.get("id")), "".join(c["source"]) if isinstance(c["source"], list) else c["source"]


def run_in_process(nb) -> tuple[dict, dict]:
    """(namespace, {test cell: 'ok' or the error}) after running the notebook's graded cells here."""
    ns: dict = {"__name__": "__main__"}
    results = {}
    for gid, src in _cells_to_run(nb):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(src, str(gid), "exec"), ns)
            results[gid] = "ok"
        except Exception as e:  # noqa: BLE001 - the test reports which cell and why
            results[gid] = f"{type(e).__name__}: {e}"
    return ns, results


LEAN_IDS = [(a, e) for a, entries in LEANS.items() for e in entries]


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    monkeypatch.setenv("LLMRL_FAST", "1")


@pytest.mark.parametrize("assignment,entry", LEAN_IDS, ids=[f"{a}:{e.name}" for a, e in LEAN_IDS])
def test_each_lean_entry_passes_every_test_and_is_noted_by_both_checks(assignment, entry):
    assert entry.review, f"{entry.name}: a lean entry must expect review"
    b = corpus.build_entry(assignment, entry)
    nb = json.loads(next(iter(b.files.values())))
    ns, results = run_in_process(nb)
    failed = {k: v for k, v in results.items() if v != "ok" and str(k).startswith("test_")}
    assert not failed, f"{entry.name} is not a correct answer, so it tests nothing: {failed}"
    want = NOTES[(assignment, entry.name)]
    gids = [w for w in want if not w.startswith("llmrl.")]
    static = ag_answer_key.review_notes(assignment, nb, entry.notebook)
    for target in (w for w in want if w.startswith("llmrl.")):
        assert any(target in n and n.split(":")[0] in gids for n in static), f"static: {target} not in {static}"
    code, expression = ag_answer_key.runtime_probe(assignment, entry.notebook)
    exec(code, ns)
    runtime = ag_answer_key.runtime_notes(assignment, entry.notebook, repr(eval(expression, ns)))
    for target in (w for w in want if w.startswith("llmrl.")):
        assert any(target in n and "run time" in n for n in runtime), f"runtime: {target} not in {runtime}"


def test_every_lean_entry_has_its_expected_notes_and_every_assignment_has_one():
    assert {(a, e.name) for a, e in LEAN_IDS} == set(NOTES)
    assert set(LEANS) == {lab.assignment for lab in layout.discover()}
    names = {e.name for _, e in LEAN_IDS}
    for style in ("lean-import", "lean-module-alias", "lean-partial", "lean-getattr", "lean-star",
                  "lean-helper-cell", "lean-class", "lean-importlib", "lean-exec", "lean-default-arg", "lean-vars"):
        assert style in names, style


# ----------------------------------------------------------------------------- the runtime probe

def _runtime(assignment, nb):
    ns, _ = run_in_process(nb)
    code, expression = ag_answer_key.runtime_probe(assignment, NB[assignment])
    exec(code, ns)
    return eval(expression, ns), ns


@pytest.mark.parametrize("assignment", sorted(NB))
def test_the_runtime_probe_finds_nothing_in_the_reference(assignment):
    b = corpus.build_entry(assignment, corpus.Entry("reference", NB[assignment], "x"))
    answer, _ = _runtime(assignment, json.loads(next(iter(b.files.values()))))
    data = json.loads(answer)
    assert data["tracer"] == "ok"
    assert set(data["functions"]) == {f"{t.grade_id}:{t.function}" for t in ag_answer_key.tasks_for(assignment, NB[assignment])}
    assert all("reached" in e and "error" not in e for e in data["functions"].values()), data
    assert ag_answer_key.runtime_notes(assignment, NB[assignment], answer) == []


def _lean_notebook(assignment, edits):
    return json.loads(next(iter(corpus.build_entry(assignment, corpus.Entry("x", NB[assignment], "x", edits)).files.values())))


@pytest.mark.fast
def test_the_runtime_probe_sees_a_call_the_static_check_cannot_follow():
    nb = _lean_notebook("lab11", [corpus.solve(T1A, '''
        import llmrl.sampling as _s

        def response_logprobs(logits, tokens, prompt_len):
            name = "".join(chr(c) for c in (103, 97, 116, 104, 101, 114)) + "_logprobs"
            return getattr(_s, name)(logits[:, prompt_len - 1:-1], tokens[:, prompt_len:])
    ''')])
    assert any("cannot follow" in n for n in ag_answer_key.review_notes("lab11", nb))
    answer, _ = _runtime("lab11", nb)
    one_note(ag_answer_key.runtime_notes("lab11", "llm_as_policy", answer), T1A, "llmrl.lm.sampling.gather_logprobs")


def test_a_replaced_trace_hook_is_said_not_trusted():
    nb = _lean_notebook("lab11", [corpus.insert("import sys\n_real = sys.settrace\nsys.settrace = lambda f: None",
                                                after="start")])
    answer, ns = _runtime("lab11", nb)
    try:
        notes = ag_answer_key.runtime_notes("lab11", "llm_as_policy", answer)
    finally:
        ns["sys"].settrace = ns["_real"]
    assert any("could not trace" in n for n in notes), notes


@pytest.mark.parametrize("answer", ["", "not json", "'[1, 2]'", json.dumps({"functions": []}),
                                    json.dumps({"tracer": "ok", "functions": {f"{T1A}:response_logprobs":
                                                                              {"reached": [1, None, {"a": 2}]}}}),
                                    json.dumps({"tracer": "ok", "functions": {"x": "y"}})])
def test_a_garbled_runtime_answer_is_a_note_not_a_crash(answer):
    notes = ag_answer_key.runtime_notes("lab11", "llm_as_policy", answer)
    assert isinstance(notes, list) and all(isinstance(n, str) for n in notes)


def test_the_runtime_probe_defines_only_its_own_names():
    code, expression = ag_answer_key.runtime_probe("hw4", "llm_rl")
    tree = ast.parse(code)
    names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets} | \
        {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert names and all(n.startswith("_llmrl_answer_key") for n in names), names
    assert "autograder" not in code and re.fullmatch(r"_llmrl_answer_key_[A-Za-z_]+\(\)", expression)


@pytest.mark.fast
def test_the_command_line_prints_the_notes_and_the_map(capsys, tmp_path):
    b = corpus.build_entry("lab21", LEANS["lab21"][0])
    path = tmp_path / "tasks.ipynb"
    path.write_text(next(iter(b.files.values())))
    assert review_main(["lab21", str(path)]) == 0
    assert "llmrl.rl.evaluation.pass_at_k" in capsys.readouterr().out
    assert review_main([]) == 0
    assert "| lab11 | `task1a_response_logprobs`" in capsys.readouterr().out
    assert review_main(["lab21", str(tmp_path / "missing.ipynb")]) == 1


MORE_EVASIONS = {
    "the code object swapped in": ["import llmrl.labs.lab11 as L",
                                   (T1A, SIG + "    raise NotImplementedError()\n\n"
                                         "response_logprobs.__code__ = L.reference_response_logprobs.__code__")],
    "setattr of the code object": ["import llmrl.labs.lab11 as L",
                                   (T1A, SIG + "    raise NotImplementedError()\n\n"
                                         "setattr(response_logprobs, '__code__', L.reference_response_logprobs.__code__)")],
    "types.FunctionType over the library's code": [
        "import types, llmrl.labs.lab11 as L",
        (T1A, "response_logprobs = types.FunctionType(L.reference_response_logprobs.__code__, globals())")],
    "a name put on builtins": ["import builtins, llmrl.labs.lab11 as L",
                               "builtins.response_logprobs = L.reference_response_logprobs"],
    "copy of the function object": ["import copy\nfrom llmrl.labs import lab11",
                                    (T1A, "response_logprobs = copy.copy(lab11.reference_response_logprobs)")],
    "map over the library function": ["import llmrl.sampling as s",
                                      (T1A, SIG + "    return next(map(s.gather_logprobs, [logits[:, prompt_len - 1:-1]], "
                                            "[tokens[:, prompt_len:]]))")],
    "a lambda's default argument": ["import llmrl.sampling as s",
                                    (T1A, "response_logprobs = lambda l, t, p, g=s.gather_logprobs: g(l[:, p - 1:-1], t[:, p:])")],
}


@pytest.mark.parametrize("case", sorted(MORE_EVASIONS))
def test_more_ways_of_hiding_the_call_are_noted(case):
    one_note(notes_for("lab11", *MORE_EVASIONS[case]), T1A, "llmrl.")


def test_a_notebook_built_to_exhaust_the_check_ends_in_a_note_quickly():
    import time

    chain = ["import llmrl.sampling as s", "def f0(a):\n    return s.gather_logprobs(a, a)"]
    chain += [f"def f{i}(a):\n    return f{i - 1}(a) + f{i - 1}(a) + f{i - 1}(a)" for i in range(1, 40)]
    chain.append((T1A, SIG + "    return f39(logits)"))
    start = time.monotonic()
    one_note(notes_for("lab11", *chain), T1A, "llmrl.lm.sampling.gather_logprobs")  # memoized: linear, not 3^40
    deep = "x = " + "(" * 5000 + "1" + ")" * 5000
    notes = notes_for("lab11", "y = " + " + ".join(["'a'"] * 3000), (T1A, SIG + "    " + "[" * 200 + "]" * 200))
    assert time.monotonic() - start < 30
    assert isinstance(notes, list) and isinstance(notes_for("lab11", deep), list)


def test_string_folding_cannot_be_made_to_build_huge_strings():
    import time

    doubling = ["s0 = 'ab'"] + [f"s{i} = s{i - 1} + s{i - 1}" for i in range(1, 80)]
    start = time.monotonic()
    notes = notes_for("lab11", *doubling, "r = 'a' * 10\nq = 'aaaaaaaaaa'.replace('a', 'bbbbbbbbbbbbbbbbbbbb')",
                      "w = '{:>999999999}'.format('x')", (T1A, SIG + "    return getattr(s, s79)(1)"))
    assert time.monotonic() - start < 10
    assert isinstance(notes, list)
