"""The answer-key check at run time: the watch (sys.settrace around every graded call in the student's
kernel), the probe (one graded function at a time on small inputs), code fingerprints, and the notes
from their reports.
"""

from __future__ import annotations
import ast
import json
import re
from functools import lru_cache
from pathlib import Path
from autograder.review.library_index import Library, library
from autograder.review.notebook_text import _cells
from autograder.review.static_notes import _function_body_lines
from autograder.review.task_map import ANYWHERE, Lean, Task, tasks_for

# ============================================================================ the runtime check

# Runs in the student's kernel: the probe (after the notebook's cells) and, as the module
# _llmrl_watch, around every graded call (autograder/execution/remote_calls.py's serve). Defines nothing but
# _llmrl_answer_key_* names; it must not import the autograder (the sandbox hides it). The grader
# runs the same source to fingerprint the library and the notebook's own code with the same function.
_WATCH = r'''
def _llmrl_answer_key_norm(c, depth=0):
    import types
    if isinstance(c, types.CodeType):
        return ("code", _llmrl_answer_key_fingerprint(c, depth + 1) if depth < 30 else "deep")
    if c is None or isinstance(c, (str, bytes)):
        return "text"                    # docstrings (None when there is none) and messages: edited at will
    if isinstance(c, tuple):
        return ("tuple",) + tuple(_llmrl_answer_key_norm(x, depth + 1) for x in c)
    if isinstance(c, frozenset):         # a set's order depends on the process's hash seed
        return ("frozenset",) + tuple(sorted(repr(_llmrl_answer_key_norm(x, depth + 1)) for x in c))
    return repr(c)


def _llmrl_answer_key_fingerprint(code, depth=0):
    """What a code object does, however it is named and wherever it came from: its bytecode, the
    names it reads, its constants other than strings (nested code by its own fingerprint) and its
    signature; not its name, file, line numbers, local names, docstring or messages."""
    import hashlib
    head = repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_names,
                 tuple(_llmrl_answer_key_norm(c, depth) for c in code.co_consts)))
    return hashlib.sha256(head.encode() + b"\0" + code.co_code).hexdigest()[:32]


def _llmrl_answer_key_canary():
    return 1


class _llmrl_answer_key_Watch:
    """Sees every Python function one call runs (sys.settrace, threading.settrace for the threads it
    starts) and reports the course library's functions it ran, by where they live ("lib"); any code
    whose fingerprint is one of the library's complete versions of a graded task, wherever that code
    came from: a copied file, unpickling, marshal, a rebuilt code object ("copies"); and a trace or
    profile function that was set before it began or that replaced it during the call ("tracer")."""

    def __init__(self, spec):
        self.table = spec["fingerprints"]              # fingerprint -> library function
        self.lengths = set(spec["lengths"])            # their bytecode lengths (a cheap first test)
        self.pkg = tuple(spec["pkg"])
        self.cache = {}

    def start(self):
        import sys, threading
        self.lib, self.copies, self.tracer, self.canary = set(), set(), [], False
        self.old = (sys.gettrace(), sys.getprofile(), getattr(threading, "_trace_hook", None),
                    getattr(threading, "_profile_hook", None))
        names = ("sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile")
        pre = [n for n, f in zip(names, self.old) if f is not None]
        if pre:
            self.tracer.append("a trace or profile function was already set (" + ", ".join(pre) + ")")
        self.fn = self._trace
        threading.settrace(self.fn)
        sys.settrace(self.fn)
        _llmrl_answer_key_canary()
        if not self.canary:
            self.tracer.append("the watch saw no call (sys.settrace does not work in this kernel)")
        return self

    def stop(self):
        import sys, threading
        now = sys.gettrace()
        sys.settrace(self.old[0])
        threading.settrace(self.old[2])
        if now is not self.fn and self.canary:
            self.tracer.append("the trace function was replaced or removed during the call")
        return {"lib": sorted(self.lib)[:200], "copies": sorted(self.copies)[:50], "tracer": self.tracer}

    def _trace(self, frame, event, arg):
        if event != "call":
            return None
        code = frame.f_code
        hit = self.cache.get(id(code))
        if hit is None or hit[0] is not code:
            hit = (code, self._classify(code, frame))
            if len(self.cache) < 100000:
                self.cache[id(code)] = hit
        for kind, what in hit[1]:
            if kind == "canary":
                self.canary = True
            elif kind == "lib":
                self.lib.add(what)
            elif kind == "absent":
                # the answer kernel's placeholder for a library name was used: which name it stands for
                try:
                    self.lib.add("absent:" + str(object.__getattribute__(frame.f_locals["self"],
                                                                         "_llmrl_absent_name"))[:200])
                except Exception:
                    pass
            else:
                self.copies.add(what)
        return None

    def _classify(self, code, frame):
        out = []
        if code is _llmrl_answer_key_canary.__code__:
            return [("canary", None)]
        name = frame.f_globals.get("__name__", "?") if isinstance(frame.f_globals, dict) else "?"
        filename = code.co_filename if isinstance(code.co_filename, str) else "?"
        if filename.startswith(self.pkg):
            if code.co_qualname == "Absent._fail" and str(name).endswith("._grading_view"):
                return [("absent", None)]
            out.append(("lib", str(name)[:200] + "." + code.co_qualname))
        try:
            if len(code.co_code) in self.lengths:
                target = self.table.get(_llmrl_answer_key_fingerprint(code))
                if target:
                    out.append(("copy", (target, filename[-300:], str(name)[:200], code.co_qualname[:200])))
        except Exception:
            pass
        return out
'''

