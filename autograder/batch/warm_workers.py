"""Warm workers: the grader's start-up paid once per batch, never a process shared by two students.

Grading one student costs a process that imports nbgrader, nbconvert and the grader (seconds of CPU
before the first cell runs) and three kernels that each import ipykernel, torch, numpy, matplotlib
and the course library. A batch pays both once:

- a *fork server* (this module run as `python -m autograder.batch.warm_workers SOCKET BATCH_FOLDER`)
  imports the grader, then forks one fresh grading process per student (`autograder.cli.grade`, with
  the arguments, environment, folder and memory limit the cold worker would have had). The server
  never grades: it only forks, and each fork grades exactly one student and exits;
- the server starts the three kernel *zygotes* (autograder/sandbox/zygote.py: the feedback run's,
  the tests' and the answer kernels'), and tells its grading processes where they are
  (LLMRL_GRADE_ZYGOTES): each kernel is then a fresh fork inside a sandbox of its own.

The batch (autograder/batch/run.py) says how many students it is about to grade (`expect`): from
`WARM_MIN` on, the server starts at once, while the batch makes its templates and runs the self-check
(for fewer, the start would cost more than it saves). jobs.run_job then uses the server once it is
ready; until then, when the server cannot start, or with LLMRL_GRADE_WARM=0, a student is graded by
a new process as before. A caller that never said (run_job alone) gets a server from its batch's
`WARM_AFTER`-th job on. LLMRL_GRADE_WARM=wait starts the server with the batch's first job and has
every job wait for it (the tests use it: every student then is graded warm).

The server goes when its batch folder is removed (the end of the batch) or the batch process dies;
its zygotes and grading processes die with it.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from autograder.sandbox import zygote as zygotes

PACKAGE_HOME = Path(__file__).resolve().parents[2]   # the folder holding autograder/
WARM_MIN = 3           # a batch expecting this many jobs starts its server at once (expect)
WARM_AFTER = 4         # without expect: the batch's job that starts its server (the first ones run cold)
START_TIMEOUT = 300    # seconds the server may take to import the grader and start its zygotes
# What the server imports before it forks: everything a grading process loads before its first kernel.
PRELOAD = ("autograder.cli.grade", "autograder.grading.one_notebook", "autograder.execution.tworun",
           "autograder.execution.nbgrader_preprocessors", "autograder.review.answer_key",
           "autograder.review.code_flags", "autograder.export.feedback_pages", "nbgrader.apps", "nbgrader.api",
           "nbgrader.preprocessors", "nbconvert.exporters", "nbconvert.preprocessors", "jupyter_client",
           "jupyter_client.manager", "nbformat", "zmq.asyncio", "sqlalchemy")


def enabled() -> bool:
    return os.environ.get("LLMRL_GRADE_WARM", "1") != "0"


class WarmUnavailable(Exception):
    """This batch's server cannot take a job (the job is then graded cold)."""


# ----------------------------------------------------------------------------- the batch's side

