"""Batches under faults (killed, a full disk, a locked or damaged gradebook, odd ids, a reference or a
course library that fails in the sandbox), on the tiny course of tiny.py with the real batch grader.

Each test first grades an "earlier" student in a batch of its own, then runs the faulty batch, and
checks that the earlier student's gradebook rows, autograded notebook, feedback and the CSV files
were not changed by the fault: nothing a fault does may reach another student.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from autograder.batch import gradebook_merge, run as batch_run
from autograder.sandbox import safe_files as files
from autograder.tests import tiny
from autograder.course.layout import ROOT

pytestmark = pytest.mark.slow
BATCH = tiny.BATCH
SLOW = "import time\ntime.sleep(4)"  # a free cell that makes a submission take a few seconds


def _sha(p: Path) -> str | None:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None


def _earlier(root: Path) -> dict:
    """What belongs to the earlier student (and the shared CSV files), to compare after a fault."""
    rows = {k: v for k, v in gradebook_merge.snapshot(root).items() if k[1] == "earlier"}
    assert rows and all(v[0] == tiny.POINTS for v in rows.values()), rows
    return {"rows": rows, "autograded": _sha(root / "autograded" / "earlier" / "tiny" / "tiny.ipynb"),
            "feedback": _sha(root / "feedback" / "earlier" / "tiny" / "tiny.html")}


def _same_earlier(root: Path, before: dict) -> None:
    assert _earlier(root) == before, "the earlier student's grades or files changed"


def _table(root: Path) -> dict[str, str]:
    with open(root / "batch_grades.csv", newline="") as f:
        return {r["student"]: r["status"] for r in csv.DictReader(f)}


def _integrity(root: Path) -> str:
    con = sqlite3.connect(root / "gradebook.db")
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()


def _leftovers(pid: int) -> list[Path]:
    return [p for p in Path(tempfile.gettempdir()).glob(f"llmrl-*-{pid}-*")]


def test_a_batch_killed_after_two_students_reruns_exactly_the_missing_ones(course):
    root = course
    before = _earlier(root)
    for s in ("s1", "s2", "s3", "s4", "s5"):
        tiny.submit(root, s, tiny.submission(root, tiny.RIGHT if s != "s3" else tiny.WRONG, [SLOW]))
    proc = subprocess.Popen(BATCH + ["--root", str(root), "--workers", "2"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        done = [s for s, status in (_table(root).items() if (root / "batch_grades.csv").exists() else [])
                if status == "graded" and s != "earlier"]
        if len(done) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the batch finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    table = _table(root)
    # the table says what happened: nothing stale, two graded, the rest pending
    assert set(table) == {"earlier", "s1", "s2", "s3", "s4", "s5"}, table
    graded = {s for s, status in table.items() if status == "graded"} - {"earlier"}
    assert len(graded) >= 2 and all(table[s] == "pending" for s in set(table) - graded - {"earlier"}), table
    time.sleep(2)  # the workers die with the batch (PR_SET_PDEATHSIG)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(root) not in ps, "a grading process outlived the killed batch"
    assert _integrity(root) == "ok"
    _same_earlier(root, before)
    assert _leftovers(proc.pid), "expected the killed batch's scratch folder (the re-run removes it)"

    rerun = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr
    assert f"graded {5 - len(graded)} now" in rerun.stdout, rerun.stdout
    table = _table(root)
    assert set(table) == {"earlier", "s1", "s2", "s3", "s4", "s5"} and set(table.values()) == {"graded"}, table
    rows = gradebook_merge.snapshot(root)
    assert rows[("tiny", "s3", "tiny", "test_double")][0] == 0 and rows[("tiny", "s5", "tiny", "test_double")][0] == 2
    assert not _leftovers(proc.pid), "the re-run left the killed batch's scratch folders behind"
    _same_earlier(root, before)


FULL_DISK = r'''
import json, os, subprocess, sys
from pathlib import Path
sys.path[:0] = [sys.argv[3]]  # the folder holding the grader's package (this script runs from a temporary file)
from autograder.batch import gradebook_merge, run as batch_run
from autograder.sandbox import safe_files as files
from autograder.tests import tiny
mount = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], check=True)
root = mount / "course"
tiny.make_course(root)
tiny.submit(root, "earlier", tiny.submission(root, tiny.RIGHT))
batch_run.run_batch(["tiny"], root, progress=False, csv_path=root / "batch_grades.csv")
def sha(p):
    import hashlib
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
keep = [root / "grades.csv", root / "autograded/earlier/tiny/tiny.ipynb", root / "feedback/earlier/tiny/tiny.html"]
before = {str(p): sha(p) for p in keep}
earlier_rows = {k: v for k, v in gradebook_merge.snapshot(root).items() if k[1] == "earlier"}
for s in ("n1", "n2", "n3", "n4"):
    tiny.submit(root, s, tiny.submission(root, tiny.RIGHT))
merged = []
def fill(result):
    if result.job.student != "earlier":   # (the earlier student's record is merged again first)
        merged.append(result.job.student)
    if len(merged) == 2 and not (mount / "filler").exists():   # the disk fills up after the second new student
        for name, chunk in (("filler", 1 << 20), ("filler2", 4096), ("filler3", 1)):
            try:
                with open(mount / name, "wb") as f:
                    while True:
                        f.write(b"\0" * chunk)
                        f.flush()
            except OSError:
                pass
out = {}
try:
    batch_run.run_batch(["tiny"], root, progress=False, csv_path=root / "batch_grades.csv", on_merged=fill, workers=1)
    out["stopped"] = None
except batch_run.BatchStop as e:
    out["stopped"] = str(e)
import sqlite3
out["integrity"] = sqlite3.connect(root / "gradebook.db").execute("PRAGMA integrity_check").fetchone()[0]
rows = gradebook_merge.snapshot(root)
out["earlier_same"] = {k: v for k, v in rows.items() if k[1] == "earlier"} == earlier_rows
out["merged_students"] = sorted({k[1] for k in rows} - {"earlier"})
out["files_same"] = {str(p): sha(p) for p in keep} == before
import csv
with open(root / "batch_grades.csv", newline="") as f:
    out["table"] = {r["student"]: r["status"] for r in csv.DictReader(f)}
for name in ("filler", "filler2", "filler3"):
    if (mount / name).exists():
        os.unlink(mount / name)
again = batch_run.run_batch(["tiny"], root, progress=False, csv_path=root / "batch_grades.csv")
out["rerun_graded"] = again["graded"]
out["rerun_statuses"] = sorted({r["status"] for r in again["rows"]})
out["rerun_students"] = sorted({r["student"] for r in again["rows"]})
out["earlier_same_after_rerun"] = {k: v for k, v in gradebook_merge.snapshot(root).items() if k[1] == "earlier"} == earlier_rows
print("RESULT " + json.dumps(out))
'''


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux) for a small tmpfs")
def test_a_full_disk_stops_the_batch_cleanly_and_a_rerun_finishes(tmp_path):
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["unshare", "-rm", "--propagation", "private", sys.executable, str(script), str(mount),
                           str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=900)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None and "Operation not permitted" in proc.stderr:
        pytest.skip("user namespaces are not allowed here: " + proc.stderr.strip().splitlines()[-1])
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(line.removeprefix("RESULT "))
    assert out["stopped"] and "no space left" in out["stopped"] and "run the batch again" in out["stopped"], out
    assert out["integrity"] == "ok" and out["earlier_same"] and out["files_same"], out
    assert len(out["merged_students"]) == 2, out          # the two merged before the disk filled up stay
    assert out["table"].get("earlier") == "graded" and "pending" in out["table"].values(), out["table"]
    assert out["rerun_graded"] == 2 and out["rerun_statuses"] == ["graded"], out
    assert out["rerun_students"] == ["earlier", "n1", "n2", "n3", "n4"] and out["earlier_same_after_rerun"], out


LOCKER = ("import sqlite3, sys, time\n"
          "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
          "c.execute('BEGIN EXCLUSIVE')\n"
          "print('locked', flush=True)\n"
          "time.sleep(float(sys.argv[2]))\n"
          "c.execute('ROLLBACK')\n")


def _lock(root: Path, seconds: float) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", LOCKER, str(root / "gradebook.db"), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_a_gradebook_locked_for_25_s_costs_no_student(course):
    root = course
    before = _earlier(root)
    for s in ("a1", "a2", "a3"):
        tiny.submit(root, s, tiny.submission(root, tiny.RIGHT))
    started = time.monotonic()
    locker = _lock(root, 25)
    proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900)
    locker.wait()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - started >= 25
    assert "FAILED" not in proc.stdout and set(_table(root).values()) == {"graded"}, proc.stdout
    assert {k[1] for k, v in gradebook_merge.snapshot(root).items() if v[0] == tiny.POINTS} == {"earlier", "a1", "a2", "a3"}
    _same_earlier(root, before)


def test_a_gradebook_locked_for_too_long_stops_the_batch_with_one_error(course):
    root = course
    before = _earlier(root)
    grades = _sha(root / "grades.csv")
    tiny.submit(root, "late", tiny.submission(root, tiny.RIGHT))
    locker = _lock(root, 300)
    try:
        proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900,
                              env=dict(os.environ, LLMRL_GRADEBOOK_WAIT="2"))
    finally:
        locker.kill()
        locker.wait()
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "locked by another process" in lines[0], proc.stderr
    _same_earlier(root, before)
    assert _sha(root / "grades.csv") == grades


@pytest.mark.parametrize("damage", ["rows", "bytes"])
def test_a_damaged_gradebook_is_put_back_with_a_clear_error(course, damage):
    root = course
    before = _earlier(root)
    for s in ("d1", "d2", "d3"):
        tiny.submit(root, s, tiny.submission(root, tiny.RIGHT))

    def harm(result):
        if result.job.student != "d1":
            return
        db = root / "gradebook.db"
        if damage == "rows":  # another process deletes the earlier student's grades
            con = sqlite3.connect(db)
            con.execute("DELETE FROM grade WHERE notebook_id IN (SELECT n.id FROM submitted_notebook n JOIN "
                        "submitted_assignment s ON n.assignment_id = s.id WHERE s.student_id = 'earlier')")
            con.commit()
            con.close()
        else:  # the file is overwritten in the middle
            with open(db, "r+b") as f:
                f.seek(2048)
                f.write(b"\xff" * 8192)
    with pytest.raises(batch_run.BatchStop, match="put back"):
        batch_run.run_batch([tiny.ASSIGNMENT], root, progress=False, csv_path=root / "batch_grades.csv", workers=1,
                        on_merged=harm)
    assert _integrity(root) == "ok"
    _same_earlier(root, before)  # the backup holds the earlier student as it was
    again = batch_run.run_batch([tiny.ASSIGNMENT], root, progress=False, csv_path=root / "batch_grades.csv")
    assert {r["student"] for r in again["rows"] if r["status"] == "graded"} == {"earlier", "d1", "d2", "d3"}
    _same_earlier(root, before)


def test_ids_that_used_to_share_a_report_file_and_links_in_submissions(course):
    """Also ids and file names that a spreadsheet would run as a formula: graded by the
    real batch, they reach grades.csv and batch_grades.csv as text."""
    root = course
    before = _earlier(root)
    tiny.submit(root, "bob", tiny.submission(root, tiny.WRONG))
    tiny.submit(root, "bob.json", tiny.submission(root, tiny.RIGHT))
    formula = root / "submitted" / "=2+3" / tiny.ASSIGNMENT        # an id, and a file name, that are formulas
    formula.mkdir(parents=True)
    nbformat.write(tiny.submission(root, tiny.RIGHT), formula / "=1+1.ipynb")
    tiny.submit(root, "@SUM(1+1)", tiny.submission(root, tiny.WRONG))
    (root / "submitted" / "@SUM(1+1)" / tiny.ASSIGNMENT / "+cmd.ipynb").write_text("-2+3")  # not a notebook
    # a notebook that is a link to the source (the solutions), and a student folder that is a link
    linked = root / "submitted" / "linker" / tiny.ASSIGNMENT
    linked.mkdir(parents=True)
    (linked / "tiny.ipynb").symlink_to(root / "source" / tiny.ASSIGNMENT / "tiny.ipynb")
    (root / "submitted" / "alias").symlink_to(root / "submitted" / "bob")
    proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout  # two submissions could not be graded
    rows = gradebook_merge.snapshot(root)
    assert rows[("tiny", "bob", "tiny", "test_double")][0] == 0
    assert rows[("tiny", "bob.json", "tiny", "test_double")][0] == tiny.POINTS
    with open(root / "batch_grades.csv", newline="") as f:
        table = {r["student"]: r for r in csv.DictReader(f)}
    assert table["linker"]["status"] == "failed" and "link" in table["linker"]["reason"], table["linker"]
    assert table["alias"]["status"] == "failed" and "link" in table["alias"]["reason"], table["alias"]
    assert ("tiny", "linker", "tiny", "test_double") not in rows
    # the formula-shaped ids are graded under their own names; in the tables every such cell is text
    assert rows[("tiny", "=2+3", "tiny", "test_double")][0] == tiny.POINTS
    assert rows[("tiny", "@SUM(1+1)", "tiny", "test_double")][0] == 0
    assert table["'=2+3"]["status"] == "graded" and table["'@SUM(1+1)"]["status"] == "graded", table
    assert table["'=2+3"]["reason"].startswith("'=1+1.ipynb: graded as tiny.ipynb"), table["'=2+3"]
    assert table["'@SUM(1+1)"]["reason"].startswith("'+cmd.ipynb: not graded"), table["'@SUM(1+1)"]
    with open(root / "grades.csv", newline="") as f:
        grades = {r["student_id"]: r for r in csv.DictReader(f)}
    assert grades["'=2+3"]["automatic"] == "2" and grades["'@SUM(1+1)"]["automatic"] == "0", grades
    for name in ("batch_grades.csv", "grades.csv"):
        with open(root / name, newline="") as f:
            cells = [c for row in csv.reader(f) for c in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")
                    or c[:1] == "-" and not re.fullmatch(r"-[0-9.e]+", c)], name
    _same_earlier(root, before)


def test_a_reference_that_fails_in_the_sandbox_stops_the_batch_before_any_student(tmp_path):
    """Class 8: the self-check. The source's hidden test needs a file the sandbox does not show."""
    outside = tmp_path / "data.txt"
    outside.write_text("2")
    root = tmp_path / "course"
    tiny.make_course(root, extra_setup=f"FACTOR = int(open({str(outside)!r}).read()) if __import__('os').path."
                                       f"exists({str(outside)!r}) else 3\n")
    src = root / "source" / tiny.ASSIGNMENT / "tiny.ipynb"
    src.write_text(src.read_text().replace("assert math.isclose(double(0.1), 0.2)",
                                           "assert FACTOR == 2, 'the data file is missing'"))
    tiny.submit(root, "honest", tiny.submission(root, tiny.RIGHT))
    proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "self-check failed" in lines[0] and "test_double" in lines[0], proc.stderr
    assert "the data file is missing" in lines[0]
    assert not (root / "gradebook.db").exists() or ("tiny", "honest", "tiny", "test_double") not in gradebook_merge.snapshot(root)
    assert not (root / "feedback").exists()


