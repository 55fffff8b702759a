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
  call in the student's kernel (autograder/remote.py; its report comes back with the answer,
  :func:`watch_notes`) and in the probe (:func:`runtime_probe`, one graded function at a time on
  small inputs after the notebook's cells; :func:`runtime_notes`). A trace or profile function set
  before the watch (or one that replaced it), a graded call or probe call that killed the kernel,
  and a probe call that stalled while the function answered the tests' calls hold the notebook for
  review. All of it runs inside the student's own process, so a determined student can still evade
  it (see README, "Grading safety"); neither check alone is proof; both leave notes for a person.

Interface for the grader (autograder/grade.py and tworun.py wire it in):

    notes = review_notes(assignment, notebook)              # notebook: nbformat node, dict or path
    watch = watch_module(assignment, notebook_name)         # installed as _llmrl_watch in the kernel
    code, expression = runtime_probe(assignment, notebook_name)
    # run `code` silently in the kernel after the student's cells, then `_llmrl_answer_key_probe([key])`
    # for each key of probe_keys() (user_expressions, text/plain), then:
    notes += runtime_notes(assignment, notebook_name, text_plain, submission=notebook)
    notes += watch_notes(assignment, notebook_name, what_the_graded_calls_ran, how_probe_calls_ended,
                         submission=notebook)

Each note starts with the grade_id of the solution cell, e.g. "task1a_response_logprobs:
response_logprobs delegates to llmrl.sampling.gather_logprobs, which does this task once the
logits are shifted (log_softmax and gather)".
"""

from __future__ import annotations

import ast
import builtins
import copy
import importlib.util
import json
import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Lean:
    """A library function that does a graded task (or the part of it that is the task's point)."""

    target: str   # its qualified name, as defined in llmrl (llmrl.module.function)
    does: str     # finishes "..., which <does>"


@dataclass(frozen=True)
class Task:
    assignment: str
    notebook: str
    grade_id: str          # the solution cell
    test_id: str           # the test cell that grades it (the notebook as that cell sees it)
    function: str          # the graded function's name
    library: tuple         # Lean, ...
    probe: str             # Python expression -> (args, kwargs) for the runtime check


THIS = "does this task"
# A graded function anywhere that reaches one of these gets a note, whatever its task.
ANYWHERE = (Lean("llmrl.hw4.impl.load_impl", "loads hw4's reference solutions (from the course's source notebook)"),)

_LOGPROBS = (Lean("llmrl.labs.lab11.reference_response_logprobs", THIS),
             Lean("llmrl.sampling.gather_logprobs", "does this task once the logits are shifted (log_softmax and gather)"),
             Lean("llmrl.sampling.response_logprobs", "does this task from a model and its tokens"))
_KL_PART = (Lean("llmrl.losses.kl_estimate", "does part of this task: the per-token KL estimate (k1, k2, k3)"),
            Lean("llmrl.labs.lab11.reference_kl_estimators", "does part of this task: the per-token KL estimates"))
_CLIP_PART = (Lean("llmrl.losses.clipped_surrogate", "does part of this task: the clipped surrogate"),
              Lean("llmrl.losses.clipped_pg_loss", "does part of this task: the clipped surrogate"))
_LOG_RATIO = (Lean("llmrl.losses.kl_estimate", "does part of this task: the per-token log-ratio (k1)"),)

# Probe inputs: R(*shape) a seeded float tensor, M(*shape) a seeded bool mask with a True in every row.
TASKS: tuple[Task, ...] = (
    # lab11: the language model as a policy
    Task("lab11", "llm_as_policy", "task1a_response_logprobs", "test_task1a_response_logprobs_values", "response_logprobs",
         _LOGPROBS, "(R(2, 6, 5), I(5, 2, 6), 2), {}"),
    Task("lab11", "llm_as_policy", "task1b_sequence_logprob", "test_task1b_sequence_logprob_values", "sequence_logprob",
         (Lean("llmrl.labs.lab11.reference_sequence_logprob", THIS),), "(R(2, 4), M(2, 4)), {}"),
    Task("lab11", "llm_as_policy", "task2_sample_with_temperature", "test_task2_sample_with_temperature_values",
         "sample_with_temperature", (Lean("llmrl.sampling.sample_token", THIS),), "(R(3, 5), 0.7, G()), {}"),
    Task("lab11", "llm_as_policy", "task3_kl_estimators", "test_task3_kl_estimators_values", "kl_estimators",
         (Lean("llmrl.losses.kl_estimate", "does this task (one estimator per call)"),
          Lean("llmrl.labs.lab11.reference_kl_estimators", THIS)), "(R(2, 3), R(2, 3)), {}"),
    Task("lab11", "llm_as_policy", "task4_tilted_optimum", "test_task4_tilted_optimum_values", "tilted_optimum",
         (Lean("llmrl.toylm.tilted_optimum", THIS),),
         "(np.array([0.2, 0.3, 0.5, 0.0]), np.array([1.0, 0.0, 2.0, 5.0]), 0.5), {}"),
    Task("lab11", "llm_as_policy", "task4_tilted_optimum", "test_task4_tilted_optimum_values", "kl_objective",
         (Lean("llmrl.toylm.kl_objective", THIS),
          Lean("llmrl.toylm.kl_divergence", "does part of this task: the KL term"),
          Lean("llmrl.toylm.expected_reward", "does part of this task: the expected reward")),
         "(np.array([0.2, 0.3, 0.5]), np.array([0.4, 0.4, 0.2]), np.array([1.0, 0.0, 2.0]), 0.5), {}"),
    Task("lab11", "llm_as_policy", "task5_token_level_optimum", "test_task5_token_level_optimum_values",
         "token_level_optimum",
         (Lean("llmrl.toylm.token_level_optimum", THIS),
          Lean("llmrl.toylm.soft_values", "does part of this task: the soft values V(i)"),
          Lean("llmrl.toylm.tilted_optimum", "does part of this task: the first token's step (task 4's optimum)")),
         "(np.array([0.4, 0.6]), np.array([[0.6, 0.4], [0.5, 0.5]]), np.array([[0.0, 1.0], [0.0, 2.0]]), 1.0), {}"),
    # lab19: failure modes
    Task("lab19", "failure_modes", "task1a_bon_kl", "test_task1a_bon_kl_values", "bon_kl",
         (Lean("llmrl.overopt.bon_kl", THIS),), "(np.array([1, 2, 10]),), {}"),
    Task("lab19", "failure_modes", "task1b_best_of_n_stats", "test_task1b_best_of_n_stats_values", "best_of_n_stats",
         (Lean("llmrl.overopt.best_of_n_stats", THIS),
          Lean("llmrl.overopt.rank_weights", "does part of this task: the best-of-n rank weights")),
         "(np.array([0.3, 1.2, -0.5, 0.8]), np.array([0.1, 0.4, 0.0, 0.9]), 3), {}"),
    Task("lab19", "failure_modes", "task1c_fit_gao_bon", "test_task1c_fit_gao_bon_values", "fit_gao_bon",
         (Lean("llmrl.overopt.fit_gao_bon", THIS),),
         "(np.array([0.5, 1.0, 1.5, 2.0]), np.array([0.4, 0.6, 0.5, 0.2])), {}"),
    Task("lab19", "failure_modes", "task2_kl_penalized_rewards", "test_task2_kl_penalized_rewards_values",
         "kl_penalized_rewards", _LOG_RATIO, "(R(3), R(3, 4), R(3, 4), M(3, 4), 0.1), {}"),
    Task("lab19", "failure_modes", "task3_clipped_pg_loss", "test_task3_clipped_pg_loss_values", "clipped_pg_loss",
         (Lean("llmrl.losses.clipped_pg_loss", THIS), Lean("llmrl.losses.clipped_surrogate", THIS)),
         "(LossBatch(logprobs=R(2, 4), logits=R(2, 4, 5), old_logprobs=R(2, 4), mask=M(2, 4), "
         "advantages=R(2), rewards=R(2), eps_low=0.2, eps_high=0.28),), {}"),
    Task("lab19", "failure_modes", "task4_token_entropy", "test_task4_token_entropy_values", "token_entropy",
         (Lean("llmrl.evaluation.token_entropy", "does this task (without a gradient)"),
          Lean("llmrl.evaluation.mean_token_entropy", "does this task from a model and a rollout")),
         "(R(2, 5, 4), M(2, 5)), {}"),
    # lab21: tasks
    Task("lab21", "tasks", "task1_reverse_kl_rewards", "test_task1_reverse_kl_rewards_values", "reverse_kl_rewards",
         _LOG_RATIO, "(R(2, 3), R(2, 3), M(2, 3)), {}"),
    Task("lab21", "tasks", "task2_opd_pg_loss", "test_task2_opd_pg_loss_values", "opd_pg_loss",
         (Lean("llmrl.losses.opd_sampled_loss", THIS),), "(R(2, 3), R(2, 3), M(2, 3)), {}"),
    Task("lab21", "tasks", "task3_full_vocab_reverse_kl", "test_task3_full_vocab_reverse_kl_values", "full_vocab_reverse_kl",
         (Lean("llmrl.losses.full_vocab_kl", "does this task up to the token mean (the per-position KL)"),
          Lean("llmrl.losses.opd_full_loss", THIS),
          Lean("llmrl.evaluation.exact_token_kl", "does this task from two models and a rollout")),
         "(R(2, 3, 5), R(2, 3, 5), M(2, 3)), {}"),
    Task("lab21", "tasks", "task4_pass_at_k", "test_task4_pass_at_k_values", "pass_at_k",
         (Lean("llmrl.evaluation.pass_at_k", THIS),), "(10, 3, 4), {}"),
    Task("lab21", "tasks", "task5_maxrl_advantages", "test_task5_maxrl_advantages_values", "maxrl_advantages",
         (Lean("llmrl.advantages.group_advantages", 'does this task (kind="maxrl")'),),
         "(torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),), {}"),
    # hw4: RL for a language model
    Task("hw4", "llm_rl", "task1_per_token_logprobs", "test_task1_per_token_logprobs_values", "compute_per_token_logprobs",
         (Lean("llmrl.sampling.gather_logprobs", "does this task once the logits are shifted (log_softmax and gather)"),
          Lean("llmrl.labs.lab11.reference_response_logprobs", "does this task (with prompt_len=1)"),
          Lean("llmrl.sampling.response_logprobs", "does this task from a model and its tokens")),
         "(R(2, 5, 7), I(7, 2, 5)), {}"),
    Task("hw4", "llm_rl", "task2_completion_mask", "test_task2_completion_mask_values", "build_completion_mask",
         (), "(torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]]), 2), {}"),
    Task("hw4", "llm_rl", "task3_approx_kl", "test_task3_approx_kl_values", "approx_kl_from_logprobs",
         (Lean("llmrl.losses.kl_estimate", "does part of this task: the per-token k3 estimate"),
          Lean("llmrl.labs.lab11.reference_kl_estimators", "does part of this task: the per-token k3 estimate")),
         "(R(2, 4), R(2, 4), M(2, 4)), {}"),
    Task("hw4", "llm_rl", "task4_iter_minibatches", "test_task4_iter_minibatches_values", "iter_minibatches",
         (Lean("llmrl.rl.step.minibatches", THIS),), "({'a': torch.arange(6), 'b': torch.arange(12).view(6, 2)}, 4, G()), {}"),
    Task("hw4", "llm_rl", "task5_group_advantages", "test_task5_group_advantages_values", "compute_group_advantages",
         (Lean("llmrl.advantages.group_advantages", 'does this task (kind="std")'),),
         "(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]), 3), {}"),
    Task("hw4", "llm_rl", "task6_normalize_advantages", "test_task6_normalize_advantages_values",
         "maybe_normalize_advantages", (), "(torch.tensor([1.0, -2.0, 3.0]), True), {}"),
    Task("hw4", "llm_rl", "task7_reinforce_loss", "test_task7_reinforce_loss_values", "reinforce_loss",
         _KL_PART, "(R(2, 4), R(2, 4), M(2, 4), R(2), 0.1), {}"),
    Task("hw4", "llm_rl", "task8_grpo_loss", "test_task8_grpo_loss_values", "grpo_loss",
         _CLIP_PART + _KL_PART, "(R(2, 4), R(2, 4), R(2, 4), M(2, 4), R(2), 0.2, 0.1), {}"),
)


def tasks_for(assignment: str, notebook: str | None = None) -> list[Task]:
    return [t for t in TASKS if t.assignment == assignment and (notebook is None or t.notebook == notebook)]


def what_the_library_can_do() -> str:
    """The map as a table (docs/grading-safety.md and the status notes are written from it)."""
    rows = []
    for t in TASKS:
        libs = ", ".join(f"`{l.target}`" for l in t.library) or "none"
        rows.append(f"| {t.assignment} | `{t.grade_id}` | `{t.function}` | {libs} |")
    return "\n".join(["| assignment | task (grade_id) | function | library functions that do it |",
                      "|---|---|---|---|"] + rows)


# ============================================================================ the library's index

def library_dir() -> Path:
    """The installed llmrl package's folder (found without importing it), else lib/llmrl here."""
    try:
        spec = importlib.util.find_spec("llmrl")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return ROOT / "lib" / "llmrl"


class Library:
    """The llmrl package read with ast: modules, their definitions, imports and call graph."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.modules: dict[str, dict] = {}      # module -> {"defs": {name: node}, "imports": {name: target},
        #                                                    "containers": {name: [ast exprs]}, "package": bool}
        for p in sorted(self.folder.rglob("*.py")):
            rel = p.relative_to(self.folder).with_suffix("")
            parts = ["llmrl", *rel.parts]
            package = parts[-1] == "__init__"
            if package:
                parts = parts[:-1]
            name = ".".join(parts)
            try:
                tree = ast.parse(p.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            self.modules[name] = self._read(name, tree, package)
        self._reach: dict[str, frozenset] = {}

    @staticmethod
    def _read(name: str, tree: ast.Module, package: bool) -> dict:
        defs, imports, containers = {}, {}, {}
        base = name if package else name.rsplit(".", 1)[0]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs[node.name] = node
            elif isinstance(node, ast.Import):
                for a in node.names:
                    imports[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = base.split(".")
                    pkg = pkg[:len(pkg) - (node.level - 1)]
                    mod = ".".join(pkg + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for a in node.names:
                    if a.name != "*":
                        imports[a.asname or a.name] = f"{mod}.{a.name}"
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        containers[t.id] = node.value
        return {"defs": defs, "imports": imports, "containers": containers, "package": package}

    def canonical(self, path: str, _depth: int = 0) -> str:
        """Where a dotted name inside llmrl really lives (`llmrl.evaluation.full_vocab_kl` ->
        `llmrl.losses.full_vocab_kl`); names the index does not know are returned as they are."""
        parts = path.split(".")
        if parts[0] != "llmrl" or _depth > 20:
            return path
        mod = "llmrl"
        i = 1
        while i < len(parts) and f"{mod}.{parts[i]}" in self.modules and parts[i] not in self.modules[mod]["defs"]:
            mod = f"{mod}.{parts[i]}"
            i += 1
        if i == len(parts) or mod not in self.modules:
            return path
        info, head, rest = self.modules[mod], parts[i], parts[i + 1:]
        if head in info["defs"] or head in info["containers"]:
            return ".".join([mod, head, *rest])
        if head in info["imports"]:
            target = info["imports"][head]
            if target.startswith("llmrl"):
                return self.canonical(".".join([target, *rest]), _depth + 1)
            return path
        return path

    def kind(self, path: str) -> str | None:
        """'module', 'function', 'class' or 'value' for a canonical llmrl name, None if unknown."""
        if path in self.modules:
            return "module"
        mod, _, name = path.rpartition(".")
        info = self.modules.get(mod)
        if not info:
            return None
        node = info["defs"].get(name)
        if node is not None:
            return "class" if isinstance(node, ast.ClassDef) else "function"
        return "value" if name in info["containers"] else None

    def public_names(self, module: str) -> list[str]:
        """What `from <module> import *` binds (no __all__ in llmrl: every name not starting with _),
        and for a package its submodules (bound once imported anywhere, as the notebooks do)."""
        info = self.modules.get(module)
        if not info:
            return []
        names = set(info["defs"]) | set(info["imports"]) | set(info["containers"])
        if info["package"]:
            names |= {m[len(module) + 1:].split(".")[0] for m in self.modules if m.startswith(module + ".")}
        return sorted(n for n in names if not n.startswith("_"))

    def _refs(self, path: str) -> set[str]:
        """Canonical llmrl names a library definition's body (or a container's value) refers to."""
        mod, _, name = path.rpartition(".")
        info = self.modules.get(mod)
        if not info:
            return set()
        node = info["defs"].get(name) or info["containers"].get(name)
        if node is None:
            return set()
        out = set()
        body_nodes = node.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else [node]
        for sub in body_nodes:
            for n in ast.walk(sub):
                dotted = _dotted(n)
                if not dotted:
                    continue
                head, *rest = dotted.split(".")
                if head in info["defs"] or head in info["containers"]:
                    target = ".".join([mod, head, *rest])
                elif head in info["imports"] and info["imports"][head].startswith("llmrl"):
                    target = ".".join([info["imports"][head], *rest])
                else:
                    continue
                target = self.canonical(target)
                while target and self.kind(target) is None and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target and target != path and self.kind(target) in ("function", "class", "value"):
                    out.add(target)
        return out

    def reach(self, path: str) -> frozenset:
        """Every llmrl definition `path` can call, directly or through other library code."""
        if path not in self._reach:
            seen, todo = set(), [path]
            while todo:
                p = todo.pop()
                for r in self._refs(p):
                    if r not in seen:
                        seen.add(r)
                        todo.append(r)
            self._reach[path] = frozenset(seen)
        return self._reach[path]


@lru_cache(maxsize=4)
def _library(folder: str) -> Library:
    return Library(Path(folder))


def library(folder: Path | None = None) -> Library:
    return _library(str(folder or library_dir()))


def _dotted(node) -> str:
    """`a.b.c` for a name or a chain of attributes on a name, else ""."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        text = ast.unparse(node)
        if re.fullmatch(r"[A-Za-z_][\w.]*", text):
            return text
    return ""


# ============================================================================ the static check

# A value the analysis tracks. kind: "lib" (a name inside llmrl), "py" (any other module or builtin),
# "def" (a function, lambda or class written in the notebook; ref = its id), "str" (a constant
# string), "dyn" (something of llmrl looked up by a name computed at run time; ref = what), "mod"
# (a %%writefile module of the notebook), "globals" (the notebook's globals()).
Value = tuple
MAX_STRING = 4096      # a constant string longer than this is not folded (a notebook cannot blow it up)
MAX_STEPS = 2_000_000  # evaluations per notebook before the check gives up with a note (about 10 s)


class _TooComplex(Exception):
    pass


# Calls whose result the notebook's text does not show (the source of a value the check cannot read);
# a graded function whose value comes from one gets a note naming it.
OPAQUE_CALLS = {
    **{f"{m}.{f}": f"unpickling ({m}.{f})" for m in ("pickle", "_pickle", "dill", "cloudpickle")
       for f in ("loads", "load", "Unpickler")},
    "torch.load": "unpickling (torch.load)", "joblib.load": "unpickling (joblib.load)",
    "shelve.open": "unpickling (shelve.open)", "copyreg._reconstructor": "unpickling (copyreg._reconstructor)",
    "numpy.load": "a file read at run time (numpy.load)",
    "marshal.loads": "unmarshalled code (marshal.loads)", "marshal.load": "unmarshalled code (marshal.load)",
    **{f"gc.{f}": f"a walk of the garbage collector (gc.{f})" for f in ("get_objects", "get_referrers",
                                                                       "get_referents", "garbage")},
    **{f"types.{f}": f"a function or code object built at run time (types.{f})"
       for f in ("FunctionType", "LambdaType", "CodeType", "MethodType")},
    **{f: f"a module loaded from a file ({f})" for f in (
        "importlib.util.spec_from_file_location", "importlib.util.module_from_spec",
        "importlib.machinery.SourceFileLoader", "importlib.machinery.SourcelessFileLoader",
        "importlib.machinery.ExtensionFileLoader", "runpy.run_path", "runpy.run_module", "imp.load_source",
        "imp.load_compiled", "zipimport.zipimporter")},
}


@lru_cache(maxsize=4096)
def _installed(top: str) -> bool:
    """Whether a top-level module can be imported without files written at run time: built in,
    frozen, or found on the Python path the kernels get (not the autograder's folder, not the
    grader's current folder)."""
    import importlib.machinery
    import sys

    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return True
    if importlib.machinery.FrozenImporter.find_spec(top) is not None:
        return True
    here = str(Path(__file__).resolve().parent)
    path = [p for p in sys.path if p and Path(p).resolve() != Path(here) and Path(p).resolve() != Path.cwd()]
    try:
        return importlib.machinery.PathFinder.find_spec(top, path) is not None
    except (ImportError, ValueError, OSError):
        return False

OPAQUE = ("opaque",)   # something computed at run time (so a name holding it is no constant string)

_BUILTINS = set(dir(builtins))
_SKIP_CELL_MAGICS = ("%%bash", "%%sh", "%%html", "%%javascript", "%%js", "%%latex", "%%markdown",
                     "%%svg", "%%script", "%%perl", "%%ruby", "%%system", "%%!")


@dataclass
class _Def:
    node: ast.AST            # FunctionDef, AsyncFunctionDef, Lambda or ClassDef
    name: str
    module: str | None       # None: the notebook; else a %%writefile module's name
    decorators: tuple = ()
    attached: set = None     # values assigned to its attributes (f.__code__ = g.__code__, setattr)

    def __post_init__(self):
        self.attached = set() if self.attached is None else self.attached


class _Analysis:
    """Abstract interpretation of one notebook: which values each name may hold."""

    def __init__(self, lib: Library):
        self.lib = lib
        self.defs: list[_Def] = []
        self._by_node: dict[int, int] = {}
        self._returning: set[int] = set()
        self._scopes: dict[tuple, _Scope] = {}     # (def id, id of the notebook scope) -> its scope
        self._returned: dict[tuple, set] = {}
        self.steps = 0                              # evaluations so far (a hostile notebook is cut off)
        self.modules: dict[str, dict] = {}          # %%writefile name -> its env
        self.module_sources: dict[str, str] = {}

    # ------------------------------------------------------------------ values of names and code
    def module_value(self, name: str) -> set:
        top = name.split(".")[0]
        if top == "llmrl":
            return {("lib", self.lib.canonical(name))}
        if name in self.module_sources:
            return {("mod", name)}
        if top and not _installed(top):
            # the sandbox's only writable folder is the kernel's own: a module that is no installed
            # package and no %%writefile cell of the notebook was written there at run time
            return {("dyn", f"module {name}, which is not installed (a file written at run time)")}
        return {("py", name)}

    def attr(self, values: Iterable[Value], name: str) -> set:
        out = set()
        for v in values:
            kind = v[0]
            if kind == "globals" and name in ("get", "__getitem__", "pop", "setdefault"):
                out.add(("globals-get",))
                continue
            if kind in ("lib", "def", "mod") and name == "__getattribute__":
                out.add(("getattribute", v))
                continue
            if kind == "lib" and v[1].endswith(".__dict__") and name in ("get", "__getitem__"):
                out.add(("getattribute", ("lib", v[1][:-len(".__dict__")])))
                continue
            if kind == "lib":
                out.add(("lib", self.lib.canonical(f"{v[1]}.{name}")))
            elif kind == "py":
                out.add(("py", f"{v[1]}.{name}"))
            elif kind == "def":
                out.add(v)  # a method or attribute of something written in the notebook: its code
            elif kind == "mod":
                out |= set(self.modules.get(v[1], {}).get(name, ()))
            elif kind == "dyn":
                out.add(v)
        return out

    def strings(self, node, scope) -> set[str] | None:
        """The constant strings an expression can be, or None when it is computed at run time."""
        if isinstance(node, ast.Constant):
            return {node.value} if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            vals = scope.lookup(node.id)
            if vals and all(v[0] == "str" for v in vals):
                return {v[1] for v in vals}
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self.strings(node.left, scope), self.strings(node.right, scope)
            if a is None or b is None or len(a) * len(b) > 64 or \
                    max(map(len, a)) + max(map(len, b)) > MAX_STRING:
                return None
            return {x + y for x in a for y in b}
        if isinstance(node, ast.JoinedStr):
            out = {""}
            for part in node.values:
                s = self.strings(part.value, scope) if isinstance(part, ast.FormattedValue) else \
                    self.strings(part, scope)
                if s is None or len(out) * len(s) > 64 or max(map(len, out)) + max(map(len, s), default=0) > MAX_STRING:
                    return None
                out = {x + y for x in out for y in s}
            return out
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            base = self.strings(node.value, scope)
            bounds = [None if b is None else (b.value if isinstance(b, ast.Constant) else ...)
                      for b in (node.slice.lower, node.slice.upper, node.slice.step)]
            if base is None or ... in bounds or not all(b is None or isinstance(b, int) for b in bounds):
                return None
            return {s[slice(*bounds)] for s in base}
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                base = self.strings(f.value, scope)
                if f.attr == "join" and base is not None and len(node.args) == 1:
                    arg = node.args[0]
                    if isinstance(arg, (ast.List, ast.Tuple)):
                        parts = [self.strings(e, scope) for e in arg.elts]
                        if all(p is not None and len(p) == 1 for p in parts) and \
                                sum(len(next(iter(p))) for p in parts) + len(parts) * max(map(len, base)) <= MAX_STRING:
                            return {b.join(next(iter(p)) for p in parts) for b in base}
                    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "reversed" \
                            and len(arg.args) == 1:
                        inner = self.strings(arg.args[0], scope)
                        if inner is not None and max(map(len, base)) == 0:
                            return {s[::-1] for s in inner}
                    inner = self.strings(arg, scope)
                    if inner is not None and max(map(len, base)) == 0:
                        return set(inner)
                if base is not None and f.attr in ("lower", "upper", "strip", "lstrip", "rstrip", "title",
                                                   "casefold", "swapcase") and not node.args:
                    return {getattr(s, f.attr)() for s in base}
                if base is not None and f.attr in ("replace", "removeprefix", "removesuffix"):
                    args = [next(iter(a)) if a is not None and len(a) == 1 else None
                            for a in (self.strings(x, scope) for x in node.args)]
                    if None in args or node.keywords or not 1 <= len(args) <= 2:
                        return None
                    if f.attr == "replace" and (len(args) != 2 or any(
                            len(s) + s.count(args[0]) * max(0, len(args[1]) - len(args[0])) > MAX_STRING
                            for s in base) or not args[0]):
                        return None
                    return {getattr(s, f.attr)(*args) for s in base}
            if isinstance(f, ast.Name) and f.id == "chr" and len(node.args) == 1 \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int):
                try:
                    return {chr(node.args[0].value)}
                except (ValueError, OverflowError):
                    return None
            if isinstance(f, ast.Name) and f.id == "str" and len(node.args) == 1:
                return self.strings(node.args[0], scope)
        return None

    def value(self, node, scope) -> set:
        """Every value an expression may have (over-approximated: a call may return its arguments)."""
        if node is None:
            return set()
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _TooComplex()
        s = self.strings(node, scope) if isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr, ast.Call,
                                                            ast.Subscript)) else None
        if s is not None:
            return {("str", x) for x in s}
        if isinstance(node, ast.Constant):
            return set()
        if isinstance(node, ast.Name):
            found = scope.lookup(node.id)
            if found is not None:
                return set(found)
            if node.id == "__builtins__":
                return {("py", "builtins")}
            if node.id == "get_ipython":
                return {("py", "IPython.get_ipython")}
            return {("py", f"builtins.{node.id}")} if node.id in _BUILTINS else set()
        if isinstance(node, ast.Attribute):
            return self.attr(self.value(node.value, scope), node.attr)
        if isinstance(node, ast.Call):
            return self.call(node, scope) | {OPAQUE}
        if isinstance(node, ast.Subscript):
            base = self.value(node.value, scope)
            keys = self.strings(node.slice, scope)
            out = set()
            for v in base:
                if v[0] == "globals":
                    out |= scope.global_values(keys) if keys is not None else \
                        {("dyn", "the notebook's globals() with a computed key")}
                elif v[0] == "py" and v[1] in ("sys.modules",):
                    out |= set().union(*(self.module_value(k) for k in keys)) if keys else \
                        {("dyn", "sys.modules with a computed key")}
                elif v[0] == "lib" and v[1].endswith(".__dict__"):
                    out |= self.attr([("lib", v[1][:-len(".__dict__")])], next(iter(keys))) if keys and len(keys) == 1 \
                        else {("dyn", f"a name of {v[1][:-len('.__dict__')]} computed at run time")}
                elif v[0] == "lib" and self.lib.kind(v[1]) == "value":
                    out |= {("lib", r) for r in self.lib.reach(v[1])} | {v}
                elif v[0] in ("def", "dyn", "lib"):
                    out.add(v)
            return out | {OPAQUE}
        if isinstance(node, ast.Lambda):
            return {("def", self.define(node, "<lambda>", scope))}
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return set().union(*(self.value(e, scope) for e in node.elts)) if node.elts else set()
        if isinstance(node, ast.Dict):
            return set().union(*(self.value(e, scope) for e in node.values)) if node.values else set()
        if isinstance(node, ast.Starred):
            return self.value(node.value, scope)
        if isinstance(node, ast.IfExp):
            return self.value(node.body, scope) | self.value(node.orelse, scope)
        if isinstance(node, ast.BoolOp):
            return set().union(*(self.value(v, scope) for v in node.values))
        if isinstance(node, (ast.BinOp, ast.JoinedStr)):  # not a constant string (strings() said so)
            parts = [node.left, node.right] if isinstance(node, ast.BinOp) else []
            return {v for p in parts for v in self.value(p, scope) if v[0] != "str"} | {OPAQUE}
        if isinstance(node, ast.UnaryOp):
            return self.value(node.operand, scope)
        if isinstance(node, ast.NamedExpr):
            vals = self.value(node.value, scope)
            scope.bind(node.target.id, vals)
            return vals
        if isinstance(node, (ast.Await, ast.Yield, ast.YieldFrom)):
            return self.value(node.value, scope)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = scope.child()
            for gen in node.generators:
                self.bind_target(gen.target, self.value(gen.iter, inner), inner)
            if isinstance(node, ast.DictComp):
                return self.value(node.value, inner)
            return self.value(node.elt, inner)
        return set()

    def call(self, node: ast.Call, scope) -> set:
        funcs = self.value(node.func, scope)
        args = list(node.args) + [k.value for k in node.keywords]
        out = set()
        if isinstance(node.func, ast.Attribute) and node.func.attr == "replace" and \
                any((k.arg or "").startswith("co_") for k in node.keywords):
            out.add(("dyn", "a code object rebuilt (code.replace)"))
        for f in funcs:
            kind, ref = f[0], (f[1] if len(f) > 1 else None)
            if kind == "py" and ref in ("builtins.getattr", "operator.attrgetter") and node.args:
                if ref == "builtins.getattr" and len(node.args) >= 2:
                    names = self.strings(node.args[1], scope)
                    base = self.value(node.args[0], scope)
                    if names is not None:
                        for n in names:
                            out |= self.attr(base, n)
                    else:
                        out |= {("dyn", f"a name of {v[1]} computed at run time") for v in base if v[0] == "lib"}
                        out |= {v for v in base if v[0] in ("def", "dyn")}
                    out |= set().union(*(self.value(a, scope) for a in node.args[2:]))
                    continue
                if ref == "operator.attrgetter":
                    names = self.strings(node.args[0], scope)
                    out.add(("attrgetter", tuple(sorted(names)) if names is not None else None))
                    continue
            if kind == "attrgetter":
                base = set().union(*(self.value(a, scope) for a in node.args)) if node.args else set()
                if ref is None:
                    out |= {("dyn", f"a name of {v[1]} computed at run time") for v in base if v[0] == "lib"}
                else:
                    for n in ref:
                        cur = base
                        for part in n.split("."):
                            cur = self.attr(cur, part)
                        out |= cur
                continue
            if kind == "py" and ref in ("importlib.import_module", "builtins.__import__"):
                names = self.strings(node.args[0], scope) if node.args else None
                if names is None:
                    out.add(("dyn", "a module imported by a computed name"))
                else:
                    for n in names:
                        out |= self.module_value(n) | self.module_value(n.split(".")[0])
                continue
            if kind == "py" and ref == "builtins.setattr" and len(node.args) >= 3:
                names = self.strings(node.args[1], scope)
                for n in (names or {None}):
                    self.set_attribute(self.value(node.args[0], scope), n, self.value(node.args[2], scope), scope)
                continue
            if kind == "py" and ref == "builtins.vars" and node.args:
                out |= {("lib", v[1] + ".__dict__") if v[0] == "lib" else v for v in self.value(node.args[0], scope)}
                continue
            if kind == "py" and ref in ("builtins.globals", "builtins.locals"):
                out.add(("globals",))
                continue
            if kind == "py" and ref in OPAQUE_CALLS:
                # a value the notebook's text does not show: whatever the call returns is opaque
                out.add(("dyn", OPAQUE_CALLS[ref]))
            if kind == "py" and (ref in ("builtins.eval", "builtins.exec", "builtins.compile") or
                                 "get_ipython" in ref and ref.rsplit(".", 1)[-1] in ("run_cell", "ex", "ev")):
                code = self.strings(node.args[0], scope) if node.args else None
                if code is None:
                    # what the code is made of (unmarshalled bytes...) names it; the namespace it
                    # runs in (exec(code, ns)) holds whatever it defines
                    made = {v for v in self.value(node.args[0], scope) if v[0] == "dyn"} if node.args else set()
                    made = made or {("dyn", "code run with exec/eval from a computed string")}
                    out |= made
                    into = node.args[1] if len(node.args) > 1 else None
                    # exec(code, ns), exec(code, vars(module)), exec(code, module.__dict__)
                    if isinstance(into, ast.Call) and isinstance(into.func, ast.Name) and into.func.id == "vars" \
                            and into.args:
                        into = into.args[0]
                    elif isinstance(into, ast.Attribute) and into.attr == "__dict__":
                        into = into.value
                    if isinstance(into, ast.Name):
                        scope.bind(into.id, (scope.lookup(into.id) or set()) | made)
                    continue
                target = node.args[1] if len(node.args) > 1 else None
                into = scope if target is None or self._is_globals(target, scope) else scope.child()
                if into is not scope and into.parent is None:
                    into = scope.root()
                for text in code:
                    out |= self.run_text(text, into, expression=ref.endswith(("eval", ".ev")))
                if into is not scope and isinstance(target, ast.Name):  # exec(code, ns): ns holds its names
                    held = set().union(*into.vars.values()) if into.vars else set()
                    scope.bind(target.id, (scope.lookup(target.id) or set()) | held)
                continue
            if kind == "py" and "get_ipython" in ref and ref.rsplit(".", 1)[-1] in ("run_line_magic", "magic"):
                parts = [self.strings(a, scope) for a in node.args]
                if parts and all(p is not None and len(p) == 1 for p in parts):
                    line = " ".join(next(iter(p)) for p in parts)
                    out |= self.run_text(_python("%" + line.lstrip("%"), self) or "", scope)
                else:
                    out.add(("dyn", "an IPython magic with a computed argument"))
                continue
            if kind == "globals-get":
                keys = self.strings(node.args[0], scope) if node.args else None
                out |= scope.global_values(keys) if keys is not None else \
                    {("dyn", "the notebook's globals() with a computed key")}
                continue
            if kind == "getattribute":
                names = self.strings(node.args[0], scope) if node.args else None
                out |= self.attr([ref], next(iter(names))) if names and len(names) == 1 else \
                    ({("dyn", f"a name of {ref[1]} computed at run time")} if ref[0] == "lib" else set())
                continue
            if kind == "lib":
                out.add(("lib", ref + "()"))
            elif kind == "py":
                out.add(("py", ref + "()"))
            elif kind == "def":
                out.add(f)
                out |= self.returns(ref, scope)
            elif kind in ("dyn", "mod"):
                out.add(f)
        for a in args:  # what goes into a call may come out of it (partial, staticmethod, copy, wraps...)
            out |= {v for v in self.value(a, scope) if v[0] in ("lib", "def", "dyn", "mod")}
        return out

    def returns(self, def_id: int, scope) -> set:
        """What a notebook function may return (its `return` values and a lambda's body)."""
        d = self.defs[def_id]
        key = (def_id, id(scope.root()))
        if key in self._returned:
            return self._returned[key]
        if def_id in self._returning:
            return set()
        self._returning.add(def_id)
        try:
            if isinstance(d.node, ast.Lambda):
                return self.value(d.node.body, self.function_scope(def_id, scope.root()))
            inner = self.function_scope(def_id, scope.root())
            out = set()
            for n in _walk_own(d.node):
                if isinstance(n, ast.Return) and n.value is not None:
                    out |= self.value(n.value, inner)
            # function objects it hands out; what it computes with the library is found in its body
            out = {v for v in out if v[0] in ("def", "dyn", "mod") or v[0] == "lib" and not v[1].endswith(")")}
            self._returned[key] = out
            return out
        finally:
            self._returning.discard(def_id)

    def _is_globals(self, node, scope) -> bool:
        return isinstance(node, ast.Call) and any(v[0] == "globals" for v in self.value(node, scope))

    def run_text(self, text: str, scope, expression: bool = False) -> set:
        try:
            tree = ast.parse(textwrap.dedent(text), mode="eval" if expression else "exec")
        except (SyntaxError, ValueError):
            try:
                tree = ast.parse(textwrap.dedent(text))
                expression = False
            except (SyntaxError, ValueError):
                return {("dyn", "code run with exec/eval that does not parse")}
        if expression:
            return self.value(tree.body, scope)
        for stmt in tree.body:
            self.stmt(stmt, scope)
        return set()

    # ------------------------------------------------------------------ statements
    def define(self, node, name: str, scope) -> int:
        if id(node) in self._by_node:
            return self._by_node[id(node)]
        self.defs.append(_Def(node, name, scope.module, tuple(getattr(node, "decorator_list", ()))))
        self._by_node[id(node)] = len(self.defs) - 1
        return len(self.defs) - 1

    def bind_target(self, target, vals: set, scope) -> None:
        if isinstance(target, ast.Name):
            scope.bind(target.id, vals)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                self.bind_target(e, vals, scope)
        elif isinstance(target, ast.Starred):
            self.bind_target(target.value, vals, scope)
        elif isinstance(target, ast.Subscript):
            base = self.value(target.value, scope)
            keys = self.strings(target.slice, scope)
            if any(v[0] == "globals" for v in base) and keys:
                for k in keys:
                    scope.bind_global(k, vals)
        elif isinstance(target, ast.Attribute):
            self.set_attribute(self.value(target.value, scope), target.attr, vals, scope)

    def set_attribute(self, base: set, name: str | None, vals: set, scope) -> None:
        """`f.__code__ = ...`, `setattr(f, ...)`: what a function is given comes with it;
        `builtins.name = ...` makes a name every cell sees."""
        keep = {v for v in vals if v[0] in ("lib", "def", "dyn", "mod")}
        for v in base:
            if v[0] == "def":
                self.defs[v[1]].attached |= keep
            elif v == ("py", "builtins") and name:
                scope.bind_global(name, vals)

    def stmt(self, node, scope) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    scope.bind(a.asname, self.module_value(a.name))
                else:
                    top = a.name.split(".")[0]
                    scope.bind(top, self.module_value(top))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            base = self.module_value(mod)
            for a in node.names:
                if a.name == "*":
                    if mod.split(".")[0] == "llmrl":
                        canon = self.lib.canonical(mod)
                        for n in self.lib.public_names(canon):
                            scope.bind(n, self.attr(base, n))
                    elif mod in self.modules:
                        for n, v in self.modules[mod].items():
                            if not n.startswith("_"):
                                scope.bind(n, set(v))
                    continue
                vals = self.attr(base, a.name)
                if mod.split(".")[0] == "llmrl" and self.lib.kind(self.lib.canonical(f"{mod}.{a.name}")) is None:
                    vals |= self.module_value(f"{mod}.{a.name}")  # a submodule
                scope.bind(a.asname or a.name, vals)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            i = self.define(node, node.name, scope)
            vals = {("def", i)}
            for dec in node.decorator_list:  # a decorator may replace the function by anything
                vals |= {v for v in self.call(ast.Call(func=dec, args=[], keywords=[]), scope)
                         if v[0] in ("lib", "dyn")}
            scope.bind(node.name, vals)
        elif isinstance(node, ast.Assign):
            vals = self.value(node.value, scope)
            for t in node.targets:
                self.bind_target(t, vals, scope)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.bind_target(node.target, self.value(node.value, scope), scope)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name):
                scope.bind(node.target.id, (scope.lookup(node.target.id) or set()) | self.value(node.value, scope))
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    scope.unbind(t.id)
        elif isinstance(node, ast.Expr):
            self.value(node.value, scope)
        elif isinstance(node, ast.If):
            self.branches(scope, [node.body, node.orelse])
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.bind_target(node.target, self.value(node.iter, scope), scope)
            self.branches(scope, [node.body + node.orelse, []])
        elif isinstance(node, ast.While):
            self.value(node.test, scope)
            self.branches(scope, [node.body + node.orelse, []])
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                vals = self.value(item.context_expr, scope)
                if item.optional_vars is not None:
                    self.bind_target(item.optional_vars, vals, scope)
            for s in node.body:
                self.stmt(s, scope)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self.branches(scope, [node.body + node.orelse] + [h.body for h in node.handlers] + [[]])
            for s in node.finalbody:
                self.stmt(s, scope)
        elif isinstance(node, ast.Match):
            self.value(node.subject, scope)
            self.branches(scope, [c.body for c in node.cases] + [[]])
        elif isinstance(node, ast.Return) and node.value is not None:
            self.value(node.value, scope)

    def branches(self, scope, bodies) -> None:
        before = scope.snapshot()
        results = []
        for body in bodies:
            scope.restore(before)
            for s in body:
                self.stmt(s, scope)
            results.append(scope.snapshot())
        scope.restore(_merge(results))

    # ------------------------------------------------------------------ functions
    def function_scope(self, def_id: int, root) -> "_Scope":
        """The names inside a notebook function: its parameters (defaults evaluated), and every
        name assigned anywhere in its body (flow-insensitive, nested functions included)."""
        key = (def_id, id(root))
        if key in self._scopes:
            return self._scopes[key]
        d = self.defs[def_id]
        genv = root if d.module is None else _Scope(self.modules.get(d.module, {}), d.module)
        scope = _Scope({}, d.module, parent=genv)
        self._scopes[key] = scope   # a recursive function sees its scope as it is being built
        node = d.node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            params = a.posonlyargs + a.args + a.kwonlyargs + ([a.vararg] if a.vararg else []) + \
                ([a.kwarg] if a.kwarg else [])
            defaults = list(a.defaults) + [x for x in a.kw_defaults if x is not None]
            for p in params:
                scope.vars[p.arg] = set()
            default_values = set().union(*(self.value(x, genv) for x in defaults)) if defaults else set()
            for p in params:  # any parameter may take any default (over-approximated)
                scope.vars[p.arg] = set(default_values)
        body = node.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []
        globals_declared = {n for s in ast.walk(node) if isinstance(s, ast.Global) for n in s.names}
        for _ in range(2):  # twice, so that a name assigned later in the body is seen by earlier uses
            for s in _flatten(body):
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and s is not node:
                    scope.vars.setdefault(s.name, set()).add(("def", self._nested_id(s, scope)))
                elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
                    self.value(s.value, scope)
                elif isinstance(s, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign,
                                    ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                    self._flow_insensitive(s, scope)
        for n in globals_declared:
            scope.vars[n] = scope.vars.get(n, set()) | (genv.lookup(n) or set())
        return scope

    def _nested_id(self, node, scope) -> int:
        return self.define(node, node.name, scope)

    def _flow_insensitive(self, s, scope) -> None:
        """Bind a statement's names, adding to (never replacing) what they already hold."""
        temp = _Scope({}, scope.module, parent=scope)
        if isinstance(s, (ast.For, ast.AsyncFor)):
            self.bind_target(s.target, self.value(s.iter, scope), temp)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                if item.optional_vars is not None:
                    self.bind_target(item.optional_vars, self.value(item.context_expr, scope), temp)
        else:
            self.stmt(s, temp)
        for k, v in temp.vars.items():
            scope.vars[k] = scope.vars.get(k, set()) | set(v)

    def reached(self, values: set, root, chain=(), seen=None, depth: int = 0):
        """(llmrl name or dyn marker, chain of notebook helpers) for everything `values` can reach."""
        seen = set() if seen is None else seen
        for v in values:
            if v[0] == "lib":
                yield v[1], chain
            elif v[0] == "dyn":
                yield ("dyn", v[1]), chain
            elif v[0] == "mod":
                for vals in self.modules.get(v[1], {}).values():
                    yield from self.reached(set(vals), root, chain + (f"module {v[1]}",), seen, depth + 1)
            elif v[0] == "def" and v[1] not in seen and depth < 50:
                seen.add(v[1])
                d = self.defs[v[1]]
                inner = self.function_scope(v[1], root)
                found = set()
                nodes = list(_walk_own(d.node, include_nested=True)) + list(d.decorators)
                for n in nodes:
                    if isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Lambda)):
                        found |= self.value(n, inner)
                    elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not d.node:
                        found.add(("def", self._nested_id(n, inner)))
                    elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Call):
                        pass
                for arg in d.decorators:
                    found |= self.value(arg, root)
                found |= d.attached
                label = chain + ((d.name if d.name != "<lambda>" else "a lambda"),)
                yield from self.reached(found, root, label, seen, depth + 1)


