"""Which submitted file is which notebook of an assignment: by name, then by the graded cells it holds."""

from __future__ import annotations

import re

from pathlib import Path

from autograder.course.layout import ROOT
from autograder.course.layout import PipelineError

MAX_FILES = 40  # notebooks read per student and assignment; more are named in the notes, not read


def _plain_name(stem: str) -> str:
    """'Copy of LLM_as_policy (2)' -> 'llm_as_policy': what students' tools add to a name, removed."""
    x = stem.lower()
    x = re.sub(r"^(copy of |copy_of_)", "", x)
    x = re.sub(r"(\s*\(\d+\)|[-_ ]copy\d*|[-_ ]v?\d+|[-_ ](final|submission|done|new|old|backup))+$", "", x)
    return re.sub(r"[^a-z0-9]+", "_", x).strip("_")


def match_submission(assignment: str, paths: list[Path], root: Path = ROOT) -> tuple[list[tuple[Path, str]], list[str]]:
    """Which handed-in file is which notebook of the assignment: ([(file, notebook name)], notes).

    One file per notebook. A file belongs to the notebook it shares graded cells with, whatever
    its name ("llm_as_policy (1).ipynb", "Copy of tasks.ipynb"); among several files for one
    notebook the file with exactly its name wins, then the one sharing the most graded cells, then
    the newest. Every file that is not graded gets a note saying why (another copy, no notebook of
    the assignment, not a notebook, none of the graded cells left: a tool that drops nbgrader's cell
    metadata saved it, and nbgrader cannot grade it); the student's other notebooks are graded all
    the same, and a notebook without a file counts as missing.
    """
    import difflib

    import nbformat

    from autograder.grading import one_notebook as grade

    sources = grade.source_notebooks(assignment, root)
    want = {name: grade._grade_ids(nbformat.read(p, as_version=4)) for name, p in sources.items()}
    plain = {_plain_name(n): n for n in sources}
    notes: list[str] = []
    paths = sorted(paths, key=lambda p: p.name)
    if len(paths) > MAX_FILES:
        notes.append(f"{len(paths) - MAX_FILES} more notebooks not read (at most {MAX_FILES} per assignment): "
                     + ", ".join(p.name for p in paths[MAX_FILES:][:5]) + (" ..." if len(paths) > MAX_FILES + 5 else ""))
        paths = paths[:MAX_FILES]
    claims: dict[str, list[tuple[tuple, Path]]] = {name: [] for name in sources}
    for path in paths:
        try:
            ids = grade._grade_ids(grade._read_notebook(str(path)))
        except PipelineError as e:
            notes.append(f"{path.name}: not graded: {str(e).removeprefix(str(path)).strip()}")
            continue
        shared = {name: len(ids & w) for name, w in want.items() if ids & w}
        if not shared:
            close = [path.stem] if path.stem in sources else [
                plain[m] for m in difflib.get_close_matches(_plain_name(path.stem), list(plain), n=1, cutoff=0.75)]
            if close:
                notes.append(f"{path.name}: not graded: by its name it is {close[0]}.ipynb, but it holds none of its "
                             f"graded cells (saved by a tool that drops nbgrader's cell metadata?): ask for the "
                             f"notebook as it was downloaded")
            else:
                notes.append(f"{path.name}: not graded: no notebook of {assignment} (it shares no graded cell with "
                             f"{', '.join(p.name for p in sources.values())})")
            continue
        name = path.stem if path.stem in shared else max(shared, key=lambda n: (shared[n], n))
        try:
            mtime = path.lstat().st_mtime
        except OSError:
            mtime = 0.0
        claims[name].append(((path.stem != name, -shared[name], -mtime, path.name), path))
    chosen = []
    for name in sources:
        ranked = sorted(claims[name], key=lambda c: c[0])
        if not ranked:
            continue
        best = ranked[0][1]
        chosen.append((best, name))
        if best.stem != name:
            notes.append(f"{best.name}: graded as {name}.ipynb (it holds that notebook's graded cells)")
        for _, other in ranked[1:]:
            notes.append(f"{other.name}: not graded: another copy of {name}.ipynb ({best.name} was graded)")
    return chosen, notes
