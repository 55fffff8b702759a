"""The tests' kernel's link to the student's kernel: results of a notebook, and the broker that carries
every call of a student's function over a socket in the wire format and brings back the answer.
"""

from __future__ import annotations

import re
import ast
import asyncio
import base64
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from autograder.execution import remote_calls as remote
from autograder.execution import sandboxed_kernel as kernels
from autograder.execution import wire_format as wire

MAX_RESTARTS = 12        # fresh student's kernels per notebook, all functions together (time bounds them too)
PROBE_TIMEOUT = 10       # seconds for one call of the answer-key probe (small inputs: well under 1 s)
MAX_CRASHES = 2          # a function that killed (or hung) the student's kernel this often is not run again
CALL_GRACE = 10  # seconds a test cell may run past the end of its last call of the student's code
MESSAGE_CHARS = 300
# The answer of one call: base64 of a wire message, as the repr of a str.
_ANSWER = re.compile(r"^'([A-Za-z0-9+/=]*)'$")

# ----------------------------------------------------------------------------- results

@dataclass
class Settings:
    cell_timeout: float = 300
    notebook_timeout: float = 600
    cell_cap: int = 500_000
    notebook_cap: int = 5_000_000
    library_view: Path | None = None       # the answer kernel's view of the course library (declarations only)
    probe: tuple | None = None             # the answer-key probe (code, expression, [(key, function)])
    watch: str | None = None               # source of the answer-key watch (module _llmrl_watch) for the
    #                                        student's kernel: every graded call runs under it
    feedback: bool = True                  # False: grading run only (the batch's self-check)
    use_sandbox: bool = True
    course_roots: list = field(default_factory=list)
    scratch: Path | None = None


@dataclass
class NotebookResult:
    outputs: list                          # per cell of the notebook: list of output dicts, or None
    counts: list                           # per cell: execution count or None
    verdicts: dict                         # grade_id -> None (passed) or the failure's message
    events: dict
    review: list                           # reasons to flag the notebook for review
    cell_sources: list                     # the cells' sources (to check the notebook is the same one)
    probe_answer: str | None = None        # what the answer-key probe said in the student's kernel
    probe_ends: dict = field(default_factory=dict)   # function -> "died" or "stalled" (a probe call that did not end)
    watch: dict = field(default_factory=dict)        # function -> what its graded calls ran and how they ended


def _first_line(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 3] + "..."


def _verdict_message(reply: kernels.Reply, cell_timeout: float) -> str | None:
    if reply.status == "ok":
        return None
    if reply.status == "error":
        ename = (reply.ename or "Error").strip()
        value = _first_line(reply.evalue or "")
        return _first_line(f"{ename}: {value}" if value else ename)
    if reply.status == "timeout":
        return f"GraderTimeoutError: the test did not finish within {cell_timeout:.0f} s"
    if reply.status in ("died", "hung"):
        return "GraderError: the grader's test kernel stopped while running this test (it was restarted)"
    return f"GraderError: the test cell ended with status {reply.status!r}"


def spent(events: dict | None, part: str, seconds: float) -> None:
    """Add `seconds` to the wall time of one part of the grading (events["timings_s"], which the
    benchmark autograder/bench_grading.py sums). The parts overlap (the feedback run runs beside the
    grading run), so they say where the time goes, not how it adds up."""
    if events is not None:
        t = events.setdefault("timings_s", {})
        t[part] = round(t.get(part, 0.0) + seconds, 3)


def _error(ename: str, evalue: str) -> dict:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}


# ----------------------------------------------------------------------------- the broker

