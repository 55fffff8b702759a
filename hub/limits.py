"""Per-student limits on the hub's machine, enforced by the kernel (used as root by hub/deploy and confine.py).

What each student's server (and everything it starts: kernels, terminals, background processes) gets:

- memory: a cgroup of their own, with a hard limit (memory.max on cgroup v2, memory.limit_in_bytes and
  memory.memsw.limit_in_bytes on v1): the kernel's OOM killer ends a process of that student when the
  group passes it; the others never notice. All students' groups sit under one group with a limit of
  its own (the class), so the hub, the proxy and the instructor keep the rest of the machine.
- processes: the same cgroup's pids.max (threads count, so a fork or thread bomb stops there), and
  RLIMIT_NPROC for the account as a second bound.
- processors: where the cpu controller is there, the student's group has the default weight, as every
  other student's: under contention each student gets an equal share, however many processes they run
  (a share, not a cap: an idle machine is theirs to use).
- disk: the student's home is a filesystem of its own (an ext4 image file mounted through a loop
  device, `nosuid,nodev`): its size bounds their bytes, its inode count their files. Their /tmp,
  /var/tmp and /run/lock are folders of that filesystem, bind-mounted in a mount namespace of their
  server's own; their /dev/shm a small tmpfs (its pages count in their memory). What they hand in
  goes to an inbound folder on that same filesystem (the exchange's inbound, as their server sees it),
  so submissions count against it too and no student can fill a folder the class shares.
- files: RLIMIT_NOFILE (open files per process) and RLIMIT_FSIZE (largest file), no core dumps.

The machine must provide: Linux with cgroup v2 (memory and pids controllers enabled at the root) or
cgroup v1 (memory and pids hierarchies mounted), writable by root; loop devices (/dev/loop-control)
and mkfs.ext4 (e2fsprogs); unshare(CLONE_NEWNS) for root. `describe()` says what this machine has.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
MiB = 1 << 20


@dataclass
class Limits:
    memory_bytes: int = 2048 * MiB        # one student's server and everything it starts
    class_memory_bytes: int = 0           # all students together (0: the machine's memory less reserve_bytes)
    reserve_bytes: int = 2048 * MiB       # kept out of the class's share for the hub, proxy and instructor
    processes: int = 512                  # tasks (processes and threads) of one student
    disk_bytes: int = 512 * MiB           # size of a student's own filesystem (home, /tmp, submissions)
    disk_inodes: int = 50_000             # files and folders on it
    shm_bytes: int = 64 * MiB             # their /dev/shm (a tmpfs; counts in their memory too)
    open_files: int = 4096                # RLIMIT_NOFILE per process
    file_bytes: int = 256 * MiB           # RLIMIT_FSIZE: the largest file they can write anywhere

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Limits":
        return cls(**{k: int(v) for k, v in d.items() if k in cls.__dataclass_fields__})

    def class_memory(self) -> int:
        if self.class_memory_bytes:
            return self.class_memory_bytes
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return max(total - self.reserve_bytes, self.memory_bytes)


class LimitError(Exception):
    """The machine cannot enforce a limit; the message says what it lacks."""


# ----------------------------------------------------------------------------- cgroups

def _own_path(controller: str) -> str:
    """This process's cgroup path in a v1 hierarchy ("/" at the top)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(","):
            return path
    return "/"


def cgroup_version() -> str | None:
    """'v2' (memory and pids enabled at the unified root), 'v1' (memory and pids hierarchies) or None."""
    ctl = CGROUP / "cgroup.controllers"
    if ctl.exists():
        have = set(ctl.read_text().split())
        if {"memory", "pids"} <= have and os.access(CGROUP, os.W_OK):
            return "v2"
    if (CGROUP / "memory" / "memory.limit_in_bytes").exists() and (CGROUP / "pids" / "cgroup.procs").exists():
        return "v1"
    return None


