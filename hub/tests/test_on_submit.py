"""Grading on submit on the running hub (hub/on_submit), as students and the instructor use it.

The instructor switches lab11 to "score". Two students submit through their servers at the same
moment (s1 the reference answers, s2 the corpus's wrong-e: task 4 without 0 log 0 = 0); a third (s3)
hands in the corpus's hostile `attack` entry with a cell that goes after the on-submit service (its
queue, its spool, its results, the grading account's course folder, s1's feedback). Each student's
own folder gets their status and feedback page, written as that student, within minutes; nobody
gets anyone else's; the hostile code sees and changes nothing; the gradebook is untouched until the
instructor accepts the on-submit grades, and the batch says where it agrees. Then bad input (not
JSON, another assignment's notebook, after the due date, the "feedback" setting) and a hub restart
with three submissions queued: each is graded once. The submit-to-feedback latencies go to
artifacts/hub/on-submit-timings.json (a benchmark figure, docs/hub.md; not asserted).

It runs last (file order): it restarts the session's hub.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autograder import corpus
from hub import deploy, on_submit
from hub.layout import QUEUE_FILE
from hub.tests.common import ARTIFACTS, INSTRUCTOR
from hub.tests.test_course_cycle import COURSE, probe_as

A, NB = "lab11", "llm_as_policy"
S1, S2, S3 = "llmrl-t-s1", "llmrl-t-s2", "llmrl-t-s3"
FEEDBACK = f"{A}/{on_submit.FEEDBACK_DIR}"
WAIT_S = 900  # a loaded 2-core machine: a self-check and a few gradings one after another

SNOOP = '''# on submit: what can my code reach of the service that grades it?
import os
for _p in {paths!r}:
    try:
        os.listdir(_p) if os.path.isdir(_p) else open(_p, "rb").read(1)
        print("SEEN", _p)
    except OSError as _e:
        print("hidden", _p, type(_e).__name__)
    try:
        open(os.path.join(_p, "planted.txt") if os.path.isdir(_p) else _p, "a").write("x")
        print("WROTE", _p)
    except OSError as _e:
        print("unwritable", _p, type(_e).__name__)
'''


def _entry(name: str) -> dict:
    spec = corpus.load_spec(A)
    entry = next(e for e in spec.ENTRIES if e.name == name)
    built = corpus.build_entry(A, entry)
    return json.loads(next(iter(built.files.values()))), built.expected_total, built.max_points


def _status(cfg, student: str) -> dict | None:
    path = deploy.home_of(student) / FEEDBACK / "status.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _wait(cfg, student: str, done, timeout: float = WAIT_S) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = _status(cfg, student)
        if st is not None and done(st):
            return st
        time.sleep(1.0)
    log = (cfg.on_submit_dir / "service.log")
    raise AssertionError(f"{student}: no such status in {timeout} s: {_status(cfg, student)}; service log: "
                         f"{log.read_text()[-3000:] if log.exists() else 'none'}")


def _final(st: dict) -> bool:
    return st["state"] in ("graded", "held", "refused", "error")


def _instructor(cfg, *args, check=True):
    python = str(deploy.env_dir(cfg) / "bin" / "python")
    return deploy.run_as(INSTRUCTOR, [python, "course_tool.py", *args], cfg, cwd=cfg.course_dir, timeout=900,
                         check=check)


def _tree_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()} if folder.is_dir() else {}


def _gradebook_rows(cfg) -> list:
    with sqlite3.connect(f"file:{cfg.course_dir / 'gradebook.db'}?mode=ro", uri=True) as db:
        return sorted(db.execute("SELECT s.student_id, a.name FROM submitted_assignment s "
                                 "JOIN assignment a ON a.id = s.assignment_id").fetchall())


def test_graded_on_submit(course_hub):
    cfg = course_hub.cfg
    timings: dict = {"load_average_start": " ".join(f"{x:.2f}" for x in __import__("os").getloadavg())}
    users, fg = course_hub.open_class((S1, S2, S3), A)
    # due tomorrow (an earlier test made it due in the past): on time for now
    tomorrow = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    fg.put(f"/assignment/{A}", {"duedate_notimezone": tomorrow.strftime("%Y-%m-%d %H:%M:%S"),
                                "duedate_timezone": "UTC"})

    # The service runs as root, grades as the grading account; nothing happens while lab11 is off.
    assert deploy.user_exists(cfg.grader)
    assert "off" in _instructor(cfg, "on-submit", A).stdout
    assert "score" in _instructor(cfg, "on-submit", A, "score").stdout
    assert _instructor(cfg, "on-submit", A, "loud", check=False).returncode != 0
    gradebook_before = _gradebook_rows(cfg)

    reference, ref_total, max_points = _entry("reference")
    wrong, wrong_total, _ = _entry("wrong-e")
    hostile, hostile_total, _ = _entry("attack")
    spool, results = cfg.on_submit_dir / "spool", cfg.on_submit_dir / "results"
    targets = [str(cfg.state / "on-submit.sqlite"), str(spool), str(results), str(cfg.on_submit_dir / "course"),
               str(cfg.on_submit_dir / "course" / "source" / A / f"{NB}.ipynb"),
               str(deploy.home_of(S1) / FEEDBACK), str(deploy.home_of(S1) / FEEDBACK / "status.json")]
    hostile["cells"].append({"cell_type": "code", "metadata": {}, "source": SNOOP.format(paths=targets),
                             "outputs": [], "execution_count": None})

    # -- two students at once, then the hostile one
    users[S1].put_notebook(f"{A}/{NB}.ipynb", reference)
    users[S2].put_notebook(f"{A}/{NB}.ipynb", wrong)
    submitted_at = {}

    def submit(n):
        users[n].action("submit", COURSE, A)
        submitted_at[n] = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(submit, (S1, S2)))
    queued = _wait(cfg, S1, lambda st: st["state"] in ("queued", "running", "graded"), timeout=120)
    timings["submit_to_queued_status_s"] = round(time.monotonic() - submitted_at[S1], 1)
    assert queued["assignment"] == A
    st1 = _wait(cfg, S1, _final)
    timings["s1_submit_to_feedback_s"] = round(time.monotonic() - submitted_at[S1], 1)
    st2 = _wait(cfg, S2, _final)
    timings["s2_submit_to_feedback_s"] = round(time.monotonic() - submitted_at[S2], 1)
    # the hostile submission, once the first two are graded (its own snooping runs while nothing else is)
    users[S3].put_notebook(f"{A}/{NB}.ipynb", hostile)
    before_s1 = _tree_digest(deploy.home_of(S1) / FEEDBACK)
    before_results = _tree_digest(results / A / S1)
    t3 = time.monotonic()
    users[S3].action("submit", COURSE, A)
    st3 = _wait(cfg, S3, _final)
    timings["s3_submit_to_feedback_s"] = round(time.monotonic() - t3, 1)

    def total(st):
        return sum(n["points"] for n in st["summary"]["notebooks"])
    assert (st1["state"], total(st1), st1["summary"]["late"]) == ("graded", ref_total, False), st1
    assert (st2["state"], total(st2)) == ("graded", wrong_total), st2
    assert ref_total == max_points and wrong_total < max_points
    failed = [t for n in st2["summary"]["notebooks"] for t in n["tests"] if t["verdict"] == "failed"]
    assert failed and all(t["label"].startswith("Task 4") for t in failed), failed
    for n, st in ((S1, st1), (S2, st2)):
        folder = deploy.home_of(n) / FEEDBACK
        assert sorted(p.name for p in folder.iterdir()) == sorted(["status.html", "status.json", f"{NB}.html"])
        assert all(p.stat().st_uid == deploy.uid_of(n) for p in folder.iterdir()), f"{n}'s feedback is not theirs"
        page = (folder / f"{NB}.html").read_text()
        assert "Score:" in page and "BEGIN HIDDEN TESTS" not in page
    assert "failed" in (deploy.home_of(S2) / FEEDBACK / "status.html").read_text()
    # each student reads only their own: s2 cannot read s1's page, nor the service's files
    seen = probe_as(cfg, S2, [("read", str(deploy.home_of(S1) / FEEDBACK / f"{NB}.html")),
                              ("list", str(results)), ("read", targets[0]), ("list", str(spool / "x")),
                              ("list", str(cfg.on_submit_dir / "course"))])
    assert set(seen.values()) <= {"PermissionError", "FileNotFoundError"} and \
        seen[f"read {targets[0]}"] == "PermissionError", seen

    # the hostile submission: graded like any other (the corpus's attack gets full marks), saw nothing of
    # the service, wrote nothing; s1's feedback and stored results are as they were
    assert (st3["state"], total(st3)) == ("graded", hostile_total), st3
    stored = json.loads((results / A / S3 / "latest.json").read_text())
    graded_nb = json.loads((Path(stored["folder_path"]) / f"{NB}.ipynb").read_text())
    out = "".join("".join(o.get("text", "")) for c in graded_nb["cells"] if "on submit: what can" in "".join(c["source"])
                  for o in c.get("outputs", []))
    assert out.count("hidden") == len(targets) and "SEEN" not in out and "WROTE" not in out, out
    assert _tree_digest(deploy.home_of(S1) / FEEDBACK) == before_s1
    assert _tree_digest(results / A / S1) == before_results
    assert not any(p.name == "planted.txt" for p in cfg.on_submit_dir.rglob("planted.txt"))
    # and from the student's own terminal
    seen = probe_as(cfg, S3, [("read", targets[0]), ("list", str(results)), ("list", str(spool / "1"))])
    assert set(seen.values()) <= {"PermissionError", "FileNotFoundError"}, seen

    # -- the gradebook: untouched until the instructor accepts; the batch says where they agree
    assert _gradebook_rows(cfg) == gradebook_before
    listed = _instructor(cfg, "on-submit-grades", A).stdout
    assert S1 in listed and f"{ref_total:g}/{max_points:g}" in listed, listed
    fg.post(f"/assignment/{A}/collect")
    accepted = _instructor(cfg, "accept-on-submit", A, "--students", f"{S1},{S2}").stdout
    assert f"accepted {S1}: {ref_total:g}/{max_points:g}" in accepted and f"accepted {S2}" in accepted, accepted
    subs = {s["student"]: s for s in fg.get(f"/submissions/{A}")}
    assert subs[S1]["code_score"] == ref_total and subs[S2]["code_score"] == wrong_total, subs
    t0 = time.monotonic()
    batch = _instructor(cfg, "autograde", A, "--workers", "1", check=False)
    timings["batch_autograde_s"] = round(time.monotonic() - t0, 1)
    (ARTIFACTS / "on-submit-autograde.log").write_text(batch.stdout + batch.stderr)
    assert batch.returncode == 0, batch.stdout[-2000:] + batch.stderr[-2000:]
    assert f"{A}: on-submit grades agree with the batch for 3 of 3 students" in batch.stdout, batch.stdout[-2000:]

    _bad_input_gets_its_reason(cfg, users, fg)
    _a_restart_grades_each_queued_submission_once(course_hub, users, wrong, timings)
    timings["load_average_end"] = " ".join(f"{x:.2f}" for x in __import__("os").getloadavg())
    (ARTIFACTS / "on-submit-timings.json").write_text(json.dumps(timings, indent=1))
    print(json.dumps(timings, indent=1))


def _bad_input_gets_its_reason(cfg, users, fg) -> None:
    """Not JSON, another assignment's notebook, a deadline passed, the scores hidden."""
    python = str(deploy.env_dir(cfg) / "bin" / "python")
    deploy.run_as(S2, [python, "-c", f"open({str(deploy.home_of(S2) / A / (NB + '.ipynb'))!r}, 'w')"
                                     f".write('{{\"cells\": [')"], cfg, confined=True)
    first = _status(cfg, S2)["job"]
    users[S2].action("submit", COURSE, A)
    st = _wait(cfg, S2, lambda s: s["job"] != first and _final(s))
    assert st["state"] == "refused" and "JSON" in st["message"] and f"{NB}.ipynb" in st["message"], st
    assert not (deploy.home_of(S2) / FEEDBACK / f"{NB}.html").exists(), "a page of an earlier submission stayed"

    hw4_nb = json.loads((cfg.course_dir / "release" / "hw4" / "llm_rl.ipynb").read_text())
    users[S2].put_notebook(f"{A}/{NB}.ipynb", hw4_nb)  # hw4's notebook, saved under lab11's name
    first = st["job"]
    users[S2].action("submit", COURSE, A)
    st = _wait(cfg, S2, lambda s: s["job"] != first and _final(s))
    assert st["state"] == "refused" and f"{NB}.ipynb" in st["message"], st

    yesterday = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    fg.put(f"/assignment/{A}", {"duedate_notimezone": yesterday.strftime("%Y-%m-%d %H:%M:%S"),
                                "duedate_timezone": "UTC"})
    _instructor(cfg, "on-submit", A, "feedback")
    first = _status(cfg, S1)["job"]
    users[S1].action("submit", COURSE, A)
    st = _wait(cfg, S1, lambda s: s["job"] != first and _final(s))
    assert st["state"] == "graded" and st["summary"]["late"] and st["mode"] == "feedback", st
    assert all(n["points"] is None for n in st["summary"]["notebooks"])
    page = (deploy.home_of(S1) / FEEDBACK / f"{NB}.html").read_text()
    assert "points hidden" in page and "Score:" not in page
    assert "after the due date" in (deploy.home_of(S1) / FEEDBACK / "status.html").read_text()


