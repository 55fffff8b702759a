"""The course and a learning-management system (Canvas, Moodle): the class list in, the LMS's
submission downloads in, the grades out (docs/lms.md walks through it).

    autograder/lms roster FILE.csv [--course DIR] [--id-column NAME]
        the class list, as Canvas (Grades > Export) or Moodle (Grades > Export > Plain text file, or
        Participants > Download table data) writes it -> the gradebook's students and DIR/roster.json
    autograder/lms collect ASSIGNMENT FILE.zip... [--course DIR]
        the "Download submissions" zip of Canvas or Moodle -> nbgrader zip_collect with this module's
        plugins -> DIR/submitted/<student>/<assignment>/; says which file went to whom and what could
        not be matched (then `make autograde` as usual)
    autograder/lms export canvas|moodle [--course DIR] [--out FILE] [--totals-only]
        the gradebook as the LMS's gradebook import reads it (also `nbgrader export --exporter
        lms.CanvasGrades` / `lms.MoodleGrades` in the course folder)
    autograder/lms sample canvas|moodle [ASSIGNMENT...] [--out DIR]
        a class list and a submissions zip of the sample students, as that LMS writes them (to try
        the steps above before the class hands anything in)

Nothing the LMS files hold is trusted: names in a download are chosen by students (a file name)
or by the LMS from their names, so a file is only given to a student the class list names, by the
LMS's own user number where the download carries one (Canvas) and by the full name otherwise
(Moodle, which numbers participants per assignment); a name that fits nobody, or two people, is
reported and not collected. Archives are read entry by entry: only notebooks are extracted, never
through a link or outside the extraction folder, with size caps; an archive inside the download
is not opened. Every CSV cell goes through files.write_csv (no cell can be a spreadsheet formula).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shutil
import stat
import sys
import unicodedata
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nbgrader.plugins import ExportPlugin
from nbgrader.plugins.zipcollect import ExtractorPlugin, FileNameCollectorPlugin

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course  # noqa: E402
import files  # noqa: E402
from course import PipelineError  # noqa: E402

ROSTER = "roster.json"
# A student id is a folder name in submitted/ and, on the hub, an account name: lower case, no
# path separators, no leading dot (JupyterHub lower-cases user names too).
STUDENT_ID = re.compile(r"^[a-z0-9][a-z0-9._@+-]{0,63}$")
MAX_NOTEBOOK = 64 << 20        # bytes: the grader does not read a larger notebook either
MAX_EXTRACTED = 4 << 30        # bytes extracted from one download in all
MAX_ENTRIES = 50_000           # entries read from one download


class LmsError(PipelineError):
    """A file from the LMS that cannot be used as it is; the message says what to do."""


# ----------------------------------------------------------------------------- the class list

@dataclass
class Person:
    student_id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms: str = ""              # "canvas" or "moodle"
    lms_user_id: str = ""      # Canvas: the user's number (column "ID", also in download names)
    sis_user_id: str = ""      # Canvas: "SIS User ID"
    sis_login_id: str = ""     # Canvas: "SIS Login ID"
    section: str = ""          # Canvas: "Section"
    id_number: str = ""        # Moodle: "ID number"
    username: str = ""         # Moodle: "Username" (when the export has it)
    lms_name: str = ""         # the name as the LMS wrote it (Canvas: "Last, First")


@dataclass
class Roster:
    lms: str
    people: list[Person]
    source: str = ""                                    # the file it was read from
    columns: dict[str, str] = field(default_factory=dict)  # Canvas: assignment title -> its header
    skipped: list[str] = field(default_factory=list)    # rows left out, with why

    def by_id(self) -> dict[str, Person]:
        return {p.student_id: p for p in self.people}


def _read_table(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of an LMS CSV: UTF-8 with or without a byte-order mark, the separator the
    LMS was told to use (comma, semicolon or tab)."""
    try:
        raw = files.read_regular(Path(path), 64 << 20)
    except (OSError, ValueError) as e:
        raise LmsError(f"{path}: cannot be read ({e})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("cp1252", errors="replace")  # a spreadsheet that saved it as "CSV (Windows)"
    first = text.splitlines()[0] if text.strip() else ""
    sep = max((",", ";", "\t"), key=first.count)
    rows = [r for r in csv.reader(io.StringIO(text), delimiter=sep)]
    rows = [[c.strip() for c in r] for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise LmsError(f"{path} is empty: export the class list from the LMS again")
    return rows[0], rows[1:]


def _col(header: list[str], *names: str) -> int | None:
    low = [h.strip().lower() for h in header]
    for n in names:
        if n.lower() in low:
            return low.index(n.lower())
    return None


def detect(header: list[str]) -> str:
    """'canvas' or 'moodle' from a CSV header; LmsError naming what a class list needs."""
    if header and "student" in header[0].lower() and _col(header, "ID") is not None \
            and _col(header, "Section") is not None:
        return "canvas"
    if _col(header, "Email address") is not None and _col(header, "First name") is not None \
            and _col(header, "Last name", "Surname") is not None:
        return "moodle"
    raise LmsError(
        "not a class list from Canvas or Moodle: its header is " + ", ".join(repr(h) for h in header[:8])
        + ("..." if len(header) > 8 else "") + ". Canvas: Grades > Export > CSV (columns Student, ID, "
        "SIS User ID, SIS Login ID, Section); Moodle: Grades > Export > Plain text file, or Participants > "
        "Download table data as CSV (columns First name, Last name, Email address)")


def _canvas_people(header, rows, id_column):
    ix = {name: _col(header, name) for name in ("ID", "SIS User ID", "SIS Login ID", "Section")}
    people, skipped = [], []
    for n, r in enumerate(rows, start=2):
        cell = lambda i: r[i].strip() if i is not None and i < len(r) else ""  # noqa: E731
        name = cell(0)
        if name.lower().startswith("points possible") or all(
                re.fullmatch(r"(muted|manual posting.*)?", c.strip(), re.I) for c in r):
            continue  # Canvas's rows about the assignments, not about a student
        if name.lower() in ("student, test", "test student"):
            skipped.append(f"row {n} {name!r}: Canvas's test student")
            continue
        last, _, first = name.partition(",")
        p = Person(student_id="", first_name=first.strip(), last_name=last.strip(), lms="canvas",
                   lms_user_id=cell(ix["ID"]), sis_user_id=cell(ix["SIS User ID"]),
                   sis_login_id=cell(ix["SIS Login ID"]), section=cell(ix["Section"]), lms_name=name)
        if not p.lms_user_id.isdigit():
            skipped.append(f"row {n} {name!r}: no Canvas user number in column ID ({p.lms_user_id!r})")
            continue
        choices = [id_column] if id_column else ["SIS Login ID", "SIS User ID", "ID"]
        p.student_id = _first_value(header, r, choices)
        people.append((n, p))
    return people, skipped


def _moodle_people(header, rows, id_column):
    ix = {k: _col(header, *names) for k, names in {
        "first": ("First name",), "last": ("Last name", "Surname"), "email": ("Email address",),
        "idnumber": ("ID number",), "username": ("Username",), "roles": ("Roles",)}.items()}
    people, skipped = [], []
    for n, r in enumerate(rows, start=2):
        cell = lambda i: r[i].strip() if i is not None and i < len(r) else ""  # noqa: E731
        name = f"{cell(ix['first'])} {cell(ix['last'])}".strip()
        if ix["roles"] is not None and "student" not in cell(ix["roles"]).lower():
            skipped.append(f"row {n} {name!r}: role {cell(ix['roles']) or 'none'!r}, not Student")
            continue
        p = Person(student_id="", first_name=cell(ix["first"]), last_name=cell(ix["last"]),
                   email=cell(ix["email"]), lms="moodle", id_number=cell(ix["idnumber"]),
                   username=cell(ix["username"]), lms_name=name)
        choices = [id_column] if id_column else ["Username", "ID number", "Email address"]
        p.student_id = _first_value(header, r, choices)
        people.append((n, p))
    return people, skipped


def _first_value(header, row, names) -> str:
    for name in names:
        i = _col(header, name)
        if i is not None and i < len(row) and row[i].strip():
            return row[i].strip().lower()
    return ""


def read_roster(path: Path, id_column: str | None = None) -> Roster:
    """The students of an LMS class list. LmsError (nothing read) on a file that is not one, a
    student without a usable id, or two students with one id."""
    header, rows = _read_table(path)
    lms = detect(header)
    if id_column and _col(header, id_column) is None:
        raise LmsError(f"{path} has no column {id_column!r} (it has {', '.join(header)})")
    people, skipped = (_canvas_people if lms == "canvas" else _moodle_people)(header, rows, id_column)
    problems, seen = [], {}
    for n, p in people:
        if not p.student_id:
            wanted = id_column or ("SIS Login ID, SIS User ID or ID" if lms == "canvas"
                                   else "Username, ID number or Email address")
            problems.append(f"row {n} ({p.lms_name}): no value in the id column ({wanted})")
        elif not STUDENT_ID.fullmatch(p.student_id):
            problems.append(f"row {n} ({p.lms_name}): {p.student_id!r} cannot be a student id (letters, digits and "
                            f". _ @ + - only, at most 64, not starting with . or -): pick another column "
                            f"with --id-column")
        elif p.student_id in seen:
            problems.append(f"rows {seen[p.student_id]} and {n}: both have the id {p.student_id!r}")
        else:
            seen[p.student_id] = n
    if problems:
        raise LmsError(f"{path}: {len(problems)} student(s) without a usable id, nothing imported:\n  "
                       + "\n  ".join(problems[:20]) + ("\n  ..." if len(problems) > 20 else ""))
    columns = {}
    if lms == "canvas":  # the assignments the Canvas course already has, to export into them
        for h in header:
            m = re.fullmatch(r"(.*\S)\s+\((\d+)\)", h)
            if m:
                columns[m.group(1)] = h
    if not people:
        raise LmsError(f"{path} names no student" + (f" ({'; '.join(skipped[:3])})" if skipped else ""))
    return Roster(lms=lms, people=[p for _, p in people], source=str(path), columns=columns, skipped=skipped)


def load_roster(root: Path) -> Roster:
    path = Path(root) / ROSTER
    if not path.is_file():
        raise LmsError(f"no {course.rel(path, root)}: import the class list first "
                       f"(autograder/lms roster FILE.csv{'' if Path(root) == course.ROOT else ' --course ' + str(root)})")
    data = json.loads(files.read_regular(path, 64 << 20))
    return Roster(lms=data["lms"], people=[Person(**p) for p in data["people"]], source=data.get("source", ""),
                  columns=data.get("columns", {}), skipped=data.get("skipped", []))


def import_roster(path: Path, root: Path = course.ROOT, id_column: str | None = None) -> dict:
    """The class list into the gradebook (ids, names, email, the LMS user number) and root/roster.json.

    Students already in the gradebook who are not on the list stay (with their grades) and are named
    in the result; nothing is deleted."""
    from nbgrader.api import Gradebook

    roster = read_roster(path, id_column)
    db = Path(root) / "gradebook.db"
    with Gradebook(f"sqlite:///{db}") as gb:
        before = {s.id for s in gb.students}
        for p in roster.people:
            gb.update_or_create_student(p.student_id, first_name=p.first_name or None,
                                        last_name=p.last_name or None, email=p.email or None,
                                        lms_user_id=p.lms_user_id or p.id_number or None)
    data = {"lms": roster.lms, "source": str(path), "columns": roster.columns, "skipped": roster.skipped,
            "people": [asdict(p) for p in roster.people]}
    files.atomic_write_text(Path(root) / ROSTER, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    ids = {p.student_id for p in roster.people}
    return {"lms": roster.lms, "students": len(ids), "new": sorted(ids - before), "skipped": roster.skipped,
            "not_on_list": sorted(before - ids)}


# ----------------------------------------------------------------------------- downloads in

def _norm_name(name: str) -> str:
    """'José  O'Neil' -> 'joseoneil': how a name is compared with the file names an LMS writes."""
    s = unicodedata.normalize("NFKD", name)
    s = "".join(c for c in s if not unicodedata.combining(c))
    return re.sub(r"[\W_]+", "", s.lower())


# Canvas: <lastfirst>[_LATE]_<user number>_<submission number>_<the student's file name>, the file
# name with -1, -2... before the extension for a resubmission.
CANVAS_FILE = re.compile(r"^(?P<name>[^_/]+?)(?:_(?P<late>late))?_(?P<user>\d+)_(?P<sub>\d+)_(?P<file>.+)$", re.I)
# Moodle: <Full Name>_<participant number>_assignsubmission_file_ then either a folder holding the
# student's files (Moodle 3.1 and later, "Download submissions in folders") or the file name.
MOODLE_PART = re.compile(r"^(?P<name>.+)_(?P<part>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.*)$")


@dataclass
class Match:
    file: str                      # path inside the extracted download
    student_id: str | None
    why: str                       # who it was given to and how, or why to nobody
    late: bool = False


def identify(rel_path: str, roster: Roster) -> Match:
    """Who handed in this file of an LMS download, judged from its path and the class list."""
    parts = Path(rel_path).parts
    for i, part in enumerate(parts):  # the LMS's own name may sit below the folder of the zip
        m = CANVAS_FILE.match(part) if i == len(parts) - 1 else None
        if m:
            people = [p for p in roster.people if p.lms_user_id == m.group("user")]
            late = bool(m.group("late"))
            if len(people) == 1:
                return Match(rel_path, people[0].student_id, f"Canvas user {m.group('user')}", late)
            return Match(rel_path, None, f"Canvas user {m.group('user')} ({m.group('name')}) is not on the class "
                                         f"list (a student who joined later? import the list again)", late)
        m = MOODLE_PART.match(part)
        if m:
            name = m.group("name")
            if m.group("plugin") != "file":
                return Match(rel_path, None, f"Moodle {m.group('plugin')} submission (only uploaded files are "
                                             f"collected)")
            if name.lower().startswith("participant") and _norm_name(name) == "participant":
                return Match(rel_path, None, "Moodle's blind marking hides whose file this is: reveal student "
                                             "identities in the assignment's settings and download again")
            key = _norm_name(name)
            people = [p for p in roster.people if key in (_norm_name(p.first_name + p.last_name),
                                                          _norm_name(p.last_name + p.first_name))]
            if len(people) == 1:
                return Match(rel_path, people[0].student_id, f"Moodle participant {name!r}")
            if len(people) > 1:
                return Match(rel_path, None, f"{name!r} is the name of {len(people)} students on the class list "
                                             f"({', '.join(p.student_id for p in people)}): copy it by hand to "
                                             f"submitted/<student>/<assignment>/")
            return Match(rel_path, None, f"{name!r} is not on the class list")
    return Match(rel_path, None, "not named the way Canvas or Moodle name a download (<name>_<number>_... )")


def _safe_file_name(name: str) -> str:
    """The student's own file name, as a plain name in one folder: no path, no odd characters."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, ext = base.rpartition(".")
    stem = re.sub(r"[^A-Za-z0-9 ()._+-]+", "_", stem if dot else base).strip(" .") or "notebook"
    return f"{stem[:120]}.ipynb"


class LmsExtractor(ExtractorPlugin):
    """zip_collect's extractor for LMS downloads: only notebooks come out of an archive, each to a
    path inside the extraction folder (never through a link, never "..", never absolute), at most
    MAX_NOTEBOOK bytes each and MAX_EXTRACTED in all; archives inside the download stay closed.
    Loose notebooks in the archive folder are copied. What was left out is in `self.report`."""

    def extract(self, archive_path: str, extracted_path: str) -> None:
        self.report: list[str] = []
        archive, out = Path(archive_path), Path(extracted_path)
        total = 0
        for src in sorted(archive.iterdir()):
            if not files.is_regular(src):
                self.report.append(f"{src.name}: not a regular file, skipped")
                continue
            if src.suffix.lower() == ".ipynb":
                files.copy_regular(src, out / src.name, MAX_NOTEBOOK)
                continue
            if src.suffix.lower() != ".zip":
                self.report.append(f"{src.name}: neither a zip nor a notebook, skipped")
                continue
            try:
                total = self._unzip(src, out / re.sub(r"[^A-Za-z0-9._-]+", "_", src.stem), total)
            except zipfile.BadZipFile as e:
                raise LmsError(f"{src.name} is not a zip file that can be read ({e}): download it again") from None

    def _unzip(self, src: Path, dest: Path, total: int) -> int:
        others: dict[str, int] = {}
        with zipfile.ZipFile(src) as z:
            entries = z.infolist()
            if len(entries) > MAX_ENTRIES:
                raise LmsError(f"{src.name} holds {len(entries)} entries (at most {MAX_ENTRIES} are read)")
            for info in entries:
                name = info.filename
                if info.is_dir():
                    continue
                kind = (info.external_attr >> 16) & 0o170000
                parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
                if kind == stat.S_IFLNK:
                    self.report.append(f"{src.name}: {name}: a symbolic link, skipped")
                    continue
                if name.startswith(("/", "\\")) or ".." in parts or not parts or re.match(r"^[A-Za-z]:", name):
                    self.report.append(f"{src.name}: {name!r}: a path outside the download, skipped")
                    continue
                ext = parts[-1].rsplit(".", 1)[-1].lower() if "." in parts[-1] else "(none)"
                if ext != "ipynb":
                    others[ext] = others.get(ext, 0) + 1
                    continue
                if info.file_size > MAX_NOTEBOOK:
                    self.report.append(f"{src.name}: {name}: {info.file_size >> 20} MB, larger than a notebook "
                                       f"can be ({MAX_NOTEBOOK >> 20} MB), skipped")
                    continue
                data = bytearray()
                with z.open(info) as f:  # the real size, whatever the entry's header says
                    while chunk := f.read(1 << 20):
                        data += chunk
                        if len(data) > MAX_NOTEBOOK:
                            break
                if len(data) > MAX_NOTEBOOK:
                    self.report.append(f"{src.name}: {name}: larger than {MAX_NOTEBOOK >> 20} MB, skipped")
                    continue
                total += len(data)
                if total > MAX_EXTRACTED:
                    raise LmsError(f"{src.name}: more than {MAX_EXTRACTED >> 30} GB of notebooks; "
                                   f"download the assignment in parts")
                safe = [re.sub(r"[\x00-\x1f/]+", "_", p)[:200] for p in parts]
                target = dest.joinpath(*safe)
                files.atomic_write_bytes(target, bytes(data))
        for ext, n in sorted(others.items()):
            what = "an archive inside the download (not opened: ask for the .ipynb)" if ext in ("zip", "gz", "tar",
                                                                                             "7z", "rar") else "not a notebook"
            self.report.append(f"{src.name}: {n} .{ext} file(s): {what}, skipped")
        return total


class LmsCollector(FileNameCollectorPlugin):
    """zip_collect's collector for LMS downloads: which student each notebook belongs to, from the
    course's class list (roster.json, `autograder/lms roster`). A file gets its student's id and
    the student's own file name (the batch grader then matches it to the assignment's notebook by
    its graded cells, whatever the name); a file that fits nobody on the list is skipped and named
    in `self.matches` (and in nbgrader's log)."""

    def collect(self, submitted_file: str):
        if not hasattr(self, "matches"):
            self.matches: list[Match] = []
            self.taken: set[tuple[str, str]] = set()
            self.roster = load_roster(Path(self.parent.coursedir.root))
            self.base = Path(self.parent._format_collect_path(self.parent.extracted_directory))
        path = Path(submitted_file)
        if path.suffix.lower() != ".ipynb":
            return None
        try:
            rel = path.relative_to(self.base).as_posix()
        except ValueError:
            rel = path.name
        m = identify(rel, self.roster)
        self.matches.append(m)
        if m.student_id is None:
            self.log.warning("not collected: %s: %s", rel, m.why)
            return None
        own = CANVAS_FILE.match(path.name)
        original = own.group("file") if own else path.name
        moodle = MOODLE_PART.match(path.name)
        if moodle and moodle.group("file"):
            original = moodle.group("file")
        name = _safe_file_name(original)
        n = 2
        while (m.student_id, name) in self.taken:  # two files with one name: keep both, the grader picks
            name = _safe_file_name(f"{original.rsplit('.', 1)[0]} ({n}).ipynb")
            n += 1
        self.taken.add((m.student_id, name))
        return {"student_id": m.student_id, "file_id": name}


def collect(assignment: str, archives: list[Path], root: Path = course.ROOT) -> dict:
    """The LMS downloads of one assignment into root/submitted/ through nbgrader's zip_collect.

    Returns {"collected": {student: [files]}, "not_collected": [(file, why)], "missing": [students
    on the list without a notebook], "late": [students the LMS marks late], "skipped": [...]}."""
    from nbgrader.apps.zipcollectapp import ZipCollectApp
    from nbgrader.coursedir import CourseDirectory

    root = Path(root).resolve()
    roster = load_roster(root)
    if not list((root / "release" / assignment).glob("*.ipynb")):
        raise LmsError(f"no release/{assignment}/*.ipynb in {root}: is {assignment!r} an assignment of this course?")
    if not archives:
        raise LmsError("no download given: name the zip file(s) the LMS gave you")
    for a in archives:
        if not Path(a).is_file():
            raise LmsError(f"{a}: no such file")
    area = root / "downloaded" / assignment / "archive"
    if area.exists():
        files.rmtree(area)
    area.mkdir(parents=True)
    for a in archives:
        files.copy_regular(Path(a), area / Path(a).name, MAX_EXTRACTED)
    cfg = course.load_config(root, settings_from=root)
    cfg.ZipCollectApp.force = True
    cfg.ExtractorPlugin.force = True
    cfg.ZipCollectApp.extractor_plugin = LmsExtractor
    cfg.ZipCollectApp.collector_plugin = LmsCollector
    cfg.Application.log_level = "ERROR"
    app = ZipCollectApp(config=cfg)
    app.coursedir = CourseDirectory(config=cfg)
    app.coursedir.assignment_id = assignment
    app.init_plugins()
    try:
        app.extract_archive_files()
        app.process_extracted_files()
    except SystemExit:
        raise LmsError(f"nbgrader zip_collect stopped on {assignment} (see its message above)") from None
    matches = getattr(app.collector_plugin_inst, "matches", [])
    got: dict[str, list[str]] = {}
    for sid in sorted({m.student_id for m in matches if m.student_id}):
        folder = root / "submitted" / sid / assignment
        got[sid] = sorted(p.name for p in folder.glob("*.ipynb"))
    return {"collected": got,
            "not_collected": [(m.file, m.why) for m in matches if m.student_id is None],
            "missing": sorted(p.student_id for p in roster.people if p.student_id not in got),
            "late": sorted({m.student_id for m in matches if m.student_id and m.late}),
            "skipped": list(getattr(app.extractor_plugin_inst, "report", []))}


# ----------------------------------------------------------------------------- grades out

def _assignment_order(name: str):
    digits = re.sub(r"\D", "", name)
    return (not name.startswith("lab"), int(digits) if digits else 0, name)


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


@dataclass
class Column:
    header: str
    assignment: str
    part: str            # "total", "automatic" or "written"
    points: float


def _maxima(root: Path) -> dict[str, tuple[float, float]]:
    """assignment -> (automatic points, written points) in the gradebook."""
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(f"sqlite:///{Path(root) / 'gradebook.db'}") as gb:
        for a in gb.assignments:
            manual = course.manual_cells(gb, a)
            auto = written = 0.0
            for nb in a.notebooks:
                for c in nb.grade_cells:
                    if (nb.name, c.name) in manual:
                        written += c.max_score
                    else:
                        auto += c.max_score
            out[a.name] = (auto, written)
    return out


def lms_table(root: Path, lms: str, totals_only: bool = False, assignments: list[str] | None = None):
    """(header, rows, report) of the LMS's gradebook import for the course at `root`.

    Per assignment a column with its total (what the course counts: the automatic and written
    points, minus a late penalty); for an assignment with written answers also its automatic and
    written points apart (unless totals_only). A cell is empty while its points are not final:
    written answers still to grade, automatic points held for review, no submission, a failed
    grading; the report (and Moodle's "Feedback:" column, which the student sees) says which."""
    roster = load_roster(root)
    if roster.lms != lms:
        raise LmsError(f"the class list in {ROSTER} came from {roster.lms.capitalize()}, not {lms.capitalize()}: "
                       f"export for {roster.lms} or import the {lms.capitalize()} class list")
    if not (Path(root) / "gradebook.db").exists():
        raise LmsError("no gradebook.db: grade the submissions first (make autograde)")
    maxima = _maxima(root)
    names = sorted((a for a in maxima if not assignments or a in assignments), key=_assignment_order)
    rows_by = {(r["assignment"], r["student_id"]): r for r in course.grade_rows(Path(root))}
    columns: list[Column] = []
    for a in names:
        auto, written = maxima[a]
        title = next((h for t, h in roster.columns.items() if t.strip().lower() == a.lower()), a)
        columns.append(Column(title, a, "total", auto + written))
        if written and not totals_only:
            columns += [Column(f"{a} automatic", a, "automatic", auto), Column(f"{a} written", a, "written", written)]
    report: list[str] = []
    ids = roster.by_id()
    extra = sorted({sid for (_, sid) in rows_by} - set(ids))
    if extra:
        report.append(f"in the gradebook but not on the class list, not exported ({lms.capitalize()} would not "
                      f"know them): {', '.join(extra)}")

    def cells(person: Person) -> tuple[dict[str, str], dict[str, str]]:
        values, notes = {}, {}
        for a in names:
            r = rows_by.get((a, person.student_id))
            status = r["status"] if r else "missing"
            if status == "graded":
                note = ""
            elif status == "awaiting grading":
                note = f"written answers being graded ({_fmt(float(r['manual_pending']))} points)"
            elif status == "review":
                note = "automatic points held until a person has checked them"
            elif status == "missing":
                note = "missing: " + (r["notes"] if r and r["notes"] else "no submission")
            else:
                note = "not graded yet (your instructor has been told why)"
            notes[a] = note
            if note:
                report.append(f"{person.student_id} {a}: {status}" + (f" ({r['notes']})" if r and r["notes"] else ""))
            for c in (c for c in columns if c.assignment == a):
                value = ""
                if c.part == "total" and status == "graded":
                    value = _fmt(float(r["total"]))
                elif c.part == "automatic" and status in ("graded", "awaiting grading"):
                    value = _fmt(float(r["automatic"]))
                elif c.part == "written" and status == "graded":
                    value = _fmt(float(r["manual"]))
                values[c.header] = value
        return values, notes

    people = sorted(roster.people, key=lambda p: (p.last_name.lower(), p.first_name.lower(), p.student_id))
    if lms == "canvas":
        info = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
        header = info + [c.header for c in columns]
        rows = [{"Student": "    Points Possible", **{c.header: _fmt(c.points) for c in columns}}]
        for p in people:
            values, _ = cells(p)
            rows.append({"Student": p.lms_name or f"{p.last_name}, {p.first_name}", "ID": p.lms_user_id,
                         "SIS User ID": p.sis_user_id, "SIS Login ID": p.sis_login_id, "Section": p.section,
                         **values})
    else:
        info = ["First name", "Last name", "ID number", "Institution", "Department", "Email address"]
        header = info + [c.header for c in columns] + [f"Feedback: {a}" for a in names]
        rows = []
        for p in people:
            values, notes = cells(p)
            rows.append({"First name": p.first_name, "Last name": p.last_name, "ID number": p.id_number,
                         "Institution": "", "Department": "", "Email address": p.email, **values,
                         **{f"Feedback: {a}": notes[a] for a in names}})
    head = [r for r in report if r.startswith("in the gradebook but not")]
    return header, rows, head + sorted(r for r in report if r not in head)


def export(root: Path, lms: str, out: Path | None = None, totals_only: bool = False,
           assignments: list[str] | None = None) -> tuple[Path, list[str]]:
    header, rows, report = lms_table(Path(root), lms, totals_only, assignments)
    target = Path(out) if out else Path(root) / f"grades-{lms}.csv"
    files.write_csv(target, header, rows)
    return target, report


class _LmsExport(ExportPlugin):
    lms = ""

    def export(self, gradebook) -> None:
        root = Path(gradebook.engine.url.database).parent
        target, report = export(root, self.lms, Path(self.to) if self.to else None,
                                assignments=[str(a) for a in self.assignment] or None)
        for line in report:
            self.log.warning(line)
        self.log.info("wrote %s", target)


class CanvasGrades(_LmsExport):
    """`nbgrader export --exporter lms.CanvasGrades [--to FILE]`: Canvas's gradebook import (Grades >
    Import): Student, ID, SIS User ID, SIS Login ID, Section, a Points Possible row, then one column
    per assignment (and its automatic and written points apart); empty while not final."""
    lms = "canvas"


class MoodleGrades(_LmsExport):
    """`nbgrader export --exporter lms.MoodleGrades [--to FILE]`: Moodle's grade import (Grades >
    Import > CSV file, map "Email address" to the user's email address): the columns of Moodle's own
    export, one grade column per assignment (and its parts), and a "Feedback:" column per assignment
    saying what is still pending or missing."""
    lms = "moodle"


# ----------------------------------------------------------------------------- sample files

# The sample students of `make demo` (autograder/samples) as a class would have them in an LMS.
SAMPLE_PEOPLE = [  # student id (= the sample's name), first, last, Canvas user number, SIS user id
    ("reference", "Ada", "Lovelace", "40101", "2026001"),
    ("untouched", "Blaise", "Pascal", "40102", "2026002"),
    ("k3_flipped", "Carl", "Gauss", "40103", "2026003"),
    ("off_by_one", "Dorothy", "Vaughan", "40104", "2026004"),
    ("prob_space", "Emmy", "Noether", "40105", "2026005"),
    ("times_mask", "Fan", "Chung", "40106", "2026006"),
    ("lab19_first_draft", "Grace", "Hopper", "40107", "2026007"),
    ("absent", "Hedy", "Lamarr", "40108", "2026008"),  # hands in nothing
]


def write_sample(lms: str, out: Path, assignments: list[str] | None = None, root: Path = course.ROOT) -> list[Path]:
    """A class list and, per assignment, a "Download submissions" zip of the sample students, named
    and laid out as `lms` writes them; a student who dropped the course (not on the list) and a PDF
    are in each zip too, as in a real download."""
    import nbformat

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    labs = course.discover(assignments or ())
    written = []
    roster_path = out / f"{lms}-class-list.csv"
    if lms == "canvas":
        header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] + \
                 [f"{a} ({9100 + i})" for i, a in enumerate(course.assignments(labs))] + ["Current Points", "Final Points"]
        rows = [{"Student": "    Points Possible", **{h: "" for h in header[5:]}}]
        rows.append({"Student": "Student, Test", "ID": "49999", "SIS User ID": "", "SIS Login ID": "",
                     "Section": "RL for LMs 2026"})
        for sid, first, last, uid, sis in SAMPLE_PEOPLE:
            rows.append({"Student": f"{last}, {first}", "ID": uid, "SIS User ID": sis, "SIS Login ID": sid,
                         "Section": "RL for LMs 2026"})
    else:
        header = ["First name", "Last name", "ID number", "Institution", "Department", "Email address",
                  "Last downloaded from this course"]
        rows = [{"First name": first, "Last name": last, "ID number": sis, "Institution": "", "Department": "",
                 "Email address": f"{sid}@uni.example", "Last downloaded from this course": "1796000000"}
                for sid, first, last, uid, sis in SAMPLE_PEOPLE]
    files.write_csv(roster_path, header, rows)
    written.append(roster_path)
    people = {sid: (n, first, last, uid) for n, (sid, first, last, uid, _) in enumerate(SAMPLE_PEOPLE, start=1)}
    for a in course.assignments(labs):
        target = out / f"{lms}-{a}-submissions.zip"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
            for lab in (lab for lab in labs if lab.assignment == a):
                for sid, nb in course.sample_submissions(lab).items():
                    if sid not in people:
                        continue
                    n, first, last, uid = people[sid]  # one submission (and number) per student
                    data = nbformat.writes(nb).encode()
                    if lms == "canvas":
                        late = "_LATE" if sid == "untouched" else ""
                        z.writestr(f"{(last + first).lower()}{late}_{uid}_{700000 + n}_{lab.name}.ipynb", data)
                    else:
                        z.writestr(f"{first} {last}_{880000 + n}_assignsubmission_file_/{lab.name}.ipynb", data)
                dropped = nbformat.writes(course.sample_submissions(lab)["reference"])
                if lms == "canvas":  # a student who dropped the course, and a PDF beside a notebook
                    z.writestr(f"turingalan_40199_700099_{lab.name}.ipynb", dropped)
                else:
                    z.writestr(f"Alan Turing_889999_assignsubmission_file_/{lab.name}.ipynb", dropped)
            if lms == "canvas":
                z.writestr("lovelaceada_40101_700001_notes.pdf", b"%PDF-1.4\n% a PDF, not a notebook\n")
            else:
                z.writestr("Ada Lovelace_880001_assignsubmission_file_/notes.pdf", b"%PDF-1.4\n")
        written.append(target)
    return written


# ----------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("roster", help="import the class list (CSV from Canvas or Moodle)")
    r.add_argument("file", type=Path)
    r.add_argument("--id-column", help="the column whose value becomes the student id "
                                       "(default Canvas: SIS Login ID, SIS User ID, ID; Moodle: Username, ID number, "
                                       "Email address; the first one filled in)")
    c = sub.add_parser("collect", help="hand in the LMS's submissions download of one assignment")
    c.add_argument("assignment")
    c.add_argument("files", nargs="+", type=Path)
    e = sub.add_parser("export", help="the grades as the LMS's gradebook import reads them")
    e.add_argument("lms", choices=["canvas", "moodle"])
    e.add_argument("assignments", nargs="*", help="only these assignments (default: all in the gradebook)")
    e.add_argument("--out", type=Path, help="the CSV written (default: grades-<lms>.csv in the course folder)")
    e.add_argument("--totals-only", action="store_true", help="one column per assignment, no automatic/written parts")
    s = sub.add_parser("sample", help="a class list and submission downloads of the sample students")
    s.add_argument("lms", choices=["canvas", "moodle"])
    s.add_argument("assignments", nargs="*")
    s.add_argument("--out", type=Path, default=course.ROOT / "build" / "lms-sample")
    for p in (r, c, e):
        p.add_argument("--course", type=Path, default=course.ROOT, help="the course folder (default: this repository)")
    args = parser.parse_args(argv)
    try:
        if args.command == "roster":
            res = import_roster(args.file, args.course.resolve(), args.id_column)
            print(f"class list from {res['lms'].capitalize()}: {res['students']} students "
                  f"({len(res['new'])} new in the gradebook); ids as the grader uses them: "
                  + ", ".join(p.student_id for p in load_roster(args.course.resolve()).people[:8])
                  + (" ..." if res["students"] > 8 else ""))
            for line in res["skipped"]:
                print(f"  left out: {line}")
            if res["not_on_list"]:
                print(f"  in the gradebook but not on this list (kept, with their grades): {', '.join(res['not_on_list'])}")
            print(f"wrote {course.rel(args.course.resolve() / ROSTER, course.ROOT)}")
        elif args.command == "collect":
            res = collect(args.assignment, args.files, args.course.resolve())
            for sid, names in res["collected"].items():
                print(f"collected {sid}: {', '.join(names)}" + ("  (late, says the LMS)" if sid in res["late"] else ""))
            for f, why in res["not_collected"]:
                print(f"NOT collected {f}: {why}")
            for line in res["skipped"]:
                print(f"skipped   {line}")
            if res["missing"]:
                print(f"no notebook in the download (missing): {', '.join(res['missing'])}")
            print(f"{len(res['collected'])} student(s) into submitted/*/{args.assignment}/; next: "
                  f"make autograde A={args.assignment}"
                  + ("" if args.course.resolve() == course.ROOT else
                     f" (for this course folder: autograder/course.py autograde {args.assignment} --course {args.course})"))
            if res["late"]:
                print("The LMS marked some submissions late; the grader counts lateness only from a "
                      "timestamp.txt (docs/instructors.md, \"Due dates and late submissions\").")
        elif args.command == "export":
            target, report = export(args.course.resolve(), args.lms, args.out, args.totals_only, args.assignments or None)
            for line in report:
                print(f"  {line}")
            print(f"wrote {target}: import it in {args.lms.capitalize()} "
                  + ("(Grades > Import; match students by ID)" if args.lms == "canvas" else
                     "(Grades > Import > CSV file; map from Email address to Email address)"))
        elif args.command == "sample":
            for p in write_sample(args.lms, args.out, args.assignments):
                print(f"wrote {p}")
    except (PipelineError, OSError) as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
