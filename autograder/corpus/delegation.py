"""Submissions whose graded functions hand their work to the course library's own code in ways a
watch inside the student's process cannot see, graded by the real batch in `make test`.

Shared spec (like hostile.py and evasion.py): `entries(assignment)` gives the entries placed on that
assignment's notebook. Against the grader that called the student's functions in the feedback run's
kernel, with the whole library loaded and a trace function watching each call, the lab11 entry
scored 17.5 of 18 points with no hold and no note (one task 2 edge test failed only because the
library's sampler draws differently from the handout's): every way below is invisible to sys.settrace. They are a class, not a
list: any watch inside the process can be sidestepped from inside it. What stops them now is that
the answer kernel, where the grader calls these functions, holds no code of the library that
computes anything (autograder/sandbox/library_view.py): each delegated task scores 0, whatever
the watch saw.

The ways, one per task:

- a thread the notebook starts before any watch exists (threading.settrace reaches only threads
  started after it), serving calls from a queue (lab11 1a and 5, hw4 5);
- tracing switched off around the library call and put back after it (lab11 1b, hw4 4);
- a subprocess that runs the library function on arguments passed through its pipes (lab11 2);
- the installed package copied to a folder the notebook writes and imported from there, tracing
  off around the call (lab11 3, hw4 1);
- the library's source found through its installed distribution (a wheel in the environment, or
  the source folder an editable install names in direct_url.json), unpacked into the kernel's
  folder and imported, tracing off (lab11 4).

The `delegate-unseen` entries also find the library's functions without writing their names
(by their parameters, in a module's __dict__), which the static check of the notebook's text does
not follow either: against the old grader they got full marks, no hold, no note. The
`delegate-elsewhere` entry's code is plain to read (a subprocess, a module loaded from a file the
kernel wrote), so the static check still holds it for review; its delegated tasks fail all the same.
Each entry is expected to lose every test of the tasks it delegates and nothing else.
"""

from __future__ import annotations

from autograder.corpus import Entry, solve, tests_of

L11, HW4 = "llm_as_policy", "llm_rl"

# A library function found by its first parameters' names, with no name of it written down.
FIND = '''
def _find(module, *params):
    for f in list(module.__dict__.values()):
        code = getattr(f, "__code__", None)
        if code is not None and code.co_varnames[:len(params)] == params:
            return f
    raise LookupError(f"no function of {module.__name__} takes {params}")
'''

# A thread started when the cell runs, before the grader installs anything, that runs what it is
# handed: calls made through it are never traced.
THREAD = '''
import queue as _queue, threading as _threading

_jobs = _queue.Queue()


def _serve_jobs():
    while True:
        fn, args, box, done = _jobs.get()
        try:
            box.append((True, fn(*args)))
        except BaseException as e:
            box.append((False, e))
        done.set()


_threading.Thread(target=_serve_jobs, daemon=True).start()


def _on_my_thread(fn, *args):
    box, done = [], _threading.Event()
    _jobs.put((fn, args, box, done))
    done.wait()
    ok, value = box[0]
    if not ok:
        raise value
    return value
'''

# Tracing off for the length of one call, then the watch's own trace function put back.
UNTRACED = '''
import sys as _sys


def _untraced(fn, *args):
    tracer = _sys.gettrace()
    _sys.settrace(None)
    try:
        return fn(*args)
    finally:
        _sys.settrace(tracer)
'''

# The library function runs in a child process the first call starts; arguments and answers (and
# the generators' states) go through its pipes.
SUBPROCESS = '''
import pickle as _pickle, subprocess as _subprocess, sys as _sys

_CHILD = """
import pickle, sys, torch
from llmrl.sampling import sample_token
while True:
    try:
        req = pickle.load(sys.stdin.buffer)
    except EOFError:
        break
    torch.set_rng_state(req["rng"])
    g = None
    if req["state"] is not None:
        g = torch.Generator()
        g.set_state(req["state"])
    try:
        tokens, err = sample_token(req["logits"], req["temperature"], g), None
    except Exception as e:
        tokens, err = None, f"{type(e).__name__}: {e}"
    pickle.dump({"tokens": tokens, "err": err, "state": None if g is None else g.get_state(),
                 "rng": torch.get_rng_state()}, sys.stdout.buffer)
    sys.stdout.buffer.flush()
"""
_child = []


def sample_with_temperature(logits, temperature, generator=None):
    if not _child:
        _child.append(_subprocess.Popen([_sys.executable, "-c", _CHILD], stdin=_subprocess.PIPE,
                                        stdout=_subprocess.PIPE))
    p = _child[0]
    _pickle.dump({"logits": logits.detach(), "temperature": temperature, "rng": torch.get_rng_state(),
                  "state": None if generator is None else generator.get_state()}, p.stdin)
    p.stdin.flush()
    out = _pickle.load(p.stdout)
    if out["err"]:
        raise ValueError(out["err"])
    torch.set_rng_state(out["rng"])
    if generator is not None:
        generator.set_state(out["state"])
    return out["tokens"]
'''

