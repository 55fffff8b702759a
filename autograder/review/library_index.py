"""The course library's index for the answer-key check: its functions, where they live, their
call graph and bodies (what a graded function may lean on).
"""

from __future__ import annotations
import ast
import importlib.util
import re
from functools import lru_cache
from pathlib import Path
from autograder.course.layout import ROOT
from autograder.sandbox.library_view import alias_target, follow_aliases

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
    """The llmrl package read with ast: modules, their definitions, imports and call graph.

    An old path the library keeps for the notebooks (`llmrl/sampling.py`, whose only code makes
    `llmrl.sampling` the module `llmrl.lm.sampling`) is an alias: every name through it is its
    home's (`canonical("llmrl.sampling.gather_logprobs") == "llmrl.lm.sampling.gather_logprobs"`),
    so a student's import by either path is seen as the same function."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.modules: dict[str, dict] = {}      # module -> {"defs": {name: node}, "imports": {name: target},
        #                                                    "containers": {name: [ast exprs]}, "package": bool}
        direct: dict[str, str] = {}             # old path -> the module it names
        for p in sorted(self.folder.rglob("*.py")):
            rel = p.relative_to(self.folder).with_suffix("")
            parts = ["llmrl", *rel.parts]
            package = parts[-1] == "__init__"
            if package:
                parts = parts[:-1]
            name = ".".join(parts)
            try:
                text = p.read_text(encoding="utf-8")
                tree = ast.parse(text)
            except (SyntaxError, UnicodeDecodeError):
                continue
            self.modules[name] = self._read(name, tree, package)
            target = alias_target(name, package, text)
            if target is not None and target != name:
                direct[name] = target
        self.aliases = follow_aliases(direct)   # old path -> the module it is (its home)
        self._reach: dict[str, frozenset] = {}

    def home(self, module: str) -> str:
        """The module an old path is (followed through aliases of aliases); any other module itself."""
        return self.aliases.get(module, module)

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
        """Where a dotted name inside llmrl really lives (`llmrl.rl.evaluation.full_vocab_kl` ->
        `llmrl.rl.losses.full_vocab_kl`, an old path's `llmrl.sampling.gather_logprobs` ->
        `llmrl.lm.sampling.gather_logprobs`); names the index does not know are returned as they are."""
        parts = path.split(".")
        if parts[0] != "llmrl" or _depth > 20:
            return path
        mod = "llmrl"
        i = 1
        while i < len(parts) and f"{mod}.{parts[i]}" in self.modules and parts[i] not in self.modules[mod]["defs"]:
            mod = self.home(f"{mod}.{parts[i]}")
            i += 1
        if mod not in self.modules:
            return path
        if i == len(parts):
            return mod
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
        and for a package its submodules (bound once imported anywhere, as the notebooks do); an old
        path binds its home's."""
        module = self.home(module)
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


