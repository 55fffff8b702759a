"""Lab 21 (the frontier): Project 0 (on-policy distillation) and Projects 1-5, their widgets and a CLI.

Every project is a set of *arms* (the things compared) run for one or more *seeds*. One job is
(project, arm, seed): it starts from a fresh checkpoint, trains with :func:`llmrl.rl.train.rl_train`
and returns one result of the runner's schema (:mod:`llmrl.experiments.runner`): ``config``, ``curve`` (every
training step), ``evals`` (step 0, every ``eval_every`` steps, the last step) and ``extra``
(project-specific: pass@k curves, usage). What a project looks at during training reaches it
through the step's hooks (:class:`llmrl.rl.run.Hooks`): Project 2's share of padded answers and
Project 3's bandit, which learns from each step's successes.

:func:`run` runs a project's jobs (in parallel processes when ``workers > 1``), writes each job to
``<out_dir>/lab21/<project>/<arm>_seed<k>.json`` when ``out_dir`` is given, and returns
``{arm: [result per seed]}``; :func:`load_results` reads such a folder back (by default
:func:`llmrl.experiments.runner.results_dir`, the same folder from any working directory). The same runs from
the command line, for long sweeps a notebook cell then loads and plots::

    python -m llmrl.labs.lab21 project5 --steps 1000 --seeds 0 1 2 --workers 3
    python -m llmrl.labs.lab21 project2 --arms stylish_w0.25 stylish_w0.5 stylish_w1 stylish_w2

(``python -m llmrl.labs.lab21`` is the same command under its former name.) Callables (the
student's loss, advantage or reward functions) can be passed to every project; with
``workers > 1`` the jobs run in forked processes, so even a lambda defined in a notebook works.
``EXPECTED`` holds the published numbers (seed 0, full budgets) for printing beside measured ones.

Project 2's slider: :func:`rubric_weight_widget` shows, for a rubric weight ``w`` and the student's
current accuracy, the expected reward per answer of "pad every answer to 3+ digits" against "answer
honestly" (:func:`honest_vs_pad`), and next to it the trained runs (gold accuracy and the share of
padded small sums) for the stylish weight closest to ``w``. :func:`rubric_weight_figure` draws the
same picture without a browser.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..experiments import plotting
from ..tasks.addition import BUCKETS, TWO_DIGIT, eval_problems, is_correct
from ..rl.evaluation import evaluate, pass_at_k_per_problem
from ..experiments.plotting import figure_png
from ..sft.checkpoints import LAB21_SFT, load_checkpoint
from ..sft.supervised import Snapshot
from ..experiments.runner import final, load_results as _load_results, result_from_history, results_dir, run_arms, \
    seeds_together, start_value, summary_table as _summary_table
from ..rl.config import RLConfig, config_dict
from ..rl.run import Hooks
from ..rl.train import rl_train
from ..lm.sampling import generate
from ..utils import check_float, check_int, mean_sd
# the pieces that need no run live in lab21_parts.py; the notebooks and tools keep reaching them as lab21.<name>
from .lab21_parts import (  # noqa: F401
    BucketSampler, _eval_seed, crossing_k, honest_vs_pad, pad_share_small_sums, pass_curves, rubric_for,
    two_digit_share_large)

__all__ = ["EXPECTED", "PROJECTS", "PROJECT0_ARMS", "PROJECT1_ARMS", "PROJECT2_ARMS", "PROJECT3_ARMS",
           "PROJECT4_ARMS", "PROJECT5_ARMS", "CLIP_BOUNDS", "TRAINED_WEIGHTS", "BucketSampler", "Project",
           "crossing_k", "describe_setup", "final", "honest_vs_pad", "small_sum_accuracy", "load_results", "load_student", "load_teacher", "main",
           "pad_share_small_sums", "pass_curves", "project0", "project1", "project2", "project3", "project4",
           "project5", "rubric_for", "rubric_weight_figure", "rubric_weight_widget", "run", "seed_spread", "start_value",
           "stylish_runs", "summary_table"]

# The published observations (seed 0, at the published budgets). Keys name arms and metrics.
EXPECTED = {
    "project0": {  # 200 steps of 64 sequences (how many prompts is not published), AdamW 3e-4
        "start": {"pass@1": 0.31, "kl_to_teacher_exact_token_mean_nats": 1.98},
        "opd-full": {"pass@1": 0.67, "kl_to_teacher_exact_token_mean_nats": 0.70},
        "sft-teacher": {"pass@1": 0.64, "kl_to_teacher_exact_token_mean_nats": 0.75},
        "opd-sampled": {"pass@1": 0.54, "kl_to_teacher_exact_token_mean_nats": 1.01},
        "rl": {"pass@1": 0.54, "kl_to_teacher_exact_token_mean_nats": 1.07},
    },
    "project1": {  # 150 steps, 4 epochs; entropy in nats per token, start 0.54
        "start": {"entropy_token_mean_nats": 0.54},
        "symmetric": {"entropy_token_mean_nats": 0.222, "pass@1": 0.57},
        "clip-higher": {"entropy_token_mean_nats": 0.235, "pass@1": 0.57},
        "no-clip": {"entropy_token_mean_nats": 0.26, "pass@1": 0.50},
    },
    "project2": {  # 200 steps; gold pass@1 start 0.29
        "start": {"gold_pass@1": 0.29},
        "binary": {"gold_pass@1": 0.55, "proxy_reward_mean": 0.56, "pad_share_small_sums": 0.02},
        "partial": {"gold_pass@1": 0.54, "proxy_reward_mean": 0.74, "pad_share_small_sums": 0.01},
        "stylish_w2": {"gold_pass@1": 0.29, "proxy_reward_mean": 0.61, "pad_share_small_sums": 0.98},
        "stylish_w1": {"gold_pass@1": 0.50, "pad_share_small_sums": 0.08},
    },
    "project3": {  # 200 steps; usage = share of samples spent on the unsolvable 3d+1d bucket
        "target-only": {"sampled_accuracy_3d+1d": 0.00},
        "uniform": {"sampled_accuracy_2d+2d_ge100": 0.50, "usage_3d+1d": 0.22},
        "learnability": {"sampled_accuracy_2d+2d_ge100": 0.62, "usage_3d+1d": 0.03},
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


# Where our runs end away from a published value (farther than the reproduction's tolerance for that
# claim, the first number), and why: summary_table prints the note under the table whenever the mean
# over seeds it prints lies outside the tolerance, and nothing when it lies within.
_PADDING_PAYS = ("padding pays once w exceeds the accuracy on small sums (honest_vs_pad); our student's is well "
                 "below 1, so w = 1 is already past the threshold")
DIFFERS = {
    "project0": {("opd-full", "kl_to_teacher_exact_token_mean_nats"): (
        0.105, "the split of the 64 sequences a step into prompts x samples is not published and moves the "
               "distillation arms most; 16 x 4, used here, holds the most of Project 0's published numbers")},
    "project2": {
        ("stylish_w2", "proxy_reward_mean"): (
            0.1, "our rubric pays 1 + w for a padded right answer, so the stylish proxy runs on another scale"),
        ("stylish_w1", "pad_share_small_sums"): (0.07, _PADDING_PAYS),
        ("stylish_w1", "gold_pass@1"): (0.07, _PADDING_PAYS)},
    "project3": {("learnability", "sampled_accuracy_2d+2d_ge100"): (
        0.07, "the published value is one seed's; this arm's seeds spread widely (the bandit's choices compound), "
              "and it still ends ahead of uniform, as published")},
}


def summary_table(results: dict[str, list[dict]], metrics, expected: dict | None = None) -> str:
    """:func:`llmrl.experiments.runner.summary_table`, and under it a note for every printed end (mean over seeds)
    that lies farther from its published value than the reproduction allows, with the reason
    (:data:`DIFFERS`; ``expected`` is a project's :data:`EXPECTED` entry)."""
    table = _summary_table(results, metrics, expected)
    project = next((p for p, e in EXPECTED.items() if e is expected), None)
    notes = []
    for (arm, metric), (tol, why) in DIFFERS.get(project, {}).items():
        end = final({arm: results[arm]}, metric).get(arm) if arm in results and metric in metrics else None
        published = expected[arm][metric]
        # judged on the number as printed (three decimals), as the reproduction judges its claim
        if end is not None and abs(round(end[0], 3) - published) > tol + 1e-12:
            notes.append(f"note: {arm} {metric} ends at {end[0]:.3f}, more than {tol:g} from the published "
                         f"{published:g}: {why}")
    return "\n".join([table] + notes)


# ----------------------------------------------------------------------------------------- models
# Project 0's learning rate is published (AdamW at 3e-4, 64 sequences per step); Projects 1-5 state none and
# take the same rate: the published setting names no other. PROJECT_LR[project] is the one
# a project's arms use unless given ``lr``. (For the ReLU student shipped before, a recorded search gave each
# project its own, 4e-4 to 8e-4: docs/lab21-calibration-relu.md. The GELU student learns at the published
# rate: docs/lab21-calibration.md.)
P0_LR = 3e-4
PROJECT_LR = {f"project{i}": P0_LR for i in range(1, 6)}
# Project 0's 64 sequences a step are published; how they split into prompts x samples is not. The second
# search of docs/lab21-calibration.md (seeds 0-2, Project 0's claims with their tolerances) tried 8 x 8,
# 16 x 4, 32 x 2 and 64 x 1 (rl at 8 x 8): 16 x 4 holds 12 of its 13 claims (8 x 8: 7, 32 x 2: 9). More
# prompts a step show the distillation arms more of the states the student visits: at 32 x 2 they overshoot
# the published pass@1 and undershoot its KL, at 8 x 8 the reverse.
P0_PROMPTS, P0_GROUP = 16, 4


def _lr(lr: float | None, project: str) -> float:
    return PROJECT_LR[project] if lr is None else check_float("lr", lr, minimum=0.0)


def load_student(d: int = 64, greedy_at_least: float | None = None) -> torch.nn.Module:
    """A fresh student: by default the course's shipped one (d = 64, an early snapshot of lab21's SFT
    run, a GELU TinyLM: about 50% greedy and 30% sampled at T = 1; its step and measured accuracy are
    in ``lib/llmrl/models/MANIFEST.json``).

    ``greedy_at_least`` takes instead the first snapshot of that run (checked every 5 SFT steps from
    step 100) whose greedy accuracy on the SFT check set reaches that value: 0.4 gives Project 4's
    weaker student. ``d`` != 64 trains a student of that width with the same recipe, taken where its
    greedy accuracy first reaches ``greedy_at_least`` (default 0.5, the shipped student's). Both are
    trained on the first call and cached (about 25 s).
    """
    check_int("d", d, minimum=8)
    if greedy_at_least is not None:
        check_float("greedy_at_least", greedy_at_least, minimum=0.0)
        if greedy_at_least > 1:
            raise ValueError(f"greedy_at_least is an accuracy in [0, 1], got {greedy_at_least}")
    if d == 64 and greedy_at_least is None:
        return load_checkpoint("student", progress=False)
    cfg = replace(LAB21_SFT, model=replace(LAB21_SFT.model, d=d))
    snap = Snapshot(100, 0.5 if greedy_at_least is None else greedy_at_least, every=5)
    return load_checkpoint("student", cfg=cfg, snapshots={"student": snap}, progress=False)


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


def _eval_every(steps: int, eval_every: int | None, n_evals: int = 4) -> int:
    return max(1, steps // n_evals) if eval_every is None else check_int("eval_every", eval_every, minimum=1)


def _result(history, cfg: RLConfig, curve: Sequence[str], extra: dict | None = None, **config) -> dict:
    return result_from_history(history, {**config_dict(cfg), **config}, curve, extra)


def _train_seeds(seeds: Sequence[int], cfg: RLConfig, student, eval_fn: Callable | None = None,
                 per_seed: Callable | None = None, **rl_kwargs):
    """``rl_train`` of one fresh student per seed, all seeds stepping together (:mod:`llmrl.lm.stacked`):
    each seed's numbers are those of a run of that seed alone. ``eval_fn(model, seed)``; ``per_seed(seed)``
    gives a seed's own stateful pieces (see :func:`llmrl.rl.train.rl_train`)."""
    def pieces(seed):
        own = dict(per_seed(seed)) if per_seed is not None else {}
        if eval_fn is not None:
            own["eval_fn"] = partial(eval_fn, seed=seed)
        return own

    return rl_train([_student(student) for _ in seeds], cfg, seeds=list(seeds), per_seed=pieces, **rl_kwargs)


def _results(histories, cfg: RLConfig, curve: Sequence[str], **config) -> list[dict]:
    """One result per seed of a :func:`_train_seeds` run (its config with that seed)."""
    return [_result(h, replace(cfg, seed=h.seed), curve, **config) for h in histories]


# ------------------------------------------------------------------------------ Project 0: OPD
PROJECT0_ARMS = ("opd-full", "sft-teacher", "opd-sampled", "rl")


@seeds_together
def _arm0(arm, seeds, steps=200, n_prompts=P0_PROMPTS, group_size=P0_GROUP, lr=P0_LR, loss_fns=None, student=None,
          eval_prompts=100, eval_samples=8, eval_every=None, max_grad_norm=None, pass_at_k_fn=None, progress=False):
    loss_fns = dict(loss_fns or {})
    settings = {"opd-full": dict(loss="opd-full"), "opd-sampled": dict(loss="opd-sampled"),
                "sft-teacher": dict(loss="sft", rollout_from="teacher"), "rl": dict(loss="pg")}
    if arm not in settings:
        raise ValueError(f"arm must be one of {PROJECT0_ARMS}, got {arm!r}")
    # No gradient clipping by default (the published setup names none). The trainer's default, 1.0,
    # throttles the distillation arms: their gradient norms are 15-20, and with it opd-full ended at
    # pass@1 0.46 / KL 1.04 on seed 0 instead of 0.52 / 0.84.
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=lr, seed=seeds[0],
                   track_reference_kl=False, max_grad_norm=max_grad_norm, **settings[arm])
    teacher = load_teacher()
    probs = eval_problems(eval_prompts, TWO_DIGIT)

    def eval_fn(m, seed):
        e = evaluate(m, probs, n_samples=eval_samples, ks=(1, eval_samples), seed=seed, teacher=teacher,
                     pass_at_k_fn=pass_at_k_fn)
        return {k: e[k] for k in ("pass@1", f"pass@{eval_samples}", "kl_to_teacher_exact_token_mean_nats",
                                  "greedy_accuracy")}

    hists = _train_seeds(seeds, cfg, student, eval_fn, teacher=teacher, policy_loss_fn=loss_fns.get(arm),
                         eval_every=_eval_every(steps, eval_every), progress=progress)
    return _results(hists, cfg, ["sampled_accuracy", "loss_mean", "teacher_logprob_token_mean", "entropy_token_mean_nats"])


# ------------------------------------------------------------------------ Project 1: clip-higher
PROJECT1_ARMS = ("symmetric", "clip-higher", "no-clip")
# "no-clip" drops the upper bound only, like lab19's "no upper clip". The published no-clip run learns (pass@1
# 0.50 after 150 steps, the lowest of the three); with the lower bound gone too, 4 epochs a batch break the
# policy down (pass@1 0.17 for the student shipped before). The plain-torch trainer of ../shared/baseline,
# written the published way, has the same switch: no upper bound, the lower one kept.
CLIP_BOUNDS = {"symmetric": (0.2, 0.2), "clip-higher": (0.2, 0.28), "no-clip": (0.2, None)}


@seeds_together
def _arm1(arm, seeds, steps=150, epochs=4, eps_high=0.28, n_prompts=16, group_size=8, lr=None,
          eval_prompts=100, eval_samples=16, eval_every=None, student=None, progress=False):
    if arm not in CLIP_BOUNDS:
        raise ValueError(f"arm must be one of {PROJECT1_ARMS}, got {arm!r}")
    lo, hi = CLIP_BOUNDS[arm]
    if arm == "clip-higher":
        hi = check_float("eps_high", eps_high, minimum=0.0)
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=_lr(lr, "project1"), epochs=epochs,
                   eps_low=lo, eps_high=hi, seed=seeds[0], track_reference_kl=False)
    probs = eval_problems(eval_prompts, TWO_DIGIT)

    def eval_fn(m, seed):
        e = evaluate(m, probs, n_samples=eval_samples, ks=(1, eval_samples), seed=seed)
        return {k: e[k] for k in ("pass@1", f"pass@{eval_samples}", "entropy_token_mean_nats")}

    hists = _train_seeds(seeds, cfg, student, eval_fn, eval_every=_eval_every(steps, eval_every, 6), progress=progress)
    return _results(hists, cfg, ["entropy_token_mean_nats", "sampled_accuracy", "clip_fraction", "clip_fraction_high",
                               "clip_fraction_low", "clip_high_of_positive", "clip_low_of_negative"])