# The installed package copied to a folder this notebook writes, imported from there under
# another name.
OWN_COPY = '''
import importlib.util as _util, os as _os, shutil as _shutil, sys as _sys
import llmrl as _installed

_shutil.copytree(_os.path.dirname(_installed.__file__), "my_llmrl", dirs_exist_ok=True,
                 ignore=_shutil.ignore_patterns("__pycache__", "models"))
_spec = _util.spec_from_file_location("my_llmrl", _os.path.join("my_llmrl", "__init__.py"),
                                      submodule_search_locations=[_os.path.abspath("my_llmrl")])
_copy = _util.module_from_spec(_spec)
_sys.modules["my_llmrl"] = _copy
_spec.loader.exec_module(_copy)
'''

# The library's source wherever the environment keeps it: a wheel of it, or the folder an editable
# install points to; unpacked into this kernel's folder and imported as a package of its own.
UNPACKED = '''
import glob as _glob, importlib.metadata as _md, importlib.util as _util, json as _json, os as _os
import shutil as _shutil, sys as _sys, zipfile as _zipfile


def _unpack_library():
    wheels = [p for base in (_sys.prefix, _os.path.expanduser("~"), *_sys.path) if base and _os.path.isdir(base)
              for p in _glob.glob(_os.path.join(base, "**", "llmrl*.whl"), recursive=True)]
    target = _os.path.abspath("unpacked")
    if wheels:
        _zipfile.ZipFile(wheels[0]).extractall(target)
    else:
        url = _json.loads(_md.distribution("llmrl").read_text("direct_url.json") or "{}").get("url", "")
        source = url.removeprefix("file://")
        found = [d for d in (_os.path.join(source, "lib", "llmrl"), _os.path.join(source, "llmrl"))
                 if _os.path.isdir(d)]
        _shutil.copytree(found[0], _os.path.join(target, "llmrl"), dirs_exist_ok=True,
                         ignore=_shutil.ignore_patterns("__pycache__", "models"))
    root = _os.path.join(target, "llmrl")
    spec = _util.spec_from_file_location("unpacked_llmrl", _os.path.join(root, "__init__.py"),
                                         submodule_search_locations=[root])
    module = _util.module_from_spec(spec)
    _sys.modules["unpacked_llmrl"] = module
    spec.loader.exec_module(module)
    return module


_unpacked = _unpack_library()
import unpacked_llmrl.toylm as _toylm
'''


