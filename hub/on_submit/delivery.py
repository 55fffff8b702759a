"""Delivering a status into the student's own folder ~/<assignment>/on-submit-feedback/: status.json,
status.html and the feedback pages, written by a process running as the student (their uid and groups)
that opens nothing through a link, so a student can only ever overwrite their own files."""

from __future__ import annotations

import json
import pwd
import subprocess
import time
from pathlib import Path

from hub.on_submit.pages import status_page, utc
from hub.on_submit.queue import Queue
from hub.on_submit.settings import FEEDBACK_DIR, NAME_RE, Settings

# Runs as the student (their uid and groups): writes the pages into ~/<assignment>/on-submit-feedback
# without following a link anywhere, then removes the earlier pages that this one does not list.
_DELIVER = r'''
import json, os, sys
d = json.load(sys.stdin)
F = os.O_NOFOLLOW | os.O_CLOEXEC
def sub(fd, name):
    try:
        os.mkdir(name, 0o755, dir_fd=fd)
    except FileExistsError:
        pass
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | F, dir_fd=fd)
fd = os.open(d["home"], os.O_RDONLY | os.O_DIRECTORY | F)
for part in (d["assignment"], d["folder"]):
    nfd = sub(fd, part); os.close(fd); fd = nfd
for name, text in d["files"].items():
    tmp = "." + name + ".tmp"
    try:
        os.unlink(tmp, dir_fd=fd)
    except FileNotFoundError:
        pass
    w = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | F, 0o644, dir_fd=fd)
    with os.fdopen(w, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
for name in d["remove"]:
    try:
        import stat as S
        if S.S_ISREG(os.lstat(name, dir_fd=fd).st_mode):
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
print("ok")
'''


class Delivery:
    """The service's deliveries; it remembers which pages it delivered to each student's folder."""

    def __init__(self, settings: Settings, queue: Queue, log):
        self.s, self.queue, self.log = settings, queue, log
        self.delivered_pages: dict[tuple[str, str], list[str]] = {}

    def deliver(self, row, out: Path | None = None, message: str | None = None) -> None:
        if row is None:
            return
        state = row["state"]
        status = {"assignment": row["assignment"], "job": row["id"], "state": state, "mode": row["mode"],
                  "submitted_at": row["submitted_at"], "updated": utc(time.time()), "message": message or "",
                  "pages": []}
        files: dict[str, str] = {}
        if state == "queued" and not message:
            ahead = self.queue.position(row["id"])
            status["message"] = (f"{ahead} submission{'s' if ahead != 1 else ''} of the class ahead of yours; "
                                 f"this page updates itself." if ahead else "It is next; this page updates itself.")
        elif state == "running":
            status["message"] = "Your notebook is running in the grader; this page updates itself."
        elif state == "held":
            status["message"] = "A person will look at it before it gets feedback or a score."
        elif state in ("refused", "error"):
            status["message"] = row["message"]
        elif state == "graded":
            status["summary"] = json.loads(row["summary"] or "{}")
            if out is not None:
                for p in sorted(out.glob("*.html")):
                    if NAME_RE.match(p.stem) and p.is_file() and not p.is_symlink():
                        files[p.name] = p.read_text(encoding="utf-8", errors="replace")
                        status["pages"].append(p.name)
        key = (row["student"], row["assignment"])
        old_pages = self.delivered_pages.get(key)
        if old_pages is None:
            old_pages = self._pages_on_disk(row["student"], row["assignment"])
        # a page of an earlier submission goes once this one has its status: never a page of another one
        remove = [p for p in old_pages if p not in files] if state in ("graded", "held", "refused", "error") else []
        files["status.json"] = json.dumps(status, indent=1)
        files["status.html"] = status_page(status)
        if self._write_as_student(row["student"], row["assignment"], files, remove):
            if state in ("graded", "held", "refused", "error"):
                self.delivered_pages[key] = status["pages"]

    def _pages_on_disk(self, student: str, assignment: str) -> list[str]:
        folder = self.s.home_of(student) / assignment / FEEDBACK_DIR
        try:
            old = json.loads((folder / "status.json").read_text())
            return [p for p in old.get("pages", []) if isinstance(p, str) and NAME_RE.match(p[:-5] if
                                                                                           p.endswith(".html") else "")]
        except (OSError, ValueError, AttributeError):
            return []

    def _write_as_student(self, student: str, assignment: str, files: dict, remove: list) -> bool:
        if not NAME_RE.match(assignment):
            return False
        pw = pwd.getpwnam(student)
        data = json.dumps({"home": str(self.s.home_of(student)), "assignment": assignment, "folder": FEEDBACK_DIR,
                           "files": files, "remove": remove})
        try:
            proc = subprocess.run([str(self.s.env / "bin" / "python"), "-I", "-c", _DELIVER], input=data, text=True,
                                  capture_output=True, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                                  cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.log(f"feedback for {student}/{assignment} not written: {e}")
            return False
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            self.log(f"feedback for {student}/{assignment} not written (their folder: {last[:300]})")
            return False
        return True
