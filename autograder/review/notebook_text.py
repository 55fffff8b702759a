"""A submitted notebook as the answer-key check reads it: its cells, and each cell's Python with IPython's
magics turned into what they do (or dropped)."""

from __future__ import annotations

import json
import re
from pathlib import Path

_LINE_MAGIC = re.compile(r"^(\s*)([%!?].*)$")
_ASSIGN_MAGIC = re.compile(r"^(\s*[A-Za-z_][\w.]*\s*=\s*)[%!].*$")
_RUN_MAGIC = re.compile(r"^\s*%run\s+(?:-\w+\s+)*([\w./-]+?)(?:\.py)?\s*$")


def _cells(notebook) -> list[tuple[str, dict, str]]:
    """(cell_type, nbgrader metadata, source) of every cell of a notebook given in any form."""
    if isinstance(notebook, (str, Path)) and Path(str(notebook)).suffix == ".ipynb" and Path(str(notebook)).exists():
        notebook = json.loads(Path(notebook).read_text(encoding="utf-8"))
    if isinstance(notebook, dict) and "cells" in notebook:
        out = []
        for c in notebook["cells"]:
            src = c.get("source", "")
            meta = (c.get("metadata") or {}).get("nbgrader") or {}
            meta = meta if isinstance(meta, dict) else {}  # a hostile submission's may be a str, its
            if not isinstance(meta.get("grade_id"), str):  # grade_id a list
                meta = {k: v for k, v in meta.items() if k != "grade_id"}
            out.append((c.get("cell_type", "code"), meta, "".join(src) if isinstance(src, list) else str(src)))
        return out
    if isinstance(notebook, dict):  # {grade_id: source} of solution cells
        return [("code", {"grade_id": gid, "solution": True}, src) for gid, src in notebook.items()]
    if isinstance(notebook, (list, tuple)):  # [(grade_id, source)] or [source]
        return [("code", {"grade_id": item[0], "solution": True} if isinstance(item, tuple) else {},
                 item[1] if isinstance(item, tuple) else item) for item in notebook]
    raise TypeError(f"notebook must be a notebook (dict, nbformat node or .ipynb path), a dict of "
                    f"grade_id -> source or a list of sources, got {type(notebook).__name__}")


def _python(source: str, analysis) -> str | None:  # analysis: static_analysis._Analysis (which calls this)
    """A cell's Python with IPython magics removed (None: not Python, e.g. %%bash); %%writefile
    cells become modules of the analysis, %run of such a module becomes an import of all its names."""
    lines = source.splitlines()
    if lines and lines[0].startswith("%%"):
        head = lines[0].split()
        if head[0] == "%%writefile" and len(head) >= 2:
            name = Path(head[-1]).name
            if name.endswith(".py"):
                analysis.module_sources[name[:-3]] = "\n".join(lines[1:])
            return None
        if head[0] in ("%%time", "%%timeit", "%%capture", "%%prun", "%%debug"):
            lines = lines[1:]
        else:
            return None
    out = []
    for line in lines:
        m = _RUN_MAGIC.match(line)
        if m:
            out.append(re.match(r"^\s*", line).group(0) + f"from {Path(m.group(1)).name} import *")
            continue
        m = _ASSIGN_MAGIC.match(line)
        if m:
            out.append(m.group(1) + "None")
            continue
        m = _LINE_MAGIC.match(line)
        out.append(m.group(1) + "pass" if m else line)
    return "\n".join(out)


