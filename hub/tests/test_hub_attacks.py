"""A hostile class on the hub: the evasion classes 2-4 of docs/grading-safety.md, each tried two ways or more by students acting
only as students can (their own OS account, inside their server's limits: what a terminal or a kernel of
theirs runs is run here through confine.py, as the spawner runs their server), against the instructor's
own steps (the formgrader's Collect, `course_tool.py autograde`). Class 1 (the formgrader running a
student's script) is in test_hub_browser.py: it needs the instructor's browser.

The victims are s1 and s2, graded on hw4 by the course cycle (test_course_cycle.py runs first; each test
here also stands alone). The attackers are s3 (never handed hw4 in) and s4. Every test ends by checking
that no file, submission, grade or feedback of the victims and no file of the course changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hub import confine, deploy
from hub import limits as L
from hub.layout import student_folders
from hub.tests.common import ARTIFACTS, INSTRUCTOR, TEST_LIMITS
from hub.tests.hubclient import Formgrader
from hub.tests.test_course_cycle import COURSE, S1, S2, S3

A, NB = "hw4", "llm_rl"
S4 = "llmrl-t-s4"
VICTIMS = (S1, S2)


def tree(root: Path) -> dict:
    """Every entry beneath root (links not followed): type, mode, owner and, for files, a hash."""
    out = {}
    if not os.path.lexists(root):
        return out
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # Python's own caches, written by whoever imports
        for n in [""] + dirs + names:
            p = Path(top) / n
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                digest = h.hexdigest()
            out[str(p)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, digest)
    return out


def snapshot(cfg, fg: Formgrader) -> dict:
    """What no attack may change: the victims' homes, inbounds, submissions, graded notebooks, feedback and
    grades, and the course's own files (sources, grader, release)."""
    course = cfg.course_dir
    roots = [course / d for d in ("source", "autograder", "release")] + [course / "course_tool.py",
                                                                           course / "nbgrader_config.py"]
    for v in VICTIMS:
        roots += [deploy.home_of(v), cfg.inbound_of(v)] + [course / d / v for d in ("submitted", "autograded",
                                                                                      "feedback")]
    files = {}
    for r in roots:
        files.update(tree(r))
    grades = {s["student"]: {k: s.get(k) for k in ("score", "code_score", "written_score", "max_score", "autograded")}
              for s in fg.get(f"/submissions/{A}") if s["student"] in VICTIMS}
    return {"files": files, "grades": grades}


def unchanged(before: dict, after: dict) -> None:
    changed = sorted(k for k in set(before["files"]) | set(after["files"])
                     if before["files"].get(k) != after["files"].get(k))
    assert not changed, f"the attack changed {len(changed)} file(s) of the victims or the course: {changed[:10]}"
    assert before["grades"] == after["grades"], f"grades changed: {before['grades']} -> {after['grades']}"


def as_student(cfg, user: str, script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Python code run as the student, inside their limits: what a terminal of their server can do."""
    python = str(deploy.env_dir(cfg) / "bin" / "python")
    return deploy.run_as(user, [python, "-c", textwrap.dedent(script), *args], cfg, timeout=timeout, check=False,
                         confined=True)


@pytest.fixture(scope="module")
def klass(course_hub):
    """The students' servers and the formgrader, hw4 released; yields (cfg, users, fg, hubapi)."""
    cfg, hubapi = course_hub.cfg, course_hub.api()
    users, fg = course_hub.open_class((S1, S2, S3, S4), A)
    yield cfg, users, fg, hubapi
    (ARTIFACTS / "attacks-set-aside.json").write_text(
        (cfg.course_dir / "collected" / f"{A}.set_aside.json").read_text()
        if (cfg.course_dir / "collected" / f"{A}.set_aside.json").exists() else "[]")


def collect(fg: Formgrader) -> str:
    """The formgrader's Collect button (its API call); the log it shows the instructor."""
    r = fg.post(f"/assignment/{A}/collect")
    return r.get("log", "")


def set_aside(cfg) -> dict[str, str]:
    path = cfg.course_dir / "collected" / f"{A}.set_aside.json"
    return {a["folder"]: a["why"] for a in json.loads(path.read_text())} if path.exists() else {}


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime())


