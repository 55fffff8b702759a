"""The course's collection: what reaches submitted/ from the exchange's inbound, and at what time.

`nbgrader submit` runs as the student: it writes the submission folder
(`<student>+<assignment>+<time>+<random>`) and its `timestamp.txt` into the exchange's inbound. On a
shared machine (the hub) every student has a shell, so everything in that folder, its name and its
time are the student's word. nbgrader's own collect trusts them: it copies with shutil.copytree
(following symbolic links, as the instructor who runs it), only warns when a folder named for one
student is owned by another account, and stops the whole class's collection on one malformed name,
one unreadable folder or one sparse file whose apparent size passes its limit.

`CourseCollect` (the formgrader's *Collect* and `nbgrader collect`: `c.ExchangeFactory.collect` in
nbgrader_config.py) replaces nbgrader's choice and copy; each student's problems stay with that student:

Which folders count. An inbound entry for the assignment must be a folder (not a link to one), with a
well-formed name whose student id is a plain account name, and, on a machine with accounts
(`check_owner`, nbgrader's option, on by default), owned by the account it names. Anything else is set
aside: never collected for anyone, named in the collect log and in
`collected/<assignment>.set_aside.json` (and, when it names a student, in that student's record), left
in the inbound as it was.

Which of a student's folders is collected: the one whose files were written last (the newest ctime
beneath it; see below), not the one with the latest time in its name, which the student chooses.
A folder the instructor cannot read is set aside and the next one is taken.

What is copied. Only regular files owned by the student (the account the folder names), read through
file descriptors opened without following links (O_NOFOLLOW, and a check that the inode opened is the
one listed), at most `max_file_size` kB each (nbgrader's option; the apparent size counts, so a sparse
file cannot pass), `max_dir_size` kB and `max_entries` entries in all, `max_depth` folders deep.
Symbolic links, hard links to another account's file (owned by that account), FIFOs, sockets and
devices are refused and named, with the reason, in the student's record, the collect log and the
grades' notes; the rest of the submission is collected. The copy is made beside the previous
submission and renamed into place, so a failed copy never leaves half a submission and never loses
the one collected before.

The time. What the server side can trust is each inbound file's ctime (its inode's last change): the
system sets it on every write, chmod, rename or link, and its owner cannot set it back (utime sets only
the access and modification times), so the newest ctime of a submission folder's entries is when it
was last written (or later, never earlier). After the copy, `check` compares it with the student's
`timestamp.txt`: at most SLACK_S before the files' time (and not after it by more than SLACK_S), the
student's time is kept; earlier, later, missing or unreadable, `submitted/.../timestamp.txt` is
replaced by the files' time, so every later step (the batch, nbgrader's autograde, the formgrader)
grades that time.

Every collected submission gets a record in `collected/<assignment>.json` in the course folder (out of
the students' reach; the batch and grades.csv read it to say "timestamp.txt says ..., the files were
written at ...; graded as ..." and which files the collection refused). Nothing a student made is
lost: the inbound stays as it was, the student's `timestamp.txt` text is in the record.
"""

from __future__ import annotations

import datetime
import errno
import fnmatch
import json
import os
import re
import shutil
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path

try:
    import pwd
except ImportError:  # Windows: nbgrader checks no owners there either
    pwd = None

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import check_mode, parse_utc
from traitlets import Float, Integer, Unicode

# Seconds the student's time may be before the files' time. An honest `nbgrader submit` takes its time
# first, then copies the notebooks (at most CourseDirectory.max_dir_size, 100 MB by default), writes
# timestamp.txt and sets the files' modes: seconds later on a loaded machine. The exchange and the
# students' servers share one clock on the hub; an exchange on another machine's disk (NFS) adds that
# machine's clock error, which a minute covers for any clock kept by NTP.
SLACK_S = 60.0
RECORDS = "collected"  # <course>/collected/<assignment>.json
# A student id the collection accepts from a folder's name: an account name (no path separators, no
# "." or "..", nothing a shell or a spreadsheet reads specially at its start).
STUDENT_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}")
NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def account_name(uid: int) -> str:
    if pwd is None:
        return f"uid {uid}"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid} (no account)"


