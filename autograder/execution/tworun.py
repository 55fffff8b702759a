"""How one notebook is run and scored: a feedback run for the student, a grading run for the score.

nbgrader stays the format and the gradebook: it restores the locked cells from the source
(OverwriteCells), and SaveAutoGrades computes every test cell's points from the outputs of the
notebook it saves. What changes is how that notebook is run (`run_notebook`, called by the
`TwoRunExecute` preprocessor that replaces nbgrader's Execute):

1. **Feedback run.** The notebook as nbgrader sanitized it, with the hidden tests removed from
   every test cell, runs top to bottom in a sandboxed kernel (autograder/execution/sandboxed_kernel.py), in a private
   scratch folder. Its outputs, capped, become the outputs of the notebook's cells: this is what
   the student sees in the feedback. Nothing of the grading run below reaches the feedback.
2. **Grading run.** It runs beside the feedback run, in two kernels of its own. The *tests'
   kernel* (sandboxed, with the whole course library) never executes student code: it runs the
   course's own set-up cells (from source/, the ones the test cells need, found by `setup_cells`)
   and then the test cells, visible and hidden, from source/. Every name the source's solution
   cells define is bound there to a proxy (autograder/execution/remote_calls.py): calling it sends
   the call to the *answer kernel* and brings the answer back through the strict format of
   autograder/execution/wire_format.py as new objects of exactly the built-in types. The answer kernel is
   a fresh sandboxed kernel that sees the course library as a view with its declarations only
   (autograder/sandbox/library_view.py): it runs the student's solution cells, the definitions of the
   cells the student added, and the course's set-up cells those read (`answer_cells`), never the
   course's experiments. Nothing in it computes a graded answer, so a function that hands its task
   to the library finds nothing to call, whatever it does inside its own process to hide the call.
   A call that does not return in time, or an answer kernel that dies, fails that call (the kernel
   is restarted for the later calls; a function that crashed it `MAX_CRASHES` times is not run
   again, so a crashing function costs only the tests that call it); an answer outside the format
   fails the call and flags the notebook for review. Every call also runs under the answer-key
   watch (autograder/review/answer_key.py, module `_llmrl_watch` in the answer kernel), a second line
   that reports copies of the library's code pasted into the notebook (`Broker.watch`); no verdict
   rests on it.
3. **Score.** A test cell earns its points exactly when the tests' kernel answered its
   execute_request with status "ok". Its outputs in the saved notebook are set to nothing (pass)
   or one error output with the failure's message, first line, capped (fail): nbgrader's
   SaveAutoGrades then computes exactly those points, with no partial credit from outputs, and the
   feedback shows that message only.

So the verdict is computed in a process the student's code never runs in: hooks, input or AST
transformers, custom exception handlers, patched libraries, dispatcher modes and subclasses whose
comparisons always agree act in the student's kernels only, and what comes back is plain data. And
the process where the student's functions answer holds no code of the course that could answer for
them.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import json
import re
import time
from pathlib import Path

from nbformat import NotebookNode


from autograder.execution.broker import Broker, NotebookResult, Settings, _error, _verdict_message
from autograder.execution.notebook_cells import definitions_only, is_solution_cell, is_test_cell, names, nbmeta, setup_cells, solution_names, source_tests, strip_hidden
from autograder.execution import sandboxed_kernel as kernels
from autograder.execution.broker import CALL_GRACE, PROBE_TIMEOUT, spent

HERE = Path(__file__).resolve().parent
# How a report's events name the kernel the student's functions were called in.
ANSWER_KERNEL = "the answer kernel (the course library's declarations only)"


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
    code = (_RELEASE + kernels.inject_module("_llmrl_wire", (HERE / "wire_format.py").read_text()) +
            kernels.inject_module("_llmrl_remote", (HERE / "remote_calls.py").read_text()) +
            (kernels.inject_module("_llmrl_watch", watch) if watch else "") + extra)
    status, text = await kernel.expression(exec_expression(code, "llmrl grader"), timeout=120)
    return status == "ok" and text == "'ok'"


async def _started(kernel: kernels.Kernel, events: dict | None) -> None:
    try:
        await kernel.start()
    finally:
        spent(events, "kernel_start", kernel.start_s)
        if events is not None and kernel.warm:
            events["warm_kernels"] = events.get("warm_kernels", 0) + 1


async def _answer_key(kernel: kernels.Kernel, probe: tuple | None, s: Settings,
                      events: dict) -> tuple[str | None, dict]:
    """Run the answer-key probe (autograder/review/answer_key.py) in the student's kernel, one graded
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