# ----------------------------------------------------------------------------- class 2: collect follows links

PLANT_LINKS = '''
import os, sys
inbound, name, source, course, notebook = sys.argv[1:6]
folder = os.path.join(inbound, name)
os.mkdir(folder)
os.symlink(source, os.path.join(folder, os.path.basename(notebook)))   # "my notebook": the solutions
os.symlink(course, os.path.join(folder, "course"))                      # the instructor's course folder
os.mkfifo(os.path.join(folder, "data.fifo"))                             # a collect that reads it hangs
with open(os.path.join(folder, "weights.bin"), "wb") as f:               # 120 MB apparent, nothing written
    f.truncate(120_000_000)
with open(notebook, "rb") as src, open(os.path.join(folder, "mine.ipynb"), "wb") as dst:
    dst.write(src.read())
with open(os.path.join(folder, "timestamp.txt"), "w") as f:
    f.write(sys.argv[6])
os.chmod(folder, 0o755)
print("planted", folder)
'''


def test_collect_copies_only_the_students_own_regular_files(klass):
    """s3 hands in (from a terminal, straight into the inbound) a folder whose notebook is a link to the
    course's source notebook, with a link to the instructor's course folder, a FIFO and a sparse file of
    120 MB (more than nbgrader's 100 MB a file, a few kB on the disk). The Collect button copies their
    own regular file and names every other entry; nothing of the course reaches submitted/."""
    cfg, users, fg, _ = klass
    before = snapshot(cfg, fg)
    source = cfg.course_dir / "source" / A / f"{NB}.ipynb"
    name = f"{S3}+{A}+{stamp()}+{os.urandom(16).hex()}"
    proc = as_student(cfg, S3, PLANT_LINKS, str(cfg.exchange / COURSE / "inbound"), name, str(source),
                      str(cfg.course_dir), str(deploy.home_of(S3) / A / f"{NB}.ipynb"), stamp())
    assert proc.returncode == 0 and "planted" in proc.stdout, proc.stderr
    assert (cfg.inbound_of(S3) / name / f"{NB}.ipynb").is_symlink()

    t0 = time.monotonic()
    log = collect(fg)
    assert time.monotonic() - t0 < 120, "the collection hung (on the FIFO?)"
    got = cfg.course_dir / "submitted" / S3 / A
    assert sorted(p.name for p in got.iterdir()) == ["mine.ipynb", "timestamp.txt"], sorted(got.iterdir())
    assert not any(p.is_symlink() for p in got.rglob("*"))
    secret = source.read_bytes()
    assert all(p.read_bytes() != secret for p in got.rglob("*") if p.is_file())
    record = json.loads((cfg.course_dir / "collected" / f"{A}.json").read_text())[S3]
    reasons = {r.split(":", 1)[0]: r for r in record["refused"]}
    assert set(reasons) == {f"{NB}.ipynb", "course", "data.fifo", "weights.bin"}, record["refused"]
    assert str(source) in reasons[f"{NB}.ipynb"] and "symbolic link" in reasons[f"{NB}.ipynb"]
    assert "named pipe" in reasons["data.fifo"] and "120000000 bytes" in reasons["weights.bin"]
    for n in reasons:
        assert n in log, f"the instructor's collect log does not name {n}"
    unchanged(before, snapshot(cfg, fg))


def test_a_hard_link_to_another_accounts_file_cannot_be_made_or_collected(klass):
    """The kernel refuses a student a hard link to a file they do not own (fs.protected_hardlinks, on
    here); the collection refuses any file that is not the student's (test_collect.py, as root)."""
    cfg, users, fg, _ = klass
    victim = deploy.home_of(S1) / A / f"{NB}.ipynb"
    source = cfg.course_dir / "source" / A / f"{NB}.ipynb"
    proc = as_student(cfg, S3, '''
        import os, sys
        for target in sys.argv[1:3]:
            try:
                os.link(target, os.path.join(os.path.expanduser("~"), "stolen"))
                print("LINKED", target)
            except OSError as e:
                print("refused", type(e).__name__, target)
    ''', str(victim), str(source))
    assert "LINKED" not in proc.stdout and proc.stdout.count("refused") == 2, proc.stdout + proc.stderr
    assert Path("/proc/sys/fs/protected_hardlinks").read_text().strip() == "1"


