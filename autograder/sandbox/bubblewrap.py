"""Start one grading kernel inside a sandbox: `python sandbox.py CONNECTION_FILE [ipykernel args]`.

The grader (autograder/execution/sandboxed_kernel.py) launches every kernel through this file instead of
`python -m ipykernel_launcher`, with the kernel's private working folder as its current folder and
its private runtime folder (connection file, ipc sockets) next to the connection file. It

1. sets resource limits that the kernel inherits: address space (LLMRL_GRADE_MEM_MB, default
   4096), CPU seconds (LLMRL_GRADE_CPU_S, default 600), size of any file written
   (LLMRL_GRADE_FSIZE_MB, default 64), no core files;
2. when bubblewrap works (`bwrap`, Debian package `bubblewrap`), replaces itself with
   `bwrap ... python -m ipykernel_launcher` on a new, empty root file system that shows only
   (`exposed()`, all read-only):
   - the system: /usr (with the /bin, /lib ... links to it), a handful of files of /etc (the
     dynamic linker's cache, passwd, group, hosts, nsswitch.conf, localtime);
   - the Python installation and environment: sys.base_prefix, sys.prefix, the environment's
     site-packages with the folders its .pth files add (editable installs), PYTHONPATH, and the
     folder the course library `llmrl` is imported from;
   - the course's model cache (LLMRL_CACHE or ~/.cache/llmrl);
   and, writable, exactly the kernel's working folder and runtime folder. /tmp, /var/tmp and
   /dev/shm are empty and read-only; /proc is the kernel's own (its own PID namespace); there is
   no network (own network namespace), no IPC or UTS sharing, no capabilities (no remounting).
   Nothing else of the machine exists inside: not the course folder (source/, gradebook.db,
   submitted/ ...), not other course folders, not /root, /home, /work or /srv;
3. otherwise prints one warning on stderr and starts the kernel with the limits only.

The *answer kernel*, where the grader calls the student's graded functions, is started with
LLMRL_SANDBOX_LIBRARY set to a view of the course library (autograder/sandbox/library_view.py: its
modules with their declarations only). Its sandbox binds the view's `llmrl` over the real package,
hides the rest of the folder the real package sits in when that is a source folder (an editable
install's lib/: its tests, its egg-info), every other file or folder named llmrl* within a few
levels of what it shows (a wheel, an sdist, a copy), and the model cache: nothing the kernel can
read holds the library's code. Without bubblewrap the view only comes first on the kernel's path.

A folder that would expose the course's own files (the course folder itself or a parent of its
source/ on sys.path, say) is refused: `exposed()` raises SandboxError saying which.

`probe()` starts the same sandbox once with `python -c "import llmrl, torch, numpy, ipykernel"`;
the grader calls it before the first student and stops with its one-line answer when the course
library cannot be imported there.

LLMRL_SANDBOX=0 turns the sandbox off on purpose (limits stay).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the course folder, which holds autograder/
# The environment's python as a plain absolute path (not resolved: a venv is found through it).
PYTHON = os.path.normpath(os.path.abspath(sys.executable))
# The files of /etc a Python process needs (the dynamic linker's cache, user and host names).
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "hosts", "nsswitch.conf", "localtime",
       "host.conf", "fonts")
# What a kernel's environment keeps of the grader's (besides what the grader sets itself).
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "MKL_CBWR", "NBGRADER_EXECUTION", "LLMRL_FAST", "LLMRL_GRADE_MEM_MB", "LLMRL_GRADE_CPU_S",
            "LLMRL_GRADE_FSIZE_MB", "LLMRL_SANDBOX")


class SandboxError(Exception):
    """The sandbox cannot be set up as it must be (one line, names the cause)."""


def _mb(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def limits() -> dict[str, int]:
    return {"mem_mb": _mb("LLMRL_GRADE_MEM_MB", 4096), "cpu_s": _mb("LLMRL_GRADE_CPU_S", 600),
            "fsize_mb": _mb("LLMRL_GRADE_FSIZE_MB", 64)}


def limit_values() -> dict[str, int]:
    """The resource limits a kernel gets, by the name of the resource module's constant."""
    lim = limits()
    values = {"RLIMIT_AS": lim["mem_mb"] << 20, "RLIMIT_CPU": lim["cpu_s"], "RLIMIT_FSIZE": lim["fsize_mb"] << 20,
              "RLIMIT_CORE": 0}
    return {k: v for k, v in values.items() if v > 0 or k == "RLIMIT_CORE"}


