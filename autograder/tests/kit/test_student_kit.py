"""The student kit on a fresh machine: unpack the archive outside the repository, `./setup.sh` (a new
virtual environment, pip), run every release notebook up to its first task in that environment,
`./lab.sh` (JupyterLab answers on the assignments).

Nothing here imports from the repository once the kit is built: the environment's Python, PATH
without this repository's .venv, no PYTHONPATH, Jupyter's user folders in the temporary folder (with
a stale `python3` kernel from "another course" planted there), the notebooks run by the kit's own
nbclient. torch comes from pip's configured index (TORCH_INDEX=): PyTorch's CPU index, the kit's
default on Linux, cannot be reached from these machines. Takes about a minute on a quiet 2-core
machine (the install is most of it).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

from autograder.course import layout
from autograder.kit import build as student_kit

ROOT = Path(__file__).resolve().parents[3]

RUNNER = Path(__file__).with_name("run_to_first_task.py")


def _loadavg() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("student-kit")
    assert ROOT not in d.resolve().parents, "the test needs a folder outside the repository"
    yield d
    # the environment is 1.2 GB and pytest keeps three runs' folders: keep the logs, not the venv
    shutil.rmtree(d / "home" / student_kit.KIT_NAME / ".venv", ignore_errors=True)


@pytest.fixture(scope="module")
def built(work):
    return student_kit.build(work / "build")


@pytest.fixture(scope="module")
def env(work):
    """A student's shell: no trace of this repository or of its environment."""
    user = work / "user"
    kernels = user / "data" / "kernels" / "python3"  # a student's stale kernel from another course
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": ["/nonexistent/old-course/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (old course)", "language": "python"}))
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV", "NBGRADER", "LLMRL_", "MPL", "IPYTHON"))}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(ROOT)]
    keep.update({
        "PATH": os.pathsep.join(path),
        "JUPYTER_CONFIG_DIR": str(user / "config"), "JUPYTER_DATA_DIR": str(user / "data"),
        "JUPYTER_RUNTIME_DIR": str(user / "runtime"), "IPYTHONDIR": str(user / "ipython"),
        "JUPYTERLAB_SETTINGS_DIR": str(user / "lab-settings"), "JUPYTERLAB_WORKSPACES_DIR": str(user / "ws"),
        # the course's models, built once per machine (make warm) and only read here
        "LLMRL_CACHE": os.environ.get("LLMRL_CACHE", str(Path.home() / ".cache" / "llmrl")),
        "TORCH_INDEX": "",
    })
    return keep


@pytest.fixture(scope="module")
def kit(built, work, figures):
    """The archive as a student gets it, unpacked in their home folder."""
    home = work / "home"
    home.mkdir()
    with tarfile.open(built.archives[0]) as t:
        t.extractall(home, filter="data")
    folder = home / student_kit.KIT_NAME
    figures["kit size"] = (f"{sum(p.stat().st_size for p in folder.rglob('*') if p.is_file()) / 1e6:.2f} MB "
                           f"unpacked, {built.archives[0].stat().st_size / 1e6:.2f} MB tar.gz, "
                           f"{built.archives[1].stat().st_size / 1e6:.2f} MB zip")
    return folder


@pytest.fixture(scope="module")
def installed(kit, env, figures):
    start = time.monotonic()
    proc = subprocess.run(["./setup.sh"], cwd=kit, env=env, text=True, capture_output=True, timeout=1800)
    took = time.monotonic() - start
    assert proc.returncode == 0, f"./setup.sh failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Start JupyterLab with:  ./lab.sh" in proc.stdout
    for step in ("1/4 creating the environment", "2/4 PyTorch", "3/4 installing the course library", "4/4 checking"):
        assert step in proc.stdout, f"setup.sh did not say {step!r}:\n{proc.stdout}"
    # torch comes with step 3 here, so the side-by-side install runs; falling back to the plain one
    # would still give a working kit, but a slower one, and would say so
    assert "plain install completes" not in proc.stdout, f"the side-by-side install failed:\n{proc.stdout}"
    venv_size = sum(p.stat().st_size for p in (kit / ".venv").rglob("*") if p.is_file() and not p.is_symlink())
    figures["./setup.sh in a new venv"] = (f"{took:.0f} s (load average after: {_loadavg()}), "
                                           f"environment {venv_size / 1e9:.2f} GB")
    return kit


def venv_python(kit: Path) -> str:
    return str(kit / ".venv" / "bin" / "python")