def _merge(envs: list[dict]) -> dict:
    out: dict = {}
    for env in envs:
        for k, v in env.items():
            out[k] = out.get(k, frozenset()) | v
    return out


def _flatten(body):
    """The statements of a body, with those inside if/for/while/try/with, without entering functions."""
    for s in body:
        yield s
        for field in ("body", "orelse", "finalbody"):
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                break
            sub = getattr(s, field, None)
            if isinstance(sub, list):
                yield from _flatten(sub)
        for h in getattr(s, "handlers", []) or []:
            yield from _flatten(h.body)
        for c in getattr(s, "cases", []) or []:
            yield from _flatten(c.body)


def _walk_own(node, include_nested: bool = False):
    """ast.walk over a function's own code (its body, defaults; nested functions only if asked)."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        yield n
        if not include_nested and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(n))


class _Scope:
    """Names -> frozenset of values; a function's scope has the notebook (or module) as parent."""

    def __init__(self, env: dict, module: str | None, parent: "_Scope | None" = None):
        self.vars = env
        self.module = module
        self.parent = parent

    def root(self) -> "_Scope":
        s = self
        while s.parent is not None:
            s = s.parent
        return s

    def lookup(self, name: str):
        s = self
        while s is not None:
            if name in s.vars:
                return s.vars[name]
            s = s.parent
        return None

    def bind(self, name: str, vals) -> None:
        self.vars[name] = frozenset(vals) if self.parent is None else set(vals)

    def bind_global(self, name: str, vals) -> None:
        self.root().bind(name, vals)

    def global_values(self, keys) -> set:
        root = self.root()
        return set().union(*(set(root.vars.get(k, ())) for k in keys)) if keys else set()

    def unbind(self, name: str) -> None:
        self.vars.pop(name, None)

    def child(self) -> "_Scope":
        return _Scope({}, self.module, parent=self)

    def snapshot(self) -> dict:
        return {k: frozenset(v) for k, v in self.vars.items()}

    def restore(self, env: dict) -> None:
        self.vars.clear()
        self.vars.update({k: (frozenset(v) if self.parent is None else set(v)) for k, v in env.items()})