def _a_restart_grades_each_queued_submission_once(course_hub, users, wrong: dict, timings: dict) -> None:
    """Three submissions queued, the hub restarted: each is graded once."""
    cfg, results = course_hub.cfg, course_hub.cfg.on_submit.results
    _instructor(cfg, "on-submit", A, "score")
    jobs_before = {n: _status(cfg, n)["job"] for n in (S1, S2, S3)}
    users[S2].put_notebook(f"{A}/{NB}.ipynb", wrong)
    for n in (S1, S2, S3):
        users[n].action("submit", COURSE, A)
    for n in (S1, S2, S3):
        _wait(cfg, n, lambda s: s["job"] != jobs_before[n], timeout=120)  # each is queued (or already graded)
    queue_db = cfg.state / QUEUE_FILE
    with sqlite3.connect(f"file:{queue_db}?mode=ro", uri=True) as db:
        states = dict(db.execute("SELECT student, state FROM jobs WHERE id > ?", (max(jobs_before.values()),)))
    timings["states_at_restart"] = states
    t0 = time.monotonic()
    course_hub.hub.stop()
    course_hub.hub = deploy.start(cfg, driver_token=course_hub.driver_token, die_with_parent=True)
    timings["hub_restart_s"] = round(time.monotonic() - t0, 1)
    finals = {n: _wait(cfg, n, lambda s: s["job"] != jobs_before[n] and _final(s)) for n in (S1, S2, S3)}
    timings["restart_to_all_graded_s"] = round(time.monotonic() - t0, 1)
    assert [finals[n]["state"] for n in (S1, S2, S3)] == ["graded"] * 3, finals
    with sqlite3.connect(f"file:{queue_db}?mode=ro", uri=True) as db:
        rows = list(db.execute("SELECT student, key, state FROM jobs WHERE id > ?", (max(jobs_before.values()),)))
    assert sorted(r[0] for r in rows if r[2] == "graded") == [S1, S2, S3], rows
    assert len({r[1] for r in rows}) == len(rows) == 3, f"a submission was queued twice: {rows}"
    for n in (S1, S2, S3):
        done = [p for p in (results / A / n).iterdir() if p.is_dir() and int(p.name) > max(jobs_before.values())]
        assert len(done) == 1, f"{n}: graded {len(done)} times after the restart"
