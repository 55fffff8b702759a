"""The on-submit queue (hub/on_submit/queue.py) and what a student reads, without a hub: fairness, a
newer submission replacing a queued one, the rate limit, restarts and crashes, the instructor's
switch, the status page escaping what a submission holds, and the service importing the grader before its
threads start. The queue on a real hub, with real accounts, is tested in test_on_submit.py (make test-hub)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hub import on_submit
from hub.on_submit import Queue

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def q(tmp_path):
    queue = Queue(tmp_path / "q.sqlite")
    yield queue
    queue.close()


def _add(q, student, n, assignment="lab11", now=0.0):
    return q.add(student, assignment, f"{student}+{assignment}+t{n}+r", f"{student}-{n}", f"t{n}", "score", now=now)[0]


def test_one_student_submitting_fifty_times_delays_no_one(q):
    """50 submissions of one student, then one each of two others: the latest of the 50 replaces the
    queued older ones, and the others are graded before that student's second grading."""
    ids = [_add(q, "mallory", i, now=float(i)) for i in range(50)]
    alice, bob = _add(q, "alice", 0, now=50.0), _add(q, "bob", 0, now=51.0)
    queued = [r["id"] for r in q.rows(state="queued")]
    assert queued == [ids[-1], alice, bob]
    assert len(q.rows(state="replaced")) == 49
    first = q.take(rate_per_hour=10, now=100.0)
    assert first["id"] == ids[-1]
    _add(q, "mallory", 50, now=101.0)  # mallory again, while their grading runs
    # a student with a grading under way waits; the others go first
    assert q.take(rate_per_hour=10, now=102.0)["id"] == alice
    assert q.take(rate_per_hour=10, now=103.0)["id"] == bob
    assert q.take(rate_per_hour=10, now=104.0) is None  # mallory's next waits for the running one
    q.finish(first["id"], "graded", now=105.0)
    assert q.take(rate_per_hour=10, now=106.0)["student"] == "mallory"


def test_the_student_served_longest_ago_goes_first(q):
    a1 = _add(q, "alice", 1, now=0.0)
    q.finish(q.take(10, now=1.0)["id"], "graded", now=2.0)
    _add(q, "alice", 2, now=3.0)          # alice was served at 1.0
    b = _add(q, "bob", 1, now=4.0)        # bob never: first, although queued later
    assert q.take(10, now=5.0)["id"] == b
    assert a1 != b


def test_the_rate_limit_holds_a_student_back_and_says_until_when(q):
    for i in range(3):
        _add(q, "alice", i, now=float(i))
        row = q.take(rate_per_hour=3, now=10.0 + i)
        q.finish(row["id"], "graded", now=10.5 + i)
    waiting = _add(q, "alice", 3, now=20.0)
    other = _add(q, "bob", 0, now=21.0)
    assert q.take(rate_per_hour=3, now=30.0)["id"] == other
    assert q.take(rate_per_hour=3, now=31.0) is None
    [(row, when)] = q.waiting_for_rate(3, now=32.0)
    assert row["id"] == waiting and when == 10.0 + 3600  # the oldest of the hour's three leaves the window
    assert q.take(rate_per_hour=3, now=10.0 + 3600.5)["id"] == waiting  # queued, never dropped


def test_a_restart_keeps_the_queue_and_grades_nothing_twice(tmp_path):
    path = tmp_path / "q.sqlite"
    q = Queue(path)
    ids = [_add(q, s, 0, now=float(i)) for i, s in enumerate(("a", "b", "c"))]
    running = q.take(10, now=5.0)
    q.add("d", "lab11", "d+lab11+t+r", "d-arriving", "", "score", state="arriving")  # cut off while copied
    q.close()
    q = Queue(path)  # the service starts again
    back = q.recover(now=6.0)
    assert [r["id"] for r in back] == [running["id"]]
    assert sorted(r["id"] for r in q.rows(state="queued")) == ids
    assert not q.rows(state="arriving") and not q.known("d-arriving")  # found again by the next scan
    assert q.known("a-0") and q.known("b-0") and q.known("c-0")       # never queued twice
    graded = []
    while (row := q.take(10, now=7.0 + len(graded))) is not None:
        graded.append(row["id"])
        q.finish(row["id"], "graded")
    assert sorted(graded) == ids
    q.close()


def test_a_grading_cut_short_twice_is_held(q):
    _add(q, "alice", 0)
    q.take(10, now=1.0)
    q.recover(now=2.0)                     # crash 1: graded again
    assert q.rows(state="queued")
    q.take(10, now=3.0)
    q.recover(now=4.0)                     # crash 2: held
    [row] = q.rows(state="held")
    assert row["attempts"] == 2 and "cut short 2 times" in row["message"]
    assert q.take(10, now=5.0) is None


def test_a_stop_of_the_service_is_not_counted_as_a_try(q):
    job = _add(q, "alice", 0)
    q.take(10, now=1.0)
    q.put_back(job)
    assert q.get(job)["state"] == "queued" and q.get(job)["attempts"] == 0


