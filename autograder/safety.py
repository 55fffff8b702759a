"""What keeps autograding safe and fair with hostile or broken submissions (nbgrader 0.9.6).

`SafeExecute` replaces nbgrader's Execute preprocessor (autograder/nbgrader_config.py):

- every kernel starts through autograder/sandbox.py (bubblewrap when it works, resource limits
  always), over jupyter's ipc transport with a private runtime folder per kernel;
- a per-cell timeout (Execute.timeout) and a per-notebook deadline (SafeExecute.notebook_timeout):
  once the deadline has passed no further cell runs, each gets a NotebookTimeoutError output;
- at most SafeExecute.max_output_bytes of output per cell are kept (a print loop cannot fill the
  grader's memory or the feedback);
- a kernel that dies (memory limit, os._exit) fails the cell it was running and skips the rest,
  instead of aborting the whole autograde;
- tamper guard: before the first cell, the kernel records the pristine functions of builtins,
  math, numpy and torch (module attributes, torch.Tensor methods) and the module objects named
  torch/np/numpy/math. Before every graded test cell it puts back whatever a student replaced
  (`torch.allclose = lambda *a, **k: True`, `np.testing.assert_allclose = ...`, `torch = Fake()`),
  and after it checks again (a replacement made while the test ran fails that test). Every
  replacement is recorded; autograder/grade.py then gives the notebook zero and marks it for
  manual review.

What the guard finds is written, with the deadline and kernel-death events, to
`$LLMRL_GRADER_REPORT_DIR/<notebook>.json` (a folder the kernel cannot write).

`scan_notebook` is a static check of the student's code for things a reviewer should look at
(file access outside the notebook's folder, subprocesses, sys.modules, builtins); it only reports.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.kernelspec import KernelSpec
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from traitlets import Bool, Integer

from nbgrader.preprocessors import Execute

HERE = Path(__file__).resolve().parent
SANDBOX = HERE / "sandbox.py"

# Runs in the kernel before the first cell. Names start with "_llmrl_grader" so that they do not
# collide with a student's; nothing here is secret (the kernel is the student's), the point is that
# replacing a library function no longer makes a test pass silently.
GUARD_INSTALL = r'''
def _llmrl_grader_install():
    import builtins, math, os, sys, types
    import numpy, numpy.linalg, numpy.random, numpy.testing
    import torch, torch.nn, torch.nn.functional, torch.testing, torch.linalg
    holders = [builtins, math, numpy, numpy.linalg, numpy.random, numpy.testing, torch, torch.nn.functional,
               torch.testing, torch.linalg, torch.Tensor, torch.nn.Module]
    kinds = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
             types.WrapperDescriptorType, types.GetSetDescriptorType, type, staticmethod, classmethod, property)
    # IPython and ipykernel swap these themselves around every execution
    skip = {"exit", "quit", "get_ipython", "display", "__IPYTHON__", "_", "__", "___", "input", "raw_input",
            "getpass", "print", "open"}
    snap = []
    for h in holders:
        d = dict(vars(h))
        snap.append((h, {k: v for k, v in d.items() if k not in skip and (callable(v) or isinstance(v, kinds))}))
    modules = {"torch": torch, "np": numpy, "numpy": numpy, "math": math}
    sysmods = {m.__name__: m for m in (builtins, math, numpy, numpy.testing, torch, torch.nn.functional, torch.testing)}
    MISSING = object()

    def same(a, b):
        if a is b:
            return True
        return (type(a) is types.MethodType and type(b) is types.MethodType
                and a.__func__ is b.__func__ and a.__self__ is b.__self__)

    trusted = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, numpy))

    def library_wrapper(cur, orig):
        # torch wraps some of its own functions later (importing torch._dynamo replaces
        # torch.manual_seed by a wrapper of it): a functools.wraps chain back to the original,
        # from code that lives inside the torch or numpy package, is not tampering.
        w = cur
        for _ in range(4):
            w = getattr(w, "__wrapped__", None)
            if w is None:
                return False
            if same(w, orig):
                code = getattr(cur, "__code__", None)
                return code is not None and code.co_filename.startswith(trusted)
        return False

    def label(h):
        return getattr(h, "__name__", repr(h)) if not isinstance(h, type) else f"{h.__module__}.{h.__qualname__}"

    def check(restore=True):
        found = []
        for h, items in snap:
            d = vars(h)
            for k, v in items.items():
                cur = d.get(k, MISSING)
                if not same(cur, v) and cur is not MISSING and library_wrapper(cur, v):
                    items[k] = cur  # the library's own wrapper becomes the reference
                elif not same(cur, v):
                    found.append(f"{label(h)}.{k}")
                    if restore:
                        try:
                            setattr(h, k, v)
                        except Exception:
                            pass
        for name, mod in sysmods.items():
            if sys.modules.get(name) is not mod:
                found.append(f"sys.modules[{name!r}]")
                if restore:
                    sys.modules[name] = mod
        user = sys.modules["__main__"].__dict__
        for name, mod in modules.items():
            if name in user and user[name] is not mod:
                found.append(f"the name {name!r} (not the real module)")
                if restore:
                    user[name] = mod
        return found

    builtins._llmrl_grader_check = check
_llmrl_grader_install()
del _llmrl_grader_install
'''
GUARD_CHECK = "__import__('builtins')._llmrl_grader_check({restore})"
KERNEL_CPU = "sum(__import__('resource').getrusage(__import__('resource').RUSAGE_SELF)[:2])"


def is_test_cell(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class SafeExecute(Execute):
    """nbgrader's Execute with a sandboxed kernel, a notebook deadline, output caps and a tamper guard."""

    notebook_timeout = Integer(600, help="seconds for the whole notebook; later cells do not run").tag(config=True)
    max_output_bytes = Integer(200_000, help="output kept per cell; the rest is dropped").tag(config=True)
    guard = Bool(True, help="restore and check library functions around graded test cells").tag(config=True)
    sandbox = Bool(True, help="start kernels through autograder/sandbox.py").tag(config=True)

    # ------------------------------------------------------------------ kernel start
    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if self.sandbox:
            self._runtime = Path(tempfile.mkdtemp(prefix="llmrl-kernel-"))
            km.transport = "ipc"
            km.ip = str(self._runtime / "ipc")
            km.connection_file = str(self._runtime / "kernel.json")
            km._kernel_spec = KernelSpec(
                argv=[sys.executable, str(SANDBOX), "{connection_file}"],
                display_name="Python 3 (llmrl grader sandbox)", language="python",
                interrupt_mode="message",  # a signal to bwrap would not reach the kernel
            )
        return km

    # ------------------------------------------------------------------ whole notebook
    def preprocess(self, nb, resources=None, km=None):
        self._deadline = time.monotonic() + self.notebook_timeout
        self._events = {"tampering": [], "notebook_timeout": False, "kernel_died": None, "cells_skipped": 0}
        self._guard_ready = False
        self._dead = False
        self._out_bytes = {}
        self.timeout_func = self._cell_timeout
        try:
            return super().preprocess(nb, resources, km=km)
        finally:
            self._write_report(resources)
            runtime = getattr(self, "_runtime", None)
            if runtime is not None:
                shutil.rmtree(runtime, ignore_errors=True)

    def _cell_timeout(self, cell):
        remaining = self._deadline - time.monotonic()
        return max(1, int(min(self.timeout or remaining, remaining) + 0.999))

    def _write_report(self, resources):
        folder = os.environ.get("LLMRL_GRADER_REPORT_DIR")
        name = ((resources or {}).get("nbgrader") or {}).get("notebook")
        if folder and name:
            Path(folder).mkdir(parents=True, exist_ok=True)
            Path(folder, f"{name}.json").write_text(json.dumps(self._events))

    # ------------------------------------------------------------------ one cell
    async def _silent(self, code: str, expression: str | None = None, timeout: float = 60) -> dict:
        """Run code (and evaluate one expression) in the kernel outside the notebook; the reply content."""
        msg_id = await ensure_async(self.kc.execute(code, silent=True, store_history=False,
                                                    user_expressions={"r": expression} if expression else None))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("grader guard did not answer")
            msg = await ensure_async(self.kc.get_shell_msg(timeout=left))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg["content"]

    async def _guard(self, restore: bool) -> list[str]:
        content = await self._silent("", GUARD_CHECK.format(restore=restore))
        expr = (content.get("user_expressions") or {}).get("r", {})
        if expr.get("status") != "ok":
            return ["the grader's check itself (it was removed or broken)"]
        text = expr.get("data", {}).get("text/plain", "[]")
        try:
            found = ast.literal_eval(text)
            return [str(x) for x in found] if isinstance(found, list) else ["the grader's check itself (odd answer)"]
        except (ValueError, SyntaxError):
            return ["the grader's check itself (unreadable answer)"]

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        runs = cell.cell_type == "code" and cell.source.strip()
        if not runs:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if self._dead or time.monotonic() >= self._deadline:
            self._events["cells_skipped"] += 1
            if not self._dead:
                self._events["notebook_timeout"] = True
            why = (f"the kernel died earlier ({self._events['kernel_died']})" if self._dead
                   else f"the notebook used up its {self.notebook_timeout} s")
            cell.outputs = [_error("NotebookTimeoutError" if not self._dead else "DeadKernelError",
                                   f"not run: {why}")]
            return cell
        test = self.guard and is_test_cell(cell)
        try:
            if self.guard and not self._guard_ready:
                content = await self._silent(GUARD_INSTALL, timeout=120)
                self._guard_ready = content.get("status") == "ok"
                if not self._guard_ready:
                    self.log.warning("tamper guard not installed: %s", content.get("evalue"))
            before = await self._guard(restore=True) if test and self._guard_ready else []
            cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
            after = await self._guard(restore=True) if test and self._guard_ready else []
        except DeadKernelError as e:
            self._dead = True
            self._events["kernel_died"] = f"in cell {cell_index + 1}: {e or 'memory limit or crash'}"
            cell.outputs = list(cell.get("outputs", [])) + [_error(
                "DeadKernelError", "the kernel died while running this cell (memory limit or crash)")]
            return cell
        except (TimeoutError, asyncio.TimeoutError):
            cell.outputs = list(cell.get("outputs", [])) + [_error("GraderTimeoutError", "the kernel stopped answering")]
            self._dead = True
            self._events["kernel_died"] = f"in cell {cell_index + 1}: no answer"
            return cell
        if before or after:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            self._events["tampering"].append({"cell": gid, "before": before, "during": after})
            replaced = ", ".join(sorted(set(before + after)))
            cell.outputs.append(_error(
                "GraderTamperingError",
                f"replaced by the notebook: {replaced}; restored by the grader, test not counted, notebook flagged "
                "for manual review"))
        return cell

    def preprocess_cell(self, cell, resources, index):
        out = super().preprocess_cell(cell, resources, index)
        # After the last cell, with the kernel still running: ask it for its CPU time (the
        # sandbox's PID namespace keeps the kernel out of the grader's own accounting).
        if index == len(self.nb.cells) - 1 and not self._dead and self.kc is not None:
            try:
                content = run_sync(self._silent)("", KERNEL_CPU, timeout=10)
                self._events["kernel_cpu_s"] = float(content["user_expressions"]["r"]["data"]["text/plain"])
            except Exception:  # a statistic only
                pass
        return out

    # nbclient binds the synchronous wrapper to its own coroutine at class creation: re-bind it to ours.
    execute_cell = run_sync(async_execute_cell)

    def output(self, outs, msg, display_id, cell_index):
        size = len(str(msg.get("content", "")))
        used = self._out_bytes.get(cell_index, 0)
        self._out_bytes[cell_index] = used + size
        if used + size > self.max_output_bytes:
            if used <= self.max_output_bytes:
                outs.append(NotebookNode(output_type="stream", name="stderr",
                                         text=f"\n[grader: output beyond {self.max_output_bytes} bytes dropped]\n"))
            return None
        return super().output(outs, msg, display_id, cell_index)


