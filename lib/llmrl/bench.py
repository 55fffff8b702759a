"""Benchmarks: ``python -m llmrl.bench`` prints one JSON object per figure.

Everything is measured in the same run on one thread, and speed is reported as ratios within the
run (the machines are shared and noisy): an RL step against the time its FLOPs would take at the
matmul rate measured a moment before, and, when the optional ``trl`` extra is installed, TRL's
GRPOTrainer against ours per sequence.

Figures: ``matmul_gflops``, ``rl_step_ms`` (16 prompts x 8 samples, 1 epoch), ``rl_step_flops_ms``
and ``rl_step_vs_matmul_ratio``, ``sft_step_ms`` (batch 64), ``lab11_widget_update_s`` (a slider move redrawn), ``sft_teacher_student_s``
(one SFT run from scratch that yields the student and the teacher), ``trl_grpo_vs_ours_per_sequence``
(optional), ``hw4_data_parallel_wall_ratio`` (hw4's trainer on 2 CPU processes against 1 process
over the same prompts and samples, with the CPU-time ratio that shared cores do not blur;
``--only-dp`` runs this figure alone).
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

from .addition import PROMPT_LEN, RESPONSE_LEN
from .checkpoints import COURSE_SFT, COURSE_SNAPSHOTS, SFTConfig, sft_train
from .tinylm import TinyLM
from .trainer import rl_train
from .utils import set_threads


def emit(name: str, value, unit: str, **extra) -> dict:
    rec = {"figure": name, "value": value, "unit": unit, **extra}
    print(json.dumps(rec), flush=True)
    return rec


def matmul_gflops(n: int = 512, repeats: int = 20) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    t = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - t) / 1e9


def forward_flops(model: TinyLM, n_tokens: int, context: int) -> float:
    """Multiply-adds x 2 of a forward pass over ``n_tokens`` tokens attending to ``context`` keys."""
    c = model.config
    per_layer = 2 * (3 * c.d * c.d + c.d * c.d + 2 * c.d * c.ff) + 2 * 2 * context * c.d
    return n_tokens * (c.n_layers * per_layer + 2 * c.d * c.vocab_size)


def rl_step_flops(model: TinyLM, n_prompts: int = 16, group: int = 8) -> float:
    B = n_prompts * group
    prompt = forward_flops(model, n_prompts * PROMPT_LEN, PROMPT_LEN)
    sample = prompt + sum(forward_flops(model, B, PROMPT_LEN + i + 1) for i in range(RESPONSE_LEN - 2))
    scored = prompt + forward_flops(model, B * (RESPONSE_LEN - 1), PROMPT_LEN + RESPONSE_LEN)
    # sampling, the reference forward (KL tracking), and the training forward + backward (2x forward)
    return sample + scored + 3 * scored


def time_rl_steps(model, steps: int, **kw) -> float:
    rl_train(copy.deepcopy(model), steps=3, progress=False, **kw)  # warm-up
    t = time.perf_counter()
    rl_train(copy.deepcopy(model), steps=steps, progress=False, **kw)
    return (time.perf_counter() - t) / steps * 1000


def time_sft_steps(steps: int = 100) -> float:
    sft_train(SFTConfig(steps=5))
    t = time.perf_counter()
    sft_train(SFTConfig(steps=steps))
    return (time.perf_counter() - t) / steps * 1000


def widget_update_seconds() -> float:
    """Seconds for lab11's temperature and beta widgets to redraw after a slider moves."""
    from .addition import eval_problems
    from .checkpoints import load_checkpoint
    from .labs import lab11

    def best(box, values):
        times = []
        for v in values:
            t = time.perf_counter()
            box.slider.value = v
            times.append(time.perf_counter() - t)
        return min(times)

    tw = lab11.temperature_widget(load_checkpoint("sft", progress=False), eval_problems(100))
    bw = lab11.beta_widget("hack")
    return max(best(tw, [2.0, 0.0, 1.5]), best(bw, [0.1, 3.0, 0.6]))


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
    root = Path(__file__).resolve().parents[1]
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


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(prog="python -m llmrl.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--rl-steps", type=int, default=30, help="timed RL steps (default 30)")
    ap.add_argument("--sft-steps", type=int, default=100, help="timed SFT steps (default 100)")
    ap.add_argument("--skip-sft-run", action="store_true", help="skip the full teacher+student SFT run")
    ap.add_argument("--skip-trl", action="store_true", help="skip the TRL comparison")
    ap.add_argument("--skip-dp", action="store_true", help="skip hw4 on 2 processes against 1")
    ap.add_argument("--only-dp", action="store_true", help="only hw4 on 2 processes against 1")
    ap.add_argument("--dp-steps", type=int, default=20, help="RL steps of each data-parallel run (default 20)")
    ap.add_argument("--dp-repeats", type=int, default=1, help="runs of each kind, the best counts (default 1)")
    args = ap.parse_args(argv)
    set_threads(1)
    torch.manual_seed(0)
    out = []
    if args.only_dp:
        r = data_parallel_ratio(args.dp_steps, args.dp_repeats)
        return [emit("hw4_data_parallel_wall_ratio", r.pop("ratio"), "x", target="<= 0.7", **r)]
    gf = matmul_gflops()
    out.append(emit("matmul_gflops", round(gf, 1), "GFLOP/s", shape="512x512x512"))
    model = TinyLM()
    ms = time_rl_steps(model, args.rl_steps)
    out.append(emit("rl_step_ms", round(ms, 2), "ms", prompts=16, group=8, epochs=1, target="<= 25"))
    flops_ms = rl_step_flops(model) / (gf * 1e9) * 1000
    out.append(emit("rl_step_flops_ms", round(flops_ms, 2), "ms", note="the step's FLOPs at the matmul rate"))
    out.append(emit("rl_step_vs_matmul_ratio", round(ms / flops_ms, 2), "x", target="<= 3"))
    out.append(emit("sft_step_ms", round(time_sft_steps(args.sft_steps), 2), "ms", batch=64))
    out.append(emit("lab11_widget_update_s", round(widget_update_seconds(), 3), "s",
                    note="slowest of the temperature and beta sliders, best of 3 moves", target="< 1"))
    if not args.skip_sft_run:
        t = time.perf_counter()
        sft_train(COURSE_SFT, COURSE_SNAPSHOTS)
        out.append(emit("sft_teacher_student_s", round(time.perf_counter() - t, 1), "s",
                        steps=COURSE_SFT.steps, target="<= 8", published="about 25"))
    if not args.skip_dp:
        r = data_parallel_ratio(args.dp_steps, args.dp_repeats)
        out.append(emit("hw4_data_parallel_wall_ratio", r.pop("ratio"), "x", target="<= 0.7", **r))
    if not args.skip_trl:
        r = trl_ratio(ms / 128)
        if r is None:
            out.append(emit("trl_grpo_vs_ours_per_sequence", None, "x", note="trl extra not installed"))
        else:
            out.append(emit("trl_grpo_vs_ours_per_sequence", round(r["ratio"], 1), "x", target=">= 20", **r))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
