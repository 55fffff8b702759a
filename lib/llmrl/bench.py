"""Benchmarks: ``python -m llmrl.bench`` prints one JSON object per figure.

Everything is measured in the same run on one thread, and speed is reported as ratios within the
run (the machines are shared and noisy): an RL step against the time its FLOPs would take at the
matmul rate measured a moment before, and, when the optional ``trl`` extra is installed, TRL's
GRPOTrainer against ours per sequence.

Figures: ``matmul_gflops``, ``rl_step_ms`` (16 prompts x 8 samples, 1 epoch), ``rl_step_flops_ms``
and ``rl_step_vs_matmul_ratio``, ``sft_step_ms`` (batch 64), ``lab11_widget_update_s`` (a slider move redrawn), ``sft_teacher_student_s``
(one SFT run from scratch that yields the student and the teacher), ``trl_grpo_vs_ours_per_sequence``
(optional).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

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


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(prog="python -m llmrl.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--rl-steps", type=int, default=30, help="timed RL steps (default 30)")
    ap.add_argument("--sft-steps", type=int, default=100, help="timed SFT steps (default 100)")
    ap.add_argument("--skip-sft-run", action="store_true", help="skip the full teacher+student SFT run")
    ap.add_argument("--skip-trl", action="store_true", help="skip the TRL comparison")
    args = ap.parse_args(argv)
    set_threads(1)
    torch.manual_seed(0)
    out = []
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
    if not args.skip_trl:
        r = trl_ratio(ms / 128)
        if r is None:
            out.append(emit("trl_grpo_vs_ours_per_sequence", None, "x", note="trl extra not installed"))
        else:
            out.append(emit("trl_grpo_vs_ours_per_sequence", round(r["ratio"], 1), "x", target=">= 20", **r))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