# ------------------------------------------------------------------------- Project 2: rubrics
PROJECT2_ARMS = ("binary", "partial", "stylish_w2")


@seeds_together
def _arm2(arm, seeds, steps=200, n_prompts=16, group_size=8, lr=None, reward_fns=None, pitfall=None,
          eval_prompts=100, eval_samples=8, eval_every=None, student=None, progress=False):
    reward_fns = dict(reward_fns or {})
    reward = reward_fns[arm] if arm in reward_fns else rubric_for(arm, pitfall)
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=_lr(lr, "project2"), seed=seeds[0],
                   track_reference_kl=False)
    probs = eval_problems(eval_prompts, TWO_DIGIT)

    def padding(batch):  # the training batch's share of padded answers to small sums, every step
        return {"pad_share_small_sums": pad_share_small_sums(batch.rollout.completions, batch.rollout.answers)}

    def eval_fn(m, seed):
        r = generate(m, probs, eval_samples, 1.0, seed)
        return {"gold_pass@1": float(is_correct(r.responses, r.answers).float().mean()),
                "proxy_reward_mean": float(torch.as_tensor(reward(r.responses, r.answers)).float().mean()),
                "pad_share_small_sums": pad_share_small_sums(r.responses, r.answers)}

    hists = _train_seeds(seeds, cfg, student, eval_fn, reward_fn=reward, hooks=Hooks(after_score=padding),
                         eval_every=_eval_every(steps, eval_every), progress=progress)
    return _results(hists, cfg, ["reward_mean", "sampled_accuracy", "entropy_token_mean_nats", "pad_share_small_sums"],
                   reward=getattr(reward, "__name__", repr(reward)))


