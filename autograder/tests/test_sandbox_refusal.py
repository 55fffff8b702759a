"""Grading refuses a machine without the sandbox unless told --no-sandbox, and says so when told.

bubblewrap is hidden from the grader by a PATH that holds no `bwrap` (it stays installed): the batch
(python -m autograder.cli.batch, as autograder/bin/batch runs it), `python -m autograder autograde`
and `python -m autograder sandbox` (make demo's first step) stop before anything is graded, with an
error naming what is missing and how to install it. With --no-sandbox the same machine grades, and
the feedback page, the batch table, the autograded notebook and a page made again later by
`make feedback` all say the grade was made without the sandbox. A sandboxed grade says nothing of
the kind, even when the student wrote the mark into their own notebook.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.batch import gradebook_merge
from autograder.course.layout import ROOT, course_labs
from autograder.export.release_feedback import feedback
from autograder.tests import tiny

NOTICE = "Graded without the grading sandbox."
NO_BWRAP = "/nonexistent-llmrl-bin"  # a PATH with no bwrap on it


def _env(path: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LLMRL_SANDBOX", "LLMRL_GRADED_WITHOUT_SANDBOX")}
    env["PYTHONPATH"] = str(ROOT)
    if path is not None:
        env["PATH"] = path
    return env


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=900)


def _table(root: Path) -> dict[str, dict]:
    with open(root / "batch_grades.csv", newline="") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


@pytest.fixture
def fresh(tmp_path):
    root = tmp_path / "course"
    tiny.make_course(root)
    tiny.submit(root, "ana", tiny.submission(root, tiny.RIGHT))
    return root


def _says_how(err: str) -> None:
    assert "bubblewrap (the bwrap command) is not installed" in err, err
    assert "apt install bubblewrap" in err and "--no-sandbox" in err and "NO_SANDBOX=1" in err, err
    assert "Nothing was graded" in err, err


def test_without_bubblewrap_every_way_into_grading_refuses_and_grades_nothing(fresh):
    env = _env(NO_BWRAP)
    batch = _run(["autograder.cli.batch", "tiny", "--root", str(fresh), "--no-progress"], env)
    assert batch.returncode == 1, batch.stdout + batch.stderr
    _says_how(batch.stderr)
    autograde = _run(["autograder", "autograde", "--course", str(fresh)], env)
    assert autograde.returncode == 1, autograde.stdout + autograde.stderr
    _says_how(autograde.stderr)
    check = _run(["autograder", "sandbox"], env)  # make demo's first step, before it builds anything
    assert check.returncode == 1
    _says_how(check.stderr)
    one = _run(["autograder.cli.grade", "tiny", str(fresh / "submitted" / "ana" / "tiny" / "tiny.ipynb"),
                "--root", str(fresh)], env)
    assert one.returncode == 1 and "grading refused" in one.stderr, one.stderr
    # nothing was graded: no grade row, no autograded notebook, no feedback page, no table
    assert gradebook_merge.snapshot(fresh) == {}
    assert not (fresh / "autograded").exists() and not (fresh / "feedback").exists()
    assert not (fresh / "batch_grades.csv").exists()
    # LLMRL_SANDBOX=0 in the environment is not the flag either
    off = _run(["autograder", "sandbox"], dict(_env(), LLMRL_SANDBOX="0"))
    assert off.returncode == 1 and "LLMRL_SANDBOX=0 is set" in off.stderr and "--no-sandbox" in off.stderr


def test_the_make_targets_pass_no_sandbox_only_when_asked():
    def commands(target: str, *extra: str) -> list[str]:
        out = subprocess.run(["make", "-n", "--no-print-directory", target, *extra], capture_output=True, text=True,
                             cwd=ROOT, check=True).stdout
        return [line.strip() for line in out.splitlines() if "-m autograder" in line]

    demo = commands("demo")
    assert demo[0].endswith("-m autograder sandbox"), demo  # before build and execute
    assert not any("--no-sandbox" in c for c in demo)
    demo = commands("demo", "NO_SANDBOX=1")
    assert demo[0].endswith("-m autograder sandbox --no-sandbox") and demo[-1].endswith("--no-sandbox"), demo
    for target in ("autograde", "grade-all", "grade-cluster"):
        assert not any("--no-sandbox" in c for c in commands(target, "NO_SANDBOX=0")), target
        assert commands(target, "NO_SANDBOX=1")[-1].endswith("--no-sandbox"), target


def test_no_sandbox_grades_and_every_page_and_table_says_so(fresh):
    tiny.submit(fresh, "ben", tiny.submission(fresh, tiny.WRONG))
    proc = _run(["autograder.cli.batch", "tiny", "--root", str(fresh), "--no-progress", "--no-sandbox"], _env(NO_BWRAP))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WITHOUT THE SANDBOX: 2 of 2 submissions" in proc.stdout, proc.stdout
    rows = _table(fresh)
    assert (rows["ana"]["points"], rows["ben"]["points"]) == ("2.0", "0.0")
    for student in ("ana", "ben"):
        assert rows[student]["sandbox"].startswith("none: the instructor graded with --no-sandbox; here: bwrap not "
                                                   "found"), rows[student]
        page = (fresh / "feedback" / student / "tiny" / "tiny.html").read_text()
        assert NOTICE in page and 'id="graded-without-sandbox"' in page
        assert page.index(NOTICE) < page.index("Score:"), "the notice comes before the score"
        nb = json.loads((fresh / "autograded" / student / "tiny" / "tiny.ipynb").read_text())
        assert nb["metadata"]["llmrl"]["graded_without_sandbox"].startswith("the instructor graded with --no-sandbox")
    # a page made again from the gradebook (make feedback, another process, no grading environment) says it too
    (fresh / "feedback" / "ana" / "tiny" / "tiny.html").unlink()
    done = feedback(course_labs(fresh, ["tiny"]), root=fresh)
    assert "ana/tiny/tiny" in done["released"]
    assert NOTICE in (fresh / "feedback" / "ana" / "tiny" / "tiny.html").read_text()


def test_a_sandboxed_grade_has_no_notice_even_when_the_student_wrote_the_mark(fresh):
    nb = tiny.submission(fresh, tiny.RIGHT)
    nb.metadata["llmrl"] = {"graded_without_sandbox": "forged by the student"}
    tiny.submit(fresh, "ana", nb)
    proc = _run(["autograder.cli.batch", "tiny", "--root", str(fresh), "--no-progress"], _env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WITHOUT THE SANDBOX" not in proc.stdout
    assert _table(fresh)["ana"]["sandbox"] == "bubblewrap"
    page = (fresh / "feedback" / "ana" / "tiny" / "tiny.html").read_text()
    assert NOTICE not in page and "forged by the student" not in page
    graded = json.loads((fresh / "autograded" / "ana" / "tiny" / "tiny.ipynb").read_text())
    assert "graded_without_sandbox" not in json.dumps(graded["metadata"]), graded["metadata"]
    (fresh / "feedback" / "ana" / "tiny" / "tiny.html").unlink()
    feedback(course_labs(fresh, ["tiny"]), root=fresh)
    assert NOTICE not in (fresh / "feedback" / "ana" / "tiny" / "tiny.html").read_text()
