"""Late submissions and review holds on the tiny course of tiny.py with the real batch grader:
the course's late policy, forged and future time stamps, a late zero that manual grading cannot lift, a
notebook held for review (its feedback says so, no points), and grade's own time and due date. Like
test_grading_faults.py, whose helpers these tests share (the course fixture: conftest.py), each checks that the
earlier student's results are untouched.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder.batch import jobs
from autograder.course import layout
from autograder.course.layout import ROOT
from autograder.export import release_feedback
from autograder.sandbox import safe_files as files
from autograder.tests import tiny
from autograder.tests.test_grading_faults import BATCH, _earlier, _same_earlier

pytestmark = pytest.mark.slow


def _feedback_text(page: Path) -> str:
    import html

    body = re.sub(r"<(style|script)[^>]*>.*?</\1>", " ", page.read_text(), flags=re.S)
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())
    return re.sub(r"\(\s+", "(", re.sub(r"\s+([,)])", r"\1", text))  # "( <b>x</b> )" reads "(x)"


def _rows(root: Path) -> dict[str, dict]:
    with open(root / "batch_grades.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def test_late_and_on_time_students_get_the_courses_late_policy(course):
    """nbgrader's timestamp.txt reaches the batch: the gradebook's submission time, the late policy
    of the course folder's own nbgrader_config.py against the gradebook's due date, the side files
    byte for byte in autograded/, and a timestamp nbgrader cannot read fails that student only."""
    from nbgrader.api import Gradebook
    from nbgrader.utils import parse_utc

    root = course
    before = _earlier(root)
    (root / "nbgrader_config.py").write_text('c = get_config()  # noqa: F821\n'
                                             'c.LateSubmissionPlugin.penalty_method = "zero"\n')
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(tiny.ASSIGNMENT, duedate=parse_utc("2026-11-30 12:00:00 UTC"))
    # as `nbgrader submit` writes them (no newline; Exchange.timezone "UTC", or "Europe/Berlin": CET),
    # one second before and 90 minutes after the due date
    when = {"ontime": b"2026-11-30 11:59:59.000000 UTC", "late": b"2026-11-30 14:30:00.000000 CET"}
    for s, stamp in when.items():
        path = tiny.submit(root, s, tiny.submission(root, tiny.RIGHT))
        (path.parent / "timestamp.txt").write_bytes(stamp)
        (path.parent / "submission_secret.txt").write_bytes(f"secret of {s}\r\n".encode())
    broken = tiny.submit(root, "broken", tiny.submission(root, tiny.RIGHT))
    (broken.parent / "timestamp.txt").write_text("next tuesday, honest")
    proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one student failed: the batch says so, and went on
    assert "FAILED  broken/tiny: timestamp.txt holds 'next tuesday, honest'" in proc.stdout, proc.stdout

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for s, stamp in when.items():  # nbgrader stores UTC without a zone
            assert gb.find_submission(tiny.ASSIGNMENT, s).timestamp == parse_utc(stamp.decode()), s
        assert gb.find_submission(tiny.ASSIGNMENT, "ontime").total_seconds_late == 0
        assert gb.find_submission(tiny.ASSIGNMENT, "late").total_seconds_late == 90 * 60
        late = gb.find_submission_notebook(tiny.NOTEBOOK, tiny.ASSIGNMENT, "late")
        ontime = gb.find_submission_notebook(tiny.NOTEBOOK, tiny.ASSIGNMENT, "ontime")
        # "zero": a late notebook loses all its points; its own points stay recorded beside the penalty
        assert (late.score, late.late_submission_penalty) == (tiny.POINTS, tiny.POINTS)
        assert (ontime.score, ontime.late_submission_penalty) == (tiny.POINTS, None)
        assert "broken" not in {sub.student_id for sub in gb.find_assignment(tiny.ASSIGNMENT).submissions}
    for s, stamp in when.items():
        folder = root / "autograded" / s / tiny.ASSIGNMENT
        assert (folder / "timestamp.txt").read_bytes() == stamp  # byte for byte: the formgrader compares them
        assert (folder / "submission_secret.txt").read_bytes() == f"secret of {s}\r\n".encode()
    assert not (root / "autograded" / "broken").exists()

    rows = _rows(root)
    assert float(rows["late"]["late_penalty"]) == tiny.POINTS and float(rows["late"]["points"]) == tiny.POINTS
    assert rows["ontime"]["late_penalty"] == "" and rows["ontime"]["status"] == "graded"
    assert rows["broken"]["status"] == "failed" and "not a time nbgrader can read" in rows["broken"]["reason"]
    with open(root / "grades.csv", newline="") as f:
        table = {r["student_id"]: r for r in csv.DictReader(f)}
    assert (table["late"]["total"], table["late"]["late_penalty"], table["late"]["notes"]) == (
        "0", "2", "late by 1 h 30 min, penalty -2"), table["late"]
    assert (table["ontime"]["total"], table["ontime"]["late_penalty"], table["ontime"]["notes"]) == ("2", "0", "")
    assert table["late"]["timestamp"] == "2026-11-30 13:30:00" and table["broken"]["status"] == "failed"

    page = lambda s: root / "feedback" / s / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.html"  # noqa: E731
    assert "Late submission penalty (Score: -2.0)" in _feedback_text(page("late"))
    late_page = _feedback_text(page("late"))  # nbgrader's score on the page is after the penalty
    assert f"tiny (Score: 0.0 / {tiny.POINTS})" in late_page, late_page[:600]
    assert "late policy took 2.0 points off this notebook; the score above is after the penalty" in late_page
    assert "Late submission penalty" not in _feedback_text(page("ontime"))
    html = page("ontime").read_text()  # the intro's table in a blockquote is a table, not lines of pipes
    assert re.search(r"<blockquote>\s*<table>.*?<code>double</code>.*?</table>\s*</blockquote>", html, re.S), html
    # a failing test's message is one long line: the page wraps output text instead of scrolling it sideways
    assert re.search(r"\.output_subarea\.output_text pre\s*\{[^}]*white-space:\s*pre-wrap", html), "output text does not wrap"
    assert "|---|" not in html
    assert "after the due date" not in _feedback_text(page("ontime"))
    _same_earlier(root, before)

    # the course's policy changed back to nbgrader's "none": everyone is graded again, nothing taken off
    (root / "nbgrader_config.py").write_text('c = get_config()  # noqa: F821\n'
                                             'c.LateSubmissionPlugin.penalty_method = "none"\n')
    (broken.parent / "timestamp.txt").unlink()
    (root / "submitted" / "ontime" / tiny.ASSIGNMENT / "submission_secret.txt").unlink()  # gone from submitted/
    proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and "reused" not in proc.stdout, proc.stdout + proc.stderr
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        late = gb.find_submission_notebook(tiny.NOTEBOOK, tiny.ASSIGNMENT, "late")
        assert (late.score, late.late_submission_penalty) == (tiny.POINTS, None)
        assert gb.find_submission(tiny.ASSIGNMENT, "late").total_seconds_late == 90 * 60  # still recorded
    assert _rows(root)["broken"]["status"] == "graded"
    assert not (root / "autograded" / "ontime" / tiny.ASSIGNMENT / "submission_secret.txt").exists()  # not stale
    assert (root / "autograded" / "ontime" / tiny.ASSIGNMENT / "timestamp.txt").read_bytes() == when["ontime"]


def test_a_forged_stamp_is_graded_late_and_a_late_zero_stays_zero_after_manual_grading(tmp_path, monkeypatch):
    """The late policy "zero" against a submission time the student forged, and on written answers graded
    later (one batch on the tiny course with a written answer, due an hour ago).

    The collection (course_collect.py, nbgrader's collect with the course's settings): a student writes
    their own folder into the inbound with a time an hour before the due date (and the files' times set
    back); another uses nbgrader submit. The forger is graded at the files' time (late: no points) and
    the grades say why; the honest timestamp.txt reaches submitted/ byte for byte; the inbound is not
    changed. Then a person grades two hand-stamped students' written answers as the formgrader does:
    nbgrader took the late notebook's automatic points at autograding, grades.csv (the batch's and
    `nbgrader export`'s) applies the policy to the final score: 0, not the manual points."""
    import datetime
    import getpass

    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeFactory
    from nbgrader.utils import parse_utc
    from traitlets.config import Config

    from autograder.course import layout
    from autograder.course import nbgrader_app
    from autograder.export import grades_csv
    from autograder.export import release_feedback
    from autograder.collect import exchange as course_collect
    from autograder.tests import written

    root = written.make_course(tmp_path / "course")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    (root / "nbgrader_config.py").write_text('c = get_config()  # noqa: F821\n'
                                             'c.LateSubmissionPlugin.penalty_method = "zero"\n')
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None, microsecond=0)
    due = now - datetime.timedelta(hours=1)
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(tiny.ASSIGNMENT, duedate=due)
    for s, when in {"ontime": due - datetime.timedelta(hours=1), "late": due + datetime.timedelta(hours=1)}.items():
        nb = tiny.submission(root, tiny.RIGHT)
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("grade_id") == written.WRITTEN:
                c.source = "It adds x to itself: double(3) = 3 + 3."
        (tiny.submit(root, s, nb).parent / "timestamp.txt").write_text(course_collect.stamp_text(when))

    cfg = nbgrader_app.load_config(root)
    cfg.Exchange.root = str(exchange)
    # one OS account plays both students here: the owner check (a folder counts only for the account that
    # owns it, test_collect.py and the hub's tests) is off, as on a machine where students share an account
    cfg.CourseCollect.check_owner = False
    api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)  # the course's settings, as the formgrader's
    assert api.release_assignment(tiny.ASSIGNMENT)["success"]
    # the honest student: nbgrader submit from their own folder (as this OS user)
    home = tmp_path / "home"
    (home / tiny.ASSIGNMENT).mkdir(parents=True)
    nbformat.write(tiny.submission(root, tiny.RIGHT), home / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.ipynb")
    student = Config()
    student.Exchange.root, student.CourseDirectory.root = str(exchange), str(home)
    student.CourseDirectory.course_id, student.CourseDirectory.assignment_id = "llmrl", tiny.ASSIGNMENT
    monkeypatch.chdir(home)  # nbgrader submit takes the assignment's folder from where it runs
    ExchangeFactory(config=student).Submit(coursedir=CourseDirectory(config=student),
                                           authenticator=Authenticator(config=student), config=student).start()
    honest = getpass.getuser()
    # the forger: the folder nbgrader submit would write, with a time an hour before the due date
    claimed = course_collect.stamp_text(due - datetime.timedelta(hours=1))
    inbound = exchange / "llmrl" / "inbound"
    forged = inbound / f"forger+{tiny.ASSIGNMENT}+{claimed}+0123456789abcdef"
    forged.mkdir()
    nbformat.write(tiny.submission(root, tiny.RIGHT), forged / f"{tiny.NOTEBOOK}.ipynb")
    (forged / "timestamp.txt").write_text(claimed)
    for p in (forged, forged / "timestamp.txt", forged / f"{tiny.NOTEBOOK}.ipynb"):
        os.utime(p, (0, 0))  # atime and mtime set back: the ctime is not
    inbound_before = {p: p.read_bytes() for p in inbound.rglob("*") if p.is_file()}

    r = api.collect(tiny.ASSIGNMENT)
    assert r["success"], r
    honest_in = next(inbound.glob(f"{honest}+*"))
    assert (root / "submitted" / honest / tiny.ASSIGNMENT / "timestamp.txt").read_bytes() == \
        (honest_in / "timestamp.txt").read_bytes()
    graded = (root / "submitted" / "forger" / tiny.ASSIGNMENT / "timestamp.txt").read_text()
    # the files were written in this test's last minutes (a loaded machine), not an hour before the due date
    assert 0 <= (parse_utc(graded).replace(tzinfo=None) - now).total_seconds() < 300, (graded, now)
    records = course_collect.read_records(root, tiny.ASSIGNMENT)
    assert (records["forger"]["timestamp_txt"], records["forger"]["replaced"]) == (claimed, True), records
    assert records[honest]["replaced"] is False, records
    assert inbound_before == {p: p.read_bytes() for p in inbound.rglob("*") if p.is_file()}, "the inbound changed"

    proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = f"timestamp.txt says {claimed!r}, the files were written at {graded}; graded as {graded}"
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(tiny.NOTEBOOK, tiny.ASSIGNMENT, "forger")
        assert (nb.score, nb.late_submission_penalty) == (tiny.POINTS, tiny.POINTS)  # "zero": late
        # an hour late by the files' time (the test's own minutes on top), not on time by the claim
        assert 3600 <= gb.find_submission(tiny.ASSIGNMENT, "forger").total_seconds_late < 3600 + 300
    rows = _rows(root)
    assert said in rows["forger"]["reason"] and float(rows["forger"]["late_penalty"]) == tiny.POINTS, rows["forger"]
    assert "timestamp.txt says" not in rows[honest]["reason"] + rows["late"]["reason"]
    with open(root / "grades.csv", newline="") as f:
        before = {r["student_id"]: r for r in csv.DictReader(f)}
    assert before["forger"]["total"] == "0" and said in before["forger"]["notes"], before["forger"]
    assert "timestamp.txt says" not in before[honest]["notes"]
    assert before["late"]["status"] == "awaiting grading" and before["late"]["total"] == "", before["late"]

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:  # what the formgrader's PUT /grade does
        for s in ("ontime", "late"):
            g = gb.find_grade(written.WRITTEN, tiny.NOTEBOOK, tiny.ASSIGNMENT, s)
            g.manual_score, g.needs_manual_grade = written.WRITTEN_POINTS, False
        gb.db.commit()
        # nbgrader's own penalty still covers only the automatic points
        late = gb.find_submission_notebook(tiny.NOTEBOOK, tiny.ASSIGNMENT, "late")
        assert (late.score, late.late_submission_penalty) == (tiny.POINTS + written.WRITTEN_POINTS, tiny.POINTS)
    grades_csv.write_grades_csv(root)  # as the batch and `nbgrader export` (autograder.export.grades_csv.GradesCsv) write it
    with open(root / "grades.csv", newline="") as f:
        table = {r["student_id"]: r for r in csv.DictReader(f)}
    full = tiny.POINTS + written.WRITTEN_POINTS
    assert (table["late"]["status"], table["late"]["total"], table["late"]["late_penalty"]) == (
        "graded", "0", f"{full:g}"), table["late"]
    assert table["late"]["manual"] == f"{written.WRITTEN_POINTS:g}"  # the points stay recorded beside the penalty
    assert f"late by 1 h, penalty -{full:g}" in table["late"]["notes"], table["late"]
    assert (table["ontime"]["total"], table["ontime"]["late_penalty"]) == (f"{full:g}", "0"), table["ontime"]
    # the policy back to "none": late, nothing taken off, the final score is the points
    (root / "nbgrader_config.py").write_text('c = get_config()  # noqa: F821\n'
                                             'c.LateSubmissionPlugin.penalty_method = "none"\n')
    grades_csv.write_grades_csv(root)
    with open(root / "grades.csv", newline="") as f:
        assert {r["student_id"]: r for r in csv.DictReader(f)}["late"]["total"] == f"{full:g}"


def test_a_notebook_held_for_review_says_so_in_its_feedback_and_has_no_points(tmp_path):
    """The gradebook gives a notebook held for review 0 until a person looks: its feedback (the
    batch's page, and the course's feedback from the gradebook) says so, never the automatic points."""
    from nbgrader.api import Gradebook

    root = tiny.make_course(tmp_path / "course", second_test=True)
    # The first test cell's calls are answered as usual (2 points); the last of them swaps the grader's
    # serve function in the student's kernel, so the second cell's call gets an answer outside the format.
    cheat = ("def double(x):\n    if x == 0.1:\n        import sys\n"
             "        sys.modules['_llmrl_remote'].serve = lambda text: 'bm90IGEgbWVzc2FnZQ=='\n    return x + x")
    tiny.submit(root, "cheat", tiny.submission(root, cheat))
    proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = _rows(root)["cheat"]
    assert row["status"] == "review" and "outside the grader's format" in row["reason"], row
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        grades = {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade, g.score)
                  for g in gb.find_submission_notebook(tiny.NOTEBOOK, tiny.ASSIGNMENT, "cheat").grades}
    assert grades == {"test_double": (0.0, 0.0, True, 0.0), tiny.SECOND: (0.0, 0.0, True, 0.0)}, grades
    total = tiny.POINTS + tiny.SECOND_POINTS
    page = root / "feedback" / "cheat" / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.html"
    assert not page.exists(), "feedback held for review was released"
    stored = list((root / jobs.STATE / tiny.ASSIGNMENT).glob(f"*/files/{tiny.NOTEBOOK}.html"))
    assert len(stored) == 1
    lab = layout.Lab(tiny.ASSIGNMENT, tiny.NOTEBOOK, root)
    done = release_feedback.feedback([lab], force=True, root=root)  # the instructor releases it as it is
    assert done["released"] == ["cheat/tiny/tiny (forced: 2 cell(s) awaiting grading)"], done
    for text in (_feedback_text(stored[0]), _feedback_text(page)):  # the batch's own page and the released one
        assert f"tiny (Held for review: no points yet, of {total})" in text, text[:600]
        assert f"Test cell test_double (Held for review, {tiny.POINTS} points)" in text  # named by its grade id
        assert "Score:" not in text and "Score so far" not in text and "awaiting grading" not in text.lower()

    # a reviewer confirms the first cell's points (the formgrader: manual score, flag cleared)
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for g in gb.find_submission_notebook(tiny.NOTEBOOK, tiny.ASSIGNMENT, "cheat").grades:
            g.manual_score, g.needs_manual_grade = (tiny.POINTS if g.name == "test_double" else 0.0), False
        gb.db.commit()
    done = release_feedback.feedback([lab], root=root)
    assert done["released"] == ["cheat/tiny/tiny"], done
    text = _feedback_text(page)
    assert f"tiny (Score: {tiny.POINTS} / {total})" in text and "held for review" not in text.lower(), text[:600]