def small_sum_accuracy(student=None, n_problems: int = 400, n_samples: int = 4, seed: int = 0) -> float:
    """The student's sampled (T = 1) accuracy on 2-digit + 2-digit problems whose sum is below 100:
    the p of :func:`honest_vs_pad`, where padding starts to pay (``n_problems`` fixed problems,
    ``n_samples`` each; the default student is lab21's)."""
    model = _student(student)
    probs = eval_problems(check_int("n_problems", n_problems, minimum=1), ["2d+2d_lt100"], seed=12345)
    r = generate(model, probs, check_int("n_samples", n_samples, minimum=1), 1.0, seed)
    return float(is_correct(r.responses, r.answers).float().mean())


PROJECT3_ARMS = ("target-only", "uniform", "learnability")


@seeds_together
def _arm3(arm, seeds, steps=200, n_prompts=16, group_size=8, lr=None, rare_group=1, temperature=0.1,
          eval_per_bucket=100, eval_every=None, student=None, progress=False):
    modes = {"target-only": "target", "uniform": "uniform", "learnability": "learnability"}
    if arm not in modes:
        raise ValueError(f"arm must be one of {PROJECT3_ARMS}, got {arm!r}")
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=_lr(lr, "project3"), seed=seeds[0],
                   track_reference_kl=False)
    eval_sets = {b: eval_problems(eval_per_bucket, [b]) for b in BUCKETS}

    def pieces(seed):  # each seed its own sampler: its bandit learns from that seed's successes only
        sampler = BucketSampler(modes[arm], rare_group=rare_group, group_size=group_size, temperature=temperature)

        def bandit(batch):
            """What this step served (shares of samples per bucket) and the probabilities it was drawn
            with; then the bandit learns from the step's successes."""
            probs = sampler.probabilities()
            counts = torch.bincount(batch.rollout.problems.bucket, minlength=len(BUCKETS)).float()
            counts = counts / counts.sum()
            sampler.observe(batch.correct)
            return {**{f"usage_{b}": float(counts[BUCKETS.index(b)]) for b in sampler.buckets},
                    **{f"sampling_probability_{b}": probs[b] for b in sampler.buckets}}

        return {"prompt_sampler": sampler, "advantage_fn": sampler.advantages, "hooks": Hooks(after_score=bandit)}

    calls: dict[int, int] = {}

    def eval_fn(m, seed):
        """One sample per problem of each bucket's fixed set, drawn afresh at every evaluation (a
        generator seed of its own for each seed, evaluation and bucket): a model that did not change
        shows the evaluation's noise, not the same numbers again."""
        i = calls[seed] = calls.get(seed, -1) + 1
        out = {}
        for j, (b, p) in enumerate(eval_sets.items()):
            r = generate(m, p, 1, 1.0, _eval_seed(seed, i, j))
            out[f"sampled_accuracy_{b}"] = float(is_correct(r.responses, r.answers).float().mean())
        return out

    hists = _train_seeds(seeds, cfg, student, eval_fn, per_seed=pieces, eval_every=_eval_every(steps, eval_every),
                         progress=progress)
    curve = ["sampled_accuracy", "frac_zero_advantage_groups"] + [f"{k}_{b}" for k in ("usage", "sampling_probability")
                                                                  for b in BUCKETS]
    results = _results(hists, cfg, curve, rare_group=rare_group, bandit_temperature=temperature)
    for res in results:
        res["extra"]["total_usage"] = {f"usage_{b}": float(np.mean(res["curve"][f"usage_{b}"])) for b in BUCKETS}
    return results


