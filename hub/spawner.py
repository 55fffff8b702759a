"""Single-user servers as the students' own OS users, each inside its limits, on a unix socket.

JupyterHub's LocalProcessSpawner starts `jupyterhub-singleuser` as the user on a TCP port of
127.0.0.1. On a machine the students share, any account can take any free port first: one student
holding the ports stops everyone else's server from starting (an earlier version of the course's
spawner handed out a fixed range of 40, which also capped the class at 40 running servers), or
answers in another student's place. CourseSpawner uses no port at all:

- each server listens on a unix socket, run/server.sock on the student's own filesystem (confine.py):
  the folder belongs to the student (0700) inside a folder of root's, so no other account can create,
  replace or reach it; the proxy (root) connects to it (http+unix). There is no fixed number of servers.
  (The instructor's own server, if they start one, has its socket in <socket_dir>/<instructor>/.)
- each server starts through confine.py (as root, then the student): the student's cgroups (memory,
  processes), mount namespace (their own /tmp, /dev/shm and inbound) and resource limits are in place
  before any of the student's code runs. Stopping the server ends every process of the student's
  cgroup (kernels, terminals, background jobs), not only the server.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path
from urllib.parse import quote

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Unicode, default

from hub import confine
from hub import limits as L
from hub.layout import student_folders

# jupyter_server refuses a socket together with a port other than its default: the URL the hub gives the
# server names this port, which is never bound (the server listens only on its socket)
DEFAULT_JUPYTER_PORT = 8888


class CourseSpawner(LocalProcessSpawner):
    settings_file = Unicode("", help="The hub's settings (hub.json, written by hub/deploy)").tag(config=True)
    python = Unicode(sys.executable, help="The interpreter that runs confine.py (as root)").tag(config=True)

    @property
    def hub_settings(self) -> dict:
        return json.loads(Path(self.settings_file).read_text())

    @default("popen_kwargs")
    def _start_students_in_the_launch_dir(self):
        # a student's server starts as `python -m hub.confine ...`, which finds the hub's package in
        # confine.LAUNCH_DIR; confine.py then runs the server in the student's home
        return {"cwd": str(confine.LAUNCH_DIR)} if self.is_student() else {}

    def socket_path(self) -> Path:
        s = self.hub_settings
        if self.user.name in s["students"]:
            return student_folders(s["users_dir"], self.user.name).socket
        return Path(s["socket_dir"]) / self.user.name / "server.sock"

    def is_student(self) -> bool:
        return self.user.name in self.hub_settings["students"]

    def make_preexec_fn(self, name):
        if self.is_student():
            return None  # confine.py drops to the student after it has set the limits (it starts as root)
        return super().make_preexec_fn(name)  # the instructor's own server: as the instructor, no limits

    def get_env(self):
        env = super().get_env()
        if self.is_student():
            # kernels' ipc sockets: a unix socket's path must stay under 108 bytes, which one under the
            # student's home on their filesystem would not; /tmp is theirs alone (confine.py)
            env["JUPYTER_RUNTIME_DIR"] = "/tmp/.jupyter-runtime"
        return env

    def get_args(self):
        return super().get_args() + [f"--ServerApp.sock={self.socket_path()}", "--ServerApp.sock_mode=0600"]

    async def start(self):
        sock = self.socket_path()
        if len(str(sock)) > 100:
            raise RuntimeError(f"{sock}: a unix socket's path must be shorter than 108 bytes (a shorter hub folder)")
        pw = pwd.getpwnam(self.user.name)
        if not self.is_student():
            sock.parent.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(sock.parent.parent, 0o711)
        if sock.parent.is_symlink() or (sock.parent.exists() and not sock.parent.is_dir()):
            sock.parent.unlink()
        sock.parent.mkdir(exist_ok=True)
        os.chown(sock.parent, pw.pw_uid, pw.pw_gid)
        os.chmod(sock.parent, 0o700)
        if os.path.lexists(sock):
            os.unlink(sock)
        self.port = DEFAULT_JUPYTER_PORT
        self.cmd = (confine.command(self.python, self.settings_file, self.user.name, self._server_cmd)
                    if self.is_student() else self._server_cmd)
        await super().start()
        url = "http+unix://" + quote(str(sock), safe="")
        # the hub stores a URL's host lower-cased and adds a port: the proxy and the hub connect through
        # connect_url instead (the socket's path, as given)
        self.server.connect_url = url + self.server.base_url
        return url

    @property
    def _server_cmd(self) -> list[str]:
        return list(self.hub_settings["singleuser"])

    async def poll(self):
        status = await super().poll()
        if status is None and self.server is not None and not self.server.connect_url:
            # the hub restarted and reloaded this server from its database: reconnect to its socket
            self.server.connect_url = "http+unix://" + quote(str(self.socket_path()), safe="") + self.server.base_url
        return status

    async def stop(self, now=False):
        try:
            return await super().stop(now=now)
        finally:
            settings = self.hub_settings
            if settings.get("cgroups") and self.is_student():
                L.Cgroups(**settings["cgroups"]).kill(self.user.name)
            if os.path.lexists(self.socket_path()):
                os.unlink(self.socket_path())
