"""The course library as the answer kernel sees it: every module of `llmrl`, with its declarations only.

The answer kernel is the sandboxed kernel in which the grader calls a student's graded functions
(autograder/execution/tworun.py). Nothing in it may compute a graded answer, or a student's function
could hand its work to the course's own code in ways no watch inside that process can see (a thread
started before the watch, tracing switched off around the call, a subprocess, the library imported
again from another path or unpacked from its wheel). So the sandbox shows that kernel, at the path
the library is imported from, a *view* of it built here from the library's source:

- every module and package of `llmrl` exists, under its own name, so the notebooks' set-up cells
  (`from llmrl.labs import lab11`, `from llmrl.losses import LossBatch`) import as they do anywhere;
- a module keeps its literal constants (numbers, strings and containers of them: a notebook's
  EXPECTED table, a task's PROMPT_LEN) and the few declarations in library_view.json, each with the
  reason it is there: the classes a test passes to a student's function (lab19's `LossBatch`), the
  grading-mode switch the set-up cells call. None of them computes anything a task asks for;
- every other name the real module defines (its functions, classes, models, the trainer) is an
  *absent name*: importing it works, and any use of it (a call, an attribute, indexing, iteration,
  truth) raises `ImportError` naming it: "llmrl.sampling.gather_logprobs is not available while
  your functions are graded ...". No code of the library's functions is in the view, as source,
  bytecode or data; nor its docstrings;
- an old path the library keeps for the notebooks (`llmrl/sampling.py`, a file whose only code is
  `sys.modules[__name__] = importlib.import_module("llmrl.lm.sampling")`) stays that alias in the
  view, to the view of its home: `from llmrl.sampling import gather_logprobs` and
  `from llmrl.lm.sampling import gather_logprobs` reach the same absent name, and the allow-list
  names a declaration by its home (`alias_target` reads such files; the answer key's index uses it too);
- no data file (models, stored runs) is copied: the view is Python only.

`build()` writes the view once per version of the library, the allow-list and this file, into a
cache folder (`LLMRL_GRADER_CACHE`, default ~/.cache/llmrl-grader), atomically; it returns the
folder that holds the `llmrl` package of the view. autograder/sandbox/bubblewrap.py binds that package
over the real one (LLMRL_SANDBOX_LIBRARY) and hides the rest of the source folder it sits in.

Stdlib only: the sandbox layer imports nothing else of the grader.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALLOW_FILE = HERE / "library_view.json"
PACKAGE = "llmrl"
MARKER = "_grading_view"  # a module of the view only: llmrl._grading_view (tests and the probe look for it)

# The module every generated module imports its absent names from. Its message is the first line a
# student reads in the feedback when a graded function called into the course library.
_ABSENT_SOURCE = '''"""Absent names of the course library in the grader's answer kernel (autograder/sandbox/library_view.py)."""

import importlib

MESSAGE = ("{name} is not available while your functions are graded: they run with torch, numpy and Python's "
           "standard library only, without the course library's code. Write this step in your function.")
VIEW = True


class LibraryNotAvailable(ImportError):
    """A graded function used a part of the course library that the answer kernel does not hold."""


class Absent:
    """Stands for one name of the course library: importing it works, using it raises."""

    __slots__ = ("_llmrl_absent_name",)

    def __init__(self, name):
        object.__setattr__(self, "_llmrl_absent_name", name)

    def _fail(self, *args, **kwargs):
        raise LibraryNotAvailable(MESSAGE.format(name=object.__getattribute__(self, "_llmrl_absent_name")))

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)   # what pickle, copy and inspect look for: plainly missing
        self._fail()

    def __setattr__(self, attr, value):
        self._fail()

    def __repr__(self):
        return f"<{object.__getattribute__(self, '_llmrl_absent_name')}: not available while your functions are graded>"

    def __mro_entries__(self, bases):
        self._fail()

    def __reduce__(self):  # pickled (to a subprocess, say), it is the same placeholder again
        return (Absent, (object.__getattribute__(self, "_llmrl_absent_name"),))

    __call__ = __getitem__ = __setitem__ = __iter__ = __len__ = __bool__ = __contains__ = _fail
    __enter__ = __exit__ = __index__ = __int__ = __float__ = __await__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _fail
    __matmul__ = __rmatmul__ = __pow__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _fail