# ------------------------------------------------------------------------- Project 4: MaxRL
# The sampling temperature of Projects 4 and 5's pass@k evaluation (training samples at T = 1 whatever it is).
# The published setting names none, so it evaluates at T = 1, as it samples. (The ReLU student shipped before
# saturated pass@k at T = 1 and was evaluated at 0.7: docs/lab21-calibration-relu.md.)
EVAL_TEMPERATURE = {"project4": 1.0, "project5": 1.0}


def _eval_temperatures(project: str, eval_temperature, more) -> list[tuple[float, str]]:
    """[(temperature, metric suffix)]: the evaluation's own (suffix "") then ``more`` (suffix "@T<t>")."""
    t0 = EVAL_TEMPERATURE[project] if eval_temperature is None else eval_temperature
    t0 = check_float("eval_temperature", t0, minimum=0.0)
    out = [(t0, "")]
    for t in more:
        t = check_float("more_temperatures", t, minimum=0.0)
        if all(t != x for x, _ in out):
            out.append((t, f"@T{t:g}"))
    return out

PROJECT4_ARMS = ("mean", "std", "maxrl")


@seeds_together
def _arm4(arm, seeds, steps=200, n_prompts=16, group_size=8, lr=None, advantage_fns=None, eval_prompts=100,
          eval_samples=16, eval_every=None, student=None, pass_at_k_fn=None, eval_temperature=None,
          more_temperatures=(), progress=False):
    advantage_fns = dict(advantage_fns or {})
    temps = _eval_temperatures("project4", eval_temperature, more_temperatures)
    if arm not in advantage_fns and arm not in PROJECT4_ARMS:
        raise ValueError(f"arm must be one of {PROJECT4_ARMS} or a key of advantage_fns, got {arm!r}")
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=_lr(lr, "project4"), seed=seeds[0],
                   advantage=arm if arm in PROJECT4_ARMS else "mean", track_reference_kl=False)
    probs = eval_problems(eval_prompts, TWO_DIGIT)

    def eval_fn(m, seed):
        out = {}
        for t, suffix in temps:
            r = generate(m, probs, eval_samples, t, seed)
            c = is_correct(r.responses, r.answers).view(len(probs), eval_samples).sum(1).numpy()
            for k in (1, eval_samples):
                per = pass_at_k_per_problem(eval_samples, c, k, pass_at_k_fn)
                out[f"pass@{k}{suffix}"] = float(per.mean())
                out[f"pass@{k}_se{suffix}"] = float(per.std(ddof=1) / math.sqrt(len(per)))  # noise of the eval set
        return out

    hists = _train_seeds(seeds, cfg, student, eval_fn, advantage_fn=advantage_fns.get(arm),
                         eval_every=_eval_every(steps, eval_every), progress=progress)
    return _results(hists, cfg, ["sampled_accuracy", "frac_zero_advantage_groups", "entropy_token_mean_nats"],
                    eval_temperature=temps[0][0])