def kind_of(mode: int) -> str:
    """What an inode is, in words (for the reasons the collection gives)."""
    for test, word in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file"),
                       (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "not a file"


# ----------------------------------------------------------------------------- the files' time

class TooMany(OSError):
    """A folder holds more entries than the collection looks at."""


def written_at(folder: Path, max_entries: int | None = None) -> datetime.datetime:
    """The newest ctime of the folder and every entry beneath it (links themselves, never followed), UTC.
    TooMany when there are more than max_entries entries beneath it."""
    newest = os.lstat(folder).st_ctime
    seen = 0
    for top, dirs, names in os.walk(folder):  # os.walk never follows links into folders
        for n in dirs + names:
            seen += 1
            if max_entries is not None and seen > max_entries:
                raise TooMany(errno.EFBIG, f"more than {max_entries} entries")
            try:
                newest = max(newest, os.lstat(os.path.join(top, n)).st_ctime)
            except OSError:  # gone while we looked: the copy already failed or holds what was there
                pass
    return datetime.datetime.fromtimestamp(newest, datetime.timezone.utc).replace(tzinfo=None)


def stamp_text(when: datetime.datetime) -> str:
    """A time as `nbgrader submit` writes it (UTC; nbgrader reads it back with parse_utc)."""
    return when.strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC"


def student_stamp(folder: Path) -> tuple[str | None, datetime.datetime | None]:
    """(timestamp.txt's text, the time it says) in a submission folder; None where missing or unreadable."""
    path = folder / "timestamp.txt"
    if path.is_symlink() or not path.is_file():
        return None, None
    try:
        with open(path, "rb") as f:
            text = f.read(4097).decode("utf-8", "replace")
    except OSError:
        return None, None
    if len(text) > 4096:
        return text[:200] + "...", None
    try:
        return text, parse_utc(text.strip()) if text.strip() else None
    except (ValueError, OverflowError):
        return text, None


def check(inbound: Path, submitted: Path, slack_s: float = SLACK_S) -> dict:
    """Compare a copied submission's time with its inbound files' time; replace submitted/'s
    timestamp.txt with the files' time when the student's is missing, unreadable, or earlier or later
    than it by more than slack_s. Returns the record (what collected/<assignment>.json keeps for the
    student)."""
    files_time = written_at(inbound)
    text, claimed = student_stamp(submitted)
    # nbgrader stores naive UTC; parse_utc gives an aware time
    claimed_utc = claimed.astimezone(datetime.timezone.utc).replace(tzinfo=None) if claimed else None
    replace = claimed_utc is None or abs((files_time - claimed_utc).total_seconds()) > slack_s
    graded = stamp_text(files_time) if replace else text
    if replace:
        target = submitted / "timestamp.txt"
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif os.path.lexists(target):
            target.unlink()
        target.write_text(graded)
    return {"inbound": inbound.name, "timestamp_txt": text, "files_written": stamp_text(files_time),
            "graded_as": graded, "replaced": replace, "slack_s": slack_s}


# ----------------------------------------------------------------------------- the copy

@dataclass
class Limits:
    max_file_bytes: int = 100_000_000   # nbgrader's max_file_size (kB) x 1000
    max_total_bytes: int = 100_000_000  # nbgrader's max_dir_size (kB) x 1000
    max_entries: int = 1000
    max_depth: int = 16
    ignore: tuple[str, ...] = ()        # nbgrader's CourseDirectory.ignore (names or globs), skipped silently


@dataclass
class CopyReport:
    files: int = 0
    bytes: int = 0
    entries: int = 0
    refused: list[str] = field(default_factory=list)  # "path: why"


def _read_capped(fd: int, dest_fd: int, cap: int) -> int:
    """Copy from fd to dest_fd, at most cap bytes; -1 when the source holds more."""
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, cap + 1 - total))
        if not chunk:
            return total
        total += len(chunk)
        if total > cap:
            return -1
        view = memoryview(chunk)
        while view:
            view = view[os.write(dest_fd, view):]