# ------------------------------------------------------------------ reading a notebook

_LINE_MAGIC = re.compile(r"^(\s*)([%!?].*)$")
_ASSIGN_MAGIC = re.compile(r"^(\s*[A-Za-z_][\w.]*\s*=\s*)[%!].*$")
_RUN_MAGIC = re.compile(r"^\s*%run\s+(?:-\w+\s+)*([\w./-]+?)(?:\.py)?\s*$")


def _cells(notebook) -> list[tuple[str, dict, str]]:
    """(cell_type, nbgrader metadata, source) of every cell of a notebook given in any form."""
    if isinstance(notebook, (str, Path)) and Path(str(notebook)).suffix == ".ipynb" and Path(str(notebook)).exists():
        notebook = json.loads(Path(notebook).read_text(encoding="utf-8"))
    if isinstance(notebook, dict) and "cells" in notebook:
        out = []
        for c in notebook["cells"]:
            src = c.get("source", "")
            meta = (c.get("metadata") or {}).get("nbgrader") or {}
            meta = meta if isinstance(meta, dict) else {}  # a hostile submission's may be a str, its
            if not isinstance(meta.get("grade_id"), str):  # grade_id a list
                meta = {k: v for k, v in meta.items() if k != "grade_id"}
            out.append((c.get("cell_type", "code"), meta, "".join(src) if isinstance(src, list) else str(src)))
        return out
    if isinstance(notebook, dict):  # {grade_id: source} of solution cells
        return [("code", {"grade_id": gid, "solution": True}, src) for gid, src in notebook.items()]
    if isinstance(notebook, (list, tuple)):  # [(grade_id, source)] or [source]
        return [("code", {"grade_id": item[0], "solution": True} if isinstance(item, tuple) else {},
                 item[1] if isinstance(item, tuple) else item) for item in notebook]
    raise TypeError(f"notebook must be a notebook (dict, nbformat node or .ipynb path), a dict of "
                    f"grade_id -> source or a list of sources, got {type(notebook).__name__}")


