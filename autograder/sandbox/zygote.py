"""Warm kernels: a process that has imported a kernel's libraries once forks each new kernel into its sandbox.

Starting a grading kernel costs seconds of CPU, nearly all of it importing: Python, ipykernel and
IPython, torch, numpy, matplotlib, the course library. A *zygote* pays that once per batch: it imports
them, outside any sandbox, never runs a line of a student's code, and then, for every kernel the
grader asks for, forks a child that *enters that kernel's own sandbox* and becomes the kernel.

The sandbox is made exactly as for a kernel started cold (autograder/sandbox/bubblewrap.py,
`bwrap_argv`): bubblewrap builds it, with its own user, mount, PID, network, IPC, UTS and cgroup
namespaces and the same read-only view of the machine, around a placeholder command (`sleep`). The
launcher then hands the zygote descriptors of that sandbox's namespaces and root; the zygote's child
joins them (setns, then chroot to the sandbox's root), forks once more so that the kernel is a
member of the sandbox's PID namespace, and the kernel process then drops every capability (the
bounding set too), sets no_new_privs, its own session, the resource limits and the kernel's
environment, closes every descriptor but its standard streams and runs `ipykernel_launcher` as
`python -m ipykernel_launcher` would. It sees what a cold kernel sees and nothing else: the processes
of its own sandbox, its own folders, no network. When the sandbox goes (bubblewrap dies with the
launcher, which the grader kills at shutdown) the kernel goes with it.

What a fork shares with the zygote, and why it is safe:
- memory: a copy of the zygote's, which holds imported modules and nothing of any student (the
  zygote runs no student code, and no student process can reach it: its socket lives in a private
  folder no sandbox shows). What a kernel changes (a module global, a patched torch) is its own copy;
  the next kernel is forked from the untouched zygote;
- three zygotes, one per kind of kernel: `student` (the feedback run: the full library), `tests`
  (the tests' kernel, which runs no student code: the full library) and `answer` (where the
  student's functions are graded: torch, numpy and ipykernel, never the course library, whose view
  the sandbox shows in its place). The tests' zygote is apart so that no student's code ever runs
  in a copy of the tests' kernel's memory (its layout included);
- what a fresh process would draw at random is drawn again: Python's `random` (its own at-fork
  hook), numpy's global generator and multiprocessing's key. Python's string-hash seed is the
  zygote's;
- caches of the file system (the import system's, tempfile's folder) are emptied.

A zygote serves a kernel only when the kernel's environment is the zygote's, apart from the
variables that name the kernel's own folders, its grader socket and its limits (`PER_KERNEL`);
otherwise, or when anything here fails, the launcher starts the kernel cold, as before, and says so
on stderr. `LLMRL_GRADE_WARM=0` turns warm kernels off.

Run as a script by its path, like bubblewrap.py (stdlib only: the kernel's environment never holds
the grader): `python zygote.py KIND SOCKET`. `Zygotes` (below) starts and stops the three.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
KINDS = ("student", "tests", "answer")
# What each kind imports before it forks (a module that fails to import is left to the kernel).
PRELOAD_BASE = ("numpy", "numpy.random", "torch", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell",
                # what IPKernelApp.initialize imports (the debugger's debugpy most of it)
                "ipykernel.debugger", "IPython.core.completerlib", "IPython.core.debugger", "IPython.core.oinspect",
                "sqlite3", "pdb", "pydoc", "tornado.gen", "tornado.locks", "tornado.queues", "faulthandler",
                "IPython.display", "matplotlib", "matplotlib.pyplot", "matplotlib_inline.config")
# The course library's modules the notebooks import (a module not listed is imported by the kernel).
PRELOAD_LIBRARY = ("llmrl", "llmrl.utils", "llmrl.live_checks", "llmrl.plotting", "llmrl.toylm", "llmrl.overopt",
                   "llmrl.rewards", "llmrl.losses", "llmrl.addition", "llmrl.sampling", "llmrl.evaluation",
                   "llmrl.sft.checkpoints", "llmrl.labs.lab11", "llmrl.labs.lab19", "llmrl.labs.lab21",
                   "llmrl.hw4.trainer", "llmrl.hw4.impl", "llmrl.hw4.char_backend", "llmrl.hw4.ablation",
                   "llmrl.hw4.plots")
PRELOAD = {"student": PRELOAD_BASE + PRELOAD_LIBRARY, "tests": PRELOAD_BASE + PRELOAD_LIBRARY,
           "answer": PRELOAD_BASE}
# Variables a kernel's environment may have of its own (bubblewrap.kernel_env, the tests' kernel's socket,
# the answer kernel's view, the limits); every other one must be the zygote's.
PER_KERNEL = ("HOME", "TMPDIR", "MPLCONFIGDIR", "IPYTHONDIR", "PWD", "LLMRL_GRADER_RPC",
              "LLMRL_SANDBOX_COURSES", "LLMRL_SANDBOX_LIBRARY", "LLMRL_GRADE_MEM_MB", "LLMRL_GRADE_CPU_S",
              "LLMRL_GRADE_FSIZE_MB")
# The namespaces a kernel joins, in the order it joins them (the user namespace first: it gives the
# rights over the others), and the descriptors a request carries after them.
NAMESPACES = ("user", "mnt", "net", "ipc", "uts", "cgroup", "pid")
MAX_REQUEST = 1 << 20


class ZygoteError(Exception):
    """A zygote cannot start or serve (one line)."""


# ----------------------------------------------------------------------------- system calls

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4


def die_with_parent() -> None:
    _check(_c().prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Every capability gone, for good: the bounding and ambient sets emptied, then the process's own
    sets, and no_new_privs (nothing it executes can gain any), as bubblewrap's --cap-drop ALL does."""
    c = _c()
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        if c.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such capability
            _check(-1, f"dropping capability {cap} from the bounding set")
    c.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _check(c.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()), "capset")
    _check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def capabilities_left() -> list[str]:
    """The capability sets of this process that are not empty (none, after drop_capabilities)."""
    left = []
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb") and int(value.strip(), 16):
            left.append(key)
    return left


