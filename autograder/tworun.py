"""How one notebook is run and scored: a feedback run for the student, a grading run for the score.

nbgrader stays the format and the gradebook: it restores the locked cells from the source
(OverwriteCells), and SaveAutoGrades computes every test cell's points from the outputs of the
notebook it saves. What changes is how that notebook is run (`run_notebook`, called by the
`TwoRunExecute` preprocessor that replaces nbgrader's Execute):

1. **Feedback run.** The notebook as nbgrader sanitized it, with the hidden tests removed from
   every test cell, runs top to bottom in a sandboxed kernel (autograder/kernels.py), in a private
   scratch folder. Its outputs, capped, become the outputs of the notebook's cells: this is what
   the student sees in the feedback. Nothing of the grading run below reaches the feedback.
2. **Grading run.** A *tests' kernel*, sandboxed too, starts while the feedback run runs. It
   never executes student code: it runs the course's own set-up cells (from source/, the ones the
   test cells need, found by `setup_cells`) and then the test cells, visible and hidden, from
   source/. Every name the source's solution cells define is bound there to a proxy
   (autograder/remote.py): calling it sends the call to the *student's kernel* and brings the
   answer back through the strict format of autograder/wire.py as new objects of exactly the
   built-in types. The student's kernel is the feedback run's kernel, once that run is over (so
   the functions graded are the ones the feedback shows, helpers from the student's own cells
   included); when that kernel died, hangs or used up its time, a fresh one runs the course's
   set-up cells and the student's solution cells only (`fresh_student`). A call that does not
   return in time, or a student's kernel that dies, fails that call (the kernel is restarted for
   the later calls; a function that crashed it `MAX_CRASHES` times is not run again, so a crashing
   function costs only the tests that call it); an answer outside the format fails the call and
   flags the notebook for review. Every call runs under the answer-key watch
   (autograder/answer_key.py, module `_llmrl_watch` in the student's kernel), whose report of what
   the call ran comes back with the answer (`Broker.watch`).
3. **Score.** A test cell earns its points exactly when the tests' kernel answered its
   execute_request with status "ok". Its outputs in the saved notebook are set to nothing (pass)
   or one error output with the failure's message, first line, capped (fail): nbgrader's
   SaveAutoGrades then computes exactly those points, with no partial credit from outputs, and the
   feedback shows that message only.

So the verdict is computed in a process the student's code never runs in: hooks, input or AST
transformers, custom exception handlers, patched libraries, dispatcher modes and subclasses whose
comparisons always agree act in the student's kernel only, and what comes back is plain data.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import copy
import json
import os
import re
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode
from traitlets import Bool, Integer, Unicode

from nbgrader.preprocessors import NbGraderPreprocessor

import files
import kernels
import remote
import wire

HERE = Path(__file__).resolve().parent
HIDDEN_BEGIN, HIDDEN_END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
MAX_RESTARTS = 12        # fresh student's kernels per notebook, all functions together (time bounds them too)
PROBE_TIMEOUT = 10       # seconds for one call of the answer-key probe (small inputs: well under 1 s)
MAX_CRASHES = 2          # a function that killed (or hung) the student's kernel this often is not run again
CALL_GRACE = 10  # seconds a test cell may run past the end of its last call of the student's code
MESSAGE_CHARS = 300
# The answer of one call: base64 of a wire message, as the repr of a str.
_ANSWER = re.compile(r"^'([A-Za-z0-9+/=]*)'$")


# ----------------------------------------------------------------------------- the notebooks' cells

def nbmeta(cell) -> dict:
    m = cell.get("metadata", {}).get("nbgrader")
    return m if isinstance(m, dict) else {}


def is_test_cell(cell) -> bool:
    m = nbmeta(cell)
    return cell.get("cell_type") == "code" and bool(m.get("grade")) and not m.get("solution")


def is_solution_cell(cell) -> bool:
    return cell.get("cell_type") == "code" and bool(nbmeta(cell).get("solution"))


def is_setup_cell(cell) -> bool:
    """A code cell of the course that is neither a solution nor a test (imports, experiments)."""
    m = nbmeta(cell)
    return cell.get("cell_type") == "code" and not m.get("grade") and not m.get("solution")


def strip_hidden(source: str) -> str:
    out, inside = [], False
    for line in source.split("\n"):
        if HIDDEN_BEGIN in line:
            inside = True
        elif HIDDEN_END in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def _python(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def names(source: str) -> tuple[set[str], set[str], bool]:
    """(names bound at the top level, names read anywhere, has a star import) of one cell."""
    try:
        tree = ast.parse(_python(source))
    except (SyntaxError, ValueError):
        return set(), set(), False
    defined: set[str] = set()
    star = False

    def targets(node):
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                defined.add(n.id)

    def top(stmts):
        nonlocal star
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(s.name)
            elif isinstance(s, (ast.Import, ast.ImportFrom)):
                for a in s.names:
                    if a.name == "*":
                        star = True
                    else:
                        defined.add((a.asname or a.name).split(".")[0])
            elif isinstance(s, ast.Assign):
                for t in s.targets:
                    targets(t)
            elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
                targets(s.target)
            elif isinstance(s, (ast.For, ast.AsyncFor)):
                targets(s.target)
                top(s.body + s.orelse)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
                top(s.body)
            elif isinstance(s, (ast.If, ast.While)):
                top(s.body + s.orelse)
            elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
                top(s.body + s.orelse + s.finalbody)
                for h in s.handlers:
                    if h.name:
                        defined.add(h.name)
                    top(h.body)
            for n in ast.walk(s) if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []:
                if isinstance(n, ast.NamedExpr):
                    targets(n.target)

    top(tree.body)
    used = _global_reads(tree)
    if used is None:
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return defined, used, star


def _global_reads(tree: ast.Module) -> set[str] | None:
    """Names a cell reads from the notebook's globals: at its top level, and inside its functions,
    lambdas, classes and comprehensions where a name is not their own (symtable's implicit globals).

    A function's parameters and locals are not among them: `logits` inside `def f(logits)` must
    not pull in the set-up cell that defines a global `logits` (an experiment cell that calls the
    student's functions). None when symtable cannot read the cell."""
    import symtable

    try:
        table = symtable.symtable(ast.unparse(tree), "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: set[str] = set()
    todo = [table]
    while todo:
        t = todo.pop()
        for sym in t.get_symbols():
            if sym.is_referenced() and sym.is_global():
                out.add(sym.get_name())
        todo.extend(t.get_children())
    return out


def solution_names(source_nb) -> list[str]:
    """Names the source's solution cells define, in order: what the tests call."""
    out: list[str] = []
    for c in source_nb.cells:
        if is_solution_cell(c):
            out += [n for n in sorted(names(c.source)[0]) if n not in out]
    return out


def setup_cells(source_nb, wanted: set[str]) -> list[int]:
    """Indices of the source's set-up cells that define what `wanted` needs (transitively).

    Cells tagged "grader-setup" always run, cells tagged "grader-skip" never do; a cell with a
    star import counts as defining everything."""
    info = {}
    for i, c in enumerate(source_nb.cells):
        if is_setup_cell(c) and c.source.strip():
            tags = set(c.metadata.get("tags") or [])
            if "grader-skip" not in tags:
                info[i] = (*names(c.source), "grader-setup" in tags)
    need = set(wanted)
    chosen: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, (defined, used, star, forced) in info.items():
            if i not in chosen and (forced or star or defined & need):
                chosen.add(i)
                need |= used - defined
                changed = True
    return sorted(chosen)


def source_tests(source_nb) -> list[tuple[int, str, str]]:
    """(index, grade_id, code) of every test cell of the source."""
    return [(i, nbmeta(c)["grade_id"], c.source) for i, c in enumerate(source_nb.cells) if is_test_cell(c)]


# ----------------------------------------------------------------------------- results

@dataclass
class Settings:
    cell_timeout: float = 300
    notebook_timeout: float = 600
    cell_cap: int = 500_000
    notebook_cap: int = 5_000_000
    student_kernel: str = "reuse"          # or "fresh": never grade in the feedback run's kernel
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


# ----------------------------------------------------------------------------- running one notebook

def _env() -> dict:
    return {"NBGRADER_EXECUTION": "autograde"}


async def _run_cells(kernel: kernels.Kernel, cells: list, s: Settings, deadline: float):
    """Run (key, code) cells in order; the key of the cell that killed or hung the kernel, else None."""
    loop = asyncio.get_running_loop()
    for key, code in cells:
        left = deadline - loop.time()
        if left <= 0 or kernel.dead:
            return None
        r = await kernel.execute(code, timeout=min(s.cell_timeout, left))
        if r.status in ("died", "hung"):
            kernel.dead = True
            return key
    return None


def definitions_only(source: str) -> str | None:
    """A cell's imports, functions and classes, without the code it runs at its top level (a
    student's own check that calls a function which crashes the kernel); None when nothing is left."""
    try:
        tree = ast.parse(_python(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                                    ast.AsyncFunctionDef, ast.ClassDef))]
    return ast.unparse(ast.Module(body=keep, type_ignores=[])) if keep else None


def exec_expression(code: str, label: str) -> str:
    """An expression that runs `code` in the kernel's main namespace. Sent as a user_expression, it
    skips IPython's input and AST transformers (a student's may rewrite any cell)."""
    return (f"exec(compile({code!r}, {'<' + label + '>'!r}, 'exec'), vars(__import__('__main__'))) "
            f"or 'ok'")


# What the notebook's errors keep alive is let go before the grader's modules load. A failed cell's
# traceback holds every frame of the failed call with its locals, and IPython keeps it (sys.last_*,
# its traceback formatter, the cell's ExecutionResult); a free cell that filled memory up to the limit
# inside a function would otherwise leave too little address space to load numpy's extension modules
# for the graded calls. First the cheap steps that need no memory (drop IPython's references, collect
# the traceback-frame cycles), then, for tracebacks kept anywhere else, the frames of every traceback
# still alive are cleared (a frame still running is left alone); that walk needs memory, so it comes
# second and may fail without harm.
_RELEASE = ("import sys as _llmrl_sys, gc as _llmrl_gc\n"
            "_llmrl_sys.last_type = _llmrl_sys.last_value = _llmrl_sys.last_traceback = None\n"
            "try:\n"
            "    get_ipython().InteractiveTB.tb = None\n"
            "except Exception:\n"
            "    pass\n"
            "_llmrl_gc.collect()\n"
            "try:\n"
            "    for _llmrl_o in _llmrl_gc.get_objects():\n"
            "        while type(_llmrl_o).__name__ == 'traceback':\n"
            "            try:\n"
            "                _llmrl_o.tb_frame.clear()\n"
            "            except RuntimeError:\n"
            "                pass\n"
            "            _llmrl_o = _llmrl_o.tb_next\n"
            "except MemoryError:\n"
            "    pass\n"
            "_llmrl_o = None\n_llmrl_gc.collect()\ndel _llmrl_sys, _llmrl_gc, _llmrl_o\n"
            # What the graded calls' code imports lazily is imported now: a kernel without the address
            # space left to load it (freed heap memory stays in the address space) fails here, and the
            # calls go to a fresh kernel instead of failing one by one.
            # (through __import__, and with the grader's own _llmrl_ names: no global of the student's is
            # bound, replaced or deleted)
            "for _llmrl_o in ('json', 'socket', 'struct', 'random', 'array', 'io', 'pickle', 'types', 'base64',\n"
            "           'contextlib') + (('numpy.random',) if 'numpy' in __import__('sys').modules else ()):\n"
            "    __import__(_llmrl_o)\n"
            "del _llmrl_o\n")


async def _inject(kernel: kernels.Kernel, extra: str = "", watch: str | None = None) -> bool:
    code = (_RELEASE + kernels.inject_module("_llmrl_wire", (HERE / "wire.py").read_text()) +
            kernels.inject_module("_llmrl_remote", (HERE / "remote.py").read_text()) +
            (kernels.inject_module("_llmrl_watch", watch) if watch else "") + extra)
    status, text = await kernel.expression(exec_expression(code, "llmrl grader"), timeout=120)
    return status == "ok" and text == "'ok'"


async def _answer_key(kernel: kernels.Kernel, probe: tuple | None, s: Settings,
                      events: dict) -> tuple[str | None, dict]:
    """Run the answer-key probe (autograder/answer_key.py) in the student's kernel, one graded
    function at a time: (its answer as JSON text, or None when it could not start; function ->
    "died" or "stalled" for a probe call that killed the kernel or did not return). After a call
    that killed or hung the kernel the remaining functions are not probed (their graded calls are
    watched all the same)."""
    ends: dict = {}
    if probe is None or kernel is None or kernel.dead:
        return None, ends
    code, _, keys = probe
    define = f"exec(compile({code!r}, '<answer-key probe>', 'exec'), vars(__import__('__main__'))) or 'ok'"
    status, text = await kernel.expression(define, timeout=min(60, s.cell_timeout))
    if status != "ok":
        events["answer_key_probe"] = f"could not start ({status})"
        return f"(the probe failed: {text})", ends
    merged: dict = {"tracer": "ok", "functions": {}}
    for key, function in keys:
        # small inputs: an honest function answers in well under a second, even on a loaded machine
        r = await kernel.execute("", timeout=min(PROBE_TIMEOUT, s.cell_timeout), silent=True,
                                 user_expressions={"r": f"_llmrl_answer_key_probe([{key!r}])"})
        if r.status in ("timeout", "hung", "died"):
            ends[function] = "died" if r.status == "died" else "stalled"
            events["answer_key_probe"] = f"{function}: did not finish ({r.status})"
            if r.status != "timeout":
                kernel.dead = True
                break
            continue
        res = r.user_expressions.get("r") or {}
        if r.status != "ok" or res.get("status") != "ok":
            return f"(the probe failed: {res.get('ename')}: {res.get('evalue')})", ends
        text = (res.get("data") or {}).get("text/plain")
        try:
            one = json.loads(ast.literal_eval(text)) if isinstance(text, str) and len(text) < 1_000_000 else None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            one = None
        if not isinstance(one, dict) or not isinstance(one.get("functions"), dict):
            return "(no text)", ends
        merged["functions"].update(one["functions"])
        if one.get("tracer") != "ok" and merged["tracer"] == "ok":
            merged["tracer"] = one.get("tracer")
    return json.dumps(merged), ends


async def fresh_student(submission, source_nb, s: Settings, label: str, deadline: float,
                        crashed: dict | None = None, events: dict | None = None) -> kernels.Kernel:
    """A new student's kernel: the course's set-up cells the student's solutions read, then the
    student's solution cells (by grade_id, in the source's order). The student's other cells do
    not run.

    A cell that kills (or hangs) the kernel while it starts is left out of the next fresh kernel, so
    that a function which crashes costs only the tests that call it: a solution cell keeps its
    imports, functions and classes (its top-level code, e.g. a student's own check calling the
    function, is dropped), then, if that still kills the kernel, goes; a set-up cell goes.
    `crashed` (cell key -> "definitions" or "skipped") carries that from one fresh kernel to the next."""
    crashed = {} if crashed is None else crashed
    by_id = {nbmeta(c).get("grade_id"): c for c in submission.cells if is_solution_cell(c)}
    wanted: set[str] = set()
    for c in source_nb.cells:
        if is_solution_cell(c):
            sub = by_id.get(nbmeta(c).get("grade_id"))
            for code in (c.source, sub.source if sub is not None else ""):
                defined, used, _ = names(code)
                wanted |= used - defined
    setup = set(setup_cells(source_nb, wanted))
    cells = []
    for i, c in enumerate(source_nb.cells):
        if i in setup:
            cells.append((f"set-up cell {i + 1}", c.source, None))
        elif is_solution_cell(c) and nbmeta(c).get("grade_id") in by_id:
            code = by_id[nbmeta(c)["grade_id"]].source
            cells.append((f"solution cell {nbmeta(c)['grade_id']}", code, definitions_only(code)))
    while True:
        run = []
        for key, code, defs in cells:
            state = crashed.get(key)
            if state is None:
                run.append((key, code))
            elif state == "definitions" and defs is not None:
                run.append((key, defs))
        k = kernels.Kernel(f"student ({label})", s.scratch, _env(), s.course_roots, s.use_sandbox)
        await k.start()
        killer = await _run_cells(k, run, s, deadline)
        if killer is None or asyncio.get_running_loop().time() >= deadline:
            break
        defs = next(d for key, _, d in cells if key == killer)
        crashed[killer] = "definitions" if crashed.get(killer) is None and killer.startswith("solution") \
            and defs is not None else "skipped"
        if events is not None:
            events.setdefault("fresh_kernel_cells", {})[killer] = (
                "killed the kernel; only its imports, functions and classes run" if crashed[killer] == "definitions"
                else "killed the kernel; left out")
        await k.shutdown()
    if not k.dead:
        await _inject(k, watch=s.watch)
    return k


async def _feedback_run(nb, s: Settings, events: dict) -> tuple[kernels.Kernel, list, list]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + s.notebook_timeout
    book = kernels.Outputs(s.cell_cap, s.notebook_cap)
    outputs: list = [None] * len(nb.cells)
    counts: list = [None] * len(nb.cells)
    k = kernels.Kernel("student", s.scratch, _env(), s.course_roots, s.use_sandbox)
    await k.start()
    why_stopped = None
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code" or not cell.source.strip():
            continue
        test = is_test_cell(cell)
        code = strip_hidden(cell.source) if test else cell.source
        if why_stopped is None and loop.time() >= deadline:
            why_stopped = f"the notebook used up its {s.notebook_timeout:.0f} s"
            events["notebook_timeout"] = True
        if why_stopped is not None:
            events["cells_skipped"] += 1
            outputs[i] = [_error("NotebookTimeoutError" if "used up" in why_stopped else "DeadKernelError",
                                 f"not run: {why_stopped}")]
            continue
        sink = book.cell()
        r = await k.execute(code, timeout=min(s.cell_timeout, deadline - loop.time()), sink=sink)
        outs = sink.outputs
        counts[i] = r.execution_count
        if r.status == "timeout":
            outs.append(_error("CellTimeoutError", f"the cell did not finish within "
                                                   f"{min(s.cell_timeout, s.notebook_timeout):.0f} s and was interrupted"))
        elif r.status in ("died", "hung"):
            why = "the kernel died while running this cell (memory limit or a crash)" if r.status == "died" \
                else "the kernel stopped answering while running this cell"
            outs.append(_error("DeadKernelError", why))
            events["kernel_died"] = f"in cell {i + 1}: {why}"
            why_stopped = f"the kernel stopped earlier (cell {i + 1})"
            k.dead = True
        outputs[i] = outs
    return k, outputs, counts


async def _start_tests_kernel(source_nb, tests, s: Settings, broker: Broker, events: dict,
                              upto: int | None = None) -> kernels.Kernel:
    """The tests' kernel: grader code loaded, proxies bound, and the set-up cells that come before
    cell `upto` (default: the first test cell) already run, while the feedback run goes on."""
    k = kernels.Kernel("tests", s.scratch, None, s.course_roots, s.use_sandbox)
    sock = k.runtime / "rpc.sock"
    await broker.serve(sock)
    k.env_extra = dict(_env(), LLMRL_GRADER_RPC=str(sock))
    await k.start()
    sol = solution_names(source_nb)
    ok = await _inject(k, f"__import__('_llmrl_remote').connect({str(sock)!r})\n"
                          f"__import__('_llmrl_remote').bind({sol!r}, globals())\n")
    if not ok:
        raise GradingError("the grader could not set up its test kernel")
    wanted = set()
    for _, _, code in tests:
        defined, used, _ = names(code)
        wanted |= used - defined
    wanted -= set(sol)
    k.setup = set(setup_cells(source_nb, wanted))
    k.sol = sol
    k.done = set()
    upto = tests[0][0] if upto is None else upto
    for i in sorted(k.setup):
        if i < upto:
            await _tests_setup_cell(k, source_nb, i, s, events)
    return k


async def _tests_setup_cell(k, source_nb, i: int, s: Settings, events: dict) -> None:
    code = source_nb.cells[i].source
    r = await k.execute(code, timeout=s.cell_timeout)
    k.done.add(i)
    if not r.ok:
        events.setdefault("tests_setup_errors", []).append(f"cell {i + 1}: {_verdict_message(r, s.cell_timeout)}")
    defined = names(code)[0] & set(k.sol)
    if defined:  # a set-up cell that redefines a solution's name: the proxy wins
        await k.execute(f"__import__('_llmrl_remote').bind({sorted(defined)!r}, globals())", timeout=30, silent=True)


class GradingError(Exception):
    """The grader itself failed on this notebook (not the student's fault); one line."""


async def run_notebook(nb, source_nb, s: Settings) -> NotebookResult:
    loop = asyncio.get_running_loop()
    events = {"notebook_timeout": False, "kernel_died": None, "cells_skipped": 0, "calls": 0, "restarts": 0,
              "student_kernel": None}
    review: list = []
    tests = source_tests(source_nb)
    kernels_used: list[kernels.Kernel] = []
    broker = None
    started = time.monotonic()
    try:
        tests_kernel_task = None
        grading_deadline = None

        crashed_cells: dict = {}

        async def start_fresh(label):
            k = await fresh_student(nb, source_nb, s, label, loop.time() + s.notebook_timeout, crashed_cells, events)
            kernels_used.append(k)
            return k

        if tests:
            broker = Broker(s, start_fresh, review, events)
            tests_kernel_task = asyncio.ensure_future(_start_tests_kernel(source_nb, tests, s, broker, events))
        outputs: list = [None] * len(nb.cells)
        counts: list = [None] * len(nb.cells)
        student = None
        if s.feedback:
            fb, outputs, counts = await _feedback_run(nb, s, events)
            kernels_used.append(fb)
            student = fb
        events["feedback_s"] = round(time.monotonic() - started, 1)
        verdicts: dict = {}
        probe_answer, probe_ends = None, {}
        if tests:
            grading_deadline = loop.time() + s.notebook_timeout
            broker.grading_deadline = grading_deadline
            why_fresh = None
            if student is None:
                why_fresh = "grading only" if not s.feedback else None
            elif s.student_kernel == "fresh":
                why_fresh = "fresh kernel asked for"
            elif student.dead:
                why_fresh = "the feedback run's kernel died"
            elif events["notebook_timeout"]:
                why_fresh = "the feedback run used up its time"
            else:
                status, _ = await student.expression("1", timeout=10)
                if status != "ok":
                    why_fresh = f"the feedback run's kernel does not answer ({status})"
                elif not await _inject(student, watch=s.watch):
                    why_fresh = "the feedback run's kernel could not load the grader's code"
            if why_fresh is None:
                broker.student = student
                events["student_kernel"] = "the feedback run's kernel"
            else:
                if student is not None:
                    await student.shutdown()
                broker.student = await start_fresh("fresh")
                events["student_kernel"] = f"a fresh kernel ({why_fresh})"
            probe_answer, probe_ends = await _answer_key(broker.student, s.probe, s, events)
            broker.ready.set()
            tk = await tests_kernel_task
            kernels_used.append(tk)
            for i, c in enumerate(source_nb.cells):
                if i in tk.setup and i not in tk.done:
                    await _tests_setup_cell(tk, source_nb, i, s, events)
                    continue
                if not is_test_cell(c):
                    continue
                gid = nbmeta(c)["grade_id"]
                left = grading_deadline - loop.time()
                if left <= 0:
                    verdicts[gid] = f"GraderTimeoutError: not run: the grading run used up its {s.notebook_timeout:.0f} s"
                    continue
                if tk.dead:
                    tk = await _start_tests_kernel(source_nb, tests, s, broker, events, upto=i)
                    kernels_used.append(tk)
                    events["tests_kernel_restarts"] = events.get("tests_kernel_restarts", 0) + 1
                timeout = min(s.cell_timeout, left)
                broker.deadline = loop.time() + timeout  # calls of the student's code end by then; the
                r = await tk.execute(c.source, timeout=timeout + CALL_GRACE)  # test gets a little longer
                broker.deadline = None
                verdicts[gid] = _verdict_message(r, timeout)
                if r.status in ("died", "hung"):
                    tk.dead = True
        cpu = 0.0
        for k in kernels_used + (broker.retired if broker else []):
            if not k.dead:
                cpu += await k.cpu_seconds() or 0.0
        events["kernel_cpu_s"] = round(min(cpu, 1e6), 2)
        events["seconds"] = round(time.monotonic() - started, 1)
        return NotebookResult(outputs, counts, verdicts, events, review, [c.get("source") for c in nb.cells],
                              probe_answer if tests else None, probe_ends, broker.watch if broker else {})
    finally:
        if broker is not None:
            await broker.close()
        for k in set(kernels_used + (broker.retired if broker else []) + ([broker.student] if broker and broker.student else [])):
            await k.shutdown()


def apply(nb, result: NotebookResult) -> None:
    """Put a result into the notebook nbgrader saves: feedback outputs, and each test cell's verdict."""
    if [c.get("source") for c in nb.cells] != result.cell_sources:
        raise GradingError("the notebook nbgrader restored differs from the one that was run")
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        if is_test_cell(cell):
            gid = nbmeta(cell)["grade_id"]
            msg = result.verdicts.get(gid, "GraderError: this test cell was not run")
            cell.outputs = [] if msg is None else [NotebookNode(_error(*_split(msg)))]
            cell.execution_count = None
        else:
            cell.outputs = [NotebookNode(copy.deepcopy(o)) for o in (result.outputs[i] or [])]
            cell.execution_count = result.counts[i]


def _split(msg: str) -> tuple[str, str]:
    ename, _, evalue = msg.partition(": ")
    return (ename, evalue) if re.match(r"^[A-Za-z_][A-Za-z0-9_.]*$", ename) else ("Error", msg)


# ----------------------------------------------------------------------------- nbgrader preprocessors

STAGED: dict[str, NotebookNode] = {}     # notebook name -> the notebook as nbgrader sanitized it (pass 1)
RESULTS: dict[str, NotebookResult] = {}  # notebook name -> its result (computed between the passes)


class StageNotebooks(NbGraderPreprocessor):
    """First nbgrader pass of autograder/grade.py: keep the sanitized notebook, run nothing."""

    def preprocess(self, nb, resources):
        STAGED[resources["nbgrader"]["notebook"]] = copy.deepcopy(nb)
        return nb, resources


def source_notebook(config, assignment: str, notebook: str):
    import nbformat
    from nbgrader.coursedir import CourseDirectory

    cd = CourseDirectory(config=config)
    path = Path(cd.format_path(cd.source_directory, ".", assignment)) / f"{notebook}.ipynb"
    return nbformat.read(path, as_version=4)


def settings_from_env(**kw) -> Settings:
    def num(name, default):
        try:
            return float(os.environ.get(name, default))
        except ValueError:
            return float(default)
    s = Settings(cell_timeout=num("LLMRL_GRADE_CELL_TIMEOUT", 300), notebook_timeout=num("LLMRL_GRADE_NOTEBOOK_TIMEOUT", 600),
                 student_kernel=os.environ.get("LLMRL_GRADE_STUDENT_KERNEL", "reuse"))
    for k, v in kw.items():
        setattr(s, k, v)
    return s


class TwoRunExecute(NbGraderPreprocessor):
    """Replaces nbgrader's Execute in autograding: the feedback run and the grading run (above)."""

    cell_cap = Integer(500_000, help="bytes of output kept per cell").tag(config=True)
    notebook_cap = Integer(5_000_000, help="bytes of output kept per notebook").tag(config=True)
    student_kernel = Unicode("reuse", help="'reuse' the feedback run's kernel for grading, or 'fresh'").tag(config=True)
    feedback = Bool(True, help="run the notebook for the feedback (False: grading run only)").tag(config=True)

    def preprocess(self, nb, resources):
        name = resources["nbgrader"]["notebook"]
        result = RESULTS.pop(name, None)
        if result is None:  # plain `nbgrader autograde`: run it now
            src = source_notebook(self.config, resources["nbgrader"]["assignment"], name)
            s = settings_from_env(cell_cap=self.cell_cap, notebook_cap=self.notebook_cap,
                                  student_kernel=self.student_kernel, feedback=self.feedback)
            result = asyncio.run(run_notebook(nb, src, s))
            REPORTS[name] = result
        apply(nb, result)
        return nb, resources


REPORTS: dict[str, NotebookResult] = {}