def _python(source: str, analysis: _Analysis) -> str | None:
    """A cell's Python with IPython magics removed (None: not Python, e.g. %%bash); %%writefile
    cells become modules of the analysis, %run of such a module becomes an import of all its names."""
    lines = source.splitlines()
    if lines and lines[0].startswith("%%"):
        head = lines[0].split()
        if head[0] == "%%writefile" and len(head) >= 2:
            name = Path(head[-1]).name
            if name.endswith(".py"):
                analysis.module_sources[name[:-3]] = "\n".join(lines[1:])
            return None
        if head[0] in ("%%time", "%%timeit", "%%capture", "%%prun", "%%debug"):
            lines = lines[1:]
        else:
            return None
    out = []
    for line in lines:
        m = _RUN_MAGIC.match(line)
        if m:
            out.append(re.match(r"^\s*", line).group(0) + f"from {Path(m.group(1)).name} import *")
            continue
        m = _ASSIGN_MAGIC.match(line)
        if m:
            out.append(m.group(1) + "None")
            continue
        m = _LINE_MAGIC.match(line)
        out.append(m.group(1) + "pass" if m else line)
    return "\n".join(out)


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
    tasks = tasks_for(assignment, notebook_name)
    if notebook_name is None:
        present = {m.get("grade_id") for _, m, _ in cells}
        names = {t.notebook for t in tasks if t.grade_id in present or t.test_id in present}
        if len(names) == 1:
            tasks = [t for t in tasks if t.notebook in names]
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
    root = _Scope({}, None)
    snapshots: dict[str, dict] = {}
    notes: list[str] = []
    by_test = {}
    for t in tasks:
        by_test.setdefault(t.test_id, []).append(t)
    for meta, src in sources:
        gid = meta.get("grade_id")
        if gid in by_test and gid not in snapshots:
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
    final = root.snapshot()
    owners: dict[str, set] = {}   # library target -> graded functions whose task lists it
    for t in tasks:
        for l in t.library:
            owners.setdefault(l.target, set()).add(t.function)
    for t in tasks:
        env = _Scope(dict(snapshots.get(t.test_id, final)), None)
        fn_values = set(env.vars.get(t.function, ()))
        if not fn_values:
            continue
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
            direct = not chain
            if direct:
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
    return list(dict.fromkeys(notes))


