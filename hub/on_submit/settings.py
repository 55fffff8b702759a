"""What the on-submit service reads: the hub's settings (Settings) and the instructor's switch per
assignment (on_submit.json in the course folder); `prepare` makes the service's folders."""

from __future__ import annotations

import json
import os
import pwd
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from hub.layout import QUEUE_FILE, OnSubmitFolders, student_folders

MODES = ("off", "feedback", "score")
MODES_FILE = "on_submit.json"            # in the course folder: {"hw4": "score", "lab11": "feedback"}
FEEDBACK_DIR = "on-submit-feedback"      # in the student's assignment folder
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # an assignment or notebook name we write


@dataclass
class Settings:
    """What the service reads from the hub's settings file (hub/deploy/configs.py write_settings); the
    folders in them as hub/layout.py lays them out."""
    students: list
    users_dir: Path
    course_dir: Path
    state: Path
    exchange: Path
    repo: Path
    env: Path
    cache: Path
    grader: str
    instructor: str
    dir: Path                  # on-submit/: spool/, results/, course/
    workers: int
    rate_per_hour: int
    poll_s: float

    @classmethod
    def read(cls, path: Path) -> "Settings":
        s = json.loads(Path(path).read_text())
        o = s["on_submit"]
        return cls(students=list(s["students"]), users_dir=Path(s["users_dir"]), course_dir=Path(s["course_dir"]),
                   state=Path(s["state"]), exchange=Path(s["exchange"]), repo=Path(s["repo"]), env=Path(s["env"]),
                   cache=Path(s["cache"]), grader=s["grader"], instructor=s["instructor"], dir=Path(o["dir"]),
                   workers=int(o["workers"]), rate_per_hour=int(o["rate_per_hour"]), poll_s=float(o["poll_s"]))

    @property
    def folders(self) -> OnSubmitFolders:
        return OnSubmitFolders(self.dir)

    @property
    def spool(self) -> Path:
        return self.folders.spool

    @property
    def results(self) -> Path:
        return self.folders.results

    @property
    def grader_course(self) -> Path:
        return self.folders.course

    @property
    def queue_file(self) -> Path:
        return self.state / QUEUE_FILE

    def home_of(self, student: str) -> Path:
        return student_folders(self.users_dir, student).home

    def inbound_of(self, student: str) -> Path:
        return student_folders(self.users_dir, student).inbound


def default_workers() -> int:
    """One worker per free core: the cores less one for the hub and the students' servers."""
    return max(1, (os.cpu_count() or 1) - 1)


# ----------------------------------------------------------------------------- the instructor's switch

def read_modes(course_dir: Path) -> dict[str, str]:
    """assignment -> mode from the course folder's on_submit.json; ValueError naming what is wrong."""
    path = Path(course_dir) / MODES_FILE
    if not os.path.lexists(path):
        return {}
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_size > 65536:
        raise ValueError(f"{path} is not a small regular file")
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object of assignment: mode")
    bad = {a: m for a, m in data.items() if not (isinstance(a, str) and NAME_RE.match(a)) or m not in MODES}
    if bad:
        raise ValueError(f"{path}: {bad} (each mode is one of {', '.join(MODES)})")
    return dict(data)


def write_modes(course_dir: Path, modes: dict[str, str]) -> None:
    path = Path(course_dir) / MODES_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(sorted(modes.items())), indent=1) + "\n")
    os.replace(tmp, path)


def prepare(settings_path: Path) -> None:
    """The service's folders (root's), as hub/deploy's setup calls it once the settings are written."""
    s = Settings.read(settings_path)
    g = pwd.getpwnam(s.grader)
    inst = pwd.getpwnam(s.instructor)
    for folder, uid, gid, mode in ((s.dir, 0, 0, 0o711), (s.spool, 0, 0, 0o711), (s.results, 0, inst.pw_gid, 0o750),
                                   (s.grader_course, g.pw_uid, g.pw_gid, 0o700)):
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            folder.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, uid, gid)
        os.chmod(folder, mode)
