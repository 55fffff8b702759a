"""No answer key in the student's library: which graded tasks the course library can do, and the
check that flags a graded function leaning on one of them.

The course library (`llmrl`) holds complete versions of some graded tasks because other labs'
experiments need them (lab21 trains with the clipped loss lab19 asks for; the lab widgets run the
toy LM's optimum...). They stay. :data:`TASKS` maps every graded function of every notebook to the
library functions that do the same task (or a part of it that is the task's point); a graded
function that delegates to one of them gets a review note naming both, for a person to judge. The
score is the grader's business: the notes are reasons for review, never a silent zero.

Two checks, used together:

* static (:func:`review_notes`, in the grader's process, on the submitted notebook): follows the
  notebook's code with `ast`: imports (`import ... as`, `from llmrl import *`, module aliases),
  assignments to other names, `getattr` with a constant (or constant-folded) string,
  `importlib.import_module`, `functools.partial`, lambdas, decorators, default arguments, helper
  functions and classes in any cell, `exec`/`eval` of constant code, `%%writefile` modules, and
  the library's own call graph (a library function that calls one that does the task). A name
  looked up at run time (`getattr(sampling, name)` with a computed name, an import by a computed
  string, `exec` of computed code, `sys.modules[...]`) cannot be followed; it gets its own note.
  Library functions whose body the graded function copies line for line are noted too.
  Opaque sources of a value are named too: unpickling, marshal, walks of the garbage collector,
  functions and code objects built at run time, modules loaded from a file, and modules that are
  no installed package (a file the kernel wrote at run time).
* runtime, by behaviour: the *watch* (`_WATCH`, sys.settrace) sees every Python function a call
  runs and reports the library's functions by where they live and, by content, any code whose
  fingerprint (bytecode, names, non-string constants: not its name, file, lines or docstring) is
  one of the library's complete versions of the task, wherever that code came from: a copied file,
  a pickle, marshal, a code object found through gc and rebuilt under another file name. Code the
  notebook's own text defines (:func:`text_fingerprints`) is not a copy unless the library function
  is 4 lines or longer (then it was typed in line for line). The watch runs around every graded
  call in the student's kernel (autograder/execution/remote_calls.py; its report comes back with the answer,
  :func:`watch_notes`) and in the probe (:func:`runtime_probe`, one graded function at a time on
  small inputs after the notebook's cells; :func:`runtime_notes`). A trace or profile function set
  before the watch (or one that replaced it), a graded call or probe call that killed the kernel,
  and a probe call that stalled while the function answered the tests' calls hold the notebook for
  review. All of it runs inside the student's own process, so a determined student can still evade
  it (see README, "Grading safety"); neither check alone is proof; both leave notes for a person.

Interface for the grader (autograder/grading/one_notebook.py and tworun.py wire it in):

    notes = review_notes(assignment, notebook)              # notebook: nbformat node, dict or path
    watch = watch_module(assignment, notebook_name)         # installed as _llmrl_watch in the kernel
    code, expression = runtime_probe(assignment, notebook_name)
    # run `code` silently in the kernel after the student's cells, then `_llmrl_answer_key_probe([key])`
    # for each key of probe_keys() (user_expressions, text/plain), then:
    notes += runtime_notes(assignment, notebook_name, text_plain, submission=notebook)
    notes += watch_notes(assignment, notebook_name, what_the_graded_calls_ran, how_probe_calls_ended,
                         submission=notebook)

Each note starts with the grade_id of the solution cell, e.g. "task1a_response_logprobs:
response_logprobs delegates to llmrl.lm.sampling.gather_logprobs, which does this task once the
logits are shifted (log_softmax and gather)". A note names a library function where the library
defines it, whichever path the notebook imported it by (``llmrl.sampling``, the old path the
library keeps for the notebooks, is ``llmrl.lm.sampling``).
"""

from __future__ import annotations
import ast
from autograder.review.library_index import Library, library
from autograder.review.scopes import _Scope
from autograder.review.static_analysis import _Analysis, _TooComplex
from autograder.review.task_map import ANYWHERE, tasks_for
from autograder.review.notebook_text import _cells, _python

