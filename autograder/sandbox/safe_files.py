"""File helpers of the grader: atomic writes, reads that never follow a link, scratch folders.

Everything the grader writes into the course (autograded/, feedback/, the CSV tables, the batch
records, the gradebook backup) goes through `atomic_write_bytes`: a temporary file in the same
folder, flushed, then renamed over the target, so a crash or a full disk leaves either the old
file or the new one, never half of one. A full disk (ENOSPC, EDQUOT, EFBIG) becomes `DiskFull`
naming the file, so a batch can stop with one clear error.

Files that came from a student (submissions) are read with `read_regular`: O_NOFOLLOW and a
check that the path is a regular file, with a size cap, so a symbolic link, a FIFO or a device
planted in their place is refused instead of followed.

Scratch folders are named `llmrl-<kind>-<pid>-<random>` under the temporary folder; `sweep`
removes the ones whose process is gone (a batch killed with SIGKILL leaves its folders behind,
the next batch cleans them up).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class DiskFull(OSError):
    """No space left (or a file size limit) while writing `path`."""

    def __init__(self, path: Path, cause: OSError):
        super().__init__(cause.errno, f"no space left on the device while writing {path} ({cause.strerror})")
        self.path = path


class NotRegular(OSError):
    """A path that should be a regular file is a link, a folder, a FIFO or a device."""


def _full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in FULL_ERRNOS


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if _full(e):
            raise DiskFull(path, e) from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


# A spreadsheet reads a cell that starts with one of these as a formula (or, for tab and CR, may
# shift it into one). Student ids and file names reach the grade tables, so a cell such as
# `=HYPERLINK(...)` must arrive as text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_safe(value):
    """`value` as a CSV cell no spreadsheet runs: text starting with =, +, -, @, tab or CR gets a
    leading apostrophe (shown as text, the OWASP rule); numbers, and text that is exactly a number
    such as "-2.5", stay as they are."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    if _PLAIN_NUMBER.fullmatch(value):
        return value
    return "'" + value


def write_csv(path: Path, fieldnames: list[str], rows, extrasaction: str = "raise") -> None:
    """A CSV table written atomically, every cell passed through `spreadsheet_safe`."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fieldnames, extrasaction=extrasaction)
    w.writeheader()
    for row in rows:
        w.writerow({k: spreadsheet_safe(v) for k, v in row.items()})
    atomic_write_text(path, buf.getvalue())


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file, never following a symbolic link; NotRegular otherwise.

    Raises ValueError when the file is larger than max_bytes (nothing beyond is read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegular(errno.ELOOP, f"{path} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(errno.EINVAL, f"{path} is not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{path} is larger than {max_bytes >> 20} MB")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise ValueError(f"{path} is larger than {max_bytes >> 20} MB")
        return data
    finally:
        os.close(fd)


def is_regular(path: Path) -> bool:
    """True for a regular file that is not a symbolic link (lstat)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def copy_regular(src: Path, dst: Path, max_bytes: int = 256 << 20) -> None:
    """Copy a regular file (never a link) atomically."""
    atomic_write_bytes(dst, read_regular(src, max_bytes))


# ----------------------------------------------------------------------------- scratch folders

_NAME = re.compile(r"^llmrl-[a-z]+-(\d+)-")


def scratch_dir(kind: str, parent: Path | None = None) -> Path:
    """A new private folder llmrl-<kind>-<pid>-XXXX (mode 700)."""
    return Path(tempfile.mkdtemp(prefix=f"llmrl-{kind}-{os.getpid()}-", dir=parent))


def rmtree(path: Path) -> None:
    """Remove a folder a kernel may have written into: links are removed, never followed; folders
    whose permissions were taken away are given them back first."""
    def onerror(func, p, exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError:
            pass
    if os.path.lexists(path):
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
        else:
            shutil.rmtree(path, onerror=onerror)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(parent: Path | None = None) -> list[Path]:
    """Remove the scratch folders of grader processes that no longer exist; returns them."""
    parent = Path(parent or tempfile.gettempdir())
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        m = _NAME.match(entry.name)
        if not m or not entry.is_dir(follow_symlinks=False):
            continue
        if int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            rmtree(Path(entry.path))
            removed.append(Path(entry.path))
    return removed
