"""Where the hub keeps things that more than one of its parts finds: the folders on each student's own
filesystem and those of grading on submit. deploy/ makes them; confine.py, spawner.py and on_submit/
find them here, from the folders the hub's settings (hub.json) name. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

QUEUE_FILE = "on-submit.sqlite"   # grading on submit's queue, in the hub's state/ folder (root's)


@dataclass(frozen=True)
class StudentFolders:
    """A student's own filesystem (hub/limits.py), mounted on <users_dir>/<student> (root's, 0711)."""

    root: Path

    @property
    def home(self) -> Path:      # theirs, 0700
        return self.root / "home"

    @property
    def tmp(self) -> Path:       # theirs, 0700: their /tmp, /var/tmp and /run/lock (confine.py)
        return self.root / "tmp"

    @property
    def run(self) -> Path:       # theirs, 0700: their server's unix socket (spawner.py)
        return self.root / "run"

    @property
    def socket(self) -> Path:
        return self.run / "server.sock"

    @property
    def inbound(self) -> Path:   # the instructor's, group theirs, 0730: what they hand in
        return self.root / "inbound"

    @property
    def exchange(self) -> Path:  # root's, 1777: the exchange's root as their server sees it (confine.py)
        return self.root / "exchange"


def student_folders(users_dir: Path | str, name: str) -> StudentFolders:
    return StudentFolders(Path(users_dir) / name)


@dataclass(frozen=True)
class OnSubmitFolders:
    """Grading on submit's folder, <hub folder>/on-submit (root's, 0711)."""

    dir: Path

    @property
    def spool(self) -> Path:     # root's, 0711: one folder per job, the grading account's
        return self.dir / "spool"

    @property
    def results(self) -> Path:   # root's, group the instructor's, 0750: results/<assignment>/<student>/<job>/
        return self.dir / "results"

    @property
    def course(self) -> Path:    # the grading account's copy of the course folder, 0700
        return self.dir / "course"

    @property
    def log(self) -> Path:       # the service's log
        return self.dir / "service.log"