# ----------------------------------------------------------------------------- class 3: as someone else

PLANT_NAMED = '''
import os, shutil, sys
inbound, notebook = sys.argv[1:3]
for name in sys.argv[3:]:
    folder = os.path.join(inbound, name)
    os.mkdir(folder)
    shutil.copyfile(notebook, os.path.join(folder, os.path.basename(notebook)))
    with open(os.path.join(folder, "timestamp.txt"), "w") as f:
        f.write(name.split("+")[2])
print("planted")
'''


def test_a_folder_in_another_students_name_counts_for_no_one(klass):
    """s3 hands in, in their own inbound, a folder in s1's name (s1 submitted and was graded: named a day
    later, it would be s1's newest for nbgrader) and one in s4's (who never handed hw4 in: a friend who
    did no work). Neither counts for anyone: both are set aside and named; s1's submission and grade stay
    theirs; s4 has no submission."""
    cfg, users, fg, _ = klass
    before = snapshot(cfg, fg)
    later = time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime(time.time() + 86400))
    for_s1 = f"{S1}+{A}+{later}+{os.urandom(16).hex()}"
    for_s4 = f"{S4}+{A}+{stamp()}+{os.urandom(16).hex()}"
    proc = as_student(cfg, S3, PLANT_NAMED, str(cfg.exchange / COURSE / "inbound"),
                      str(deploy.home_of(S3) / A / f"{NB}.ipynb"), for_s1, for_s4)
    assert "planted" in proc.stdout, proc.stderr
    log = collect(fg)
    aside = set_aside(cfg)
    assert f"names {S1} but was handed in through {S3}'s own inbound" in aside[for_s1], aside
    assert f"names {S4} but was handed in through {S3}'s own inbound" in aside[for_s4], aside
    assert repr(for_s1) in log and repr(for_s4) in log
    assert not (cfg.course_dir / "submitted" / S4 / A).exists(), "s4 got a submission they never made"
    unchanged(before, snapshot(cfg, fg))


def test_a_student_cannot_write_into_another_students_inbound_or_the_shared_one(klass):
    """The exchange's shared inbound is the instructor's alone; each student's own is theirs (group) and
    the instructor's; s3 can reach neither s1's nor the shared one, from their server or outside it."""
    cfg, users, fg, _ = klass
    targets = [cfg.inbound_of(S1), cfg.exchange / COURSE / "inbound"]
    for confined in (True, False):
        python = str(deploy.env_dir(cfg) / "bin" / "python")
        script = ("import os, sys\nfor t in sys.argv[1:]:\n    try:\n"
                  "        os.mkdir(os.path.join(t, f'{os.environ[\"USER\"]}+hw4+x+y'))\n        print('WROTE', t)\n"
                  "    except OSError as e:\n        print('refused', type(e).__name__, t)\n")
        proc = deploy.run_as(S3, [python, "-c", script, *map(str, targets[:1 if confined else 2])], cfg,
                             check=False, confined=confined)
        assert "WROTE" not in proc.stdout and "refused PermissionError" in proc.stdout, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- class 4: one student stops the class

