"""A student who forges an early submission time, on the running hub, against the course's collection.

lab11 is due right after an honest student (s1) submits it through their server. After the due date
another student (s3), as their own OS account in a terminal of their server, writes into the exchange's
inbound (their own, as their server sees it) the folder that `nbgrader submit` writes, with a time an
hour before the due date in its name and in timestamp.txt (and the files' modification times set back
too), and s2 hands in a folder in s1's name, named a day later, with the release's stubs. The instructor collects (formgrader) and grades
(course_tool.py autograde) with the late policy "zero": s3 is graded at the time the files were
written (late, 0 points) and the grades say so; s1 is graded on their own folder, on time, with every
point and no such note.
It runs after the browser test (file order), which releases lab11 through the formgrader's page.
"""

from __future__ import annotations

import csv
import datetime
import json
import time

from hub import deploy
from hub.tests.common import ARTIFACTS, INSTRUCTOR, REPO
from hub.tests.test_course_cycle import COURSE, S1, S2, S3, _meta, _text, fill

A, NB = "lab11", "llm_as_policy"
# what the forger runs as their OS account: the folder `nbgrader submit` writes, with a chosen time
FORGE = '''import json, os, shutil, sys
inbound, notebook, name, stamp = sys.argv[1:5]
folder = os.path.join(inbound, name)
os.mkdir(folder)
shutil.copyfile(notebook, os.path.join(folder, os.path.basename(notebook)))
with open(os.path.join(folder, "timestamp.txt"), "w") as f:
    f.write(stamp)
back = os.stat(notebook).st_mtime - 2 * 3600
for p in [folder, *(os.path.join(folder, n) for n in os.listdir(folder))]:
    os.utime(p, (back, back))  # atime and mtime: what a student can set; the ctime stays
os.chmod(folder, 0o777)
print("forged", folder)
'''


def _solutions() -> dict[str, str]:
    src = json.loads((REPO / "source" / A / f"{NB}.ipynb").read_text())
    return {_meta(c)["grade_id"]: "\n".join(l for l in _text(c).splitlines()
                                           if l.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
            for c in src["cells"] if _meta(c).get("solution") and c["cell_type"] == "code"}


def _stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC"


def test_a_forged_early_timestamp_after_the_due_date_gets_the_late_policy(course_hub):
    cfg = course_hub.cfg
    course_dir = cfg.course_dir
    inbound = cfg.exchange / COURSE / "inbound"
    users, fg = course_hub.open_class((S1, S2, S3), A)  # servers already running after the course cycle
    answered = fill(users[S1].get_notebook(f"{A}/{NB}.ipynb"), _solutions(), {})

    config = course_dir / "nbgrader_config.py"
    original = config.read_text()
    config.write_text(original + 'c.LateSubmissionPlugin.penalty_method = "zero"  # the late-stamp test\n')
    try:
        users[S1].put_notebook(f"{A}/{NB}.ipynb", answered)
        users[S1].action("submit", COURSE, A)
        time.sleep(2.1)  # the due date: two seconds after s1's submission (nbgrader's times are per second)
        due = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        fg.put(f"/assignment/{A}", {"duedate_notimezone": due.strftime("%Y-%m-%d %H:%M:%S"),
                                    "duedate_timezone": "UTC"})
        assert fg.get(f"/assignment/{A}")["duedate"], "the due date was not set"
        time.sleep(2.1)  # after the due date: s3 writes the submission and claims an hour before it
        users[S3].put_notebook(f"{A}/{NB}.ipynb", answered)
        claimed = _stamp((due - datetime.timedelta(hours=1)).replace(tzinfo=None))
        name = f"{S3}+{A}+{claimed}+{'f' * 32}"
        python = str(deploy.env_dir(cfg) / "bin" / "python")
        proc = deploy.run_as(S3, [python, "-c", FORGE, str(inbound), str(deploy.home_of(S3) / A / f"{NB}.ipynb"),
                                  name, claimed], cfg, timeout=60, confined=True)
        assert "forged" in proc.stdout
        assert (cfg.inbound_of(S3) / name).stat().st_uid == deploy.uid_of(S3)
        # s2 hands in a folder in s1's name, named a day later (nbgrader would collect it as s1's newest)
        planted = f"{S1}+{A}+{_stamp((due + datetime.timedelta(days=1)).replace(tzinfo=None))}+{'e' * 32}"
        deploy.run_as(S2, [python, "-c", FORGE, str(inbound), str(deploy.home_of(S2) / A / f"{NB}.ipynb"),
                           planted, planted.split("+")[2]], cfg, timeout=60, confined=True)
        assert (cfg.inbound_of(S2) / planted).stat().st_uid == deploy.uid_of(S2)

        fg.post(f"/assignment/{A}/collect")
        submitted = course_dir / "submitted"
        graded_as = (submitted / S3 / A / "timestamp.txt").read_text()
        honest_in = next(p for p in cfg.inbound_of(S1).glob(f"{S1}+{A}+*") if p.stat().st_uid == deploy.uid_of(S1))
        assert (submitted / S1 / A / "timestamp.txt").read_bytes() == (honest_in / "timestamp.txt").read_bytes()
        assert (cfg.inbound_of(S3) / name / "timestamp.txt").read_text() == claimed, "the student's file was changed"
        records = json.loads((course_dir / "collected" / f"{A}.json").read_text())
        assert records[S1]["inbound"] == honest_in.name, f"s1's submission is not their own: {records[S1]}"
        assert (records[S3]["timestamp_txt"], records[S3]["replaced"]) == (claimed, True), records[S3]
        proc = deploy.run_as(INSTRUCTOR, [python, "course_tool.py", "autograde", A, "--workers", "2"], cfg,
                             cwd=course_dir, timeout=600, check=False)
        (ARTIFACTS / "late-stamp-autograde.log").write_text(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finally:
        config.write_text(original)

    said = f"timestamp.txt says {claimed!r}, the files were written at {graded_as}; graded as {graded_as}"
    with open(course_dir / "grades.csv", newline="") as f:
        grades = {r["student_id"]: r for r in csv.DictReader(f) if r["assignment"] == A}
    with open(course_dir / "batch_grades.csv", newline="") as f:
        batch = {r["student"]: r for r in csv.DictReader(f) if r["assignment"] == A}
    forger, honest = grades[S3], grades[S1]
    (ARTIFACTS / "late-stamp-grades.json").write_text(json.dumps({"grades": grades, "batch": batch}, indent=1))
    # graded at the files' time: after the due date (by the seconds the test waited), "zero": no points
    assert forger["status"] == "graded" and forger["total"] == "0", json.dumps(forger)
    assert said in forger["notes"] and "late by" in forger["notes"], forger["notes"]
    assert float(forger["automatic"]) == float(forger["late_penalty"]) == float(forger["automatic_max"]) > 0
    assert said in batch[S3]["reason"], batch[S3]
    assert honest["status"] == "graded" and honest["total"] == honest["automatic_max"], json.dumps(honest)
    assert "late" not in honest["notes"] and "timestamp.txt says" not in honest["notes"], json.dumps(honest)
    subs = {s["student"]: s for s in fg.get(f"/submissions/{A}")}
    assert subs[S1]["autograded"] and subs[S3]["autograded"], subs