# ============================================================================ the runtime check

# Runs in the student's kernel: the probe (after the notebook's cells) and, as the module
# _llmrl_watch, around every graded call (autograder/remote.py's serve). Defines nothing but
# _llmrl_answer_key_* names; it must not import the autograder (the sandbox hides it). The grader
# runs the same source to fingerprint the library and the notebook's own code with the same function.
_WATCH = r'''
def _llmrl_answer_key_norm(c, depth=0):
    import types
    if isinstance(c, types.CodeType):
        return ("code", _llmrl_answer_key_fingerprint(c, depth + 1) if depth < 30 else "deep")
    if c is None or isinstance(c, (str, bytes)):
        return "text"                    # docstrings (None when there is none) and messages: edited at will
    if isinstance(c, tuple):
        return ("tuple",) + tuple(_llmrl_answer_key_norm(x, depth + 1) for x in c)
    if isinstance(c, frozenset):         # a set's order depends on the process's hash seed
        return ("frozenset",) + tuple(sorted(repr(_llmrl_answer_key_norm(x, depth + 1)) for x in c))
    return repr(c)


def _llmrl_answer_key_fingerprint(code, depth=0):
    """What a code object does, however it is named and wherever it came from: its bytecode, the
    names it reads, its constants other than strings (nested code by its own fingerprint) and its
    signature; not its name, file, line numbers, local names, docstring or messages."""
    import hashlib
    head = repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_names,
                 tuple(_llmrl_answer_key_norm(c, depth) for c in code.co_consts)))
    return hashlib.sha256(head.encode() + b"\0" + code.co_code).hexdigest()[:32]


def _llmrl_answer_key_canary():
    return 1


class _llmrl_answer_key_Watch:
    """Sees every Python function one call runs (sys.settrace, threading.settrace for the threads it
    starts) and reports the course library's functions it ran, by where they live ("lib"); any code
    whose fingerprint is one of the library's complete versions of a graded task, wherever that code
    came from: a copied file, unpickling, marshal, a rebuilt code object ("copies"); and a trace or
    profile function that was set before it began or that replaced it during the call ("tracer")."""

    def __init__(self, spec):
        self.table = spec["fingerprints"]              # fingerprint -> library function
        self.lengths = set(spec["lengths"])            # their bytecode lengths (a cheap first test)
        self.pkg = tuple(spec["pkg"])
        self.cache = {}

    def start(self):
        import sys, threading
        self.lib, self.copies, self.tracer, self.canary = set(), set(), [], False
        self.old = (sys.gettrace(), sys.getprofile(), getattr(threading, "_trace_hook", None),
                    getattr(threading, "_profile_hook", None))
        names = ("sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile")
        pre = [n for n, f in zip(names, self.old) if f is not None]
        if pre:
            self.tracer.append("a trace or profile function was already set (" + ", ".join(pre) + ")")
        self.fn = self._trace
        threading.settrace(self.fn)
        sys.settrace(self.fn)
        _llmrl_answer_key_canary()
        if not self.canary:
            self.tracer.append("the watch saw no call (sys.settrace does not work in this kernel)")
        return self

    def stop(self):
        import sys, threading
        now = sys.gettrace()
        sys.settrace(self.old[0])
        threading.settrace(self.old[2])
        if now is not self.fn and self.canary:
            self.tracer.append("the trace function was replaced or removed during the call")
        return {"lib": sorted(self.lib)[:200], "copies": sorted(self.copies)[:50], "tracer": self.tracer}

    def _trace(self, frame, event, arg):
        if event != "call":
            return None
        code = frame.f_code
        hit = self.cache.get(id(code))
        if hit is None or hit[0] is not code:
            hit = (code, self._classify(code, frame))
            if len(self.cache) < 100000:
                self.cache[id(code)] = hit
        for kind, what in hit[1]:
            if kind == "canary":
                self.canary = True
            elif kind == "lib":
                self.lib.add(what)
            else:
                self.copies.add(what)
        return None

    def _classify(self, code, frame):
        out = []
        if code is _llmrl_answer_key_canary.__code__:
            return [("canary", None)]
        name = frame.f_globals.get("__name__", "?") if isinstance(frame.f_globals, dict) else "?"
        filename = code.co_filename if isinstance(code.co_filename, str) else "?"
        if filename.startswith(self.pkg):
            out.append(("lib", str(name)[:200] + "." + code.co_qualname))
        try:
            if len(code.co_code) in self.lengths:
                target = self.table.get(_llmrl_answer_key_fingerprint(code))
                if target:
                    out.append(("copy", (target, filename[-300:], str(name)[:200], code.co_qualname[:200])))
        except Exception:
            pass
        return out
'''