def answer_cells(submission, source_nb) -> list[tuple[str, str, str | None]]:
    """What the answer kernel runs, in the submission's order: (key, code, its definitions only).

    The student's solution cells (by grade_id); the cells the student added (a code cell that is
    neither a solution nor a test and whose id is no cell of the course's), their imports, functions,
    classes and literal constants only (a helper the student wrote runs, a free cell's experiment or
    loop does not); and the course's set-up cells that these read (the source's version, where the
    submission has the cell; first, where it does not). Not the course's experiments, not the tests."""
    course_ids = {c.get("id") for c in source_nb.cells if c.get("id")}
    source_gids = {nbmeta(c).get("grade_id") for c in source_nb.cells if is_solution_cell(c)}
    picked: list[tuple[str, str, str | None, object]] = []   # (key, code, definitions, cell)
    wanted: set[str] = set()
    for c in source_nb.cells:
        if is_solution_cell(c):
            defined, used, _ = names(c.source)
            wanted |= used - defined
    for n, c in enumerate(submission.cells, 1):
        if c.get("cell_type") != "code" or not c.source.strip():
            continue
        gid = nbmeta(c).get("grade_id")
        if is_solution_cell(c) and gid in source_gids:
            picked.append((f"solution cell {gid}", c.source, definitions_only(c.source), c))
        elif not is_test_cell(c) and not is_solution_cell(c) and c.get("id") not in course_ids:
            code = definitions_only(c.source, constants=True)
            if code is None:  # nothing in it but statements that run: an experiment, a loop
                continue
            picked.append((f"your cell {n}", code, None, c))
        else:
            continue
        defined, used, _ = names(picked[-1][1])
        wanted |= used - defined
    setup = set(setup_cells(source_nb, wanted))
    where = {c.get("id"): i for i, c in enumerate(submission.cells) if c.get("id") in course_ids}
    out: list[tuple[str, str, str | None]] = []
    placed: set[int] = set()
    missing = [i for i in sorted(setup) if source_nb.cells[i].get("id") not in where]
    out += [(f"set-up cell {i + 1}", source_nb.cells[i].source, None) for i in missing]
    placed |= set(missing)
    order = {id(c): n for n, c in enumerate(submission.cells)}
    setup_at = {where[source_nb.cells[i].get("id")]: i for i in setup if i not in placed}
    for n in range(len(submission.cells)):
        if n in setup_at:
            i = setup_at[n]
            out.append((f"set-up cell {i + 1}", source_nb.cells[i].source, None))
        for key, code, defs, cell in picked:
            if order[id(cell)] == n:
                out.append((key, code, defs))
    return out


async def fresh_student(submission, source_nb, s: Settings, label: str, deadline: float,
                        crashed: dict | None = None, events: dict | None = None) -> kernels.Kernel:
    """A new answer kernel: the student's kernel in which the grader calls their functions.

    It runs on the course library's view (`s.library_view`, autograder/sandbox/library_view.py:
    the library's modules with their declarations only, no code that computes), so a graded
    function that hands its work to the library finds nothing to call, however it tries: on a thread,
    with tracing off, in a subprocess, from a copy. It runs what `answer_cells` picks, never the
    course's experiments.

    A cell that kills (or hangs) the kernel while it starts is left out of the next fresh kernel, so
    that a function which crashes costs only the tests that call it: a solution cell keeps its
    imports, functions and classes (its top-level code, e.g. a student's own check calling the
    function, is dropped), then, if that still kills the kernel, goes; a set-up cell goes.
    `crashed` (cell key -> "definitions" or "skipped") carries that from one fresh kernel to the next."""
    crashed = {} if crashed is None else crashed
    cells = answer_cells(submission, source_nb)
    while True:
        run = []
        for key, code, defs in cells:
            state = crashed.get(key)
            if state is None:
                run.append((key, code))
            elif state == "definitions" and defs is not None:
                run.append((key, defs))
        k = kernels.Kernel(f"answer ({label})", s.scratch, _env(), s.course_roots, s.use_sandbox, view=s.library_view)
        await _started(k, events)
        t = time.monotonic()
        killer = await _run_cells(k, run, s, deadline)
        spent(events, "answer_cells", time.monotonic() - t)
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
        t = time.monotonic()
        await _inject(k, watch=s.watch)
        spent(events, "answer_setup", time.monotonic() - t)
    return k


async def _feedback_run(nb, s: Settings, events: dict) -> tuple[kernels.Kernel, list, list]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + s.notebook_timeout
    book = kernels.Outputs(s.cell_cap, s.notebook_cap)
    outputs: list = [None] * len(nb.cells)
    counts: list = [None] * len(nb.cells)
    k = kernels.Kernel("student", s.scratch, _env(), s.course_roots, s.use_sandbox)
    await _started(k, events)
    t = time.monotonic()
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
    spent(events, "feedback_cells", time.monotonic() - t)
    return k, outputs, counts


