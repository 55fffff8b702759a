"""Every repository path docs/architecture.md names exists.

A path is a word with a slash or a file ending (``rl/step.py``, ``claims.json``, ``autograder/bin/grade``),
written in backticks or not. The page names most files relative to the folder it is about: a path
counts as there when it exists under the repository, ``lib/``, ``lib/llmrl/``, ``autograder/``,
``hub/`` or ``docs/``; a bare file name in a row of the library's or the grader's folder table must be
in that row's folder (a path with a slash may be relative to it), and elsewhere anywhere in the package its section is about.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
BASES = ["", "lib", "lib/llmrl", "autograder", "hub", "docs"]
# named on purpose although they are no file of the repository
NOT_FILES = {
    "core/": "the folder the core is not in",
    "build/student-kit/": "what make student-kit writes (git-ignored)",
}
_ENDINGS = (".py", ".json", ".md", ".cfg", ".toml", ".yml", ".yaml", ".sh", ".ipynb")
_WORD = re.compile(r"[A-Za-z0-9_.<>*/-]+")


def _paths(text: str) -> list[str]:
    out = []
    for w in _WORD.findall(text):
        w = w.rstrip(".,;:").removeprefix("../")
        if not w or w.startswith("/") or "<" in w or "*" in w or "://" in w:
            continue
        if "/" in w or w.endswith(_ENDINGS):
            out.append(w)
    return out


def _section_package(title: str) -> str:
    return "autograder" if "autograder" in title else "hub" if "hub" in title.lower() else "lib/llmrl"


def _exists(path: str, package: str, folder: str | None) -> bool:
    if "/" not in path.rstrip("/"):
        if folder is not None:
            return (ROOT / package / folder / path).exists()
        if any((ROOT / b / path).exists() for b in BASES):
            return True
        return any(p.name == path.rstrip("/") for p in (ROOT / package).rglob(path.rstrip("/")))
    return any((ROOT / b / path).exists() for b in BASES) or (
        folder is not None and (ROOT / package / folder / path).exists())


def _cells(line: str) -> list[str]:
    """A table row's cells split on its unescaped | (a cell may hold an escaped \\|); [] for a line
    that is no table row."""
    return re.split(r"(?<!\\)\|", line) if line.startswith("|") else []


def _folder(cells: list[str]) -> str | None:
    """The folder a folder table's row is about ("" for the library's core), or None."""
    m = re.fullmatch(r"\s*`([\w-]+)/`(?: \(core\))?\s*", cells[1]) if len(cells) > 2 else None
    return None if m is None else ("" if m.group(1) == "llmrl" else m.group(1))


def missing_paths(text: str) -> list[str]:
    missing = []
    package = "lib/llmrl"
    for line in text.splitlines():
        if line.startswith("## "):
            package = _section_package(line)
        cells = _cells(line)
        folder = _folder(cells)
        for p in _paths(line):
            if p in NOT_FILES:
                continue
            if not _exists(p, package, folder if (folder is not None and p not in cells[1]) else None):
                missing.append(p)
    return missing


def test_every_path_named_exists():
    assert missing_paths(DOC.read_text()) == []


def test_a_path_that_is_gone_is_caught():
    text = ("## The library (lib/llmrl)\n"
            "| `rl/` | the loop (`train.py`) and `gone.py` | 6 | 1 |\n"
            "the walk: `hw4/no_such_trainer.py` -> `rl/step.py`\n")
    assert missing_paths(text) == ["gone.py", "hw4/no_such_trainer.py"]


def folder_rows(text: str) -> dict[tuple[str, str], list[str]]:
    """{(package, folder): the row's cells} of the library's and the grader's folder tables."""
    rows = {}
    package = "lib/llmrl"
    for line in text.splitlines():
        if line.startswith("## "):
            package = _section_package(line)
        cells = _cells(line)
        folder = _folder(cells)
        if folder is not None and len(cells) > 3:
            rows[(package, folder)] = [c.strip() for c in cells[1:-1]]
    return rows


def table_problems(text: str) -> list[str]:
    """A library row whose files column is not its folder's count of .py files; a grader row that
    leaves out one of its folder's modules."""
    out = []
    for (package, folder), cells in folder_rows(text).items():
        here = sorted(p.name for p in (ROOT / package / folder).glob("*.py"))
        if package == "lib/llmrl":
            if cells[2] != str(len(here)):
                out.append(f"{folder or 'core'}: {cells[2]} files in the table, {len(here)} in the folder")
        elif package == "autograder":
            words = {w.rsplit("/", 1)[-1] for w in _paths(cells[1])}
            out += [f"{folder}/{n} is not named in its row" for n in here if n != "__init__.py" and n not in words
                    and not (n.startswith("_holdout") and "`_holdout*.py`" in cells[1])]
    return out


def test_the_folder_tables_count_and_name_every_module():
    rows = folder_rows(DOC.read_text())
    assert {f for p, f in rows if p == "lib/llmrl"} >= {"", "tasks", "lm", "rl", "hw4", "tools"}
    assert {f for p, f in rows if p == "autograder"} >= {"batch", "sandbox", "review", "grading"}
    assert table_problems(DOC.read_text()) == []


def test_a_stale_count_and_an_unnamed_module_are_caught():
    text = ("## The library (lib/llmrl)\n| `hw4/` | everything | 3 | 10 |\n"
            "## The grader (autograder/)\n| `batch/` | the batch (`run.py`) | 10 |\n")
    problems = table_problems(text)
    assert problems[0].startswith("hw4: 3 files in the table,")
    assert "batch/fanout.py is not named in its row" in problems
    assert "batch/run.py is not named in its row" not in problems