# ----------------------------------------------------------------------------- the messages

def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive(sock: socket.socket, timeout: float | None = None, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (None when the other side closed) and the descriptors that came with it."""
    if timeout is not None:
        ready, _, _ = select.select([sock], [], [], timeout)
        if not ready:
            raise TimeoutError("no answer")
    data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, max_fds)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        for fd in fds:
            os.close(fd)
        raise ZygoteError("a message that is not a JSON object")
    return message, fds


def listen(path: str) -> socket.socket:
    """A socket at `path` only this account can connect to (in a private folder besides)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    return listener


def accept(listener: socket.socket, max_fds: int):
    """(connection, request, descriptors) of the next request, or None for one that is not from this
    account or not well formed."""
    conn, _ = listener.accept()
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.getuid():
            raise ZygoteError("a request from another account")
        req, fds = receive(conn, timeout=30, max_fds=max_fds)
    except (OSError, ZygoteError, TimeoutError):
        conn.close()
        return None
    if req is None:
        conn.close()
        return None
    return conn, req, fds


def reaped():
    """(pid, exit status) of each child of this process that has ended, without waiting."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, os.waitstatus_to_exitcode(status)


def adopt_stdio(fds: list[int]) -> None:
    """`fds` become this process's standard streams; every other descriptor is closed."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, 1 << 16)


def run_as_main(module: str, argv: list[str]) -> int:
    """Run `module` as `python -m module ARGV` would, in this process; its exit status."""
    import runpy

    sys.argv = ["-m"] + list(argv)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


# ----------------------------------------------------------------------------- the zygote

def preload(kind: str) -> list[str]:
    """Import what `kind` keeps warm; the modules that could not be imported."""
    import importlib

    failed = []
    for name in PRELOAD[kind]:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - the kernel imports it itself, as a cold one would
            failed.append(f"{name} ({type(e).__name__})")
    if kind == "answer":
        library = [m for m in sys.modules if m == "llmrl" or m.startswith("llmrl.")]
        if library:
            raise ZygoteError(f"the answer kernels' zygote imported the course library ({library[0]}): it must not")
    return failed


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


def serve(kind: str, path: str) -> None:
    """The zygote's loop: preload, then fork a kernel for every request, until the owner goes."""
    if kind not in KINDS:
        raise ZygoteError(f"unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    owner = os.getppid()
    started = time.monotonic()
    base_env = dict(os.environ)
    failed = preload(kind)
    # what the imports set in the environment (debugpy does), a cold kernel's imports set too
    by_imports = {k: v for k, v in os.environ.items() if base_env.get(k) != v}
    # numpy's OpenBLAS starts a thread pool at import; its own at-fork hook stops it before a fork.
    # Fork once so that it does, then check that this process is single-threaded: a fork copies only
    # the calling thread, so a thread would leave its locks held in every kernel.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    if _threads() != 1:
        raise ZygoteError(f"the {kind} zygote has {_threads()} threads after importing its modules; it forks only "
                          f"when it has one")
    # What was imported moves out of the collector's reach: a kernel's collections (the grader's own
    # before its calls, a student's) then walk only what the kernel made, and leave the shared pages
    # untouched (no copy of them per kernel).
    import gc

    gc.collect()
    gc.freeze()
    listener = listen(path)
    print(json.dumps({"ready": kind, "pid": os.getpid(), "seconds": round(time.monotonic() - started, 2),
                      "not_preloaded": failed}), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        for _ in reaped():  # the kernels' parents that have ended
            pass
        if os.getppid() != owner:
            return
        ready, _, _ = select.select([listener], [], [], 1.0)
        if not ready:
            continue
        got = accept(listener, len(NAMESPACES) + 4)
        if got is None:
            continue
        conn, req, fds = got
        child = os.fork()
        if child == 0:
            code = 70
            try:
                listener.close()
                _enter_and_run(conn, req, fds, base_env, by_imports)
            except BaseException as e:  # noqa: BLE001 - a fork of the zygote never returns into its loop
                try:
                    send(conn, {"error": f"{type(e).__name__}: {e}"[:500]})
                except OSError:
                    pass
            finally:
                os._exit(code)
        conn.close()
        for fd in fds:
            os.close(fd)


def _env_problem(env: dict, base: dict) -> str | None:
    keys = (set(env) | set(base)) - set(PER_KERNEL)
    differ = sorted(k for k in keys if env.get(k) != base.get(k))
    return f"the kernel's environment differs from the zygote's in {', '.join(differ[:5])}" if differ else None


def _enter_and_run(conn: socket.socket, req: dict, fds: list[int], base_env: dict, by_imports: dict) -> None:
    """In the zygote's child: join the sandbox, fork the kernel there, report its end."""
    n = len(NAMESPACES)
    if len(fds) != n + 4:
        raise ZygoteError(f"a request with {len(fds)} descriptors, not {n + 4}")
    problem = _env_problem(req.get("env") or {}, base_env)
    if problem:
        raise ZygoteError(problem)
    ns, root, stdio = dict(zip(NAMESPACES, fds[:n])), fds[n], fds[n + 1:]
    for name, fd in ns.items():  # a sandbox of its own: no namespace may be the zygote's
        if os.fstat(fd).st_ino == os.stat(f"/proc/self/ns/{name}").st_ino:
            raise ZygoteError(f"the {name} namespace handed over is the zygote's own, not a sandbox's")
    die_with_parent()
    c = _c()
    _check(c.setns(ns["user"], 0), "setns(user)")
    _check(c.setns(ns["mnt"], 0), "setns(mnt)")
    os.fchdir(root)
    _check(c.chroot(b"."), "chroot")
    for name in NAMESPACES[2:]:
        _check(c.setns(ns[name], 0), f"setns({name})")
    for fd in fds[:n + 1]:
        os.close(fd)
    kernel = os.fork()
    if kernel == 0:
        try:
            become_kernel(req, stdio, by_imports)
        finally:
            os._exit(70)
    for fd in stdio:
        os.close(fd)
    send(conn, {"started": kernel})
    _, status = os.waitpid(kernel, 0)
    try:
        send(conn, {"exit": os.waitstatus_to_exitcode(status)})
    except OSError:
        pass
    os._exit(0)


def become_kernel(req: dict, stdio: list[int], by_imports: dict | None = None) -> None:
    """In the sandbox: this process becomes the kernel (`python -m ipykernel_launcher ARGS`)."""
    import resource

    os.setsid()
    die_with_parent()
    adopt_stdio(stdio)
    os.chdir(req["cwd"])
    for name, value in (req.get("limits") or {}).items():
        res = getattr(resource, name)
        soft, hard = resource.getrlimit(res)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (value, value))
    drop_capabilities()
    os.environ.clear()
    os.environ.update(req["env"])
    os.environ.update(by_imports or {})
    _fresh_process_state()
    sys.path[0] = os.getcwd()  # as `python -m` puts it (ipykernel_launcher takes it out again)
    os._exit(run_as_main("ipykernel_launcher", req["argv"]))


def _fresh_process_state() -> None:
    """What a process started cold would have drawn or found afresh."""
    import importlib
    import linecache
    import tempfile

    importlib.invalidate_caches()
    sys.path_importer_cache.clear()
    linecache.clearcache()
    tempfile.tempdir = None
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        mp.current_process().authkey = os.urandom(32)


# ----------------------------------------------------------------------------- the launcher's side

def request_kernel(sock_path: str, ns_pid: int, argv: list[str], env: dict, cwd: str, limits: dict,
                   timeout: float = 30) -> socket.socket:
    """Ask the zygote at `sock_path` for a kernel inside the sandbox whose process is `ns_pid`; the
    connection, on which {"exit": code} comes when the kernel ends. ZygoteError when it cannot."""
    fds = []
    try:
        for name in NAMESPACES:
            fds.append(os.open(f"/proc/{ns_pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC))
        fds.append(os.open(f"/proc/{ns_pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        fds += [0, 1, 2]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(sock_path)
            send(sock, {"argv": argv, "env": env, "cwd": cwd, "limits": limits}, fds)
            reply, _ = receive(sock, timeout=timeout)
        except BaseException:
            sock.close()
            raise
    except (OSError, TimeoutError) as e:
        raise ZygoteError(f"the zygote did not answer ({e})") from None
    finally:
        for fd in fds[:len(NAMESPACES) + 1]:
            os.close(fd)
    if not reply or "started" not in reply:
        sock.close()
        raise ZygoteError((reply or {}).get("error") or "the zygote closed the connection")
    return sock


# ----------------------------------------------------------------------------- the grader's side

class Zygotes:
    """The three zygotes of one batch, in a private folder; `sockets` is what kernels are told
    (sandboxed_kernel.py reads it from LLMRL_GRADE_ZYGOTES)."""

    def __init__(self, folder: Path, env: dict, python: str = sys.executable):
        self.folder = folder
        # what bubblewrap sets for every kernel (bwrap_argv), here too: ipykernel reads it at import
        self.env = dict(env, JPY_PARENT_PID="1")
        self.python = python
        self.procs: dict[str, subprocess.Popen] = {}
        self.sockets: dict[str, str] = {}
        self.info: dict[str, dict] = {}

    def start(self, kinds=KINDS, timeout: float = 180) -> None:
        """Start the zygotes side by side and wait until each has imported its modules."""
        self.launch(kinds)
        self.wait(timeout)

    def launch(self, kinds=KINDS) -> None:
        """Start the zygotes side by side (`wait` waits for them)."""
        for kind in kinds:
            home = self.folder / kind
            home.mkdir(mode=0o700)
            sock = str(home / "zygote.sock")
            with open(home / "stderr.txt", "wb") as err:  # what the imports print (debugpy's warnings) stays here
                self.procs[kind] = subprocess.Popen([self.python, str(HERE), kind, sock], cwd=home, env=self.env,
                                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                                    text=True, preexec_fn=die_with_parent)
            self.sockets[kind] = sock

    def wait(self, timeout: float = 180) -> None:
        """Wait until each zygote has imported its modules; ZygoteError (all stopped) when one did not."""
        deadline = time.monotonic() + timeout
        for kind, proc in self.procs.items():
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = proc.stdout.readline() if ready else ""
            try:
                self.info[kind] = json.loads(line)
            except ValueError:
                self.stop()
                said = [ln for ln in (self.folder / kind / "stderr.txt").read_text(errors="replace").splitlines()
                        if ln.strip()]
                raise ZygoteError(f"the {kind} zygote did not start"
                                  + (f" (exit status {proc.poll()})" if proc.poll() is not None else " in time")
                                  + (f": {said[-1][:200]}" if said else "")) from None

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if proc.stdout is not None:
                proc.stdout.close()
        self.procs.clear()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: zygote.py KIND SOCKET", file=sys.stderr)
        return 2
    try:
        serve(argv[0], argv[1])
    except ZygoteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
