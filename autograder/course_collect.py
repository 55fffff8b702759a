"""The course's collection: nbgrader's collect, with a submission time the student cannot forge.

`nbgrader submit` runs as the student: it writes the submission folder
(`<student>+<assignment>+<time>+<random>`) and its `timestamp.txt` into the exchange's inbound, and
nbgrader's collect (the formgrader's *Collect*, `nbgrader collect`) picks the newest folder by the time
in its name and copies it, `timestamp.txt` included, into `submitted/<student>/<assignment>/`, where
autograde (nbgrader's, and the course's batch) reads the submission time from `timestamp.txt`. Both
times are the student's word: a student with a shell (every student on the hub has one) can write any
well-formed time there, or none.

What the server side can trust is each inbound file's ctime (its inode's last change): the system
sets it on every write, chmod, rename or link, and its owner cannot set it back (utime sets only the
access and modification times), so the newest ctime of a submission folder's entries is when it was
last written (or later, never earlier). `CourseCollect` copies as nbgrader does and then compares:

- the student's time (timestamp.txt) is at most SLACK_S before the files' time (and not after it by
  more than SLACK_S): nothing changes;
- it is earlier than that, later than that (an honest submit takes its time before it writes the
  files), missing or unreadable: `submitted/.../timestamp.txt` is replaced by the files' time, so every
  later step (the batch, nbgrader's autograde, the formgrader) grades that time.

Which of a student's folders is collected: nbgrader takes the newest by the time in its name, which the
student writes too. `CourseCollect` takes the one whose files were written last (ties: nbgrader's
order), so a folder named far in the future does not hide the student's later submissions; folders
another account wrote in the student's name come after all of the student's own.

Every collected submission gets a record in `collected/<assignment>.json` in the course folder (out of
the students' reach; the batch and grades.csv read it to say "timestamp.txt says ..., the files were
written at ...; graded as ..."). Nothing a student made is lost: the inbound folder stays as it was,
the student's `timestamp.txt` text is in the record.

It is nbgrader's collect class for the course (`c.ExchangeFactory.collect` in nbgrader_config.py).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path

try:
    import pwd
except ImportError:  # Windows: nbgrader checks no owners there either
    pwd = None

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import parse_utc
from traitlets import Float

# Seconds the student's time may be before the files' time. An honest `nbgrader submit` takes its time
# first, then copies the notebooks (at most CourseDirectory.max_dir_size, 100 MB by default), writes
# timestamp.txt and sets the files' modes: seconds later on a loaded machine. The exchange and the
# students' servers share one clock on the hub; an exchange on another machine's disk (NFS) adds that
# machine's clock error, which a minute covers for any clock kept by NTP.
SLACK_S = 60.0
RECORDS = "collected"  # <course>/collected/<assignment>.json


def written_at(folder: Path) -> datetime.datetime:
    """The newest ctime of the folder and every entry beneath it (links themselves, never followed), UTC."""
    newest = os.lstat(folder).st_ctime
    for top, dirs, names in os.walk(folder):  # os.walk never follows links into folders
        for n in dirs + names:
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


def record_path(root: Path, assignment: str) -> Path:
    return Path(root) / RECORDS / f"{assignment}.json"


def read_records(root: Path, assignment: str) -> dict:
    try:
        data = json.loads(record_path(root, assignment).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_record(root: Path, assignment: str, student: str, record: dict) -> None:
    path = record_path(root, assignment)
    path.parent.mkdir(parents=True, exist_ok=True)
    records = read_records(root, assignment)
    records[student] = record
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(records, indent=1, sort_keys=True))
    os.replace(tmp, path)


def note(record: dict | None, timestamp: str | None) -> str:
    """What the grades say about a submission whose time the collection replaced ("" otherwise). Only a
    record of the submission being graded counts: its graded time is what submitted/ holds."""
    if not record or not record.get("replaced") or timestamp is None:
        return ""
    if str(record.get("graded_as", "")).strip() != timestamp.strip():
        return ""
    said = record.get("timestamp_txt")
    said = "no time" if said is None else (repr(said.strip()) if said.strip() else "nothing (empty)")
    return (f"timestamp.txt says {said}, the files were written at {record['files_written']}; "
            f"graded as {record['graded_as']}")


def collection_note(root: Path, assignment: str, student: str, timestamp: str | None = None) -> str:
    """note() for a student's submission in the course at root; `timestamp`: its timestamp.txt's text
    (default: read from submitted/<student>/<assignment>/)."""
    record = read_records(root, assignment).get(student)
    if record is not None and timestamp is None:
        timestamp = student_stamp(Path(root) / "submitted" / student / assignment)[0]
    return note(record, timestamp)


class CourseCollect(ExchangeCollect):
    """nbgrader's collect, then the check above for each submission it copied; a folder that names a
    student but is owned by another account is never chosen over one the student wrote."""

    slack_s = Float(SLACK_S, help="Seconds timestamp.txt may be before the inbound files' ctime").tag(config=True)

    def _sort_by_timestamp(self, records):
        """Newest first by when the folder's files were written (:func:`written_at`; ties keep nbgrader's
        order by the time in the name, which the student chooses: a folder named in the year 2099 must
        not hide their later submissions). On a machine with accounts (the hub) the student's own
        folders come before any another account wrote in their name (nbgrader only warns about those,
        after choosing the newest: another student could hand in a later-named folder for them)."""
        def written(rec):
            try:
                return written_at(Path(self.inbound_path) / rec["filename"])
            except OSError:
                return datetime.datetime.min
        ordered = sorted(super()._sort_by_timestamp(records), key=written, reverse=True)  # stable
        if pwd is None or not self.check_owner:
            return ordered

        def owner(rec):
            try:
                return pwd.getpwuid(os.lstat(os.path.join(self.inbound_path, rec["filename"])).st_uid).pw_name
            except (KeyError, OSError):
                return None
        return sorted(ordered, key=lambda rec: owner(rec) != rec["username"])  # stable: newest first within

    def do_copy(self, src, dest, log=None):
        super().do_copy(src, dest, log)
        record = check(Path(src), Path(dest), self.slack_s)
        student = Path(src).name.rsplit("+", 3)[0]
        write_record(Path(self.coursedir.root), self.coursedir.assignment_id, student, record)
        if record["replaced"]:
            self.log.warning("%s: %s", student, note(record, record["graded_as"]))