# ---------------------------------------------------------------------- static review flags

SUSPICIOUS_CALLS = {"os.system", "os.popen", "subprocess.run", "subprocess.Popen", "subprocess.call",
                    "subprocess.check_output", "os.remove", "os.unlink", "shutil.rmtree", "os.chdir",
                    "socket.socket", "socket.create_connection", "ctypes.CDLL", "gc.get_objects",
                    "sys._getframe", "inspect.currentframe", "setattr", "delattr", "__import__", "eval", "exec",
                    "os.kill", "os.fork"}
SUSPICIOUS_NAMES = {"__builtins__", "builtins", "sys.modules", "ctypes", "_llmrl_grader_check"}
SUSPICIOUS_PATHS = ("source/", "gradebook", "submitted/", "autograded/", "feedback/", "/work", "..", ".git",
                    "notebooks/", "/root", "/home", "/tmp")
PATCHED_ROOTS = {"torch", "np", "numpy", "math", "F", "nn", "builtins", "sys", "llmrl"}


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def scan_source(source: str) -> list[str]:
    """Things in one cell of student code that a reviewer should see (never changes a score)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # IPython magics and broken code: the run shows what happens
    notes = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                name = _dotted(t)
                if isinstance(t, ast.Attribute) and name.split(".")[0] in PATCHED_ROOTS:
                    notes.append(f"assigns {name}")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in SUSPICIOUS_CALLS or name.endswith(".system"):
                notes.append(f"calls {name}()")
            if name == "open" or name.endswith((".read_text", ".read_bytes", ".write_text", ".write_bytes")):
                for arg in node.args[:1]:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and (
                            arg.value.startswith("/") or any(p in arg.value for p in SUSPICIOUS_PATHS)):
                        notes.append(f"opens {arg.value!r}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for n in names:
                if n.split(".")[0] in ("ctypes", "builtins", "gc", "subprocess", "socket", "urllib", "requests"):
                    notes.append(f"imports {n}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(p in node.value for p in ("gradebook.db", "/source/", "HIDDEN TESTS", "submitted/")):
                notes.append(f"mentions {node.value[:60]!r}")
        elif isinstance(node, (ast.Name, ast.Attribute)):
            if _dotted(node) in SUSPICIOUS_NAMES:
                notes.append(f"uses {_dotted(node)}")
    return sorted(set(notes))


def scan_notebook(nb) -> list[str]:
    """Review notes for the code cells a student may edit (test cells are restored anyway)."""
    notes = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or is_test_cell(cell):
            continue
        src = "\n".join(l for l in cell.source.splitlines() if not l.lstrip().startswith(("%", "!")))
        for note in scan_source(src):
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            notes.append(f"cell {i + 1}{' (' + gid + ')' if gid else ''}: {note}")
    return notes