class Server:
    """The batch's handle on its fork server."""

    def __init__(self, batch: Path):
        self.batch = batch
        self.folder: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.sock: str | None = None
        self.info: dict = {}
        self.failed: str | None = None
        self.ready = threading.Event()

    def start(self) -> None:
        """Start the server and wait until it is ready (or failed); run in a thread of its own."""
        from autograder.sandbox import safe_files as files

        try:
            self.folder = files.scratch_dir("warm", self.batch)
            self.sock = str(self.folder / "server.sock")
            self.proc = subprocess.Popen([sys.executable, "-m", "autograder.batch.warm_workers", self.sock,
                                          str(self.batch)], cwd=PACKAGE_HOME, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, text=True, start_new_session=True)
            ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT)
            line = self.proc.stdout.readline() if ready else ""
            self.info = json.loads(line) if line.startswith("{") else {}
            if not self.info.get("ready"):
                self.failed = f"the warm workers did not start (exit status {self.proc.poll()})"
                self.stop()
        except (OSError, ValueError) as e:
            self.failed = f"the warm workers did not start ({e})"
        finally:
            self.ready.set()

    def usable(self) -> bool:
        return self.ready.is_set() and self.failed is None and self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def run(self, args: list[str], env: dict, cwd: Path, mem_mb: int, limit: float, live: set, lock) -> tuple[int, str]:
        """Grade one student in a fresh fork of the server: (exit status, stderr). The fork is killed
        (its whole process group) when it takes longer than `limit` seconds."""
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                conn.connect(self.sock)
                zygotes.send(conn, {"argv": args, "env": env, "cwd": str(cwd), "mem_mb": mem_mb}, [null, null, err_w])
                reply, _ = zygotes.receive(conn, timeout=60)
            except (OSError, TimeoutError, zygotes.ZygoteError) as e:
                raise WarmUnavailable(str(e)) from None
            finally:
                os.close(err_w)
                os.close(null)
            if not reply or not isinstance(reply.get("pid"), int):
                raise WarmUnavailable((reply or {}).get("error") or "the server closed the connection")
            job = _Forked(reply["pid"])
            with lock:
                live.add(job)
            try:
                return self._wait(conn, err_r, job, limit)
            finally:
                with lock:
                    live.discard(job)
        finally:
            conn.close()
            os.close(err_r)

    @staticmethod
    def _wait(conn: socket.socket, err_r: int, job: "_Forked", limit: float) -> tuple[int, str]:
        """Read the fork's stderr until its exit status has come and its stderr is closed (kernels
        that outlive it get 10 s more); TimeoutError after `limit` seconds, the fork killed."""
        deadline = time.monotonic() + limit
        err, code, waiting = b"", None, [conn, err_r]
        while waiting:
            now = time.monotonic()
            if now >= deadline:
                job.kill()
                raise TimeoutError
            ready, _, _ = select.select(waiting, [], [], deadline - now)
            for r in ready:
                if r is err_r:
                    chunk = os.read(err_r, 65536)
                    if not chunk:
                        waiting.remove(err_r)
                    elif len(err) < 1 << 20:
                        err += chunk
                else:
                    message, _ = zygotes.receive(conn)
                    waiting.remove(conn)
                    code = -9 if message is None else message.get("exit")
                    deadline = min(deadline, time.monotonic() + 10)
        return (int(code) if isinstance(code, int) else -9), err.decode("utf-8", "replace")


class _Forked:
    """A grading process forked by the server, as jobs._kill needs it (its process group is its pid)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.killed = False

    def kill(self) -> None:
        self.killed = True
        try:
            os.killpg(self.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass


_SERVERS: dict[Path, Server] = {}
_JOBS: dict[Path, int] = {}
_LOCK = threading.Lock()


def batch_of(work: Path) -> Path:
    """The batch's own scratch folder (the self-check grades in a folder inside it)."""
    work = Path(work)
    for p in (work, *work.parents):
        if p.name.startswith("llmrl-batch-"):
            return p
    return work


def _start(batch: Path) -> Server:
    """The batch's server, started in the background if it has none (call with _LOCK held)."""
    for b in [b for b in _SERVERS if not b.is_dir()]:  # batches that have ended
        _SERVERS.pop(b).stop()
        _JOBS.pop(b, None)
    server = _SERVERS.get(batch)
    if server is None:
        server = _SERVERS[batch] = Server(batch)
        threading.Thread(target=server.start, name="llmrl-warm-workers", daemon=True).start()
    return server


def expect(work: Path, jobs: int) -> None:
    """The batch in `work` is about to grade `jobs` students: with WARM_MIN or more its server starts
    now, while the batch makes its templates and runs its self-check."""
    if enabled() and jobs >= WARM_MIN and Path(work).is_dir():
        with _LOCK:
            _start(batch_of(work))


def server_for(work: Path) -> Server | None:
    """The ready server of the batch grading in `work`, or None (grade cold). Counts the job; without
    `expect`, the batch's WARM_AFTER-th job starts the server, in the background."""
    if not enabled():
        return None
    batch = batch_of(work)
    wait = os.environ.get("LLMRL_GRADE_WARM") == "wait"
    with _LOCK:
        _JOBS[batch] = _JOBS.get(batch, 0) + 1
        server = _SERVERS.get(batch)
        if server is None and (wait or _JOBS[batch] >= WARM_AFTER) and batch.is_dir():
            server = _start(batch)
    if server is not None and wait:
        server.ready.wait(START_TIMEOUT)
    return server if server is not None and server.usable() else None