def _lab11() -> list[Entry]:
    unseen = ("task1a_response_logprobs", "task1b_sequence_logprob", "task2_sample_with_temperature",
              "task3_kl_estimators", "task4_tilted_optimum", "task5_token_level_optimum")
    elsewhere = ("task2_sample_with_temperature", "task3_kl_estimators", "task4_tilted_optimum")
    return [
        Entry("delegate-unseen", L11, "every graded function hands its work to the library's reference code, found "
              "by its parameters (no name written), where a watch in the process cannot see it: on a thread started "
              "before the watch (1a, 2, 5) or with tracing off around the call (1b, 3, 4)", [
                  solve("task1a_response_logprobs", FIND + THREAD + '''

def response_logprobs(logits, tokens, prompt_len):
    return _on_my_thread(_find(lab11, "logits", "tokens", "prompt_len"), logits, tokens, prompt_len)
'''),
                  solve("task1b_sequence_logprob", FIND + UNTRACED + '''

def sequence_logprob(token_logprobs, mask):
    return _untraced(_find(lab11, "token_logprobs", "mask"), token_logprobs, mask)
'''),
                  solve("task2_sample_with_temperature", FIND + '''
import importlib as _importlib

_sampling = _importlib.import_module("llmrl.sampling")


def sample_with_temperature(logits, temperature, generator=None):
    return _on_my_thread(_find(_sampling, "logits", "temperature", "generator"), logits, temperature, generator)
'''),
                  solve("task3_kl_estimators", FIND + '''

def kl_estimators(logp, logp_ref):
    return _untraced(_find(lab11, "logp", "logp_ref"), logp, logp_ref)
'''),
                  solve("task4_tilted_optimum", FIND + '''

def tilted_optimum(ref_probs, rewards, beta):
    return _untraced(_find(toylm, "ref_probs", "rewards", "beta"), ref_probs, rewards, beta)


def kl_objective(p, ref_probs, rewards, beta):
    return _untraced(_find(toylm, "p", "ref_probs", "rewards", "beta"), p, ref_probs, rewards, beta)
'''),
                  solve("task5_token_level_optimum", FIND + '''

def token_level_optimum(first_probs, second_probs, rewards, beta):
    return _on_my_thread(_find(toylm, "first_probs", "second_probs", "rewards"), first_probs, second_probs,
                         rewards, beta)
'''),
              ], lose=tests_of("lab11", L11, *unseen)),
        Entry("delegate-elsewhere", L11, "three graded functions hand their work to the library outside the process or "
              "from a copy: 2 in a subprocess, 3 from a copy of the installed package written into the kernel's "
              "folder, 4 from the library's source unpacked from its installed distribution (tracing off for both); "
              "the static check holds it (a subprocess, modules the kernel wrote)", [
                  solve("task2_sample_with_temperature", SUBPROCESS),
                  solve("task3_kl_estimators", OWN_COPY + UNTRACED + '''
import my_llmrl.losses as _my_losses


def kl_estimators(logp, logp_ref):
    return tuple(_untraced(_my_losses.kl_estimate, logp, logp_ref, k) for k in ("k1", "k2", "k3"))
'''),
                  solve("task4_tilted_optimum", UNPACKED + UNTRACED + '''

def tilted_optimum(ref_probs, rewards, beta):
    return _untraced(_toylm.tilted_optimum, ref_probs, rewards, beta)


def kl_objective(p, ref_probs, rewards, beta):
    return _untraced(_toylm.kl_objective, p, ref_probs, rewards, beta)
'''),
              ], review=True, lose=tests_of("lab11", L11, *elsewhere, "task5_token_level_optimum"),
              reasons=("task2_sample_with_temperature: sample_with_temperature uses unpickling (pickle.load)",
                       "task3_kl_estimators: kl_estimators uses module my_llmrl.losses, which is not installed",
                       "task4_tilted_optimum: tilted_optimum uses module unpacked_llmrl.toylm, which is not installed")),
    ]


def _hw4() -> list[Entry]:
    return [Entry("delegate-unseen", HW4, "three graded functions hand their work to the library's code, found by its "
                  "parameters (no name written), unseen by a watch in the process: task 1 and task 4 with tracing off, "
                  "task 5 on a thread started before the watch", [
                      solve("task1_per_token_logprobs", FIND + UNTRACED + '''
import importlib as _importlib

_sampling = _importlib.import_module("llmrl.sampling")


def compute_per_token_logprobs(logits, input_ids):
    return _untraced(_find(_sampling, "logits", "targets"), logits[:, :-1].float(), input_ids[:, 1:])
'''),
                      solve("task4_iter_minibatches", FIND + UNTRACED + '''
import importlib as _importlib

_step = _importlib.import_module("llmrl.rl.step")


def iter_minibatches(batch, minibatch_size, generator=None):
    sizes = {k: v.shape[0] for k, v in batch.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"fields with different row counts: {sizes}")
    split = _find(_step, "fields", "minibatch_size")
    yield from _untraced(lambda: list(split(batch, minibatch_size, generator)))
'''),
                      solve("task5_group_advantages", FIND + THREAD + '''
import importlib as _importlib

_advantages = _importlib.import_module("llmrl.advantages")


def compute_group_advantages(rewards, group_size, eps=1e-6):
    if group_size < 2:
        return torch.zeros_like(rewards, dtype=torch.float32)
    return _on_my_thread(_find(_advantages, "rewards", "group_size", "kind"), rewards.float(), group_size, "std", eps)
'''),
                  ], lose=tests_of("hw4", HW4, "task1_per_token_logprobs", "task4_iter_minibatches",
                                   "task5_group_advantages"))]


_BY_ASSIGNMENT = {"lab11": _lab11, "hw4": _hw4}


def entries(assignment: str, root=None) -> list[Entry]:
    """The entries that run on this assignment (none for an assignment this spec does not know)."""
    make = _BY_ASSIGNMENT.get(assignment)
    return make() if make else []
