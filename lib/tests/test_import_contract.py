"""The library's import contract (docs/architecture.md, "The library"): layers import only downward, no cycle.

A module's layer is read from its path: a file directly in ``llmrl/`` is the core; a file in a
subfolder belongs to that folder's layer. The order, lowest first::

    core (llmrl/*.py) < store < backends < rl < sft < labs | hw4 < tools

A module may import its own folder and any lower layer, never a higher one; labs and hw4 share a
rank and may not import each other (two assignments, each on the layers below). Every import
counts, those inside functions too (a lazy import is still a dependency: it is how the old cycle
hid). On top of the layers, the graph of all modules must have no cycle, inside a layer included.
Imports made from a string (``importlib.import_module``, the backends' entry names) are not edges:
that is how a lower layer names a plug-in above it without depending on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llmrl"
CORE = "core"
RANK = {CORE: 0, "store": 1, "backends": 2, "rl": 3, "sft": 4, "labs": 5, "hw4": 5, "tools": 6}


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


def graph(package: Path) -> dict[str, set[str]]:
    known = modules(package)
    _PACKAGES.update(n for n, f in known.items() if f.name == "__init__.py")
    return {n: imports(n, f, known) for n, f in known.items()}


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
    """{file name: its modules} for every file name that more than one module of ``package`` has."""
    by_name: dict[str, list[str]] = {}
    for name, path in modules(package).items():
        if path.stem not in ("__init__", "__main__"):
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
    # the core's sampling importing the RL layer: the kind of edge that made the old 8-file cycle
    root = _plant(tmp_path, {"sampling.py": (PACKAGE / "sampling.py").read_text() + "\n\ndef _lazy():\n"
                             "    from .rl.train import rl_train\n    return rl_train\n"})
    found = violations(graph(root))
    assert found == ["llmrl.sampling (core) imports llmrl.rl.train (rl): a layer may import only lower layers"]


def test_a_planted_import_between_the_assignments_is_caught(tmp_path):
    root = _plant(tmp_path, {"hw4/plots.py": (PACKAGE / "hw4" / "plots.py").read_text() + "\nimport llmrl.labs.lab19\n"})
    assert violations(graph(root)) == [
        "llmrl.hw4.plots (hw4) imports llmrl.labs.lab19 (labs): a layer may import only lower layers"]


def test_a_planted_cycle_inside_a_layer_is_caught(tmp_path):
    root = _plant(tmp_path, {"advantages.py": (PACKAGE / "advantages.py").read_text() + "\nfrom . import metrics\n",
                             "metrics.py": (PACKAGE / "metrics.py").read_text() + "\nfrom .advantages import group_advantages\n"})
    assert violations(graph(root)) == []  # both core: the layers allow it ...
    assert cycles(graph(root)) == [["llmrl.advantages", "llmrl.metrics"]]  # ... the cycle check does not


def test_a_folder_outside_the_contract_is_reported(tmp_path):
    root = _plant(tmp_path, {})
    (root / "misc").mkdir()
    (root / "misc" / "__init__.py").write_text("")
    assert any("'misc' is not a layer" in v for v in violations(graph(root)))


@pytest.mark.parametrize("name, layer", [("llmrl.sampling", "core"), ("llmrl.rl.step", "rl"),
                                         ("llmrl.hw4.trainer", "hw4"), ("llmrl.tools.reproduce", "tools")])
def test_a_modules_layer_is_read_from_its_path(name, layer):
    graph(PACKAGE)
    assert layer_of(name) == layer


def test_no_module_of_the_library_is_over_700_lines():
    # issue 32: a file a newcomer can read in one sitting; tables (claims.json) are data files.
    long = {name: n for name, path in modules(PACKAGE).items() if (n := len(path.read_text().splitlines())) > 700}
    assert long == {}, f"split these along their seams (docs/architecture.md): {long}"
