"""Benchmarks: ``python -m llmrl.tools.bench`` prints one JSON object per figure.

Everything is measured in the same run on one thread, and speed is reported as ratios within the
run (the machines are shared and noisy): each timing is the best of ``--rounds`` alternated rounds
(the one least disturbed by other jobs), given as wall time and as this process's CPU time, with
the load average beside it.

Figures (16 prompts x 8 samples, 1 epoch, from a fresh TinyLM):

* ``matmul_gflops``: the rate of a 512 x 512 x 512 fp32 matmul, one thread;
* ``rl_step_ms``: one seed's RL step; ``rl_step_flops_ms``: the FLOPs of such a step done the plain
  way (a KV cache in sampling, a reference forward, a training forward and backward over the whole
  sequences) at that rate; ``rl_step_vs_matmul_ratio``;
* ``rl_step_gelu_ms``: the same single-seed step of a GELU TinyLM (lab21's models' nonlinearity, and
  the baseline's), with ``rl_step_gelu_speedup_vs_baseline``;
* ``rl_step_5seeds_ms`` (``--seeds``): five seeds stepping together (``rl_train(seeds=...)``),
  ``rl_step_5seeds_vs_1seed_ratio`` and ``rl_step_5seeds_vs_matmul_ratio`` (against five steps' FLOPs);
* ``baseline_rl_step_ms``: the plain-torch step of ``../shared/baseline`` (``quick_rl_bench.py``,
  run as a subprocess before and after ours) and ``rl_step_speedup_vs_baseline``;
* ``sft_step_ms`` (batch 64);
* ``lab19_hacking_arm_s`` (300 steps, 1 seed and 5 seeds) and ``lab21_project0_s`` (four arms at
  the full budget, 5 seeds), whole runs with their evaluations;
* ``lab11_widget_update_s``, ``lab19_widget_update_s``, ``lab21_widget_update_s``: a slider move redrawn;
* ``sft_teacher_student_s`` (lab21's SFT run from scratch, which yields its student and teacher) and
  ``trl_grpo_vs_ours_per_sequence`` (optional, with the ``trl`` extra).
* ``hw4_data_parallel_wall_ratio``: hw4's trainer on 2 CPU processes against 1 process over the
  same prompts and samples, with the CPU-time ratio that shared cores do not blur (``--only-dp``
  runs this figure alone, ``--skip-dp`` leaves it out).

``--against REV`` prints instead the RL step (1 seed and ``--seeds``) of git revision REV (or of a
folder holding ``llmrl/``) and of this library, each run in its own process, alternated
``--rounds`` times: a change's before and after in one run.

``--profile`` prints instead where a step's time goes (``rl_step_profile``: ms per step in each
stage and in the main calls inside them, for one seed and for ``--seeds`` together) and the
operators torch runs per step (``rl_step_ops``: their count and the busiest by self time).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ..tasks.addition import PROMPT_LEN, RESPONSE_LEN
from ..rl.train import rl_train
from ..sft.checkpoints import LAB21_SFT, LAB21_SNAPSHOTS
from ..sft.supervised import SFTConfig, sft_train
from ..lm.tinylm import TinyLM
from ..utils import repo_root, set_threads

BASELINE = Path("shared") / "baseline" / "quick_rl_bench.py"


def emit(name: str, value, unit: str, **extra) -> dict:
    rec = {"figure": name, "value": value, "unit": unit, **extra}
    print(json.dumps(rec), flush=True)
    return rec


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages (what else the machine was doing)."""
    return [round(x, 2) for x in os.getloadavg()]