_PROBE = r'''
def _llmrl_answer_key_probe(keys=None):
    """Call each graded function (those of `keys`, default all) once on small inputs under the watch."""
    import builtins, inspect, itertools, json, math
    import numpy as np
    import torch
    from llmrl.losses import LossBatch
    from types import SimpleNamespace
    spec = _llmrl_answer_key_SPEC
    ns = globals()
    out = {"tracer": "ok", "functions": {}}

    def make_inputs(src):
        g = torch.Generator().manual_seed(0)
        def R(*shape):
            return torch.randn(*shape, generator=g)
        def I(high, *shape):
            return torch.randint(0, high, shape, generator=g)
        def M(*shape):
            m = torch.rand(*shape, generator=g) > 0.4
            if m.ndim:
                m[..., 0] = True
            return m
        def G():
            return torch.Generator().manual_seed(0)
        env = {"torch": torch, "np": np, "math": math, "LossBatch": LossBatch, "SimpleNamespace": SimpleNamespace,
               "R": R, "I": I, "M": M, "G": G}
        return eval(src, env)

    for key, fname, src in spec["specs"]:
        if keys is not None and key not in keys:
            continue
        fn = ns.get(fname, getattr(builtins, fname, None))
        entry = {"function": fname}
        out["functions"][key] = entry
        if not callable(fn):
            entry["error"] = "not defined"
            continue
        try:
            args, kwargs = make_inputs(src)
        except Exception as e:
            entry["error"] = "inputs: " + type(e).__name__
            continue
        watch = _llmrl_answer_key_Watch(spec).start()
        try:
            res = fn(*args, **kwargs)
            if inspect.isgenerator(res) or (hasattr(res, "__next__") and hasattr(res, "__iter__")):
                list(itertools.islice(res, 1000))
        except Exception as e:
            entry["error"] = type(e).__name__
        finally:
            seen = watch.stop()
        entry["reached"], entry["copies"] = seen["lib"], [list(c) for c in seen["copies"]]
        if seen["tracer"]:
            entry["tracer"] = seen["tracer"]
            out["tracer"] = "; ".join(seen["tracer"])[:500]
    return json.dumps(out)
'''


