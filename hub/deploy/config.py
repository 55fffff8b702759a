"""The hub's configuration (HubConfig: its accounts, ports, limits and folders) and the constants every step
of the set-up shares."""

from __future__ import annotations

import json
import pwd
import re
from dataclasses import dataclass, field
from pathlib import Path

from hub import limits as L
from hub.layout import OnSubmitFolders, student_folders

REPO = Path(__file__).resolve().parents[2]
HUB = REPO / "hub"
VENV = REPO / ".venv"
PROXY = HUB / "node_modules" / ".bin" / "configurable-http-proxy"
COURSE_ID = "llmrl"
NAME_RE = re.compile(r"^llmrl-[a-z0-9][a-z0-9-]{0,25}$")
DEFAULT_DIR = Path("/srv/llmrl-hub")


class HubError(Exception):
    """Something the person running the hub must fix; the message says what."""


def home_of(name: str) -> Path:
    try:
        return Path(pwd.getpwnam(name).pw_dir)
    except KeyError:
        return Path("/home") / name


@dataclass
class HubConfig:
    dir: Path = DEFAULT_DIR
    instructor: str = "llmrl-instructor"
    students: list[str] = field(default_factory=lambda: ["llmrl-s1", "llmrl-s2", "llmrl-s3"])
    port: int = 8500                 # public; the proxy's API, the hub and the course service use the next three
    assignments: list[str] | None = None  # default: every assignment with source notebooks
    limits: L.Limits = field(default_factory=L.Limits)  # each student's (and the class's) limits
    grader: str = ""                 # the account grading on submit (default: the instructor's name + "-grader")
    on_submit_workers: int = 0       # gradings on submit at once (0: one per free core, hub/on_submit)
    on_submit_rate: int = 10         # gradings on submit of one student in an hour, at most

    def __post_init__(self):
        self.dir = Path(self.dir).resolve()
        self.grader = self.grader or f"{self.instructor[:25]}-grader"
        for name in [self.instructor, *self.students, self.grader]:
            if not NAME_RE.match(name):
                raise HubError(f"account name {name!r}: it must start with 'llmrl-' and hold only a-z, 0-9 and '-' "
                               "(at most 32 characters)")
        if len(set(self.students)) != len(self.students) or self.instructor in self.students or \
                self.grader in (self.instructor, *self.students):
            raise HubError("every account name must be different")
        if not 0 < self.port < 65533:
            raise HubError(f"port {self.port}: the hub needs it and the next three")

    # the hub's four ports
    @property
    def proxy_api_port(self) -> int:
        return self.port + 1

    @property
    def hub_port(self) -> int:
        return self.port + 2

    @property
    def service_port(self) -> int:
        return self.port + 3

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # paths
    @property
    def state(self) -> Path:
        return self.dir / "state"

    @property
    def exchange(self) -> Path:
        return self.dir / "exchange"

    @property
    def cache(self) -> Path:
        return self.dir / "cache"

    @property
    def users_config(self) -> Path:
        return self.dir / "jupyter" / "users"

    @property
    def service_config(self) -> Path:
        return self.dir / "jupyter" / "formgrader"

    @property
    def settings(self) -> Path:
        return self.dir / "hub.json"

    @property
    def manifest(self) -> Path:
        return self.dir / "manifest.json"

    @property
    def users_dir(self) -> Path:  # each student's filesystem is mounted on users_dir/<student> (hub/layout.py)
        return self.dir / "users"

    @property
    def images(self) -> Path:
        return self.dir / "images"

    @property
    def socket_dir(self) -> Path:  # the instructor's own server's unix socket (spawner.py)
        return self.dir / "sockets"

    @property
    def cgroup_base(self) -> str:
        return f"llmrl-hub-{self.port}"

    def student_home(self, name: str) -> Path:
        return student_folders(self.users_dir, name).home

    def inbound_of(self, name: str) -> Path:
        """A student's own inbound (the exchange's inbound as their server sees it)."""
        return student_folders(self.users_dir, name).inbound

    @property
    def course_dir(self) -> Path:
        return home_of(self.instructor) / COURSE_ID

    @property
    def on_submit_dir(self) -> Path:  # grading on submit (hub/on_submit): spool/, results/, course/
        return self.dir / "on-submit"

    @property
    def on_submit(self) -> OnSubmitFolders:
        return OnSubmitFolders(self.on_submit_dir)


def env_dir(cfg: HubConfig) -> Path:
    """The environment the hub's users run, as the settings say: .venv itself, or D/env
    (environment.python_environment)."""
    settings = json.loads(cfg.settings.read_text()) if cfg.settings.exists() else {}
    return Path(settings.get("env", VENV))
