"""The course pipeline: jupytext sources -> nbgrader source notebooks -> releases -> grades.

    python autograder/course.py build     [ASSIGNMENT...]   notebooks/A/x.py -> source/A/x.ipynb
    python autograder/course.py execute   [ASSIGNMENT...]   run source notebooks in place (nbval reference)
    python autograder/course.py release   [ASSIGNMENT...]   nbgrader generate_assignment -> release/A/
    python autograder/course.py validate  [ASSIGNMENT...]   sources pass every test, releases fail every test cell
    python autograder/course.py submissions [ASSIGNMENT...] the sample students into build/demo-course/submitted/
    python autograder/course.py autograde [ASSIGNMENT...]   the sandboxed batch on submitted/, grades.csv, score table
    python autograder/course.py demo      [ASSIGNMENT...]   the sample students graded in build/demo-course/
    python autograder/course.py feedback  [ASSIGNMENT...] [--force]  feedback/ from the gradebook (held until graded)
    python autograder/course.py scores    [ASSIGNMENT...]   score table and grades.csv from the gradebook
    (autograde, feedback, scores: --course DIR works on another course folder, e.g. build/demo-course)

An assignment is a folder notebooks/<assignment>/; each <name>.py in it (jupytext percent format,
names starting with "_" are skipped) becomes the notebook source/<assignment>/<name>.ipynb.
The Makefile calls these commands; the tests import the functions.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "autograder" / "nbgrader_config.py"
SAMPLES = ROOT / "autograder" / "samples"

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
NBGRADER_KEYS = ("grade", "grade_id", "locked", "schema_version", "solution", "task")
GRADE_ID_RE = re.compile(r"^[a-zA-Z0-9_\-]+$")
# Cell metadata that only describes how jupytext laid out the text file.
JUPYTEXT_CELL_KEYS = ("lines_to_next_cell", "lines_to_end_of_cell_marker", "cell_marker")
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
# A student's own working files that must never reach a release or a scratch course.
COPY_IGNORE = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc", "artifacts")


# nbgrader runs `alembic` as a command: the environment's scripts must be on PATH even when
# this file is run as .venv/bin/python without activating the environment.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")


def _speedups() -> None:
    """Two start-up costs of nbgrader 0.9.6 that grading one notebook does not need.

    1. jsonschema (imported by nbformat) builds about 40 lark parsers for the optional
       rfc3987_syntax "iri" format checker: about 4.5 s per process on this class of CPU, and the
       notebook schema never uses that format. Marking the module absent skips it.
    2. A new gradebook asks a fresh `alembic heads` subprocess for the schema version (another
       4-5 s, since that process imports nbformat too); reading nbgrader's migration folder
       in-process gives the same answer.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)
    import nbgrader.api

    def alembic_head() -> str:
        from alembic.config import Config
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(nbgrader.api.__file__).parent / "alembic"))
        return ScriptDirectory.from_config(cfg).get_current_head()

    original = nbgrader.api.get_alembic_version

    def get_alembic_version() -> str:
        try:
            return alembic_head()
        except Exception:  # a layout this code does not know: nbgrader's own (slow) way
            return original()

    nbgrader.api.get_alembic_version = get_alembic_version
    # SQLAlchemy 2 warns about nbgrader 0.9.6's session use (SAWarning); the grades are right.
    warnings.filterwarnings("ignore", module=r"nbgrader\.api")


_speedups()


class PipelineError(Exception):
    """A problem the author must fix; the message names the file (and cell)."""


# ----------------------------------------------------------------------------- discovery

@dataclass(frozen=True)
class Lab:
    """One notebook of one assignment."""

    assignment: str
    name: str
    root: Path = ROOT

    @property
    def jupytext(self) -> Path:
        return self.root / "notebooks" / self.assignment / f"{self.name}.py"

    @property
    def source(self) -> Path:
        return self.root / "source" / self.assignment / f"{self.name}.ipynb"

    @property
    def release(self) -> Path:
        return self.root / "release" / self.assignment / f"{self.name}.ipynb"


def discover(selected: list[str] | tuple[str, ...] = (), root: Path = ROOT) -> list[Lab]:
    """Every notebooks/<assignment>/<name>.py, restricted to `selected` assignments if given."""
    labs = [
        Lab(p.parent.name, p.stem, root)
        for p in sorted((root / "notebooks").glob("*/*.py"))
        if not p.name.startswith(("_", "."))
    ]
    known = sorted({lab.assignment for lab in labs})
    for a in selected:
        if a not in known:
            raise PipelineError(
                f"assignment {a!r} has no notebooks/{a}/*.py; known assignments: {', '.join(known) or 'none'}"
            )
    return [lab for lab in labs if not selected or lab.assignment in selected]


