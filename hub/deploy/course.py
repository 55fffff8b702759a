"""The course's folders: nbgrader's exchange, the model cache and the instructor's course folder."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import time
from pathlib import Path

from hub.deploy.accounts import run_as
from hub.deploy.config import COURSE_ID, HUB, REPO, VENV, HubConfig, HubError, env_dir
from hub.deploy.files import chown_tree, write_json
from hub.layout import student_folders

# The grader's package as the course folder needs it (autograder/: not its tests, corpus, samples, the student
# kit's builder or the shell wrappers of the repository's .venv).
GRADER_LEFT_OUT = ("tests", "corpus", "samples", "kit", "bin", "__pycache__", "*.pyc")

COURSE_README = (
    "The llmrl course folder (nbgrader's course directory), owned by the instructor and readable by no one else.\n"
    "source/, autograder/, course_tool.py and nbgrader_config.py are copied from the course repository by\n"
    "`make hub`: edit the labs there (notebooks/*.py, then make build execute), not here.\n"
    "release/ is generated here; submitted/ is filled by the formgrader's Collect; autograded/, feedback/,\n"
    "gradebook.db and the CSV files by `python course_tool.py autograde ASSIGNMENT` (the batch grader).\n")


def assignments_of(cfg: HubConfig) -> list[str]:
    found = sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    if cfg.assignments is None:
        return found
    unknown = [a for a in cfg.assignments if a not in found]
    if unknown:
        raise HubError(f"unknown assignment(s) {', '.join(unknown)} (source/ has {', '.join(found)})")
    return list(cfg.assignments)


def make_exchange(cfg: HubConfig) -> None:
    """The exchange and the course's folder in it, owned by the instructor from the start: in the exchange
    (1777, as nbgrader requires, sticky: no account can rename or delete what another made) a student who
    created the course's folder first would make every release fail. Anything already there that is not
    the instructor's folder is moved aside (and named in the log), never used."""
    cfg.exchange.mkdir(parents=True, exist_ok=True)
    os.chown(cfg.exchange, 0, 0)
    os.chmod(cfg.exchange, 0o1777)
    inst = pwd.getpwnam(cfg.instructor)
    course = cfg.exchange / COURSE_ID
    if os.path.lexists(course):
        st = os.lstat(course)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != inst.pw_uid:
            aside = cfg.exchange / f".{COURSE_ID}.not-the-instructors.{int(time.time())}"
            os.rename(course, aside)
            print(f"exchange: {course} was not the instructor's folder (owner uid {st.st_uid}); moved to {aside}")
    # (folder, mode): inbound is the instructor's alone; each student's server has their own in its place
    for folder, mode in ((course, 0o755), (course / "outbound", 0o755), (course / "inbound", 0o700),
                         (course / "feedback", 0o711)):
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            folder.unlink()
        folder.mkdir(exist_ok=True)
        os.chown(folder, inst.pw_uid, inst.pw_gid)
        os.chmod(folder, mode)


def make_cache(cfg: HubConfig) -> None:
    """The model cache, copied from this machine's (if any) and completed by the instructor."""
    cfg.cache.mkdir(parents=True, exist_ok=True)
    source = Path(os.environ.get("LLMRL_CACHE") or Path.home() / ".cache" / "llmrl")
    if source.is_dir() and source.resolve() != cfg.cache.resolve():
        for f in source.iterdir():
            if f.is_file() and not f.is_symlink() and not (cfg.cache / f.name).exists():
                shutil.copyfile(f, cfg.cache / f.name)
    chown_tree(cfg.cache, cfg.instructor)
    for p in [cfg.cache, *cfg.cache.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    # checks the shipped models against their manifest (python -m llmrl.tools.models), as the instructor
    run_as(cfg.instructor, [str(env_dir(cfg) / "bin" / "python"), "-m", "llmrl.tools.models"], cfg, timeout=1800)


def make_course(cfg: HubConfig, assignments: list[str]) -> None:
    """The instructor's course folder: source/ and the grader from this repository, the rest kept."""
    course = cfg.course_dir
    course.mkdir(mode=0o700, exist_ok=True)
    ignore = shutil.ignore_patterns("artifacts", ".ipynb_checkpoints", "__pycache__")
    for a in assignments:
        target = course / "source" / a
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(REPO / "source" / a, target, ignore=ignore)
    grader = course / "autograder"
    if grader.exists():
        shutil.rmtree(grader)
    shutil.copytree(REPO / "autograder", grader, ignore=shutil.ignore_patterns(*GRADER_LEFT_OUT))
    shutil.copy2(HUB / "course_tool.py", course / "course_tool.py")
    write_course_settings(cfg, course)
    (course / "README.txt").write_text(COURSE_README)
    chown_tree(course, cfg.instructor)
    os.chmod(course, 0o700)
    run_as(cfg.instructor, [str(env_dir(cfg) / "bin" / "python"), "course_tool.py", "prepare", *assignments,
                            "--students", ",".join(cfg.students)], cfg, cwd=course, timeout=900)


def write_course_settings(cfg: HubConfig, course: Path) -> None:
    """course_tool.json (what the batch grader's processes must not see, and what they need) and the
    course's nbgrader_config.py (the grader's settings, with the hub's exchange and the students' inbounds)."""
    write_json(course / "course_tool.json", {
        "hide": [str(cfg.exchange), str(REPO), str(cfg.on_submit.spool)],
        "show": sorted({str(VENV), str(REPO / "lib"), str(env_dir(cfg))}),
        "writable": [str(cfg.cache)],
        "on_submit_results": str(cfg.on_submit.results),  # read by on-submit-grades, accept-on-submit
    })
    (course / "nbgrader_config.py").write_text(
        "# The course's nbgrader settings (written by hub/deploy): the grader's, with the hub's exchange.\n"
        'load_subconfig("autograder/nbgrader_config.py")  # noqa: F821\n'
        "c = get_config()  # noqa: F821\n"
        f"c.Exchange.root = {str(cfg.exchange)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        "# each student hands in through their own inbound, on their own filesystem (hub/limits.py)\n"
        f"c.CourseCollect.student_inbounds = {str(student_folders(cfg.users_dir, '{student}').inbound)!r}\n")
