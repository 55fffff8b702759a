"""The answer-key check's static analysis: follows a notebook's code with `ast` (imports, aliases,
constant-folded strings, helpers, decorators, exec of constant code) to what it reaches.
"""

from __future__ import annotations
import ast
import builtins
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable
from autograder.review.library_index import Library
from autograder.review.scopes import _Scope, _flatten, _merge, _walk_own
from autograder.review.notebook_text import _python

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
    here = str(Path(__file__).resolve().parents[2])  # the folder holding the grader's package
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
        """What a call may give: the value of each thing it may call (a library or Python function's
        result, a notebook function's returns; _reaching_call for the calls that reach names their own
        way) and whatever went into it."""
        out = set()
        if isinstance(node.func, ast.Attribute) and node.func.attr == "replace" and \
                any((k.arg or "").startswith("co_") for k in node.keywords):
            out.add(("dyn", "a code object rebuilt (code.replace)"))
        for f in self.value(node.func, scope):
            reached = self._reaching_call(f, node, scope)
            if reached is not None:
                out |= reached
                continue
            kind, ref = f[0], (f[1] if len(f) > 1 else None)
            if kind == "py" and ref in OPAQUE_CALLS:
                # a value the notebook's text does not show: whatever the call returns is opaque
                out.add(("dyn", OPAQUE_CALLS[ref]))
            if kind in ("lib", "py"):
                out.add((kind, ref + "()"))
            elif kind == "def":
                out.add(f)
                out |= self.returns(ref, scope)
            elif kind in ("dyn", "mod"):
                out.add(f)
        for a in list(node.args) + [k.value for k in node.keywords]:
            # what goes into a call may come out of it (partial, staticmethod, copy, wraps...)
            out |= {v for v in self.value(a, scope) if v[0] in ("lib", "def", "dyn", "mod")}
        return out

    def _reaching_call(self, f: tuple, node: ast.Call, scope) -> set | None:
        """The values of a call of `f` that reaches a name by a string or runs code (getattr,
        attrgetter, import_module, setattr, vars, globals, exec/eval, IPython's run_cell and magics,
        a module's __getattribute__); None for an ordinary call."""
        kind, ref = f[0], (f[1] if len(f) > 1 else None)
        args = node.args
        if kind == "attrgetter":
            base = set().union(*(self.value(a, scope) for a in args)) if args else set()
            if ref is None:
                return {("dyn", f"a name of {v[1]} computed at run time") for v in base if v[0] == "lib"}
            out = set()
            for n in ref:
                cur = base
                for part in n.split("."):
                    cur = self.attr(cur, part)
                out |= cur
            return out
        if kind == "globals-get":
            keys = self.strings(args[0], scope) if args else None
            return scope.global_values(keys) if keys is not None else \
                {("dyn", "the notebook's globals() with a computed key")}
        if kind == "getattribute":
            names = self.strings(args[0], scope) if args else None
            if names and len(names) == 1:
                return self.attr([ref], next(iter(names)))
            return {("dyn", f"a name of {ref[1]} computed at run time")} if ref[0] == "lib" else set()
        if kind != "py":
            return None
        if ref == "builtins.getattr" and len(args) >= 2:
            return self._getattr(node, scope)
        if ref == "operator.attrgetter" and args:
            names = self.strings(args[0], scope)
            return {("attrgetter", tuple(sorted(names)) if names is not None else None)}
        if ref in ("importlib.import_module", "builtins.__import__"):
            names = self.strings(args[0], scope) if args else None
            if names is None:
                return {("dyn", "a module imported by a computed name")}
            return set().union(*(self.module_value(n) | self.module_value(n.split(".")[0]) for n in names))
        if ref == "builtins.setattr" and len(args) >= 3:
            for n in (self.strings(args[1], scope) or {None}):
                self.set_attribute(self.value(args[0], scope), n, self.value(args[2], scope), scope)
            return set()
        if ref == "builtins.vars" and args:
            return {("lib", v[1] + ".__dict__") if v[0] == "lib" else v for v in self.value(args[0], scope)}
        if ref in ("builtins.globals", "builtins.locals"):
            return {("globals",)}
        last = ref.rsplit(".", 1)[-1]
        if ref in ("builtins.eval", "builtins.exec", "builtins.compile") or \
                "get_ipython" in ref and last in ("run_cell", "ex", "ev"):
            return self._exec(node, scope, expression=ref.endswith(("eval", ".ev")))
        if "get_ipython" in ref and last in ("run_line_magic", "magic"):
            parts = [self.strings(a, scope) for a in args]
            if parts and all(p is not None and len(p) == 1 for p in parts):
                line = " ".join(next(iter(p)) for p in parts)
                return self.run_text(_python("%" + line.lstrip("%"), self) or "", scope)
            return {("dyn", "an IPython magic with a computed argument")}
        return None

    def _getattr(self, node: ast.Call, scope) -> set:
        """getattr(obj, name[, default])."""
        names = self.strings(node.args[1], scope)
        base = self.value(node.args[0], scope)
        out = set()
        if names is not None:
            for n in names:
                out |= self.attr(base, n)
        else:
            out |= {("dyn", f"a name of {v[1]} computed at run time") for v in base if v[0] == "lib"}
            out |= {v for v in base if v[0] in ("def", "dyn")}
        return out | set().union(*(self.value(a, scope) for a in node.args[2:]))

    def _exec(self, node: ast.Call, scope, expression: bool) -> set:
        """exec/eval/compile (or IPython's run_cell) of a string the text shows, followed into the
        code; of a computed one, named by what it is made of."""
        code = self.strings(node.args[0], scope) if node.args else None
        if code is None:
            # what the code is made of (unmarshalled bytes...) names it; the namespace it
            # runs in (exec(code, ns)) holds whatever it defines
            made = {v for v in self.value(node.args[0], scope) if v[0] == "dyn"} if node.args else set()
            made = made or {("dyn", "code run with exec/eval from a computed string")}
            into = node.args[1] if len(node.args) > 1 else None
            # exec(code, ns), exec(code, vars(module)), exec(code, module.__dict__)
            if isinstance(into, ast.Call) and isinstance(into.func, ast.Name) and into.func.id == "vars" \
                    and into.args:
                into = into.args[0]
            elif isinstance(into, ast.Attribute) and into.attr == "__dict__":
                into = into.value
            if isinstance(into, ast.Name):
                scope.bind(into.id, (scope.lookup(into.id) or set()) | made)
            return made
        target = node.args[1] if len(node.args) > 1 else None
        into = scope if target is None or self._is_globals(target, scope) else scope.child()
        if into is not scope and into.parent is None:
            into = scope.root()
        out = set()
        for text in code:
            out |= self.run_text(text, into, expression=expression)
        if into is not scope and isinstance(target, ast.Name):  # exec(code, ns): ns holds its names
            held = set().union(*into.vars.values()) if into.vars else set()
            scope.bind(target.id, (scope.lookup(target.id) or set()) | held)
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