def _load_modules(analysis: _Analysis) -> None:
    for name, text in analysis.module_sources.items():
        scope = _Scope({}, name)
        analysis.modules[name] = scope.vars
        try:
            tree = ast.parse(text)
        except (SyntaxError, RecursionError, MemoryError, ValueError):
            continue
        for s in tree.body:
            try:
                analysis.stmt(s, scope)
            except (RecursionError, _TooComplex):
                break


def _function_body_lines(node) -> list[str]:
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    lines = []
    for s in body:
        for line in ast.unparse(s).splitlines():
            if line.strip():
                lines.append(line.strip())
    return lines


def _copied_from(node, lib: Library, targets) -> list[str]:
    """Library functions (of `targets`) whose body `node`'s body repeats: at least 4 of its lines and
    two thirds of them (argument checks aside), compared after ast.unparse (so layout and comments
    do not matter). Short library functions are left out: an honest answer of three lines often
    matches them (`sample_token`)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    mine = set(_function_body_lines(node))
    out = []
    for t in targets:
        mod, _, name = t.rpartition(".")
        lib_node = lib.modules.get(mod, {}).get("defs", {}).get(name)
        if not isinstance(lib_node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        theirs = [l for l in _function_body_lines(lib_node) if not l.startswith(("raise ", "if not ", "check_"))]
        shared = [l for l in theirs if l in mine]
        if len(shared) >= 4 and len(shared) * 3 >= len(theirs) * 2:
            out.append(t)
    return out


def review_notes(assignment: str, notebook, notebook_name: str | None = None,
                 lib: Library | None = None) -> list[str]:
    """Review notes for every graded function of `notebook` that leans on the course library.

    `notebook`: the submission (nbformat node, dict or .ipynb path), or its solution cells as
    {grade_id: source} or [(grade_id, source)]. `notebook_name` picks the notebook of the assignment
    (default: the one whose grade_ids the submission has). Test cells are skipped (the grader
    restores them); every other code cell counts, in order, as the kernel runs them.
    """
    lib = lib or library()
    cells = _cells(notebook)
    tasks = _tasks_of(assignment, notebook_name, cells)
    if not tasks:
        return []
    analysis = _Analysis(lib)
    sources = []
    for kind, meta, src in cells:
        if kind != "code":
            sources.append((meta, None))
            continue
        is_test = bool(meta.get("grade")) and not meta.get("solution")
        sources.append((meta, None if is_test else _python(src, analysis)))
    _load_modules(analysis)
    notes: list[str] = []
    snapshots, final = _run_cells(analysis, sources, {t.test_id for t in tasks}, notes)
    owners: dict[str, set] = {}   # library target -> graded functions whose task lists it
    for t in tasks:
        for l in t.library:
            owners.setdefault(l.target, set()).add(t.function)
    for t in tasks:
        env = _Scope(dict(snapshots.get(t.test_id, final)), None)
        fn_values = set(env.vars.get(t.function, ()))
        if fn_values:
            notes += _task_notes(t, fn_values, env, analysis, lib, owners)
    return list(dict.fromkeys(notes))


def _tasks_of(assignment: str, notebook_name: str | None, cells) -> list:
    """The assignment's tasks; without `notebook_name`, those of the one notebook whose grade_ids the
    cells have (all of them when the cells name several notebooks or none)."""
    tasks = tasks_for(assignment, notebook_name)
    if notebook_name is None:
        present = {m.get("grade_id") for _, m, _ in cells}
        names = {t.notebook for t in tasks if t.grade_id in present or t.test_id in present}
        if len(names) == 1:
            tasks = [t for t in tasks if t.notebook in names]
    return tasks


def _run_cells(analysis: _Analysis, sources, test_ids: set, notes: list[str]) -> tuple[dict[str, dict], dict]:
    """Run the cells' statements through `analysis` in notebook order, appending a note for each cell it
    cannot read. Returns the scope's snapshot as it stood before each test cell in `test_ids`, and at
    the end."""
    root = _Scope({}, None)
    snapshots: dict[str, dict] = {}
    for meta, src in sources:
        gid = meta.get("grade_id")
        if gid in test_ids and gid not in snapshots:
            snapshots[gid] = root.snapshot()
        if src is None:
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            if meta.get("solution"):
                notes.append(f"{gid}: the cell does not parse ({e.msg}, line {e.lineno}); "
                             "the answer-key check could not read it")
            continue
        except (RecursionError, MemoryError, ValueError):
            notes.append(f"{gid or 'a cell'}: a cell too deeply nested for Python's parser; the answer-key "
                         "check could not read it: review the graded functions by hand")
            continue
        for stmt in tree.body:
            try:
                analysis.stmt(stmt, root)
            except (RecursionError, _TooComplex):
                notes.append(f"{gid or 'a cell'}: code too deeply nested or too large for the answer-key "
                             "check; review the graded functions by hand")
                analysis.steps = 0
    return snapshots, root.snapshot()


def _task_notes(t, fn_values: set, env: _Scope, analysis: _Analysis, lib: Library,
                owners: dict[str, set]) -> list[str]:
    """The notes on one task's graded function, whose values in `env` are `fn_values`."""
    notes: list[str] = []
    targets = {l.target: l for l in t.library + ANYWHERE}
    found: dict[str, tuple] = {}
    dynamic: dict[str, tuple] = {}
    analysis.steps = 0
    try:
        reached = list(analysis.reached(fn_values, env))
    except (RecursionError, _TooComplex):
        notes.append(f"{t.grade_id}: {t.function} is too deeply nested or too large for the answer-key "
                     "check; review it by hand")
        reached = []
    for what, chain in reached:
        if isinstance(what, tuple):
            dynamic.setdefault(what[1], chain)
            continue
        base = what.split("(")[0]
        while base and lib.kind(base) is None and "." in base:
            base = base.rsplit(".", 1)[0]
        if not base.startswith("llmrl"):
            continue
        hits = [base] if base in targets else []
        hits += sorted(r for r in lib.reach(base) if r in targets)
        for h in hits:
            via = (base,) if h != base else ()
            found.setdefault(h, chain + via)
    # a target found through another one (reference_response_logprobs -> gather_logprobs) is
    # already said by that one's note
    found = {h: c for h, c in found.items() if not any(x in found for x in c)}
    # ...and one found through another graded function whose own task lists it is that task's
    # note (grpo_loss calling the student's approx_kl_from_logprobs, which leans on kl_estimate)
    found = {h: c for h, c in found.items()
             if not any(x in owners.get(h, ()) for x in c[1:] if x != t.function)}
    for target, chain in sorted(found.items()):
        lean = targets[target]
        own = chain[1:] if chain and chain[0] == t.function else chain
        if not chain:
            notes.append(f"{t.grade_id}: {t.function} is {target} itself (bound in the notebook), "
                         f"which {lean.does}")
        else:
            how = f" (through {' -> '.join(own)})" if own else ""
            notes.append(f"{t.grade_id}: {t.function} delegates to {target}{how}, which {lean.does}")
    for what, chain in sorted(dynamic.items()):
        own = chain[1:] if chain and chain[0] == t.function else chain
        how = f" (in {' -> '.join(own)})" if own else ""
        libs = ", ".join(l.target for l in t.library) or "none for this task"
        notes.append(f"{t.grade_id}: {t.function} uses {what}{how}: the answer-key check cannot follow "
                     f"it; review it (library functions that do this task: {libs})")
    for v in fn_values:
        if v[0] == "def":
            try:
                copied = _copied_from(analysis.defs[v[1]].node, lib, [l.target for l in t.library])
            except RecursionError:
                copied = []
            for target in copied:
                notes.append(f"{t.grade_id}: {t.function} repeats the body of {target}, "
                             f"which {targets[target].does}")
    return notes


