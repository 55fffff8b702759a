"""The sample students (autograder/samples): their submissions, matching a submitted file to a
notebook, and the demo course they are graded in (`make submissions`, `make demo`).
"""

from __future__ import annotations
import copy
import re
import shutil
from pathlib import Path
from autograder.batch.course_run import _failed, grade_course
from autograder.course.layout import CONFIG, COPY_IGNORE, DEMO, DEMO_MARK, Lab, PipelineError, ROOT, SAMPLES, SOLUTION_MARKERS, assignments, rel
from autograder.export.grades_csv import score_table

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
    (demo / DEMO_MARK).write_text("made by `make demo` (autograder/cli/course.py); recreated on every run\n")
    for a in assignments(labs):
        for kind in ("source", "release"):
            shutil.copytree(root / kind / a, demo / kind / a, ignore=COPY_IGNORE)
    (demo / "nbgrader_config.py").write_text(
        "# The demo course (autograder/cli/course.py make_demo_course): the course's settings, this folder as root.\n"
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(CONFIG)!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(demo)!r}\n")
    write_submissions(labs, demo)
    return demo


def demo(labs: list[Lab], demo_dir: Path = DEMO, root: Path = ROOT, progress: bool = True,
         workers: int | None = None, no_sandbox: bool = False) -> str:
    """Grade the sample students in their own course folder; returns the score table (`no_sandbox`:
    grade_course's)."""
    folder = make_demo_course(labs, demo_dir, root)
    demo_labs = [Lab(lab.assignment, lab.name, folder) for lab in labs]
    result = grade_course(demo_labs, folder, progress=progress, workers=workers, no_sandbox=no_sandbox)
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