_PROBE = r'''
def _llmrl_answer_key_probe(keys=None):
    """Call each graded function (those of `keys`, default all) once on small inputs under the watch."""
    import builtins, inspect, itertools, json, math
    import numpy as np
    import torch
    from llmrl.rl.losses import LossBatch
    from types import SimpleNamespace
    spec = _llmrl_answer_key_SPEC
    ns = globals()
    out = {"tracer": "ok", "functions": {}}

    def make_inputs(src):
        g = torch.Generator().manual_seed(0)
        def R(*shape):
            return torch.randn(*shape, generator=g)
        def I(high, *shape):
            return torch.randint(0, high, shape, generator=g)
        def M(*shape):
            m = torch.rand(*shape, generator=g) > 0.4
            if m.ndim:
                m[..., 0] = True
            return m
        def G():
            return torch.Generator().manual_seed(0)
        env = {"torch": torch, "np": np, "math": math, "LossBatch": LossBatch, "SimpleNamespace": SimpleNamespace,
               "R": R, "I": I, "M": M, "G": G}
        return eval(src, env)

    for key, fname, src in spec["specs"]:
        if keys is not None and key not in keys:
            continue
        fn = ns.get(fname, getattr(builtins, fname, None))
        entry = {"function": fname}
        out["functions"][key] = entry
        if not callable(fn):
            entry["error"] = "not defined"
            continue
        try:
            args, kwargs = make_inputs(src)
        except Exception as e:
            entry["error"] = "inputs: " + type(e).__name__
            continue
        watch = _llmrl_answer_key_Watch(spec).start()
        try:
            res = fn(*args, **kwargs)
            if inspect.isgenerator(res) or (hasattr(res, "__next__") and hasattr(res, "__iter__")):
                list(itertools.islice(res, 1000))
        except Exception as e:
            entry["error"] = type(e).__name__
        finally:
            seen = watch.stop()
        entry["reached"], entry["copies"] = seen["lib"], [list(c) for c in seen["copies"]]
        if seen["tracer"]:
            entry["tracer"] = seen["tracer"]
            out["tracer"] = "; ".join(seen["tracer"])[:500]
    return json.dumps(out)
'''


def _watch_namespace() -> dict:
    ns: dict = {}
    exec(compile(_WATCH, "<answer-key watch>", "exec"), ns)
    return ns


_FINGERPRINT = _watch_namespace()["_llmrl_answer_key_fingerprint"]


def fingerprint(code) -> str:
    """The fingerprint the watch gives a code object (the same function runs in the kernel)."""
    return _FINGERPRINT(code)


