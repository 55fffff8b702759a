"""The answer-key check's task map: which graded tasks the course library can do (task_map.json).

The course library (`llmrl`) holds complete versions of some graded tasks because other labs'
experiments need them. task_map.json maps every graded function of every notebook to the library
functions that do the same task (or the part of it that is the task's point); the answer-key check
(static_notes, runtime_watch) gives a graded function that delegates to one of them a review note.

`load()` reads and validates the file; `problems()` says everything wrong with it (fields, types,
duplicates, and, given the library and the source notebooks, names that do not resolve); the tests
(autograder/tests/test_task_map.py) require no problem.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from autograder.course.layout import ROOT

MAP_FILE = Path(__file__).resolve().parent / "task_map.json"
TASK_FIELDS = ("assignment", "notebook", "grade_id", "test_id", "function", "library", "probe")
LEAN_FIELDS = ("target", "does")


class TaskMapError(ValueError):
    """task_map.json is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Lean:
    """A library function that does a graded task (or the part of it that is the task's point)."""

    target: str   # its qualified name where llmrl defines it (llmrl.lm.sampling.gather_logprobs, not an old path)
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


def _lean(raw, where: str) -> Lean:
    if not isinstance(raw, dict) or set(raw) != set(LEAN_FIELDS):
        raise TaskMapError(f"{where}: a library entry needs exactly the fields {', '.join(LEAN_FIELDS)}, got {raw!r}")
    for k in LEAN_FIELDS:
        if not isinstance(raw[k], str) or not raw[k].strip():
            raise TaskMapError(f"{where}: {k} must be a non-empty string, got {raw[k]!r}")
    if not raw["target"].startswith("llmrl.") or not all(p.isidentifier() for p in raw["target"].split(".")):
        raise TaskMapError(f"{where}: target {raw['target']!r} is not a dotted name in llmrl (llmrl.module.function)")
    return Lean(raw["target"], raw["does"])


def parse(data) -> tuple[tuple[Task, ...], tuple[Lean, ...]]:
    """(TASKS, ANYWHERE) from the file's JSON; TaskMapError naming what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list) or not isinstance(data.get("anywhere"), list):
        raise TaskMapError("task_map.json must be an object with the lists 'tasks' and 'anywhere'")
    anywhere = tuple(_lean(x, f"anywhere[{i}]") for i, x in enumerate(data["anywhere"]))
    tasks, seen = [], set()
    for i, raw in enumerate(data["tasks"]):
        where = f"tasks[{i}]" + (f" ({raw.get('grade_id')})" if isinstance(raw, dict) else "")
        if not isinstance(raw, dict) or set(raw) != set(TASK_FIELDS):
            missing = sorted(set(TASK_FIELDS) - set(raw)) if isinstance(raw, dict) else TASK_FIELDS
            extra = sorted(set(raw) - set(TASK_FIELDS)) if isinstance(raw, dict) else []
            raise TaskMapError(f"{where}: missing fields {missing}, unknown fields {extra}")
        for k in TASK_FIELDS:
            if k != "library" and (not isinstance(raw[k], str) or not raw[k].strip()):
                raise TaskMapError(f"{where}: {k} must be a non-empty string, got {raw[k]!r}")
        if not raw["function"].isidentifier():
            raise TaskMapError(f"{where}: function {raw['function']!r} is not a Python name")
        if not isinstance(raw["library"], list):
            raise TaskMapError(f"{where}: library must be a list")
        try:
            probe = ast.parse(raw["probe"], mode="eval").body
        except SyntaxError as e:
            raise TaskMapError(f"{where}: probe is not a Python expression ({e.msg})") from None
        if not (isinstance(probe, ast.Tuple) and len(probe.elts) == 2 and isinstance(probe.elts[0], ast.Tuple)
                and isinstance(probe.elts[1], ast.Dict)):
            raise TaskMapError(f"{where}: probe must read (args...), {{kwargs}}, got {raw['probe']!r}")
        key = (raw["assignment"], raw["notebook"], raw["grade_id"], raw["function"])
        if key in seen:
            raise TaskMapError(f"{where}: {'/'.join(key)} is in the map twice")
        seen.add(key)
        library = tuple(_lean(x, f"{where}.library[{j}]") for j, x in enumerate(raw["library"]))
        tasks.append(Task(raw["assignment"], raw["notebook"], raw["grade_id"], raw["test_id"], raw["function"],
                          library, raw["probe"]))
    return tuple(tasks), anywhere


def load(path: Path = MAP_FILE) -> tuple[tuple[Task, ...], tuple[Lean, ...]]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise TaskMapError(f"{path} cannot be read as JSON ({e})") from None
    return parse(data)


TASKS, ANYWHERE = load()
THIS = "does this task"


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


def _resolves(target: str) -> bool:
    """True when `target` (llmrl.module.function) names a function or class of the installed library."""
    import importlib

    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name, None)
            if obj is None:
                return False
        return callable(obj)
    return False


def _notebook_cells(root: Path, assignment: str, notebook: str) -> dict[str, str] | None:
    """grade_id -> cell source of a source notebook, None when there is no such notebook."""
    import nbformat

    path = root / "source" / assignment / f"{notebook}.ipynb"
    if not path.is_file():
        return None
    nb = nbformat.read(path, as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if isinstance(c.metadata.get("nbgrader"), dict) and "grade_id" in c.metadata["nbgrader"]}


def _not_home(target: str) -> str | None:
    """Where `target` is defined when it names it through another path (an old path such as
    llmrl.sampling, a re-export), else None: the runtime watch finds a function by the module that
    defines it, so a target must be written there."""
    from autograder.review.library_index import library

    home = library().canonical(target)
    return home if home != target else None


def problems(tasks=None, anywhere=None, root: Path = ROOT) -> list[str]:
    """Everything wrong with the map against the library and the source notebooks: a target that is no
    function of llmrl or is named by another path than where it is defined, a notebook, solution cell
    or test cell that does not exist, a graded function the solution cell does not define."""
    tasks = TASKS if tasks is None else tasks
    anywhere = ANYWHERE if anywhere is None else anywhere
    out = []

    def check(where: str, target: str) -> None:
        if not _resolves(target):
            out.append(f"{where}: {target} is no function of the library")
        elif (home := _not_home(target)) is not None:
            out.append(f"{where}: {target} is defined as {home}: name it there")

    for lean in anywhere:
        check("anywhere", lean.target)
    cells_of: dict = {}
    for t in tasks:
        key = (t.assignment, t.notebook)
        if key not in cells_of:
            cells_of[key] = _notebook_cells(root, *key)
        cells = cells_of[key]
        where = f"{t.assignment}/{t.notebook}:{t.grade_id}"
        for lean in t.library:
            check(where, lean.target)
        if cells is None:
            out.append(f"{where}: no source notebook source/{t.assignment}/{t.notebook}.ipynb")
            continue
        if t.grade_id not in cells:
            out.append(f"{where}: the notebook has no cell {t.grade_id}")
        elif f"def {t.function}(" not in cells[t.grade_id]:
            out.append(f"{where}: cell {t.grade_id} defines no function {t.function}")
        if t.test_id not in cells:
            out.append(f"{where}: the notebook has no test cell {t.test_id}")
    return out
