"""The course's whole cycle on a running hub, with three students, as they and the instructor would do it.

release (formgrader) -> each student fetches (their server's assignment list) -> answers saved
through their server -> submit (s1 hands in the untouched release first and resubmits after the
first collect, s2 has a mistake, s3 never submits) -> collect (formgrader, twice) -> sandboxed
autograde (the batch grader, run by the instructor in the course folder) -> one written answer graded
by hand (formgrader) -> feedback generated and released (formgrader) -> each student fetches their own.

Students act only through the hub with their own tokens (their servers run as their OS accounts);
the instructor through the course service (the formgrader, running as the instructor) and a shell in
the course folder. What a student can read is checked as that student's OS account.
Each step's wall time goes to artifacts/hub/cycle-timings.json (with the load average).
"""

from __future__ import annotations

import html
import json
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from hub import deploy
from hub.tests.common import ARTIFACTS, INSTRUCTOR, REPO

A = "hw4"
NB = "llm_rl"
COURSE = deploy.COURSE_ID
S1, S2, S3 = "llmrl-t-s1", "llmrl-t-s2", "llmrl-t-s3"  # full marks (after a resubmission), a mistake, never submits
MISTAKE_TASK = "task6_normalize_advantages"
MISTAKE = '''def maybe_normalize_advantages(advantages, normalize, clip=5.0, eps=1e-6):
    """advantages: float [B]; returns float [B] (a new tensor)."""
    adv = advantages.clone()
    if clip is not None:
        adv = adv.clamp(-clip, clip)  # clipped before normalising: the visible tests still pass
    if normalize:
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
    return adv
'''
# The test cells that mistake fails: task 6's tests are split by concern and only its values cell
# checks the order (the other, its arguments and inputs, still passes: 23 of 24 code points).
MISTAKE_LOSES = ("test_task6_normalize_advantages_values",)
WRITTEN = "report_q1_kl_estimator"
WRITTEN_SCORE = 2.0


def _source() -> dict:
    return json.loads((REPO / "source" / A / f"{NB}.ipynb").read_text())