# ------------------------------------------------------------ Project 5: sharpen or expand
PROJECT5_ARMS = ("rl",)


@seeds_together
def _arm5(arm, seeds, steps=300, n_prompts=16, group_size=8, lr=None, kl_coef=0.05, eval_prompts=100,
          eval_samples=64, eval_every=None, student=None, eval_temperature=None, more_temperatures=(), progress=False):
    if arm not in ("rl", "rl+kl"):
        raise ValueError(f"arm must be 'rl' or 'rl+kl', got {arm!r}")
    temps = _eval_temperatures("project5", eval_temperature, more_temperatures)
    t0 = temps[0][0]
    cfg = RLConfig(steps=steps, n_prompts=n_prompts, group_size=group_size, lr=_lr(lr, "project5"), seed=seeds[0],
                   kl_coef=kl_coef if arm == "rl+kl" else 0.0, kl_mode="loss", kl_estimator="k3")
    policies = [_student(student) for _ in seeds]
    sets = {"in_dist": eval_problems(eval_prompts, TWO_DIGIT), "3d+1d": eval_problems(eval_prompts, ["3d+1d"])}
    curves = lambda policy, seed, t: {name: pass_curves(policy, p, eval_samples, seed, t)  # noqa: E731
                                      for name, p in sets.items()}
    before = [{t: curves(policy, seed, t) for t, _ in temps} for policy, seed in zip(policies, seeds)]

    def eval_fn(m, seed):
        r = generate(m, sets["in_dist"], 16, t0, seed)
        return {"pass@1": float(is_correct(r.responses, r.answers).float().mean())}

    hists = rl_train(policies, cfg, seeds=list(seeds), per_seed=lambda seed: {"eval_fn": partial(eval_fn, seed=seed)},
                     eval_every=_eval_every(steps, eval_every), progress=progress)
    results = []
    for hist, policy, seed, first in zip(hists, policies, seeds, before):
        after = {t: curves(policy, seed, t) for t, _ in temps}
        extra = {"ks": list(range(1, eval_samples + 1)), "before": first[t0], "after": after[t0],
                 "crossing_k": crossing_k(first[t0]["in_dist"], after[t0]["in_dist"])}
        if len(temps) > 1:  # the same trained model evaluated at the other temperatures
            extra["at_temperature"] = {f"{t:g}": {"before": first[t], "after": after[t],
                                                  "crossing_k": crossing_k(first[t]["in_dist"], after[t]["in_dist"])}
                                       for t, _ in temps[1:]}
        results.append(_result(hist, replace(cfg, seed=seed),
                               ["sampled_accuracy", "entropy_token_mean_nats", "kl_to_reference_k1_sum_nats"],
                               extra=extra, eval_temperature=t0))
    return results


