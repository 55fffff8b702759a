"""jupytext sources -> nbgrader source notebooks (`make build`): cell checks, conversion, keeping outputs.
"""

from __future__ import annotations
import copy
from pathlib import Path
from autograder.course.layout import GRADE_ID_RE, HIDDEN_MARKERS, JUPYTEXT_CELL_KEYS, KERNELSPEC, Lab, NBGRADER_KEYS, PipelineError, ROOT, SOLUTION_MARKERS, assignments, rel

# ----------------------------------------------------------------------------- build

def _header_lines(text: str) -> list[int]:
    """1-based line numbers of the `# %%` cell headers of a percent-format file."""
    return [i + 1 for i, line in enumerate(text.splitlines()) if line.startswith("# %%")]


def _cell_where(path: Path, index: int, headers: list[int], n_cells: int) -> str:
    """'notebooks/A/x.py:42 (cell 5)': where an author finds cell `index` (0-based)."""
    offset = n_cells - len(headers)  # 1 when text before the first `# %%` became a cell
    line = headers[index - offset] if offset in (0, 1) and 0 <= index - offset < len(headers) else None
    return f"{rel(path)}:{line} (cell {index + 1})" if line else f"{rel(path)} (cell {index + 1})"


def check_cells(nb, path: Path, text: str) -> list[str]:
    """All problems with the nbgrader metadata of a notebook read from `path`, one line each."""
    headers = _header_lines(text)
    problems: list[str] = []
    seen: dict[str, str] = {}
    for i, cell in enumerate(nb.cells):
        where = _cell_where(path, i, headers, len(nb.cells))
        bad = cell.metadata.get("incorrectly_encoded_metadata")
        if bad is not None:
            problems.append(
                f"{where}: the header's metadata did not parse ({bad!r}); "
                "write it as JSON: true/false/null, double quotes"
            )
        source = cell.source
        meta = cell.metadata.get("nbgrader")
        if meta is None:
            for marker in SOLUTION_MARKERS + HIDDEN_MARKERS:
                if marker in source:
                    problems.append(f"{where}: '{marker}' in a cell without nbgrader metadata")
            continue
        if not isinstance(meta, dict):
            problems.append(f"{where}: nbgrader metadata must be a JSON object, got {meta!r}")
            continue
        missing = [k for k in NBGRADER_KEYS if k not in meta]
        if meta.get("grade") is True and "points" not in meta:
            missing.append("points")
        if missing:
            problems.append(f"{where}: nbgrader metadata lacks {', '.join(missing)} (write the whole dictionary)")
            continue
        for key in ("grade", "locked", "solution", "task"):
            if not isinstance(meta[key], bool):
                problems.append(f"{where}: nbgrader {key!r} must be true or false, got {meta[key]!r}")
        if meta["schema_version"] != 3:
            problems.append(f"{where}: nbgrader schema_version must be 3, got {meta['schema_version']!r}")
        gid = meta["grade_id"]
        if not isinstance(gid, str) or not GRADE_ID_RE.match(gid):
            problems.append(f"{where}: grade_id {gid!r} must be letters, digits, '_' or '-'")
        elif gid in seen:
            problems.append(f"{where}: grade_id {gid!r} is also used by {seen[gid]}")
        else:
            seen[gid] = where
        if meta.get("grade") is True:
            points = meta["points"]
            if isinstance(points, bool) or not isinstance(points, (int, float)) or points <= 0:
                problems.append(f"{where}: points must be a number > 0, got {points!r}")
        is_test = meta.get("grade") is True and meta.get("solution") is False
        if is_test and cell.cell_type == "code" and meta.get("locked") is not True:
            problems.append(f"{where}: a graded test cell must be locked (\"locked\": true)")
        has_solution = any(m in source for m in SOLUTION_MARKERS)
        if has_solution and meta.get("solution") is not True:
            problems.append(f"{where}: solution markers in a cell that is not a solution cell")
        if cell.cell_type == "code" and meta.get("solution") is True:
            if not all(m in source for m in SOLUTION_MARKERS):
                problems.append(f"{where}: a code solution cell needs both '### BEGIN SOLUTION' and '### END SOLUTION'")
        if any(m in source for m in HIDDEN_MARKERS):
            if not is_test:
                problems.append(f"{where}: hidden-test markers in a cell that is not a graded test cell")
            elif not all(m in source for m in HIDDEN_MARKERS):
                problems.append(f"{where}: a hidden-test block needs both BEGIN and END HIDDEN TESTS")
    return problems


