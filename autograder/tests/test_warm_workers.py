"""Warm workers (autograder/batch/warm_workers.py) and warm kernels (autograder/sandbox/zygote.py): a
kernel forked from a zygote sees what a kernel started cold sees, and nothing one submission leaves
behind (a module global, a patched torch, a file, an environment variable, a process) reaches the
grading of the next one.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import nbformat
import pytest

from autograder.execution import sandboxed_kernel as kernels
from autograder.sandbox import bubblewrap as sandbox
from autograder.sandbox import library_view
from autograder.sandbox import safe_files as files
from autograder.sandbox import zygote

pytestmark = pytest.mark.skipif(sandbox.bwrap_status() != "ok", reason="warm kernels need bubblewrap")

# What a kernel says about itself (one JSON line on stdout).
SELF_REPORT = r"""
import os, sys, json, socket
_forked = "torch" in sys.modules  # a zygote's fork has it already; a cold kernel has not imported it
def _net():
    try:
        socket.create_connection(("10.255.255.1", 80), 1)
        return "connected"
    except OSError as e:
        return type(e).__name__
def _writable(p):
    try:
        open(os.path.join(p, ".llmrl-w"), "w").close()
        os.remove(os.path.join(p, ".llmrl-w"))
        return True
    except OSError:
        return False
import torch
print(json.dumps({
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "path": [p for p in sys.path if "llmrl-kernel" not in p],
    "env": {k: v for k, v in os.environ.items() if k not in ("HOME", "TMPDIR", "MPLCONFIGDIR", "IPYTHONDIR", "PWD")},
    "caps": [l.split()[0] for l in open("/proc/self/status") if l.startswith("Cap") and int(l.split()[1], 16)],
    "no_new_privs": [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")],
    "root": sorted(os.listdir("/")), "root_writable": _writable("/"), "tmp_writable": _writable("/tmp"),
    "cwd_writable": _writable("."), "course_visible": os.path.exists(CHECK_COURSE), "net": _net(),
    "library": getattr(__import__("llmrl"), "__file__", None), "view": "llmrl._grading_view" in sys.modules or
        os.path.exists(os.path.join(os.path.dirname(__import__("llmrl").__file__), "_grading_view.py")),
    "torch_threads": torch.get_num_threads(), "uid": os.getuid(), "argv0": os.path.basename(sys.argv[0]),
    "main": type(sys.modules["__main__"]).__name__, "forked": _forked,
}))
"""


def _env(extra=None):
    return dict({"NBGRADER_EXECUTION": "autograde"}, **(extra or {}))


async def _report(view, label, code=SELF_REPORT, course=None):
    k = kernels.Kernel(label, None, _env(), [sandbox.ROOT], True, view=view)
    await k.start()
    try:
        sink = kernels.Outputs().cell()
        r = await k.execute(f"CHECK_COURSE = {str(course or sandbox.ROOT / 'source')!r}\n" + code, timeout=120,
                            sink=sink)
        text = "".join(o.get("text", "") for o in sink.outputs if o.get("output_type") == "stream")
        assert r.ok, f"{label}: {r.ename}: {r.evalue}\n{text[-2000:]}"
        return k.warm, json.loads(text.strip().splitlines()[-1])
    finally:
        await k.shutdown()


@pytest.fixture(scope="module")
def zygotes(tmp_path_factory):
    folder = files.scratch_dir("test-zygotes")
    runtime = folder / "kernel-env"
    runtime.mkdir()
    z = zygote.Zygotes(folder, sandbox.kernel_env(runtime, _env()))
    z.start()
    yield z
    z.stop()
    files.rmtree(folder)


def test_a_warm_kernel_sees_what_a_cold_one_sees(zygotes, monkeypatch):
    view = library_view.build()
    got = {}
    for mode in ("cold", "warm"):
        if mode == "warm":
            monkeypatch.setenv("LLMRL_GRADE_ZYGOTES", json.dumps(zygotes.sockets))
        else:
            monkeypatch.delenv("LLMRL_GRADE_ZYGOTES", raising=False)
        for label, v in (("student", None), ("tests", None), ("answer (first)", view)):
            warm, rep = asyncio.run(_report(v, label))
            assert warm == rep["forked"] == (mode == "warm"), f"{label} {mode}: the kernel was not started as asked"
            got[mode, label] = rep
    for label in ("student", "tests", "answer (first)"):
        cold, warm = got["cold", label], got["warm", label]
        # the same sandbox: no capability, no network, nothing writable but its own folder, no course
        assert warm["caps"] == [] and warm["no_new_privs"] == ["1"], label
        assert warm["net"] == cold["net"] != "connected", label
        assert (warm["root_writable"], warm["tmp_writable"], warm["cwd_writable"]) == (False, False, True), label
        assert warm["course_visible"] is cold["course_visible"] is False, label
        # only the processes of its own sandbox (bubblewrap's, its placeholder and itself)
        assert max(warm["pids"]) <= 3, f"{label}: a warm kernel sees other processes: {warm['pids']}"
        for key in ("path", "env", "root", "library", "view", "torch_threads", "uid", "argv0", "main"):  # and the rest
            assert warm[key] == cold[key], f"{label}: {key} differs: cold {cold[key]!r}, warm {warm[key]!r}"
    assert got["warm", "answer (first)"]["view"] is True and got["warm", "student"]["view"] is False


LEAVE = r"""
import os, sys, subprocess, torch, math, builtins
torch.allclose = lambda *a, **k: True          # a patched torch
torch.planted_by_first = "first"               # a module global
math.planted_by_first = "first"
builtins.planted_by_first = "first"
sys.modules["planted_by_first"] = math
os.environ["PLANTED_BY_FIRST"] = "first"
for d in {os.getcwd(), os.environ.get("HOME", "."), os.environ.get("TMPDIR", "."), "/tmp", "/dev/shm", "/var/tmp"}:
    try:
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "planted_by_first.txt"), "w").write("first")
    except OSError:
        pass
