"""The class list from Canvas or Moodle (roster.json in the course folder, the gradebook's students).
"""

from __future__ import annotations
import csv
import io
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from autograder.course.layout import PipelineError, ROOT, rel
from autograder.sandbox import safe_files as files

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
        raise LmsError(f"no {rel(path, root)}: import the class list first "
                       f"(autograder/bin/lms roster FILE.csv{'' if Path(root) == ROOT else ' --course ' + str(root)})")
    data = json.loads(files.read_regular(path, 64 << 20))
    return Roster(lms=data["lms"], people=[Person(**p) for p in data["people"]], source=data.get("source", ""),
                  columns=data.get("columns", {}), skipped=data.get("skipped", []))


def import_roster(path: Path, root: Path = ROOT, id_column: str | None = None) -> dict:
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


