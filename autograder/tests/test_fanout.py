"""The batch past one machine (autograder/batch/fanout.py) on Dask's own local mode: a
distributed.LocalCluster of two worker processes grading the tiny course's class in shards.

The merged gradebook must hold every submission once, with the same scores, tables and pages as the
batch on one machine gives; a second run reuses every record and changes nothing. A worker killed
(SIGKILL) while it grades its shard costs no student and doubles none: the shard is sent again, the
run says so, and the gradebook ends as if nothing had happened.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from autograder.batch import fanout, gradebook_merge, run as batch_run
from autograder.course.layout import ROOT
from autograder.tests import tiny

pytestmark = pytest.mark.slow
CLASS = {"ana": tiny.RIGHT, "ben": tiny.WRONG, "cy": None, "dee": tiny.RIGHT}  # None: the stub, handed in as it was
POINTS = {"ana": tiny.POINTS, "ben": 0.0, "cy": 0.0, "dee": tiny.POINTS}


@pytest.fixture(scope="module")
def class_course(tmp_path_factory):
    root = tmp_path_factory.mktemp("fanout") / "course"
    tiny.make_course(root)
    for student, answer in CLASS.items():
        tiny.submit(root, student, tiny.submission(root, answer))
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _table(root: Path) -> list[dict]:
    with open(root / "batch_grades.csv", newline="") as f:
        return list(csv.DictReader(f))


def _scores(root: Path) -> dict[str, float]:
    """student -> the points of their one submission in gradebook.db (each student exactly once)."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        subs = [(s.student_id, s.score) for s in gb.find_assignment(tiny.ASSIGNMENT).submissions]
    assert len(subs) == len({s for s, _ in subs}), f"a student is in the gradebook twice: {subs}"
    return dict(subs)


def _same_row(row: dict) -> tuple:
    return tuple(row[k] for k in ("student", "assignment", "notebook", "points", "max_points", "status", "reason",
                                  "late_penalty", "sandbox"))


def test_a_class_graded_in_shards_on_a_local_cluster_is_the_batch_on_one_machine(class_course, tmp_path):
    one = _copy(class_course, tmp_path / "one")
    local = batch_run.run_batch([tiny.ASSIGNMENT], one, progress=False, csv_path=one / "batch_grades.csv", workers=2)
    assert all(r.report is not None for r in local["results"])

    spread = _copy(class_course, tmp_path / "spread")
    cmd = [str(ROOT / "autograder" / "bin" / "batch"), tiny.ASSIGNMENT, "--root", str(spread), "--no-progress",
           "--dask", "local:2", "--workers", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "2 shards on 2 Dask workers" in proc.stdout, proc.stdout

    assert _scores(spread) == _scores(one) == POINTS
    assert gradebook_merge.snapshot(spread) == gradebook_merge.snapshot(one)  # every cell's automatic and manual score
    rows = _table(spread)
    assert sorted(r["student"] for r in rows) == sorted(CLASS), "one row per submission, none twice, none missing"
    assert sorted(map(_same_row, rows)) == sorted(map(_same_row, _table(one)))
    for student in CLASS:
        for kind, name in (("autograded", "tiny.ipynb"), ("feedback", "tiny.html")):
            assert (spread / kind / student / tiny.ASSIGNMENT / name).is_file(), (kind, student)
    with open(spread / "grades.csv", newline="") as f:
        assert sorted(r["student_id"] for r in csv.DictReader(f)) == sorted(CLASS)

    # run again: every record is reused, nothing is graded twice, the gradebook does not change
    before = gradebook_merge.snapshot(spread)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"reused {len(CLASS)} results" in again.stdout and "0 shards" in again.stdout, again.stdout
    assert gradebook_merge.snapshot(spread) == before
    assert sorted(r["student"] for r in _table(spread)) == sorted(CLASS)


def _batch_folders(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"llmrl-batch-{pid}-*"))


def test_a_worker_killed_mid_shard_is_resent_and_nothing_is_doubled(class_course, tmp_path):
    import dask
    from distributed import Client, LocalCluster

    root = _copy(class_course, tmp_path / "course")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=0,
                               dashboard_address=None)
    client = Client(cluster)
    outcome: dict = {}

    def drive():
        try:
            outcome["batch"] = fanout.grade_on_cluster(client, [tiny.ASSIGNMENT], root, shards=2, graders=1,
                                                       csv_path=root / "batch_grades.csv", progress=False)
        except BaseException as e:  # reported below
            outcome["error"] = e

    driver = threading.Thread(target=drive)
    try:
        driver.start()
        victim = None
        deadline = time.monotonic() + 600
        while victim is None and time.monotonic() < deadline and driver.is_alive():
            busy = {w: keys for w, keys in client.processing().items() if any("llmrl-shard-" in str(k) for k in keys)}
            pids = client.run(os.getpid, workers=list(busy)) if busy else {}
            # mid-shard: the worker's batch has begun (its scratch folder is there) and the shard is not done
            victim = next((pid for pid in pids.values() if _batch_folders(pid)), None)
            if victim is None:
                time.sleep(0.5)
        assert victim is not None, f"no worker started grading a shard: {outcome}"
        os.kill(victim, signal.SIGKILL)
        driver.join(timeout=1200)
        assert not driver.is_alive(), "the batch did not finish after the worker was killed"
    finally:
        client.close()
        cluster.close()
    assert "error" not in outcome, repr(outcome.get("error"))
    done = outcome["batch"]
    notes = "\n".join(done["notes"])
    assert "attempt 1 was lost" in notes and "sent again (attempt 2 of 3)" in notes, notes
    assert sorted(s["attempts"] for s in done["shards"]) == [1, 2], done["shards"]
    lost = next(s for s in done["shards"] if s["attempts"] == 2)
    assert len(lost["lost"]) == 1 and len(lost["hosts"]) == 1, lost  # one attempt lost, one merged
    keys = [(r.job.assignment, r.job.student) for r in done["results"]]
    assert sorted(keys) == sorted((tiny.ASSIGNMENT, s) for s in CLASS), "every submission once"
    assert all(r.report is not None for r in done["results"]), [r.error for r in done["results"]]
    assert _scores(root) == POINTS
    rows = _table(root)
    assert sorted(r["student"] for r in rows) == sorted(CLASS) and {r["status"] for r in rows} == {"graded"}, rows
    assert "lost" in batch_run.summary(done)
