"""The library's import contract (docs/architecture.md, "The library"): layers import only downward, no cycle.

A module's layer is read from its path: a file directly in ``llmrl/`` is the core (``utils``); a
file in a subfolder belongs to that folder's layer. The order, lowest first::

    core (llmrl/utils.py) < tasks < lm < store < backends < rl < sft < experiments < labs | hw4 < tools

A module may import its own folder and any lower layer, never a higher one; labs and hw4 share a
rank and may not import each other (two assignments, each on the layers below). Every import
counts, those inside functions too (a lazy import is still a dependency: it is how the old cycle
hid). On top of the layers, the graph of all modules must have no cycle, inside a layer included.
Imports made from a string (``importlib.import_module``, the backends' entry names) are not edges:
that is how a lower layer names a plug-in above it without depending on it.

The other files directly in ``llmrl/`` are the old paths of modules that moved into the layers
(``llmrl/sampling.py`` is ``llmrl.lm.sampling`` for the notebooks; lib/tests/test_old_paths.py).
They hold no code: an import of one counts as an import of its home, so an old path cannot hide
an upward import, and only the files of OLD_PATH_USERS may still use them inside the library.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llmrl"
CORE = "core"
RANK = {CORE: 0, "tasks": 1, "lm": 2, "store": 3, "backends": 4, "rl": 5, "sft": 6, "experiments": 7,
        "labs": 8, "hw4": 8, "tools": 9}
# Library files that may still import a module by its old path: none (the old paths are for the
# notebooks); a file added here must say why.
OLD_PATH_USERS: set[str] = set()


def old_paths(package: Path) -> dict[str, str]:
    """{old module name: its home} for the alias files directly in ``package`` (the old core's paths):
    a file whose whole code is ``sys.modules[__name__] = importlib.import_module("<home>")``."""
    out = {}
    for f in sorted(package.glob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.Expr))]
        if len(body) == 1 and isinstance(body[0], ast.Assign) \
                and ast.unparse(body[0].targets[0]) == "sys.modules[__name__]" \
                and isinstance(body[0].value, ast.Call) and ast.unparse(body[0].value.func) == "importlib.import_module" \
                and len(body[0].value.args) == 1 and isinstance(body[0].value.args[0], ast.Constant):
            out[f"{package.name}.{f.stem}"] = body[0].value.args[0].value
    return out


def modules(package: Path) -> dict[str, Path]:
    """{dotted name: file} of every module under ``package`` (its folder's name is the top name)."""
    out = {}
    for f in sorted(package.rglob("*.py")):
        parts = [package.name, *f.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def layer_of(name: str) -> str:
    """``llmrl.x`` -> core; ``llmrl.<folder>.…`` -> that folder (KeyError-free: unknown folders are returned as is)."""
    parts = name.split(".")
    return CORE if len(parts) <= 2 and not _is_package(name) else parts[1]


_PACKAGES: set[str] = set()


def _is_package(name: str) -> bool:
    return name in _PACKAGES


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``name`` (at ``path``) imports, at any depth of its code."""
    is_pkg = path.name == "__init__.py"
    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in targets:
            while t and t not in known:  # import a.b.c of a name inside a module: its module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph(package: Path, resolve_old_paths: bool = True) -> dict[str, set[str]]:
    """{module: the modules it imports}, an old path's import counted as one of its home (the old
    paths themselves are not nodes); ``resolve_old_paths=False`` keeps the old names as they are written."""
    known = modules(package)
    _PACKAGES.update(n for n, f in known.items() if f.name == "__init__.py")
    old = old_paths(package)
    g = {n: imports(n, f, known) for n, f in known.items() if n not in old}
    if resolve_old_paths:
        g = {n: {old.get(d, d) for d in deps} - {n} for n, deps in g.items()}
    return g


def old_path_imports(package: Path) -> dict[str, set[str]]:
    """{module: the old paths it imports} for every module of the library that uses one."""
    old = old_paths(package)
    return {n: found for n, deps in graph(package, resolve_old_paths=False).items() if (found := deps & set(old))}


def violations(g: dict[str, set[str]]) -> list[str]:
    """Every import of a higher layer (or of the other assignment at the same rank), and every unknown layer."""
    out = []
    for mod, deps in sorted(g.items()):
        if mod.count(".") == 0:  # the package itself (llmrl/__init__.py): core
            here = CORE
        else:
            here = layer_of(mod)
        if here not in RANK:
            out.append(f"{mod}: folder {here!r} is not a layer of the contract ({', '.join(RANK)})")
            continue
        for dep in sorted(deps):
            there = CORE if dep.count(".") == 0 else layer_of(dep)
            if there not in RANK:
                continue  # reported as its own module
            if there != here and RANK[there] >= RANK[here]:
                out.append(f"{mod} ({here}) imports {dep} ({there}): a layer may import only lower layers")
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_module_imports_only_lower_layers():
    assert violations(graph(PACKAGE)) == []


def test_the_library_has_no_import_cycle():
    assert cycles(graph(PACKAGE)) == []


def test_only_the_listed_modules_use_an_old_path():
    # inside the library every import names a module's home; the old paths are for the notebooks
    users = old_path_imports(PACKAGE)
    assert set(users) <= OLD_PATH_USERS, {n: sorted(v) for n, v in users.items() if n not in OLD_PATH_USERS}
    assert OLD_PATH_USERS <= set(users), f"these use no old path any more: take them off OLD_PATH_USERS: " \
        f"{sorted(OLD_PATH_USERS - set(users))}"


def test_an_upward_import_through_an_old_path_is_caught(tmp_path):
    # the old paths sit directly in llmrl/ (the core's folder): one must not make an import look downward
    root = _plant(tmp_path, {"tasks/rewards.py": (PACKAGE / "tasks" / "rewards.py").read_text()
                             + "\n\ndef _lazy():\n    from .. import sampling\n    return sampling\n"})
    assert violations(graph(root)) == [
        "llmrl.tasks.rewards (tasks) imports llmrl.lm.sampling (lm): a layer may import only lower layers"]
    assert old_path_imports(root)["llmrl.tasks.rewards"] == {"llmrl.sampling"}


def test_every_folder_of_the_library_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(RANK), f"folders outside the contract: {sorted(folders - set(RANK))}"


def grader_imports(package: Path) -> list[str]:
    """``module: imported name`` for every import of the grader (``autograder``) in ``package``."""
    out = []
    for name, path in modules(package).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            out += [f"{name}: {n}" for n in names if n.split(".")[0] == "autograder"]
    return out


def test_the_library_never_imports_the_grader():
    # The grader imports the library (its answer key names library functions), never the reverse:
    # the student's wheel holds the library alone.
    assert grader_imports(PACKAGE) == []


def test_a_planted_import_of_the_grader_is_caught(tmp_path):
    pkg = _plant(tmp_path, {"tools/planted.py": "def f():\n    from autograder.course import layout\n"})
    assert grader_imports(pkg) == ["llmrl.tools.planted: autograder.course"]


def same_named_modules(package: Path) -> dict[str, list[str]]:
    """{file name: its modules} for every file name that more than one module of ``package`` has (an
    old path and its home are one module)."""
    by_name: dict[str, list[str]] = {}
    old = old_paths(package)
    for name, path in modules(package).items():
        if path.stem not in ("__init__", "__main__") and name not in old:
            by_name.setdefault(path.name, []).append(name)
    return {k: v for k, v in by_name.items() if len(v) > 1}


def test_no_two_modules_of_the_library_share_a_file_name():
    # Two trainer.py, backend.py and tasks.py once made a stack trace or an editor's tab ambiguous.
    assert same_named_modules(PACKAGE) == {}


def test_a_planted_second_module_of_the_same_name_is_caught(tmp_path):
    pkg = _plant(tmp_path, {"rl/train.py": "", "sft/train.py": ""})
    assert same_named_modules(pkg) == {"train.py": ["llmrl.rl.train", "llmrl.sft.train"]}


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A copy of the library under tmp_path with ``files`` (relative path -> source) added or replaced."""
    import shutil

    root = tmp_path / "llmrl"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__", "*.pt", "*.json"))
    for rel, text in files.items():
        (root / rel).write_text(text)
    return root


def test_a_planted_upward_import_is_caught(tmp_path):
    # the model's sampling importing the RL layer: the kind of edge that made the old 8-file cycle
    root = _plant(tmp_path, {"lm/sampling.py": (PACKAGE / "lm" / "sampling.py").read_text() + "\n\ndef _lazy():\n"
                             "    from ..rl.train import rl_train\n    return rl_train\n"})
    found = violations(graph(root))
    assert found == ["llmrl.lm.sampling (lm) imports llmrl.rl.train (rl): a layer may import only lower layers"]


def test_a_planted_import_of_the_model_by_the_core_is_caught(tmp_path):
    root = _plant(tmp_path, {"utils.py": (PACKAGE / "utils.py").read_text() + "\nfrom .lm import tinylm\n"})
    assert violations(graph(root)) == [
        "llmrl.utils (core) imports llmrl.lm.tinylm (lm): a layer may import only lower layers"]


def test_a_planted_import_between_the_assignments_is_caught(tmp_path):
    root = _plant(tmp_path, {"hw4/plots.py": (PACKAGE / "hw4" / "plots.py").read_text() + "\nimport llmrl.labs.lab19\n"})
    assert violations(graph(root)) == [
        "llmrl.hw4.plots (hw4) imports llmrl.labs.lab19 (labs): a layer may import only lower layers"]


def test_a_planted_cycle_inside_a_layer_is_caught(tmp_path):
    root = _plant(tmp_path, {"rl/advantages.py": (PACKAGE / "rl" / "advantages.py").read_text() + "\nfrom . import metrics\n",
                             "rl/metrics.py": (PACKAGE / "rl" / "metrics.py").read_text()
                             + "\nfrom .advantages import group_advantages\n"})
    assert violations(graph(root)) == []  # both rl: the layers allow it ...
    assert cycles(graph(root)) == [["llmrl.rl.advantages", "llmrl.rl.metrics"]]  # ... the cycle check does not


def test_a_folder_outside_the_contract_is_reported(tmp_path):
    root = _plant(tmp_path, {})
    (root / "misc").mkdir()
    (root / "misc" / "__init__.py").write_text("")
    assert any("'misc' is not a layer" in v for v in violations(graph(root)))


@pytest.mark.parametrize("name, layer", [("llmrl.utils", "core"), ("llmrl.lm.sampling", "lm"),
                                         ("llmrl.tasks.addition", "tasks"), ("llmrl.rl.step", "rl"),
                                         ("llmrl.experiments.runner", "experiments"),
                                         ("llmrl.hw4.trainer", "hw4"), ("llmrl.tools.reproduce", "tools")])
def test_a_modules_layer_is_read_from_its_path(name, layer):
    graph(PACKAGE)
    assert layer_of(name) == layer


def test_no_module_of_the_library_is_over_700_lines():
    # a file a newcomer can read in one sitting; tables (claims.json) are data files.
    long = {name: n for name, path in modules(PACKAGE).items() if (n := len(path.read_text().splitlines())) > 700}
    assert long == {}, f"split these along their seams (docs/architecture.md): {long}"


def test_no_function_of_the_library_is_over_80_lines():
    # a function read on one screen; a longer one is split where it reads better
    long = {f"{name}.{n.name}": n.end_lineno - n.lineno + 1 for name, path in modules(PACKAGE).items()
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno >= 80}
    assert long == {}