async def _start_tests_kernel(source_nb, tests, s: Settings, broker: Broker, events: dict,
                              upto: int | None = None) -> kernels.Kernel:
    """The tests' kernel: grader code loaded, proxies bound, and the set-up cells that come before
    cell `upto` (default: the first test cell) already run, while the feedback run goes on."""
    k = kernels.Kernel("tests", s.scratch, None, s.course_roots, s.use_sandbox)
    sock = k.runtime / "rpc.sock"
    await broker.serve(sock)
    k.env_extra = dict(_env(), LLMRL_GRADER_RPC=str(sock))
    await _started(k, events)
    t = time.monotonic()
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
    spent(events, "tests_setup", time.monotonic() - t)
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


async def _grading_run(source_nb, tests, s: Settings, broker: Broker, tests_kernel_task, events: dict,
                       kernels_used: list, start_fresh) -> tuple[dict, str | None, dict]:
    """The grading run: the answer kernel (started at once, beside the feedback run), the answer-key
    probe in it, then every test cell of the source in the tests' kernel. (verdicts, probe's answer,
    how probe calls ended)."""
    loop = asyncio.get_running_loop()
    verdicts: dict = {}
    broker.student = await start_fresh("first")
    events["student_kernel"] = ANSWER_KERNEL
    grading_deadline = loop.time() + s.notebook_timeout
    broker.grading_deadline = grading_deadline
    t = time.monotonic()
    probe_answer, probe_ends = await _answer_key(broker.student, s.probe, s, events)
    spent(events, "probe", time.monotonic() - t)
    broker.ready.set()
    tk = await tests_kernel_task
    kernels_used.append(tk)
    t = time.monotonic()
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
    spent(events, "tests", time.monotonic() - t)
    return verdicts, probe_answer, probe_ends


async def run_notebook(nb, source_nb, s: Settings) -> NotebookResult:
    """Both runs of one notebook, side by side: the feedback run in the student's kernel (the course
    library as students have it), the grading run with the student's functions in the answer kernel
    (the library's declarations only) and the tests in the tests' kernel."""
    events = {"notebook_timeout": False, "kernel_died": None, "cells_skipped": 0, "calls": 0, "restarts": 0,
              "student_kernel": None}
    review: list = []
    tests = source_tests(source_nb)
    kernels_used: list[kernels.Kernel] = []
    broker = None
    started = time.monotonic()
    grading = tests_kernel_task = None
    try:
        crashed_cells: dict = {}

        async def start_fresh(label):
            loop = asyncio.get_running_loop()
            k = await fresh_student(nb, source_nb, s, label, loop.time() + s.notebook_timeout, crashed_cells, events)
            kernels_used.append(k)
            return k

        if tests:
            broker = Broker(s, start_fresh, review, events)
            tests_kernel_task = asyncio.ensure_future(_start_tests_kernel(source_nb, tests, s, broker, events))
            grading = asyncio.ensure_future(_grading_run(source_nb, tests, s, broker, tests_kernel_task, events,
                                                         kernels_used, start_fresh))
        outputs: list = [None] * len(nb.cells)
        counts: list = [None] * len(nb.cells)
        cpu = 0.0
        if s.feedback:
            fb, outputs, counts = await _feedback_run(nb, s, events)
            if not fb.dead:
                cpu += await fb.cpu_seconds() or 0.0
            t = time.monotonic()
            await fb.shutdown()  # nothing of it is graded: its kernel goes as soon as its outputs are in
            spent(events, "kernel_shutdown", time.monotonic() - t)
        events["feedback_s"] = round(time.monotonic() - started, 1)
        verdicts: dict = {}
        probe_answer, probe_ends = None, {}
        if grading is not None:
            verdicts, probe_answer, probe_ends = await grading
        for k in kernels_used + (broker.retired if broker else []):
            if not k.dead:
                cpu += await k.cpu_seconds() or 0.0
        events["kernel_cpu_s"] = round(min(cpu, 1e6), 2)
        events["seconds"] = round(time.monotonic() - started, 1)
        return NotebookResult(outputs, counts, verdicts, events, review, [c.get("source") for c in nb.cells],
                              probe_answer if tests else None, probe_ends, broker.watch if broker else {})
    finally:
        for task in (grading, tests_kernel_task):
            if task is None:
                continue
            if not task.done():
                task.cancel()
            try:
                k = await task
            except (asyncio.CancelledError, Exception):
                k = None
            if isinstance(k, kernels.Kernel):
                kernels_used.append(k)
        if broker is not None:
            await broker.close()
        t = time.monotonic()
        for k in set(kernels_used + (broker.retired if broker else []) + ([broker.student] if broker and broker.student else [])):
            await k.shutdown()
        spent(events, "kernel_shutdown", time.monotonic() - t)


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