subprocess.Popen(["sleep", "600"])              # a process that outlives the cell
print("LEFT", os.getcwd())
"""

LOOK = r"""
import os, sys
print("FORKED", "torch" in sys.modules)  # a zygote's fork, not a kernel started cold
import torch, math, builtins, glob
seen = []
if torch.allclose(torch.tensor([0.0]), torch.tensor([1.0])):
    seen.append("patched torch.allclose")
for where, obj in (("torch", torch), ("math", math), ("builtins", builtins)):
    if hasattr(obj, "planted_by_first"):
        seen.append(f"{where}.planted_by_first")
if "planted_by_first" in sys.modules:
    seen.append("sys.modules entry")
if "PLANTED_BY_FIRST" in os.environ:
    seen.append("environment variable")
for pattern in ("/tmp/**/planted_by_first.txt", "/dev/shm/planted_by_first.txt", "/var/tmp/planted_by_first.txt",
                os.path.join(os.environ.get("HOME", "."), "planted_by_first.txt"), "planted_by_first.txt"):
    seen += glob.glob(pattern, recursive=True)
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            if "sleep" in open(f"/proc/{p}/cmdline").read():
                seen.append(f"process {p}")
        except OSError:
            pass
print("SEEN", seen)
"""


def test_nothing_one_kernel_leaves_reaches_the_next_one(zygotes, monkeypatch):
    """Kernels forked from the same zygote one after the other: the second sees nothing of the first."""
    monkeypatch.setenv("LLMRL_GRADE_ZYGOTES", json.dumps(zygotes.sockets))

    async def run():
        first = kernels.Kernel("student", None, _env(), [sandbox.ROOT], True)
        await first.start()
        sink = kernels.Outputs().cell()
        r = await first.execute(LEAVE, timeout=60, sink=sink)
        assert r.ok and first.warm, (r.ename, r.evalue)
        first_dir = first.dir
        out = {}
        try:  # while the first still runs, and after it is gone
            for when in ("beside", "after"):
                if when == "after":
                    await first.shutdown()
                    assert not first_dir.exists()
                for label, view in (("student", None), ("tests", None), ("answer (x)", library_view.build())):
                    k = kernels.Kernel(label, None, _env(), [sandbox.ROOT], True, view=view)
                    await k.start()
                    s = kernels.Outputs().cell()
                    r = await k.execute(LOOK + f"\nprint('FIRST', os.path.exists({str(first_dir)!r}))", timeout=60,
                                        sink=s)
                    text = "".join(o.get("text", "") for o in s.outputs)
                    await k.shutdown()
                    assert r.ok and k.warm, (label, r.ename, r.evalue, text)
                    out[when, label] = text
        finally:
            await first.shutdown()
        return out

    for (when, label), text in asyncio.run(run()).items():
        assert "FORKED True" in text and "SEEN []" in text, f"a {label} kernel {when} the first saw {text}"
        assert "FIRST False" in text, f"a {label} kernel {when} the first sees its folder"


def test_a_kernel_whose_environment_is_not_the_zygotes_starts_cold(zygotes, monkeypatch):
    monkeypatch.setenv("LLMRL_GRADE_ZYGOTES", json.dumps(zygotes.sockets))
    threads = str(int(os.environ.get("OMP_NUM_THREADS") or 0) + 3)
    monkeypatch.setenv("OMP_NUM_THREADS", threads)  # kept in a kernel's environment; the zygotes have another

    async def run():
        k = kernels.Kernel("student", None, _env(), [sandbox.ROOT], True)
        await k.start()
        try:
            return await k.expression("(__import__('os').environ.get('OMP_NUM_THREADS'), __import__('os').getpid())")
        finally:
            await k.shutdown()

    status, text = asyncio.run(run())
    # it ran, with its own environment, as bubblewrap's child (pid 2) rather than a zygote's fork (pid 3)
    assert status == "ok" and text == f"({threads!r}, 2)", text


# ----------------------------------------------------------------------------- the batch

SOURCE_SETUP = "import torch"
SOLUTION = "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"
TEST = ("assert torch.allclose(double(torch.tensor([1.0])), torch.tensor([2.0])), 'double(1) should be 2'\n"
        "### BEGIN HIDDEN TESTS\n"
        "assert torch.allclose(double(torch.tensor([-1.5])), torch.tensor([-3.0]))\n"
        "### END HIDDEN TESTS")


def _course(root: Path) -> None:
    from autograder.course import nbgrader_app

    def meta(gid, grade, solution, points=None):
        m = {"grade": grade, "grade_id": gid, "locked": not solution, "schema_version": 3, "solution": solution,
             "task": False}
        if points is not None:
            m["points"] = points
        return {"nbgrader": m}

    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    nb.cells = [nbformat.v4.new_code_cell(SOURCE_SETUP), nbformat.v4.new_code_cell(SOLUTION, metadata=meta(
        "double", False, True)), nbformat.v4.new_code_cell(TEST, metadata=meta("test_double", True, False, 2))]
    for i, c in enumerate(nb.cells):
        c["id"] = c.metadata.get("nbgrader", {}).get("grade_id") or f"cell-{i}"
    path = root / "source" / "warm" / "warm.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    nbgrader_app.record_assignment("warm", root)


def _submit(root: Path, student: str, solution: str, free: str | None = None) -> None:
    nb = nbformat.read(root / "release" / "warm" / "warm.ipynb", as_version=4)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "double":
            c.source = solution
    if free is not None:
        cell = nbformat.v4.new_code_cell(free)
        cell["id"] = "free"
        nb.cells.insert(2, cell)
    path = root / "submitted" / student / "warm" / "warm.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)


def test_what_a_submission_leaves_reaches_no_later_submission_in_a_warm_batch(tmp_path, monkeypatch):
    """A batch graded by warm workers, one student at a time: the first plants everything it can in
    its feedback run's kernel and in the answer kernel (a patched torch.allclose that would pass any
    test, module globals, files, an environment variable, a lingering process); the second, whose
    answer is wrong, still fails its test and its cells see none of it."""
    from autograder.batch import run as batch

    root = tmp_path / "course"
    _course(root)
    # the planting is in the solution cell (it runs in the feedback run and in the answer kernel) and in a free cell
    _submit(root, "a-first", "def double(x):\n    return 2 * x\n" + LEAVE, free=LEAVE)
    _submit(root, "b-second", "def double(x):\n    return 3 * x", free=LOOK)
    monkeypatch.setenv("LLMRL_GRADE_WARM", "wait")
    out = batch.run_batch(["warm"], root, workers=1, progress=False, csv_path=root / "batch_grades.csv")
    results = {r.job.student: r for r in out["results"]}
    for student in ("a-first", "b-second"):
        r = results[student]
        assert r.report is not None, r.error
        assert r.report["warm_worker"], f"{student} was not graded by a warm worker"
        assert r.report["notebooks"][0]["events"].get("warm_kernels") == 3, r.report["notebooks"][0]["events"]
    assert results["a-first"].report["points"] == 2.0
    second = results["b-second"].report["notebooks"][0]
    assert second["points"] == 0.0 and "double(1) should be 2" in (second["cells"][0]["error"] or "")
    graded = nbformat.read(root / "autograded" / "b-second" / "warm" / "warm.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", []))
    assert "FORKED True" in text and "SEEN []" in text, text


# ----------------------------------------------------------------------------- the benchmark's bookkeeping

def test_the_benchmark_counts_submissions_per_minute_per_core_and_compares_the_graders(tmp_path):
    """bench_grading.run on one tiny submission, this grader cold beside plain nbgrader: its figures
    are the counts and ratios of what ran (no timing is asserted)."""
    from autograder import bench_grading as bench
    from autograder.tests import tiny

    src = tmp_path / "src"
    tiny.make_course(src)
    nb = tiny.submission(src, tiny.RIGHT)
    subs = [("tiny", "only", {"tiny.ipynb": nbformat.writes(nb)})]
    fig = bench.run(subs, tmp_path / "work", workers=1, modes=("cold",), plain=True, source_root=src)
    cold, plain = fig["trusted"]["cold"], fig["plain"]
    assert fig["submissions"] == 1 and cold["warm_workers"] == 0 and cold["warm_kernels_per_submission"] == 0
    # wall_s is kept to 0.01 s and the rate to 0.01 a minute: for a wall of a second or more the two
    # roundings move 60 / wall_s by well under 2% (to 0.1 s, a 2.05 s wall printed as 2.0 moved it 2.5%)
    assert cold["per_minute_per_core"] == pytest.approx(60 / cold["wall_s"], rel=0.02)
    assert plain["per_minute_per_core"] == pytest.approx(60 / plain["wall_s"], rel=0.02)
    assert fig["plain_over"]["cold"] == pytest.approx(plain["per_minute_per_core"] / cold["per_minute_per_core"],
                                                      rel=0.02)
    assert cold["points"] == {"only": tiny.POINTS} and plain["points"] == {"only": tiny.POINTS}
    assert fig["points_differ"] == {}
    assert cold["kernels_per_submission"] == 3
    # each run says what the cores were shared with: the load average at its end, printed beside it
    assert cold["load_after"] >= 0 and plain["load_after"] >= 0
    assert f"(load average at its end {cold['load_after']:.1f})" in bench.table(fig)
    parts = cold["parts_median_s"]
    assert parts["kernels"] > 0 and parts["kernel_start"] > 0 and parts["feedback_cells"] >= 0
    assert "plain nbgrader / this grader, cold" in bench.table(fig)
    with pytest.raises(ValueError, match="modes must be"):
        bench.run(subs, tmp_path / "x", workers=1, modes=("hot",))


def test_a_plain_nbgrader_failure_is_tried_once_more_and_a_second_names_nbgraders_error(tmp_path, monkeypatch, capsys):
    import subprocess as sp

    from autograder import bench_grading as bench

    runs = []
    failing = sp.CompletedProcess([], 1, "", "Traceback (most recent call last):\nKeyError: 'grade_id'\n"
                                  "[AutogradeApp | ERROR] Please see the the above traceback for details\n")

    def fake(argv, **kw):
        runs.append(argv)
        return failing if len(runs) in outcomes else sp.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(bench.subprocess, "run", fake)
    outcomes = {1}  # the first try fails, the second passes
    assert bench._nbgrader(tmp_path, ["autograde", "hw4", "--student", "s"]) >= 0 and len(runs) == 2
    assert "KeyError: 'grade_id'" in capsys.readouterr().err
    runs.clear()
    outcomes = {1, 2}
    with pytest.raises(bench.BenchError, match=r"failed 2 times; the last: .*KeyError: 'grade_id'"):
        bench._nbgrader(tmp_path, ["autograde", "hw4", "--student", "s"])