def copy_submission(src: Path, dest: Path, owner_uid: int | None, limits: Limits) -> CopyReport:
    """Copy the regular files of the submission folder src, owned by owner_uid (None: any owner), into
    the new folder dest; everything else is refused and named in the report. Never follows a link:
    every entry is opened relative to its parent's descriptor with O_NOFOLLOW, and what was opened is
    checked (fstat) to be the regular file or folder that was listed. Raises OSError when src itself
    cannot be opened as a folder."""
    report = CopyReport()
    top = os.open(src, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        st = os.fstat(top)
        if owner_uid is not None and st.st_uid != owner_uid:
            raise PermissionError(errno.EPERM, f"owned by {account_name(st.st_uid)}")
        os.mkdir(dest, 0o755)
        try:
            _copy_dir(top, dest, "", owner_uid, limits, report, 0)
        except _Stop:  # the entry cap: what was copied stays, the rest is named in the report
            pass
    finally:
        os.close(top)
    return report


def _copy_dir(src_fd: int, dest: Path, rel: str, owner_uid: int | None, limits: Limits, report: CopyReport,
              depth: int) -> None:
    """Copy the entries of the folder open as src_fd into dest; rel is the folder's path in the
    submission ("" at its top, else ending in "/"), as the report names it."""
    try:
        names = sorted(os.listdir(src_fd))
    except OSError as e:
        report.refused.append(f"{rel or '.'}: cannot be listed ({e.strerror})")
        return
    for name in names:
        path = f"{rel}{name}"
        if any(fnmatch.fnmatch(name, pat) for pat in limits.ignore):
            continue
        report.entries += 1
        if report.entries > limits.max_entries:
            report.refused.append(f"{path} and everything after it: more than {limits.max_entries} entries")
            raise _Stop
        try:
            st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        except OSError as e:
            report.refused.append(f"{path}: cannot be read ({e.strerror})")
            continue
        why = _not_collected(name, src_fd, st, owner_uid)
        if why:
            report.refused.append(f"{path}: {why}")
        elif stat.S_ISDIR(st.st_mode):
            _copy_subdir(src_fd, name, st, dest, path, owner_uid, limits, report, depth)
        else:
            _copy_file(src_fd, name, st, dest, path, limits, report)


def _not_collected(name: str, src_fd: int, st: os.stat_result, owner_uid: int | None) -> str | None:
    """Why the entry `name` of the folder open as src_fd (listed as st) is refused, or None: only
    regular files and folders, owned by the student, are collected."""
    kind = kind_of(st.st_mode)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        why = kind
        if stat.S_ISLNK(st.st_mode):
            try:
                why += f" to {os.readlink(name, dir_fd=src_fd)[:200]!r}"
            except OSError:
                pass
        return f"{why}; only regular files are collected"
    if owner_uid is not None and st.st_uid != owner_uid:
        extra = f", a hard link ({st.st_nlink} names) to another account's file" if (
            stat.S_ISREG(st.st_mode) and st.st_nlink > 1) else ""
        return f"{kind} owned by {account_name(st.st_uid)}, not by the student{extra}"
    return None


def _copy_subdir(src_fd: int, name: str, st: os.stat_result, dest: Path, path: str, owner_uid: int | None,
                 limits: Limits, report: CopyReport, depth: int) -> None:
    """The folder `name` (listed as st) copied into dest / name, when it is not too deep and is still
    the folder that was listed once opened."""
    if depth + 1 > limits.max_depth:
        report.refused.append(f"{path}/: more than {limits.max_depth} folders deep")
        return
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=src_fd)
    except OSError as e:
        report.refused.append(f"{path}/: cannot be opened ({e.strerror})")
        return
    try:
        got = os.fstat(fd)
        if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
            report.refused.append(f"{path}/: replaced while it was collected")
            return
        os.mkdir(dest / name, 0o755)
        _copy_dir(fd, dest / name, f"{path}/", owner_uid, limits, report, depth + 1)
    finally:
        os.close(fd)


