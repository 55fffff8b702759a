"""Sandboxed kernels for grading, and an executor with a hard cap on everything a kernel sends.

`Kernel` starts one IPython kernel through autograder/sandbox/bubblewrap.py in a private scratch folder of
its own (`work/`, its current folder, and `rt/`, the connection file and ipc sockets), with a clean
environment (sandbox.kernel_env). Nothing the kernel writes there is ever read back by the grader:
the folder is removed when the kernel stops.

Every ZeroMQ socket the grader opens to a kernel refuses single messages larger than
`MSG_CAP[channel]` (ZMQ_MAXMSGSIZE: the oversized message is dropped, the grader's memory does not
grow with it) and queues at most `RCVHWM` messages, so a kernel that prints 100 MB in one call or
floods its output cannot take the grader's memory with it.

`Kernel.execute` runs one piece of code with a timeout (interrupt first, then report it as hung),
notices a kernel that died, and, given an `Outputs` collector, builds the notebook outputs of that
cell: streams merged, display updates and clear_output applied, with at most `cell_cap` bytes kept
per cell and `notebook_cap` per notebook (a display update counts against the cell that owns the
display, so updates cannot grow an old cell past its cap).
"""

from __future__ import annotations

import asyncio
import queue
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.asyncio
from autograder.sandbox import bubblewrap as sandbox
from autograder.sandbox import safe_files as files


# Run as a script by its path (stdlib only on that path): the kernel's environment never holds the grader.
SANDBOX = Path(__file__).resolve().parents[1] / "sandbox" / "bubblewrap.py"
MSG_CAP = {zmq.SUB: 4 << 20, "default": 32 << 20}
RCVHWM = 32
KERNEL_CPU = "sum(__import__('resource').getrusage(__import__('resource').RUSAGE_SELF)[:2])"


class CappedContext(zmq.asyncio.Context):
    """A ZeroMQ context whose sockets refuse oversized messages and queue few."""

    def socket(self, socket_type, *args, **kwargs):
        s = super().socket(socket_type, *args, **kwargs)
        s.setsockopt(zmq.MAXMSGSIZE, MSG_CAP.get(socket_type, MSG_CAP["default"]))
        s.setsockopt(zmq.RCVHWM, RCVHWM)
        return s


@dataclass
class Reply:
    status: str                   # ok, error, aborted, timeout (interrupted), hung, died
    ename: str | None = None
    evalue: str | None = None
    execution_count: int | None = None
    user_expressions: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ----------------------------------------------------------------------------- outputs

