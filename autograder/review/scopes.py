"""Scopes and environments of the static analysis (names bound per function, class and module).
"""

from __future__ import annotations
import ast

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


