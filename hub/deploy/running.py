"""Starting and stopping the hub: jupyterhub with the course's configuration (hub/jupyterhub_config.py),
its proxy, the course service and the on-submit service, which it starts and stops itself."""

from __future__ import annotations

import os
import resource
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from hub import limits as L
from hub import processes
from hub.deploy.accounts import end_processes_of, require_root
from hub.deploy.config import HUB, REPO, VENV, HubConfig, HubError
from hub.deploy.student_limits import cgroups_of, make_student_filesystem


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _hub_preexec(die_with_parent: bool):
    def run():
        # the hub and its proxy hold a few descriptors per running server: the hard limit, not 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
        if die_with_parent:
            processes.die_with_parent()
    return run


class RunningHub:
    """A jupyterhub process started by :func:`start`; :meth:`stop` ends it and everything it started."""

    def __init__(self, cfg: HubConfig, proc: subprocess.Popen, log_path: Path):
        self.cfg, self.proc, self.log_path = cfg, proc, log_path
        self.url = cfg.url

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> list[int]:
        """SIGTERM the hub (it stops the proxy, the course service and the users' servers), then end by pid
        whatever of the hub's accounts is still running; returns those pids."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        left = end_processes_of([self.cfg.instructor, *self.cfg.students, self.cfg.grader])
        _stop_proxy_left_over(self.cfg)
        return left


def _stop_proxy_left_over(cfg: HubConfig) -> None:
    """The proxy runs in a session of its own; the hub stops it, this catches one left by a killed hub."""
    pid_file = cfg.state / "proxy.pid"
    for path in (pid_file, cfg.state / "jupyterhub-proxy.pid"):
        if path.exists():
            try:
                pid = int(path.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"configurable-http-proxy" in cmdline:
                    os.kill(pid, signal.SIGTERM)
            except (ValueError, OSError):
                pass


def hub_environment(cfg: HubConfig, driver_token: str | None = None) -> dict:
    """jupyterhub's environment. PYTHONPATH: its configuration imports the hub's package (hub.spawner,
    hub.lti) from this repository; the users' servers and the services get environments of their own
    (jupyterhub_config.py: Spawner.env_keep and each service's environment)."""
    env = {"PATH": f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(cfg.state),
           "LLMRL_HUB_SETTINGS": str(cfg.settings), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
           "CONFIGPROXY_AUTH_TOKEN": secrets.token_hex(32)}
    if driver_token:
        env["LLMRL_HUB_DRIVER_TOKEN"] = driver_token
    return env


def start(cfg: HubConfig, driver_token: str | None = None, timeout: float = 180.0,
          die_with_parent: bool = False) -> RunningHub:
    """Start jupyterhub (set up before) and wait until its API answers."""
    require_root()
    # No student process may outlive the hub: a process left from before (it could hold a port of the hub's)
    # is ended, and the students' filesystems are mounted again (after a reboot).
    end_processes_of(cfg.students)
    cg = cgroups_of(cfg)
    for name in cfg.students:
        cg.kill(name)
        make_student_filesystem(name, cfg)
    try:
        cg.setup(cfg.limits)
    except L.LimitError as e:
        raise HubError(str(e)) from None
    busy = [p for p in (cfg.port, cfg.proxy_api_port, cfg.hub_port, cfg.service_port) if not port_free(p)]
    if busy:
        raise HubError(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use: is a hub already running? "
                       f"(choose others with PORT=)")
    cfg.state.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.state, 0o700)
    log_path = cfg.state / "jupyterhub.log"
    cmd = [str(VENV / "bin" / "jupyterhub"), "-f", str(HUB / "jupyterhub_config.py")]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=cfg.state, env=hub_environment(cfg, driver_token), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_hub_preexec(die_with_parent))
    hub = RunningHub(cfg, proc, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise HubError(f"jupyterhub exited with {proc.returncode} at start; its log ends:\n{hub.log_tail()}")
        try:
            with urllib.request.urlopen(f"{cfg.url}/hub/api/", timeout=5) as r:
                if r.status == 200:
                    return hub
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() > deadline:
            hub.stop()
            raise HubError(f"jupyterhub did not answer {cfg.url}/hub/api/ in {timeout:.0f} s; its log ends:\n"
                           f"{hub.log_tail()}")
        time.sleep(0.5)