def convert(path: Path):
    """Read one jupytext percent source into a clean nbgrader source notebook (no outputs)."""
    import jupytext
    import nbformat

    text = path.read_text(encoding="utf-8")
    if not _header_lines(text):
        raise PipelineError(f"{rel(path)}: no '# %%' cell header; not a jupytext percent-format notebook")
    nb = jupytext.reads(text, fmt="py:percent")
    problems = check_cells(nb, path, text)
    if problems:
        raise PipelineError("\n".join(problems))
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = nbformat.from_dict({"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}})
    for i, cell in enumerate(nb.cells):
        for key in JUPYTEXT_CELL_KEYS:
            cell.metadata.pop(key, None)
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell["id"] = gid if gid else f"cell-{i:03d}"
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    ids = [c["id"] for c in nb.cells]
    if len(set(ids)) != len(ids):
        raise PipelineError(f"{rel(path)}: a grade_id looks like a generated cell id (cell-NNN); rename it")
    nbformat.validate(nb)
    return nb


def normalized(nb) -> str:
    """The notebook as text without what running it adds (outputs, counts, timings, widget state)."""
    import nbformat

    nb = copy.deepcopy(nb)
    for key in ("widgets", "language_info", "jupytext"):
        nb.metadata.pop(key, None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nbformat.writes(nb)


def code_signature(nb) -> list[str]:
    """What a notebook's outputs depend on: its code cells in order (source and metadata, not counts
    or timings) and its kernel."""
    import json

    cells = [json.dumps([c.source, {k: v for k, v in c.metadata.items() if k != "execution"}], sort_keys=True)
             for c in nb.cells if c.cell_type == "code"]
    return [json.dumps(nb.metadata.get("kernelspec", {}), sort_keys=True)] + cells


def keep_outputs(old, new) -> bool:
    """Copy ``old``'s outputs into ``new`` when their code is the same (:func:`code_signature`): an edit
    of the text only keeps the executed results. Returns whether it did."""
    if code_signature(old) != code_signature(new):
        return False
    for a, b in zip((c for c in old.cells if c.cell_type == "code"), (c for c in new.cells if c.cell_type == "code")):
        b.outputs, b.execution_count = copy.deepcopy(a.outputs), a.execution_count
    for key in ("widgets", "language_info"):
        if key in old.metadata:
            new.metadata[key] = copy.deepcopy(old.metadata[key])
    return True


def build(labs: list[Lab], out_root: Path | None = None) -> list[Path]:
    """Write source/A/x.ipynb for each lab; an unchanged notebook keeps its stored outputs, and so
    does one whose code cells are unchanged (an edit of its text: :func:`keep_outputs`).

    Every file is checked before anything is written, and all problems are reported together.
    Returns the notebooks written.
    """
    import nbformat

    problems, built = [], []
    for lab in labs:
        try:
            built.append((lab, convert(lab.jupytext)))
        except PipelineError as e:
            problems.append(str(e))
    if problems:
        raise PipelineError("\n".join(problems))
    written = []
    for lab, nb in built:
        target = lab.source if out_root is None else out_root / "source" / lab.assignment / f"{lab.name}.ipynb"
        if target.exists():
            try:
                old = nbformat.read(target, as_version=4)
                if normalized(old) == normalized(nb):
                    continue
                if keep_outputs(old, nb):
                    print(f"{target}: only text changed, the stored outputs are kept")
            except Exception:  # unreadable old file: overwrite it
                pass
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    return written


def stale_sources(labs: list[Lab], root: Path = ROOT) -> list[Path]:
    """Source notebooks of the given assignments that no jupytext file produces any more."""
    wanted = {lab.source.resolve() for lab in labs}
    found = []
    for a in assignments(labs):
        found += [p for p in sorted((root / "source" / a).glob("*.ipynb")) if p.resolve() not in wanted]
    return found