@lru_cache(maxsize=8)
def _library_codes(folder: str) -> dict[str, object]:
    """Every function of the library (module.qualname -> code object), compiled from its source as
    an import compiles it (so a copy, a pickled or marshalled one, has the same bytecode)."""
    import types

    out = {}
    base = Path(folder)
    for p in sorted(base.rglob("*.py")):
        rel = p.relative_to(base).with_suffix("")
        parts = ["llmrl", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        try:
            code = compile(p.read_text(encoding="utf-8"), str(p), "exec", dont_inherit=True)
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        todo = [c for c in code.co_consts if isinstance(c, types.CodeType)]
        while todo:
            c = todo.pop()
            out[".".join(parts) + "." + c.co_qualname] = c
            todo += [x for x in c.co_consts if isinstance(x, types.CodeType)]
    return out


def watch_spec(assignment: str, notebook: str, lib: Library | None = None) -> dict:
    """What the watch needs for one notebook: the fingerprints of the library's complete versions of
    its tasks (and of ANYWHERE), their bytecode lengths, and the library's folder."""
    lib = lib or library()
    codes = _library_codes(str(lib.folder))
    table = {}
    for t in tasks_for(assignment, notebook):
        for lean in t.library + ANYWHERE:
            code = codes.get(lean.target)
            if code is not None:
                table.setdefault(fingerprint(code), lean.target)
    return {"fingerprints": table, "lengths": sorted({len(codes[t].co_code) for t in table.values()}),
            "pkg": [str(lib.folder).rstrip("/") + "/"]}


def watch_module(assignment: str, notebook: str) -> str:
    """Source of the module _llmrl_watch the grader installs in the student's kernel: the watch and
    this notebook's spec; autograder/execution/remote_calls.py's serve() runs every graded call under it."""
    spec = watch_spec(assignment, notebook)
    return (_WATCH + f"\nSPEC = {spec!r}\n\n"
            "def start():\n    return _llmrl_answer_key_Watch(SPEC).start()\n")


def _large(target: str, lib: Library) -> bool:
    """A library function long enough (4 lines or more) that the same code typed into a notebook
    is a copy, not a coincidence (as the static check's `_copied_from` counts them)."""
    mod, _, name = target.rpartition(".")
    node = lib.modules.get(mod, {}).get("defs", {}).get(name)
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(_function_body_lines(node)) >= 4


def text_fingerprints(notebook) -> set[str]:
    """Fingerprints of every function the notebook's own text defines: its code cells (as IPython
    runs them), %%writefile cells and constant strings of code (exec). A copy of a library function
    whose fingerprint is not among them came from outside the notebook's text: a file written at
    run time, unpickling, marshal, a code object rebuilt or found through the garbage collector."""
    import types

    try:
        from IPython.core.inputtransformer2 import TransformerManager
        transform = TransformerManager().transform_cell
    except ImportError:  # pragma: no cover - IPython is in the grader's environment
        def transform(text):
            return text
    texts = []
    for kind, _, src in _cells(notebook):
        if kind != "code":
            continue
        lines = src.splitlines()
        if lines and lines[0].startswith("%%writefile"):
            texts.append("\n".join(lines[1:]))
            continue
        try:
            texts.append(transform(src))
        except Exception:  # noqa: BLE001 - a cell IPython cannot read runs as nothing
            continue
    out: set[str] = set()
    todo = list(texts)
    done = 0
    while todo and done < 2000:
        text = todo.pop()
        done += 1
        try:
            code = compile(text, "<cell>", "exec", dont_inherit=True)
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            continue
        stack = [code]
        while stack:
            c = stack.pop()
            for x in c.co_consts:
                if isinstance(x, types.CodeType):
                    out.add(fingerprint(x))
                    stack.append(x)
        # code held in a string (exec, compile): compiled the same way
        todo += [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and any(w in n.value for w in ("def ", "lambda", "class "))][:200]
    return out


def probe_keys(assignment: str, notebook: str) -> list[tuple[str, str]]:
    """(key, function) of each call the probe makes, in order (the grader runs them one by one)."""
    return [(f"{t.grade_id}:{t.function}", t.function) for t in tasks_for(assignment, notebook)]


def runtime_probe(assignment: str, notebook: str) -> tuple[str, str]:
    """(code, expression): run `code` silently in the student's kernel after the notebook's cells
    (it only defines _llmrl_answer_key_* names), then read `expression` (a JSON string) back, e.g.
    through user_expressions. `_llmrl_answer_key_probe([key])` probes one function of probe_keys()."""
    spec = dict(watch_spec(assignment, notebook),
                specs=[(f"{t.grade_id}:{t.function}", t.function, t.probe) for t in tasks_for(assignment, notebook)])
    code = _WATCH + _PROBE + f"\n_llmrl_answer_key_SPEC = {spec!r}\n"
    return code, "_llmrl_answer_key_probe()"


def _copy_note(t: Task, target: str, lean: Lean, where: list, text: set | None, lib: Library) -> str | None:
    """The note for code with a library function's fingerprint that a call ran, or None when it is
    the library's own (noted by name) or the notebook's own short code (a coincidence is possible)."""
    if not (isinstance(where, (list, tuple)) and len(where) == 4 and all(isinstance(x, str) for x in where)):
        return None
    _, filename, module, qualname = where
    pkg = str(lib.folder).rstrip("/") + "/"
    if filename.startswith(pkg) and module == target.rpartition(".")[0]:
        return None  # the library's own function, run under its own name: the name-based note says it
    fp = fingerprint(_library_codes(str(lib.folder))[target])
    if text is not None and fp in text:
        if not _large(target, lib):
            return None
        return (f"{t.grade_id}: {t.function} ran {qualname}, typed into the notebook line for line from {target} "
                f"(the same bytecode), which {lean.does}")
    if filename.startswith(pkg):
        origin = f"code of the library's file rebuilt under another module ({module})"
    elif filename.startswith("<") or "/" not in filename:
        origin = f"code rebuilt at run time (its file name says {filename!r}: a code object made, unpickled, " \
                 f"unmarshalled or found through the garbage collector)"
    else:
        inside = re.search(r"llmrl-kernel-[^/]*/work/(.+)$", filename)
        shown = f"{inside.group(1)} (in the kernel's own folder)" if inside else filename
        origin = f"code loaded from {shown}, a file written at run time (no such file is installed)"
    return (f"{t.grade_id}: {t.function} ran a copy of {target} (as {qualname}: the same bytecode, seen at run "
            f"time), which {lean.does}: {origin}")


def _entry_notes(t: Task, lib: Library, reached, copies, text, what: str) -> list[str]:
    """Notes for what one function's calls ran (the probe's or the tests'): the same note whoever
    called it, so that a lean both saw is said once. `what` is kept for the caller's logs."""
    notes = []
    targets = {l.target: l for l in t.library + ANYWHERE}
    seen = set()
    for name in reached if isinstance(reached, list) else []:
        if not isinstance(name, str):
            continue
        absent = name.startswith("absent:")
        canon = lib.canonical(name.removeprefix("absent:").replace(".<locals>", ""))
        if canon in targets and canon not in seen:
            seen.add(canon)
            if absent:  # the answer kernel's view: the call failed, but it says where the answer was meant to come from
                notes.append(f"{t.grade_id}: {t.function} called {canon} (seen at run time), which "
                             f"{targets[canon].does}; the grader does not hold it, so the call failed")
            else:
                notes.append(f"{t.grade_id}: {t.function} ran {canon} (seen at run time), which {targets[canon].does}")
    for where in copies if isinstance(copies, list) else []:
        if isinstance(where, (list, tuple)) and where and where[0] in targets:
            note = _copy_note(t, where[0], targets[where[0]], list(where), text, lib)
            if note:
                notes.append(note)
    return notes


def _text(notebook, text):
    if text is not None or notebook is None:
        return text
    try:
        return text_fingerprints(notebook)
    except Exception:  # noqa: BLE001 - a reviewer's aid: never stops grading
        return None


def runtime_notes(assignment: str, notebook: str, answer, lib: Library | None = None, *,
                  submission=None, text: set | None = None) -> list[str]:
    """Review notes from the runtime probe's answer (the JSON string, or its text/plain repr).

    `submission` (the notebook, any form review_notes takes) or `text` (its text_fingerprints) tells
    copies of library code the notebook itself holds from those loaded at run time; without either,
    every copy is noted. The answer comes from the student's kernel: anything malformed is itself
    a note, never an error."""
    lib = lib or library()
    text = _text(submission, text)
    if isinstance(answer, str):
        raw = answer.strip()
        if raw[:1] in ("'", '"'):
            try:
                raw = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                pass
        try:
            answer = json.loads(raw)
        except (TypeError, ValueError):
            return [f"{notebook}: the answer-key runtime check gave no readable answer (the kernel may have "
                    "replaced it): review the graded functions by hand"]
    if not isinstance(answer, dict) or not isinstance(answer.get("functions"), dict):
        return [f"{notebook}: the answer-key runtime check gave no readable answer: review the graded functions"]
    notes = []
    tracer = answer.get("tracer")
    if tracer != "ok":
        if "already set" in str(tracer):
            notes.append(f"{notebook}: the answer-key probe found a trace or profile function already set in the "
                         f"student's kernel ({str(tracer)[:200]}): code that watches the grader's calls; review it")
        else:
            notes.append(f"{notebook}: the answer-key runtime check could not trace ({str(tracer)[:200]}); "
                         "the static check's notes stand alone: review the graded functions")
    for t in tasks_for(assignment, notebook):
        entry = answer["functions"].get(f"{t.grade_id}:{t.function}")
        if not isinstance(entry, dict):
            continue
        notes += _entry_notes(t, lib, entry.get("reached"), entry.get("copies"), text, "when probed")
    return list(dict.fromkeys(notes))


def watch_notes(assignment: str, notebook: str, watch: dict, probe: dict | None = None, *,
                submission=None, text: set | None = None, lib: Library | None = None) -> list[str]:
    """Reasons for review from the graded calls themselves (autograder/execution/tworun.py collects `watch`:
    function -> {"calls", "answered", "died", "timeout", "lib", "copies", "tracer"}) and from how the
    probe's calls ended (`probe`: function -> "died" or "stalled").

    Held for review: a graded call that ran one of the library's complete versions of its task (by
    name, or by content: a copy); a trace or profile function set before a graded call, or one that
    replaced the watch during it; a graded call that killed the student's kernel (what it ran cannot
    be seen); a probe call that killed the kernel; a probe call that stalled while the same function
    answered the tests' calls (it behaves differently when probed). A function that stalls in the
    probe and in every graded call alike (an infinite loop) is not held: it earns nothing."""
    lib = lib or library()
    text = _text(submission, text)
    notes: list[str] = []
    by_function = {}
    for t in tasks_for(assignment, notebook):
        by_function.setdefault(t.function, []).append(t)
    watch = watch if isinstance(watch, dict) else {}
    tracers: dict[str, list] = {}
    for fname, w in sorted(watch.items()):
        if not isinstance(w, dict):
            continue
        for t in by_function.get(fname, []):
            notes += _entry_notes(t, lib, w.get("lib"), w.get("copies"), text, "in a graded call")
        label = by_function[fname][0].grade_id + ": " if fname in by_function else ""
        for why in (w.get("tracer") or [])[:3] if isinstance(w.get("tracer"), list) else []:
            tracers.setdefault(str(why)[:200], []).append(fname)
        if w.get("died"):
            notes.append(f"{label}{fname} killed the student's kernel in {w['died']} graded call(s): what it ran "
                         f"cannot be seen; the tests that did not call it kept their verdicts: review it")
    for why, fnames in tracers.items():   # one note per finding, naming the functions it was found in
        names = ", ".join(fnames[:8]) + (f" and {len(fnames) - 8} more" if len(fnames) > 8 else "")
        notes.append(f"{notebook}: graded calls of {names}: {why}; code that watches or hides from the grader: "
                     f"review it")
    for fname, how in sorted((probe or {}).items() if isinstance(probe, dict) else []):
        label = by_function[fname][0].grade_id + ": " if fname in by_function else ""
        answered = (watch.get(fname) or {}).get("answered", 0) if isinstance(watch.get(fname), dict) else 0
        if how == "died":
            notes.append(f"{label}{fname} killed the student's kernel when the answer-key probe called it: the "
                         f"probe could not see what it runs: review it")
        elif how == "stalled" and answered:
            notes.append(f"{label}{fname} did not return when the answer-key probe called it, yet answered "
                         f"{answered} of the tests' calls: it behaves differently when probed: review it")
    return list(dict.fromkeys(notes))