def test_setup_installs_the_pins_into_an_environment_of_its_own(installed, env):
    code = ("import json, sys, llmrl, torch, importlib.metadata as m; print(json.dumps({'prefix': sys.prefix, "
            "'llmrl': llmrl.__file__, 'path': sys.path, 'dists': {d.metadata['Name'].lower().replace('_', '-'): "
            "d.version for d in m.distributions()}}))")
    out = json.loads(subprocess.run([venv_python(installed), "-c", code], cwd=installed.parent, env=env,
                                    text=True, capture_output=True, check=True).stdout)
    venv = (installed / ".venv").resolve()
    assert Path(out["prefix"]).resolve() == venv
    assert Path(out["llmrl"]).resolve().is_relative_to(venv), f"llmrl imported from {out['llmrl']}"
    assert not [p for p in out["path"] if p and Path(p).resolve().is_relative_to(ROOT)], "the repository is on sys.path"
    for line in (installed / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            got = out["dists"].get(name.lower().replace("_", "-"))
            assert got is not None and got.split("+")[0] == version, f"{line}: installed {got}"
    assert out["dists"]["llmrl"] == student_kit.project()["version"]
    assert "nbgrader" not in out["dists"], "a student's environment needs no nbgrader"
    check = subprocess.run([venv_python(installed), "-m", "pip", "check"], env=env, text=True, capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_setup_run_again_keeps_the_environment(installed, env, figures):
    before = (installed / ".venv" / "pyvenv.cfg").stat().st_mtime_ns
    start = time.monotonic()
    proc = subprocess.run(["./setup.sh"], cwd=installed, env=env, text=True, capture_output=True, timeout=900)
    figures["./setup.sh again (all installed)"] = f"{time.monotonic() - start:.0f} s"
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "creating the environment" not in proc.stdout
    assert (installed / ".venv" / "pyvenv.cfg").stat().st_mtime_ns == before


def test_setup_skips_a_pytorch_index_it_cannot_reach(installed, env, figures):
    """On Linux setup.sh tries PyTorch's CPU index first; one that does not answer within seconds is left
    for pip's own index instead of costing pip's minute of retries (here: an address that never answers)."""
    if os.uname().sysname != "Linux":
        pytest.skip("the CPU index is tried on Linux only")
    py = venv_python(installed)
    subprocess.run([py, "-m", "pip", "uninstall", "--quiet", "--yes", "torch"], env=env, check=True)
    run_env = {k: v for k, v in env.items() if k != "TORCH_INDEX"}
    # private and unrouted: the connection hangs (or a proxy on the way answers with an error page)
    run_env["TORCH_CPU_INDEX"] = "http://10.255.255.1/whl/cpu"
    start = time.monotonic()
    proc = subprocess.run(["./setup.sh"], cwd=installed, env=run_env, text=True, capture_output=True, timeout=900)
    figures["./setup.sh with an unreachable PyTorch index (torch again)"] = f"{time.monotonic() - start:.0f} s"
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "does not answer from here: PyTorch comes from pip's index instead" in proc.stdout, proc.stdout
    version = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], env=env, text=True,
                             capture_output=True, check=True).stdout.strip()
    assert version.split("+")[0] == "2.13.0", version