class Cgroups:
    """The hub's cgroups: <base>/students/<user> for each student (named base, e.g. llmrl-hub-8500).

    v2: /sys/fs/cgroup/<base> (the hub's own slice at the top of the hierarchy).
    v1: <base> under this process's own memory and pids cgroups (so a hub run inside a limited group,
    a container's or a login session's, stays inside it)."""

    def __init__(self, base: str, version: str | None = None, parents: dict | None = None):
        self.base = base
        self.version = version or cgroup_version()
        if self.version is None:
            raise LimitError("no cgroup memory and pids controllers here (cgroup v2 with memory and pids enabled at "
                             "/sys/fs/cgroup, or cgroup v1 with both hierarchies mounted): per-student memory and "
                             "process limits cannot be enforced")
        if parents is not None:
            self.parents = {k: Path(v) for k, v in parents.items()}
        elif self.version == "v2":
            self.parents = {"unified": CGROUP / base}
        else:  # cpu where mounted: each student one equal share of the processors under contention
            ctrls = ["memory", "pids"] + (["cpu"] if (CGROUP / "cpu" / "cgroup.procs").exists() else [])
            self.parents = {c: CGROUP / c / _own_path(c).lstrip("/") / base for c in ctrls}

    def state(self) -> dict:
        """What confine.py needs to find the same groups (written into the hub's settings)."""
        return {"base": self.base, "version": self.version, "parents": {k: str(v) for k, v in self.parents.items()}}

    def user_dirs(self, user: str) -> dict[str, Path]:
        return {k: p / "students" / user for k, p in self.parents.items()}

    def setup(self, limits: Limits) -> None:
        """The hub's groups and the class's limit (idempotent)."""
        for key, parent in self.parents.items():
            (parent / "students").mkdir(parents=True, exist_ok=True)
            if self.version == "v2":
                cpu = " +cpu" if "cpu" in _read(CGROUP / "cgroup.controllers").split() else ""
                _write(parent / "cgroup.subtree_control", "+memory +pids" + cpu)
                _write(parent / "students" / "cgroup.subtree_control", "+memory +pids" + cpu)
                _write(parent / "students" / "memory.max", str(limits.class_memory()))
            elif key == "memory":
                _write(parent / "memory.use_hierarchy", "1", missing_ok=True)
                _write(parent / "students" / "memory.use_hierarchy", "1", missing_ok=True)
                _set_v1_memory(parent / "students", limits.class_memory())

    def make_user(self, user: str, limits: Limits) -> dict[str, Path]:
        dirs = self.user_dirs(user)
        for key, d in dirs.items():
            d.mkdir(parents=True, exist_ok=True)
            if self.version == "v2":
                _write(d / "memory.max", str(limits.memory_bytes))
                _write(d / "memory.swap.max", "0", missing_ok=True)
                _write(d / "pids.max", str(limits.processes))
            elif key == "memory":
                _set_v1_memory(d, limits.memory_bytes)
            elif key == "pids":
                _write(d / "pids.max", str(limits.processes))
            # cpu: the default weight, the same for every student (a share, not a cap)
        return dirs

    def join(self, user: str, pid: int | None = None) -> None:
        for d in self.user_dirs(user).values():
            _write(d / "cgroup.procs", str(pid or os.getpid()))

    def pids(self, user: str) -> set[int]:
        found = set()
        for d in self.user_dirs(user).values():
            try:
                found |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return found

    def kill(self, user: str, timeout: float = 10.0) -> int:
        """SIGKILL every process of the student's group (by pid); how many there were."""
        dirs = self.user_dirs(user)
        pids = self.pids(user)
        if self.version == "v2" and (dirs["unified"] / "cgroup.kill").exists():
            _write(dirs["unified"] / "cgroup.kill", "1")
        deadline = time.monotonic() + timeout
        while True:
            left = self.pids(user)
            if not left or time.monotonic() > deadline:
                return len(pids)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def memory_usage(self, user: str) -> dict:
        """The student's group's memory: current bytes, peak bytes and its anonymous/file split."""
        d = self.user_dirs(user)
        if self.version == "v2":
            stat = _kv(d["unified"] / "memory.stat")
            return {"current": int(_read(d["unified"] / "memory.current")),
                    "peak": int(_read(d["unified"] / "memory.peak") or 0), "anon": stat.get("anon", 0),
                    "file": stat.get("file", 0), "kernel": stat.get("kernel", 0)}
        stat = _kv(d["memory"] / "memory.stat")
        return {"current": int(_read(d["memory"] / "memory.usage_in_bytes")),
                "peak": int(_read(d["memory"] / "memory.max_usage_in_bytes")),
                "anon": stat.get("total_rss", stat.get("rss", 0)), "file": stat.get("total_cache", 0),
                "kernel": int(_read(d["memory"] / "memory.kmem.usage_in_bytes") or 0)}

    def oom_kills(self, user: str) -> int:
        d = self.user_dirs(user)
        if self.version == "v2":
            return _kv(d["unified"] / "memory.events").get("oom_kill", 0)
        return _kv(d["memory"] / "memory.oom_control").get("oom_kill", 0)

    def remove(self) -> None:
        """Every group of the hub (their processes are killed first)."""
        for parent in self.parents.values():
            if not parent.exists():
                continue
            students = parent / "students"
            if students.exists():
                for d in students.iterdir():
                    if d.is_dir():
                        self.kill(d.name)
                        _rmdir(d)
                _rmdir(students)
            _rmdir(parent)


def _read(p: Path) -> str:
    try:
        return p.read_text().strip()
    except OSError:
        return ""