PLANT_BROKEN = '''
import os, sys
inbound, notebook, when = sys.argv[1:4]
me = os.environ["USER"]
bad = {
    "nbgrader chokes on the time": f"{me}+hw4+not a time+{os.urandom(4).hex()}",
    "too few parts": f"{me}+hw4",
    "not a student id": f"--evil+hw4+{when}+x",
    "a file": f"{me}+hw4+{when}+file",
    "a link": f"{me}+hw4+2099-01-01 00:00:00.000000 UTC+link",
    "unreadable": f"{me}+hw4+2099-01-02 00:00:00.000000 UTC+locked",
}
for why, name in bad.items():
    p = os.path.join(inbound, name)
    if why == "a file":
        open(p, "w").write("x")
    elif why == "a link":
        os.symlink("/etc", p)
    else:
        os.mkdir(p)
        open(os.path.join(p, os.path.basename(notebook)), "wb").write(open(notebook, "rb").read())
        if why == "unreadable":
            os.chmod(p, 0)
print("planted", len(bad))
'''


def test_one_students_broken_folders_never_stop_the_collection(klass):
    """s4 fills their inbound with what stopped nbgrader's collect for the whole class: a name whose time
    does not parse, a name of two parts, a file and a link where folders belong, and a folder the
    instructor cannot read (mode 000). The collection still collects the class (s1, s2 and s3 keep
    their submissions), sets each of s4's entries aside with its reason and says so."""
    cfg, users, fg, _ = klass
    before = snapshot(cfg, fg)
    proc = as_student(cfg, S4, PLANT_BROKEN, str(cfg.exchange / COURSE / "inbound"),
                      str(deploy.home_of(S4) / A / f"{NB}.ipynb"), stamp())
    assert "planted 6" in proc.stdout, proc.stderr
    r = fg.post(f"/assignment/{A}/collect")
    assert r["success"], r
    aside = set_aside(cfg)
    in_s4s = set(os.listdir(cfg.inbound_of(S4)))
    mine = {k: v for k, v in aside.items() if k in in_s4s}
    assert len(mine) == 5, aside  # the sixth, "too few parts", names no assignment: not this collection's
    assert any("is not a time" in w for w in mine.values()) and any("not a folder" in w for w in mine.values())
    assert any("not a student id" in w for w in mine.values())
    locked = next(k for k in os.listdir(cfg.inbound_of(S4)) if k.endswith("+locked"))
    assert f"set aside {locked!r}: cannot be read" in r["log"], r["log"][-3000:]
    assert (cfg.course_dir / "submitted" / S3 / A).is_dir(), "s3's submission was not collected"
    unchanged(before, snapshot(cfg, fg))


def test_the_course_folder_in_the_exchange_is_the_instructors_from_the_start(klass, tmp_path):
    """A student who made the course's folder in the exchange before the first release made every release
    fail. It exists, owned by the instructor, from setup on; a student can neither replace it nor put
    anything in it; a setup that finds one a student made first moves it aside and makes its own."""
    cfg, users, fg, _ = klass
    course = cfg.exchange / COURSE
    inst = deploy.uid_of(INSTRUCTOR)
    for p in (course, course / "outbound", course / "inbound", course / "feedback"):
        assert p.is_dir() and not p.is_symlink() and p.stat().st_uid == inst, p
    proc = as_student(cfg, S3, '''
        import os, shutil, sys
        course = sys.argv[1]
        tries = {"mkdir course": lambda: os.mkdir(course),
                 "rename course": lambda: os.rename(course, course + ".mine"),
                 "rmtree course": lambda: shutil.rmtree(course),
                 "release in outbound": lambda: os.mkdir(os.path.join(course, "outbound", "hw5")),
                 "feedback": lambda: open(os.path.join(course, "feedback", "x.html"), "w"),
                 "symlink beside": lambda: os.symlink("/tmp", course + "2")}
        for what, f in tries.items():
            try:
                f()
                print("DID", what)
            except OSError as e:
                print("refused", what, type(e).__name__)
    ''', str(course))
    did = [line for line in proc.stdout.splitlines() if line.startswith("DID")]
    assert did in ([], ["DID symlink beside"]), proc.stdout + proc.stderr  # another name: not the course's
    assert course.stat().st_uid == inst
    # a student's folder in the course's place before setup: set aside, never used
    scratch = deploy.HubConfig(dir=tmp_path / "hub", instructor=INSTRUCTOR, students=[S3], port=cfg.port)
    (scratch.exchange / COURSE).mkdir(parents=True)
    os.chown(scratch.exchange / COURSE, deploy.uid_of(S3), deploy.uid_of(S3))
    deploy.make_exchange(scratch)
    assert (scratch.exchange / COURSE).stat().st_uid == inst
    assert [p.name for p in scratch.exchange.iterdir() if "not-the-instructors" in p.name]
    # and release still works for the class (the formgrader's Unrelease and Release buttons)
    assert fg.post(f"/assignment/{A}/unrelease")["success"]
    assert fg.post(f"/assignment/{A}/release")["success"]
    assert (course / "outbound" / A / f"{NB}.ipynb").stat().st_uid == inst