def _expected_stop(nb: dict) -> tuple[list[str], dict]:
    """(ids of the code cells that must run, where the run must stop) for a release notebook."""
    cells = nb["cells"]
    first = next(i for i, c in enumerate(cells) if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    if cells[first]["cell_type"] == "markdown":
        stop_at, stop = first, {"kind": "written answer", "id": cells[first]["id"]}
    else:
        stop_at = next(i for i in range(first + 1, len(cells)) if cells[i]["cell_type"] == "code"
                       and cells[i]["metadata"].get("nbgrader", {}).get("grade"))
        stop = {"kind": "error", "ename": "NotImplementedError", "id": cells[stop_at]["id"]}
    return ["kit-probe"] + [c["id"] for c in cells[:stop_at] if c["cell_type"] == "code"], stop


@pytest.mark.parametrize("notebook", [f"{lab.assignment}/{lab.name}" for lab in
                                      layout.discover()])
def test_each_notebook_runs_in_the_kit_up_to_its_first_task(installed, env, work, figures, notebook):
    path = installed / "assignments" / f"{notebook}.ipynb"
    result_path = work / f"{notebook.replace('/', '-')}.json"
    run_env = {**env, "LLMRL_FAST": "1"}  # the experiments before a task shrink, as under grading
    start = time.monotonic()
    proc = subprocess.run([venv_python(installed), str(RUNNER), str(path), str(result_path)],
                          cwd=path.parent, env=run_env, text=True, capture_output=True, timeout=1200)
    figures[f"{notebook} up to its first task"] = f"{time.monotonic() - start:.0f} s"
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(result_path.read_text())
    venv = (installed / ".venv").resolve()
    kernel = result["kernel"]
    assert kernel is not None, f"the probe cell did not run: {result}"
    assert Path(kernel["prefix"]).resolve() == venv, f"the kernel runs {kernel['executable']}, not the kit's Python"
    assert Path(kernel["llmrl"]).resolve().is_relative_to(venv), f"llmrl imported from {kernel['llmrl']}"
    assert not [p for p in kernel["path"] if p and Path(p).resolve().is_relative_to(ROOT)]
    ran, stop = _expected_stop(json.loads(path.read_text()))
    got = result["stopped"] or {}
    assert {k: got.get(k) for k in stop} == stop, (
        f"{notebook}: expected to stop at {stop}, stopped at {got} after {result['ran'][-3:]}")
    assert result["ran"] == ran, f"{notebook}: cells before the first task that did not run: " \
                                 f"{[c for c in ran if c not in result['ran']]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_lab_sh_opens_jupyterlab_on_the_assignments(installed, env, work, figures):
    port, token = _free_port(), secrets.token_hex(16)
    args = ["./lab.sh", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
            f"--ServerApp.token={token}"] + (["--allow-root"] if os.geteuid() == 0 else [])
    log = open(work / "lab.log", "wb")
    start = time.monotonic()
    proc = subprocess.Popen(args, cwd=installed, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)

    def get(path):
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if path.startswith("/api") else body.decode()
    try:
        while True:
            assert proc.poll() is None, f"lab.sh exited with {proc.returncode}:\n{(work / 'lab.log').read_text()[-3000:]}"
            try:
                get("/api/status")
                break
            except OSError:
                assert time.monotonic() - start < 120, (work / "lab.log").read_text()[-3000:]
                time.sleep(0.5)
        figures["./lab.sh until JupyterLab answers"] = f"{time.monotonic() - start:.1f} s"
        top = {c["name"] for c in get("/api/contents")["content"]}
        assert top == {lab.assignment for lab in layout.discover()}, top
        names = {c["name"] for c in get("/api/contents/lab11")["content"]}
        assert "llm_as_policy.ipynb" in names
        specs = get("/api/kernelspecs")
        python3 = specs["kernelspecs"][specs["default"]]
        assert specs["default"] == "python3" and python3["spec"]["display_name"] != "Python 3 (old course)", \
            "JupyterLab would start the student's stale kernel from another course"
        assert "<title>JupyterLab</title>" in get("/lab")
        # no "official Jupyter news" pop-up over the notebook (setup.sh's settings overrides)
        # (the overrides become the defaults the settings API reports; the student may still change them)
        notes = json.loads(get("/lab/api/settings/@jupyterlab/apputils-extension:notification"))["schema"]
        defaults = {k: notes["properties"][k]["default"] for k in ("fetchNews", "checkForUpdates")}
        assert defaults == {"fetchNews": "false", "checkForUpdates": False}, defaults
        # the files show when the course last changed them, not "Modified 26y ago" (a made-up 2000-01-01)
        nb = get("/api/contents/lab11/llm_as_policy.ipynb?content=0")
        year = int(nb["last_modified"][:4])
        assert year >= 2025, nb["last_modified"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # lab.sh exec'd jupyter lab: its own process group
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_the_scripts_say_what_is_missing(built, env, work):
    bare = work / "bare"
    shutil.copytree(built.folder, bare)
    proc = subprocess.run(["./setup.sh"], cwd=bare, env={**env, "PYTHON": "/nonexistent/python3"},
                          text=True, capture_output=True)
    assert proc.returncode == 1 and "no Python 3.11 or newer found" in proc.stderr, proc.stderr
    proc = subprocess.run(["./lab.sh"], cwd=bare, env=env, text=True, capture_output=True)
    assert proc.returncode == 1 and "run ./setup.sh first" in proc.stderr, proc.stderr
    (bare / "wheels" / next((bare / "wheels").iterdir()).name).unlink()
    proc = subprocess.run(["./setup.sh"], cwd=bare, env=env, text=True, capture_output=True)
    assert proc.returncode == 1 and "unpack the whole kit again" in proc.stderr, proc.stderr
    assert not (bare / ".venv").exists(), "setup.sh created an environment before finding the kit incomplete"