class Broker:
    """Serves the tests' kernel's calls by running them in the student's kernel."""

    def __init__(self, settings: Settings, start_fresh, review: list, events: dict):
        self.s = settings
        self.student: kernels.Kernel | None = None
        self.start_fresh = start_fresh
        self.review = review
        self.events = events
        self.restarts = 0
        self.crashes: dict[str, int] = {}   # function -> calls of it that killed or hung the student's kernel
        self.call_names: dict = {}          # call id -> function (a gradient is asked for by call id)
        self.watch: dict[str, dict] = {}    # function -> {"calls", "answered", "died", "timeout", "lib", ...}
        self.deadline = None          # the running test cell's deadline (loop time)
        self.grading_deadline = None
        self.servers: list = []
        self.retired: list = []
        self.ready = asyncio.Event()  # set once the student's kernel is chosen

    async def serve(self, path: Path) -> None:
        self.servers.append(await asyncio.start_unix_server(self._client, path=str(path)))

    async def close(self) -> None:
        for server in self.servers:
            server.close()

    async def _client(self, reader, writer) -> None:
        size = struct.calcsize(remote.FRAME)
        try:
            while True:
                head = await reader.readexactly(size)
                hl, bl = struct.unpack(remote.FRAME, head)
                if hl > 1 << 20 or bl > wire.LIMITS["total_bytes"]:
                    break
                header = json.loads(await reader.readexactly(hl))
                body = await reader.readexactly(bl)
                status, msg, data = await self.forward(header, body)
                h = json.dumps({"status": status, "msg": msg}).encode()
                writer.write(struct.pack(remote.FRAME, len(h), len(data)) + h + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, json.JSONDecodeError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _timeout(self) -> float:
        loop = asyncio.get_running_loop()
        ends = [d for d in (self.deadline, self.grading_deadline) if d is not None]
        left = min(ends) - loop.time() if ends else self.s.cell_timeout
        return max(1.0, min(self.s.cell_timeout, left))

    async def _student(self) -> kernels.Kernel | None:
        await self.ready.wait()
        if self.student is not None and not self.student.dead:
            return self.student
        if self.student is not None:
            self.retired.append(self.student)
            self.student = None
        if self.restarts >= MAX_RESTARTS:
            return None
        self.restarts += 1
        self.events["restarts"] = self.restarts
        self.student = await self.start_fresh(f"restart {self.restarts}")
        return self.student

    def _crashed(self, name: str) -> None:
        self.crashes[name] = self.crashes.get(name, 0) + 1
        self.events.setdefault("crashed_calls", {})[name] = self.crashes[name]

    def _outcome(self, name: str, how: str) -> dict:
        w = self.watch.get(name)
        if w is None:
            if len(self.watch) >= 200:
                return {}
            w = self.watch[name] = {"calls": 0, "answered": 0, "died": 0, "timeout": 0, "lib": [], "copies": [],
                                    "tracer": []}
        w["calls"] += 1
        if how in ("answered", "died", "timeout"):
            w[how] += 1
        return w

    def _watched(self, name: str, res: dict | None) -> None:
        """Merge what the watch saw in one call (a JSON string from the student's kernel, checked)."""
        w = self._outcome(name, "answered")
        if not w or not self.s.watch:
            return
        seen = None
        text = ((res or {}).get("data") or {}).get("text/plain") if (res or {}).get("status") == "ok" else None
        if isinstance(text, str) and len(text) < 1_000_000:
            try:
                seen = json.loads(ast.literal_eval(text))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                seen = None
        if not isinstance(seen, dict) or not seen:
            why = "the watch's report of the call did not come back (the kernel's watch was removed or replaced)"
            if why not in w["tracer"]:
                w["tracer"].append(why)
            return
        for key, cap in (("lib", 200), ("copies", 50), ("tracer", 10)):
            items = seen.get(key)
            for item in items if isinstance(items, list) else []:
                item = item if isinstance(item, str) else [str(x)[:300] for x in item] if isinstance(item, list) else None
                if item is not None and item not in w[key] and len(w[key]) < cap:
                    w[key].append(item if isinstance(item, str) else item[:4])

    async def forward(self, header: dict, body: bytes) -> tuple[str, str, bytes]:
        if header.get("op") == "call":
            name = str(header.get("name"))[:200]
            if len(self.call_names) < 100_000:
                self.call_names[header.get("call")] = name
            what = f"{name}()"
        else:
            name = self.call_names.get(header.get("call"), "?")
            what = f"the gradient of a call of {name}()"
        self.events["calls"] = self.events.get("calls", 0) + 1
        # A function that crashed the kernel costs the tests that call it, never the others: it is
        # not run again once it has crashed MAX_CRASHES times, and every other function gets a kernel.
        if self.crashes.get(name, 0) >= MAX_CRASHES:
            return "died", (f"{name}() was not run: it crashed or hung the student's kernel {self.crashes[name]} "
                            f"times already"), b""
        student = await self._student()
        if student is None:
            return "died", f"the student's kernel was restarted {MAX_RESTARTS} times already; {what} was not run", b""
        timeout = self._timeout()
        expr = f"__import__('_llmrl_remote').serve({base64.b64encode(body).decode('ascii')!r})"
        # The watch's report is read in the same execution, right after the answer: it comes back
        # with it or not at all (a kernel that dies later cannot take it away).
        r = await student.execute("", timeout=timeout, silent=True,
                                  user_expressions={"r": expr, "w": "__import__('_llmrl_remote').watch_report()"})
        spent(self.events, "calls", r.seconds)
        if r.status in ("timeout", "hung"):
            self.events["calls_timed_out"] = self.events.get("calls_timed_out", 0) + 1
            self._outcome(name, "timeout")
            if r.status == "hung":
                self.retired.append(student)
                self.student = None
                student.dead = True
                self._crashed(name)
            return "timeout", f"{what} did not return within {timeout:.0f} s", b""
        if r.status == "died" or student.dead:
            self.retired.append(student)
            self.student = None
            self._crashed(name)
            self._outcome(name, "died")
            return "died", f"the student's kernel died while running {what} (memory limit or a crash)", b""
        res = r.user_expressions.get("r") or {}
        if r.status != "ok" or res.get("status") != "ok":
            why = f"{res.get('ename')}: {_first_line(str(res.get('evalue')))}" if res else r.status
            return self._protocol(f"the student's kernel could not run the call of {what} ({why})")
        m = _ANSWER.match((res.get("data") or {}).get("text/plain") or "")
        if not m:
            return self._protocol(f"the student's kernel answered {what} with something that is not the grader's "
                                  f"format")
        try:
            data = base64.b64decode(m.group(1), validate=True)
            wire.validate(data)
        except (ValueError, wire.WireError) as e:
            return self._protocol(f"the student's kernel answered {what} outside the grader's format ({e})")
        self._watched(name, r.user_expressions.get("w"))
        return "ok", "", data

    def _protocol(self, msg: str) -> tuple[str, str, bytes]:
        if msg not in self.review:
            self.review.append(msg)
        return "protocol", msg, b""


