"""The hub tests start a real JupyterHub with real OS accounts: they run only when asked for
(`make test-hub` sets LLMRL_HUB_TESTS=1) and only as root (useradd, servers started as the users).

One hub serves the whole session (the course cycle and the browser test): the fixture `course_hub`
creates the accounts, the course folder and the exchange, starts the hub, and at the end stops it,
ends every process of its accounts, deletes the accounts and folders and checks that nothing is left.
A run that was killed leaves its accounts behind; the next run removes them first (they are listed
in the test hub's manifest).
"""

from __future__ import annotations

import faulthandler
import json
import os
import secrets
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hub import deploy
from hub.tests.common import ARTIFACTS, ASSIGNMENTS, INSTRUCTOR, PORT, SESSION_LIMIT_S, STUDENTS, TEST_DIR, TEST_LIMITS
from hub.tests.hubclient import Formgrader, HubAPI, UserServer

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

ENABLED = os.environ.get("LLMRL_HUB_TESTS", "") not in ("", "0")
# The on-submit queue's own tests and the import rules need no hub and no root: they run in make test too.
WITHOUT_A_HUB = ("test_on_submit_queue.py", "test_hub_layers.py")
collect_ignore = [] if ENABLED else [str(HERE / p.name) for p in HERE.glob("test_*.py") if p.name not in WITHOUT_A_HUB]


@dataclass
class CourseHub:
    cfg: object
    hub: object
    passwords: dict
    driver_token: str
    timings: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.cfg.url

    def api(self):
        return HubAPI(self.url, self.driver_token)

    def open_class(self, students, assignment: str | None = None) -> tuple[dict, Formgrader]:
        """The students' servers (started together, each with the student's own token) and the course
        service (the instructor's token), all ready: ({student: UserServer}, Formgrader). With an
        assignment: it is released (unless it is already) and fetched by each student who has no copy."""
        hubapi = self.api()
        tokens = {n: hubapi.new_token(n) for n in (INSTRUCTOR, *students)}
        users = {n: UserServer(self.url, tokens[n], n) for n in students}
        fg = Formgrader(self.url, tokens[INSTRUCTOR], deploy.COURSE_ID)
        for u in users.values():
            u.start()  # a server already running (an earlier test's) stays as it is
        with ThreadPoolExecutor(max(1, min(4, len(users)))) as pool:
            list(pool.map(lambda u: u.wait_ready(), users.values()))
        fg.wait_ready()
        if assignment is not None:
            if next(a for a in fg.get("/assignments") if a["name"] == assignment)["status"] != "released":
                fg.post(f"/assignment/{assignment}/release")
            for n, u in users.items():
                if not (deploy.home_of(n) / assignment).exists():
                    u.action("fetch", deploy.COURSE_ID, assignment)
        return users, fg


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@pytest.fixture(scope="session")
def course_hub():
    if os.geteuid() != 0:
        pytest.fail("the hub tests need root: they create OS accounts (useradd) and start servers as them")

    faulthandler.dump_traceback_later(SESSION_LIMIT_S, exit=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    timings = {"load_average_start": _loadavg()}
    t0 = time.monotonic()
    deploy.remove(TEST_DIR, log=lambda m: print(f"left over from an earlier run: {m}"))  # only what it made
    cfg = deploy.HubConfig(dir=TEST_DIR, instructor=INSTRUCTOR, students=STUDENTS, port=PORT,
                           assignments=ASSIGNMENTS, limits=TEST_LIMITS)
    passwords = {n: secrets.token_urlsafe(12) for n in [INSTRUCTOR, *STUDENTS]}
    modes_before = {n: (REPO / n).stat().st_mode for n in deploy.INSTRUCTOR_ONLY if (REPO / n).exists()}
    hub = None
    try:
        deploy.setup(cfg, passwords=passwords, log=lambda m: print(f"setup: {m}"))
        timings["setup_s"] = round(time.monotonic() - t0, 1)
        t1 = time.monotonic()
        token = secrets.token_hex(32)
        hub = deploy.start(cfg, driver_token=token, die_with_parent=True)
        timings["hub_start_s"] = round(time.monotonic() - t1, 1)
        ch = CourseHub(cfg, hub, passwords, token, timings)
        yield ch
        hub = ch.hub  # a test may have restarted it (test_on_submit.py)
    finally:
        t2 = time.monotonic()
        if hub is not None:
            shutil.copyfile(hub.log_path, ARTIFACTS / "jupyterhub.log")
            timings["pids_left_after_hub_stop"] = len(hub.stop())
        removed = deploy.remove(TEST_DIR, log=lambda m: print(f"teardown: {m}"))
        timings["teardown_s"] = round(time.monotonic() - t2, 1)
        timings["load_average_end"] = _loadavg()
        faulthandler.cancel_dump_traceback_later()
        left = [n for n in [INSTRUCTOR, *STUDENTS, cfg.grader] if deploy.user_exists(n)]
        (ARTIFACTS / "session-timings.json").write_text(json.dumps(timings, indent=1))
        assert not left, f"accounts left behind: {left}"
        assert set(removed) == {INSTRUCTOR, *STUDENTS, cfg.grader}, f"removed {removed}"
        assert not TEST_DIR.exists(), f"{TEST_DIR} left behind"
        modes_after = {n: (REPO / n).stat().st_mode for n in modes_before}
        assert modes_after == modes_before, "the repository's folders did not get their modes back"
