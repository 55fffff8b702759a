"""The LMS path (autograder/cli/lms.py, docs/lms.md) on real files: class lists as Canvas and Moodle
export them, their submission downloads handed in through nbgrader's zip_collect, a real batch
grading, and the grades written as Canvas's and Moodle's gradebook imports read them.

The file formats follow the LMSs' own code: Canvas's GradebookImporter (a header starting Student,
ID, ..., Section; a "Points Possible" row; students found by the number in ID, then SIS ids; a
blank or "-" cell is no score; any other column is an assignment) and the names of its
"Download submissions" zip (<lastfirst>[_LATE]_<user>_<submission>_<file>); Moodle's grade export
and CSV import (First name, Last name, ID number, Institution, Department, Email address, grade
columns; '' or '-' is no grade, any other text makes the whole import fail) and its download
(<Full Name>_<participant>_assignsubmission_file_/ and the file, or flat with the file name last).
"""

from __future__ import annotations

import copy
import csv
import io
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.authoring import samples
from autograder.course import layout
from autograder.course import nbgrader_app
from autograder.collect import lms_downloads
from autograder.course import roster as ag_roster
from autograder.export import lms_grades
from autograder.tests import tiny

ROOT = Path(__file__).resolve().parents[2]

# A Canvas gradebook export (Grades > Export > CSV): byte-order mark, an Integration ID column,
# the Points Possible row with "(read only)" cells, Canvas's test student, read-only totals.
CANVAS_LIST = ("\ufeffStudent,ID,SIS User ID,SIS Login ID,Integration ID,Section,tiny (5501),"
               "Current Points,Final Points,Current Score,Final Score\n"
               "    Points Possible,,,,,,5.00,(read only),(read only),(read only),(read only)\n"
               "\"Student, Test\",9999,,,,LLM RL,,0.00,0.00,,\n"
               "\"Lovelace, Ada\",101,S001,ada,,LLM RL,,0.00,0.00,,\n"
               "\"Pascal, Blaise\",102,S002,blaise,,LLM RL,,0.00,0.00,,\n"
               "\"Gauss, Carl Friedrich\",103,S003,,,LLM RL,,0.00,0.00,,\n"
               "\"Lamarr, Hedy\",104,S004,hedy,,LLM RL,,0.00,0.00,,\n")

# Moodle: Grades > Export > Plain text file, tab separated, from a site that says "Surname".
MOODLE_LIST = ("First name\tSurname\tID number\tInstitution\tDepartment\tEmail address\t"
               "Assignment: tiny (Real)\tLast downloaded from this course\n"
               "Ada\tLovelace\t2026001\tUni\tCS\tada@uni.example\t-\t1796000000\n"
               "José\tO'Neil\t2026002\tUni\tCS\tjose@uni.example\t-\t1796000000\n"
               "Jo\tSmith\t2026003\tUni\tCS\tjo1@uni.example\t-\t1796000000\n"
               "Jo\tSmith\t2026004\tUni\tCS\tjo2@uni.example\t-\t1796000000\n")

# Moodle: Participants > Download table data as CSV (with the roles: teachers are left out).
MOODLE_PARTICIPANTS = ("First name,Last name,Email address,Roles,Groups,Last access to course\n"
                       "Ada,Lovelace,ada@uni.example,Student,No groups,now\n"
                       "Tess,Teacher,tess@uni.example,Teacher,No groups,now\n")

WRITTEN = "explain"  # the written answer of the test course (3 points, graded by a person)


def _written_cell(text: str):
    c = nbformat.v4.new_markdown_cell(text, metadata={"nbgrader": {
        "grade": True, "grade_id": WRITTEN, "locked": False, "points": 3.0, "schema_version": 3,
        "solution": True, "task": False}})
    c["id"] = WRITTEN
    return c


def make_course(root: Path) -> Path:
    """tiny.py's notebook (a 2-point test cell) with a 3-point written answer: release and gradebook."""
    nb = tiny.source_notebook()
    nb.cells.append(_written_cell("Doubling adds a number to itself."))
    path = root / "source" / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    nbgrader_app.record_assignment(tiny.ASSIGNMENT, root)
    return root


def submission(root: Path, answer: str | None, written: str | None = None) -> bytes:
    nb = tiny.submission(root, answer)
    if written is not None:
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("grade_id") == WRITTEN:
                c.source = written
    return nbformat.writes(nb).encode()