def _meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _text(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _solutions() -> dict[str, str]:
    out = {}
    for c in _source()["cells"]:
        if _meta(c).get("solution"):
            out[_meta(c)["grade_id"]] = "\n".join(
                l for l in _text(c).splitlines() if l.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    return out


def _points() -> dict[str, float]:
    return {_meta(c)["grade_id"]: float(_meta(c)["points"]) for c in _source()["cells"] if _meta(c).get("grade")}


def _hidden_lines() -> set[str]:
    """Lines of the hidden tests that the student's notebook never shows (the leak check's needles)."""
    hidden, visible = set(), set()
    for c in _source()["cells"]:
        inside = False
        for line in _text(c).splitlines():
            s = line.strip()
            if s == "### BEGIN HIDDEN TESTS":
                inside = True
            elif s == "### END HIDDEN TESTS":
                inside = False
            elif inside:
                if len(s) > 25 and not s.startswith("#"):
                    hidden.add(s)
            else:
                visible.add(s)
    # A hidden line that a visible line contains (`f(x)` hidden, `f(x).item()` shown) is no secret:
    # the page shows it as part of the visible one.
    return {h for h in hidden - visible if not any(h in v for v in visible)}


def fill(nb: dict, code: dict[str, str], written: dict[str, str]) -> dict:
    """The student's notebook with these answers typed into its solution cells."""
    nb = json.loads(json.dumps(nb))
    for c in nb["cells"]:
        gid = _meta(c).get("grade_id")
        if gid in code and c["cell_type"] == "code":
            c["source"] = code[gid]
        elif gid in written and c["cell_type"] == "markdown":
            c["source"] = written[gid]
    return nb


SNOOP = '''# a curious student: what can my code see while the instructor's grader runs it?
import os
for _p in {paths!r}:
    try:
        os.listdir(_p) if os.path.isdir(_p) else open(_p, "rb").read(1)
        print("SEEN", _p)
    except OSError as _e:
        print("hidden", _p, type(_e).__name__)
'''


def page_text(path: Path) -> str:
    """What a browser shows of an HTML page: tags removed (the code's highlighting splits every line)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def probe_as(cfg, user: str, checks: list[tuple[str, str]]) -> dict[str, str]:
    """Run each (operation, path) as the OS account `user`, as their server or terminal would (a student
    inside their limits and mount namespace, confine.py): "ok" or the error's name."""
    script = ("import json, os, sys\nout = {}\n"
              "for op, p in json.loads(sys.argv[1]):\n"
              "    try:\n"
              "        os.listdir(p) if op == 'list' else open(p, 'rb').read(1)\n"
              "        out[op + ' ' + p] = 'ok'\n"
              "    except OSError as e:\n"
              "        out[op + ' ' + p] = type(e).__name__\n"
              "print(json.dumps(out))\n")
    proc = deploy.run_as(user, [str(deploy.env_dir(cfg) / "bin" / "python"), "-c", script, json.dumps(checks)], cfg,
                         timeout=60, confined=user in cfg.students)
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def timings(course_hub):
    t = {"load_average_start": " ".join(f"{x:.2f}" for x in os.getloadavg()), "steps": {}}
    yield t
    t["load_average_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t["session"] = course_hub.timings
    (ARTIFACTS / "cycle-timings.json").write_text(json.dumps(t, indent=1))


@contextmanager
def step(timings: dict, name: str):
    t0 = time.monotonic()
    yield
    timings["steps"][name] = round(time.monotonic() - t0, 1)
    print(f"{name}: {timings['steps'][name]} s (load {os.getloadavg()[0]:.2f})", flush=True)


def test_course_cycle_three_students(course_hub, timings):
    cfg = course_hub.cfg
    course_dir = cfg.course_dir
    inbound = cfg.exchange / COURSE / "inbound"
    started = time.monotonic()

    with step(timings, "servers started (3 students, formgrader service)"):
        users, fg = course_hub.open_class((S1, S2, S3))
    _servers_are_the_students_own(course_hub, users, fg)

    with step(timings, "release"):
        fg.post(f"/assignment/{A}/release")
    outbound = cfg.exchange / COURSE / "outbound" / A
    assert (outbound / f"{NB}.ipynb").stat().st_uid == deploy.uid_of(INSTRUCTOR)

    with step(timings, "fetch (3 students)"):
        for u in users.values():
            listed = u.action("fetch", COURSE, A)
            assert [(x["assignment_id"], x["status"]) for x in listed if x["assignment_id"] == A] == [(A, "fetched")]
    for n, u in users.items():
        fetched = Path(deploy.home_of(n)) / A / f"{NB}.ipynb"
        assert fetched.stat().st_uid == deploy.uid_of(n), f"{n}'s copy is not theirs"
    release_nb = users[S1].get_notebook(f"{A}/{NB}.ipynb")
    assert release_nb["cells"] and not any("### BEGIN SOLUTION" in _text(c) for c in release_nb["cells"])

    snoop_paths = [str(course_dir / "gradebook.db"), str(course_dir / "submitted"),
                   str(course_dir / "source" / A / f"{NB}.ipynb"), str(inbound),
                   str(REPO / "source" / A / f"{NB}.ipynb"), str(deploy.home_of(S1))]
    code, written, mistaken = _answers(release_nb, snoop_paths)

    with step(timings, "answers saved and submitted (s1 untouched, s2 with a mistake)"):
        users[S1].put_notebook(f"{A}/{NB}.ipynb", release_nb)  # s1 hands in the release as it came
        users[S2].put_notebook(f"{A}/{NB}.ipynb", mistaken)
        for n in (S1, S2):
            listed = users[n].action("submit", COURSE, A)
            assert any(x["status"] == "submitted" for x in listed if x["assignment_id"] == A), listed

    with step(timings, "first collect"):
        fg.post(f"/assignment/{A}/collect")
    first_ts = (course_dir / "submitted" / S1 / A / "timestamp.txt").read_text()

    with step(timings, "s1 resubmits with every answer"):
        users[S1].put_notebook(f"{A}/{NB}.ipynb", fill(release_nb, code, written))
        time.sleep(1.1)  # nbgrader's submission timestamps are per second in the names
        listed = users[S1].action("submit", COURSE, A)
        subs = [x for x in listed if x["assignment_id"] == A and x["status"] == "submitted"]
        assert len(subs[0]["submissions"]) == 2, f"s1 should have two submissions: {subs}"

    with step(timings, "second collect (replaces s1's submission)"):
        fg.post(f"/assignment/{A}/collect")
    submitted = course_dir / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == [S1, S2], "s3 never submitted"
    second_ts = (submitted / S1 / A / "timestamp.txt").read_text()
    assert second_ts > first_ts, "the resubmission did not replace the first one"
    s1_collected = json.loads((submitted / S1 / A / f"{NB}.ipynb").read_text())
    assert "raise NotImplementedError" not in _text(next(c for c in s1_collected["cells"]
                                                         if _meta(c).get("grade_id") == "task1_per_token_logprobs"))

    _a_student_reads_nothing_of_the_others(cfg, second_ts)

    code_total = _autograde_in_the_sandbox(cfg, fg, timings, snoop_paths)

    with step(timings, "manual grade of one written answer"):
        nbs = {n["student"]: n for n in fg.get(f"/submitted_notebooks/{A}/{NB}")}
        grades = fg.get(f"/grades?submission_id={nbs[S1]['id']}")
        cell = next(g for g in grades if g["name"] == WRITTEN)
        assert cell["needs_manual_grade"] and cell["manual_score"] is None, cell
        fg.put(f"/grade/{cell['id']}", {"manual_score": WRITTEN_SCORE})
    subs = {s["student"]: s for s in fg.get(f"/submissions/{A}")}
    assert subs[S1]["score"] == code_total + WRITTEN_SCORE, subs[S1]
    assert subs[S1]["written_score"] == WRITTEN_SCORE

    with step(timings, "generate and release feedback"):
        fg.post(f"/assignment/{A}/generate_feedback")
        fg.post(f"/assignment/{A}/release_feedback")
    hidden = _hidden_lines()
    assert hidden, "no hidden test lines to look for"
    for n in (S1, S2):
        page = page_text(course_dir / "feedback" / n / A / f"{NB}.html")
        leaked = [h for h in hidden if h in page]
        assert not leaked, f"{n}'s feedback shows hidden tests: {leaked[:3]}"

    with step(timings, "fetch feedback (3 students)"):
        for u in users.values():
            u.action("fetch_feedback", COURSE, A)
    _each_student_gets_their_own_feedback(cfg, second_ts, _points())

    # The target is 5 minutes for the whole cycle; the time is reported, not asserted (a loaded
    # machine would make a timed test fail for reasons outside the course).
    timings["cycle_s"] = round(time.monotonic() - started, 1)
    timings["scores"] = {n: {k: subs[n][k] for k in ("score", "code_score", "written_score", "max_score")}
                         for n in (S1, S2)}


def _a_student_reads_nothing_of_the_others(cfg, second_ts: str) -> None:
    """What a student's account can read: not the inbound (their server sees only their own, write-only, so
    not s1's folder in it either), nor the course folder, nor another student's home or inbound, nor the
    repository's instructor files (the released feedback folder is checked once it exists)."""
    course_dir, submitted = cfg.course_dir, cfg.course_dir / "submitted"
    inbound = cfg.exchange / COURSE / "inbound"
    ts_name = f"{S1}+{A}+{second_ts}"
    checks = [("list", str(inbound)), ("read", str(inbound / ts_name / f"{NB}.ipynb")),
              ("list", str(course_dir)), ("read", str(submitted / S1 / A / f"{NB}.ipynb")),
              ("read", str(course_dir / "gradebook.db")), ("read", str(course_dir / "source" / A / f"{NB}.ipynb")),
              ("list", str(deploy.home_of(S1))), ("read", str(deploy.home_of(S1) / A / f"{NB}.ipynb")),
              ("read", str(REPO / "source" / A / f"{NB}.ipynb")), ("list", str(REPO / "autograder")),
              ("list", str(cfg.inbound_of(S1))), ("list", str(cfg.exchange / COURSE / "inbound")),
              ("read", str(deploy.home_of(S2) / A / f"{NB}.ipynb"))]
    for _, p in checks:
        assert Path(p).exists() or "+" in p, f"probe of a path that does not exist: {p}"
    seen = probe_as(cfg, S2, checks)
    own = f"read {deploy.home_of(S2) / A / f'{NB}.ipynb'}"
    assert seen.pop(own) == "ok", "the probe cannot even read the student's own notebook"
    guessed = f"read {inbound / ts_name / f'{NB}.ipynb'}"  # the real name ends in a random string
    assert seen.pop(guessed) == "FileNotFoundError", "a submission's folder can be found without its random name"
    assert set(seen.values()) == {"PermissionError"}, seen
    assert probe_as(cfg, INSTRUCTOR, [("read", str(course_dir / "gradebook.db"))]) == \
        {f"read {course_dir / 'gradebook.db'}": "ok"}


def _each_student_gets_their_own_feedback(cfg, second_ts: str, points: dict[str, float]) -> None:
    """The feedback each student fetched: s1's for the resubmission, s2's with their mistake, none for s3;
    each page the student's own, with the gradebook's score; s2 reads nothing of s1's."""
    feedback_out = cfg.exchange / COURSE / "feedback"
    code_total = sum(v for g, v in points.items() if not g.startswith("report_"))
    got = {}
    for n in (S1, S2, S3):
        folder = Path(deploy.home_of(n)) / A / "feedback"
        got[n] = sorted(folder.glob("*/*.html")) if folder.exists() else []
    assert got[S3] == [], "s3 never submitted and got feedback"
    assert [p.parent.name for p in got[S1]] == [second_ts], "s1's feedback is not for the resubmission"
    assert len(got[S2]) == 1
    for n in (S1, S2):
        assert got[n][0].stat().st_uid == deploy.uid_of(n)
    for n in (S1, S2):
        (ARTIFACTS / f"feedback-{n}.html").write_bytes(got[n][0].read_bytes())
    fb1, fb2 = (page_text(got[n][0]) for n in (S1, S2))
    # Each student's page is their own: s2's mistake (its assertion message) is only on s2's page, and
    # the score shown is the one the gradebook holds.
    # (the message as printed, with the tensor it got: the test cell's own source holds the text too)
    printed = re.compile(r"got tensor\(\[[-0-9., ]+\]\): normalise with the batch mean and std first")
    assert printed.search(fb2) and not printed.search(fb1)
    # The page's total: "Score so far: X / Y; Z more points awaiting grading" (written answers not
    # graded yet are pending, not 0), with Y + Z the notebook's points.
    def so_far(page):
        m = re.search(r"Score so far:\s*([0-9.]+)\s*/\s*([0-9.]+);\s*([0-9.]+) more points awaiting grading", page)
        assert m, re.findall(r"Score[^<]{0,60}", page)[:3]
        return float(m[1]), float(m[2]) + float(m[3])
    assert so_far(fb1) == (code_total + WRITTEN_SCORE, sum(points.values()))
    assert so_far(fb2) == (code_total - sum(points[g] for g in MISTAKE_LOSES), sum(points.values()))
    # s2 cannot read s1's feedback anywhere: not in s1's home, not by listing the exchange.
    assert feedback_out.is_dir()
    seen = probe_as(cfg, S2, [("read", str(got[S1][0])), ("list", str(feedback_out))])
    assert set(seen.values()) == {"PermissionError"}, seen


def _servers_are_the_students_own(course_hub, users: dict, fg) -> None:
    """Each server is a process of that student's OS account (the spawner's pid, read from /proc); only the
    instructor reaches the formgrader, a student no other student's server; nothing is released yet."""
    hubapi = course_hub.api()
    for n in users:
        pid = hubapi.user(n)["servers"][""]["state"]["pid"]
        assert Path(f"/proc/{pid}").stat().st_uid == deploy.uid_of(n), f"{n}'s server does not run as {n}"

    assert users[S2].status_of("GET", f"/services/{COURSE}/formgrader/api/assignments") == 403
    assert users[S2].status_of("GET", f"/user/{S1}/api/contents") in (403, 404)
    assert users[S2].status_of("GET", f"/hub/api/users/{S1}") in (403, 404)
    assert [a["name"] for a in fg.get("/assignments")] == ["hw4", "lab11"]
    assert users[S1].assignments(COURSE) == [], "something is released before the instructor released it"


def _answers(release_nb: dict, snoop_paths: list[str]) -> tuple[dict, dict, dict]:
    """(code answers, written answers, s2's notebook: the answers with the mistake and a cell that looks
    for snoop_paths while it is graded)."""
    solutions = _solutions()
    code = {g: s for g, s in solutions.items() if not g.startswith("report_")}
    written = {g: f"My answer to {g}: the estimator's mean is the KL (a student's words)." for g in solutions
               if g.startswith("report_")}
    mistaken = fill(release_nb, dict(code, **{MISTAKE_TASK: MISTAKE}), written)
    mistaken["cells"].append({"cell_type": "code", "metadata": {}, "source": SNOOP.format(paths=snoop_paths),
                              "outputs": [], "execution_count": None})
    return code, written, mistaken


def _autograde_in_the_sandbox(cfg, fg, timings: dict, snoop_paths: list[str]) -> float:
    """The instructor's batch (sandboxed) grades both submissions: the scores the formgrader shows, and the
    snooping cell saw none of the course's or the exchange's files. Returns the code points of the notebook."""
    course_dir = cfg.course_dir
    with step(timings, "autograde (batch grader, sandboxed, 2 submissions)"):
        python = str(deploy.env_dir(cfg) / "bin" / "python")
        sandbox = deploy.run_as(INSTRUCTOR, [python, "-c", "from autograder.sandbox import bubblewrap; print(bubblewrap.bwrap_status())"], cfg,
                                cwd=course_dir).stdout.strip()
        assert sandbox == "ok", f"the grading sandbox does not work for the instructor: {sandbox}"
        proc = deploy.run_as(INSTRUCTOR, [python, "course_tool.py", "autograde", A, "--workers", "2"], cfg,
                             cwd=course_dir, timeout=600, check=False)
    (ARTIFACTS / "autograde.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "graded 2 of 2 submissions" in proc.stdout, proc.stdout
    assert "WITHOUT a sandbox" not in proc.stderr + proc.stdout

    points = _points()
    code_total = sum(v for g, v in points.items() if not g.startswith("report_"))
    subs = {s["student"]: s for s in fg.get(f"/submissions/{A}")}
    assert subs[S1]["code_score"] == code_total, subs[S1]
    assert subs[S2]["code_score"] == code_total - sum(points[g] for g in MISTAKE_LOSES), subs[S2]
    assert subs[S1]["autograded"] and subs[S2]["autograded"], "the formgrader does not count them as autograded"
    assert S3 not in subs and fg.get(f"/submission/{A}/{S3}")["submitted"] is False
    assert {s["id"] for s in fg.get("/students")} >= {S1, S2, S3}

    assert all(Path(p).exists() for p in snoop_paths), "the snooping cell must look for things that exist"
    graded = json.loads((course_dir / "autograded" / S2 / A / f"{NB}.ipynb").read_text())
    snoop_out = "".join("".join(o.get("text", "")) for c in graded["cells"] if "a curious student" in _text(c)
                        for o in c.get("outputs", []))
    assert snoop_out.count("hidden") == len(snoop_paths) and "SEEN" not in snoop_out, snoop_out
    return code_total
