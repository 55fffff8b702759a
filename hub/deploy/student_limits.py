"""Each student's limits as this hub makes them (hub/limits.py): their own filesystem (the disk limit,
mounted on users_dir/<student>, hub/layout.py) and the hub's cgroups (memory and processes)."""

from __future__ import annotations

import os
import pwd
import shutil

from hub import limits as L
from hub.deploy.config import COURSE_ID, HubConfig, HubError
from hub.deploy.files import chown_tree
from hub.layout import student_folders


def cgroups_of(cfg: HubConfig) -> L.Cgroups:
    try:
        return L.Cgroups(cfg.cgroup_base)
    except L.LimitError as e:
        raise HubError(str(e)) from None


def make_student_filesystem(name: str, cfg: HubConfig) -> None:
    """The student's own filesystem (limits.py) mounted on users_dir/<name>, with home/ (theirs, 0700, from
    /etc/skel), tmp/ (theirs, 0700: their /tmp), run/ (theirs, 0700: their server's socket), inbound/ (the
    instructor's, group theirs, 0730: what they hand in) and exchange/ (root's, 1777, with an empty
    llmrl/ of root's: the exchange as their server sees it, confine.py). Idempotent (a remount after a
    reboot keeps everything)."""
    cfg.users_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.users_dir, 0o755)
    cfg.images.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.images, 0o700)
    f = student_folders(cfg.users_dir, name)
    try:
        L.make_user_filesystem(cfg.images / f"{name}.img", f.root, cfg.limits)
    except L.LimitError as e:
        raise HubError(str(e)) from None
    os.chown(f.root, 0, 0)
    os.chmod(f.root, 0o711)
    shutil.rmtree(f.root / "lost+found", ignore_errors=True)
    pw = pwd.getpwnam(name)
    inst = pwd.getpwnam(cfg.instructor)
    if not f.home.exists():
        shutil.copytree("/etc/skel", f.home, symlinks=True)
        chown_tree(f.home, name)
    for folder, owner, group, mode in ((f.home, pw.pw_uid, pw.pw_gid, 0o700), (f.tmp, pw.pw_uid, pw.pw_gid, 0o700),
                                       (f.run, pw.pw_uid, pw.pw_gid, 0o700),
                                       (f.inbound, inst.pw_uid, pw.pw_gid, 0o2730),
                                       (f.exchange, 0, 0, 0o1777), (f.exchange / COURSE_ID, 0, 0, 0o755)):
        if os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir()):
            folder.unlink()
        folder.mkdir(exist_ok=True)
        os.chown(folder, owner, group)
        os.chmod(folder, mode)


def check_disk(cfg: HubConfig) -> None:
    """The students' filesystems are sparse files: they take what the students write, up to their size. All
    of them full must still fit on the disk that holds them, or one class could fill the machine's disk."""
    cfg.dir.mkdir(parents=True, exist_ok=True)
    st = os.statvfs(cfg.dir)
    free = st.f_bavail * st.f_frsize
    have = sum((cfg.images / f"{n}.img").stat().st_blocks * 512 for n in cfg.students
               if (cfg.images / f"{n}.img").exists())
    need = len(cfg.students) * cfg.limits.disk_bytes - have
    if need > free:
        raise HubError(f"{len(cfg.students)} students x {cfg.limits.disk_bytes >> 20} MiB of disk each need up to "
                       f"{need >> 20} MiB more on {cfg.dir}'s disk, which has {free >> 20} MiB free: give each less "
                       "(--disk-mib) or put the hub's folder on a larger disk")
