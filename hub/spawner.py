"""Single-user servers as the students' own OS users, on ports of one range.

JupyterHub's LocalProcessSpawner already starts `jupyterhub-singleuser` as the user (setuid to the
account, its home as working folder); it picks a random port, which on a shared machine may be
anyone's. This one takes a free port from `port_range` instead, never one it gave to another
running server.
"""

from __future__ import annotations

import socket

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer, Tuple


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class CourseSpawner(LocalProcessSpawner):
    port_range = Tuple(Integer(), Integer(), default_value=(0, 0),
                       help="Ports (first, last) the users' servers listen on; (0, 0): any free port").tag(config=True)

    _given: dict[int, str] = {}  # port -> user, over every spawner of this hub

    def _pick_port(self) -> int:
        lo, hi = self.port_range
        mine = self.user.name
        for port in range(lo, hi + 1):
            owner = CourseSpawner._given.get(port)
            if owner not in (None, mine):
                continue
            if _free(port):
                CourseSpawner._given[port] = mine
                return port
        raise RuntimeError(f"no free port in {lo}-{hi} for {mine}'s server")

    def _release_port(self) -> None:
        for port, owner in list(CourseSpawner._given.items()):
            if owner == self.user.name:
                del CourseSpawner._given[port]

    async def start(self):
        if self.port_range[0]:
            self._release_port()
            self.port = self._pick_port()
        return await super().start()

    async def stop(self, now=False):
        try:
            return await super().stop(now=now)
        finally:
            self._release_port()