def write_zip(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def read_csv(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


@pytest.fixture
def canvas_course(tmp_path):
    root = make_course(tmp_path / "course")
    (tmp_path / "list.csv").write_text(CANVAS_LIST, encoding="utf-8")
    ag_roster.import_roster(tmp_path / "list.csv", root)
    return root


# ----------------------------------------------------------------------------- class lists

@pytest.mark.fast
def test_a_canvas_class_list_becomes_the_gradebooks_students(tmp_path):
    from nbgrader.api import Gradebook

    root = make_course(tmp_path / "course")
    (tmp_path / "list.csv").write_text(CANVAS_LIST, encoding="utf-8")
    res = ag_roster.import_roster(tmp_path / "list.csv", root)
    assert res["lms"] == "canvas" and res["students"] == 4
    assert any("test student" in s for s in res["skipped"])
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        got = {s.id: (s.first_name, s.last_name, s.lms_user_id) for s in gb.students}
    # the login where Canvas has one, else the SIS user id; names split from "Last, First"
    assert got == {"ada": ("Ada", "Lovelace", "101"), "blaise": ("Blaise", "Pascal", "102"),
                   "s003": ("Carl Friedrich", "Gauss", "103"), "hedy": ("Hedy", "Lamarr", "104")}
    roster = ag_roster.load_roster(root)
    assert roster.columns == {"tiny": "tiny (5501)"}  # the Canvas assignment the export will fill in
    assert roster.by_id()["ada"].section == "LLM RL"


def test_moodle_class_lists_grade_export_and_participants(tmp_path):
    root = make_course(tmp_path / "course")
    (tmp_path / "grades.txt").write_text(MOODLE_LIST, encoding="utf-8")
    r = ag_roster.read_roster(tmp_path / "grades.txt")
    assert r.lms == "moodle"
    assert [(p.student_id, p.first_name, p.last_name, p.email) for p in r.people][:2] == [
        ("2026001", "Ada", "Lovelace", "ada@uni.example"), ("2026002", "José", "O'Neil", "jose@uni.example")]
    (tmp_path / "participants.csv").write_text(MOODLE_PARTICIPANTS, encoding="utf-8")
    res = ag_roster.import_roster(tmp_path / "participants.csv", root)
    assert res["students"] == 1 and "Teacher" in res["skipped"][0]
    assert ag_roster.load_roster(root).people[0].student_id == "ada@uni.example"
    r = ag_roster.read_roster(tmp_path / "grades.txt", id_column="Email address")
    assert r.people[3].student_id == "jo2@uni.example"


@pytest.mark.parametrize("text, says", [
    ("Name,Mail\nAda,ada@x\n", "not a class list from Canvas or Moodle"),
    ("Student,ID,SIS User ID,SIS Login ID,Section\n\"A, B\",1,,x,S\n\"C, D\",2,,X,S\n", "both have the id 'x'"),
    ("Student,ID,SIS User ID,SIS Login ID,Section\n\"A, B\",1,,../etc,S\n", "cannot be a student id"),
    ("Student,ID,SIS User ID,SIS Login ID,Section\n\"A, B\",x1,,a,S\n", "names no student"),
])
def test_a_class_list_that_cannot_be_used_names_the_problem_and_imports_nothing(tmp_path, text, says):
    root = make_course(tmp_path / "course")
    (tmp_path / "list.csv").write_text(text, encoding="utf-8")
    with pytest.raises(ag_roster.LmsError, match=says):
        ag_roster.import_roster(tmp_path / "list.csv", root)
    assert not (root / ag_roster.ROSTER).exists() and not (root / "gradebook.db").exists() or \
        not _students(root)


def _students(root: Path) -> list[str]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return [s.id for s in gb.students]


def test_without_login_or_sis_id_the_canvas_user_number_is_the_id(tmp_path):
    (tmp_path / "list.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section\n\"A, B\",17,,,S\n",
                                       encoding="utf-8")
    assert ag_roster.read_roster(tmp_path / "list.csv").people[0].student_id == "17"


# ----------------------------------------------------------------------------- downloads in

def test_a_canvas_download_is_collected_by_user_number_and_the_rest_reported(canvas_course, tmp_path):
    root = canvas_course
    right, wrong = submission(root, tiny.RIGHT), submission(root, tiny.WRONG)
    z = write_zip(tmp_path / "submissions.zip", {
        "lovelaceada_101_9001_tiny.ipynb": right,
        "pascalblaise_LATE_102_9002_tiny-1.ipynb": wrong,        # late, and a resubmission (Canvas adds -1)
        # a student cannot hand in for another by naming the file like the LMS would
        "gausscarlfriedrich_103_9003_lovelaceada_101_9001_tiny.ipynb": wrong,
        "turingalan_777_9004_tiny.ipynb": right,                   # dropped the course: not on the list
        "lovelaceada_101_9001_notes.pdf": b"%PDF-1.4\n",
        "pascalblaise_102_9002_answers.zip": b"PK\x05\x06" + b"\x00" * 18,
    })
    res = lms_downloads.collect(tiny.ASSIGNMENT, [z], root)
    assert res["collected"] == {"ada": ["tiny.ipynb"], "blaise": ["tiny-1.ipynb"],
                                "s003": ["lovelaceada_101_9001_tiny.ipynb"]}
    assert (root / "submitted" / "ada" / "tiny" / "tiny.ipynb").read_bytes() == right
    assert (root / "submitted" / "s003" / "tiny" / "lovelaceada_101_9001_tiny.ipynb").read_bytes() == wrong
    assert res["late"] == ["blaise"] and res["missing"] == ["hedy"]
    assert [(Path(f).name, why.split(" (")[0]) for f, why in res["not_collected"]] == [
        ("turingalan_777_9004_tiny.ipynb", "Canvas user 777")]
    assert any(".pdf" in s for s in res["skipped"]) and any("archive inside the download" in s for s in res["skipped"])
    assert sorted(p.name for p in (root / "submitted").iterdir()) == ["ada", "blaise", "s003"]


@pytest.mark.fast
def test_a_hostile_download_writes_nothing_outside_and_no_link(canvas_course, tmp_path, monkeypatch):
    root = canvas_course
    monkeypatch.setattr(lms_downloads, "MAX_NOTEBOOK", 4000)
    right = submission(root, tiny.RIGHT)
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("../../escaped.ipynb", right)
        zf.writestr("/abs/lovelaceada_101_1_tiny.ipynb", right)
        link = zipfile.ZipInfo("lovelaceada_101_1_link.ipynb")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
        zf.writestr("pascalblaise_102_2_big.ipynb", b"{" + b" " * 5000 + b"}")
        zf.writestr("lovelaceada_101_1_my note;$(rm -rf ~).ipynb", right)
    res = lms_downloads.collect(tiny.ASSIGNMENT, [z], root)
    assert res["collected"] == {"ada": ["my note_(rm -rf _).ipynb"]}
    assert not (tmp_path / "escaped.ipynb").exists() and not (root / "escaped.ipynb").exists()
    skipped = "\n".join(res["skipped"])
    assert "outside the download" in skipped and "symbolic link" in skipped and "larger than" in skipped
    for p in (root / "downloaded").rglob("*"):
        assert not p.is_symlink()
        assert root / "downloaded" in p.resolve().parents


def test_a_moodle_download_in_folders_or_flat_is_collected_by_name(tmp_path):
    root = make_course(tmp_path / "course")
    (tmp_path / "grades.txt").write_text(MOODLE_LIST, encoding="utf-8")
    ag_roster.import_roster(tmp_path / "grades.txt", root)
    right = submission(root, tiny.RIGHT)
    z = write_zip(tmp_path / "moodle.zip", {
        "Ada Lovelace_881_assignsubmission_file_/tiny.ipynb": right,           # Moodle >= 3.1: a folder each
        "Jose ONeil_882_assignsubmission_file_tiny.ipynb": right,               # flat, as Moodle cleans names
        "Jo Smith_883_assignsubmission_file_/tiny.ipynb": right,                # two Jo Smiths on the list
        "Participant_884_assignsubmission_file_/tiny.ipynb": right,             # blind marking
        "Ada Lovelace_881_assignsubmission_onlinetext_/onlinetext.html": b"<p>hi</p>",
    })
    res = lms_downloads.collect(tiny.ASSIGNMENT, [z], root)
    assert res["collected"] == {"2026001": ["tiny.ipynb"], "2026002": ["tiny.ipynb"]}
    why = {Path(f).parent.name.split("_")[0]: w for f, w in res["not_collected"]}
    assert "2 students" in why["Jo Smith"] and "2026003, 2026004" in why["Jo Smith"]
    assert "blind marking" in why["Participant"]
    assert res["missing"] == ["2026003", "2026004"]


def test_collect_refuses_a_course_without_class_list_or_assignment(tmp_path):
    root = make_course(tmp_path / "course")
    z = write_zip(tmp_path / "s.zip", {"a_1_2_tiny.ipynb": b"{}"})
    with pytest.raises(ag_roster.LmsError, match="import the class list first"):
        lms_downloads.collect(tiny.ASSIGNMENT, [z], root)
    (tmp_path / "list.csv").write_text(CANVAS_LIST, encoding="utf-8")
    ag_roster.import_roster(tmp_path / "list.csv", root)
    with pytest.raises(ag_roster.LmsError, match="is 'lab99' an assignment"):
        lms_downloads.collect("lab99", [z], root)


# ----------------------------------------------------------------------------- grades out

def _grade(root: Path) -> None:
    samples.grade_course(layout.course_labs(root), root, progress=False, workers=1)


def _set_written(root: Path, student: str, points: float) -> None:
    """What the formgrader does when a person scores the written answer."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        g = gb.find_grade(WRITTEN, tiny.NOTEBOOK, tiny.ASSIGNMENT, student)
        g.manual_score = points
        g.needs_manual_grade = False
        gb.db.commit()


@pytest.mark.fast
def test_a_graded_class_exported_for_canvas_and_moodle(canvas_course, tmp_path):
    """Class list -> LMS download -> zip_collect -> the real batch grader -> the LMS's import files."""
    root = canvas_course
    z = write_zip(tmp_path / "submissions.zip", {
        "lovelaceada_101_9001_tiny.ipynb": submission(root, tiny.RIGHT, "It adds x to x."),
        "pascalblaise_102_9002_tiny.ipynb": submission(root, tiny.WRONG, "No idea."),
        "gausscarlfriedrich_103_9003_tiny.ipynb": submission(root, None),  # the release as it was
    })
    lms_downloads.collect(tiny.ASSIGNMENT, [z], root)
    _grade(root)

    header, rows, report = lms_grades.lms_table(root, "canvas")
    # Canvas's importer: Student, ID first; Section the last column about the student; then assignments
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert header[5:] == ["tiny (5501)", "tiny automatic", "tiny written"]
    assert rows[0]["Student"].strip() == "Points Possible" and [rows[0][h] for h in header[5:]] == ["5", "2", "3"]
    cells = {r["SIS Login ID"] or r["SIS User ID"]: [r[h] for h in header[5:]] for r in rows[1:]}
    assert cells == {"ada": ["", "2", ""],          # written answer still to grade: no total yet
                     "blaise": ["", "0", ""],
                     "S003": ["0", "0", "0"],       # the untouched release: nothing to grade, 0
                     "hedy": ["", "", ""]}          # no submission: empty, never 0
    assert any(line.startswith("hedy tiny: missing") for line in report)
    assert any(line.startswith("ada tiny: awaiting grading") for line in report)

    _set_written(root, "ada", 2.5)
    target, _ = lms_grades.export(root, "canvas")
    table = read_csv(target)
    assert table[0] == header and all(len(r) == len(header) for r in table)
    ada = next(r for r in table if r[3] == "ada")
    assert ada[5:] == ["4.5", "2", "2.5"]
    for r in table[2:]:  # Canvas reads every other text as a grade: only numbers or nothing
        assert all(c == "" or c.replace(".", "", 1).isdigit() for c in r[5:]), r

    header, rows, _ = lms_grades.lms_table(root, "canvas", totals_only=True)
    assert header[5:] == ["tiny (5501)"]


def test_nbgrader_export_with_the_moodle_plugin_and_spreadsheet_safe_cells(tmp_path):
    root = make_course(tmp_path / "course")
    hostile = MOODLE_LIST.replace("Ada\tLovelace", "=HYPERLINK(\"http://x\";\"click\")\tLovelace")
    (tmp_path / "grades.txt").write_text(hostile, encoding="utf-8")
    ag_roster.import_roster(tmp_path / "grades.txt", root)
    z = write_zip(tmp_path / "m.zip", {
        "=HYPERLINK(http___x_;_click_) Lovelace_1_assignsubmission_file_/tiny.ipynb":
            submission(root, tiny.RIGHT, "=1+1 is two")})
    lms_downloads.collect(tiny.ASSIGNMENT, [z], root)
    _grade(root)
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()\nload_subconfig({str(layout.CONFIG)!r})\nc.CourseDirectory.root = {str(root)!r}\n")
    # nbgrader's own export command, as the course runs it (the grader's package on the path)
    proc = subprocess.run([sys.executable, "-m", "autograder", "nbgrader", "export",
                           "--exporter=autograder.export.lms_grades.MoodleGrades", "--to=moodle.csv"], cwd=root,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = read_csv(root / "moodle.csv")
    assert table[0] == ["First name", "Last name", "ID number", "Institution", "Department", "Email address",
                        "tiny", "tiny automatic", "tiny written", "Feedback: tiny"]
    by_mail = {r[5]: r for r in table[1:]}
    first = by_mail["ada@uni.example"]
    assert first[0].startswith("'=HYPERLINK")        # shown as text, never run as a formula
    assert first[6:9] == ["", "2", ""] and "written answers being graded (3 points)" in first[9]
    assert by_mail["jo1@uni.example"][6:] == ["", "", "", "missing: no submission"]
    for r in table[1:]:  # Moodle's import: '' or a number in every grade column
        assert all(c == "" or c.replace(".", "", 1).isdigit() for c in r[6:9]), r
