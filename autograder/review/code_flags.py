"""Static review notes: code in a submission that a person should look at (it never changes a score).

Scoring does not depend on this file: since the tests run in a kernel of their own that never
executes student code (autograder/execution/tworun.py), replacing a library function, hooking IPython or
returning a subclass no longer changes a verdict. `scan_notebook` still lists, per cell, things a
reviewer may want to see (file access outside the notebook's folder, subprocesses, sys.modules,
builtins, patched library attributes); autograder/grading/one_notebook.py reports them as "review_notes".
"""

from __future__ import annotations

import ast


def is_test_cell(cell) -> bool:
    meta = cell.metadata.get("nbgrader") if isinstance(cell.metadata.get("nbgrader"), dict) else {}
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


# ---------------------------------------------------------------------- static review flags

SUSPICIOUS_CALLS = {"os.system", "os.popen", "subprocess.run", "subprocess.Popen", "subprocess.call",
                    "subprocess.check_output", "os.remove", "os.unlink", "shutil.rmtree", "os.chdir",
                    "socket.socket", "socket.create_connection", "ctypes.CDLL", "gc.get_objects",
                    "sys._getframe", "inspect.currentframe", "setattr", "delattr", "__import__", "eval", "exec",
                    "os.kill", "os.fork"}
SUSPICIOUS_NAMES = {"__builtins__", "builtins", "sys.modules", "ctypes", "_llmrl_remote", "_llmrl_wire"}
SUSPICIOUS_PATHS = ("source/", "gradebook", "submitted/", "autograded/", "feedback/", "/work", "..", ".git",
                    "notebooks/", "/root", "/home", "/tmp")
PATCHED_ROOTS = {"torch", "np", "numpy", "math", "F", "nn", "builtins", "sys", "llmrl"}


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def scan_source(source: str) -> list[str]:
    """Things in one cell of student code that a reviewer should see (never changes a score)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # IPython magics and broken code: the run shows what happens
    notes = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                name = _dotted(t)
                if isinstance(t, ast.Attribute) and name.split(".")[0] in PATCHED_ROOTS:
                    notes.append(f"assigns {name}")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in SUSPICIOUS_CALLS or name.endswith(".system"):
                notes.append(f"calls {name}()")
            if name == "open" or name.endswith((".read_text", ".read_bytes", ".write_text", ".write_bytes")):
                for arg in node.args[:1]:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and (
                            arg.value.startswith("/") or any(p in arg.value for p in SUSPICIOUS_PATHS)):
                        notes.append(f"opens {arg.value!r}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for n in names:
                if n.split(".")[0] in ("ctypes", "builtins", "gc", "subprocess", "socket", "urllib", "requests"):
                    notes.append(f"imports {n}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(p in node.value for p in ("gradebook.db", "/source/", "HIDDEN TESTS", "submitted/")):
                notes.append(f"mentions {node.value[:60]!r}")
        elif isinstance(node, (ast.Name, ast.Attribute)):
            if _dotted(node) in SUSPICIOUS_NAMES:
                notes.append(f"uses {_dotted(node)}")
    return sorted(set(notes))


def scan_notebook(nb) -> list[str]:
    """Review notes for the code cells a student may edit (test cells are restored anyway)."""
    notes = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or is_test_cell(cell):
            continue
        src = "\n".join(l for l in cell.source.splitlines() if not l.lstrip().startswith(("%", "!")))
        for note in scan_source(src):
            meta = cell.metadata.get("nbgrader")
            gid = meta.get("grade_id") if isinstance(meta, dict) else None
            notes.append(f"cell {i + 1}{' (' + gid + ')' if gid else ''}: {note}")
    return notes