def _watch_namespace() -> dict:
    ns: dict = {}
    exec(compile(_WATCH, "<answer-key watch>", "exec"), ns)
    return ns


_FINGERPRINT = _watch_namespace()["_llmrl_answer_key_fingerprint"]


def fingerprint(code) -> str:
    """The fingerprint the watch gives a code object (the same function runs in the kernel)."""
    return _FINGERPRINT(code)


@lru_cache(maxsize=8)
def _library_codes(folder: str) -> dict[str, object]:
    """Every function of the library (module.qualname -> code object), compiled from its source as
    an import compiles it (so a copy, a pickled or marshalled one, has the same bytecode)."""
    import types

    out = {}
    base = Path(folder)
    for p in sorted(base.rglob("*.py")):
        rel = p.relative_to(base).with_suffix("")
        parts = ["llmrl", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        try:
            code = compile(p.read_text(encoding="utf-8"), str(p), "exec", dont_inherit=True)
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        todo = [c for c in code.co_consts if isinstance(c, types.CodeType)]
        while todo:
            c = todo.pop()
            out[".".join(parts) + "." + c.co_qualname] = c
            todo += [x for x in c.co_consts if isinstance(x, types.CodeType)]
    return out


def watch_spec(assignment: str, notebook: str, lib: Library | None = None) -> dict:
    """What the watch needs for one notebook: the fingerprints of the library's complete versions of
    its tasks (and of ANYWHERE), their bytecode lengths, and the library's folder."""
    lib = lib or library()
    codes = _library_codes(str(lib.folder))
    table = {}
    for t in tasks_for(assignment, notebook):
        for lean in t.library + ANYWHERE:
            code = codes.get(lean.target)
            if code is not None:
                table.setdefault(fingerprint(code), lean.target)
    return {"fingerprints": table, "lengths": sorted({len(codes[t].co_code) for t in table.values()}),
            "pkg": [str(lib.folder).rstrip("/") + "/"]}


def watch_module(assignment: str, notebook: str) -> str:
    """Source of the module _llmrl_watch the grader installs in the student's kernel: the watch and
    this notebook's spec; autograder/remote.py's serve() runs every graded call under it."""
    spec = watch_spec(assignment, notebook)
    return (_WATCH + f"\nSPEC = {spec!r}\n\n"
            "def start():\n    return _llmrl_answer_key_Watch(SPEC).start()\n")


def _large(target: str, lib: Library) -> bool:
    """A library function long enough (4 lines or more) that the same code typed into a notebook
    is a copy, not a coincidence (as the static check's `_copied_from` counts them)."""
    mod, _, name = target.rpartition(".")
    node = lib.modules.get(mod, {}).get("defs", {}).get(name)
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(_function_body_lines(node)) >= 4


def text_fingerprints(notebook) -> set[str]:
    """Fingerprints of every function the notebook's own text defines: its code cells (as IPython
    runs them), %%writefile cells and constant strings of code (exec). A copy of a library function
    whose fingerprint is not among them came from outside the notebook's text: a file written at
    run time, unpickling, marshal, a code object rebuilt or found through the garbage collector."""
    import types

    try:
        from IPython.core.inputtransformer2 import TransformerManager
        transform = TransformerManager().transform_cell
    except ImportError:  # pragma: no cover - IPython is in the grader's environment
        def transform(text):
            return text
    texts = []
    for kind, _, src in _cells(notebook):
        if kind != "code":
            continue
        lines = src.splitlines()
        if lines and lines[0].startswith("%%writefile"):
            texts.append("\n".join(lines[1:]))
            continue
        try:
            texts.append(transform(src))
        except Exception:  # noqa: BLE001 - a cell IPython cannot read runs as nothing
            continue
    out: set[str] = set()
    todo = list(texts)
    done = 0
    while todo and done < 2000:
        text = todo.pop()
        done += 1
        try:
            code = compile(text, "<cell>", "exec", dont_inherit=True)
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            continue
        stack = [code]
        while stack:
            c = stack.pop()
            for x in c.co_consts:
                if isinstance(x, types.CodeType):
                    out.add(fingerprint(x))
                    stack.append(x)
        # code held in a string (exec, compile): compiled the same way
        todo += [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and any(w in n.value for w in ("def ", "lambda", "class "))][:200]
    return out


def probe_keys(assignment: str, notebook: str) -> list[tuple[str, str]]:
    """(key, function) of each call the probe makes, in order (the grader runs them one by one)."""
    return [(f"{t.grade_id}:{t.function}", t.function) for t in tasks_for(assignment, notebook)]


def runtime_probe(assignment: str, notebook: str) -> tuple[str, str]:
    """(code, expression): run `code` silently in the student's kernel after the notebook's cells
    (it only defines _llmrl_answer_key_* names), then read `expression` (a JSON string) back, e.g.
    through user_expressions. `_llmrl_answer_key_probe([key])` probes one function of probe_keys()."""
    spec = dict(watch_spec(assignment, notebook),
                specs=[(f"{t.grade_id}:{t.function}", t.function, t.probe) for t in tasks_for(assignment, notebook)])
    code = _WATCH + _PROBE + f"\n_llmrl_answer_key_SPEC = {spec!r}\n"
    return code, "_llmrl_answer_key_probe()"


def _copy_note(t: Task, target: str, lean: Lean, where: list, text: set | None, lib: Library) -> str | None:
    """The note for code with a library function's fingerprint that a call ran, or None when it is
    the library's own (noted by name) or the notebook's own short code (a coincidence is possible)."""
    if not (isinstance(where, (list, tuple)) and len(where) == 4 and all(isinstance(x, str) for x in where)):
        return None
    _, filename, module, qualname = where
    pkg = str(lib.folder).rstrip("/") + "/"
    if filename.startswith(pkg) and module == target.rpartition(".")[0]:
        return None  # the library's own function, run under its own name: the name-based note says it
    fp = fingerprint(_library_codes(str(lib.folder))[target])
    if text is not None and fp in text:
        if not _large(target, lib):
            return None
        return (f"{t.grade_id}: {t.function} ran {qualname}, typed into the notebook line for line from {target} "
                f"(the same bytecode), which {lean.does}")
    if filename.startswith(pkg):
        origin = f"code of the library's file rebuilt under another module ({module})"
    elif filename.startswith("<") or "/" not in filename:
        origin = f"code rebuilt at run time (its file name says {filename!r}: a code object made, unpickled, " \
                 f"unmarshalled or found through the garbage collector)"
    else:
        inside = re.search(r"llmrl-kernel-[^/]*/work/(.+)$", filename)
        shown = f"{inside.group(1)} (in the kernel's own folder)" if inside else filename
        origin = f"code loaded from {shown}, a file written at run time (no such file is installed)"
    return (f"{t.grade_id}: {t.function} ran a copy of {target} (as {qualname}: the same bytecode, seen at run "
            f"time), which {lean.does}: {origin}")


def _entry_notes(t: Task, lib: Library, reached, copies, text, what: str) -> list[str]:
    """Notes for what one function's calls ran (the probe's or the tests'): the same note whoever
    called it, so that a lean both saw is said once. `what` is kept for the caller's logs."""
    notes = []
    targets = {l.target: l for l in t.library + ANYWHERE}
    seen = set()
    for name in reached if isinstance(reached, list) else []:
        if not isinstance(name, str):
            continue
        canon = lib.canonical(name.replace(".<locals>", ""))
        if canon in targets and canon not in seen:
            seen.add(canon)
            notes.append(f"{t.grade_id}: {t.function} ran {canon} (seen at run time), which {targets[canon].does}")
    for where in copies if isinstance(copies, list) else []:
        if isinstance(where, (list, tuple)) and where and where[0] in targets:
            note = _copy_note(t, where[0], targets[where[0]], list(where), text, lib)
            if note:
                notes.append(note)
    return notes


def _text(notebook, text):
    if text is not None or notebook is None:
        return text
    try:
        return text_fingerprints(notebook)
    except Exception:  # noqa: BLE001 - a reviewer's aid: never stops grading
        return None


def runtime_notes(assignment: str, notebook: str, answer, lib: Library | None = None, *,
                  submission=None, text: set | None = None) -> list[str]:
    """Review notes from the runtime probe's answer (the JSON string, or its text/plain repr).

    `submission` (the notebook, any form review_notes takes) or `text` (its text_fingerprints) tells
    copies of library code the notebook itself holds from those loaded at run time; without either,
    every copy is noted. The answer comes from the student's kernel: anything malformed is itself
    a note, never an error."""
    lib = lib or library()
    text = _text(submission, text)
    if isinstance(answer, str):
        raw = answer.strip()
        if raw[:1] in ("'", '"'):
            try:
                raw = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                pass
        try:
            answer = json.loads(raw)
        except (TypeError, ValueError):
            return [f"{notebook}: the answer-key runtime check gave no readable answer (the kernel may have "
                    "replaced it): review the graded functions by hand"]
    if not isinstance(answer, dict) or not isinstance(answer.get("functions"), dict):
        return [f"{notebook}: the answer-key runtime check gave no readable answer: review the graded functions"]
    notes = []
    tracer = answer.get("tracer")
    if tracer != "ok":
        if "already set" in str(tracer):
            notes.append(f"{notebook}: the answer-key probe found a trace or profile function already set in the "
                         f"student's kernel ({str(tracer)[:200]}): code that watches the grader's calls; review it")
        else:
            notes.append(f"{notebook}: the answer-key runtime check could not trace ({str(tracer)[:200]}); "
                         "the static check's notes stand alone: review the graded functions")
    for t in tasks_for(assignment, notebook):
        entry = answer["functions"].get(f"{t.grade_id}:{t.function}")
        if not isinstance(entry, dict):
            continue
        notes += _entry_notes(t, lib, entry.get("reached"), entry.get("copies"), text, "when probed")
    return list(dict.fromkeys(notes))


def watch_notes(assignment: str, notebook: str, watch: dict, probe: dict | None = None, *,
                submission=None, text: set | None = None, lib: Library | None = None) -> list[str]:
    """Reasons for review from the graded calls themselves (autograder/tworun.py collects `watch`:
    function -> {"calls", "answered", "died", "timeout", "lib", "copies", "tracer"}) and from how the
    probe's calls ended (`probe`: function -> "died" or "stalled").

    Held for review: a graded call that ran one of the library's complete versions of its task (by
    name, or by content: a copy); a trace or profile function set before a graded call, or one that
    replaced the watch during it; a graded call that killed the student's kernel (what it ran cannot
    be seen); a probe call that killed the kernel; a probe call that stalled while the same function
    answered the tests' calls (it behaves differently when probed). A function that stalls in the
    probe and in every graded call alike (an infinite loop) is not held: it earns nothing."""
    lib = lib or library()
    text = _text(submission, text)
    notes: list[str] = []
    by_function = {}
    for t in tasks_for(assignment, notebook):
        by_function.setdefault(t.function, []).append(t)
    watch = watch if isinstance(watch, dict) else {}
    tracers: dict[str, list] = {}
    for fname, w in sorted(watch.items()):
        if not isinstance(w, dict):
            continue
        for t in by_function.get(fname, []):
            notes += _entry_notes(t, lib, w.get("lib"), w.get("copies"), text, "in a graded call")
        label = by_function[fname][0].grade_id + ": " if fname in by_function else ""
        for why in (w.get("tracer") or [])[:3] if isinstance(w.get("tracer"), list) else []:
            tracers.setdefault(str(why)[:200], []).append(fname)
        if w.get("died"):
            notes.append(f"{label}{fname} killed the student's kernel in {w['died']} graded call(s): what it ran "
                         f"cannot be seen; the tests that did not call it kept their verdicts: review it")
    for why, fnames in tracers.items():   # one note per finding, naming the functions it was found in
        names = ", ".join(fnames[:8]) + (f" and {len(fnames) - 8} more" if len(fnames) > 8 else "")
        notes.append(f"{notebook}: graded calls of {names}: {why}; code that watches or hides from the grader: "
                     f"review it")
    for fname, how in sorted((probe or {}).items() if isinstance(probe, dict) else []):
        label = by_function[fname][0].grade_id + ": " if fname in by_function else ""
        answered = (watch.get(fname) or {}).get("answered", 0) if isinstance(watch.get(fname), dict) else 0
        if how == "died":
            notes.append(f"{label}{fname} killed the student's kernel when the answer-key probe called it: the "
                         f"probe could not see what it runs: review it")
        elif how == "stalled" and answered:
            notes.append(f"{label}{fname} did not return when the answer-key probe called it, yet answered "
                         f"{answered} of the tests' calls: it behaves differently when probed: review it")
    return list(dict.fromkeys(notes))


def all_notes(assignment: str, notebook, notebook_name: str, runtime_answer=None) -> list[str]:
    """Static notes, plus the runtime ones when the probe's answer is given (duplicates dropped)."""
    notes = review_notes(assignment, notebook, notebook_name)
    if runtime_answer is not None:
        notes += runtime_notes(assignment, notebook_name, runtime_answer)
    return list(dict.fromkeys(notes))


def main(argv=None) -> int:
    """python autograder/answer_key.py ASSIGNMENT NOTEBOOK.ipynb: print the static notes (or the map)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("assignment", nargs="?")
    p.add_argument("notebook", nargs="?", type=Path)
    args = p.parse_args(argv)
    if not args.assignment:
        print(what_the_library_can_do())
        return 0
    if args.notebook is None or not args.notebook.exists():
        print(f"error: give a notebook file, got {args.notebook}", file=sys.stderr)
        return 1
    notes = review_notes(args.assignment, args.notebook, args.notebook.stem)
    print("\n".join(notes) if notes else "no graded function leans on the library")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