# ------------------------------------------------------------------------------ the projects
@dataclass(frozen=True)
class Project:
    arms: tuple[str, ...]
    arm_fn: Callable
    steps: int
    doc: str
    metrics: tuple[str, ...]  # what the command line's summary table shows


PROJECTS = {
    "project0": Project(PROJECT0_ARMS, _arm0, 200, "On-policy distillation vs off-policy distillation vs RL "
                        "(see ``_arm0`` for the arguments).", ("pass@1", "kl_to_teacher_exact_token_mean_nats")),
    "project1": Project(PROJECT1_ARMS, _arm1, 150, "Symmetric clip vs clip-higher vs no clip, ``epochs`` = 4 "
                        "(``eps_high`` sets clip-higher's bound).", ("entropy_token_mean_nats", "pass@1", "pass@16")),
    "project2": Project(PROJECT2_ARMS, _arm2, 200, "Binary vs partial-credit vs stylish rubric (arms "
                        "'stylish_w<w>', '+pitfall', or ``reward_fns`` keys).",
                        ("gold_pass@1", "proxy_reward_mean", "pad_share_small_sums")),
    "project3": Project(PROJECT3_ARMS, _arm3, 200, "Target-only vs uniform vs learnability-bandit prompt choice "
                        "(``rare_group`` = 4 gives 1d+1d G = 32).",
                        tuple(f"sampled_accuracy_{b}" for b in ("1d+1d", "2d+2d_ge100", "3d+1d"))),
    "project4": Project(PROJECT4_ARMS, _arm4, 200, "Mean vs std vs MaxRL advantages (``advantage_fns`` plugs in "
                        "your own; ``student={'greedy_at_least': .4}``).", ("pass@1", "pass@16")),
    "project5": Project(PROJECT5_ARMS, _arm5, 300, "RL then pass@k for k = 1..64 before and after, in distribution "
                        "and on 3d+1d (arm 'rl+kl' adds a KL).", ("pass@1",)),
}