SQUAT = '''
import json, os, socket, sys, time
held, refused = [], {}
for port in list(range(8510, 8550)) + list(range(8560, 8600)) + list(range(20000, 20200)):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port)); s.listen(); held.append(s)
    except OSError:
        s.close()
for what, path in (("socket", sys.argv[1]), ("folder", os.path.dirname(sys.argv[1]))):
    try:
        if what == "socket":
            u = socket.socket(socket.AF_UNIX); u.bind(path); print("BOUND", path)
        else:
            os.listdir(path); print("LISTED", path)
    except OSError as e:
        refused[what] = type(e).__name__
print(json.dumps({"held": len(held), "refused": refused}), flush=True)
time.sleep(float(sys.argv[2]))
'''


def test_no_student_can_take_another_students_server_or_cap_the_class(klass):
    """s3 holds every port of the earlier spawner's range (and of the test hub's) and 200 more, and tries to
    take s4's server socket; s4's server is then stopped and started again while s3 holds them: it
    starts, on its own socket. There is no port to take and no fixed number of servers."""
    cfg, users, fg, hubapi = klass
    sock = student_folders(cfg.users_dir, S4).socket
    python = str(deploy.env_dir(cfg) / "bin" / "python")
    squat = [python, "-c", SQUAT, str(sock), "120"]
    squatter = subprocess.Popen(confine.command(sys.executable, cfg.settings, S3, squat), cwd=confine.LAUNCH_DIR,
                                stdout=subprocess.PIPE, text=True, env=deploy.user_environment(cfg, S3))
    try:
        report = json.loads(squatter.stdout.readline())
        assert report["held"] >= 200, report
        assert report["refused"] == {"socket": "PermissionError", "folder": "PermissionError"}, report
        hubapi.request("DELETE", f"/hub/api/users/{S4}/server", timeout=120)
        deadline = time.monotonic() + 120
        while hubapi.user(S4)["servers"] and time.monotonic() < deadline:
            time.sleep(0.5)
        users[S4].start()
        server = users[S4].wait_ready()
        assert server["ready"] and squatter.poll() is None, "s4's server did not start while s3 held the ports"
        assert users[S4].listdir() is not None
        assert sock.exists() and sock.stat().st_uid == deploy.uid_of(S4)
    finally:
        squatter.kill()
        squatter.wait()


