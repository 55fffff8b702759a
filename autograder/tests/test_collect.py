"""The course's collection (course_collect.py) against hostile inbound folders, through the path the
formgrader's Collect button takes (NbGraderAPI.collect with the course's nbgrader settings).

Real files, links, FIFOs, sockets and sparse files in a real exchange on this disk. What needs other OS
accounts (a folder in another student's name, a hard link to another account's file, a folder the
instructor cannot read) is tried here where this test runs as root, and on the hub with real accounts
in hub/tests/test_hub_attacks.py (make test-hub, in CI).
"""

from __future__ import annotations

import datetime
import getpass
import json
import os
import socket
import uuid
from pathlib import Path

import nbformat
import pytest
from autograder.tests import tiny

from autograder.collect import exchange as course_collect

pytestmark = pytest.mark.fast  # make test-fast runs this file

ME = getpass.getuser()


def _now() -> str:
    return course_collect.stamp_text(datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None))


def _snapshot(folder: Path) -> dict:
    """Every entry beneath folder: its type, owner, mode and (files) bytes, links unfollowed."""
    out = {}
    for top, dirs, names in os.walk(folder):
        for n in dirs + names:
            p = Path(top) / n
            st = os.lstat(p)
            data = p.read_bytes() if p.is_file() and not p.is_symlink() and st.st_size < 1 << 20 else None
            out[str(p.relative_to(folder))] = (st.st_mode, st.st_uid, st.st_size, data)
    return out


