"""`setup` makes (or brings up to date) everything the hub needs, in order; `remove` takes away what the
manifest says setup made."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

from hub import limits as L
from hub import on_submit
from hub.deploy.accounts import (end_processes_of, ensure_user, load_passwords, require_root, save_passwords,
                                 set_password, user_exists)
from hub.deploy.config import NAME_RE, PROXY, HubConfig, HubError, home_of
from hub.deploy.configs import write_jupyter_configs, write_settings
from hub.deploy.course import assignments_of, make_cache, make_course, make_exchange
from hub.deploy.environment import python_environment
from hub.deploy.manifest import protect_repository, read_manifest, restore_repository, write_manifest
from hub.deploy.student_limits import cgroups_of, check_disk


def setup(cfg: HubConfig, passwords: dict[str, str] | None = None, log=print) -> dict[str, str]:
    """Make (or bring up to date) everything the hub needs; returns account -> password."""
    require_root()
    if not PROXY.exists():
        raise HubError(f"{PROXY} is missing: run `make hub-install` (npm ci in hub/)")
    assignments = assignments_of(cfg)
    manifest = read_manifest(cfg.dir)
    cfg.dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.dir, 0o755)
    write_manifest(cfg, manifest)
    t0 = time.monotonic()
    cgroups_of(cfg)  # the machine must provide them (limits.py): said now, before any account is made
    check_disk(cfg)
    known = make_accounts(cfg, manifest, passwords or {})
    log(f"accounts: {cfg.instructor} (instructor), {', '.join(cfg.students)} ({time.monotonic() - t0:.1f} s)")
    t0 = time.monotonic()
    env = python_environment(cfg, cfg.students[0])
    write_settings(cfg, env)
    log(f"environment: {env} ({time.monotonic() - t0:.1f} s)")
    write_jupyter_configs(cfg)
    protect_repository(manifest, cfg, log)
    make_exchange(cfg)
    t0 = time.monotonic()
    make_cache(cfg)
    log(f"model cache: {cfg.cache} ({time.monotonic() - t0:.1f} s)")
    t0 = time.monotonic()
    make_course(cfg, assignments)
    log(f"course folder: {cfg.course_dir} with {', '.join(assignments)} ({time.monotonic() - t0:.1f} s)")
    on_submit.prepare(cfg.settings)
    return {n: known[n] for n in [cfg.instructor, *cfg.students]}


def make_accounts(cfg: HubConfig, manifest: dict, wanted: dict[str, str]) -> dict[str, str]:
    """The grading account (no password: it never logs in), the instructor and the students; an account
    created now gets the password asked for or a random one, an older one keeps its own unless another
    is asked for. Returns every password known (also saved in D/state/passwords.json)."""
    known = load_passwords(cfg)
    ensure_user(cfg.grader, "grader", manifest, cfg)
    for name, role in [(cfg.instructor, "instructor")] + [(s, "student") for s in cfg.students]:
        created = ensure_user(name, role, manifest, cfg)
        pw = wanted.get(name) or (None if not created and name in known else secrets.token_urlsafe(12))
        if pw is not None:
            set_password(name, pw)
            known[name] = pw
    save_passwords(cfg, known)
    return known


def remove(directory: Path, log=print) -> list[str]:
    """Stop the hub of `directory`, delete the accounts it created (with their homes) and the folder."""
    require_root()
    directory = Path(directory).resolve()
    manifest_path = directory / "manifest.json"
    if not manifest_path.exists():
        if directory.exists():
            raise HubError(f"{directory} has no manifest.json: not a folder made by hub/deploy, left as it is")
        return []
    manifest = json.loads(manifest_path.read_text())
    _stop_hub_of(directory)
    users = [u for u in manifest.get("users", []) if NAME_RE.match(u)]
    end_processes_of(users)
    _remove_limits_of(directory, log)
    restore_repository(manifest)
    removed = _delete_accounts(users)
    shutil.rmtree(directory)
    log(f"removed {', '.join(removed) or 'no accounts'} and {directory}")
    return removed


def _stop_hub_of(directory: Path) -> None:
    """SIGTERM the jupyterhub whose pid file is in the folder (if it still runs), and wait for it."""
    pid_file = directory / "state" / "jupyterhub.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text().strip())
            if b"jupyterhub" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 30
                while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                    time.sleep(0.2)
        except (ValueError, OSError):
            pass


def _remove_limits_of(directory: Path, log) -> None:
    """The hub's cgroups (as its settings name them) and the students' mounted filesystems."""
    settings_path = directory / "hub.json"
    if settings_path.exists():
        settings = json.loads(settings_path.read_text())
        if settings.get("cgroups"):
            try:
                L.Cgroups(**settings["cgroups"]).remove()
            except (L.LimitError, OSError) as e:
                log(f"cgroups not removed: {e}")
    users_dir = directory / "users"
    if users_dir.is_dir():
        for mnt in users_dir.iterdir():
            L.unmount(mnt)


def _delete_accounts(users: list[str]) -> list[str]:
    removed = []
    for name in users:
        if user_exists(name):
            home = home_of(name)
            proc = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
            if proc.returncode not in (0, 12):  # 12: the home could not be removed (reported below)
                raise HubError(f"userdel {name} failed: {proc.stderr.strip()}")
            if home.exists() and home == Path("/home") / name:
                shutil.rmtree(home, ignore_errors=True)
            removed.append(name)
    return removed