def test_the_instructors_switch_is_read_strictly(tmp_path):
    assert on_submit.read_modes(tmp_path) == {}
    on_submit.write_modes(tmp_path, {"lab11": "score", "hw4": "feedback"})
    assert on_submit.read_modes(tmp_path) == {"hw4": "feedback", "lab11": "score"}
    (tmp_path / "on_submit.json").write_text(json.dumps({"lab11": "loud"}))
    with pytest.raises(ValueError, match="loud"):
        on_submit.read_modes(tmp_path)
    (tmp_path / "on_submit.json").unlink()
    (tmp_path / "on_submit.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ValueError, match="not a small regular file"):
        on_submit.read_modes(tmp_path)


def _result(points, error=None):
    return {"report": {"timestamp": "2026-12-07 08:00:00 UTC", "notebooks": [{
        "notebook": "llm_as_policy", "status": "graded", "points": points, "max_points": 3.0, "late_penalty": 0,
        "needs_manual_review": False, "cells": [
            {"grade_id": "test_task1a_response_logprobs_values", "points": points, "max_points": 2.0,
             "error": error or "", "needs_manual_grade": False},
            {"grade_id": "test_task1a_response_logprobs_contract", "points": 1.0, "max_points": 1.0, "error": "",
             "needs_manual_grade": False},
            {"grade_id": "report_q1", "points": 0.0, "max_points": 2.0, "needs_manual_grade": True}]}]},
        "notes": []}


def test_the_status_page_says_the_score_per_task_and_concern_or_only_what_passes():
    hostile = "<script>alert(1)</script>"
    s = on_submit.summary_of(_result(0.0, error=f"AssertionError: {hostile}"), "score")
    status = {"assignment": "lab11", "state": "graded", "mode": "score", "submitted_at": "2026-12-07 08:00:00 UTC",
              "updated": "now", "message": "", "summary": s, "pages": ["llm_as_policy.html"]}
    page = on_submit.status_page(status)
    assert "Task 1a response_logprobs: values" in page and "Task 1a response_logprobs: types, shapes and inputs" in page
    assert "0 / 2" in page and "1 / 1" in page and "awaiting grading" in page
    assert hostile not in page and "&lt;script&gt;" in page
    assert "llm_as_policy.html" in page
    hidden = on_submit.summary_of(_result(0.0), "feedback")
    page = on_submit.status_page(dict(status, mode="feedback", summary=hidden))
    assert "failed" in page and "passed" in page and " / " not in page and "points" not in page.split("<table>")[1]
    assert all(t["points"] is None for n in hidden["notebooks"] for t in n["tests"])


def test_held_and_refused_say_no_more_than_that():
    held = on_submit.status_page({"assignment": "lab11", "state": "held", "mode": "score", "submitted_at": "x",
                                  "updated": "now", "message": "A person will look at it.", "pages": []})
    assert "held for review" in held and "<table>" not in held
    verdict = on_submit.Service.verdict({"report": {"notebooks": [{"notebook": "llm_as_policy", "status": "missing"}]},
                                         "handed_in": ["tasks.ipynb"], "notes": ["tasks.ipynb: not graded: it is lab21's"]})
    assert verdict[0] == "refused" and "llm_as_policy.ipynb" in verdict[1] and "tasks.ipynb" in verdict[1]
    held_report = {"report": {"needs_manual_review": True, "notebooks": []}}
    assert on_submit.Service.verdict(held_report) == ("held", "")


def test_the_switch_is_remembered_from_when_it_was_turned_on(q):
    """What was handed in before an assignment was switched on is left to the batch: the queue keeps
    when it was turned on across restarts, and forgets it when it is turned off."""
    assert q.switched_on({"lab11": "score", "hw4": "off"}, now=100.0) == {"lab11": 100.0}
    assert q.switched_on({"lab11": "feedback"}, now=200.0) == {"lab11": 100.0}  # still on: the same moment
    assert q.switched_on({}, now=300.0) == {}
    assert q.switched_on({"lab11": "score"}, now=400.0) == {"lab11": 400.0}


SERVE_ONCE = r'''
import sys, threading
from pathlib import Path
from hub.on_submit import Service, Settings
t = Path(sys.argv[1])
s = Settings(students=[], users_dir=t, course_dir=t, state=t, exchange=t, repo=t, env=t, cache=t, grader="nobody",
             instructor="nobody", dir=t, workers=2, rate_per_hour=10, poll_s=0.1)
loaded_at_start = []
start = threading.Thread.start
def noting(thread):
    loaded_at_start.append(all(m in sys.modules for m in ("autograder.collect.exchange",
                                                          "autograder.batch.gradebook_merge",
                                                          "autograder.export.feedback_pages")))
    start(thread)
threading.Thread.start = noting
service = Service(s, log=print)
service.stop()  # serve() starts its workers, which see the stop, and returns
service.serve()
print("LOADED", loaded_at_start)
'''


def test_the_service_loads_the_graders_modules_before_its_threads_start(tmp_path):
    """Its scan and its workers import the grader (and nbgrader) at their first use: two threads doing that at
    once can each meet the other's half-made module, so the service imports them before any thread starts."""
    proc = subprocess.run([sys.executable, "-c", SERVE_ONCE, str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED [True, True]" in proc.stdout, proc.stdout[-2000:]


def test_an_arrived_submission_replaces_the_older_queued_ones_at_once_and_a_failed_grading_is_retried(q):
    older = _add(q, "alice", 0, now=1.0)
    bob = _add(q, "bob", 0, now=2.0)
    arriving, replaced = q.add("alice", "lab11", "alice+lab11+t1+r", "alice-1", "", "score", now=3.0, state="arriving")
    assert replaced == [] and q.get(older)["state"] == "queued"  # still being copied: the older one stays
    assert q.ready(arriving, "t1", now=4.0) == [older]
    assert q.get(older)["state"] == "replaced" and q.get(bob)["state"] == "queued"
    assert q.get(arriving)["state"] == "queued" and q.get(arriving)["submitted_at"] == "t1"
    assert q.take(10, now=5.0)["id"] == bob  # queued before alice's new one
    assert q.take(10, now=6.0)["id"] == arriving and q.get(arriving)["attempts"] == 1
    q.requeue(arriving)  # its grading failed once: queued again, the try counted
    assert q.get(arriving)["state"] == "queued" and q.get(arriving)["attempts"] == 1
