"""The grader's package imports downward only (docs/architecture.md, "The grader"): each folder of
autograder/ may import the folders ALLOWED names for it and nothing above it, so that no import cycle
can come back and a newcomer can tell from a module's folder what it may use. Imports are read with
`ast`, function-level ones included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

PACKAGE = Path(__file__).resolve().parents[1]

# Lowest first. A folder may import itself and the folders listed for it.
ALLOWED = {
    "sandbox": set(),                                   # bubblewrap, limits, safe file helpers: stdlib only
    "course": {"sandbox"},                              # the course folder, nbgrader's settings, the class list
    "execution": {"sandbox"},                           # the two runs, kernels, remote calls, the wire format
    "review": {"course", "sandbox"},                    # the answer-key check, code flags
    "collect": {"course", "sandbox"},                   # submissions in
    "export": {"collect", "course", "sandbox"},         # grades and feedback out
    "grading": {"course", "execution", "export", "review", "sandbox"},    # one notebook
    "batch": {"collect", "course", "export", "grading", "sandbox"},       # every student, the gradebook
    "authoring": {"batch", "course", "export", "sandbox"},                # build, release, samples, demo
    "formgrader": {"course", "sandbox"},
    "kit": {"course", "sandbox"},
    "corpus": {"batch", "course", "grading", "sandbox"},                  # the grading corpus and its tools
    "cli": {"authoring", "batch", "collect", "corpus", "course", "export", "formgrader", "grading", "kit", "review",
            "sandbox"},
}
# Loaded by path as text, never imported by the package's modules' usual route: the sandbox launcher
# runs as a script in the kernel's environment, remote_calls and wire_format are sent into the kernel.
STDLIB_ONLY = ["sandbox/bubblewrap.py", "execution/remote_calls.py", "execution/wire_format.py"]


def _imports(path: Path) -> set[str]:
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
    return out


def _modules():
    for p in sorted(PACKAGE.rglob("*.py")):
        rel = p.relative_to(PACKAGE)
        if rel.parts[0] in ("tests", "samples") or len(rel.parts) == 1:
            continue
        yield rel, p


def test_every_folder_of_the_package_has_its_rule():
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} - {"tests"}
    assert folders == set(ALLOWED), "a folder without a rule in ALLOWED (or a rule without its folder)"


def test_each_folder_imports_only_the_folders_below_it():
    wrong = []
    for rel, p in _modules():
        me = rel.parts[0]
        for m in _imports(p):
            parts = m.split(".")
            if parts[0] == "autograder" and len(parts) > 1 and parts[1] in ALLOWED and parts[1] != me \
                    and parts[1] not in ALLOWED[me]:
                wrong.append(f"autograder/{rel.as_posix()} imports {m}")
    assert wrong == []


def _changes_sys_path(tree) -> bool:
    for n in ast.walk(tree):
        target = n.func.value if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) else \
            n.targets[0].value if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Subscript) else None
        if ast.unparse(target) == "sys.path" if target is not None else False:
            return True
    return False


# A forked kernel must start as `python -m ipykernel_launcher` would, with the kernel's own folder as
# sys.path[0]: the zygote sets exactly that in the child it forks, and puts none of the grader's folders there.
SETS_A_KERNELS_OWN_PATH = {"autograder/sandbox/zygote.py"}


def test_no_module_puts_folders_on_sys_path():
    """(Code inside the corpus's submissions is text, not the grader's: only real calls count.)"""
    found = [f"autograder/{rel.as_posix()}" for rel, p in _modules() if _changes_sys_path(ast.parse(p.read_text()))]
    assert sorted(set(found) - SETS_A_KERNELS_OWN_PATH) == []


@pytest.mark.parametrize("rel", STDLIB_ONLY)
def test_the_files_run_outside_the_package_import_none_of_it_at_their_top(rel):
    tree = ast.parse((PACKAGE / rel).read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [ast.unparse(n) for n in top if "autograder" in ast.unparse(n)]


def test_the_layer_rules_have_no_cycle():
    seen, order = set(), []

    def visit(f, path):
        assert f not in path, f"cycle in ALLOWED: {' -> '.join(path + [f])}"
        if f in seen:
            return
        for g in ALLOWED[f]:
            visit(g, path + [f])
        seen.add(f)
        order.append(f)

    for f in ALLOWED:
        visit(f, [])
    assert len(order) == len(ALLOWED)


MAX_LINES = 700  # a file a newcomer can read in one sitting; data (the task map) lives in .json


def test_no_module_of_the_package_is_over_700_lines():
    long = {str(rel): n for rel, p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these along their seams (docs/architecture.md): {long}"


MAX_FUNCTION = 80  # a function read on one screen; a longer one is split where it reads better


def long_functions(paths) -> dict[str, int]:
    """{file:function: lines} of every function over MAX_FUNCTION lines in `paths`."""
    out = {}
    for p in paths:
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno >= MAX_FUNCTION:
                out[f"{p.name}:{n.name}"] = n.end_lineno - n.lineno + 1
    return out


def test_no_function_of_the_grader_is_over_80_lines():
    # the whole package with its top-level modules (bench_grading.py), tests and samples aside
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in ("tests", "samples")]
    assert long_functions(paths) == {}


def test_a_long_function_is_caught(tmp_path):
    f = tmp_path / "long.py"
    f.write_text("def short():\n    pass\n\n\ndef long():\n" + "    x = 1\n" * MAX_FUNCTION)
    assert long_functions([f]) == {"long.py:long": MAX_FUNCTION + 1}