def run(project: str, arms: Sequence[str] | None = None, seeds: Sequence[int] = (0,), steps: int | None = None,
        workers: int = 1, out_dir=None, progress: bool = True, **kwargs) -> dict[str, list[dict]]:
    """Run ``project``'s ``arms`` x ``seeds``; return {arm: [result for each seed]} (see module docs).

    ``steps`` defaults to the published budget; ``kwargs`` go to the arm function (e.g. ``loss_fns``,
    ``eval_prompts``, ``student={"d": 48}``). ``workers > 1`` forks that many processes (one thread
    each). ``out_dir`` writes one JSON per job under ``out_dir/lab21/project/``.
    """
    if project not in PROJECTS:
        raise ValueError(f"project must be one of {sorted(PROJECTS)}, got {project!r}")
    spec = PROJECTS[project]
    steps = spec.steps if steps is None else check_int("steps", steps, minimum=1)
    return run_arms(f"lab21/{project}", spec.arm_fn, spec.arms if arms is None else arms, seeds, workers=workers,
                    out_dir=out_dir, progress=progress, steps=steps, **kwargs)


def load_results(project: str, out_dir=None) -> dict[str, list[dict]]:
    """Read ``out_dir/lab21/project/*.json`` back into {arm: [results sorted by seed]} ({} if none);
    ``out_dir`` defaults to :func:`llmrl.experiments.runner.results_dir` (the same folder from anywhere)."""
    return _load_results(f"lab21/{project}", out_dir)


def _project_fn(name: str):
    spec = PROJECTS[name]

    def fn(steps: int = spec.steps, seeds: Sequence[int] = (0,), arms: Sequence[str] = spec.arms, **kw):
        return run(name, arms, seeds, steps, **kw)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = spec.doc
    return fn


project0, project1, project2, project3, project4, project5 = (_project_fn(f"project{i}") for i in range(6))


def describe_setup(results: dict, **evaluation) -> str:
    """One line naming what a project's runs held fixed, read from their configs: the seeds, steps,
    prompts x samples, learning rate, epochs, sampling temperature, KL and gradient clipping (a
    setting that differs between arms is named as such); ``evaluation`` adds the evaluation's
    sizes, e.g. ``problems=100, samples=16`` (printed as given)."""
    cfgs = [r["config"] for runs in results.values() for r in runs]
    if not cfgs:
        raise ValueError("describe_setup needs at least one run")

    def one(key, fmt="{}"):
        same = len({repr(c.get(key)) for c in cfgs}) == 1
        return fmt.format(cfgs[0].get(key)) if same else "differs by arm"

    seeds = sorted({c["seed"] for c in cfgs})
    per_arm = sorted({len(runs) for runs in results.values()})
    kl = one("kl_coef")
    parts = [f"seeds {', '.join(map(str, seeds))} ({'/'.join(map(str, per_arm))} per arm)",
             f"{one('steps')} steps of {one('n_prompts')} prompts x {one('group_size')} samples",
             f"AdamW lr {one('lr', '{:g}')}", f"{one('epochs')} epoch(s) per batch",
             f"sampling temperature {one('temperature', '{:g}')}",
             *([f"evaluation temperature {one('eval_temperature', '{:g}')}"] if "eval_temperature" in cfgs[0] else []),
             "no KL term" if kl == "0.0" else f"KL coefficient {kl}",
             f"gradient clipping at {one('max_grad_norm')}" if one("max_grad_norm") != "None" else "no gradient clipping"]
    parts += [f"evaluation {k.replace('_', ' ')} {v}" for k, v in evaluation.items()]
    return "setup: " + "; ".join(parts)


