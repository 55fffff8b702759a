"""What the two runs need to know of a notebook's cells: tests, solutions, set-up cells, hidden tests,
the names a cell defines and reads.
"""

from __future__ import annotations
import ast
HIDDEN_BEGIN, HIDDEN_END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"

# ----------------------------------------------------------------------------- the notebooks' cells

def nbmeta(cell) -> dict:
    m = cell.get("metadata", {}).get("nbgrader")
    return m if isinstance(m, dict) else {}


def is_test_cell(cell) -> bool:
    m = nbmeta(cell)
    return cell.get("cell_type") == "code" and bool(m.get("grade")) and not m.get("solution")


def is_solution_cell(cell) -> bool:
    return cell.get("cell_type") == "code" and bool(nbmeta(cell).get("solution"))


def is_setup_cell(cell) -> bool:
    """A code cell of the course that is neither a solution nor a test (imports, experiments)."""
    m = nbmeta(cell)
    return cell.get("cell_type") == "code" and not m.get("grade") and not m.get("solution")


def strip_hidden(source: str) -> str:
    out, inside = [], False
    for line in source.split("\n"):
        if HIDDEN_BEGIN in line:
            inside = True
        elif HIDDEN_END in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def _python(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def names(source: str) -> tuple[set[str], set[str], bool]:
    """(names bound at the top level, names read anywhere, has a star import) of one cell."""
    try:
        tree = ast.parse(_python(source))
    except (SyntaxError, ValueError):
        return set(), set(), False
    defined: set[str] = set()
    star = False

    def targets(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                defined.add(n.id)

    def top(stmts):
        nonlocal star
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(s.name)
            elif isinstance(s, (ast.Import, ast.ImportFrom)):
                for a in s.names:
                    if a.name == "*":
                        star = True
                    else:
                        defined.add((a.asname or a.name).split(".")[0])
            elif isinstance(s, ast.Assign):
                for t in s.targets:
                    targets(t)
            elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
                targets(s.target)
            elif isinstance(s, (ast.For, ast.AsyncFor)):
                targets(s.target)
                top(s.body + s.orelse)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
                top(s.body)
            elif isinstance(s, (ast.If, ast.While)):
                top(s.body + s.orelse)
            elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
                top(s.body + s.orelse + s.finalbody)
                for h in s.handlers:
                    if h.name:
                        defined.add(h.name)
                    top(h.body)
            for n in ast.walk(s) if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []:
                if isinstance(n, ast.NamedExpr):
                    targets(n.target)

    top(tree.body)
    used = _global_reads(tree)
    if used is None:
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return defined, used, star


def _global_reads(tree: ast.Module) -> set[str] | None:
    """Names a cell reads from the notebook's globals: at its top level, and inside its functions,
    lambdas, classes and comprehensions where a name is not their own (symtable's implicit globals).

    A function's parameters and locals are not among them: `logits` inside `def f(logits)` must
    not pull in the set-up cell that defines a global `logits` (an experiment cell that calls the
    student's functions). None when symtable cannot read the cell."""
    import symtable

    try:
        table = symtable.symtable(ast.unparse(tree), "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: set[str] = set()
    todo = [table]
    while todo:
        t = todo.pop()
        for sym in t.get_symbols():
            if sym.is_referenced() and sym.is_global():
                out.add(sym.get_name())
        todo.extend(t.get_children())
    return out


def solution_names(source_nb) -> list[str]:
    """Names the source's solution cells define, in order: what the tests call."""
    out: list[str] = []
    for c in source_nb.cells:
        if is_solution_cell(c):
            out += [n for n in sorted(names(c.source)[0]) if n not in out]
    return out


def setup_cells(source_nb, wanted: set[str]) -> list[int]:
    """Indices of the source's set-up cells that define what `wanted` needs (transitively).

    Cells tagged "grader-setup" always run, cells tagged "grader-skip" never do; a cell with a
    star import counts as defining everything."""
    info = {}
    for i, c in enumerate(source_nb.cells):
        if is_setup_cell(c) and c.source.strip():
            tags = set(c.metadata.get("tags") or [])
            if "grader-skip" not in tags:
                info[i] = (*names(c.source), "grader-setup" in tags)
    need = set(wanted)
    chosen: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, (defined, used, star, forced) in info.items():
            if i not in chosen and (forced or star or defined & need):
                chosen.add(i)
                need |= used - defined
                changed = True
    return sorted(chosen)


def source_tests(source_nb) -> list[tuple[int, str, str]]:
    """(index, grade_id, code) of every test cell of the source."""
    return [(i, nbmeta(c)["grade_id"], c.source) for i, c in enumerate(source_nb.cells) if is_test_cell(c)]




def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def definitions_only(source: str, constants: bool = False) -> str | None:
    """A cell's imports, functions and classes, without the code it runs at its top level (a
    student's own check that calls a function which crashes the kernel, an experiment); with
    `constants`, also its assignments of a literal to plain names (EPS = 1e-8). None when nothing
    is left."""
    try:
        tree = ast.parse(_python(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                                    ast.AsyncFunctionDef, ast.ClassDef))
            or constants and isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets)
            and _literal(n.value)]
    return ast.unparse(ast.Module(body=keep, type_ignores=[])) if keep else None

