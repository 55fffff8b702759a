"""The student kit's files: exactly what a student needs, and nothing a student must not see.

Built here into a temporary folder (about 2 s, no install). Installing it into a new virtual
environment and running its notebooks is autograder/tests/kit/test_student_kit.py (`make test-kit`).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from autograder.course import layout
from autograder.kit import build as student_kit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    return student_kit.build(tmp_path_factory.mktemp("kit") / "build")


@pytest.fixture(scope="module")
def found():
    return student_kit.secrets()


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def library_files() -> list[str]:
    """What the wheel must hold of lib/llmrl: its tracked .py files, lab19's stored runs and the
    course's trained models with their manifest (llmrl.store.shipped)."""
    try:
        out = subprocess.run(["git", "ls-files", "lib/llmrl"], cwd=ROOT, text=True, capture_output=True, check=True)
        tracked = out.stdout.split()
    except (OSError, subprocess.CalledProcessError):  # no git: what is on disk
        tracked = [p.relative_to(ROOT).as_posix() for p in (ROOT / "lib" / "llmrl").rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts]
    return sorted(p[len("lib/"):] for p in tracked if p.endswith(".py") or re.search(r"labs/[^/]+\.json$", p)
                  or re.search(r"models/([^/]+\.pt|MANIFEST\.json)$", p))


def test_the_kit_holds_exactly_what_a_student_needs(kit):
    labs = layout.discover()
    want = {"README.md", "setup.sh", "lab.sh", "requirements.txt", "MANIFEST.txt", "LICENSE", "LICENSE-TEXT.md",
            f"wheels/llmrl-{student_kit.project()['version']}-py3-none-any.whl"}
    want |= {f"assignments/{lab.assignment}/{lab.name}.ipynb" for lab in labs}
    assert set(files_of(kit.folder)) == want
    for script in student_kit.SCRIPTS:
        assert (kit.folder / script).stat().st_mode & 0o111, f"{script} must be executable"
    manifest = {line.split()[2]: (line.split()[0], int(line.split()[1]))
                for line in (kit.folder / "MANIFEST.txt").read_text().splitlines()}
    assert set(manifest) == want - {"MANIFEST.txt"}
    import hashlib
    for name, (digest, size) in manifest.items():
        data = (kit.folder / name).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (digest, size), name


def test_the_notebooks_are_the_release_notebooks_byte_for_byte(kit):
    for lab in layout.discover():
        kit_nb = kit.folder / "assignments" / lab.assignment / f"{lab.name}.ipynb"
        assert kit_nb.read_bytes() == lab.release.read_bytes(), f"{kit_nb.name} is not release/{lab.assignment}/"
        nb = json.loads(kit_nb.read_text())
        assert not [c for c in nb["cells"] if c["cell_type"] == "code" and c.get("outputs")], "outputs in a release"


def test_both_archives_hold_the_kit_folder_byte_for_byte_with_runnable_scripts(kit):
    folder = {f"{student_kit.KIT_NAME}/{k}": v for k, v in files_of(kit.folder).items()}
    tar_path, zip_path = kit.archives
    with tarfile.open(tar_path) as t:
        members = {m.name: m for m in t.getmembers() if m.isfile()}
        assert {m: t.extractfile(members[m]).read() for m in members} == folder
        for script in student_kit.SCRIPTS:
            assert members[f"{student_kit.KIT_NAME}/{script}"].mode == 0o755
        assert all(m.uid == 0 and m.mtime == kit.time for m in members.values())
    with zipfile.ZipFile(zip_path) as z:
        assert {n: z.read(n) for n in z.namelist()} == folder
        for script in student_kit.SCRIPTS:
            assert (z.getinfo(f"{student_kit.KIT_NAME}/{script}").external_attr >> 16) & 0o777 == 0o755


