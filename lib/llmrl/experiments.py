"""Lab 21's experiments: Project 0 (on-policy distillation) and Projects 1-5, as functions and a CLI.

Every project is a set of *arms* (the things compared) run for one or more *seeds*. One job is
(project, arm, seed); it starts from a fresh checkpoint, trains with :func:`llmrl.trainer.rl_train`
and returns a plain JSON-able dict::

    {"project", "arm", "seed", "config": {...},
     "curve": {"step": [...], <per-step training metric>: [...]},   # every step
     "evals": {"step": [...], <evaluation metric>: [...]},          # at step 0, every eval_every, last
     "extra": {...}}                                                 # project-specific (pass@k curves, usage)

:func:`run` runs a project's jobs (in parallel processes when ``workers > 1``), writes each job to
``<out_dir>/<project>/<arm>_seed<k>.json`` when ``out_dir`` is given, and returns
``{arm: [result per seed]}``; :func:`load_results` reads such a folder back. The same runs from the
command line, for long sweeps a notebook cell then loads and plots::

    python -m llmrl.experiments project5 --steps 1000 --seeds 0 1 2 --workers 3
    python -m llmrl.experiments project2 --arms stylish_w1 stylish_w1.25 stylish_w1.5 stylish_w2

Callables (the student's loss, advantage or reward functions) can be passed to every project; with
``workers > 1`` the jobs run in forked processes, so even a lambda defined in a notebook works.
``EXPECTED`` holds the handout's numbers (seed 0, full budgets) for printing beside measured ones.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .addition import BUCKETS, TWO_DIGIT, Problems, eval_problems, is_correct, sample_problems
from .checkpoints import COURSE_SFT, SFTConfig, Snapshot, load_checkpoint
from .evaluation import evaluate, pass_at_k
from .rewards import (Rubric, RubricItem, binary_rubric, exact_match, looks_thorough, partial_credit_rubric,
                      stylish_rubric)
from .sampling import generate
from .tinylm import TinyLMConfig
from .trainer import RLConfig, config_dict, rl_train
from .utils import check_float, check_int, grading_mode, set_threads

# The handout's observations (seed 0, the budgets the handout used). Keys name arms and metrics.
EXPECTED = {
    "project0": {  # 200 steps of 64 sequences, AdamW 3e-4
        "start": {"pass@1": 0.31, "kl_to_teacher_nats": 1.98},
        "opd-full": {"pass@1": 0.67, "kl_to_teacher_nats": 0.70},
        "sft-teacher": {"pass@1": 0.64, "kl_to_teacher_nats": 0.75},
        "opd-sampled": {"pass@1": 0.54, "kl_to_teacher_nats": 1.01},
        "rl": {"pass@1": 0.54, "kl_to_teacher_nats": 1.07},
    },
    "project1": {  # 150 steps, 4 epochs; entropy in nats per token, start 0.54
        "start": {"entropy_nats": 0.54},
        "symmetric": {"entropy_nats": 0.222, "pass@1": 0.57},
        "clip-higher": {"entropy_nats": 0.235, "pass@1": 0.57},
        "no-clip": {"entropy_nats": 0.26, "pass@1": 0.50},
    },
    "project2": {  # 200 steps; gold pass@1 start 0.29
        "start": {"gold_pass@1": 0.29},
        "binary": {"gold_pass@1": 0.55, "proxy_reward": 0.56, "pad_share_small_sums": 0.02},
        "partial": {"gold_pass@1": 0.54, "proxy_reward": 0.74, "pad_share_small_sums": 0.01},
        "stylish_w2": {"gold_pass@1": 0.29, "proxy_reward": 0.61, "pad_share_small_sums": 0.98},
        "stylish_w1": {"gold_pass@1": 0.50, "pad_share_small_sums": 0.08},
    },
    "project3": {  # 200 steps; usage = share of samples spent on the unsolvable 3d+1d bucket
        "target-only": {"acc_3d+1d": 0.00},
        "uniform": {"acc_2d+2d_ge100": 0.50, "usage_3d+1d": 0.22},
        "learnability": {"acc_2d+2d_ge100": 0.62, "usage_3d+1d": 0.03},
    },
    "project4": {  # 200 steps; 100 prompts x 16 samples
        "mean": {"pass@1": 0.55, "pass@16": 0.89},
        "std": {"pass@1": 0.51, "pass@16": 0.88},
        "maxrl": {"pass@1": 0.51, "pass@16": 0.91},
    },
    "project5": {  # 300 steps; in-distribution pass@k
        "start": {"pass@1": 0.31, "pass@64": 0.97},
        "rl": {"pass@1": 0.67, "pass@64": 0.92, "crossing_k": (16, 32)},
    },
}

DEFAULT_OUT = Path("artifacts") / "lab21" / "results"


# ----------------------------------------------------------------------------------------- models
def load_student(d: int = 64, greedy_at_least: float = 0.55) -> torch.nn.Module:
    """A fresh student: the course's checkpoint (d = 64, greedy >= 0.55), or one from its own SFT run.

    ``d`` != 64 trains a student of that width with the course's SFT recipe (cached after the first
    call, about 25 s); ``greedy_at_least`` < 0.55 takes an earlier, weaker snapshot (Project 4).
    """
    check_int("d", d, minimum=8)
    check_float("greedy_at_least", greedy_at_least, minimum=0.0)
    if d == 64 and greedy_at_least == 0.55:
        return load_checkpoint("student", progress=False)
    cfg = SFTConfig(model=TinyLMConfig(d=d)) if d != 64 else COURSE_SFT
    return load_checkpoint("student", cfg=cfg, snapshots={"student": Snapshot(100, greedy_at_least, every=5)},
                           progress=False)


def load_teacher() -> torch.nn.Module:
    return load_checkpoint("teacher", progress=False)


def _student(student) -> torch.nn.Module:
    if student is None:
        return load_student()
    if callable(student) and not isinstance(student, torch.nn.Module):
        return student()
    if isinstance(student, dict):
        return load_student(**student)
    raise TypeError(f"student must be None, a dict of load_student arguments or a callable, got {type(student).__name__}")


# ------------------------------------------------------------------------------------- recording
def _curve(history, names: Sequence[str]) -> dict[str, list]:
    out = {"step": [int(r["step"]) for r in history]}
    for n in names:
        if n in history.names:
            out[n] = [_f(x) for x in history.series(n)]
    return out


def _f(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _evals_from(history, start: dict) -> dict[str, list]:
    """Collect eval_fn records (keys starting with 'eval/') plus the step-0 evaluation."""
    rows = [(0, start)] + [(int(r["step"]), {k[5:]: v for k, v in r.items() if k.startswith("eval/")})
                           for r in history if any(k.startswith("eval/") for k in r)]
    keys = list(start)
    return {"step": [s for s, _ in rows], **{k: [_f(d.get(k, float("nan"))) for _, d in rows] for k in keys}}


def _train(policy, cfg: RLConfig, eval_fn: Callable, eval_every: int, progress: bool, **kwargs):
    """rl_train with ``eval_fn`` results stored under 'eval/...' and a step-0 evaluation."""
    policy.eval()
    start = eval_fn(policy)
    hist = rl_train(policy, cfg, eval_fn=lambda m: {f"eval/{k}": v for k, v in eval_fn(m).items()},
                    eval_every=eval_every, progress=progress, **kwargs)
    return hist, _evals_from(hist, start)


def _eval_every(steps: int, eval_every: int | None, n_evals: int = 4) -> int:
    return max(1, steps // n_evals) if eval_every is None else check_int("eval_every", eval_every, minimum=1)


# ------------------------------------------------------------------------------ Project 0: OPD
PROJECT0_ARMS = ("opd-full", "sft-teacher", "opd-sampled", "rl")


def _arm0(arm, seed, steps=200, n_prompts=8, group_size=8, lr=3e-4, loss_fns=None, student=None,
          eval_prompts=100, eval_samples=8, eval_every=None, max_grad_norm=None, progress=False):
    loss_fns = dict(loss_fns or {})
    settings = {"opd-full": dict(loss="opd-full"), "opd-sampled": dict(loss="opd-sampled"),
                "sft-teacher": dict(loss="sft", rollout_from="teacher"), "rl": dict(loss="pg")}
    if arm not in settings:
        raise ValueError(f"arm must be one of {PROJECT0_ARMS}, got {arm!r}")
    # No gradient clipping by default (the handout's setup names none). The trainer's default, 1.0,
    # throttles the distillation arms: their gradient norms are 15-20, and with it opd-full ended at
    # pass@1 0.46 / KL 1.04 on seed 0 instead of 0.52 / 0.84.
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=lr, seed=seed,
                   track_reference_kl=False, max_grad_norm=max_grad_norm, **settings[arm])
    teacher = load_teacher()
    policy = _student(student)
    probs = eval_problems(eval_prompts, TWO_DIGIT)

    def eval_fn(m):
        e = evaluate(m, probs, n_samples=eval_samples, ks=(1, eval_samples), seed=seed, teacher=teacher)
        return {"pass@1": e["pass@1"], f"pass@{eval_samples}": e[f"pass@{eval_samples}"],
                "kl_to_teacher_nats": e["kl_to_teacher_nats"], "greedy_accuracy": e["greedy_accuracy"]}

    hist, evals = _train(policy, cfg, eval_fn, _eval_every(steps, eval_every), progress,
                         teacher=teacher, policy_loss_fn=loss_fns.get(arm))
    return {"config": config_dict(cfg), "evals": evals,
            "curve": _curve(hist, ["sampled_accuracy", "loss", "teacher_logprob", "entropy_nats"])}


# ------------------------------------------------------------------------ Project 1: clip-higher
PROJECT1_ARMS = ("symmetric", "clip-higher", "no-clip")
CLIP_BOUNDS = {"symmetric": (0.2, 0.2), "clip-higher": (0.2, 0.28), "no-clip": (None, None)}


def _arm1(arm, seed, steps=150, epochs=4, eps_high=0.28, n_prompts=16, group_size=8, lr=3e-4,
          eval_prompts=100, eval_samples=16, eval_every=None, student=None, progress=False):
    if arm not in CLIP_BOUNDS:
        raise ValueError(f"arm must be one of {PROJECT1_ARMS}, got {arm!r}")
    lo, hi = CLIP_BOUNDS[arm]
    if arm == "clip-higher":
        hi = check_float("eps_high", eps_high, minimum=0.0)
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=lr, epochs=epochs,
                   eps_low=lo, eps_high=hi, seed=seed, track_reference_kl=False)
    policy = _student(student)
    probs = eval_problems(eval_prompts, TWO_DIGIT)

    def eval_fn(m):
        e = evaluate(m, probs, n_samples=eval_samples, ks=(1, eval_samples), seed=seed)
        return {"pass@1": e["pass@1"], f"pass@{eval_samples}": e[f"pass@{eval_samples}"],
                "entropy_nats": e["entropy_nats"]}

    hist, evals = _train(policy, cfg, eval_fn, _eval_every(steps, eval_every, 6), progress)
    return {"config": config_dict(cfg), "evals": evals,
            "curve": _curve(hist, ["entropy_nats", "sampled_accuracy", "clip_fraction", "clip_fraction_high",
                                   "clip_fraction_low", "clip_high_of_positive", "clip_low_of_negative"])}


# ------------------------------------------------------------------------- Project 2: rubrics
PROJECT2_ARMS = ("binary", "partial", "stylish_w2")


def rubric_for(arm: str, pitfall: RubricItem | None = None) -> Rubric:
    """'binary', 'partial', 'stylish_w<w>' (e.g. stylish_w1.25); a '+pitfall' suffix adds ``pitfall``."""
    base, plus = (arm[:-len("+pitfall")], True) if arm.endswith("+pitfall") else (arm, False)
    if base == "binary":
        r = binary_rubric()
    elif base == "partial":
        r = partial_credit_rubric()
    elif base.startswith("stylish_w"):
        try:
            w = float(base[len("stylish_w"):])
        except ValueError:
            raise ValueError(f"arm {arm!r}: expected stylish_w<number>, e.g. stylish_w1.5") from None
        r = stylish_rubric(w)
    else:
        raise ValueError(f"arm must be binary, partial or stylish_w<w> (optionally +pitfall), got {arm!r}")
    if plus:
        if pitfall is None:
            raise ValueError(f"arm {arm!r} needs a pitfall RubricItem (pitfall=...)")
        r = r.with_item(pitfall)
    return r


def pad_share_small_sums(responses: Sequence[str], answers: Sequence[int]) -> float:
    """Share of responses with 3+ digits among problems whose sum is below 100 (nan if none)."""
    small = [looks_thorough(r, a) for r, a in zip(responses, answers) if a < 100]
    return float(np.mean(small)) if small else float("nan")


def _arm2(arm, seed, steps=200, n_prompts=16, group_size=8, lr=3e-4, reward_fns=None, pitfall=None,
          eval_prompts=100, eval_samples=8, eval_every=None, student=None, progress=False):
    reward_fns = dict(reward_fns or {})
    reward = reward_fns[arm] if arm in reward_fns else rubric_for(arm, pitfall)
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=lr, seed=seed,
                   track_reference_kl=False)
    policy = _student(student)
    probs = eval_problems(eval_prompts, TWO_DIGIT)
    pads = []

    def train_reward(responses, answers):
        pads.append(pad_share_small_sums(responses, answers))
        return reward(responses, answers)

    def eval_fn(m):
        r = generate(m, probs, eval_samples, 1.0, seed)
        return {"gold_pass@1": float(is_correct(r.responses, r.answers).float().mean()),
                "proxy_reward": float(torch.as_tensor(reward(r.responses, r.answers)).float().mean()),
                "pad_share_small_sums": pad_share_small_sums(r.responses, r.answers)}

    hist, evals = _train(policy, cfg, eval_fn, _eval_every(steps, eval_every), progress, reward_fn=train_reward)
    curve = _curve(hist, ["reward", "sampled_accuracy", "entropy_nats"])
    curve["pad_share_small_sums"] = [_f(x) for x in pads[:len(curve["step"])]]
    return {"config": {**config_dict(cfg), "reward": getattr(reward, "__name__", repr(reward))},
            "evals": evals, "curve": curve}


def honest_vs_pad(w: float, accuracy_small: float, accuracy_large: float | None = None,
                  share_large: float | None = None) -> dict[str, float]:
    """Expected stylish-rubric reward per answer of two policies on the 2-digit training prompts.

    "honest" answers as now: exact with probability ``accuracy_small`` on sums < 100 and
    ``accuracy_large`` on sums >= 100 (whose honest answers have 3 digits anyway). "pad" writes
    3+ digits everywhere: it keeps the large-sum reward and trades the small-sum exact credit for
    ``w``. So padding pays exactly when w > accuracy_small.
    """
    w = check_float("w", w, minimum=0.0)
    p_s = check_float("accuracy_small", accuracy_small, minimum=0.0)
    p_l = p_s if accuracy_large is None else check_float("accuracy_large", accuracy_large, minimum=0.0)
    if share_large is None:
        share_large = float(np.mean([a >= 100 for a in sample_problems(20000, TWO_DIGIT, 0).answers]))
    q = check_float("share_large", share_large, minimum=0.0)
    large = p_l * 1.0 + w  # 3-digit answers earn the style credit whether right or not
    honest = (1 - q) * p_s + q * large
    pad = (1 - q) * w + q * large
    return {"honest": honest, "pad": pad, "threshold_w": p_s, "share_large": q}


# -------------------------------------------------------------- Project 3: learnability proposer
PROJECT3_ARMS = ("target-only", "uniform", "learnability")


class BucketSampler:
    """``prompt_sampler(n, generator) -> Problems`` over BUCKETS that records what it served.

    mode "target" (only ``target``), "uniform" or "learnability": a softmax bandit over each bucket's
    running learnability reward L_b (EMA with rate ``ema``, start ``init``), where one group's reward
    is 0 when none or all of its samples succeed, else 1 - p_hat (Absolute Zero). ``rare_group`` = m
    serves a ``rare`` prompt as m adjacent copies whose samples form one group of m * G
    (see :meth:`advantages`). :meth:`observe` takes the step's per-sample correctness.
    """

    def __init__(self, mode: str = "learnability", buckets: Sequence[str] = BUCKETS, target: str = "3d+1d",
                 temperature: float = 0.1, ema: float = 0.1, init: float = 0.5, rare: str = "1d+1d",
                 rare_group: int = 1, group_size: int = 8):
        if mode not in ("target", "uniform", "learnability"):
            raise ValueError(f"mode must be 'target', 'uniform' or 'learnability', got {mode!r}")
        for b in list(buckets) + [target, rare]:
            if b not in BUCKETS:
                raise ValueError(f"unknown bucket {b!r}; known: {BUCKETS}")
        self.mode, self.buckets, self.target, self.rare = mode, tuple(buckets), target, rare
        self.temperature = check_float("temperature", temperature, minimum=1e-6)
        self.ema = check_float("ema", ema, minimum=0.0)
        self.rare_group = check_int("rare_group", rare_group, minimum=1)
        self.group_size = check_int("group_size", group_size, minimum=1)
        self.learnability = {b: float(init) for b in self.buckets}
        self.usage: list[dict[str, float]] = []      # share of samples per bucket, one dict per step
        self.weights: list[dict[str, float]] = []    # the bandit's probabilities, one dict per step
        self.last: Problems | None = None
        self.last_groups: torch.Tensor | None = None  # [n] group id of each prompt slot

    def probabilities(self) -> dict[str, float]:
        if self.mode == "target":
            return {b: float(b == self.target) for b in self.buckets}
        if self.mode == "uniform":
            return {b: 1.0 / len(self.buckets) for b in self.buckets}
        z = torch.tensor([self.learnability[b] for b in self.buckets]) / self.temperature
        return dict(zip(self.buckets, torch.softmax(z, 0).tolist()))

    def __call__(self, n: int, generator: torch.Generator | None = None) -> Problems:
        probs = self.probabilities()
        w = torch.tensor([probs[b] for b in self.buckets])
        slots, units = 0, []
        while slots < n:
            b = self.buckets[int(torch.multinomial(w, 1, generator=generator))]
            m = self.rare_group if b == self.rare else 1
            if slots + m > n:  # a super-group that does not fit: fill with ordinary buckets
                if all(x == self.rare for x in self.buckets):
                    m = n - slots
                else:
                    continue
            units.append((b, m))
            slots += m
        parts, groups = [], []
        for gid, (b, m) in enumerate(units):
            parts.append(sample_problems(1, [b], generator).repeat(m))
            groups += [gid] * m
        self.last = Problems(torch.cat([p.a for p in parts]), torch.cat([p.b for p in parts]),
                             torch.cat([p.bucket for p in parts]))
        self.last_groups = torch.tensor(groups)
        counts = torch.bincount(self.last.bucket, minlength=len(BUCKETS)).float() / n
        self.usage.append({b: float(counts[BUCKETS.index(b)]) for b in self.buckets})
        self.weights.append(probs)
        return self.last

    def observe(self, correct: torch.Tensor) -> None:
        """Update the running learnability from ``correct`` [n * G] of the last served prompts."""
        if self.last is None:
            return
        G = self.group_size
        c = correct.float().view(len(self.last), G)
        for gid in self.last_groups.unique().tolist():
            rows = (self.last_groups == gid).nonzero().flatten()
            p = float(c[rows].mean())
            reward = 0.0 if p in (0.0, 1.0) else 1.0 - p
            b = BUCKETS[int(self.last.bucket[rows[0]])]
            self.learnability[b] = (1 - self.ema) * self.learnability[b] + self.ema * reward

    def advantages(self, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        """[B] mean-baseline advantages over each served group (m * G samples for a super-group)."""
        r = rewards.float().view(-1, group_size)
        ids = self.last_groups
        out = torch.empty_like(r)
        for gid in ids.unique().tolist():
            rows = (ids == gid).nonzero().flatten()
            out[rows] = r[rows] - r[rows].mean()
        return out.reshape(-1)


def _arm3(arm, seed, steps=200, n_prompts=16, group_size=8, lr=3e-4, rare_group=1, temperature=0.1,
          eval_per_bucket=100, eval_every=None, student=None, progress=False):
    modes = {"target-only": "target", "uniform": "uniform", "learnability": "learnability"}
    if arm not in modes:
        raise ValueError(f"arm must be one of {PROJECT3_ARMS}, got {arm!r}")
    sampler = BucketSampler(modes[arm], rare_group=rare_group, group_size=group_size, temperature=temperature)
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=lr, seed=seed,
                   track_reference_kl=False)
    policy = _student(student)
    eval_sets = {b: eval_problems(eval_per_bucket, [b]) for b in BUCKETS}

    def reward_fn(responses, answers):
        r = exact_match(responses, answers)
        sampler.observe(r > 0)
        return r

    def eval_fn(m):
        out = {}
        for b, p in eval_sets.items():
            r = generate(m, p, 1, 1.0, seed)
            out[f"acc_{b}"] = float(is_correct(r.responses, r.answers).float().mean())
        return out

    hist, evals = _train(policy, cfg, eval_fn, _eval_every(steps, eval_every), progress, reward_fn=reward_fn,
                         prompt_sampler=sampler, advantage_fn=sampler.advantages)
    curve = _curve(hist, ["sampled_accuracy", "frac_zero_advantage_groups"])
    for b in BUCKETS:
        curve[f"usage_{b}"] = [u[b] for u in sampler.usage]
        curve[f"learnability_{b}"] = [w[b] for w in sampler.weights]
    total = {f"usage_{b}": float(np.mean(curve[f"usage_{b}"])) for b in BUCKETS}
    return {"config": {**config_dict(cfg), "rare_group": rare_group, "bandit_temperature": temperature},
            "evals": evals, "curve": curve, "extra": {"total_usage": total}}


# ------------------------------------------------------------------------- Project 4: MaxRL
PROJECT4_ARMS = ("mean", "std", "maxrl")


def _arm4(arm, seed, steps=200, n_prompts=16, group_size=8, lr=3e-4, advantage_fns=None, eval_prompts=100,
          eval_samples=16, eval_every=None, student=None, progress=False):
    advantage_fns = dict(advantage_fns or {})
    if arm not in advantage_fns and arm not in PROJECT4_ARMS:
        raise ValueError(f"arm must be one of {PROJECT4_ARMS} or a key of advantage_fns, got {arm!r}")
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=lr, seed=seed,
                   advantage=arm if arm in PROJECT4_ARMS else "mean", track_reference_kl=False)
    policy = _student(student)
    probs = eval_problems(eval_prompts, TWO_DIGIT)

    def eval_fn(m):
        r = generate(m, probs, eval_samples, 1.0, seed)
        c = is_correct(r.responses, r.answers).view(len(probs), eval_samples).sum(1).numpy()
        out = {}
        for k in (1, eval_samples):
            per = np.asarray(pass_at_k(eval_samples, c, k), dtype=float)
            out[f"pass@{k}"] = float(per.mean())
            out[f"pass@{k}_se"] = float(per.std(ddof=1) / math.sqrt(len(per)))  # noise of the eval set
        return out

    hist, evals = _train(policy, cfg, eval_fn, _eval_every(steps, eval_every), progress,
                         advantage_fn=advantage_fns.get(arm))
    return {"config": config_dict(cfg), "evals": evals,
            "curve": _curve(hist, ["sampled_accuracy", "frac_zero_advantage_groups", "entropy_nats"])}


# ------------------------------------------------------------ Project 5: sharpen or expand
PROJECT5_ARMS = ("rl",)


def pass_curves(model, problems: Problems, n_samples: int, seed: int) -> list[float]:
    r = generate(model, problems, n_samples, 1.0, seed)
    c = is_correct(r.responses, r.answers).view(len(problems), n_samples).sum(1).numpy()
    return [float(np.mean(pass_at_k(n_samples, c, k))) for k in range(1, n_samples + 1)]


def _arm5(arm, seed, steps=300, n_prompts=16, group_size=8, lr=3e-4, kl_coef=0.05, eval_prompts=100,
          eval_samples=64, eval_every=None, student=None, progress=False):
    if arm not in ("rl", "rl+kl"):
        raise ValueError(f"arm must be 'rl' or 'rl+kl', got {arm!r}")
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=lr, seed=seed,
                   kl_coef=kl_coef if arm == "rl+kl" else 0.0, kl_mode="loss", kl_estimator="k3")
    policy = _student(student)
    sets = {"in_dist": eval_problems(eval_prompts, TWO_DIGIT), "3d+1d": eval_problems(eval_prompts, ["3d+1d"])}
    before = {name: pass_curves(policy, p, eval_samples, seed) for name, p in sets.items()}

    def eval_fn(m):
        r = generate(m, sets["in_dist"], 16, 1.0, seed)
        return {"pass@1": float(is_correct(r.responses, r.answers).float().mean())}

    hist, evals = _train(policy, cfg, eval_fn, _eval_every(steps, eval_every), progress)
    after = {name: pass_curves(policy, p, eval_samples, seed) for name, p in sets.items()}
    return {"config": config_dict(cfg), "evals": evals,
            "curve": _curve(hist, ["sampled_accuracy", "entropy_nats", "kl_to_reference_nats"]),
            "extra": {"ks": list(range(1, eval_samples + 1)), "before": before, "after": after,
                      "crossing_k": crossing_k(before["in_dist"], after["in_dist"])}}


def crossing_k(before: Sequence[float], after: Sequence[float]) -> int | None:
    """The smallest k at which the base model's pass@k is at least the trained model's (None: never)."""
    for k, (b, a) in enumerate(zip(before, after), start=1):
        if b >= a:
            return k
    return None


# ------------------------------------------------------------------------------ the runner
@dataclass(frozen=True)
class Project:
    arms: tuple[str, ...]
    arm_fn: Callable
    steps: int


PROJECTS = {
    "project0": Project(PROJECT0_ARMS, _arm0, 200),
    "project1": Project(PROJECT1_ARMS, _arm1, 150),
    "project2": Project(PROJECT2_ARMS, _arm2, 200),
    "project3": Project(PROJECT3_ARMS, _arm3, 200),
    "project4": Project(PROJECT4_ARMS, _arm4, 200),
    "project5": Project(PROJECT5_ARMS, _arm5, 300),
}

_JOBS: list = []  # filled before forking workers, so closures need no pickling


def _run_job(i: int) -> dict:
    project, arm, seed, kwargs = _JOBS[i]
    set_threads(1)
    torch.manual_seed(seed)
    res = PROJECTS[project].arm_fn(arm, seed, **kwargs)
    res.update(project=project, arm=arm, seed=seed)
    res.setdefault("extra", {})
    return res


def run(project: str, arms: Sequence[str] | None = None, seeds: Sequence[int] = (0,), steps: int | None = None,
        workers: int = 1, out_dir: str | os.PathLike | None = None, progress: bool = True,
        **kwargs) -> dict[str, list[dict]]:
    """Run ``project``'s ``arms`` x ``seeds``; return {arm: [result for each seed]} (see module docs).

    ``steps`` defaults to the handout's budget; ``kwargs`` go to the arm function (e.g. ``loss_fns``,
    ``eval_prompts``, ``student={"d": 48}``). ``workers > 1`` forks that many processes (one thread
    each). ``out_dir`` writes one JSON per job under ``out_dir/project/``.
    """
    if project not in PROJECTS:
        raise ValueError(f"project must be one of {sorted(PROJECTS)}, got {project!r}")
    spec = PROJECTS[project]
    arms = tuple(spec.arms if arms is None else ([arms] if isinstance(arms, str) else arms))
    if not arms:
        raise ValueError("arms must name at least one arm")
    seeds = [check_int("seed", s, minimum=0) for s in ([seeds] if isinstance(seeds, int) else seeds)]
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    steps = spec.steps if steps is None else check_int("steps", steps, minimum=1)
    check_int("workers", workers, minimum=1)
    jobs = [(project, a, s, dict(kwargs, steps=steps, progress=progress and workers == 1)) for s in seeds for a in arms]
    global _JOBS
    _JOBS = jobs
    try:
        if workers == 1 or len(jobs) == 1:
            results = [_run_job(i) for i in range(len(jobs))]
        else:
            ctx = mp.get_context("fork")
            with ctx.Pool(min(workers, len(jobs))) as pool:
                it = pool.imap(_run_job, range(len(jobs)))
                if progress:
                    from tqdm.auto import tqdm
                    it = tqdm(it, total=len(jobs), desc=project, leave=False)
                results = list(it)
    finally:
        _JOBS = []
    out: dict[str, list[dict]] = {a: [] for a in arms}
    for res in results:
        out[res["arm"]].append(res)
        if out_dir is not None:
            d = Path(out_dir) / project
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{res['arm']}_seed{res['seed']}.json").write_text(json.dumps(res, default=_json_default))
    return out


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, (tuple, set)):
        return list(x)
    return repr(x)


def load_results(project: str, out_dir: str | os.PathLike = DEFAULT_OUT) -> dict[str, list[dict]]:
    """Read ``out_dir/project/*.json`` back into {arm: [results sorted by seed]} ({} if none)."""
    d = Path(out_dir) / project
    out: dict[str, list[dict]] = {}
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        res = json.loads(f.read_text())
        out.setdefault(res["arm"], []).append(res)
    for v in out.values():
        v.sort(key=lambda r: r["seed"])
    return out


def project0(steps: int = 200, seeds: Sequence[int] = (0,), arms: Sequence[str] = PROJECT0_ARMS, **kw):
    """On-policy distillation vs off-policy distillation vs RL (see ``_arm0`` for the arguments)."""
    return run("project0", arms, seeds, steps, **kw)


def project1(steps: int = 150, seeds: Sequence[int] = (0,), arms: Sequence[str] = PROJECT1_ARMS, **kw):
    """Symmetric clip vs clip-higher vs no clip, ``epochs`` = 4 (``eps_high`` sets clip-higher's bound)."""
    return run("project1", arms, seeds, steps, **kw)


def project2(steps: int = 200, seeds: Sequence[int] = (0,), arms: Sequence[str] = PROJECT2_ARMS, **kw):
    """Binary vs partial-credit vs stylish rubric (arms 'stylish_w<w>', '+pitfall', or ``reward_fns`` keys)."""
    return run("project2", arms, seeds, steps, **kw)


def project3(steps: int = 200, seeds: Sequence[int] = (0,), arms: Sequence[str] = PROJECT3_ARMS, **kw):
    """Target-only vs uniform vs learnability-bandit prompt choice (``rare_group`` = 4 gives 1d+1d G = 32)."""
    return run("project3", arms, seeds, steps, **kw)


def project4(steps: int = 200, seeds: Sequence[int] = (0,), arms: Sequence[str] = PROJECT4_ARMS, **kw):
    """Mean vs std vs MaxRL advantages (``advantage_fns`` plugs in your own; ``student={'greedy_at_least': .4}``)."""
    return run("project4", arms, seeds, steps, **kw)


def project5(steps: int = 300, seeds: Sequence[int] = (0,), arms: Sequence[str] = PROJECT5_ARMS, **kw):
    """RL then pass@k for k = 1..64 before and after, in distribution and on 3d+1d (arm 'rl+kl' adds a KL)."""
    return run("project5", arms, seeds, steps, **kw)


# -------------------------------------------------------------------------------- summaries
def final(results: dict[str, list[dict]], metric: str, where: str = "evals") -> dict[str, tuple[float, float]]:
    """{arm: (mean, std over seeds)} of the last recorded value of ``metric``."""
    out = {}
    for arm, runs in results.items():
        vals = []
        for r in runs:
            s = [v for v in r[where].get(metric, []) if v is not None]
            if s:
                vals.append(s[-1])
        if vals:
            out[arm] = (float(np.mean(vals)), float(np.std(vals)) if len(vals) > 1 else 0.0)
    return out


def start_value(results: dict[str, list[dict]], metric: str) -> float:
    """Mean over all runs of the step-0 evaluation of ``metric``."""
    vals = [r["evals"][metric][0] for runs in results.values() for r in runs if metric in r["evals"]]
    return float(np.mean(vals)) if vals else float("nan")


def summary_table(results: dict[str, list[dict]], metrics: Sequence[str], expected: dict | None = None) -> str:
    """A text table: per arm, start -> end (mean +- std over seeds) of each metric, handout value beside.

    Each column is as wide as its longest entry, so that a three-metric table fits a notebook's width.
    """
    expected = expected or {}
    header = ["arm"]
    for m in metrics:
        header += [f"{m} start->end", "handout"]
    rows = []
    for arm, runs in results.items():
        row = [arm]
        for m in metrics:
            starts = [r["evals"][m][0] for r in runs if m in r["evals"] and r["evals"][m][0] is not None]
            end = final({arm: runs}, m).get(arm)
            if end is None:
                row += ["-", ""]
                continue
            s = f"{np.mean(starts):.3f} -> {end[0]:.3f}" + (f" ± {end[1]:.3f}" if len(runs) > 1 else "")
            e = expected.get(arm, {}).get(m)
            row += [s, f"{e:.3f}" if isinstance(e, (int, float)) else "-"]
        rows.append(row)
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join(fmt(r).rstrip() for r in [header] + rows)


# ------------------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmrl.experiments", description=__doc__.split("\n")[0])
    p.add_argument("project", choices=sorted(PROJECTS))
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the handout's)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--arms", nargs="+", default=None)
    p.add_argument("--workers", type=int, default=1, help="parallel processes (one thread each)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="results folder (default %(default)s)")
    p.add_argument("--eval-prompts", type=int, default=None)
    p.add_argument("--epochs", type=int, default=None, help="project1")
    p.add_argument("--eps-high", type=float, default=None, help="project1: clip-higher's upper bound")
    p.add_argument("--rare-group", type=int, default=None, help="project3: 4 gives the 1d+1d bucket G = 32")
    p.add_argument("--weak-student", type=float, default=None,
                   help="project4: start from the first SFT snapshot with greedy accuracy >= this")
    p.add_argument("--student-d", type=int, default=None, help="project0: a student of this width")
    p.add_argument("--kl-coef", type=float, default=None, help="project5: KL coefficient of the rl+kl arm")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    kw = {}
    if a.eval_prompts is not None:
        kw["eval_prompts"] = a.eval_prompts
    for name in ("epochs", "eps_high", "rare_group", "kl_coef"):
        if getattr(a, name) is not None:
            kw[name] = getattr(a, name)
    if a.weak_student is not None or a.student_d is not None:
        kw["student"] = {"d": a.student_d or 64, "greedy_at_least": a.weak_student or 0.55}
    res = run(a.project, a.arms, a.seeds, a.steps, workers=a.workers, out_dir=a.out, progress=not a.quiet, **kw)
    metrics = {"project0": ["pass@1", "kl_to_teacher_nats"], "project1": ["entropy_nats", "pass@1", "pass@16"],
               "project2": ["gold_pass@1", "proxy_reward", "pad_share_small_sums"],
               "project3": ["acc_1d+1d", "acc_2d+2d_ge100", "acc_3d+1d"], "project4": ["pass@1", "pass@16"],
               "project5": ["pass@1"]}[a.project]
    print(summary_table(res, metrics, EXPECTED.get(a.project)))
    print(f"results written under {Path(a.out) / a.project}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