def _size(x) -> int:
    if isinstance(x, str):
        return len(x)
    if isinstance(x, dict):
        return sum(len(str(k)) + _size(v) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return sum(_size(v) for v in x)
    return 8


class Outputs:
    """The outputs of one notebook's cells, built from a kernel's messages, capped."""

    def __init__(self, cell_cap: int = 500_000, notebook_cap: int = 5_000_000):
        self.cell_cap = cell_cap
        self.notebook_cap = notebook_cap
        self.total = 0
        self.displays: dict[str, list] = {}   # display_id -> [(cell, node)]
        self.cells: list[CellOutputs] = []

    def cell(self) -> "CellOutputs":
        c = CellOutputs(self)
        self.cells.append(c)
        return c


class CellOutputs:
    def __init__(self, book: Outputs):
        self.book = book
        self.outputs: list[dict] = []
        self.sizes: list[int] = []
        self.used = 0
        self.dropped = 0
        self.clear_pending = False

    def _room(self, n: int) -> bool:
        return self.used + n <= self.book.cell_cap and self.book.total + n <= self.book.notebook_cap

    def _drop(self, n: int) -> None:
        if not self.dropped:
            self.outputs.append({"output_type": "stream", "name": "stderr",
                                 "text": f"\n[grader: output beyond {self.book.cell_cap} bytes of this cell "
                                         f"(or {self.book.notebook_cap} of the notebook) dropped]\n"})
            self.sizes.append(0)
        self.dropped += n

    def _add(self, node: dict, n: int) -> None:
        self.outputs.append(node)
        self.sizes.append(n)
        self.used += n
        self.book.total += n

    def _clear(self) -> None:
        gone = {id(node) for node in self.outputs}
        for did, owners in list(self.book.displays.items()):
            self.book.displays[did] = [(c, node) for c, node in owners if id(node) not in gone]
        self.book.total -= self.used
        self.outputs, self.sizes, self.used, self.dropped = [], [], 0, 0

    def handle(self, msg_type: str, content: dict) -> None:
        if msg_type == "clear_output":
            if content.get("wait"):
                self.clear_pending = True
            else:
                self._clear()
            return
        if msg_type == "update_display_data":
            self._update(content)
            return
        if msg_type not in ("stream", "display_data", "execute_result", "error"):
            return
        if self.clear_pending:
            self._clear()
            self.clear_pending = False
        if msg_type == "stream":
            text, name = content.get("text"), content.get("name")
            if not isinstance(text, str) or name not in ("stdout", "stderr"):
                return
            if not self._room(len(text)):
                self._drop(len(text))
                return
            if self.outputs and self.outputs[-1].get("output_type") == "stream" and self.outputs[-1]["name"] == name \
                    and self.sizes[-1] > 0:
                self.outputs[-1]["text"] += text
                self.sizes[-1] += len(text)
                self.used += len(text)
                self.book.total += len(text)
            else:
                self._add({"output_type": "stream", "name": name, "text": text}, len(text))
            return
        if msg_type == "error":
            tb = content.get("traceback") if isinstance(content.get("traceback"), list) else []
            node = {"output_type": "error", "ename": str(content.get("ename", ""))[:200],
                    "evalue": str(content.get("evalue", ""))[:2000],
                    "traceback": [str(x)[:2000] for x in tb[:50]]}
            n = _size(node)
            if self._room(n):
                self._add(node, n)
            else:
                node["traceback"] = []
                self._add(node, _size(node))  # the error itself is always kept
            return
        data, metadata = content.get("data"), content.get("metadata") or {}
        if not isinstance(data, dict) or not isinstance(metadata, dict):
            return
        node = {"output_type": msg_type, "data": data, "metadata": metadata}
        if msg_type == "execute_result":
            node["execution_count"] = content.get("execution_count")
        n = _size(data) + _size(metadata)
        if not self._room(n):
            self._drop(n)
            return
        self._add(node, n)
        did = (content.get("transient") or {}).get("display_id") if isinstance(content.get("transient"), dict) else None
        if isinstance(did, str):
            self.book.displays.setdefault(did, []).append((self, node))

    def _update(self, content: dict) -> None:
        transient = content.get("transient") if isinstance(content.get("transient"), dict) else {}
        did = transient.get("display_id")
        data, metadata = content.get("data"), content.get("metadata") or {}
        if not isinstance(did, str) or not isinstance(data, dict) or not isinstance(metadata, dict):
            return
        n = _size(data) + _size(metadata)
        for owner, node in self.book.displays.get(did, []):
            i = next((k for k, o in enumerate(owner.outputs) if o is node), None)
            if i is None:
                continue
            delta = n - owner.sizes[i]
            if not owner._room(delta):
                owner._drop(n)
                continue
            node["data"], node["metadata"] = data, metadata
            owner.sizes[i] += delta
            owner.used += delta
            owner.book.total += delta


# ----------------------------------------------------------------------------- kernel

class Kernel:
    """One sandboxed kernel in its own scratch folder."""

    def __init__(self, label: str, parent: Path | None = None, env: dict | None = None,
                 course_roots: list[Path] | None = None, use_sandbox: bool = True, view: Path | None = None):
        """`view`: the answer kernel's view of the course library (autograder/sandbox/library_view.py),
        which its sandbox shows in place of the library."""
        self.label = label
        self.view = view
        # which zygote may start it warm (autograder/sandbox/zygote.py): the answer kernel, the tests' or the student's
        self.role = "answer" if view is not None else "tests" if label == "tests" else "student"
        self.dir = files.scratch_dir("kernel", parent)
        self.work = self.dir / "work"
        self.runtime = self.dir / "rt"
        self.work.mkdir()
        self.runtime.mkdir(mode=0o700)
        self.env_extra = dict(env or {})
        self.course_roots = course_roots
        self.use_sandbox = use_sandbox
        self.km = None
        self.kc = None
        self.ctx = None
        self.dead = False
        self.start_s = 0.0   # seconds from launch to the kernel's first answer (the benchmark's "kernel start")
        self.warm = False    # asked of a zygote (the launcher starts it cold, and says so, when that fails)

    async def start(self, timeout: float = 120) -> None:
        from jupyter_client import AsyncKernelManager
        from jupyter_client.kernelspec import KernelSpec

        started = time.monotonic()
        km = AsyncKernelManager(kernel_name="python3")
        km.transport = "ipc"
        km.ip = str(self.runtime / "ipc")
        km.connection_file = str(self.runtime / "kernel.json")
        zygote = warm_zygote(self.role) if self.use_sandbox else None
        self.warm = zygote is not None
        argv = ([sandbox.PYTHON, str(SANDBOX)] + ([f"--zygote={zygote}"] if zygote else []) + ["{connection_file}"]
                if self.use_sandbox else [sandbox.PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
        km._kernel_spec = KernelSpec(argv=argv + ["--InteractiveShell.xmode=Minimal"],
                                     display_name="Python 3 (llmrl grader)", language="python",
                                     interrupt_mode="message")
        if not self.use_sandbox:
            sandbox.prepare_runtime(self.runtime)
        env = sandbox.kernel_env(self.runtime, self.env_extra)
        if self.view is not None:
            env["LLMRL_SANDBOX_LIBRARY"] = str(self.view)
            if not self.use_sandbox:
                env["PYTHONPATH"] = ":".join([str(self.view)] + [p for p in env.get("PYTHONPATH", "").split(":") if p])
        if self.course_roots:
            env["LLMRL_SANDBOX_COURSES"] = ":".join(str(p) for p in self.course_roots)
        self.km = km
        await km.start_kernel(cwd=str(self.work), env=env)
        self.ctx = CappedContext()
        self.kc = km.client(context=self.ctx)
        self.kc.start_channels()
        try:
            await self.kc.wait_for_ready(timeout=timeout)
        except RuntimeError as e:  # died while starting
            self.dead = True
            raise KernelStartError(f"the {self.label} kernel did not start: {e}") from None
        finally:
            self.start_s = time.monotonic() - started

    async def alive(self) -> bool:
        if self.km is None or self.dead:
            return False
        try:
            ok = await self.km.is_alive()
        except Exception:
            ok = False
        if not ok:
            self.dead = True
        return ok

    async def interrupt(self) -> None:
        try:
            await self.km.interrupt_kernel()
        except Exception:
            pass

    async def execute(self, code: str, *, timeout: float, sink: CellOutputs | None = None, silent: bool = False,
                      store_history: bool = True, user_expressions: dict | None = None,
                      idle_wait: float = 5.0) -> Reply:
        started = time.monotonic()
        if self.dead:
            return Reply("died", seconds=0.0)
        msg_id = self.kc.execute(code, silent=silent, store_history=store_history and not silent,
                                 user_expressions=user_expressions or {}, allow_stdin=False, stop_on_error=False)
        reader = asyncio.ensure_future(self._read_iopub(msg_id, sink)) if sink is not None else None
        try:
            reply = await self._wait_reply(msg_id, timeout)
            if reader is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(reader), idle_wait)
                except (asyncio.TimeoutError, TimeoutError):
                    # No "idle": the output channel was dropped (ZeroMQ closes a connection that sent
                    # an oversized message for good). Open a new one for the next cells.
                    reader.cancel()
                    await self._reset_iopub()
        finally:
            if reader is not None and not reader.done():
                reader.cancel()
                try:
                    await reader
                except (asyncio.CancelledError, Exception):
                    pass
        reply.seconds = time.monotonic() - started
        return reply

    async def _reset_iopub(self) -> None:
        ch = self.kc._iopub_channel
        if ch is not None:
            try:
                ch.stop()
            except Exception:
                pass
        self.kc._iopub_channel = None
        self.kc.iopub_channel.start()
        await asyncio.sleep(0.2)

    async def _read_iopub(self, msg_id: str, sink: CellOutputs) -> None:
        while True:
            try:
                msg = await self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                if self.dead:
                    return
                continue
            except Exception:  # a message that does not parse (or is not signed): dropped
                continue
            if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                continue
            kind, content = msg.get("msg_type"), msg.get("content") or {}
            if kind == "status" and content.get("execution_state") == "idle":
                return
            if isinstance(content, dict):
                sink.handle(kind, content)

    async def _wait_reply(self, msg_id: str, timeout: float) -> Reply:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        interrupted = False
        while True:
            left = deadline - loop.time()
            if left <= 0:
                if interrupted:
                    return Reply("hung")
                interrupted = True
                await self.interrupt()
                deadline = loop.time() + 10
                continue
            try:
                msg = await self.kc.get_shell_msg(timeout=min(left, 1.0))
            except queue.Empty:
                if not await self.alive():
                    return Reply("died")
                continue
            except Exception:
                continue
            if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                continue
            content = msg.get("content") or {}
            status = content.get("status")
            reply = Reply("timeout" if interrupted else str(status),
                          ename=content.get("ename"), evalue=content.get("evalue"),
                          execution_count=content.get("execution_count"),
                          user_expressions=content.get("user_expressions") or {})
            return reply

    async def expression(self, expr: str, timeout: float = 30) -> tuple[str, str | None]:
        """Evaluate one expression silently: (status, text/plain or the error)."""
        r = await self.execute("", timeout=timeout, silent=True, user_expressions={"r": expr})
        if not r.ok:
            return r.status, f"{r.ename}: {r.evalue}" if r.ename else r.status
        res = r.user_expressions.get("r") or {}
        if res.get("status") != "ok":
            return "error", f"{res.get('ename')}: {res.get('evalue')}"
        text = (res.get("data") or {}).get("text/plain")
        return "ok", text if isinstance(text, str) else None

    async def cpu_seconds(self) -> float | None:
        try:
            status, text = await self.expression(KERNEL_CPU, timeout=10)
            return float(text) if status == "ok" else None
        except (TypeError, ValueError):
            return None

    async def shutdown(self) -> None:
        try:
            if self.kc is not None:
                self.kc.stop_channels()
            if self.km is not None:
                try:
                    await asyncio.wait_for(self.km.shutdown_kernel(now=True), 20)
                except Exception:
                    pass
        finally:
            if self.ctx is not None:
                self.ctx.destroy(linger=0)
            self.dead = True
            files.rmtree(self.dir)


def warm_zygote(role: str) -> str | None:
    """The socket of the zygote that starts kernels of `role` warm, when this grading process was given
    one (LLMRL_GRADE_ZYGOTES, set by the batch's warm workers, autograder/batch/warm_workers.py)."""
    import json
    import os

    if os.environ.get("LLMRL_GRADE_WARM") == "0":
        return None
    try:
        sockets = json.loads(os.environ.get("LLMRL_GRADE_ZYGOTES") or "{}")
    except ValueError:
        return None
    sock = sockets.get(role) if isinstance(sockets, dict) else None
    return sock if isinstance(sock, str) and os.path.exists(sock) else None


class KernelStartError(Exception):
    pass


def inject_module(name: str, source: str) -> str:
    """Code that installs `source` as module `name` in a kernel."""
    return ("import sys as _s, types as _t\n"
            f"_m = _t.ModuleType({name!r})\n"
            f"exec(compile({source!r}, {'<' + name + '>'!r}, 'exec'), _m.__dict__)\n"
            f"_s.modules[{name!r}] = _m\n"
            "del _s, _t, _m\n")