def test_the_files_carry_the_time_the_course_last_changed_them(kit):
    """Not a made-up date (JupyterLab said "Modified 26y ago" of every file): the newest modification
    time of the notebooks, library and templates the kit is made of, in the archives and the folder."""
    newest = max(int(lab.release.stat().st_mtime) for lab in layout.discover())
    assert kit.time >= newest - 1 and kit.time > 1735689600  # zip's 2 s steps; after 2025-01-01
    assert kit.time <= time.time() + 1
    with zipfile.ZipFile(kit.archives[1]) as z:
        assert {z.getinfo(n).date_time for n in z.namelist()} == {time.localtime(kit.time)[:6]}
    assert {int(p.stat().st_mtime) for p in kit.folder.rglob("*")} == {kit.time}


def test_building_twice_gives_the_same_archives(kit, tmp_path):
    again = student_kit.build(tmp_path / "again")
    for a, b in zip(kit.archives, again.archives):
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between two builds of the same sources"


def test_the_wheel_holds_the_library_its_stored_runs_and_its_metadata_only(kit):
    with zipfile.ZipFile(kit.wheel) as z:
        names = z.namelist()
        version = student_kit.project()["version"]
        info = f"llmrl-{version}.dist-info/"
        assert sorted(n for n in names if not n.startswith(info)) == library_files()
        assert sorted(n for n in names if n.startswith(info)) == sorted(
            info + f for f in ("METADATA", "WHEEL", "top_level.txt", "RECORD", "licenses/LICENSE",
                               "licenses/LICENSE-TEXT.md"))
        assert z.read(info + "licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        for name in library_files():  # the library as it is in the repository, not some other copy
            assert z.read(name) == (ROOT / "lib" / name).read_bytes(), name
        metadata = z.read(info + "METADATA").decode()
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines()
                if line.startswith("Requires-Dist: ") and "extra ==" not in line]
    assert requires == student_kit.project()["dependencies"]
    assert "License-Expression: MIT AND CC-BY-4.0" in metadata.splitlines()
    # the package's long description is the student README, not the instructors' one
    assert "## 1. Set up (once)" in metadata and "For instructors" not in metadata


def test_requirements_pin_torch_exactly_and_the_rest_as_pyproject(kit):
    lines = [l for l in (kit.folder / "requirements.txt").read_text().splitlines() if l and not l.startswith("#")]
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = set(proj["dependencies"]) | set(proj["optional-dependencies"]["dev"])
    assert "torch==2.13.0" in lines
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", l) for l in lines), lines
    assert set(lines) <= allowed, f"not pinned as in pyproject.toml: {sorted(set(lines) - allowed)}"
    names = {l.split("==")[0].lower() for l in lines}
    assert {"torch", "numpy", "matplotlib", "ipywidgets", "tqdm", "jupyterlab", "ipykernel"} <= names
    assert not names & {"nbgrader", "pytest", "nbval", "jupytext"}, "instructor tools in the student's pins"


def test_the_readme_tells_a_student_every_step(kit):
    text = (kit.folder / "README.md").read_text()
    for needle in ("./setup.sh", "./lab.sh", "test cell", "Hand in", "raise NotImplementedError()", "torch==2.13.0"):
        assert needle in text, needle
    for path in re.findall(r"`(assignments/[^`]+\.ipynb)`", text):
        assert (kit.folder / path).exists(), f"README names {path}, which the kit lacks"
    assert not re.search(r"@[A-Z_]+@", text), "a template placeholder was left in the README"


def test_the_kit_gives_away_no_solution_hidden_test_or_instructor_file(kit, found):
    assert student_kit.leaks([kit.folder, *kit.archives], found=found) == []


def test_the_secrets_cover_every_notebook(found):
    """The scan is only as good as its list: each notebook's answers and hidden tests are in it."""
    for lab in layout.discover():
        nb = json.loads(lab.source.read_text())
        where = layout.rel(lab.source)
        kinds = {w.split("(")[-1].rstrip(")") for w in found.lines.values() if w.startswith(where + " ")}
        has_hidden = any(layout.HIDDEN_MARKERS[0] in "".join(c["source"]) for c in nb["cells"])
        assert "solution" in kinds or "written answer" in kinds, f"no answer text of {where} in the scan"
        assert ("hidden test" in kinds) == has_hidden, f"hidden tests of {where}: {kinds}"
    assert any("instructor's corpus" in w for w in found.lines.values())