def test_a_students_memory_processes_and_disk_are_bounded_and_the_class_goes_on(klass):
    """s3 allocates more memory than their limit, starts processes until the system refuses, and fills
    their disk (home and /tmp); each stops at s3's limit (OOM kill in their own cgroup, fork failing,
    no space left) while s1's server answers and s1 saves a notebook and hands it in."""
    cfg, users, fg, _ = klass
    before = snapshot(cfg, fg)
    settings = json.loads(cfg.settings.read_text())
    cg = L.Cgroups(**settings["cgroups"])
    ooms = cg.oom_kills(S3)
    limit = TEST_LIMITS.memory_bytes
    proc = as_student(cfg, S3, '''
        import sys
        blocks = []
        for i in range(int(sys.argv[1]) // (64 << 20) + 4):
            blocks.append(b"\x01" * (64 << 20))   # every page written
            print(i, flush=True)
        print("NOT KILLED")
    ''', str(limit))
    assert proc.returncode == -9 and "NOT KILLED" not in proc.stdout, (proc.returncode, proc.stdout[-200:])
    assert cg.oom_kills(S3) > ooms, "the kill was not the cgroup's OOM killer"
    got = len(proc.stdout.split())
    assert got * (64 << 20) <= limit + (64 << 20), f"{got} x 64 MiB allocated under a {limit >> 20} MiB limit"

    proc = as_student(cfg, S3, '''
        import os, sys, time
        kids = []
        try:
            while len(kids) < 2 * int(sys.argv[1]):
                pid = os.fork()
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                kids.append(pid)
        except OSError as e:
            print("refused after", len(kids), type(e).__name__, flush=True)
        for pid in kids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    ''', str(TEST_LIMITS.processes), timeout=180)
    assert "refused after" in proc.stdout, proc.stdout + proc.stderr
    made = int(proc.stdout.split()[2])
    assert 0 < made <= TEST_LIMITS.processes, made

    proc = as_student(cfg, S3, '''
        import os
        written = {}
        for where in ("/tmp", os.path.expanduser("~")):
            n = 0
            try:
                with open(os.path.join(where, "fill.bin"), "wb") as f:
                    while True:
                        f.write(b"x" * (4 << 20)); f.flush(); n += 4 << 20
            except OSError as e:
                written[where] = (n, e.errno)
            os.unlink(os.path.join(where, "fill.bin"))
        print(written)
        total = 0
        try:
            with open(os.path.join("/tmp", "a.bin"), "wb") as a, open(os.path.expanduser("~/b.bin"), "wb") as b:
                while True:
                    for f in (a, b):
                        f.write(b"y" * (4 << 20)); f.flush(); total += 4 << 20
        except OSError as e:
            print("together", total, e.errno)
        os.unlink("/tmp/a.bin"); os.unlink(os.path.expanduser("~/b.bin"))
    ''', timeout=180)
    assert "together" in proc.stdout, proc.stdout + proc.stderr
    together = int(proc.stdout.split("together")[1].split()[0])
    assert together <= TEST_LIMITS.disk_bytes, f"{together} bytes written on a {TEST_LIMITS.disk_bytes} filesystem"
    assert "28)" in proc.stdout or "27)" in proc.stdout, proc.stdout  # ENOSPC or EFBIG (the file size limit)

    unchanged(before, snapshot(cfg, fg))
    # the class goes on: s1's server answers and saves
    nb = users[S1].get_notebook(f"{A}/{NB}.ipynb")
    users[S1].put_notebook(f"{A}/scratch-copy.ipynb", nb)
    assert "scratch-copy.ipynb" in users[S1].listdir(A)
    users[S1].request("DELETE", f"/user/{S1}/api/contents/{A}/scratch-copy.ipynb")


def test_autograde_after_the_attacks_gives_no_one_anothers_work(klass):
    """The instructor grades hw4 after all of the above: s1's and s2's grades and submissions are what they
    were (their graded notebooks and feedback pages are the grader's to rewrite), s3 is graded on their
    own notebook (mine.ipynb is not the assignment's notebook: missing, no points) and s4, whose folders
    were all set aside, has no submission at all."""
    cfg, users, fg, _ = klass
    before = snapshot(cfg, fg)
    python = str(deploy.env_dir(cfg) / "bin" / "python")
    proc = deploy.run_as(INSTRUCTOR, [python, "course_tool.py", "autograde", A, "--workers", "2"], cfg,
                         cwd=cfg.course_dir, timeout=900, check=False)
    (ARTIFACTS / "attacks-autograde.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    subs = {s["student"]: s for s in fg.get(f"/submissions/{A}")}
    assert S4 not in subs or not subs[S4].get("submitted", True) or subs[S4].get("score") in (None, 0)
    assert (subs.get(S3) or {}).get("code_score", 0) == 0, subs.get(S3)
    after = snapshot(cfg, fg)
    regraded = [str(cfg.course_dir / d / v) for d in ("autograded", "feedback") for v in VICTIMS]
    for snap in (before, after):
        snap["files"] = {k: v for k, v in snap["files"].items() if not k.startswith(tuple(regraded))}
    unchanged(before, after)