def seed_spread(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    """'mean ± sd (n seeds)' of per-seed values (the sample standard deviation over seeds,
    :func:`llmrl.utils.mean_sd`, as in :func:`summary_table`)."""
    v = [x for x in values if x is not None]
    if not v:
        return "n/a"
    if len(v) == 1:
        return fmt.format(v[0]) + " (1 seed)"
    m, sd = mean_sd(v)
    return f"{fmt.format(m)} ± {fmt.format(sd)} ({len(v)} seeds)"


# ----------------------------------------------------------------------- Project 2's widget
TRAINED_WEIGHTS = (1.0, 1.25, 1.5, 2.0)


def stylish_runs(results: dict) -> dict[float, list[dict]]:
    """{w: runs} for the arms named 'stylish_w<w>' (no pitfall) in Project 2 results."""
    out = {}
    for arm, runs in (results or {}).items():
        if arm.startswith("stylish_w") and "+" not in arm:
            try:
                out[float(arm[len("stylish_w"):])] = runs
            except ValueError:
                continue
    return dict(sorted(out.items()))


def rubric_weight_figure(w: float, accuracy_small: float, results: dict | None = None,
                         share_large: float | None = None, w_max: float = 3.0):
    """The slider's picture as a matplotlib figure: expected rewards against w, and the nearest run."""
    w = check_float("w", w, minimum=0.0)
    accuracy_small = check_float("accuracy_small", accuracy_small, minimum=0.0)
    if accuracy_small > 1:
        raise ValueError(f"accuracy_small must be in [0, 1], got {accuracy_small}")
    runs = stylish_runs(results)
    fig, axes = plt.subplots(1, 2 if runs else 1, figsize=(11 if runs else 5.5, 3.8), squeeze=False)
    ax = axes[0, 0]
    ws = np.linspace(0, w_max, 61)
    ev = [honest_vs_pad(x, accuracy_small, share_large=share_large) for x in ws]
    ax.plot(ws, [e["honest"] for e in ev], label="answer honestly")
    ax.plot(ws, [e["pad"] for e in ev], label="pad everything to 3+ digits")
    now = honest_vs_pad(w, accuracy_small, share_large=share_large)
    ax.axvline(w, color="k", lw=1)
    ax.axvline(now["threshold_w"], color="gray", ls=":", lw=1, label=f"break-even w = {now['threshold_w']:.2f}")
    ax.scatter([w, w], [now["honest"], now["pad"]], color=["C0", "C1"], zorder=3)
    ax.set_xlabel("weight w of 'looks thorough'")
    ax.set_ylabel("expected reward per answer")
    better = "padding" if now["pad"] > now["honest"] else "honesty"
    ax.set_title(f"w = {w:.2f}, accuracy on small sums = {accuracy_small:.2f}: {better} pays")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if runs:
        near = min(runs, key=lambda x: abs(x - w))
        ax2 = axes[0, 1]
        plotting.plot_metric({"gold pass@1": runs[near]}, "gold_pass@1", ax=ax2)
        plotting.plot_metric({"padded small sums": runs[near]}, "pad_share_small_sums", ax=ax2)
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel("share")
        ax2.set_title(f"trained run, w = {near:g} ({len(runs[near])} seed(s))")
    fig.tight_layout()
    return fig


def rubric_weight_widget(results: dict | None = None, accuracy_small: float = 0.3,
                         share_large: float | None = None):
    """ipywidgets: a w slider and an accuracy slider driving :func:`rubric_weight_figure`.

    The picture is an Image widget refreshed with PNG bytes (no Output-widget capture, which
    notebook executors handle badly).
    """
    import ipywidgets as W

    image = W.Image(format="png")
    w_slider = W.FloatSlider(value=2.0, min=0.0, max=3.0, step=0.05, description="w", continuous_update=False)
    acc_slider = W.FloatSlider(value=float(accuracy_small), min=0.0, max=1.0, step=0.01,
                               description="accuracy", continuous_update=False)
    note = W.HTML(f"trained weights available: {', '.join(f'{x:g}' for x in stylish_runs(results)) or 'none'}")

    def redraw(*_):
        image.value = figure_png(rubric_weight_figure(w_slider.value, acc_slider.value, results, share_large))

    w_slider.observe(redraw, names="value")
    acc_slider.observe(redraw, names="value")
    redraw()
    return W.VBox([W.HBox([w_slider, acc_slider]), note, image])


# ------------------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmrl.labs.lab21", description=__doc__.split("\n")[0])
    p.add_argument("project", choices=sorted(PROJECTS))
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the published budget)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--arms", nargs="+", default=None)
    p.add_argument("--workers", type=int, default=1, help="parallel processes (one thread each)")
    p.add_argument("--out", default=None, help=f"results folder (default {results_dir()})")
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
        kw["student"] = {"d": a.student_d or 64, "greedy_at_least": a.weak_student}
    out = Path(a.out) if a.out else results_dir()
    res = run(a.project, a.arms, a.seeds, a.steps, workers=a.workers, out_dir=out, progress=not a.quiet, **kw)
    print(summary_table(res, PROJECTS[a.project].metrics, EXPECTED.get(a.project)))
    print(f"results written under {out / 'lab21' / a.project}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
