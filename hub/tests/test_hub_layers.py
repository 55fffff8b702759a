"""The hub's modules import downward only, in one style, and each is loaded once (as the grader's are:
autograder/tests/test_package_layers.py). The hub's parts are started in several ways: `python -m
hub.deploy` from the repository, jupyterhub exec'ing hub/jupyterhub_config.py (with the repository on
PYTHONPATH), `python -m hub.confine` in the repository's folder (the spawner, run_as), the on-submit
service `python -m hub.on_submit`, and course_tool.py copied into the course folder and run there.
All of them import the hub's modules by their package path (`from hub import limits`), none puts a
folder on sys.path, so no file is imported twice under two names. Imports are read with `ast`,
function-level ones included. No hub and no root needed (make test)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hub import confine

HUB = Path(__file__).resolve().parents[1]
REPO = HUB.parent

# Lowest first. A part may import itself and the parts listed for it (and anything outside the hub).
ALLOWED = {
    "layout": set(),                  # the folders deploy makes and the others find: stdlib only
    "limits": set(),                  # cgroups, filesystems, rlimits: stdlib only
    "processes": set(),               # die with the parent: stdlib only
    "course_tool": set(),             # copied into the course folder and run there: no hub module
    "lti": set(),                     # the LMS login (jupyterhub's ltiauthenticator)
    "confine": {"layout", "limits"},
    "on_submit": {"course_tool", "layout", "processes"},
    "deploy": {"confine", "layout", "limits", "on_submit", "processes"},
    "spawner": {"confine", "layout", "limits"},
    "jupyterhub_config": {"lti", "spawner"},
    "capacity": {"deploy", "limits"},
}
# Inside a package, lowest first: a module imports only the ones before it; the package's __init__
# gathers them (what the rest of the hub and the tests use), so none of them imports the package itself
# (but __main__, the last, which shows its docstring).
ORDER = {
    "deploy": ["config", "files", "manifest", "student_limits", "accounts", "environment", "course", "configs",
               "running", "provision", "__main__"],
    "on_submit": ["settings", "queue", "pages", "delivery", "service", "__main__"],
}
MAX_LINES = 500  # a module a newcomer reads in one sitting (tests and data aside)


def _code_files():
    """(part, module inside the part or None, path) of every Python file of the hub but its tests."""
    for p in sorted(HUB.rglob("*.py")):
        rel = p.relative_to(HUB)
        if rel.parts[0] in ("tests", "node_modules") or rel.name == "__init__.py" and len(rel.parts) == 1:
            continue
        yield rel.parts[0].removesuffix(".py"), (p.stem if len(rel.parts) > 1 else None), p


def _all_files():
    return [p for p in sorted(HUB.rglob("*.py")) if "node_modules" not in p.parts]


def _imports(path: Path) -> list[ast.AST]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _names(node) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if node.level:
        return {"." * node.level + (node.module or "")}
    return {node.module} | {f"{node.module}.{a.name}" for a in node.names}


def test_every_part_of_the_hub_has_its_rule():
    parts = {part for part, _, _ in _code_files()}
    assert parts == set(ALLOWED), "a file or package of hub/ without a rule in ALLOWED (or a rule without one)"
    for pkg, order in ORDER.items():
        assert {p.stem for p in (HUB / pkg).glob("*.py")} - {"__init__"} == set(order), pkg


def test_each_part_imports_only_the_parts_below_it():
    wrong = []
    for part, module, path in _code_files():
        for node in _imports(path):
            for name in _names(node):
                bits = name.split(".")
                if bits[0] != "hub" or len(bits) < 2 or bits[1] not in ALLOWED:
                    continue
                other = bits[1]
                if other != part and other not in ALLOWED[part]:
                    wrong.append(f"{path.relative_to(REPO)} imports {name}")
                if other == part and module not in (None, "__init__") and part in ORDER:
                    order = ORDER[part]
                    inner = bits[2] if len(bits) > 2 else None
                    if inner is None and module == "__main__":
                        continue  # the command line takes its help from the package's docstring
                    if inner not in order or order.index(inner) >= order.index(module):
                        wrong.append(f"{path.relative_to(REPO)} imports {name}")
    assert wrong == []


def test_the_hub_imports_its_modules_by_their_package_path_only():
    """No `import limits` beside `from hub import limits` (the same file twice), no relative imports."""
    local = {p.stem for p in _all_files()} | {p.name for p in HUB.iterdir() if (p / "__init__.py").exists()}
    local -= {"__init__", "__main__"}
    wrong = []
    for path in _all_files():
        for node in _imports(path):
            for name in _names(node):
                if name.startswith(".") or name.split(".")[0] in local:
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert wrong == []


def _changes_sys_path(tree) -> list[int]:
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            target = ast.unparse(n.func.value)
            if target == "sys.path" or ast.unparse(n.func) == "site.addsitedir":
                lines.append(n.lineno)
        elif isinstance(n, (ast.Assign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if ast.unparse(t).startswith("sys.path"):
                    lines.append(n.lineno)
    return lines


def test_no_file_of_the_hub_puts_folders_on_sys_path():
    """(A string holding such code, the .pth the thin environment gets, is text, not the hub's.)"""
    found = {str(p.relative_to(REPO)): lines for p in _all_files()
             if (lines := _changes_sys_path(ast.parse(p.read_text())))}
    assert found == {}


def test_the_sys_path_check_sees_each_way_of_changing_it():
    tree = ast.parse("import sys, site\nsys.path.insert(0, 'x')\nsys.path[:0] = ['y']\nsys.path += ['z']\n"
                     "site.addsitedir('w')\nprint('sys.path.insert(0, 1)')\n")
    assert sorted(_changes_sys_path(tree)) == [2, 3, 4, 5]


def test_no_module_of_the_hub_is_over_500_lines():
    long = {str(p.relative_to(REPO)): n for _, _, p in _code_files()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these along their seams: {long}"


# Each entry point as it is started, with a hook that writes every loaded module's name and file at exit.
DUMP_HOOK = '''
import atexit, json, os, sys
def _dump():
    files = {}
    for name, module in list(sys.modules.items()):
        f = getattr(module, "__file__", None)
        if f:
            files.setdefault(os.path.realpath(f), []).append(name)
    with open(os.environ["HUB_LAYERS_DUMP"], "w") as out:
        json.dump(files, out)
atexit.register(_dump)
'''
ENTRY_POINTS = [
    ("hub.deploy", ["--help"], 0, "python -m hub.deploy"),       # make hub, make hub-remove
    ("hub.capacity", ["--help"], 0, "python -m hub.capacity"),
    ("hub.on_submit", ["--help"], 0, "python -m hub.on_submit"),  # the on-submit service
    ("hub.confine", [], 1, "python -m hub.confine SETTINGS USER"),  # without arguments: its usage
    ("hub.limits", [], 0, "cgroup"),                             # what this machine provides
]


@pytest.mark.parametrize("module,args,code,says", ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
def test_each_entry_point_loads_every_file_of_the_hub_once(tmp_path, module, args, code, says):
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(DUMP_HOOK)
    dump = tmp_path / "modules.json"
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "hook"), HUB_LAYERS_DUMP=str(dump))
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == code and says in proc.stdout + proc.stderr, proc.stderr[-2000:]
    files = {f: names for f, names in json.loads(dump.read_text()).items() if Path(f).is_relative_to(HUB)}
    entry = HUB / (module.split(".")[1] + ".py") if (HUB / (module.split(".")[1] + ".py")).exists() else \
        HUB / module.split(".")[1] / "__main__.py"
    assert files[str(entry)] == ["__main__"]
    twice = {f: names for f, names in files.items() if len(names) > 1}
    assert twice == {}, f"loaded under two names: {twice}"
    outside = {f: names for f, names in files.items() if names != ["__main__"] and not names[0].startswith("hub")}
    assert outside == {}, f"loaded outside the package: {outside}"


def test_confine_is_found_from_its_launch_dir_without_pythonpath():
    """The spawner and run_as start `python -m hub.confine` in confine.LAUNCH_DIR with the student's
    environment (no PYTHONPATH): the package is found there (without arguments it prints its usage)."""
    cmd = confine.command(sys.executable, "SETTINGS", "llmrl-nobody", ["true"])
    assert cmd == [sys.executable, "-m", "hub.confine", "SETTINGS", "llmrl-nobody", "--", "true"]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.run(cmd[:3], cwd=confine.LAUNCH_DIR, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "python -m hub.confine SETTINGS USER -- COMMAND" in proc.stderr, proc.stderr
    elsewhere = subprocess.run(cmd[:3], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert "No module named 'hub'" in elsewhere.stderr, "the check above would pass without the launch dir"