def test_grade_alone_takes_the_time_and_due_date_from_its_command_line(tmp_path):
    """autograder/bin/grade without the batch: --timestamp and --duedate; the course folder's own late
    policy applies; the course's gradebook is not opened (here: not a database at all)."""
    import nbformat

    root = tiny.make_course(tmp_path / "course")
    (root / "nbgrader_config.py").write_text('c = get_config()  # noqa: F821\n'
                                             'c.LateSubmissionPlugin.penalty_method = "zero"\n')
    (root / "gradebook.db").write_bytes(b"the course's gradebook: never opened by grade.py")
    path = tmp_path / f"{tiny.NOTEBOOK}.ipynb"
    nbformat.write(tiny.submission(root, tiny.RIGHT), path)
    grade = [str(ROOT / "autograder" / "bin" / "grade"), tiny.ASSIGNMENT, str(path), "--root", str(root),
             "--duedate", "2026-11-30 12:00:00 UTC"]
    proc = subprocess.run(grade + ["--timestamp", "2026-11-30 12:00:01.000000 UTC"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["seconds_late"], report["late_penalty"], report["points"]) == (1.0, tiny.POINTS, tiny.POINTS)
    proc = subprocess.run(grade + ["--timestamp", "soon"], capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and lines == [lines[-1]] and "timestamp.txt holds 'soon'" in lines[-1], proc.stderr


def test_a_folder_named_in_the_future_neither_hides_later_submissions_nor_keeps_its_time(tmp_path):
    """A student names an inbound folder in the year 2099 (and writes 2099 in its timestamp.txt), then
    submits honestly: the collection takes the folder written last, whatever the names say, and a
    timestamp.txt later than its files' time (an honest submit takes its time before it writes them)
    is replaced by the files' time, so the student can hand in again after it."""
    import datetime
    import getpass

    from autograder.collect import exchange as course_collect
    from traitlets.config import Config

    inbound = tmp_path / "inbound"
    me = getpass.getuser()

    def folder(name_time: str, stamp: str) -> str:
        name = f"{me}+ps1+{name_time}+{os.urandom(4).hex()}"
        (inbound / name).mkdir(parents=True)
        (inbound / name / "ps1.ipynb").write_text("{}")
        (inbound / name / "timestamp.txt").write_text(stamp)
        time.sleep(0.05)  # ctimes in order
        return name

    planted = folder("2099-01-01 00:00:00.000000 UTC", "2099-01-01 00:00:00.000000 UTC")
    now = course_collect.stamp_text(datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None))
    honest = folder(now, now)
    cfg = Config()
    cfg.CourseDirectory.root = str(tmp_path / "course")
    collect = course_collect.CourseCollect(config=cfg)
    collect.inbound_path = str(inbound)
    records = [collect._path_to_record(str(inbound / n)) for n in (planted, honest)]
    assert [r["filename"] for r in collect._sort_by_timestamp(records)] == [honest, planted]
    # written later, the planted folder is the newest again: it is taken, at its files' time, not 2099
    os.utime(inbound / planted / "ps1.ipynb")  # a write: its ctime moves on
    assert collect._sort_by_timestamp(records)[0]["filename"] == planted
    dest = tmp_path / "submitted"
    shutil.copytree(inbound / planted, dest)
    rec = course_collect.check(inbound / planted, dest)
    assert rec["replaced"] and rec["timestamp_txt"] == "2099-01-01 00:00:00.000000 UTC"
    assert (dest / "timestamp.txt").read_text() == rec["files_written"] != rec["timestamp_txt"]
    assert (inbound / planted / "timestamp.txt").read_text().startswith("2099")  # the inbound is not changed
    # an honest stamp, seconds before its files, is kept
    shutil.rmtree(dest)
    shutil.copytree(inbound / honest, dest)
    assert not course_collect.check(inbound / honest, dest)["replaced"] and (dest / "timestamp.txt").read_text() == now