def _copy_file(src_fd: int, name: str, st: os.stat_result, dest: Path, path: str, limits: Limits,
               report: CopyReport) -> None:
    """The regular file `name` (listed as st) copied into dest / name within the size limits, when it is
    still the file that was listed once opened; a copy that fails or grows past its cap is removed."""
    # the apparent size counts (a sparse file of 1 TB holds 1 TB of zeros)
    if st.st_size > limits.max_file_bytes:
        report.refused.append(f"{path}: {st.st_size} bytes, more than the limit of {limits.max_file_bytes} a file")
        return
    if report.bytes + st.st_size > limits.max_total_bytes:
        report.refused.append(f"{path}: {st.st_size} bytes would take the submission past its limit of "
                              f"{limits.max_total_bytes} bytes")
        return
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW, dir_fd=src_fd)
    except OSError as e:
        report.refused.append(f"{path}: cannot be opened ({e.strerror})")
        return
    out = None
    try:
        got = os.fstat(fd)
        if (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(got.st_mode):
            report.refused.append(f"{path}: replaced while it was collected")
            return
        cap = min(limits.max_file_bytes, limits.max_total_bytes - report.bytes)
        out = os.open(dest / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
        n = _read_capped(fd, out, cap)
        if n < 0:
            os.close(out)
            out = None
            os.unlink(dest / name)
            report.refused.append(f"{path}: grew past the limit of {cap} bytes while it was collected")
            return
        report.files += 1
        report.bytes += n
    except OSError as e:
        report.refused.append(f"{path}: cannot be read ({e.strerror})")
        if out is not None:
            os.close(out)
            out = None
            try:
                os.unlink(dest / name)
            except OSError:
                pass
    finally:
        os.close(fd)
        if out is not None:
            os.close(out)


class _Stop(Exception):
    """The entry cap was reached: nothing more is copied."""


# ----------------------------------------------------------------------------- records

def record_path(root: Path, assignment: str) -> Path:
    return Path(root) / RECORDS / f"{assignment}.json"


def set_aside_path(root: Path, assignment: str) -> Path:
    return Path(root) / RECORDS / f"{assignment}.set_aside.json"


def read_records(root: Path, assignment: str) -> dict:
    try:
        data = json.loads(record_path(root, assignment).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def write_record(root: Path, assignment: str, student: str, record: dict) -> None:
    records = read_records(root, assignment)
    records[student] = record
    _write_json(record_path(root, assignment), records)


def note(record: dict | None, timestamp: str | None) -> str:
    """What the grades say about how a submission was collected ("" when there is nothing to say): a
    submission time the collection replaced, files it refused, folders in the student's name it set
    aside. Only a record of the submission being graded counts: its graded time is what submitted/
    holds."""
    if not record or timestamp is None:
        return ""
    if str(record.get("graded_as", "")).strip() != timestamp.strip():
        return ""
    parts = []
    if record.get("replaced"):
        said = record.get("timestamp_txt")
        said = "no time" if said is None else (repr(said.strip()) if said.strip() else "nothing (empty)")
        parts.append(f"timestamp.txt says {said}, the files were written at {record['files_written']}; "
                     f"graded as {record['graded_as']}")
    refused = record.get("refused") or []
    if refused:
        shown = "; ".join(refused[:5]) + (f"; and {len(refused) - 5} more" if len(refused) > 5 else "")
        parts.append(f"not collected: {shown}")
    aside = record.get("set_aside") or []
    if aside:
        parts.append("set aside (not this student's): " + "; ".join(f"{a['folder']} ({a['why']})" for a in aside[:3])
                     + (f"; and {len(aside) - 3} more" if len(aside) > 3 else ""))
    return "; ".join(parts)


def collection_note(root: Path, assignment: str, student: str, timestamp: str | None = None) -> str:
    """note() for a student's submission in the course at root; `timestamp`: its timestamp.txt's text
    (default: read from submitted/<student>/<assignment>/)."""
    record = read_records(root, assignment).get(student)
    if record is not None and timestamp is None:
        timestamp = student_stamp(Path(root) / "submitted" / student / assignment)[0]
    return note(record, timestamp)


# ----------------------------------------------------------------------------- nbgrader's collect

@dataclass
class Candidate:
    name: str
    student: str | None = None   # the student the name claims (None: not readable from the name)
    owner: str | None = None
    owner_uid: int | None = None
    why: str = ""                # set aside: the reason; "" while it counts


class CourseCollect(ExchangeCollect):
    """The course's collection (module docstring): the student's own folder written last, regular files
    of theirs only, with caps; one student's problem never stops the others'."""

    slack_s = Float(SLACK_S, help="Seconds timestamp.txt may be before the inbound files' ctime").tag(config=True)
    max_entries = Integer(1000, help="Files and folders collected from one submission at most").tag(config=True)
    max_depth = Integer(16, help="Folders deep collected in one submission at most").tag(config=True)
    student_inbounds = Unicode("", help="Each student's own inbound, with {student} for their id (the hub: "
                               "each student hands in on their own filesystem); read besides the exchange's "
                               "inbound. A folder found in one student's inbound counts only for that "
                               "student").tag(config=True)

    # --- which folders
    def _path_to_record(self, path):
        """nbgrader's record of an inbound folder ({'username', 'filename', 'timestamp'}); the time is
        None when the name's part is not a time (the collection never trusts it anyway)."""
        filename = os.path.split(path)[1]
        parts = filename.rsplit("+", 3)
        try:
            when = parse_utc(parts[2]) if len(parts) == 4 else None
        except (ValueError, OverflowError):
            when = None
        return {"username": parts[0], "filename": filename, "timestamp": when}

    def _folder(self, rec) -> Path:
        return Path(rec.get("path") or os.path.join(self.inbound_path, rec["filename"]))

    def _written(self, rec) -> datetime.datetime:
        try:
            return written_at(self._folder(rec), self.max_entries * 2)
        except OSError:
            return datetime.datetime.min

    def _sort_by_timestamp(self, records):
        """Newest first by when the folder's files were written (:func:`written_at`; ties: by the time in
        the name, which the student chooses). With check_owner, the student's own folders come before
        any another account wrote in their name (those are set aside by the collection anyway)."""
        by_name = sorted(records, key=lambda r: r["timestamp"] or datetime.datetime.min, reverse=True)
        ordered = sorted(by_name, key=self._written, reverse=True)  # stable
        if pwd is None or not self.check_owner:
            return ordered

        def owner(rec):
            try:
                return account_name(os.lstat(self._folder(rec)).st_uid)
            except OSError:
                return None
        return sorted(ordered, key=lambda rec: owner(rec) != rec["username"])

    def _inbounds(self) -> list[tuple[Path, str | None]]:
        """(folder, the student whose own inbound it is, or None for the exchange's shared inbound)."""
        found = [(Path(self.inbound_path), None)]
        pattern = self.student_inbounds
        if pattern and "{student}" in pattern:
            head, tail = pattern.split("{student}", 1)
            parent = Path(head)
            try:
                names = sorted(os.listdir(parent))
            except OSError as e:
                self.log.error("cannot list %s for the students' inbounds: %s", parent, e.strerror)
                names = []
            for student in names:
                folder = Path(head + student + tail)
                if STUDENT_ID.fullmatch(student) and folder.is_dir() and not folder.is_symlink():
                    found.append((folder, student))
        return found

    def _examine(self, name: str, where: Path | None = None, whose: str | None = None) -> Candidate:
        """An inbound entry of this assignment: whose it is and whether it counts. `where`: the inbound
        folder it is in; `whose`: the student whose own inbound that is (None: the shared one)."""
        where = Path(where or self.inbound_path)
        c = Candidate(name)
        parts = name.rsplit("+", 3)
        if len(parts) != 4 or parts[1] != self.coursedir.assignment_id:
            c.why = "malformed name (not <student>+<assignment>+<time>+<random>)"
            return c
        student, _, when, _ = parts
        if not STUDENT_ID.fullmatch(student):
            c.why = f"malformed name: {student[:80]!r} is not a student id"
            return c
        c.student = student
        try:
            parse_utc(when)
        except (ValueError, OverflowError):
            c.why = f"malformed name: {when[:80]!r} is not a time"
            return c
        if whose is not None and student != whose:
            c.why = f"names {student} but was handed in through {whose}'s own inbound"
            return c
        try:
            st = os.lstat(where / name)
        except OSError as e:
            c.why = f"cannot be examined ({e.strerror})"
            return c
        c.owner_uid, c.owner = st.st_uid, account_name(st.st_uid)
        if not stat.S_ISDIR(st.st_mode):
            c.why = f"{kind_of(st.st_mode)}, not a folder"
            return c
        if self.check_owner and pwd is not None:
            try:
                uid = pwd.getpwnam(student).pw_uid
            except KeyError:
                c.why = f"names {student}, who has no account here; owned by {c.owner}"
                return c
            if uid != st.st_uid:
                c.why = f"names {student} but is owned by {c.owner}"
                return c
        return c

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail("Course not found: {}".format(self.inbound_path))
        if not check_mode(self.inbound_path, read=True, execute=True):
            self.fail("You don't have read permissions for the directory: {}".format(self.inbound_path))
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None
        wanted = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else None
        marker = f"+{self.coursedir.assignment_id}+"
        self.set_aside: list[Candidate] = []
        own: dict[str, list[dict]] = {}
        for where, whose in self._inbounds():
            try:
                names = sorted(os.listdir(where))
            except OSError as e:  # one student's inbound: their problem, reported; the others are collected
                self.log.error("cannot list %s: %s", where, e.strerror)
                if whose:
                    self.set_aside.append(Candidate(str(where), whose, why=f"their inbound cannot be listed ({e.strerror})"))
                continue
            for name in names:
                if marker not in name:
                    continue  # another assignment's
                c = self._examine(name, where, whose)
                if wanted and c.student != wanted:
                    continue
                if c.why:
                    self.set_aside.append(c)
                    continue
                rec = self._path_to_record(name)
                rec["uid"], rec["path"] = c.owner_uid, str(where / name)
                own.setdefault(c.student, []).append(rec)
        self.src_records = []
        for student, recs in sorted(own.items()):
            ordered = self._sort_by_timestamp(recs)
            if self.duedate is not None and self.before_duedate:
                due = self.duedate
                before = [r for r in ordered if self._written(r) <= due]
                ordered = before + [r for r in ordered if r not in before]
            self.src_records.append({"username": student, "candidates": ordered,
                                     "filename": ordered[0]["filename"], "timestamp": ordered[0]["timestamp"]})

    # --- the copy
    def _limits(self) -> Limits:
        return Limits(max_file_bytes=1000 * self.coursedir.max_file_size,
                      max_total_bytes=1000 * self.coursedir.max_dir_size,
                      max_entries=self.max_entries, max_depth=self.max_depth,
                      ignore=tuple(self.coursedir.ignore))

    def copy_files(self):
        assignment = self.coursedir.assignment_id
        root = Path(self.coursedir.root)
        aside_of: dict[str, list[dict]] = {}
        for c in self.set_aside:
            self.log.warning("set aside %r: %s", c.name, c.why)
            if c.student:
                aside_of.setdefault(c.student, []).append({"folder": c.name, "why": c.why})
        if not self.src_records:
            self.log.warning("No submissions of '%s' for course '%s' to collect", assignment, self.coursedir.course_id)
        else:
            self.log.info("Processing %d submissions of '%s' for course '%s'", len(self.src_records), assignment,
                          self.coursedir.course_id)
        problems = 0
        for rec in self.src_records:
            student = rec["username"]
            try:
                if not self._collect_one(rec, aside_of.get(student, [])):
                    problems += 1
            except Exception as e:  # this student only: the class's collection goes on
                problems += 1
                self.log.error("%s: not collected (%s: %s); the other students are", student, type(e).__name__, e)
        for student, aside in sorted(aside_of.items()):
            if student not in {r["username"] for r in self.src_records}:
                self.log.warning("%s: nothing collected; only folders set aside name them", student)
        _write_json(set_aside_path(root, assignment),
                    [{"folder": c.name, "names": c.student, "owner": c.owner, "why": c.why} for c in self.set_aside])
        if problems or self.set_aside:
            self.log.warning("collection of %s: %d student(s) with problems, %d folder(s) set aside "
                             "(collected/%s.json and collected/%s.set_aside.json say which)", assignment, problems,
                             len(self.set_aside), assignment, assignment)

    def _collect_one(self, rec: dict, aside: list[dict]) -> bool:
        """Copy one student's chosen folder into submitted/; False when nothing could be collected."""
        student = rec["username"]
        assignment = self.coursedir.assignment_id
        root = Path(self.coursedir.root)
        dest = Path(self.coursedir.format_path(self.coursedir.submitted_directory, student, assignment))
        previous = read_records(root, assignment).get(student)
        if dest.is_dir() and not self.update:
            self.log.info("Submission already exists, use --update to update: %s %s", student, assignment)
            return True
        dest.parent.mkdir(parents=True, exist_ok=True)
        owner_uid = rec["candidates"][0].get("uid") if (self.check_owner and pwd is not None) else None
        for cand in rec["candidates"]:
            src = self._folder(cand)
            written = self._written(cand)
            if (self.update and dest.is_dir() and previous and previous.get("inbound") == cand["filename"]
                    and previous.get("files_written") == stamp_text(written) and
                    previous.get("set_aside", []) == aside):
                self.log.info("No newer submission to collect: %s %s", student, assignment)
                return True
            tmp = dest.parent / f".{assignment}.collecting-{uuid.uuid4().hex[:12]}"
            try:
                report = copy_submission(src, tmp, owner_uid, self._limits())
            except OSError as e:
                shutil.rmtree(tmp, ignore_errors=True)
                why = f"cannot be read ({e.strerror or e})"
                self.log.warning("set aside %r: %s", cand["filename"], why)
                aside = aside + [{"folder": cand["filename"], "why": why}]
                self.set_aside.append(Candidate(cand["filename"], student, account_name(cand["uid"])
                                                if cand.get("uid") is not None else None, cand.get("uid"), why))
                continue
            record = check(src, tmp, self.slack_s)
            record.update(refused=report.refused, set_aside=aside, files=report.files, bytes=report.bytes)
            if dest.exists():
                old = dest.parent / f".{assignment}.replaced-{uuid.uuid4().hex[:12]}"
                os.replace(dest, old)
                os.replace(tmp, dest)
                shutil.rmtree(old, ignore_errors=True)
                self.log.info("Updating submission: %s %s", student, assignment)
            else:
                os.replace(tmp, dest)
                self.log.info("Collecting submission: %s %s", student, assignment)
            write_record(root, assignment, student, record)
            for r in report.refused:
                self.log.warning("%s: not collected: %s", student, r)
            if record["replaced"]:
                self.log.warning("%s: %s", student, note(dict(record, refused=[], set_aside=[]), record["graded_as"]))
            return True
        self.log.error("%s: none of their folders could be read; nothing collected", student)
        return False

    def do_copy(self, src, dest, log=None):
        """The course's copy (never nbgrader's copytree, which follows links)."""
        report = copy_submission(Path(src), Path(dest), None, self._limits())
        for r in report.refused:
            self.log.warning("not collected: %s", r)