def assignments(labs: list[Lab]) -> list[str]:
    return sorted({lab.assignment for lab in labs})


def rel(path: Path, root: Path = ROOT) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


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


# ----------------------------------------------------------------------------- execute

def execute_one(path: str, timeout: int = 3600) -> str:
    """Run a source notebook top to bottom in its own folder and store the outputs in place."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    os.environ.pop("NBGRADER_EXECUTION", None)  # the full experiments, not the graded shortcut
    p = Path(path)
    nb = nbformat.read(p, as_version=4)
    import tempfile

    from traitlets.config import Config

    # The kernel talks over unix sockets in a private folder, not TCP: nothing on the machine's ports,
    # and no "Kernel is running over TCP without encryption" warning per notebook. (An absolute socket
    # path: the kernel runs in the notebook's folder, the client here.)
    sockets = Path(tempfile.mkdtemp(prefix="llmrl-execute-"))
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(p.parent)}},
        record_timing=False, store_widget_state=False,
        config=Config({"KernelManager": {"transport": "ipc", "ip": str(sockets / "kernel")}}),
    )
    try:
        client.execute()
    except CellExecutionError as e:
        index = next((i for i, c in enumerate(nb.cells) if c.get("outputs") and
                      any(o.get("output_type") == "error" for o in c.outputs)), None)
        where = f" (cell {index + 1})" if index is not None else ""
        last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise PipelineError(f"{rel(p)}{where} failed while executing: {last}") from None
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    nbformat.write(nb, p)
    return rel(p)


def _parallel(fn, items, workers: int = 2):
    """Run fn over items in worker processes; collect PipelineErrors instead of stopping at the first."""
    results, errors = [], []
    if not items:
        return results, errors
    with ProcessPoolExecutor(max_workers=min(workers, len(items))) as pool:
        futures = [pool.submit(fn, *item) if isinstance(item, tuple) else pool.submit(fn, item) for item in items]
        for f in futures:
            try:
                results.append(f.result())
            except PipelineError as e:
                errors.append(str(e))
    return results, errors


# ----------------------------------------------------------------------------- nbgrader

def load_config(root: Path = ROOT, settings_from: Path | None = None):
    """The course's nbgrader configuration, with the course directory moved to `root`.

    `settings_from`: a course folder whose own nbgrader_config.py (the instructor's settings, e.g.
    the late-penalty policy) is applied on top, as plain nbgrader would apply it there; the grader's
    scratch courses take their settings from the course they grade for. A link is never followed.
    (The repository's own two-line nbgrader_config.py only loads the course's settings again; the
    hub's course folder, where ROOT is the course folder itself, has its own settings in that file.)"""
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
    own = Path(settings_from) / "nbgrader_config.py" if settings_from is not None else None
    if own is not None and own.is_file() and not own.is_symlink():
        try:
            cfg.merge(PyFileConfigLoader(own.name, path=str(own.parent)).load_config())
        except Exception as e:  # the instructor's file: say which one and why, never a traceback
            raise PipelineError(f"{own} cannot be loaded ({type(e).__name__}: {str(e).strip()[:200]})") from None
    cfg.CourseDirectory.root = str(root)
    return cfg


def record_assignment(assignment: str, root: Path, release_dir: Path | None = None,
                      failure: str = "nbgrader generate_assignment failed", settings_from: Path | None = None) -> None:
    """nbgrader generate_assignment in the course at `root` (in-process, quiet): records the
    assignment's current cells in root's gradebook and writes the student version to `release_dir`
    (default: root/release). Raises PipelineError starting with `failure` and nbgrader's last line."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    cfg = load_config(root, settings_from=settings_from)
    if release_dir is not None:
        cfg.CourseDirectory.release_directory = str(release_dir)  # absolute: root/release stays as it is
    cfg.Application.log_level = "ERROR"
    api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
    r = api.generate_assignment(assignment, force=True, create=True)
    if not r.get("success"):
        detail = (r.get("error") or r.get("log") or "").strip().splitlines()
        raise PipelineError(f"{failure}: {detail[-1] if detail else 'no detail'}")


def nbgrader(*args: str, cwd: Path = ROOT, quiet: bool = False) -> None:
    """Run one nbgrader command line in the course directory (its nbgrader_config.py loads ours)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "nbgrader", *args]
    proc = subprocess.run(cmd, cwd=cwd, text=True, capture_output=quiet)
    if proc.returncode != 0:
        detail = (proc.stderr or "").strip().splitlines()[-20:] if quiet else []
        raise PipelineError("nbgrader " + " ".join(args) + " failed" + ("\n" + "\n".join(detail) if detail else ""))