# ----------------------------------------------------------------------------- the server

def _launch_zygotes(folder: Path) -> zygotes.Zygotes | None:
    """Start the kernel zygotes, with a kernel's environment (bubblewrap.kernel_env); None without a sandbox."""
    from autograder.sandbox import bubblewrap as sandbox

    if sandbox.bwrap_status() != "ok":
        return None
    runtime = folder / "kernel-env"
    runtime.mkdir()
    z = zygotes.Zygotes(folder, sandbox.kernel_env(runtime, {"NBGRADER_EXECUTION": "autograde"}))
    z.launch()
    return z


def _zygote_sockets(z: zygotes.Zygotes | None) -> dict[str, str]:
    if z is None:
        return {}
    try:
        z.wait()
    except zygotes.ZygoteError as e:
        print(f"warning: the warm kernels did not start ({e}); kernels start cold", file=sys.stderr, flush=True)
        return {}
    return z.sockets


def serve(sock_path: str, batch: str) -> int:
    import importlib

    from autograder.sandbox import bubblewrap as sandbox

    owner = os.getppid()
    started = time.monotonic()
    importlib.import_module("autograder.course.nbgrader_app")  # it puts the environment's bin/ on PATH: first
    z = _launch_zygotes(Path(sock_path).parent)  # they import while this process does
    for name in PRELOAD:
        importlib.import_module(name)
    sockets = _zygote_sockets(z)
    sandbox.bwrap_status.cache_clear()  # every grading process asks again, with its own environment
    pid = os.fork()  # an at-fork hook may stop a library's threads: then check there are none
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    if len(os.listdir("/proc/self/task")) != 1:
        print(json.dumps({"ready": False, "why": "the server has threads; it forks only when it has one"}), flush=True)
        return 1
    import gc

    gc.collect()
    gc.freeze()  # the imported grader stays in shared pages in every fork (no collection touches it)
    listener = zygotes.listen(sock_path)
    print(json.dumps({"ready": True, "pid": os.getpid(), "zygotes": sorted(sockets),
                      "seconds": round(time.monotonic() - started, 1)}), flush=True)
    jobs: dict[int, socket.socket] = {}
    while os.getppid() == owner and os.path.isdir(batch):
        ready, _, _ = select.select([listener], [], [], 0.2)
        got = zygotes.accept(listener, 3) if ready else None
        if got is not None:
            conn = got[0]
            child = _fork_job(*got, listener, sockets)
            if child is None:
                conn.close()
            else:
                jobs[child] = conn
        for done, code in zygotes.reaped():
            conn = jobs.pop(done, None)
            if conn is not None:
                try:
                    zygotes.send(conn, {"exit": code})
                except OSError:
                    pass
                conn.close()
    return 0


def _fork_job(conn: socket.socket, req: dict, fds: list[int], listener: socket.socket, sockets: dict) -> int | None:
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    child = os.fork()
    if child == 0:
        code = 70
        try:
            listener.close()
            conn.close()
            code = _grade_one(req, fds, sockets)
        except BaseException as e:  # noqa: BLE001 - a fork of the server never returns into its loop
            try:
                os.write(2, f"error: the warm worker failed: {type(e).__name__}: {e}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    zygotes.send(conn, {"pid": child})
    return child


def _grade_one(req: dict, fds: list[int], sockets: dict) -> int:
    """In the server's fork: become `python -m autograder.cli.grade ARGS` for one student."""
    import resource

    os.setsid()
    zygotes.die_with_parent()
    zygotes.adopt_stdio(fds)
    mem = int(req.get("mem_mb") or 0)
    if mem > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem << 20, mem << 20))
    os.environ.clear()
    os.environ.update(req["env"])
    os.environ["LLMRL_GRADE_WARM_WORKER"] = "1"  # the report says so (one_notebook.py)
    if sockets:
        os.environ["LLMRL_GRADE_ZYGOTES"] = json.dumps(sockets)
    os.chdir(req["cwd"])
    return zygotes.run_as_main("autograder.cli.grade", req["argv"])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m autograder.batch.warm_workers SOCKET BATCH_FOLDER")
    sys.exit(serve(sys.argv[1], sys.argv[2]))
