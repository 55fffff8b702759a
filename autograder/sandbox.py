"""Start one grading kernel inside a sandbox: `python sandbox.py CONNECTION_FILE [ipykernel args]`.

The grader (autograder/safety.py, SafeExecute) launches every student kernel through this file
instead of `python -m ipykernel_launcher`. It runs in the notebook's folder (the kernel's working
directory) and

1. sets resource limits that the kernel inherits: address space (LLMRL_GRADE_MEM_MB, default
   4096), CPU seconds (LLMRL_GRADE_CPU_S, default 600), size of any file written
   (LLMRL_GRADE_FSIZE_MB, default 64), no core files;
2. when bubblewrap works (`bwrap`, Debian package `bubblewrap`), replaces itself with
   `bwrap ... python -m ipykernel_launcher` so that the kernel has
   - no network (its own network namespace: only a loopback device),
   - its own PID, IPC and UTS namespaces and no capabilities (it cannot remount anything),
   - a read-only view of the machine, with the course directory (source/, release/, gradebook.db,
     submitted/, autograded/, feedback/, notebooks/, .git ...) and /tmp replaced by empty folders,
     except the course library (lib/) and environment (.venv/), read-only,
   - exactly two writable folders: its own working directory and its private runtime folder
     (the connection file and the ipc sockets the grader talks through: TCP cannot cross the
     network namespace, so the grader uses jupyter's ipc transport);
3. otherwise prints one warning on stderr and starts the kernel with the limits only.

LLMRL_SANDBOX=0 turns the sandbox off on purpose (limits stay); LLMRL_SANDBOX_HIDE adds
os.pathsep-separated folders to hide (the grader adds its scratch course there).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VISIBLE = ("lib", ".venv")  # what a kernel needs from the course directory (read-only)


def _mb(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def limits() -> dict[str, int]:
    return {"mem_mb": _mb("LLMRL_GRADE_MEM_MB", 4096), "cpu_s": _mb("LLMRL_GRADE_CPU_S", 600),
            "fsize_mb": _mb("LLMRL_GRADE_FSIZE_MB", 64)}


def apply_limits() -> None:
    lim = limits()
    for res, value in ((resource.RLIMIT_AS, lim["mem_mb"] << 20), (resource.RLIMIT_CPU, lim["cpu_s"]),
                       (resource.RLIMIT_FSIZE, lim["fsize_mb"] << 20), (resource.RLIMIT_CORE, 0)):
        if value > 0:
            soft, hard = resource.getrlimit(res)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(res, (value, value))


@lru_cache(maxsize=1)
def bwrap_status() -> str:
    """'ok', or why bubblewrap cannot be used here (one line)."""
    if os.environ.get("LLMRL_SANDBOX", "1") == "0":
        return "turned off with LLMRL_SANDBOX=0"
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap not found (apt-get install bubblewrap)"
    try:
        proc = subprocess.run([exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
                               "--cap-drop", "ALL", "--die-with-parent", "true"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap does not start: {e}"
    if proc.returncode != 0:
        return "bwrap does not work here: " + (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
    return "ok"


def bwrap_argv(workdir: Path, runtime: Path, hide: list[Path]) -> list[str]:
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--setenv", "JPY_PARENT_PID", "1",  # its real parent is not visible in the new PID namespace: no polling
            "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/dev/shm"]
    root = ROOT.resolve()
    argv += ["--tmpfs", str(root)]
    for name in VISIBLE:
        if (root / name).exists():
            argv += ["--ro-bind", str(root / name), str(root / name)]
    for h in hide:
        if h.is_dir():
            argv += ["--tmpfs", str(h)]
    # The course's cached models (built by the grader beforehand, llmrl.cache): readable, wherever
    # they live, even under a folder emptied above (/tmp, say); never writable.
    cache = Path(os.environ.get("LLMRL_CACHE") or Path.home() / ".cache" / "llmrl").resolve()
    if cache.is_dir():
        argv += ["--ro-bind", str(cache), str(cache)]
    # The empty folders are read-only too (writes there would only fill memory): remount after the binds.
    readonly = ["/tmp", "/var/tmp", str(root)] + [str(h) for h in hide if h.is_dir()]
    argv += ["--bind", str(workdir), str(workdir), "--bind", str(runtime), str(runtime),
             "--setenv", "TMPDIR", str(runtime / "tmp"), "--setenv", "MPLCONFIGDIR", str(runtime / "mpl"),
             "--setenv", "IPYTHONDIR", str(runtime / "ipython"),
             "--chdir", str(workdir)]
    for path in readonly:
        argv += ["--remount-ro", path]
    return argv


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: sandbox.py CONNECTION_FILE [ipykernel arguments]")
    connection_file = Path(argv[0]).resolve()
    runtime = connection_file.parent
    workdir = Path.cwd().resolve()
    for sub in ("tmp", "mpl", "ipython"):
        (runtime / sub).mkdir(exist_ok=True)
    # matplotlib's font list, so that the kernel does not rebuild it (seconds) in its empty config dir
    for f in (Path.home() / ".cache" / "matplotlib").glob("fontlist-*.json"):
        shutil.copyfile(f, runtime / "mpl" / f.name)
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", str(connection_file), *argv[1:]]
    apply_limits()
    status = bwrap_status()
    if status != "ok":
        print(f"warning: grading kernel runs WITHOUT a sandbox ({status}); resource limits only",
              file=sys.stderr, flush=True)
        os.environ["MPLCONFIGDIR"] = str(runtime / "mpl")
        os.execv(sys.executable, kernel)
    hide = [Path(p).resolve() for p in os.environ.get("LLMRL_SANDBOX_HIDE", "").split(os.pathsep) if p]
    full = bwrap_argv(workdir, runtime, hide) + kernel
    os.execvp(full[0], full)


if __name__ == "__main__":
    main(sys.argv[1:])