def _kv(p: Path) -> dict[str, int]:
    out = {}
    for line in _read(p).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _write(p: Path, value: str, missing_ok: bool = False) -> None:
    try:
        with open(p, "w") as f:
            f.write(value)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError as e:
        if missing_ok and p.name == "memory.use_hierarchy":
            return  # already set by the parent (it cannot change once a group has children)
        raise LimitError(f"cannot write {value!r} to {p}: {e.strerror}") from None


def _set_v1_memory(d: Path, limit: int) -> None:
    # memsw (memory + swap) must stay >= the memory limit: raise in the order that keeps that true
    memsw = d / "memory.memsw.limit_in_bytes"
    current = int(_read(d / "memory.limit_in_bytes") or 0)
    if memsw.exists() and limit > current:
        _write(memsw, str(limit))
        _write(d / "memory.limit_in_bytes", str(limit))
    else:
        _write(d / "memory.limit_in_bytes", str(limit))
        if memsw.exists():
            _write(memsw, str(limit))


def _rmdir(d: Path) -> None:
    for _ in range(50):
        try:
            os.rmdir(d)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


# ----------------------------------------------------------------------------- the student's filesystem

def mounted(target: Path) -> bool:
    target = os.path.realpath(target)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def make_user_filesystem(image: Path, target: Path, limits: Limits) -> bool:
    """An ext4 image of limits.disk_bytes (sparse) with limits.disk_inodes inodes, mounted on target
    (nosuid, nodev) through a loop device; True when the image was made now. Idempotent."""
    made = False
    if not image.exists():
        if shutil.which("mkfs.ext4") is None:
            raise LimitError("mkfs.ext4 is missing (apt-get install e2fsprogs): students' disks cannot be made")
        image.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, limits.disk_bytes)
        finally:
            os.close(fd)
        proc = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-N", str(limits.disk_inodes), "-E",
                               "lazy_itable_init=1,lazy_journal_init=1", str(image)], capture_output=True, text=True)
        if proc.returncode != 0:
            image.unlink()
            raise LimitError(f"mkfs.ext4 {image} failed: {proc.stderr.strip()}")
        made = True
    target.mkdir(parents=True, exist_ok=True)
    if not mounted(target):
        proc = subprocess.run(["mount", "-t", "ext4", "-o", "loop,nosuid,nodev", str(image), str(target)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise LimitError(f"cannot mount {image} on {target} through a loop device: {proc.stderr.strip()}")
    return made


def unmount(target: Path) -> None:
    if mounted(target):
        proc = subprocess.run(["umount", str(target)], capture_output=True, text=True)
        if proc.returncode != 0:  # still busy (a process left): detach it; the loop device goes with the last user
            subprocess.run(["umount", "-l", str(target)], capture_output=True, text=True)


def filesystem_usage(target: Path) -> dict:
    st = os.statvfs(target)
    return {"size": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize, "inodes": st.f_files,
            "free_inodes": st.f_favail}


# ----------------------------------------------------------------------------- inside confine.py

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL("libc.so.6", use_errno=True)
    return _libc


CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_SLAVE = 2, 4, 4096, 16384, 1 << 19


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    r = _c().mount(src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
                   ctypes.c_ulong(flags), data.encode() if data else None)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {src} on {target}: {os.strerror(e)}")


def private_mounts(binds: list[tuple[str, str]], shm_bytes: int) -> None:
    """A mount namespace of this process's own: binds (source folder -> target folder) and a tmpfs of
    shm_bytes on /dev/shm; mounts from the machine still propagate in (slave), none leak out."""
    if _c().unshare(CLONE_NEWNS) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"unshare(CLONE_NEWNS): {os.strerror(e)}")
    _mount(None, "/", None, MS_REC | MS_SLAVE)
    for src, target in binds:
        if os.path.isdir(target):
            _mount(src, target, None, MS_BIND | MS_REC)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={shm_bytes},mode=1777")


def set_rlimits(limits: Limits) -> None:
    for res, value in ((resource.RLIMIT_NPROC, limits.processes), (resource.RLIMIT_NOFILE, limits.open_files),
                       (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))


def describe() -> str:
    """What this machine provides for the limits, in one line."""
    v = cgroup_version()
    parts = [f"cgroup {v}" if v else "no usable cgroups (memory and pids limits cannot be enforced)"]
    parts.append("loop devices" if Path("/dev/loop-control").exists() else "no /dev/loop-control")
    parts.append("mkfs.ext4" if shutil.which("mkfs.ext4") else "no mkfs.ext4")
    return ", ".join(parts)


if __name__ == "__main__":
    print(describe())
    print(json.dumps(Limits().as_dict(), indent=1))
