"""The student kit: what a student receives, built from this repository (`make student-kit`).

    python -m autograder.kit.build [--out build/student-kit]

writes

    build/student-kit/llmrl-course-kit/          the kit as a folder
        README.md                                 for the student: set up, open JupyterLab, tests, hand in
        setup.sh, lab.sh                          one-command set-up (a venv in .venv/) and JupyterLab
        requirements.txt                          pinned from pyproject.toml (torch==2.13.0 exactly)
        wheels/llmrl-<version>-py3-none-any.whl   the course library, built offline from pyproject.toml
        assignments/<assignment>/<name>.ipynb     the release notebooks, byte for byte
        LICENSE, LICENSE-TEXT.md                  the licences: code MIT, course text CC BY 4.0
        MANIFEST.txt                              every file above with its size and sha256
    build/student-kit/llmrl-course-kit.tar.gz    the same, as archives (one top folder,
    build/student-kit/llmrl-course-kit.zip       reproducible: the same sources give the same bytes)

The kit holds no solution, no hidden test, no source notebook and nothing of autograder/: the release
notebooks are nbgrader's student versions, and the wheel holds lib/llmrl only (its .py files,
lab19's stored runs and the course's trained models, llmrl/models/). autograder/tests/kit/test_student_kit.py checks both, installs the kit into a
new virtual environment outside the repository and runs every notebook up to its first task.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from autograder.course.layout import HIDDEN_MARKERS, SOLUTION_MARKERS, discover, rel

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "autograder" / "kit" / "templates"  # the kit's README.md, setup.sh and lab.sh
KIT_NAME = "llmrl-course-kit"
DEFAULT_OUT = ROOT / "build" / "student-kit"
# Besides the library's own dependencies (torch, numpy, matplotlib, ipywidgets, tqdm): what a student
# needs to open and run the notebooks, pinned as in pyproject's dev extra. nbgrader is not among
# them: a student hands in the .ipynb file (a JupyterHub course has its own assignment list).
STUDENT_TOOLS = ("jupyterlab", "jupyter_server", "ipykernel")
SCRIPTS = ("setup.sh", "lab.sh")
# The licence files (code: MIT; course text: CC BY 4.0) travel with the kit and inside the wheel.
LICENSES = ("LICENSE", "LICENSE-TEXT.md")
# The earliest time a zip file can hold (1980-01-01): a kit time is never before it.
ZIP_EPOCH = 315532800
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)$")


class KitError(Exception):
    """Something the kit cannot be built without; the message says what to do."""


@dataclass(frozen=True)
class Kit:
    folder: Path
    wheel: Path
    archives: tuple[Path, ...]
    notebooks: tuple[Path, ...]
    time: int  # the modification time of every file in the archives (kit_time)


def kit_time(notebooks: list[tuple[str, str, Path]]) -> int:
    """The time the kit's files carry in its archives: SOURCE_DATE_EPOCH when it is set (a reproducible
    build's convention), else the newest modification time of what goes into the kit (the release
    notebooks, the library, the kit's templates, pyproject.toml). The same sources give the same
    archives, and a student's JupyterLab shows when the course last changed them, not a made-up date."""
    if os.environ.get("SOURCE_DATE_EPOCH", "").isdigit():
        return _even(int(os.environ["SOURCE_DATE_EPOCH"]))
    inputs = [p for _, _, p in notebooks] + [ROOT / "pyproject.toml", *(ROOT / n for n in LICENSES)]
    inputs += [p for p in (ROOT / "lib" / "llmrl").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    inputs += [p for p in TEMPLATES.iterdir() if p.is_file()]
    return _even(max(int(p.stat().st_mtime) for p in inputs))


def _even(t: int) -> int:
    """Zip files keep times in steps of 2 s: an even second reads back the same from every archive."""
    return max(t - t % 2, ZIP_EPOCH)


def _newest(folder: Path) -> int:
    return _even(max((int(p.stat().st_mtime) for p in folder.rglob("*") if p.is_file()), default=ZIP_EPOCH))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirements(proj: dict | None = None) -> list[str]:
    """The kit's pins: the library's dependencies and the student tools, each `name==version`."""
    proj = proj or project()
    deps = list(proj.get("dependencies", []))
    dev = {(_norm(PIN.match(r).group(1)) if PIN.match(r) else r): r
           for r in proj.get("optional-dependencies", {}).get("dev", [])}
    for tool in STUDENT_TOOLS:
        if _norm(tool) not in dev:
            raise KitError(f"pyproject.toml's dev extra pins no {tool}: the kit needs an exact pin for it")
        deps.append(dev[_norm(tool)])
    for req in deps:
        m = PIN.match(req.strip())
        if not m:
            raise KitError(f"pyproject.toml: {req!r} is not pinned with == (the kit installs exact versions)")
        if _norm(m.group(1)) == "torch" and m.group(2) != "2.13.0":
            raise KitError(f"pyproject.toml: torch must be ==2.13.0 (another spec pulls a CUDA build), got {req!r}")
    return deps


def release_notebooks(root: Path = ROOT) -> list[tuple[str, str, Path]]:
    """(assignment, name, path) of every release notebook, in the course's order (labs, then homework)."""
    out = []
    for lab in discover(root=root):
        if not lab.release.exists():
            raise KitError(f"{rel(lab.release, root)} missing: run `make release A={lab.assignment}` first")
        text = lab.release.read_text(encoding="utf-8")
        for marker in SOLUTION_MARKERS + HIDDEN_MARKERS:
            if marker in text:
                raise KitError(f"{rel(lab.release, root)} holds {marker!r}: it is not a student version; "
                               f"run `make release A={lab.assignment}`")
        out.append((lab.assignment, lab.name, lab.release))
    if not out:
        raise KitError("no notebooks under notebooks/*/*.py: nothing to put in the kit")
    return sorted(out, key=_course_order)


def _copy_library(dest: Path) -> None:
    """lib/llmrl without caches or build leftovers (exactly what the wheel is made from)."""
    shutil.copytree(ROOT / "lib" / "llmrl", dest / "lib" / "llmrl",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints"))


def build_wheel(out_dir: Path, readme: str, stamp: int) -> Path:
    """The course library as a wheel, built offline with this environment's setuptools.

    The build runs in a scratch copy holding pyproject.toml and lib/llmrl only, so nothing else of the
    repository can reach the wheel; its README.md (the package's long description) is the kit's
    README, not the instructors' one.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llmrl-wheel-") as tmp:
        stage = Path(tmp) / "src"
        stage.mkdir()
        shutil.copy2(ROOT / "pyproject.toml", stage / "pyproject.toml")
        for name in LICENSES:  # pyproject's license-files
            shutil.copy2(ROOT / name, stage / name)
        (stage / "README.md").write_text(readme, encoding="utf-8")
        _copy_library(stage)
        before = set(out_dir.glob("*.whl"))
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(stamp), "PIP_NO_INDEX": "1"}
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--no-build-isolation", "--no-index", "--wheel-dir", str(out_dir), str(stage)],
            cwd=tmp, env=env, text=True, capture_output=True)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise KitError("building the llmrl wheel failed (pip wheel --no-build-isolation; this environment "
                           "needs setuptools>=64):\n" + "\n".join(detail))
    version = project()["version"]
    wheel = out_dir / f"llmrl-{version}-py3-none-any.whl"
    if not wheel.exists():
        made = sorted(set(out_dir.glob("*.whl")) - before)
        raise KitError(f"pip wheel wrote {[p.name for p in made] or 'nothing'}, expected {wheel.name}")
    return wheel


def _render(template: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        template = template.replace("@" + key + "@", value)
    left = re.findall(r"@[A-Z_]+@", template)
    if left:
        raise KitError(f"kit template placeholder(s) without a value: {sorted(set(left))}")
    return template


def _title(path: Path) -> str:
    """The notebook's first heading ("Lab 11: the language model as a policy")."""
    import json

    for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in _cell_text(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def _assignment_table(notebooks: list[tuple[str, str, Path]]) -> str:
    rows = ["| notebook | what it is |", "|---|---|"]
    for assignment, name, path in notebooks:
        rows.append(f"| `assignments/{assignment}/{name}.ipynb` | {_title(path)} |")
    return "\n".join(rows)


def _course_order(item) -> tuple:
    """Labs by number, then homework (lab11, lab19, lab21, hw4); within one, by title (part 1, part 2)."""
    assignment = item[0]
    digits = re.sub(r"\D", "", assignment)
    return (not assignment.startswith("lab"), int(digits) if digits else 0, assignment, _title(item[2]), item[1])


def student_readme(notebooks, reqs: list[str], wheel_name: str) -> str:
    torch_pin = next(r for r in reqs if _norm(r.split("==")[0]) == "torch")
    py = project().get("requires-python", ">=3.11").lstrip(">=")
    return _render((TEMPLATES / "README.md").read_text(encoding="utf-8"), {
        "ASSIGNMENTS": _assignment_table(notebooks), "WHEEL": wheel_name, "TORCH": torch_pin,
        "PYTHON": py, "FIRST": f"assignments/{notebooks[0][0]}/{notebooks[0][1]}.ipynb",
    })


def _manifest(folder: Path) -> str:
    lines = []
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != "MANIFEST.txt":
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            lines.append(f"{digest}  {p.stat().st_size:>10}  {p.relative_to(folder).as_posix()}")
    return "\n".join(lines) + "\n"


def _entries(folder: Path) -> list[tuple[str, Path]]:
    """(name inside the archive, file) for every file of the kit, sorted."""
    return [(f"{folder.name}/{p.relative_to(folder).as_posix()}", p)
            for p in sorted(folder.rglob("*")) if p.is_file()]


def _mode(p: Path) -> int:
    return 0o755 if os.access(p, os.X_OK) else 0o644


def write_tar(folder: Path, target: Path, stamp: int | None = None) -> Path:
    stamp = _newest(folder) if stamp is None else stamp
    tmp = target.with_suffix(".part")
    with open(tmp, "wb") as raw:
        import gzip
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=stamp) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                dirs = sorted({str(Path(name).parent) for name, _ in _entries(folder)})
                for d in dirs:
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, stamp
                    tar.addfile(info)
                for name, p in _entries(folder):
                    info = tarfile.TarInfo(name)
                    data = p.read_bytes()
                    info.size, info.mode, info.mtime = len(data), _mode(p), stamp
                    tar.addfile(info, io.BytesIO(data))
    tmp.replace(target)
    return target


def write_zip(folder: Path, target: Path, stamp: int | None = None) -> Path:
    stamp = _newest(folder) if stamp is None else stamp
    tmp = target.with_suffix(".part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, p in _entries(folder):
            info = zipfile.ZipInfo(name, date_time=time.localtime(stamp)[:6])  # zip keeps local time
            info.external_attr = (stat.S_IFREG | _mode(p)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, p.read_bytes())
    tmp.replace(target)
    return target


def build(out: Path = DEFAULT_OUT) -> Kit:
    """Build the kit folder and its archives under `out` (the folder is replaced as a whole)."""
    out = Path(out).resolve()
    if out == ROOT or ROOT in out.parents and out.relative_to(ROOT).parts[0] in (
            "lib", "notebooks", "source", "release", "autograder"):
        raise KitError(f"--out {out} is inside a course folder; use a folder of its own (default {DEFAULT_OUT})")
    notebooks = release_notebooks()
    reqs = requirements()
    version = project()["version"]
    wheel_name = f"llmrl-{version}-py3-none-any.whl"
    readme = student_readme(notebooks, reqs, wheel_name)
    stamp = kit_time(notebooks)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".kit-", dir=out))
    try:
        folder = staging / KIT_NAME
        (folder / "wheels").mkdir(parents=True)
        wheel = build_wheel(folder / "wheels", readme, stamp)
        (folder / "README.md").write_text(readme, encoding="utf-8")
        (folder / "requirements.txt").write_text(
            "# The course's pinned packages (./setup.sh installs them with the wheel in wheels/).\n"
            + "\n".join(reqs) + "\n", encoding="utf-8")
        for name in LICENSES:
            shutil.copyfile(ROOT / name, folder / name)
        for script in SCRIPTS:
            shutil.copyfile(TEMPLATES / script, folder / script)
            (folder / script).chmod(0o755)
        copied = []
        for assignment, name, path in notebooks:
            dest = folder / "assignments" / assignment / f"{name}.ipynb"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            copied.append(dest)
        (folder / "MANIFEST.txt").write_text(_manifest(folder), encoding="utf-8")
        final = out / KIT_NAME
        if final.exists():
            shutil.rmtree(final)
        folder.replace(final)
        for p in sorted(final.rglob("*"), reverse=True):  # the folder as the archives have it
            os.utime(p, (stamp, stamp), follow_symlinks=False)
        archives = (write_tar(final, out / f"{KIT_NAME}.tar.gz", stamp),
                    write_zip(final, out / f"{KIT_NAME}.zip", stamp))
        problems = leaks([final, *archives])
        if problems:  # never leave a kit that gives answers away where someone could hand it out
            shutil.rmtree(final, ignore_errors=True)
            for a in archives:
                a.unlink(missing_ok=True)
            raise KitError("the kit would give away what students must not see (nothing written):\n"
                           + "\n".join(problems[:20]))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Kit(folder=final, wheel=final / "wheels" / wheel.name, archives=archives,
               notebooks=tuple(final / p.relative_to(folder) for p in copied), time=stamp)


# ----------------------------------------------------------------------------- what must never be in it

FORBIDDEN_PARTS = {"source", "notebooks", "autograder", "corpus", "samples", "submitted", "autograded",
                   "feedback", ".git", "gradebook.db", "gradebook.db-journal", "nbgrader_config.py",
                   "grades.csv", "batch_grades.csv", "release"}
MIN_LINE = 16          # a shorter line (`return out`, `else:`) says nothing about where it came from
LIBRARY_RUN = 3        # the library shares single lines with some answers; a run of 3 is copied text


@dataclass
class Secrets:
    """Text that must not reach a student, with where it comes from.

    lines: distinctive lines (stripped, at least MIN_LINE characters, shown nowhere in the student's
    version) of every solution region, hidden-test region, corpus spec and sample submission;
    runs: every LIBRARY_RUN consecutive lines of a solution or hidden-test region with at least one
    distinctive line (the library may share a line with an answer, not a passage).
    """

    lines: dict[str, str]
    runs: dict[str, str]


def _cell_text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _regions(text: str, begin: str, end: str) -> list[list[str]]:
    out, cur = [], None
    for line in text.splitlines():
        s = line.strip()
        if s.endswith(begin):
            cur = []
        elif s.endswith(end) and cur is not None:
            out.append(cur)
            cur = None
        elif cur is not None:
            cur.append(line)
    return out


def secrets(root: Path = ROOT) -> Secrets:
    """The solution, hidden-test, corpus and sample text of the course at `root`."""
    import json

    lines: dict[str, str] = {}
    runs: dict[str, str] = {}
    public: set[str] = set()
    for p in sorted((root / "release").glob("*/*.ipynb")):
        for c in json.loads(p.read_text(encoding="utf-8"))["cells"]:
            public.update(l.strip() for l in _cell_text(c).splitlines())
    for lab in discover(root=root):
        nb = json.loads(lab.source.read_text(encoding="utf-8"))
        regions = []
        for c in nb["cells"]:
            meta = c.get("metadata", {}).get("nbgrader", {})
            text = _cell_text(c)
            found = []
            for begin, end in (SOLUTION_MARKERS, HIDDEN_MARKERS):
                found += [(r, "hidden test" if begin == HIDDEN_MARKERS[0] else "solution")
                          for r in _regions(text, begin, end)]
            if not found and meta.get("solution") and c.get("cell_type") == "markdown":
                found = [(text.splitlines(), "written answer")]
            gid = meta.get("grade_id", c.get("id", "?"))
            regions += [(r, f"{rel(lab.source, root)} {gid} ({kind})") for r, kind in found]
        inside = {l.strip() for r, _ in regions for l in r}
        for c in nb["cells"]:  # lines this notebook also shows outside its secret regions
            public.update(l.strip() for l in _cell_text(c).splitlines() if l.strip() not in inside)
        for region, where in regions:
            stripped = [l.strip() for l in region if l.strip()]
            for l in stripped:
                lines.setdefault(l, where)
            for i in range(len(stripped) - LIBRARY_RUN + 1):
                runs.setdefault("\n".join(stripped[i:i + LIBRARY_RUN]), where)
    library: set[str] = set()
    for p in sorted((root / "lib" / "llmrl").rglob("*.py")):
        library.update(l.strip() for l in p.read_text(encoding="utf-8").splitlines())
    # the corpus's specs and entries (not its catch_rates.py, a tool: code, no answer)
    for p in [q for q in sorted((root / "autograder" / "corpus").glob("*.py")) if q.name != "catch_rates.py"] + \
            sorted((root / "autograder" / "samples").rglob("*.py")):
        for l in p.read_text(encoding="utf-8").splitlines():
            s = l.strip()
            if len(s) >= 24 and s not in library:
                lines.setdefault(s, f"{rel(p, root)} (instructor's corpus)")

    # A line that a public line contains (`f(x)` hidden, `_y = f(x)` shown; a test's message quoting
    # a solution's expression) is shown to the student already: not a secret.
    shown = "\n".join(public)

    def distinctive(l: str) -> bool:
        return len(l) >= MIN_LINE and l not in public and l not in shown
    return Secrets(
        lines={l: w for l, w in lines.items() if distinctive(l)},
        runs={r: w for r, w in runs.items() if any(distinctive(l) for l in r.split("\n"))},
    )


def _normalized(text: str) -> str:
    return "\n" + "\n".join(l.strip() for l in text.splitlines() if l.strip()) + "\n"


def _documents(name: str, data: bytes):
    """(where, normalized text, is_library_code) of one file, looking inside wheels and archives."""
    import json

    low = name.lower()
    if low.endswith((".whl", ".zip")):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for m in z.namelist():
                if not m.endswith("/"):
                    yield from _documents(f"{name}!{m}", z.read(m))
        return
    if low.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            for m in t.getmembers():
                if m.isfile():
                    yield from _documents(f"{name}!{m.name}", t.extractfile(m).read())
        return
    text = data.decode("utf-8", errors="replace")
    if low.endswith(".ipynb"):
        try:
            cells = json.loads(text).get("cells", [])
            parts = [_cell_text(c) for c in cells]
            for c in cells:
                for o in c.get("outputs", []) or []:
                    parts.append(json.dumps(o))
            text = "\n".join(parts)
        except (ValueError, AttributeError):
            pass  # scanned as plain text
    inner = name.split("!")[-1]
    is_library = ".whl!" in name and inner.startswith("llmrl/") and inner.endswith(".py")
    yield name, _normalized(text), is_library


def _path_problems(name: str) -> list[str]:
    parts = [p for p in re.split(r"[/!]", name) if p]
    bad = [p for p in parts if p in FORBIDDEN_PARTS]
    return [f"{name}: the path names {bad[0]!r} (an instructor's folder or file)"] if bad else []


def leaks(paths, root: Path = ROOT, found: Secrets | None = None) -> list[str]:
    """Every problem with the kit's files (folders are walked; archives and wheels are opened):
    a solution, hidden test, corpus or sample line anywhere (a run of LIBRARY_RUN lines inside the
    library's code), an nbgrader marker, a database file or an instructor's path. Empty: clean."""
    found = found or secrets(root)
    problems: list[str] = []
    files: list[tuple[str, str, bytes]] = []  # (shown name, the part of it whose folders are checked, bytes)
    for base in paths:
        base = Path(base)
        if base.is_dir():
            files += [(f"{base.name}/{p.relative_to(base).as_posix()}", p.relative_to(base).as_posix(), p.read_bytes())
                      for p in sorted(base.rglob("*")) if p.is_file()]
        else:
            files.append((base.name, base.name, base.read_bytes()))
    for name, checked, data in files:
        for where, text, is_library in _documents(name, data):
            problems += _path_problems(checked + where[len(name):])
            if "SQLite format 3" in text[:200]:
                problems.append(f"{where}: an SQLite database (a gradebook?)")
            for marker in ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS",
                           "### END HIDDEN TESTS"):
                if marker in text:
                    problems.append(f"{where}: holds the marker {marker!r}")
            if is_library:
                hits = [(r, w) for r, w in found.runs.items() if "\n" + r + "\n" in text]
                problems += [f"{where}: {LIBRARY_RUN} lines of {w}, starting {r.splitlines()[0]!r}"
                             for r, w in hits[:5]]
            else:
                hits = [(l, w) for l, w in found.lines.items() if l in text]
                problems += [f"{where}: a line of {w}: {l!r}" for l, w in hits[:5]]
    return problems


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.kit.build", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        kit = build(args.out)
    except KitError as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 1
    def show(p):
        try:
            return p.relative_to(ROOT)
        except ValueError:
            return p
    print(f"student kit: {show(kit.folder)}/ ({_size(kit.folder) / 1e6:.1f} MB, {len(kit.notebooks)} notebooks)")
    for a in kit.archives:
        print(f"             {show(a)} ({_size(a) / 1e6:.1f} MB)")
    print(f"a student runs ./setup.sh, then ./lab.sh (see {show(kit.folder)}/README.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
