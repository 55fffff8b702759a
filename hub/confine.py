"""Run a command as a student of the hub, inside the student's limits (root only).

    python -m hub.confine SETTINGS USER -- COMMAND...      (in the repository's folder: LAUNCH_DIR)

SETTINGS is the hub's settings file (hub.json, written by hub/deploy). As root, this process:

1. joins the student's cgroups (made with the limits of SETTINGS: memory, processes), so every process
   the command starts counts against them and none can leave (the groups belong to root);
2. makes a mount namespace of its own in which /tmp, /var/tmp and /run/lock are the student's own
   folder on their own filesystem, /dev/shm a small tmpfs, the exchange's root a folder on their
   filesystem (nbgrader wants it writable: what they write there counts against their disk) holding
   the course's real exchange folder, and the course's inbound the student's own inbound folder;
3. sets the resource limits (processes, open files, file size, no core dumps);
4. becomes the student (their groups, gid and uid) and executes COMMAND.

The hub's spawner starts every student's server through it (spawner.py); the hub's tests run what a
student types in a terminal through it too (deploy.run_as with confined=True); both build the command
line with `command` and start it in LAUNCH_DIR, where `python -m` finds the hub's package (no
PYTHONPATH, which the student's command would inherit). Everything is in place before COMMAND runs
(in the student's home): a student's code never runs outside these limits.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import sys
from pathlib import Path

from hub import limits as L
from hub.layout import student_folders

LAUNCH_DIR = Path(__file__).resolve().parents[1]  # the repository: `python -m hub.confine` runs from here


def command(python: str, settings_file: Path | str, user: str, cmd: list[str]) -> list[str]:
    """The command line that runs `cmd` as the student `user` inside their limits (start it in LAUNCH_DIR)."""
    return [python, "-m", "hub.confine", str(settings_file), user, "--", *cmd]


def confine(settings: dict, user: str) -> None:
    """Steps 1-4 above for this process (then the caller executes the command)."""
    if os.geteuid() != 0:
        raise SystemExit("confine.py must run as root")
    if user not in settings["students"]:
        raise SystemExit(f"confine.py: {user!r} is not a student of this hub")
    limits = L.Limits.from_dict(settings["limits"])
    pw = pwd.getpwnam(user)  # every lookup before the mounts: nothing below reads the student's view of /etc
    groups = sorted({pw.pw_gid, *(g.gr_gid for g in grp.getgrall() if user in g.gr_mem)})
    paths = student_folders(settings["users_dir"], user)
    if not L.mounted(paths.root):
        raise SystemExit(f"confine.py: {user}'s filesystem is not mounted on {paths.root} (run the hub's setup)")
    if settings.get("cgroups"):
        cg = L.Cgroups(**settings["cgroups"])
        cg.make_user(user, limits)
        cg.join(user)
    exchange, course = Path(settings["exchange"]), settings["course_id"]
    # (the student's filesystem's root and exchange/ are root's: none of these paths is a link they made)
    L.private_mounts([(str(paths.tmp), "/tmp"), (str(paths.tmp), "/var/tmp"), (str(paths.tmp), "/run/lock"),
                      (str(exchange / course), str(paths.exchange / course)),
                      (str(paths.exchange), str(exchange)),
                      (str(paths.inbound), str(exchange / course / "inbound"))], limits.shm_bytes)
    L.set_rlimits(limits)
    os.setgroups(groups)
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SystemExit("confine.py: still root after dropping privileges")
    try:
        os.chdir(pw.pw_dir)
    except OSError:
        os.chdir("/")


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        raise SystemExit(__doc__)
    settings = json.loads(Path(argv[0]).read_text())
    user, cmd = argv[1], argv[3:]
    confine(settings, user)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