def release(labs: list[Lab]) -> None:
    for a in assignments(labs):
        missing = [rel(lab.source) for lab in labs if lab.assignment == a and not lab.source.exists()]
        if missing:
            raise PipelineError(f"{', '.join(missing)} missing: run `make build A={a}` first")
        nbgrader("generate_assignment", a, "--force", "--log-level=ERROR")


def graded_test_cells(nb) -> list[str]:
    """grade_ids of the autograded code cells (tests, or graded answers) of a notebook."""
    return [
        c.metadata.nbgrader["grade_id"]
        for c in nb.cells
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
    ]


def validate_one(path: str, invert: bool) -> str:
    """nbgrader validate one notebook; raise naming every test cell with the wrong outcome.

    invert=False (a source notebook): every graded cell must earn full points.
    invert=True (an unmodified release): every graded cell must earn less than full points.
    """
    import nbformat
    from nbgrader.validator import Validator

    p = Path(path)
    nb = nbformat.read(p, as_version=4)
    by_source = {c.source.strip(): c.metadata.nbgrader["grade_id"]
                 for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    validator = Validator(config=load_config(), invert=invert)
    results = validator.validate(str(p))
    if "type_changed" in results or "changed" in results:
        kind = "type_changed" if "type_changed" in results else "changed"
        ids = [by_source.get(c["source"], c["source"][:40]) for c in results[kind]]
        raise PipelineError(f"{rel(p)}: locked or graded cells were modified ({kind}): {', '.join(ids)}")
    if invert and results.get("passed"):
        ids = [by_source.get(c["source"], c["source"][:40]) for c in results["passed"]]
        raise PipelineError(
            f"{rel(p)}: the unmodified release PASSES test cell(s) {', '.join(ids)}: "
            "a test that passes on the stub tests nothing"
        )
    if not invert and results.get("failed"):
        lines = []
        for c in results["failed"]:
            err = (c.get("raw_error") or "").strip().splitlines()
            lines.append(f"{rel(p)}: cell {by_source.get(c['source'], '?')} fails: {err[-1] if err else 'error'}")
        raise PipelineError("\n".join(lines))
    n = len(graded_test_cells(nb))
    return f"{rel(p)}: {'all ' + str(n) + ' graded cells fail on the stubs' if invert else 'all tests pass'}"


def validate(labs: list[Lab]) -> None:
    items = []
    for lab in labs:
        for path in (lab.source, lab.release):
            if not path.exists():
                raise PipelineError(f"{rel(path)} missing: run `make build release A={lab.assignment}`")
        items += [(str(lab.source), False), (str(lab.release), True)]
    results, errors = _parallel(validate_one, items)
    for line in results:
        print("ok  " + line)
    if errors:
        raise PipelineError("\n".join(errors))


# ----------------------------------------------------------------------------- submissions

def _patches(path: Path) -> dict[str, str]:
    """Read a sample file: each `# %% grade_id=NAME` header starts the new code of that cell."""
    patches: dict[str, str] = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^# %% grade_id=([A-Za-z0-9_\-]+)\s*$", line)
        if m:
            current = m.group(1)
            patches[current] = ""
        elif current is not None:
            patches[current] += line + "\n"
    return {k: v.strip("\n") + "\n" for k, v in patches.items()}


def _strip_solution_markers(source: str) -> str:
    return "\n".join(l for l in source.splitlines() if l.strip() not in SOLUTION_MARKERS)


def sample_submissions(lab: Lab) -> dict[str, object]:
    """student id -> submitted notebook for one lab, all built from its release notebook.

    `reference` answers with the source's solutions, `untouched` hands in the release as is,
    and every autograder/samples/<student>/<assignment>/<name>.py replaces the code of the
    solution cells it names.
    """
    import nbformat

    release_nb = nbformat.read(lab.release, as_version=4)
    source_nb = nbformat.read(lab.source, as_version=4)
    solutions = {c.metadata.nbgrader["grade_id"]: _strip_solution_markers(c.source)
                 for c in source_nb.cells if c.metadata.get("nbgrader", {}).get("solution")}
    students = {"reference": solutions, "untouched": {}}
    for f in sorted(SAMPLES.glob(f"*/{lab.assignment}/{lab.name}.py")):
        students[f.parent.parent.name] = _patches(f)
    out = {}
    for student, patch in students.items():
        nb = copy.deepcopy(release_nb)
        ids = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
        for gid, code in patch.items():
            cell = ids.get(gid)
            if cell is None or not cell.metadata.nbgrader.get("solution"):
                raise PipelineError(f"sample {student}: {rel(lab.release)} has no solution cell {gid!r}")
            cell.source = code.rstrip("\n")
        out[student] = nb
    return out


# ----------------------------------------------------------------------------- matching a submission

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

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import grade

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


# ----------------------------------------------------------------------------- grade tables
#
# Points come apart in two kinds: *automatic* (test cells, scored by the grader) and *manual*
# (written answers: cells that are both graded and a solution, scored by a person in the
# formgrader). A manual cell is pending until a person has scored it; a notebook the grader held
# for review (batch.py: an answer outside the wire format, the answer-key check) is pending too.
# A student without a submission, or a notebook that was not handed in, is "missing", never 0.

DEMO = ROOT / "build" / "demo-course"
DEMO_MARK = ".llmrl-demo-course"  # only a folder holding this file is ever deleted by `make demo`
GRADE_COLUMNS = ["assignment", "student_id", "last_name", "first_name", "email", "timestamp", "automatic",
                 "automatic_max", "manual", "manual_max", "manual_pending", "late_penalty", "total", "max_score",
                 "status", "notes"]


def manual_cells(gb, assignment) -> set[tuple[str, str]]:
    """(notebook, grade_id) of the manually graded cells of an assignment in the gradebook."""
    out = set()
    for nb in assignment.notebooks:
        solutions = {c.name for c in nb.solution_cells}
        out |= {(nb.name, c.name) for c in nb.grade_cells if c.name in solutions}
    return out


def notebook_state(nb, manual: set[tuple[str, str]]) -> dict:
    """Points of one submitted notebook of the gradebook, automatic and manual apart."""
    grades = list(nb.grades)
    s = {"notebook": nb.name, "automatic": 0.0, "automatic_max": 0.0, "manual": 0.0, "manual_max": 0.0,
         "manual_pending": 0.0, "pending_cells": [], "review": False, "late_penalty": 0.0,
         # never scored at all: the batch records a notebook that was not handed in that way
         "missing": bool(grades) and all(g.auto_score is None and g.manual_score is None
                                         and not g.needs_manual_grade for g in grades)}
    if s["missing"]:
        for g in grades:
            s["manual_max" if (nb.name, g.name) in manual else "automatic_max"] += g.max_score
        return s
    for g in grades:
        extra = g.extra_credit or 0.0
        if (nb.name, g.name) in manual:
            s["manual_max"] += g.max_score
            if g.needs_manual_grade:  # the formgrader clears it; an unchanged answer never has it (0 points)
                s["manual_pending"] += g.max_score
                s["pending_cells"].append(g.name)
            else:
                s["manual"] += (g.manual_score if g.manual_score is not None else g.auto_score or 0.0) + extra
        else:
            s["automatic_max"] += g.max_score
            if g.needs_manual_grade:  # held for review: zero until a person confirms or overrides it
                s["review"] = True
                s["pending_cells"].append(g.name)
            elif g.manual_score is not None:  # a reviewer's override
                s["automatic"] += g.manual_score + extra
            else:
                s["automatic"] += (g.auto_score or 0.0) + extra
    s["late_penalty"] = float(nb.late_submission_penalty or 0.0)
    return s


def late_policy(root: Path):
    """The course's late policy on final scores: penalty(student, score, seconds_late) -> points off.

    nbgrader applies the policy (AssignLatePenalties, with the course's LateSubmissionPlugin and its
    settings, the course folder's own nbgrader_config.py included) when a notebook is autograded, to
    its automatic points; a written answer graded later in the formgrader is not covered, so a late
    notebook under "zero" would end with its manual points. The grade tables apply the same plugin to
    each notebook's final score instead, bounded as nbgrader bounds it (0 to the score)."""
    from nbgrader.preprocessors import AssignLatePenalties

    cfg = load_config(root, settings_from=root)
    assign = AssignLatePenalties(config=cfg)
    assign.init_plugin()
    plugin = assign.plugin_inst

    def penalty(student: str, score: float, seconds_late: float) -> float:
        if seconds_late <= 0:
            return 0.0
        p = plugin.late_submission_penalty(student, score, seconds_late)
        return 0.0 if p is None else min(max(float(p), 0.0), score)
    return penalty


def grade_rows(root: Path = ROOT, selected: list[str] | tuple[str, ...] = (),
               failed: dict[tuple[str, str], str] | None = None) -> list[dict]:
    """One row per assignment and student of the gradebook (GRADE_COLUMNS, plus "notebooks").

    `failed` maps (assignment, student) to why this run could not grade them: their row says so
    instead of showing what an older run left in the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import course_collect

    db = root / "gradebook.db"
    if not db.exists():
        return []
    failed = failed or {}
    penalty = None  # the course's late policy, read once a late submission needs it
    rows = []
    with Gradebook(f"sqlite:///{db}") as gb:
        students = sorted(gb.students, key=lambda x: x.id)
        for a in sorted(gb.assignments, key=lambda x: x.name):
            if selected and a.name not in selected:
                continue
            manual = manual_cells(gb, a)
            for st in students:
                row = {k: "" for k in GRADE_COLUMNS}
                row.update(assignment=a.name, student_id=st.id, last_name=st.last_name or "",
                           first_name=st.first_name or "", email=st.email or "", notebooks=[])
                try:
                    sub = gb.find_submission(a.name, st.id)
                except MissingEntry:
                    sub = None
                if (a.name, st.id) in failed:
                    row.update(status="failed", notes=f"not graded: {failed[(a.name, st.id)]}")
                    rows.append(row)
                    continue
                if sub is None:
                    row.update(status="missing", notes="no submission")
                    rows.append(row)
                    continue
                row["timestamp"] = str(sub.timestamp or "")
                late = float(sub.total_seconds_late or 0.0)
                states = [notebook_state(nb, manual) for nb in sorted(sub.notebooks, key=lambda n: n.name)]
                if late > 0:  # the policy on each notebook's final score, manual points included
                    penalty = penalty or late_policy(root)
                    for x in states:
                        if not x["missing"]:
                            x["late_penalty"] = penalty(st.id, x["automatic"] + x["manual"], late)
                row["notebooks"] = states
                got = [x for x in states if not x["missing"]]
                notes = [f"{x['notebook']}.ipynb missing" for x in states if x["missing"]]
                if not got:
                    row.update(status="missing", notes="; ".join(notes) or "no notebook")
                    rows.append(row)
                    continue
                tot = {k: sum(x[k] for x in states) for k in ("automatic_max", "manual_max")}
                tot.update({k: sum(x[k] for x in got) for k in ("automatic", "manual", "manual_pending", "late_penalty")})
                review = any(x["review"] for x in got)
                pending = [c for x in got for c in x["pending_cells"]]
                row.update({k: f"{v:g}" for k, v in tot.items()})
                row["max_score"] = f"{tot['automatic_max'] + tot['manual_max']:g}"
                stamped = course_collect.collection_note(root, a.name, st.id)
                if stamped:  # the collection graded the inbound files' time, not the student's
                    notes.append(stamped)
                if late > 0:
                    notes.append(f"late by {_duration(late)}" + (f", penalty -{tot['late_penalty']:g}"
                                                                  if tot["late_penalty"] else ""))
                if review:
                    status = "review"
                    notes.append("automatic points held for review (batch_grades.csv says why): "
                                 + ", ".join(c for x in got if x["review"] for c in x["pending_cells"]))
                elif pending:
                    status = "awaiting grading"
                    notes.append(f"{len(pending)} written answer(s) to grade in the formgrader: " + ", ".join(pending))
                else:
                    status = "graded"
                    total = tot["automatic"] + tot["manual"] - tot["late_penalty"]
                    row["total"] = f"{max(total, 0.0):g}"
                row.update(status=status, notes="; ".join(notes))
                rows.append(row)
        known = {(r["assignment"], r["student_id"]) for r in rows}
        for (a, student), why in sorted(failed.items()):  # failed before the gradebook ever saw them
            if (a, student) not in known and (not selected or a in selected):
                row = {k: "" for k in GRADE_COLUMNS}
                row.update(assignment=a, student_id=student, status="failed", notes=f"not graded: {why}",
                           notebooks=[])
                rows.append(row)
    return rows


def _duration(seconds: float) -> str:
    """1 d 2 h 3 min (whole minutes; under a minute in seconds)."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    m = int(seconds // 60)
    parts = [(m // 1440, "d"), (m // 60 % 24, "h"), (m % 60, "min")]
    return " ".join(f"{n} {unit}" for n, unit in parts if n) or "0 min"


def write_grades_csv(root: Path = ROOT, failed: dict[tuple[str, str], str] | None = None,
                     path: Path | None = None) -> Path:
    """grades.csv from the gradebook (atomically): automatic and manual points apart, status.
    No cell can be a spreadsheet formula (files.spreadsheet_safe)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import files

    target = path or root / "grades.csv"
    files.write_csv(target, GRADE_COLUMNS, grade_rows(root, failed=failed), extrasaction="ignore")
    return target


from nbgrader.plugins import ExportPlugin  # noqa: E402  (nbgrader is imported above, by _speedups)


class GradesCsv(ExportPlugin):
    """`nbgrader export` (autograder/nbgrader_config.py: ExportApp.plugin_class): the course's grades.csv."""

    def export(self, gradebook) -> None:
        db = Path(gradebook.engine.url.database)
        write_grades_csv(db.parent, path=Path(self.to) if self.to else None)


def _cell(points: str, of: str) -> str:
    return f"{points} / {of}"


def score_table(labs: list[Lab], root: Path = ROOT, failed: dict | None = None, no_submission: bool = True) -> str:
    """The gradebook as a text table: automatic and manual points apart, pending and missing marked.

    no_submission=False leaves out the students who handed in nothing for an assignment (the demo:
    each sample student is written for one assignment)."""
    header = ("assignment", "student", "automatic", "manual (written)", "total", "status")
    rows = [header]
    for r in grade_rows(root, assignments(labs), failed):
        if not no_submission and r["status"] == "missing" and r["notes"] == "no submission":
            continue
        if r["status"] in ("missing", "failed"):
            rows.append((r["assignment"], r["student_id"], r["status"], "-", "-", r["notes"] and
                         f"{r['status']}: {r['notes']}" or r["status"]))
            continue
        auto = _cell(r["automatic"], r["automatic_max"]) if r["status"] != "review" else f"held / {r['automatic_max']}"
        if float(r["manual_max"] or 0) == 0:
            manual = "-"
        elif float(r["manual_pending"] or 0) > 0:
            done = float(r["manual_max"]) - float(r["manual_pending"])
            manual = (f"pending / {r['manual_max']}" if done == 0 else
                      f"{r['manual']} + {r['manual_pending']} pending / {r['manual_max']}")
        else:
            manual = _cell(r["manual"], r["manual_max"])
        total = _cell(r["total"], r["max_score"]) if r["total"] != "" else "pending"
        status = r["status"] + (f": {r['notes']}" if r["notes"] else "")
        rows.append((r["assignment"], r["student_id"], auto, manual, total, status))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows)


# ----------------------------------------------------------------------------- feedback

def feedback(labs: list[Lab], force: bool = False, root: Path = ROOT) -> dict:
    """Feedback HTML from the gradebook as it is now (manual grades from the formgrader included)
    into feedback/<student>/<assignment>/: a notebook with something no person has graded yet (a
    written answer, a notebook held for review) is held back, and an older copy of it taken out,
    unless `force`; its page then says "awaiting grading" for those cells. Returns
    {"released": [...], "held": [...], "problems": [...]} (student/assignment/notebook)."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import feedback as fb
    import files

    done: dict[str, list[str]] = {"released": [], "held": [], "problems": []}
    db = root / "gradebook.db"
    if not db.exists():
        raise PipelineError(f"{rel(db, root)} missing: grade the submissions first (make autograde)")
    scratch = files.scratch_dir("feedback")
    try:
        cfg = load_config(root, settings_from=root)
        cfg.CourseDirectory.feedback_directory = str(scratch)  # absolute: feedback/ only gets what is released
        cfg.Application.log_level = "ERROR"
        api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
        for a in assignments(labs):
            folders = sorted(p for p in (root / "autograded").glob(f"*/{a}") if p.is_dir() and not p.is_symlink())
            for folder in folders:
                student = folder.parent.name
                with Gradebook(f"sqlite:///{db}") as gb:
                    try:
                        gb.find_submission(a, student)
                    except MissingEntry:
                        done["problems"].append(f"{student}/{a}: in autograded/ but not in the gradebook; skipped")
                        continue
                r = api.generate_feedback(a, student, force=True)  # (it writes comment rows: no session open)
                if not r.get("success"):
                    detail = (r.get("error") or r.get("log") or "").strip().splitlines()
                    done["problems"].append(f"{student}/{a}: nbgrader generate_feedback failed: "
                                            f"{detail[-1] if detail else 'no detail'}")
                    continue
                with Gradebook(f"sqlite:///{db}") as gb:
                    out = scratch / student / a
                    target = root / "feedback" / student / a
                    for page in sorted(out.glob("*")):
                        if not files.is_regular(page):
                            continue
                        who = f"{student}/{a}/{page.stem}"
                        pending = fb.pending_in_gradebook(gb, a, student, page.stem) if page.suffix == ".html" else []
                        if pending and not force:
                            done["held"].append(f"{who}: {len(pending)} cell(s) awaiting grading ({', '.join(pending)})")
                            if files.is_regular(target / page.name):
                                (target / page.name).unlink()
                            continue
                        files.copy_regular(page, target / page.name)
                        if page.suffix == ".html":
                            done["released"].append(who + (f" (forced: {len(pending)} cell(s) awaiting grading)"
                                                            if pending else ""))
    finally:
        files.rmtree(scratch)
    for kind in ("released", "held", "problems"):
        for line in done[kind]:
            print(f"{kind:<9} {line}")
    print(f"feedback/: {len(done['released'])} notebook(s) released, {len(done['held'])} held back"
          + (" (grade them in the formgrader, then run this again; `make feedback FORCE=1` releases them as they "
             "are, saying \"awaiting grading\")" if done["held"] else ""))
    return done


# ----------------------------------------------------------------------------- grading (the batch)

def _batch():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import batch

    return batch


def grade_course(labs: list[Lab], root: Path = ROOT, progress: bool = True, workers: int | None = None) -> dict:
    """The sandboxed batch grader (autograder/batch.py) on root/submitted/, then grades.csv.

    grades.csv is removed before grading and written again only when the batch finished: a run
    that fails never leaves a table of an earlier run behind. Raises PipelineError (the batch's)."""
    batch = _batch()
    submitted = root / "submitted"
    names = [a for a in assignments(labs) if any(p.is_dir() for p in submitted.glob(f"*/{a}"))]
    for a in assignments(labs):
        if a not in names:
            print(f"no submissions for {a} in {rel(submitted, root)}/")
    grades = root / "grades.csv"
    if grades.exists():
        grades.unlink()
    if not names:
        return {"results": [], "assignments": []}
    try:
        result = batch.run_batch(names, root, submitted, workers=workers, csv_path=root / "batch_grades.csv",
                                 progress=progress)
    except PipelineError as e:
        if grades.exists():
            grades.unlink()
        raise PipelineError(f"{e} (grades.csv was not written: run the command again once this is fixed)") from None
    print(batch.summary(result))
    result["assignments"] = names
    return result


def autograde(labs: list[Lab], root: Path = ROOT, progress: bool = True) -> None:
    submitted = root / "submitted"
    if not submitted.is_dir() or not any(submitted.iterdir()):
        print(f"{rel(submitted, root)}/ is empty: copy submissions to submitted/<student>/<assignment>/<name>.ipynb "
              f"(or run `make demo` to grade the sample students in {rel(DEMO)}/, apart from this gradebook)")
        return
    result = grade_course(labs, root, progress=progress)
    print()
    print(score_table(labs, root, _failed(result)))
    print(f"\ngrades.csv, batch_grades.csv, autograded/, feedback/<student>/<assignment>/*.html (no hidden tests; "
          f"notebooks awaiting manual grading are held back: grade them in the formgrader, then `make feedback`)")


def _failed(result: dict) -> dict:
    return {(r.job.assignment, r.job.student): r.error for r in result.get("results", []) if r.report is None}


def course_labs(folder: Path, selected: list[str] | tuple[str, ...] = ()) -> list[Lab]:
    """The notebooks of a course folder that has source/ but no notebooks/ (a demo course)."""
    labs = [Lab(p.parent.name, p.stem, folder) for p in sorted((folder / "source").glob("*/*.ipynb"))]
    if not labs:
        raise PipelineError(f"{folder} holds no source/<assignment>/*.ipynb: not a course folder")
    unknown = [a for a in selected if a not in assignments(labs)]
    if unknown:
        raise PipelineError(f"{folder} has no assignment {', '.join(unknown)} "
                            f"(it has {', '.join(assignments(labs))})")
    return [lab for lab in labs if not selected or lab.assignment in selected]


def make_demo_course(labs: list[Lab], demo: Path = DEMO, root: Path = ROOT) -> Path:
    """A course folder of its own for the sample students (recreated each time): source/ and
    release/ of the given assignments, their sample submissions, an nbgrader_config.py that points
    nbgrader (and the formgrader) at it. The instructor's gradebook.db and submitted/ are not read."""
    missing = [rel(p, root) for lab in labs for p in (lab.source, lab.release) if not p.exists()]
    if missing:
        raise PipelineError(f"{', '.join(missing)} missing: run `make build execute release` first")
    demo = demo.resolve()
    if demo == root.resolve() or demo in root.resolve().parents:
        raise PipelineError(f"the demo course cannot be {demo}: it would replace the course itself")
    if demo.exists():
        if not (demo / DEMO_MARK).exists():
            raise PipelineError(f"{demo} exists and is not a demo course made by `make demo` "
                                f"(no {DEMO_MARK} in it): move it away or pick another folder")
        shutil.rmtree(demo)
    demo.mkdir(parents=True)
    (demo / DEMO_MARK).write_text("made by `make demo` (autograder/course.py); recreated on every run\n")
    for a in assignments(labs):
        for kind in ("source", "release"):
            shutil.copytree(root / kind / a, demo / kind / a, ignore=COPY_IGNORE)
    (demo / "nbgrader_config.py").write_text(
        "# The demo course (autograder/course.py make_demo_course): the course's settings, this folder as root.\n"
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(CONFIG)!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(demo)!r}\n")
    write_submissions(labs, demo)
    return demo


def demo(labs: list[Lab], demo_dir: Path = DEMO, root: Path = ROOT, progress: bool = True,
         workers: int | None = None) -> str:
    """Grade the sample students in their own course folder; returns the score table."""
    folder = make_demo_course(labs, demo_dir, root)
    demo_labs = [Lab(lab.assignment, lab.name, folder) for lab in labs]
    result = grade_course(demo_labs, folder, progress=progress, workers=workers)
    return score_table(demo_labs, folder, _failed(result), no_submission=False)


def write_submissions(labs: list[Lab], root: Path = ROOT) -> list[Path]:
    import nbformat

    missing = [rel(lab.release) for lab in labs if not lab.release.exists()]
    if missing:
        raise PipelineError(f"{', '.join(missing)} missing: run `make release` first")
    written = []
    for lab in labs:
        for student, nb in sample_submissions(lab).items():
            target = root / "submitted" / student / lab.assignment / f"{lab.name}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, target)
            written.append(target)
    return written


# ----------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "execute", "release", "validate", "submissions", "autograde",
                                            "demo", "feedback", "scores", "list"])
    parser.add_argument("assignments", nargs="*", help="restrict to these assignments (default: all)")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="course directory (default: this repository); build and list only")
    parser.add_argument("--demo-dir", type=Path, default=DEMO,
                        help=f"demo and submissions: the demo course folder (default: {rel(DEMO)})")
    parser.add_argument("--course", type=Path, default=ROOT,
                        help="autograde, feedback, scores: the course folder graded (default: this repository; "
                             f"e.g. {rel(DEMO)})")
    parser.add_argument("--force", action="store_true",
                        help="feedback: release notebooks whose written answers are not graded yet too")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["nbgrader"]:  # `course.py nbgrader ARGS`: nbgrader's own command line, sped up
        from nbgrader.apps.nbgraderapp import main as nbgrader_main

        sys.argv = ["nbgrader", *argv[1:]]
        return nbgrader_main()
    args = parser.parse_args(argv)
    try:
        if args.root.resolve() != ROOT and args.command not in ("build", "list"):
            raise PipelineError(f"--root works with build and list only, not {args.command}")
        course_dir = args.course.resolve()
        if course_dir != ROOT and args.command in ("autograde", "feedback", "scores"):
            labs = course_labs(course_dir, args.assignments)  # a course folder without notebooks/ (the demo)
        else:
            labs = discover(args.assignments, root=args.root.resolve())
        if not labs:
            print("no notebooks under notebooks/*/*.py: nothing to do")
            return 0
        if args.command == "list":
            print("\n".join(f"{lab.assignment}/{lab.name}" for lab in labs))
        elif args.command == "build":
            for p in build(labs):
                print(f"wrote {rel(p)}")
            for p in stale_sources(labs, root=args.root.resolve()):
                p.unlink()
                print(f"removed {rel(p)} (its notebooks/ source is gone)")
            print(f"built {len(labs)} notebook(s): source/ in sync with notebooks/")
        elif args.command == "execute":
            missing = [rel(lab.source) for lab in labs if not lab.source.exists()]
            if missing:
                raise PipelineError(f"{', '.join(missing)} missing: run `make build` first")
            done, errors = _parallel(execute_one, [str(lab.source) for lab in labs])
            for d in done:
                print(f"executed {d}")
            if errors:
                raise PipelineError("\n".join(errors))
        elif args.command == "release":
            release(labs)
            print("released " + ", ".join(f"release/{a}/" for a in assignments(labs)))
        elif args.command == "validate":
            validate(labs)
        elif args.command == "submissions":
            folder = make_demo_course(labs, args.demo_dir)
            print(f"wrote the sample submissions into {rel(folder / 'submitted')}/ (a demo course; the course's "
                  f"own submitted/ is left alone)")
        elif args.command == "autograde":
            autograde(labs, course_dir)
        elif args.command == "demo":
            table = demo(labs, args.demo_dir)
            folder = args.demo_dir.resolve()
            print()
            print(table)
            print(f"\nThe demo course is {rel(folder)}/ (its own gradebook.db, submitted/, autograded/, feedback/, "
                  f"grades.csv); the course's gradebook.db and submitted/ were not touched. Written answers: "
                  f"`cd {rel(folder)} && {Path(sys.executable).parent / 'jupyter'} lab` opens the formgrader on it, then "
                  f"`make feedback COURSE_DIR={rel(folder)}` (docs/instructors.md, \"Grading the written answers\").")
        elif args.command == "feedback":
            feedback(labs, force=args.force, root=course_dir)
        elif args.command == "scores":
            if not (course_dir / "gradebook.db").exists():
                print(f"no {rel(course_dir / 'gradebook.db')}: nothing is graded yet (make autograde)")
            else:
                print(score_table(labs, course_dir))
                print(f"\nwrote {rel(write_grades_csv(course_dir))}")
    except PipelineError as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