def module_getattr(module, absent, submodules):
    """The __getattr__ of a generated module: a submodule is imported, an absent name is an Absent."""
    made = {}

    def __getattr__(attr):
        if attr in submodules:
            return importlib.import_module(module + "." + attr)
        if attr in absent:
            if attr not in made:
                made[attr] = Absent(module + "." + attr)
            return made[attr]
        raise AttributeError(f"module {module!r} has no attribute {attr!r}")

    return __getattr__
'''


class ViewError(Exception):
    """The view cannot be built (one line, names the cause)."""


def library_source() -> Path:
    """The folder of the real `llmrl` package (found as the grader imports it, without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ViewError("the course library llmrl is not installed in the grader's environment")
    locations = [Path(p) for p in spec.submodule_search_locations]
    if len(locations) != 1 or not locations[0].is_dir():
        raise ViewError(f"llmrl is imported from {', '.join(map(str, locations))}: the answer kernel needs it as "
                        f"one folder (install the library with pip, not as a zip or a namespace package)")
    return locations[0].resolve()


def allow_list(path: Path = ALLOW_FILE) -> dict[str, dict[str, str]]:
    """{module: {name: reason}}: the declarations the view keeps besides literal constants."""
    data = json.loads(path.read_text())
    out = {k: v for k, v in data.items() if not k.startswith("_")}
    for module, names in out.items():
        if not module.startswith(PACKAGE) or not isinstance(names, dict):
            raise ViewError(f"{path.name}: {module!r} must be a module of llmrl mapping names to reasons")
        for name, reason in names.items():
            if not isinstance(reason, str) or len(reason.split()) < 4:
                raise ViewError(f"{path.name}: {module}.{name} needs a reason (a sentence)")
    return out


def _modules(src: Path) -> dict[str, Path]:
    """{dotted module name: its .py file} of the package in `src` (packages as their __init__)."""
    out = {}
    for p in sorted(src.rglob("*.py")):
        rel = p.relative_to(src)
        if "__pycache__" in rel.parts:
            continue
        parts = (PACKAGE, *rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def alias_target(module: str, is_package: bool, source: str) -> str | None:
    """The module an alias file makes its own name (`sys.modules[__name__] = <that module>`), else None.

    The module is named by a string (`importlib.import_module("llmrl.lm.sampling")`, the old paths
    of the library's root) or by a name the file imports (`from . import run_manager`, hw4's
    trainer.py); the file holds nothing else but imports and its docstring."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    imap = _import_map(module, is_package, tree)
    body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Assign) or len(body[0].targets) != 1 \
            or ast.unparse(body[0].targets[0]) != "sys.modules[__name__]":
        return None
    value = body[0].value
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "importlib.import_module" \
            and len(value.args) == 1 and not value.keywords and isinstance(value.args[0], ast.Constant) \
            and isinstance(value.args[0].value, str) and value.args[0].value.split(".")[0] == PACKAGE:
        return value.args[0].value
    if isinstance(value, ast.Name) and value.id in imap:
        ref = imap[value.id]
        return ref[1] if ref[0] == "module" else f"{ref[1]}.{ref[2]}"
    return None


def aliases(modules: dict[str, Path]) -> dict[str, str]:
    """{alias module: its home} among `modules` ({name: file}), an alias of an alias followed to the end."""
    direct = {}
    for mod, path in modules.items():
        target = alias_target(mod, path.name == "__init__.py", path.read_text(encoding="utf-8"))
        if target is not None and target in modules and target != mod:
            direct[mod] = target
    return follow_aliases(direct)


def follow_aliases(direct: dict[str, str]) -> dict[str, str]:
    """{alias: its home} from {alias: the module it names}: an alias of an alias followed to the end
    (a loop stops where it would repeat)."""
    out = {}
    for mod, target in direct.items():
        seen = {mod}
        while target in direct and target not in seen:
            seen.add(target)
            target = direct[target]
        out[mod] = target
    return out


def _alias_source(name: str, home: str) -> str:
    return (f'"""{name}, as the grader\'s answer kernel sees it: the old path of {home} '
            f'(autograder/sandbox/library_view.py)."""\n'
            f"import importlib\nimport sys\n\nsys.modules[__name__] = importlib.import_module({home!r})\n")


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of a relative import's module."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def _import_map(module: str, is_package: bool, tree: ast.Module) -> dict[str, tuple]:
    """{name a module's top-level imports bind: ("module", M) or ("name", M, attr)}, for llmrl's own modules."""
    out: dict[str, tuple] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.name.split(".")[0] == PACKAGE:
                    out[a.asname or a.name.split(".")[0]] = ("module", a.name if a.asname else PACKAGE)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
            src = _resolve(module, is_package, stmt.level, stmt.module) if stmt.level else (stmt.module or "")
            if src.split(".")[0] != PACKAGE:
                continue
            for a in stmt.names:
                if a.name != "*":
                    out[a.asname or a.name] = ("name", src, a.name)
    return out


def _is_constant(node: ast.AST, local: set[str], imports: dict[str, tuple], constants: dict[str, set[str]],
                 modules: set[str]) -> bool:
    """A literal, or an expression of literals and of other modules' constants (EXPECTED = {"x":
    toylm.WORKED_PI_STAR}): nothing is called, nothing is computed but what is written."""
    if _is_literal(node):
        return True

    def const(n: ast.AST) -> bool:
        if isinstance(n, ast.Constant):
            return True
        if isinstance(n, ast.Name):
            if n.id in local:
                return True
            ref = imports.get(n.id)
            if ref and ref[0] == "name":
                return ref[2] in constants.get(ref[1], set())
            return False
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            ref = imports.get(n.value.id)
            target = ref[1] if ref and ref[0] == "module" else \
                f"{ref[1]}.{ref[2]}" if ref and f"{ref[1]}.{ref[2]}" in modules else None
            return target is not None and n.attr in constants.get(target, set())
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return all(const(e) for e in n.elts)
        if isinstance(n, ast.Dict):
            return all(k is not None and const(k) for k in n.keys) and all(const(v) for v in n.values)
        if isinstance(n, ast.UnaryOp):
            return const(n.operand)
        if isinstance(n, ast.BinOp):
            return const(n.left) and const(n.right)
        return False

    return const(node)


def _bound(stmt: ast.stmt) -> list[str]:
    """Top-level names a statement binds (its targets, the names it defines or imports)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"]
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    out: list[str] = []
    for t in targets:
        for n in ast.walk(t) if t is not None else []:
            if isinstance(n, ast.Name):
                out.append(n.id)
    for n in ast.walk(stmt):
        if isinstance(n, ast.NamedExpr):
            out.append(n.target.id)
    if isinstance(stmt, (ast.If, ast.Try, ast.For, ast.While, ast.With)):
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                out += _bound(child)
    return out


def _strip_docstrings(node: ast.AST) -> None:
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                n.body = n.body[1:] or [ast.Pass()]


def view_module(name: str, source: str, keep: dict[str, str], submodules: set[str], is_package: bool = False,
                constants: dict[str, set[str]] | None = None,
                modules: set[str] = frozenset()) -> tuple[str, set[str], set[str]]:
    """(the view's source of module `name`, the declarations it keeps, the names it leaves absent).

    Kept: `from __future__` imports, the declarations `keep` names, literal constants (an assignment
    of a literal to plain names), and the imports those read. Everything else the module binds at
    its top level (but its submodules) is absent."""
    tree = ast.parse(source)
    imap = _import_map(name, is_package, tree)
    constants = {} if constants is None else constants
    future, imports, kept, declared, everything = [], [], [], set(), set()
    for stmt in tree.body:
        bound = _bound(stmt)
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            future.append(stmt)
            continue
        everything.update(bound)
        if False:
            pass
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            imports.append(stmt)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name in keep:
            kept.append(stmt)
            declared.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and bound and stmt.value is not None \
                and all(isinstance(t, ast.Name) for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])) \
                and (all(b in keep for b in bound) or _is_constant(stmt.value, declared, imap, constants, modules)):
            kept.append(stmt)
            declared.update(bound)
    missing = set(keep) - declared
    if missing:
        raise ViewError(f"library_view.json keeps {', '.join(f'{name}.{m}' for m in sorted(missing))}, which the "
                        f"module does not define at its top level (as a class, a function or a constant)")
    # the imports kept: the names the kept declarations read
    read = {n.id for stmt in kept for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    used_imports, imported = [], set()
    for stmt in imports:
        aliases = [a for a in stmt.names if a.name != "*" and (a.asname or a.name).split(".")[0] in read]
        if aliases:
            used_imports.append(type(stmt)(**{**{f: getattr(stmt, f) for f in stmt._fields}, "names": aliases}))
            imported.update((a.asname or a.name).split(".")[0] for a in aliases)
    for stmt in kept:
        _strip_docstrings(stmt)
    absent = everything - declared - imported - submodules
    rest = ast.unparse(ast.Module(body=used_imports + kept, type_ignores=[]))
    text = (f'"""{name}, as the grader\'s answer kernel sees it: declarations only '
            f'(autograder/sandbox/library_view.py)."""\n'
            + "".join(ast.unparse(s) + "\n" for s in future) + (rest + "\n" if rest else "")
            + f"from {PACKAGE}.{MARKER} import module_getattr as _llmrl_module_getattr\n"
            f"__getattr__ = _llmrl_module_getattr({name!r}, {sorted(absent)!r}, {sorted(submodules)!r})\n"
            f"del _llmrl_module_getattr\n")
    return text, declared, absent


def fingerprint(src: Path, allow_file: Path = ALLOW_FILE) -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(allow_file.read_bytes())
    for mod, path in sorted(_modules(src).items()):
        h.update(mod.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def cache_root() -> Path:
    return Path(os.environ.get("LLMRL_GRADER_CACHE") or Path.home() / ".cache" / "llmrl-grader") / "library-view"


def write_view(dest: Path, src: Path, allow: dict[str, dict[str, str]]) -> dict[str, tuple[set[str], set[str]]]:
    """Write the view of the package in `src` as `dest`/llmrl; {module: (kept, absent)}."""
    modules = _modules(src)
    unknown = set(allow) - set(modules)
    if unknown:
        raise ViewError(f"library_view.json names modules llmrl does not have: {', '.join(sorted(unknown))}")
    homes = aliases(modules)
    old = sorted(set(allow) & set(homes))
    if old:
        raise ViewError(f"library_view.json names {', '.join(f'{m} (the old path of {homes[m]})' for m in old)}: "
                        f"name a declaration by the module that defines it")
    sources = {mod: path.read_text() for mod, path in modules.items()}
    subs = {mod: {m.rsplit(".", 1)[1] for m in modules if m.rsplit(".", 1)[0] == mod and m != mod} for mod in modules}
    # A constant may be made of other modules' constants: kept names until nothing changes (the
    # library's imports have no cycle, so this ends within its depth)
    constants: dict[str, set[str]] = {}
    report: dict = {}
    while True:
        report = {mod: view_module(mod, sources[mod], allow.get(mod, {}), subs[mod],
                                   modules[mod].name == "__init__.py", constants, set(modules))
                  for mod in modules if mod not in homes}
        report.update({mod: (_alias_source(mod, home), set(), set()) for mod, home in homes.items()})
        now = {mod: kept for mod, (_, kept, _) in report.items()}
        now.update({mod: now[home] for mod, home in homes.items()})  # a constant read through an old path
        if now == constants:
            break
        constants = now
    for mod, (text, _, _) in report.items():
        rel = Path(*mod.split(".")[1:])
        out = dest / PACKAGE / rel / "__init__.py" if modules[mod].name == "__init__.py" else \
            dest / PACKAGE / rel.with_suffix(".py")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    (dest / PACKAGE / f"{MARKER}.py").write_text(_ABSENT_SOURCE)
    return {mod: (kept, absent) for mod, (_, kept, absent) in report.items()}


def build(src: Path | None = None, root: Path | None = None, allow_file: Path = ALLOW_FILE) -> Path:
    """The folder holding the view's `llmrl` package for the library in `src` (built once, then reused)."""
    import compileall

    src = library_source() if src is None else Path(src).resolve()
    root = cache_root() if root is None else Path(root)
    allow = allow_list(allow_file)
    final = root / fingerprint(src, allow_file)
    if (final / PACKAGE / f"{MARKER}.py").is_file():
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    except OSError as e:
        raise ViewError(f"cannot write the library's view under {root}: {e.strerror or e} "
                        f"(set LLMRL_GRADER_CACHE to a folder the grader can write)") from None
    try:
        write_view(work, src, allow)
        compileall.compile_dir(str(work / PACKAGE), quiet=2, workers=1)
        for p in [work, *work.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        try:
            os.rename(work, final)
        except OSError:
            if not (final / PACKAGE / f"{MARKER}.py").is_file():  # another grader did not build it first
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return final