@pytest.fixture
def exchange_course(tmp_path):
    """A tiny course released into a fresh exchange; returns (api, root, inbound)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from autograder.course import nbgrader_app

    root = tiny.make_course(tmp_path / "course")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    cfg = nbgrader_app.load_config(root)
    cfg.Exchange.root = str(exchange)
    api = NbGraderAPI(CourseDirectory(config=cfg), config=cfg)
    assert api.release_assignment(tiny.ASSIGNMENT)["success"]
    return api, root, exchange / "llmrl" / "inbound"


def test_hostile_entries_are_refused_and_named_and_the_class_is_still_collected(exchange_course, tmp_path):
    api, root, inbound = exchange_course
    secret = root / "source" / tiny.ASSIGNMENT / f"{tiny.NOTEBOOK}.ipynb"  # the solutions
    answer = nbformat.writes(tiny.submission(root, tiny.RIGHT)).encode()

    # the student's folder: what nbgrader submit writes, plus every kind of entry that is not their file
    now = _now()
    mine = inbound / f"{ME}+{tiny.ASSIGNMENT}+{now}+{uuid.uuid4().hex}"
    mine.mkdir()
    (mine / f"{tiny.NOTEBOOK}.ipynb").write_bytes(answer)
    (mine / "timestamp.txt").write_text(now)
    (mine / "notes.txt").write_text("my notes\n")
    (mine / "sub").mkdir()
    (mine / "sub" / "data.csv").write_text("a,b\n1,2\n")
    (mine / "solution.ipynb").symlink_to(secret)                 # a link to the source notebook
    (mine / "course").symlink_to(root)                           # a link to a folder
    (mine / "sub" / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(mine / "pipe")                                     # a collect that opened it would hang
    here = os.getcwd()
    os.chdir(mine)  # a socket's path must be short: bound by its relative name
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind("sock")
    finally:
        os.chdir(here)
    with open(mine / "huge.bin", "wb") as f:                     # 150 MB apparent, a few kB on the disk
        f.truncate(150_000_000)
    # entries of the inbound that must not stop the others and count for no one
    bad = {
        "garbage+lab": None,  # another assignment's name: not this collection's business
        f"{ME}+{tiny.ASSIGNMENT}+not a time+{uuid.uuid4().hex}": "malformed name",
        f"../x+{tiny.ASSIGNMENT}+{now}+r": None,  # cannot exist ('/' in a name): kept out of the loop below
        f"-rf+{tiny.ASSIGNMENT}+{now}+r": "is not a student id",
        f"+{tiny.ASSIGNMENT}+{now}": "malformed name",
        f"{ME}+{tiny.ASSIGNMENT}+2099-01-01 00:00:00.000000 UTC+link": "a symbolic link, not a folder",
        f"{ME}+{tiny.ASSIGNMENT}+2099-01-02 00:00:00.000000 UTC+file": "a file, not a folder",
        f"llmrl-nobody-here+{tiny.ASSIGNMENT}+{now}+{uuid.uuid4().hex}": "who has no account here",
    }
    for name, why in bad.items():
        if "/" in name or why is None:
            continue
        p = inbound / name
        if "+link" in name:
            p.symlink_to(secret.parent)
        elif "+file" in name:
            p.write_text("not a folder")
        else:
            p.mkdir()
            (p / f"{tiny.NOTEBOOK}.ipynb").write_bytes(answer)
    (inbound / "garbage+lab").mkdir()
    before = _snapshot(inbound)

    r = api.collect(tiny.ASSIGNMENT)
    assert r["success"], r.get("error") or r.get("log")
    log = r["log"]

    got = root / "submitted" / ME / tiny.ASSIGNMENT
    files = sorted(str(p.relative_to(got)) for p in got.rglob("*"))
    assert files == ["notes.txt", "sub", "sub/data.csv", "timestamp.txt", f"{tiny.NOTEBOOK}.ipynb"], files
    assert (got / f"{tiny.NOTEBOOK}.ipynb").read_bytes() == answer
    assert (got / "timestamp.txt").read_text() == now  # an honest time is kept
    assert all(not p.is_symlink() for p in got.rglob("*"))

    record = course_collect.read_records(root, tiny.ASSIGNMENT)[ME]
    refused = {line.split(":", 1)[0]: line for line in record["refused"]}
    assert set(refused) == {"solution.ipynb", "course", "sub/passwd", "pipe", "sock", "huge.bin"}, record["refused"]
    assert "a symbolic link to " in refused["solution.ipynb"] and str(secret) in refused["solution.ipynb"]
    assert "a named pipe (FIFO)" in refused["pipe"] and "a socket" in refused["sock"]
    assert "150000000 bytes, more than the limit" in refused["huge.bin"]
    for name in refused:
        assert name in log, f"the collect log does not name {name}"
    # the grades say it too (the batch and grades.csv add this note)
    said = course_collect.collection_note(root, tiny.ASSIGNMENT, ME)
    assert "not collected: " in said and "solution.ipynb" in said, said

    aside = {a["folder"]: a["why"] for a in json.loads(course_collect.set_aside_path(root, tiny.ASSIGNMENT).read_text())}
    expected = {n: w for n, w in bad.items() if w and "/" not in n}
    assert set(aside) == set(expected), aside
    for name, why in expected.items():
        assert why in aside[name], (name, aside[name])
        assert repr(name) in log, f"the collect log does not name {name!r}"
    assert not (root / "submitted" / "llmrl-nobody-here").exists() and not (root / "submitted" / "-rf").exists()
    assert sorted(p.name for p in (root / "submitted").iterdir()) == [ME]
    assert _snapshot(inbound) == before, "the collection changed the inbound"

    # collected again with nothing new: the same submission, nothing copied twice
    assert api.collect(tiny.ASSIGNMENT)["success"]
    assert "No newer submission to collect" in api.collect(tiny.ASSIGNMENT)["log"]


def test_caps_on_entries_depth_and_bytes_stop_a_submission_not_the_collection(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(10):
        (src / f"f{i}.txt").write_bytes(b"x" * 400)
    deep = src / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "deep.txt").write_text("deep")
    limits = course_collect.Limits(max_file_bytes=500, max_total_bytes=2500, max_entries=100, max_depth=2)
    report = course_collect.copy_submission(src, tmp_path / "out", None, limits)
    assert report.bytes <= 2500 and report.files == 6, report  # 6 x 400 bytes, the 7th would pass the total
    assert any("a/b/c/: more than 2 folders deep" in r for r in report.refused), report.refused
    assert sum("would take the submission past its limit of 2500 bytes" in r for r in report.refused) == 4
    assert not (tmp_path / "out" / "a" / "b" / "c").exists()

    limits = course_collect.Limits(max_entries=5)
    report = course_collect.copy_submission(src, tmp_path / "out2", None, limits)
    assert report.entries == 6 and report.files == 2, report  # a, a/b, a/b/c, deep.txt, f0: the cap's 5
    assert report.refused[-1].endswith("and everything after it: more than 5 entries"), report.refused


def test_a_file_that_grows_while_it_is_copied_is_cut_at_the_cap(tmp_path):
    """The apparent size is checked before the copy and the bytes are counted while copying: a file
    that grows between the two is refused, not copied past the cap."""
    src = tmp_path / "in"
    src.mkdir()
    big = src / "grows.bin"
    big.write_bytes(b"y" * 100)
    limits = course_collect.Limits(max_file_bytes=1000, max_total_bytes=1000)
    real_fstat = os.fstat

    def fstat_then_grow(fd):  # the student's process appends right after the collection opened it
        st = real_fstat(fd)
        if os.path.exists(big) and os.readlink(f"/proc/self/fd/{fd}") == str(big):
            with open(big, "ab") as f:
                f.write(b"z" * 5000)
        return st
    os.fstat = fstat_then_grow
    try:
        report = course_collect.copy_submission(src, tmp_path / "out", None, limits)
    finally:
        os.fstat = real_fstat
    assert report.files == 0 and "grew past the limit of 1000 bytes" in report.refused[0], report
    assert not (tmp_path / "out" / "grows.bin").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files as two accounts; the hub's tests do it with "
                    "real accounts in CI")
def test_files_of_another_account_and_hard_links_to_them_are_refused(tmp_path):
    student, other = 65534, 0  # nobody, and root (the instructor's files, the course's)
    src = tmp_path / "in"
    src.mkdir()
    (src / "mine.txt").write_text("mine")
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("the instructor's")
    os.link(theirs, src / "linked.txt")
    (src / "planted.txt").write_text("root's file in the student's folder")
    for p in (src, src / "mine.txt"):
        os.chown(p, student, student)
    report = course_collect.copy_submission(src, tmp_path / "out", student, course_collect.Limits())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine.txt"]
    reasons = dict(line.split(": ", 1) for line in report.refused)
    assert "owned by root, not by the student, a hard link (2 names)" in reasons["linked.txt"], reasons
    assert "owned by root, not by the student" in reasons["planted.txt"], reasons
    with pytest.raises(PermissionError, match="owned by root"):  # a folder that is not the student's
        course_collect.copy_submission(src / "..", tmp_path / "out2", student, course_collect.Limits())


def test_a_folder_counts_only_in_the_inbound_of_the_student_it_names(exchange_course, tmp_path):
    """On the hub each student hands in through an inbound of their own (CourseCollect.student_inbounds):
    a folder in one student's inbound that names another student counts for no one."""
    api, root, inbound = exchange_course
    users = tmp_path / "users"
    now = _now()
    answer = nbformat.writes(tiny.submission(root, tiny.RIGHT)).encode()
    for owner, named in ((ME, ME), ("someone", ME), (ME, "someone")):
        folder = users / owner / "inbound" / f"{named}+{tiny.ASSIGNMENT}+{now}+{uuid.uuid4().hex}"
        folder.mkdir(parents=True)
        (folder / f"{tiny.NOTEBOOK}.ipynb").write_bytes(answer)
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    cfg = api.config.copy()
    cfg.CourseCollect.student_inbounds = str(users / "{student}" / "inbound")
    r = NbGraderAPI(CourseDirectory(config=cfg), config=cfg).collect(tiny.ASSIGNMENT)
    assert r["success"], r
    record = course_collect.read_records(root, tiny.ASSIGNMENT)[ME]
    assert record["inbound"] in os.listdir(users / ME / "inbound")
    aside = json.loads(course_collect.set_aside_path(root, tiny.ASSIGNMENT).read_text())
    assert {a["why"] for a in aside} == {f"names someone but was handed in through {ME}'s own inbound",
                                         f"names {ME} but was handed in through someone's own inbound"}, aside