def matmul_gflops(n: int = 512, repeats: int = 20) -> tuple[float, float]:
    """(GFLOP/s by wall time, GFLOP/s by this process's CPU time) of an n x n x n fp32 matmul."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    with Clock() as c:
        for _ in range(repeats):
            a @ b
    flop = 2 * n ** 3 * repeats / 1e9
    return flop / c.wall, flop / max(c.cpu, 1e-9)


def best_rate(*rates: tuple[float, float]) -> tuple[float, float]:
    """The fastest wall rate and the fastest CPU rate of several :func:`matmul_gflops`."""
    return max(r[0] for r in rates), max(r[1] for r in rates)


def forward_flops(model: TinyLM, n_tokens: int, context: int) -> float:
    """Multiply-adds x 2 of a forward pass over ``n_tokens`` tokens attending to ``context`` keys."""
    c = model.config
    per_layer = 2 * (3 * c.d * c.d + c.d * c.d + 2 * c.d * c.ff) + 2 * 2 * context * c.d
    return n_tokens * (c.n_layers * per_layer + 2 * c.d * c.vocab_size)


def rl_step_flops(model: TinyLM, n_prompts: int = 16, group: int = 8) -> float:
    """The FLOPs of one step done the plain way with a KV cache: the same yardstick as before the
    step was made faster (the step now computes fewer: no column past the last token any row
    scores, the old policy's log-probs taken from sampling)."""
    B = n_prompts * group
    prompt = forward_flops(model, n_prompts * PROMPT_LEN, PROMPT_LEN)
    sample = prompt + sum(forward_flops(model, B, PROMPT_LEN + i + 1) for i in range(RESPONSE_LEN - 2))
    scored = prompt + forward_flops(model, B * (RESPONSE_LEN - 1), PROMPT_LEN + RESPONSE_LEN)
    # sampling, the reference forward (KL tracking), and the training forward + backward (2x forward)
    return sample + scored + 3 * scored


class Clock:
    """Wall and CPU seconds of a block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def time_rl_steps(model, steps: int, seeds=None, **kw) -> tuple[float, float]:
    """(wall ms, CPU ms) per step of ``steps`` RL steps (after 3 warm-up steps)."""
    rl_train(copy.deepcopy(model), steps=3, progress=False, seeds=seeds, **kw)
    with Clock() as c:
        rl_train(copy.deepcopy(model), steps=steps, progress=False, seeds=seeds, **kw)
    return c.wall / steps * 1000, c.cpu / steps * 1000


def best_of(rounds: int, *fns):
    """Run the functions alternately ``rounds`` times; per function the result with the least wall time."""
    best = [None] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            r = fn()
            if best[i] is None or r[0] < best[i][0]:
                best[i] = r
    return best


def time_sft_steps(steps: int = 100) -> float:
    sft_train(SFTConfig(steps=5))
    t = time.perf_counter()
    sft_train(SFTConfig(steps=steps))
    return (time.perf_counter() - t) / steps * 1000


def baseline_script() -> Path | None:
    """``../shared/baseline/quick_rl_bench.py`` seen from the repository (or ``$LLMRL_BASELINE``)."""
    env = os.environ.get("LLMRL_BASELINE")
    if env:
        return Path(env)
    root = repo_root() or Path.cwd()
    for parent in [root, *root.parents]:
        if (parent / BASELINE).is_file():
            return parent / BASELINE
    return None


#: Runs the baseline script unchanged in its own process with its clock (``time.perf_counter``)
#: reading that process's CPU time, so that it reports CPU ms per step like ours.
_CPU_CLOCK = ("import runpy, sys, time; time.perf_counter = time.process_time; "
              "sys.argv = [sys.argv[1]]; runpy.run_path(sys.argv[0], run_name='__main__')")


def baseline_ms(script: Path, cpu: bool = False) -> float | None:
    """The plain-torch step's ms, from its own process (never imported): wall ms as it reports
    them, or with ``cpu`` its process's CPU ms per step."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-c", _CPU_CLOCK, str(script)] if cpu else [sys.executable, str(script)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    for line in res.stdout.splitlines():
        try:
            return float(json.loads(line)["ms"])
        except (ValueError, KeyError, TypeError):
            continue
    print(f"baseline failed: {res.stderr[-500:]}", file=sys.stderr)
    return None


# ----------------------------------------------------------------------------- --against

#: Times the RL step of whichever ``llmrl`` comes first on ``sys.path``, in its own process: a
#: fresh TinyLM (seed 0), 3 warm-up steps (fewer if ``steps`` < 3), then ``steps`` timed ones,
#: for one seed and for the seeds given; prints one JSON line {library: the llmrl imported,
#: steps: {seeds: [wall ms, CPU ms] per step}}. Only ``rl_train`` and ``TinyLM`` are used, so it
#: runs on any revision of the library (those before seeds became a dimension have no ``seeds=``: their several-seed
#: figure is None).
_STEP_WORKER = """
import copy, json, sys, time
import torch
torch.set_num_threads(1)
import llmrl
from llmrl.tinylm import TinyLM
try:
    from llmrl.rl.train import rl_train
except ImportError:  # a revision before the library's layers
    from llmrl.trainer import rl_train
steps, seed_counts = int(sys.argv[1]), [int(x) for x in sys.argv[2:]]
torch.manual_seed(0)
model, out = TinyLM(), {}
for n in seed_counts:
    kw = {} if n == 1 else {"seeds": list(range(n))}
    try:
        rl_train(copy.deepcopy(model), steps=min(3, steps), progress=False, **kw)
        w, c = time.perf_counter(), time.process_time()
        rl_train(copy.deepcopy(model), steps=steps, progress=False, **kw)
        out[n] = [(time.perf_counter() - w) / steps * 1000, (time.process_time() - c) / steps * 1000]
    except TypeError:
        out[n] = None
print(json.dumps({"library": llmrl.__file__, "steps": out}))
"""


def library_at(rev: str, into: Path) -> Path:
    """``lib/`` of git revision ``rev`` of this repository, extracted under ``into`` (or, when
    ``rev`` is a directory holding ``llmrl/``, that directory): what ``--against`` puts first on
    ``PYTHONPATH`` for the "before" runs."""
    given = Path(rev)
    if (given / "llmrl" / "__init__.py").is_file():
        return given.resolve()
    if (given / "lib" / "llmrl" / "__init__.py").is_file():
        return (given / "lib").resolve()
    root = repo_root()
    if root is None:
        raise SystemExit(f"--against {rev}: not a library folder, and no git repository to take a revision from")
    archive = subprocess.run(["git", "-C", str(root), "archive", rev, "lib/llmrl"], capture_output=True)
    if archive.returncode:
        raise SystemExit(f"--against {rev}: git archive failed: {archive.stderr.decode()[-300:]}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "lib"


def step_in_process(lib: Path, steps: int, seed_counts: list[int]) -> dict:
    """{seeds: (wall ms, CPU ms) or None} from :data:`_STEP_WORKER` run on the library in ``lib``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(lib) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", _STEP_WORKER, str(steps), *map(str, seed_counts)],
                         capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode:
        raise RuntimeError(f"the step worker failed on {lib}: {res.stderr[-800:]}")
    got = json.loads(res.stdout.strip().splitlines()[-1])
    if not Path(got["library"]).resolve().is_relative_to(Path(lib).resolve()):
        raise RuntimeError(f"the step worker imported {got['library']}, not the library in {lib}")
    return {int(k): (None if v is None else tuple(v)) for k, v in got["steps"].items()}


def against_main(rev: str, steps: int, rounds: int, S: int) -> list[dict]:
    """The RL step of revision ``rev`` ("before") and of this library ("after"), each in its own
    process, alternated ``rounds`` times; per library and seed count the round with the least CPU
    time. Emits both and their ratios (before / after: > 1 means this library is faster)."""
    here = Path(__file__).resolve().parents[2]
    counts = [1, S]
    with tempfile.TemporaryDirectory(prefix="llmrl-bench-against-") as tmp:
        before_lib = library_at(rev, Path(tmp))
        best = {"before": {}, "after": {}}
        for _ in range(rounds):
            for name, lib in (("before", before_lib), ("after", here)):
                for n, r in step_in_process(lib, steps, counts).items():
                    if r is not None and (n not in best[name] or r[1] < best[name][n][1]):
                        best[name][n] = r
    out = []
    for n in counts:
        b, a = best["before"].get(n), best["after"].get(n)
        extra = {} if b is None or a is None else {"speedup_wall": round(b[0] / a[0], 3), "speedup_cpu": round(b[1] / a[1], 3)}
        out.append(emit(f"rl_step_before_after_{n}seed{'s' if n > 1 else ''}", None if a is None else round(a[0], 2), "ms",
                        cpu_ms=None if a is None else round(a[1], 2), before=rev,
                        before_ms=None if b is None else round(b[0], 2), before_cpu_ms=None if b is None else round(b[1], 2),
                        rounds=rounds, steps=steps, **extra))
    a1, aS = best["after"].get(1), best["after"].get(S)
    b1, bS = best["before"].get(1), best["before"].get(S)
    if a1 and aS:
        out.append(emit(f"rl_step_{S}seeds_vs_1seed_before_after", round(aS[1] / a1[1], 2), "x (CPU)",
                        before=None if not (b1 and bS) else round(bS[1] / b1[1], 2), target="<= 2"))
    return out


# ----------------------------------------------------------------------------- --profile

#: What ``--profile`` times: (label, owner, attribute); nested calls are listed under their stage.
PROFILED = (
    ("collect", "rl.step", "collect"),
    ("  generate (sampling)", "backends.tinylm_backend", "TinyLMBackend.generate"),
    ("score", "rl.step", "score"),
    ("  task rewards + correctness", "rl.step", "task_score"),
    ("  task correctness", "rl.step", "task_correct"),
    ("  reference log-probs", "rl.run", "CompletionScorer.ref_logprobs"),
    ("advantages", "rl.step", "compute_advantages"),
    ("update", "rl.step", "update"),
    ("  forward (training)", "rl.run", "CompletionScorer.forward"),
    ("  loss + stats", "rl.step", "_minibatch_loss"),
    ("  stats", "rl.step", "_minibatch_stats"),
    ("  backward", "rl.step", "PolicyOptimizer.backward"),
    ("  clip + AdamW", "rl.step", "PolicyOptimizer.step"),
    ("step_metrics", "rl.step", "step_metrics"),
)


def stage_ms(model, steps: int, seeds=None) -> dict[str, float]:
    """CPU ms per RL step (this process's, so other jobs on the machine count little) spent in each
    of :data:`PROFILED` (patched for the run, then restored), ``step`` (the whole step) and
    ``step_wall``."""
    import importlib

    totals, patches = {label: 0.0 for label, *_ in PROFILED}, []
    for label, mod, attr in PROFILED:
        owner = importlib.import_module(f"llmrl.{mod}")
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        fn = getattr(owner, name)

        def timed(*a, _fn=fn, _label=label, **k):
            t = time.process_time()
            try:
                return _fn(*a, **k)
            finally:
                totals[_label] += time.process_time() - t

        patches.append((owner, name, fn))
        setattr(owner, name, timed)
    try:
        rl_train(copy.deepcopy(model), steps=2, progress=False, seeds=seeds)
        for k in totals:
            totals[k] = 0.0
        with Clock() as c:
            rl_train(copy.deepcopy(model), steps=steps, progress=False, seeds=seeds)
    finally:
        for owner, name, fn in reversed(patches):
            setattr(owner, name, fn)
    out = {k: round(v / steps * 1000, 2) for k, v in totals.items()}
    out["step"], out["step_wall"] = round(c.cpu / steps * 1000, 2), round(c.wall / steps * 1000, 2)
    return out


def op_profile(model, steps: int, seeds=None, top: int = 12) -> dict:
    """torch.profiler over ``steps`` steps: operators per step, their self CPU ms per step, and the
    ``top`` busiest operators (calls and self ms per step)."""
    from torch.profiler import ProfilerActivity, profile

    rl_train(copy.deepcopy(model), steps=2, progress=False, seeds=seeds)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        rl_train(copy.deepcopy(model), steps=steps, progress=False, seeds=seeds)
    ev = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    ev.sort(key=lambda e: -e.self_cpu_time_total)
    calls = sum(e.count for e in ev)
    return {"ops_per_step": round(calls / steps), "op_self_ms_per_step": round(sum(e.self_cpu_time_total for e in ev) / 1000 / steps, 2),
            "top": [{"op": e.key, "calls_per_step": round(e.count / steps, 1),
                     "self_ms_per_step": round(e.self_cpu_time_total / 1000 / steps, 2)} for e in ev[:top]]}


def counted_gflop(model, steps: int, seeds=None) -> float:
    """GFLOP per step that the step's matrix products actually do (torch's FlopCounterMode:
    forward and backward), against :func:`rl_step_flops`'s plain-way yardstick."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        rl_train(copy.deepcopy(model), steps=steps, progress=False, seeds=seeds)
    return counter.get_total_flops() / steps / 1e9


def profile_main(steps: int, S: int) -> list[dict]:
    model, out = TinyLM(), []
    gf = best_rate(matmul_gflops(), matmul_gflops())[1]  # the CPU-time rate: the stages are CPU ms
    for seeds in (None, list(range(S))):
        n = 1 if seeds is None else S
        prof = stage_ms(model, steps, seeds)
        gflop = counted_gflop(model, 3, seeds)
        out.append(emit("rl_step_profile", prof, "CPU ms per step", seeds=n,
                        note="nested calls (indented) are part of the stage above them"))
        out.append(emit("rl_step_counted_gflop", round(gflop, 3), "GFLOP per step", seeds=n,
                        plain_way_gflop=round(n * rl_step_flops(model) / 1e9, 3),
                        at_matmul_rate_ms=round(gflop / gf * 1000, 2), matmul_gflops=round(gf, 1),
                        cpu_vs_counted_ratio=round(prof["step"] / (gflop / gf * 1000), 2)))
        out.append(emit("rl_step_ops", op_profile(model, max(3, steps // 3), seeds), "per step", seeds=n,
                        note="torch.profiler; its own overhead inflates the times"))
    return out


def widget_seconds(box, slider, values) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of the redraws after moving ``slider`` to each of
    ``values`` (values not shown before: a widget that keeps its drawings is timed drawing)."""
    times = []
    for v in values:
        with Clock() as c:
            slider.value = v
        times.append((c.wall, c.cpu))
    return min(times)


def widget_update_seconds() -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds for each lab's widgets to redraw after a slider moves (the slowest of each lab's)."""
    import matplotlib.pyplot as plt

    from ..tasks.addition import eval_problems
    from ..sft.checkpoints import load_checkpoint
    from ..labs import lab11, lab19, lab21

    out = {}
    tw = lab11.temperature_widget(load_checkpoint("sft", progress=False), eval_problems(100))
    bw = lab11.beta_widget("hack")
    out["lab11"] = max(widget_seconds(tw, tw.slider, [2.0, 0.0, 1.5]), widget_seconds(bw, bw.slider, [0.1, 3.0, 0.6]))
    w19 = lab19.beta_widget()
    out["lab19"] = widget_seconds(w19, w19.slider, list(reversed(w19.slider.options))[:3])
    results = lab21.load_results("project2")
    w21 = lab21.rubric_weight_widget(results)
    w_slider = w21.children[0].children[0]
    out["lab21"] = widget_seconds(w21, w_slider, [1.0, 1.5, 2.5])
    plt.close("all")
    return out


def trl_ratio(ours_ms_per_seq: float, steps: int = 3) -> dict | None:
    """TRL GRPOTrainer on a Llama of about TinyLM's size, ms per sequence; None without trl."""
    try:
        from .trl_compare import trl_ms_per_sequence
    except ImportError:
        return None
    ms = trl_ms_per_sequence(steps=steps)
    return {"trl_ms_per_sequence": ms, "ours_ms_per_sequence": ours_ms_per_seq, "ratio": ms / ours_ms_per_seq}


def _timed_command(cmd: list[str], env: dict) -> tuple[float, float, float, float]:
    """(wall seconds of the whole command, seconds of its training as hw4's train command prints
    them, CPU seconds of all its processes, CPU seconds of training of its busiest process)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:8])} ... failed ({proc.returncode}): {proc.stderr[-1500:]}")
    try:
        seconds, cpus = train_timing(proc.stdout)
    except ValueError as e:
        raise RuntimeError(f"{e} of {' '.join(cmd[:8])} ...: {proc.stdout[-500:]}") from None
    return wall, seconds, cpu, max(cpus)


def train_timing(stdout: str) -> tuple[float, list[float]]:
    """(seconds of training, CPU seconds of training of each process) from the last line
    ``python -m llmrl.hw4 train`` prints."""
    found = re.search(r": (\d+) steps in ([0-9.]+) s \(CPU ([0-9., ]+) s", stdout)
    if not found:
        raise ValueError("no timing line in the output")
    return float(found.group(2)), [float(c) for c in found.group(3).split(",")]


def data_parallel_ratio(steps: int = 20, repeats: int = 1, port: int = 8790) -> dict:
    """hw4's trainer (format_copy GRPO, the character model, 8 x 6 rollouts, evaluation every 5 steps)
    on 2 CPU processes (torchrun, gloo) against 1 process over the same prompts and samples (the
    1-process run of ``shares=2``), and against the ordinary 1-process run (``shares=1``: the same
    prompts at the first step, other samples). Runs alternate; each figure is the best of ``repeats``.
    The ratio uses the seconds the runs print for their training (after start-up); ``command_ratio``
    the wall time of the whole commands (interpreter start, model load and, for 2 processes, the
    rendezvous included). ``half_batch_ratio`` is the floor that splitting the work alone allows: one
    process on half the prompts and half the evaluation against the plain run, with nothing to wait for.
    ``cpu_ratio``: the CPU seconds of training of the busier of the 2 processes against the 1-process
    run's. On two otherwise idle cores the wall ratio would be about this (waits for the other
    process aside); unlike wall times on a shared machine it hardly moves with the load."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    common = ["-m", "llmrl.hw4", "train", "--task", "format_copy", "--algo", "grpo", "--steps", str(steps),
              "--fresh", "--no-progress"]
    best: dict = {}
    with tempfile.TemporaryDirectory(prefix="llmrl-bench-dp-") as tmp:
        runs = {"two_processes": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                  "--master_port", str(port), *common, "--run-dir", f"{tmp}/two"],
                "one_process_same_samples": [sys.executable, *common, "--run-dir", f"{tmp}/one", "--set", "shares=2"],
                "one_process_plain": [sys.executable, *common, "--run-dir", f"{tmp}/plain"],
                # one process's share of the work alone: half the prompts (and half the greedy
                # evaluation, which the 2 processes split), no second process to wait for
                "one_process_half_batch": [sys.executable, *common, "--run-dir", f"{tmp}/half",
                                           "--set", "n_prompts=4", "--set", "minibatch_size=12",
                                           "--set", "eval_limit=32"]}
        load_before = os.getloadavg()
        for _ in range(repeats):
            for name, cmd in runs.items():
                got = _timed_command(cmd, env)
                best[name] = tuple(min(a, b) for a, b in zip(best.get(name, (float("inf"),) * 4), got))
    two, one, plain = best["two_processes"], best["one_process_same_samples"], best["one_process_plain"]
    half = best["one_process_half_batch"]
    return {"steps": steps, "two_processes_s": round(two[1], 2), "one_process_s": round(one[1], 2),
            "one_process_plain_s": round(plain[1], 2), "one_process_half_batch_s": round(half[1], 2),
            "ratio": round(two[1] / one[1], 3), "ratio_vs_plain": round(two[1] / plain[1], 3),
            "half_batch_ratio": round(half[1] / plain[1], 3), "command_ratio": round(two[0] / one[0], 3),
            "training_cpu_s": {k: round(v[3], 2) for k, v in best.items()},
            "cpu_ratio": round(two[3] / one[3], 3), "half_batch_cpu_ratio": round(half[3] / plain[3], 3),
            "commands_s": {k: round(v[0], 1) for k, v in best.items()},
            "commands_cpu_s": {k: round(v[2], 1) for k, v in best.items()},
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m llmrl.tools.bench``."""
    ap = argparse.ArgumentParser(prog="python -m llmrl.tools.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--rl-steps", type=int, default=30, help="timed RL steps per round (default 30)")
    ap.add_argument("--rounds", type=int, default=2, help="alternated rounds; the best is reported (default 2)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds stepping together in the seeds figures (default 5)")
    ap.add_argument("--sft-steps", type=int, default=100, help="timed SFT steps (default 100)")
    ap.add_argument("--skip-baseline", action="store_true", help="skip ../shared/baseline's step")
    ap.add_argument("--skip-labs", action="store_true", help="skip the lab19 arm and lab21 Project 0 runs")
    ap.add_argument("--skip-widgets", action="store_true", help="skip the widget redraws")
    ap.add_argument("--skip-sft-run", action="store_true", help="skip the full teacher+student SFT run")
    ap.add_argument("--skip-trl", action="store_true", help="skip the TRL comparison")
    ap.add_argument("--profile", action="store_true", help="only where a step's time goes (stages, operators)")
    ap.add_argument("--skip-dp", action="store_true", help="skip hw4 on 2 processes against 1")
    ap.add_argument("--only-dp", action="store_true", help="only hw4 on 2 processes against 1")
    ap.add_argument("--dp-steps", type=int, default=20, help="RL steps of each data-parallel run (default 20)")
    ap.add_argument("--dp-repeats", type=int, default=1, help="runs of each kind, the best counts (default 1)")
    ap.add_argument("--against", metavar="REV", help="only the RL step of git revision REV (or a folder holding "
                    "llmrl/) against this library, each in its own process, alternated --rounds times")
    return ap


def data_parallel_figure(steps: int, repeats: int) -> dict:
    """``hw4_data_parallel_wall_ratio``: hw4 on 2 processes against 1."""
    r = data_parallel_ratio(steps, repeats)
    return emit("hw4_data_parallel_wall_ratio", r.pop("ratio"), "x", target="<= 0.7", **r)


def rl_step_figures(rl_steps: int, rounds: int, S: int) -> tuple[list[dict], dict[str, float]]:
    """The matmul rate and the RL step's figures (one seed, ``S`` seeds together, GELU); returns them
    and the step's timings (``ms``, ``cpu``, ``ms_gelu``, ``cpu_gelu``) the baseline's ratios need."""
    out = []
    gf = best_rate(matmul_gflops(), matmul_gflops())
    model = TinyLM()
    gelu = TinyLM(activation="gelu")
    gelu.load_state_dict(model.state_dict())  # the same weights: only the nonlinearity differs
    (ms, cpu), (ms_s, cpu_s), (ms_g, cpu_g) = best_of(
        rounds, lambda: time_rl_steps(model, rl_steps),
        lambda: time_rl_steps(model, rl_steps, seeds=list(range(S))), lambda: time_rl_steps(gelu, rl_steps))
    gf = best_rate(gf, matmul_gflops())
    out.append(emit("matmul_gflops", round(gf[0], 1), "GFLOP/s", cpu_rate=round(gf[1], 1), shape="512x512x512",
                    note="by wall time; cpu_rate by this process's CPU time (less disturbed by other jobs)"))
    flops = rl_step_flops(model)
    flops_ms, flops_cpu = flops / (gf[0] * 1e9) * 1000, flops / (gf[1] * 1e9) * 1000
    out.append(emit("rl_step_ms", round(ms, 2), "ms", cpu_ms=round(cpu, 2), prompts=16, group=8, epochs=1))
    out.append(emit("rl_step_flops_ms", round(flops_ms, 2), "ms", cpu_ms=round(flops_cpu, 2),
                    note="a plain step's FLOPs at the matmul rate"))
    out.append(emit("rl_step_vs_matmul_ratio", round(ms / flops_ms, 2), "x", cpu_ratio=round(cpu / flops_cpu, 2)))
    out.append(emit("rl_step_gelu_ms", round(ms_g, 2), "ms", cpu_ms=round(cpu_g, 2),
                    note="the same step with GELU in the MLP (lab21's models, the baseline's TinyLM)"))
    out.append(emit(f"rl_step_{S}seeds_ms", round(ms_s, 2), "ms", cpu_ms=round(cpu_s, 2), seeds=S))
    out.append(emit(f"rl_step_{S}seeds_vs_1seed_ratio", round(ms_s / ms, 2), "x", cpu_ratio=round(cpu_s / cpu, 2),
                    sequential_ratio=S, target="<= 2"))
    out.append(emit(f"rl_step_{S}seeds_vs_matmul_ratio", round(ms_s / (S * flops_ms), 2), "x",
                    cpu_ratio=round(cpu_s / (S * flops_cpu), 2), target="<= 2"))
    return out, {"ms": ms, "cpu": cpu, "ms_gelu": ms_g, "cpu_gelu": cpu_g}


def baseline_figures(script: Path | None, before: list, step: dict[str, float], skipped: bool) -> list[dict]:
    """The baseline's step, run once more now (``before``: its runs before ours), and our step's speedups
    over it; a note when the script is missing (and not ``skipped``)."""
    out, base = [], list(before)
    if script is not None:
        base.append((baseline_ms(script), baseline_ms(script, cpu=True)))
        base = [b for b in base if None not in b]
    if base:
        b, b_cpu = (sum(x[i] for x in base) / len(base) for i in (0, 1))
        out.append(emit("baseline_rl_step_ms", round(b, 2), "ms", cpu_ms=round(b_cpu, 2),
                        runs=[[round(x, 2) for x in r] for r in base], script=str(script),
                        note="plain-torch step, run before and after ours (wall, CPU)"))
        out.append(emit("rl_step_speedup_vs_baseline", round(b / step["ms"], 2), "x",
                        cpu_ratio=round(b_cpu / step["cpu"], 2), target=">= 4"))
        out.append(emit("rl_step_gelu_speedup_vs_baseline", round(b / step["ms_gelu"], 2), "x",
                        cpu_ratio=round(b_cpu / step["cpu_gelu"], 2), target=">= 4",
                        note="the same architecture as the baseline's"))
    elif not skipped:
        out.append(emit("baseline_rl_step_ms", None, "ms", note="../shared/baseline/quick_rl_bench.py not found"))
    return out


def lab_run_figures(S: int) -> list[dict]:
    """Whole lab runs with their evaluations: lab19's hacking arm (1 seed and ``S``), lab21's Project 0."""
    from ..labs import lab19, lab21

    out = []
    for seeds in ([0], list(range(S))):
        with Clock() as c:
            lab19.hacking_run(0.0, steps=300, seeds=seeds, progress=False)
        out.append(emit("lab19_hacking_arm_s", round(c.wall, 1), "s", cpu_s=round(c.cpu, 1), steps=300,
                        seeds=len(seeds), **({"target": "< 30 (quiet machine)"} if len(seeds) > 1 else {})))
    with Clock() as c:
        lab21.project0(seeds=list(range(S)), progress=False)
    out.append(emit("lab21_project0_s", round(c.wall, 1), "s", cpu_s=round(c.cpu, 1), seeds=S,
                    steps=lab21.PROJECTS["project0"].steps, arms=len(lab21.PROJECT0_ARMS)))
    return out


def optional_figures(args: argparse.Namespace, step_ms: float) -> list[dict]:
    """The figures the ``--skip-...`` flags leave out: widget redraws, the SFT run, hw4 data parallel, TRL."""
    out = []
    if not args.skip_widgets:
        for lab, (wall, cpu) in widget_update_seconds().items():
            out.append(emit(f"{lab}_widget_update_s", round(wall, 3), "s", cpu_s=round(cpu, 3),
                            note="best of 3 slider moves", target="< 1"))
    if not args.skip_sft_run:
        t = time.perf_counter()
        sft_train(LAB21_SFT, LAB21_SNAPSHOTS)
        out.append(emit("sft_teacher_student_s", round(time.perf_counter() - t, 1), "s",
                        steps=LAB21_SFT.steps, target="<= 8", published="about 25"))
    if not args.skip_dp:
        out.append(data_parallel_figure(args.dp_steps, args.dp_repeats))
    if not args.skip_trl:
        r = trl_ratio(step_ms / 128)
        if r is None:
            out.append(emit("trl_grpo_vs_ours_per_sequence", None, "x", note="trl extra not installed"))
        else:
            out.append(emit("trl_grpo_vs_ours_per_sequence", round(r["ratio"], 1), "x", target=">= 20", **r))
    return out


def main(argv=None) -> list[dict]:
    args = _parser().parse_args(argv)
    set_threads(1)
    torch.manual_seed(0)
    S = args.seeds
    if args.only_dp:
        return [data_parallel_figure(args.dp_steps, args.dp_repeats)]
    out = [emit("load_average", load(), "1/5/15 min", note="other jobs on the machine when the bench started")]
    if args.against or args.profile:
        out += (against_main(args.against, args.rl_steps, args.rounds, S) if args.against
                else profile_main(args.rl_steps, S))
        out.append(emit("load_average_end", load(), "1/5/15 min"))
        return out
    script = None if args.skip_baseline else baseline_script()
    before = [(baseline_ms(script), baseline_ms(script, cpu=True))] if script is not None else []
    figures, step = rl_step_figures(args.rl_steps, args.rounds, S)
    out += figures
    out += baseline_figures(script, before, step, args.skip_baseline)
    out.append(emit("sft_step_ms", round(time_sft_steps(args.sft_steps), 2), "ms", batch=64))
    if not args.skip_labs:
        out += lab_run_figures(S)
    out += optional_figures(args, step["ms"])
    out.append(emit("load_average_end", load(), "1/5/15 min"))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
