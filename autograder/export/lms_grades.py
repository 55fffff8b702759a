"""Grades out to Canvas or Moodle (their gradebook import's CSV), nbgrader exporter plugins, and sample
files of an LMS for trying the steps.
"""

from __future__ import annotations
import re
from dataclasses import dataclass
from pathlib import Path
from nbgrader.plugins import ExportPlugin

from autograder.course.roster import LmsError, Person, ROSTER, Roster, load_roster
from autograder.export.grades_csv import grade_rows, manual_cells
from autograder.sandbox import safe_files as files

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
            manual = manual_cells(gb, a)
            auto = written = 0.0
            for nb in a.notebooks:
                for c in nb.grade_cells:
                    if (nb.name, c.name) in manual:
                        written += c.max_score
                    else:
                        auto += c.max_score
            out[a.name] = (auto, written)
    return out


def _columns(names: list[str], maxima: dict, roster: Roster, totals_only: bool) -> list[Column]:
    """The grade columns: per assignment its total (under the LMS's own title for it, when the class
    list has one), and its automatic and written points apart when it has written answers."""
    columns: list[Column] = []
    for a in names:
        auto, written = maxima[a]
        title = next((h for t, h in roster.columns.items() if t.strip().lower() == a.lower()), a)
        columns.append(Column(title, a, "total", auto + written))
        if written and not totals_only:
            columns += [Column(f"{a} automatic", a, "automatic", auto), Column(f"{a} written", a, "written", written)]
    return columns


def _note(status: str, r: dict | None) -> str:
    """What the student reads about a grade that is not final ("" for a graded one)."""
    if status == "graded":
        return ""
    if status == "awaiting grading":
        return f"written answers being graded ({_fmt(float(r['manual_pending']))} points)"
    if status == "review":
        return "automatic points held until a person has checked them"
    if status == "missing":
        return "missing: " + (r["notes"] if r and r["notes"] else "no submission")
    return "not graded yet (your instructor has been told why)"


def _cells(person: Person, names: list[str], columns: list[Column], rows_by: dict,
           report: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the person's value in each column, their note per assignment); a line for the instructor's
    report is appended for each grade that is not final."""
    values, notes = {}, {}
    for a in names:
        r = rows_by.get((a, person.student_id))
        status = r["status"] if r else "missing"
        note = _note(status, r)
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
    rows_by = {(r["assignment"], r["student_id"]): r for r in grade_rows(Path(root))}
    columns = _columns(names, maxima, roster, totals_only)
    report: list[str] = []
    ids = roster.by_id()
    extra = sorted({sid for (_, sid) in rows_by} - set(ids))
    if extra:
        report.append(f"in the gradebook but not on the class list, not exported ({lms.capitalize()} would not "
                      f"know them): {', '.join(extra)}")

    people = sorted(roster.people, key=lambda p: (p.last_name.lower(), p.first_name.lower(), p.student_id))
    if lms == "canvas":
        info = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
        header = info + [c.header for c in columns]
        rows = [{"Student": "    Points Possible", **{c.header: _fmt(c.points) for c in columns}}]
        for p in people:
            values, _ = _cells(p, names, columns, rows_by, report)
            rows.append({"Student": p.lms_name or f"{p.last_name}, {p.first_name}", "ID": p.lms_user_id,
                         "SIS User ID": p.sis_user_id, "SIS Login ID": p.sis_login_id, "Section": p.section,
                         **values})
    else:
        info = ["First name", "Last name", "ID number", "Institution", "Department", "Email address"]
        header = info + [c.header for c in columns] + [f"Feedback: {a}" for a in names]
        rows = []
        for p in people:
            values, notes = _cells(p, names, columns, rows_by, report)
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
    """`nbgrader export --exporter autograder.export.lms_grades.CanvasGrades [--to FILE]`: Canvas's gradebook import (Grades >
    Import): Student, ID, SIS User ID, SIS Login ID, Section, a Points Possible row, then one column
    per assignment (and its automatic and written points apart); empty while not final."""
    lms = "canvas"


class MoodleGrades(_LmsExport):
    """`nbgrader export --exporter autograder.export.lms_grades.MoodleGrades [--to FILE]`: Moodle's grade import (Grades >
    Import > CSV file, map "Email address" to the user's email address): the columns of Moodle's own
    export, one grade column per assignment (and its parts), and a "Feedback:" column per assignment
    saying what is still pending or missing."""
    lms = "moodle"


