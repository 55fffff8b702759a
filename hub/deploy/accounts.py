"""The hub's OS accounts: creating them (an existing account this hub did not create is never touched),
their passwords, their processes, and running a command as one of them."""

from __future__ import annotations

import grp
import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

from hub import confine
from hub.deploy.config import HubConfig, HubError, env_dir, home_of
from hub.deploy.manifest import write_manifest
from hub.deploy.student_limits import make_student_filesystem


def require_root() -> None:
    if os.geteuid() != 0:
        raise HubError("the hub needs root: it creates OS accounts and starts servers as those users (run it with sudo)")


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def uid_of(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


def ensure_user(name: str, role: str, manifest: dict, cfg: HubConfig) -> bool:
    """Create the OS account `name` unless this hub created it before; True when created now. A student's
    home is on their own filesystem (make_student_filesystem), made here too."""
    if user_exists(name):
        if name not in manifest["users"]:
            raise HubError(f"the account {name} exists and was not created by this hub ({cfg.manifest} does not list it): "
                           "choose other names or remove it yourself")
        created = False
    else:
        where = (["--no-create-home", "--home-dir", str(cfg.student_home(name))] if role == "student"
                 else ["--create-home"])
        subprocess.run(["useradd", *where, "--shell", "/bin/bash", "--comment", f"llmrl course hub {role}",
                        name], check=True, capture_output=True, text=True)
        manifest["users"].append(name)
        write_manifest(cfg, manifest)  # recorded at once: an interrupted setup still knows what to remove
        created = True
    if role == "student":
        make_student_filesystem(name, cfg)
    # Debian's useradd leaves homes 0755 here: every account could read every other's files, including
    # nbgrader's cache of the submission secrets (which name the feedback files).
    os.chmod(home_of(name), 0o700)
    return created


def set_password(name: str, password: str) -> None:
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", check=True, capture_output=True, text=True)


def load_passwords(cfg: HubConfig) -> dict[str, str]:
    path = cfg.state / "passwords.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_passwords(cfg: HubConfig, passwords: dict[str, str]) -> None:
    cfg.state.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.state, 0o700)
    path = cfg.state / "passwords.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(passwords, f, indent=1)


def processes_of(uids: set[int]) -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if p.stat().st_uid in uids:
                    found.append(int(p.name))
            except OSError:
                continue
    return found


def end_processes_of(names: list[str], grace_s: float = 10.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process of these accounts (each by its pid); the pids that were found."""
    uids = {uid_of(n) for n in names if user_exists(n)}
    if not uids:
        return []
    pids = processes_of(uids)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and processes_of(uids):
        time.sleep(0.2)
    for pid in processes_of(uids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def user_environment(cfg: HubConfig, name: str) -> dict:
    """What a process of the hub's users starts with (servers, the course service, the grader)."""
    pw = pwd.getpwnam(name)
    env_bin = env_dir(cfg) / "bin"
    return {"HOME": pw.pw_dir, "USER": name, "LOGNAME": name, "SHELL": pw.pw_shell or "/bin/bash",
            "PATH": f"{env_bin}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LLMRL_CACHE": str(cfg.cache),
            "PYTHONUNBUFFERED": "1"}


def run_as(name: str, cmd: list[str], cfg: HubConfig, *, cwd: Path | None = None, timeout: float = 900,
           env: dict | None = None, check: bool = True, confined: bool = False) -> subprocess.CompletedProcess:
    """Run `cmd` as the OS user `name` (its own uid, gid and groups), with the hub's environment.
    confined: as a student's server runs it (confine.py: their cgroups, mount namespace and limits), i.e.
    what the student's terminal or kernel can do; it runs in the student's home (confine.py's doing)."""
    pw = pwd.getpwnam(name)
    full_env = user_environment(cfg, name)
    full_env.update(env or {})
    if confined:
        proc = subprocess.run(confine.command(sys.executable, cfg.settings, name, cmd), cwd=confine.LAUNCH_DIR,
                              env=full_env, capture_output=True, text=True, timeout=timeout)
    else:
        proc = subprocess.run(cmd, cwd=cwd or pw.pw_dir, env=full_env, user=pw.pw_uid, group=pw.pw_gid,
                              extra_groups=[g.gr_gid for g in grp.getgrall() if name in g.gr_mem],
                              capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise HubError(f"as {name}: {' '.join(cmd[:3])} ... failed (exit {proc.returncode}):\n  " + "\n  ".join(tail))
    return proc