@pytest.mark.skipif(__import__("autograder.sandbox.bubblewrap", fromlist=["x"]).bwrap_status() != "ok", reason="needs the sandbox")
def test_a_course_library_that_does_not_import_in_the_sandbox_stops_the_batch(course, tmp_path):
    """Class 8: the import probe, before the first student."""
    root = course
    before = _earlier(root)
    tiny.submit(root, "next", tiny.submission(root, tiny.RIGHT))
    shadow = tmp_path / "shadow" / "llmrl"
    shadow.mkdir(parents=True)
    real = ROOT / "lib" / "llmrl"
    # the real library for the batch itself, a broken one in every grading kernel (NBGRADER_EXECUTION is set there)
    (shadow / "__init__.py").write_text("import os\n"
                                        "if os.environ.get('NBGRADER_EXECUTION'):\n"
                                        "    raise ImportError('no course library here')\n"
                                        f"__path__[:] = [{str(real)!r}]\n"
                                        f"exec(compile(open({str(real / '__init__.py')!r}).read(), "
                                        f"{str(real / '__init__.py')!r}, 'exec'))\n")
    proc = subprocess.run(BATCH + ["--root", str(root)], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path / "shadow")))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be imported inside the grading sandbox" in lines[0], proc.stderr
    assert "next" not in {k[1] for k in gradebook_merge.snapshot(root)}
    _same_earlier(root, before)