def apply_limits() -> None:
    for name, value in limit_values().items():
        res = getattr(resource, name)
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
        proc = subprocess.run([exe, "--ro-bind", "/usr", "/usr", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
                               "--cap-drop", "ALL", "--die-with-parent", "--symlink", "usr/bin", "/bin",
                               "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "/usr/bin/true"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap does not start: {e}"
    if proc.returncode != 0:
        return "bwrap does not work here: " + (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
    return "ok"


def library_view() -> Path | None:
    """The folder holding the answer kernel's view of the library (LLMRL_SANDBOX_LIBRARY), or None."""
    v = os.environ.get("LLMRL_SANDBOX_LIBRARY")
    if not v:
        return None
    p = Path(v)
    if not (p / "llmrl" / "_grading_view.py").is_file():
        raise SandboxError(f"LLMRL_SANDBOX_LIBRARY={v} holds no view of the course library (llmrl/_grading_view.py)")
    return p


def cache_dir() -> Path:
    """The course's model cache, as llmrl.sft.checkpoints finds it."""
    return Path(os.environ.get("LLMRL_CACHE") or Path.home() / ".cache" / "llmrl").resolve()


def _library_dirs() -> list[Path]:
    """Folders the course library is imported from (an editable install's source folder too)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("llmrl")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return []
    locations = list(spec.submodule_search_locations or []) or ([str(Path(spec.origin).parent)] if spec.origin else [])
    return [Path(p).resolve() for p in locations]


def _forbidden(course_roots: list[Path]) -> list[Path]:
    out = []
    for r in course_roots:
        r = r.resolve()
        out += [r / "source", r / "submitted", r / "autograded", r / "feedback", r / "gradebook.db", r / "notebooks",
                r / ".git", r / "release"]
    return out


@lru_cache(maxsize=8)
def _exposed(course_roots: tuple[Path, ...]) -> tuple[Path, ...]:
    found: list[Path] = []

    def add(p: Path | str) -> None:
        p = Path(p)
        if not p.is_absolute() or not p.exists():
            return
        p = p.resolve()
        if p == Path("/"):
            raise SandboxError("the Python path includes / itself; the sandbox cannot show only the environment")
        found.append(p)

    add(sys.base_prefix)
    add(sys.base_exec_prefix)
    add(sys.prefix)
    add(sys.exec_prefix)
    add(Path(sys.executable).resolve().parent.parent)
    add(Path(PYTHON).parent.parent)
    # The environment's site-packages and the folders its .pth files add (editable installs), not
    # this process's sys.path (a test runner or a script puts its own folders there).
    import site

    # A .pth line "import site; site.addsitedir('/x')" (a thin environment on another one's packages,
    # as hub/deploy/environment.py builds) adds /x and runs /x's own .pth files: follow those too.
    addsitedir = re.compile(r"""site\.addsitedir\(\s*(['"])([^'"]+)\1\s*\)""")
    pending, seen = [Path(d) for d in site.getsitepackages()], set()
    while pending:
        d = pending.pop(0)
        if d in seen:
            continue
        seen.add(d)
        add(d)
        for pth in sorted(d.glob("*.pth")) if d.is_dir() else []:
            for line in pth.read_text(errors="replace").splitlines():
                line = line.strip()
                if line.startswith(("import ", "import\t")):
                    pending += [Path(m.group(2)) for m in addsitedir.finditer(line) if os.path.isabs(m.group(2))]
                elif line and not line.startswith("#"):
                    add(line if os.path.isabs(line) else d / line)
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        add(entry)
    for d in _library_dirs():
        add(d.parent)
    # Keep the outermost folders only; /usr is bound anyway.
    keep: list[Path] = []
    for p in sorted(set(found), key=lambda q: len(q.parts)):
        if p == Path("/usr") or Path("/usr") in p.parents:
            continue
        if not any(k == p or k in p.parents for k in keep):
            keep.append(p)
    bad = _forbidden(list(course_roots))
    for p in keep:
        for f in bad:
            if f == p or p in f.parents:
                raise SandboxError(f"{p} is on the Python path and holds the course's {f.name}: the sandbox would "
                                   f"show it to students; install the course library (pip install -e .) instead of "
                                   f"putting the course folder on the path")
    return tuple(keep)


def exposed(course_roots: list[Path] | None = None, answer_kernel: bool = False) -> list[Path]:
    """The folders (besides /usr and a few /etc files) a sandboxed kernel sees, all read-only (the
    answer kernel: without the model cache, which it has no use for)."""
    roots = tuple(sorted({Path(r).resolve() for r in (course_roots or [ROOT])}))
    return list(_exposed(roots)) + ([cache_dir()] if cache_dir().is_dir() and not answer_kernel else [])


def _is_site_dir(p: Path) -> bool:
    return p.name in ("site-packages", "dist-packages")


def library_copies(roots: list[Path], depth: int = 4) -> list[Path]:
    """Files and folders named llmrl* (any case) within `depth` levels of `roots`: a wheel, an sdist,
    a copy of the package, its metadata. Python packages other than llmrl are not entered (nothing
    the grader installs puts a copy of the library inside torch)."""
    found: list[Path] = []
    todo = [(Path(r), 0) for r in roots]
    seen: set[Path] = set()
    while todo:
        d, k = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.name.lower().startswith("llmrl"):
                found.append(Path(e.path))
            elif k < depth and e.is_dir(follow_symlinks=False) and not os.path.exists(os.path.join(e.path, "__init__.py")):
                todo.append((Path(e.path), k + 1))
    return sorted(found)


def _answer_binds(view: Path, shown: list[Path]) -> list[str]:
    """The binds that put the view in place of the course library, and hide every other copy of it."""
    pkgs = _library_dirs()
    if not pkgs:
        raise SandboxError("the course library llmrl is not installed: the answer kernel has no library to show")
    argv: list[str] = []
    hidden: set[Path] = set()
    for pkg in pkgs:
        parent = pkg.parent
        if not pkg.is_dir():
            raise SandboxError(f"llmrl is imported from {pkg}, not a folder: the answer kernel cannot hide it")
        if _is_site_dir(parent):
            argv += ["--ro-bind", str(view / "llmrl"), str(pkg)]
        else:  # a source folder (an editable install's lib/): nothing of it but the view
            argv += ["--tmpfs", str(parent), "--ro-bind", str(view / "llmrl"), str(pkg), "--remount-ro", str(parent)]
            hidden.add(parent)
        hidden.add(pkg)
    for p in library_copies([r for r in shown if not any(h == r or h in r.parents for h in hidden)]):
        if p in hidden or any(h in p.parents for h in hidden):
            continue
        if p.is_dir() and not p.is_symlink():
            argv += ["--tmpfs", str(p), "--remount-ro", str(p)]
        else:
            argv += ["--ro-bind", "/dev/null", str(p)]
    return argv


def aliases() -> list[tuple[Path, Path]]:
    """(real folder, the path it is reached by) for an environment reached through a symbolic link:
    the kernel is started as PYTHON, so that path must exist inside too."""
    out = []
    for p in {Path(PYTHON).parent.parent, Path(os.path.normpath(os.path.abspath(sys.prefix)))}:
        if p.exists() and p.resolve() != p:
            out.append((p.resolve(), p))
    return out


def bwrap_argv(workdir: Path, runtime: Path, course_roots: list[Path] | None = None,
               view: Path | None = None) -> list[str]:
    """bubblewrap's arguments for a kernel; `view`: the answer kernel's view of the library."""
    argv = ["bwrap", "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / name
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), str(p)]
    for name in ETC:
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/dev/shm"]
    shown = exposed(course_roots, answer_kernel=view is not None)
    for p in shown:
        argv += ["--ro-bind", str(p), str(p)]
    for real, alias in aliases():
        argv += ["--ro-bind", str(real), str(alias)]
    if view is not None:
        argv += _answer_binds(view, shown) + ["--unsetenv", "LLMRL_SANDBOX_LIBRARY"]
    argv += ["--bind", str(workdir), str(workdir), "--bind", str(runtime), str(runtime),
             "--setenv", "JPY_PARENT_PID", "1",  # its real parent is not visible in the new PID namespace
             "--chdir", str(workdir)]
    for path in ("/tmp", "/var/tmp", "/dev/shm", "/"):
        argv += ["--remount-ro", path]
    return argv


def kernel_env(runtime: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a kernel: a few variables of the grader's, the private folders,
    the model cache. No tokens, no paths of the machine beyond what the sandbox shows."""
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PATH"] = os.pathsep.join([str(Path(PYTHON).parent)] + env["PATH"].split(os.pathsep))
    # MKL's AVX2 path on every x86 processor, as `import llmrl` sets it (lib/llmrl/__init__.py): a kernel
    # computes the reference's numbers on any grading machine, and a warm kernel, forked from a zygote
    # that imported llmrl, has the same environment as a cold one
    env.setdefault("MKL_CBWR", "AVX2")
    env.update({"HOME": str(runtime / "home"), "TMPDIR": str(runtime / "tmp"), "MPLCONFIGDIR": str(runtime / "mpl"),
                "IPYTHONDIR": str(runtime / "ipython"), "LLMRL_CACHE": str(cache_dir()), "PYTHONDONTWRITEBYTECODE": "1",
                "MPLBACKEND": "module://matplotlib_inline.backend_inline"})
    env.update(extra or {})
    return env


def prepare_runtime(runtime: Path) -> None:
    for sub in ("tmp", "mpl", "ipython", "home"):
        (runtime / sub).mkdir(exist_ok=True)
    # matplotlib's font list, so that the kernel does not rebuild it (seconds) in its empty config dir
    for f in (Path.home() / ".cache" / "matplotlib").glob("fontlist-*.json"):
        shutil.copyfile(f, runtime / "mpl" / f.name)


def _roots_from_env() -> list[Path]:
    return [Path(p) for p in os.environ.get("LLMRL_SANDBOX_COURSES", "").split(os.pathsep) if p] or [ROOT]


def main(argv: list[str]) -> None:
    zygote = argv.pop(0).partition("=")[2] if argv and argv[0].startswith("--zygote=") else None
    if not argv:
        sys.exit("usage: sandbox.py [--zygote=SOCKET] CONNECTION_FILE [ipykernel arguments]")
    connection_file = Path(argv[0]).resolve()
    runtime = connection_file.parent
    workdir = Path.cwd().resolve()
    prepare_runtime(runtime)
    kernel = [PYTHON, "-m", "ipykernel_launcher", "-f", str(connection_file), *argv[1:]]
    if zygote:
        code = _warm(kernel, workdir, runtime, zygote)
        if code is not None:
            sys.exit(code)
    _exec(kernel, workdir, runtime)


def _sandbox_env(argv: list[str]) -> dict[str, str]:
    """The environment a command inside the sandbox `argv` gets: this one with bubblewrap's
    --setenv and --unsetenv applied."""
    env = dict(os.environ)
    i = 0
    while i < len(argv):
        if argv[i] == "--setenv":
            env[argv[i + 1]] = argv[i + 2]
            i += 3
            continue
        if argv[i] == "--unsetenv":
            env.pop(argv[i + 1], None)
            i += 2
            continue
        if argv[i] == "--chdir":
            env["PWD"] = argv[i + 1]  # as bubblewrap sets it
            i += 2
            continue
        i += 1
    return env


def _warm(cmd: list[str], workdir: Path, runtime: Path, sock: str) -> int | None:
    """Run the kernel `cmd` as a fork of the zygote at `sock` (autograder/sandbox/zygote.py) inside a
    sandbox bubblewrap makes exactly as for a cold kernel, around a placeholder that only waits; the
    kernel's exit status, or None when the zygote cannot serve (the caller then starts it cold)."""
    if bwrap_status() != "ok" or os.environ.get("LLMRL_GRADE_WARM") == "0":
        return None
    try:
        argv = bwrap_argv(workdir, runtime, _roots_from_env(), library_view())
    except SandboxError:
        return None  # the cold start reports it
    try:
        from autograder.sandbox import zygote
    except ImportError:  # run as a script: this file's folder is on the path
        import zygote
    zygote.die_with_parent()  # the grader goes: this launcher, the sandbox and the kernel go too
    apply_limits()
    ready_r, ready_w = os.pipe()
    info_r, info_w = os.pipe()
    hold_r, hold_w = os.pipe()  # the placeholder waits until this launcher is gone
    # says it runs (a line on its stdout), then reads its stdin, which nothing writes, until the launcher goes
    holder = ["/bin/sh", "-c", "echo; read x"]
    proc = subprocess.Popen(["bwrap", "--info-fd", str(info_w)] + argv[1:] + holder, stdin=hold_r, stdout=ready_w,
                            pass_fds=(info_w,))
    for fd in (ready_w, info_w, hold_r):
        os.close(fd)
    conn = None
    try:
        info = _read_all(info_r, 30)
        ready = _read_all(ready_r, 30, first=True)
        pid = json.loads(info)["child-pid"] if info and ready else None
        if not isinstance(pid, int):
            raise zygote.ZygoteError("bubblewrap did not start the sandbox")
        conn = zygote.request_kernel(sock, pid, cmd[3:], _sandbox_env(argv), str(workdir), limit_values())
        while True:
            message, _ = zygote.receive(conn)
            if message is None:
                return 1  # the zygote's child is gone without a status: the kernel is gone too
            if "exit" in message:
                return int(message["exit"])
    except (zygote.ZygoteError, OSError, ValueError, KeyError) as e:
        if conn is None:
            print(f"warning: a warm kernel could not be started ({e}); starting it cold", file=sys.stderr, flush=True)
            return None
        return 1
    finally:
        if conn is not None:
            conn.close()
        proc.kill()
        proc.wait()
        for fd in (info_r, ready_r, hold_w):
            os.close(fd)


def _read_all(fd: int, timeout: float, first: bool = False) -> bytes:
    """What `fd` gives until it is closed (or, with `first`, its first bytes), within `timeout` seconds."""
    import select

    out, deadline = b"", time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return out
        chunk = os.read(fd, 65536)
        if not chunk or (first and chunk):
            return out + chunk
        out += chunk


def _exec(cmd: list[str], workdir: Path, runtime: Path) -> None:
    apply_limits()
    status = bwrap_status()
    try:
        view = library_view()
    except SandboxError as e:
        sys.exit(f"error: {e}")
    if status != "ok":
        print(f"warning: grading kernel runs WITHOUT a sandbox ({status}); resource limits only"
              + ("; the course library's view only comes first on its path" if view else ""),
              file=sys.stderr, flush=True)
        if view is not None:
            os.environ["PYTHONPATH"] = os.pathsep.join([str(view)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        os.execv(cmd[0], cmd)
    try:
        full = bwrap_argv(workdir, runtime, _roots_from_env(), view) + cmd
    except SandboxError as e:
        sys.exit(f"error: {e}")
    os.execvp(full[0], full)


PROBE = ("import sys, llmrl, numpy, torch, ipykernel, matplotlib; "
         "print(llmrl.__file__)")
# In the answer kernel's sandbox: the library imports as the view, and nothing on the kernel's path
# holds another copy of it (a folder or file named llmrl*, an archive with an llmrl/ inside).
PROBE_ANSWER = r"""
import os, sys, zipfile
import numpy, torch, ipykernel
import llmrl, llmrl.sampling
from llmrl import _grading_view
if not isinstance(llmrl.sampling.gather_logprobs, _grading_view.Absent):
    sys.exit("the answer kernel's llmrl still holds the library's functions")
pkg = os.path.dirname(os.path.abspath(llmrl.__file__))
found = []
for entry in [p for p in sys.path if p] + [sys.prefix, os.path.expanduser("~")]:
    if os.path.isfile(entry):
        try:
            if any(n.split("/")[0].lower().startswith("llmrl") for n in zipfile.ZipFile(entry).namelist()):
                found.append(entry)
        except (OSError, zipfile.BadZipFile):
            pass
        continue
    for d, dirs, files in os.walk(entry):
        if d.count(os.sep) - entry.count(os.sep) >= 3:
            dirs[:] = []
        for name in dirs + files:
            path = os.path.join(d, name)
            if name.lower().startswith("llmrl") and os.path.abspath(path) != pkg and os.path.getsize(path) > 0:
                if os.path.isdir(path) and not os.listdir(path):
                    continue
                found.append(path)
        dirs[:] = [x for x in dirs if not x.lower().startswith("llmrl") and not os.path.exists(os.path.join(d, x, "__init__.py"))]
if found:
    sys.exit("the answer kernel can still see copies of the course library: " + ", ".join(sorted(set(found))[:5]))
print(llmrl.__file__)
"""


def probe(course_roots: list[Path] | None = None, timeout: float = 120, view: Path | None = None) -> str | None:
    """None when the course library imports inside the sandbox, else one line saying why not. With
    `view` (the answer kernel's view of the library): None when the answer kernel's sandbox shows the
    view and no other copy of the library."""
    from autograder.sandbox.safe_files import rmtree, scratch_dir

    if bwrap_status() != "ok":
        return None  # no sandbox: the kernel sees what the grader sees
    runtime = scratch_dir("probe")
    try:
        prepare_runtime(runtime)
        work = runtime / "work"
        work.mkdir()
        roots = course_roots or [ROOT]
        try:
            argv = bwrap_argv(work, runtime, roots, view)
        except SandboxError as e:
            return str(e)
        env = kernel_env(runtime, {"NBGRADER_EXECUTION": "autograde"})  # exactly a grading kernel's
        env["LLMRL_SANDBOX_COURSES"] = os.pathsep.join(map(str, roots))
        try:
            proc = subprocess.run(argv + [PYTHON, "-c", PROBE if view is None else PROBE_ANSWER], capture_output=True,
                                  text=True, timeout=timeout, env=env, preexec_fn=apply_limits)
        except subprocess.TimeoutExpired:
            return f"importing the course library inside the sandbox took longer than {timeout:.0f} s"
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else f"exit status {proc.returncode}"
            if view is not None:
                return f"the answer kernel's sandbox is not as it must be: {last}"
            return (f"the course library cannot be imported inside the grading sandbox ({last}); the sandbox "
                    f"shows {', '.join(map(str, exposed(roots)))}: install llmrl into the environment the "
                    f"grader runs with ({sys.prefix})")
        return None
    finally:
        rmtree(runtime)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        from autograder.sandbox import library_view

        roots = [Path(p) for p in sys.argv[2:]] or None
        try:
            problem = probe(roots) or probe(roots, view=library_view.build())
        except library_view.ViewError as e:
            problem = str(e)
        if problem:
            print(problem)
        sys.exit(1 if problem else 0)
    main(sys.argv[1:])