def _solution_lines(found, kind="solution"):
    return [l for l, w in found.lines.items() if w.endswith(f"({kind})")]


def _rezip(path: Path, member: str, transform) -> None:
    with zipfile.ZipFile(path) as z:
        items = [(i, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for info, data in items:
            z.writestr(info, transform(data) if info.filename == member else data)


PLANTS = {
    "a source notebook": lambda kit, found: shutil.copy(
        ROOT / "source" / "lab11" / "llm_as_policy.ipynb", kit / "assignments" / "lab11" / "llm_as_policy.ipynb"),
    "a solution line in the README": lambda kit, found: (kit / "README.md").write_text(
        (kit / "README.md").read_text() + "\n    " + _solution_lines(found)[0] + "\n"),
    "a written answer in a notebook": lambda kit, found: (kit / "assignments" / "notes.md").write_text(
        _solution_lines(found, "written answer")[0]),
    "a hidden test in a script": lambda kit, found: (kit / "lab.sh").write_text(
        (kit / "lab.sh").read_text() + "# " + _solution_lines(found, "hidden test")[0] + "\n"),
    "a corpus entry": lambda kit, found: (kit / "requirements.txt").write_text(
        next(l for l, w in found.lines.items() if "corpus" in w)),
    "a gradebook": lambda kit, found: (kit / "gradebook.db").write_bytes(b"SQLite format 3\x00" + bytes(100)),
    "the autograder folder": lambda kit, found: shutil.copytree(ROOT / "autograder" / "kit", kit / "autograder"),
    "three answer lines in the library": lambda kit, found: _rezip(
        next((kit / "wheels").glob("*.whl")), "llmrl/utils.py",
        lambda data: data + ("\n" + "\n".join(next(iter(
            r for r, w in found.runs.items() if w.endswith("(solution)"))).split("\n")) + "\n").encode()),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_the_leak_check_finds_what_was_planted(kit, found, tmp_path, plant):
    copy = tmp_path / student_kit.KIT_NAME
    shutil.copytree(kit.folder, copy)
    PLANTS[plant](copy, found)
    problems = student_kit.leaks([copy], found=found)
    assert problems, f"{plant} went unnoticed"
    archive = student_kit.write_tar(copy, tmp_path / "planted.tar.gz")
    assert student_kit.leaks([archive], found=found), f"{plant} inside the archive went unnoticed"


def test_one_shared_line_in_the_library_is_not_a_leak(found, tmp_path):
    """The library may share a line with an answer (`d = np.asarray(d, dtype=float)`); not a passage."""
    line = next(l for l, w in found.lines.items() if w.endswith("(solution)"))
    wheel = tmp_path / "llmrl-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("llmrl/x.py", f"def f(d):\n    {line}\n    return d\n")
    assert student_kit.leaks([wheel], found=found) == []


def test_building_a_kit_that_would_leak_writes_nothing(monkeypatch, tmp_path, found):
    templates = tmp_path / "templates"
    shutil.copytree(student_kit.TEMPLATES, templates)
    (templates / "README.md").write_text((templates / "README.md").read_text() + "\n" + _solution_lines(found)[0])
    monkeypatch.setattr(student_kit, "TEMPLATES", templates)
    with pytest.raises(student_kit.KitError, match="give away"):
        student_kit.build(tmp_path / "out")
    assert not (tmp_path / "out" / student_kit.KIT_NAME).exists()
    assert not list((tmp_path / "out").glob("*.tar.gz")) and not list((tmp_path / "out").glob("*.zip"))


def test_make_student_kit_refuses_an_output_folder_inside_the_course(tmp_path):
    for inside in (ROOT / "release" / "kit", ROOT, ROOT / "lib"):
        with pytest.raises(student_kit.KitError, match="inside a course folder"):
            student_kit.build(inside)
