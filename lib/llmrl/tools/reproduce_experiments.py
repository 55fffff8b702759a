"""The experiments that ``python -m llmrl.tools.reproduce`` runs to judge the claims: each lab's runs at
the published settings, per seed, with the models they start from (:data:`EXPERIMENTS`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

# Experiments whose notebook trains other seeds than DEFAULT_SEEDS run at the notebook's (unless --seeds is
# given): lab19's Parts 2-3 train lab19.REFERENCE_SEEDS, and lab21's Project 1 asks for seeds 0-4
# (projects.ipynb's P1_SEEDS). lib/tests/test_reproduce.py keeps these equal to the notebooks'.
NOTEBOOK_SEEDS = {"lab19": (0, 1, 2, 3, 4), "lab21/project1": (0, 1, 2, 3, 4)}


# ============================================================================ experiments

@dataclass(frozen=True)
class Options:
    """How experiments run: ``smoke`` (every training run :data:`SMOKE_STEPS` long, to check the
    pipeline end to end; separate cache, numbers meaningless), ``workers`` (processes for the
    runner's arms x seeds jobs; one thread each)."""

    smoke: bool = False
    workers: int = 1


@dataclass(frozen=True)
class Experiment:
    """``run(seeds, options) -> {seed: JSON-able result}`` computes the given seeds from scratch.
    ``seeded``: False for a deterministic computation (run once, at the first seed). ``cheap``:
    part of ``--fast``. ``settings``: what determines the numbers (goes into the cache key).
    ``models``: names for :func:`model_fingerprint`. ``unavailable``: why it cannot run here (its
    claims are "not run"). ``seeds``: the seeds its notebook trains, where that is not the run's
    default (lab19's Parts 2-3 and lab21's Project 1: 0-4); with the default seeds the experiment runs
    at these, so that its rows show what the student's notebook shows."""

    name: str
    lab: str
    run: Callable[[Sequence[int], Options], dict] | None
    settings: dict = field(default_factory=dict)
    models: tuple[str, ...] = ()
    seeded: bool = True
    cheap: bool = False
    unavailable: str = ""
    cost_s: float = 1.0   # rough CPU seconds per seed on the development machine: orders the runs
    seeds: tuple[int, ...] | None = None


def per_seed(fn: Callable) -> Callable[[Sequence[int], Options], dict]:
    """An experiment's ``run`` from a one-seed function ``fn(seed)`` or ``fn(seed, options)``: the one
    loop over seeds for experiments whose library functions take a single seed. (The runner-based
    experiments hand the whole list to :func:`llmrl.experiments.runner.run_arms` or :func:`llmrl.labs.lab21.run`,
    which is where seeds can be trained stacked.)"""
    import inspect

    takes_opts = len(inspect.signature(fn).parameters) > 1

    def run(seeds: Sequence[int], opts: Options) -> dict:
        return {s: fn(s, opts) if takes_opts else fn(s) for s in seeds}
    run.__name__ = getattr(fn, "__name__", "run")
    return run


def _tiny(name: str):
    from ..sft.checkpoints import load_checkpoint
    return load_checkpoint(name, progress=False)


def _exp_lab11_sweep(seed: int) -> dict:
    from ..labs import lab11

    s = lab11.temperature_sweep(_tiny("sft"), seed=seed)
    key = lambda T: f"{T:g}"  # noqa: E731
    return {"accuracy": {key(T): float(a) for T, a in zip(s["temperature"], s["accuracy"])},
            "distinct": {key(T): float(d) for T, d in zip(s["temperature"], s["distinct_answers"])},
            "distinct_all": [float(d) for d in s["distinct_answers"]]}


def _exp_lab11_kl(seed: int) -> dict:
    from ..labs import lab11

    checks = lab11.kl_checks(lab11.kl_estimates(_tiny("sft"), seed=seed))
    return {f"{T:g}": row for T, row in checks.items()}


def _exp_lab19_overopt(seed: int) -> dict:
    from ..labs import overopt

    pool = overopt.pool_curves(overopt.make_pool(seed=seed))
    pk = overopt.peak(pool)
    alpha, beta = overopt.fit_gao_bon(pool["d"], pool["gold_gain"])
    noise = overopt.pool_curves(overopt.make_pool(b=0.0, seed=seed))
    exact = overopt.exact_best_of_n()
    exact_noise = overopt.exact_best_of_n(b=0.0)
    return {"peak_n": pk["n"], "peak_kl": pk["kl"], "peak_gain": pk["gold_gain"],
            "pool_gain_3000": float(pool["gold_gain"][-1]), "exact_gain_3000": float(exact["gold_gain"][-1]),
            "proxy_min_increase": float(np.diff(pool["proxy_gain"]).min()), "alpha": float(alpha),
            "beta": float(beta), "noise_beta": float(overopt.fit_gao_bon(noise["d"], noise["gold_gain"])[1]),
            "noise_min_increase": float(np.diff(exact_noise["gold_gain"]).min()),
            "ns_last": int(pool["n"][-1])}


SMOKE_STEPS = 6  # --smoke: every training run this long (checks the pipeline; the numbers mean nothing)


def _steps(opts: "Options", full: int | None) -> dict:
    return {"steps": SMOKE_STEPS} if opts.smoke else ({} if full is None else {"steps": full})


def _lab19_arm(arm: str, seeds: Sequence[int], steps: int | None = None, progress: bool = False) -> list[dict]:
    """One lab19 run (``hacking/<beta>``, ``hacking/gold`` or ``entropy/<clip arm>``) for every seed of
    ``seeds`` trained together (lab19's ``seeds=``: one computation), as one per-step series per seed."""
    from ..labs import lab19

    kind, _, name = arm.partition("/")
    over = {} if steps is None else {"steps": steps}
    if kind == "hacking":
        gold = name == "gold"
        hist = lab19.hacking_run(0.0 if gold else float(name), reward="gold" if gold else "proxy", seeds=list(seeds),
                                 progress=progress, **over)
    else:
        hist = lab19.entropy_run(name, seeds=list(seeds), progress=progress, **over)
    runs = hist if isinstance(hist, list) else [hist]
    if len(runs) != len(seeds):
        raise RuntimeError(f"lab19 {arm}: {len(runs)} runs for seeds {list(seeds)}")
    return [{"curve": lab19.as_series(h)} for h in runs]


_lab19_arm.seeds_together = True  # llmrl.experiments.runner.seeds_together: run_arms hands it an arm's seeds at once


def _lab19_runs(kind: str, arms: Sequence[str]):
    def run(seeds: Sequence[int], opts: "Options") -> dict[int, dict]:
        from ..labs import lab19
        from ..experiments.runner import run_arms

        res = run_arms(f"reproduce/lab19/{kind}", _lab19_arm, [f"{kind}/{a}" for a in arms], seeds,
                       workers=opts.workers, progress=False, steps=SMOKE_STEPS if opts.smoke else None)
        out = {}
        for i, s in enumerate(seeds):
            row = {}
            for a in arms:
                series = res[f"{kind}/{a}"][i]["curve"]
                row[a] = lab19.hack_summary(series) if kind == "hacking" else lab19.entropy_summary(series)
            out[s] = row
        return out
    return run


def _exp_lab21_models(seed: int) -> dict:
    from ..tasks.addition import TWO_DIGIT, eval_problems
    from ..rl.evaluation import accuracy

    probs = eval_problems(200, TWO_DIGIT)
    student, teacher = _tiny("student"), _tiny("teacher")
    return {"teacher_greedy": accuracy(teacher, probs), "student_greedy": accuracy(student, probs),
            "student_sampled": accuracy(student, probs, temperature=1.0, n_samples=8, seed=seed)}


# The arms of a lab21 project that the claims read, where they are not the project's default arms.
LAB21_ARMS = {"project2": ("binary", "partial", "stylish_w2", "stylish_w1")}


def _lab21_project(project: str, arms: Sequence[str] | None = None):
    def run(seeds: Sequence[int], opts: "Options") -> dict[int, dict]:
        from ..labs import lab21

        res = lab21.run(project, arms, seeds=list(seeds), workers=opts.workers, progress=False,
                        **_steps(opts, None))
        return {s: {"arms": {arm: {k: runs[i][k] for k in ("config", "curve", "evals", "extra")}
                             for arm, runs in res.items()}} for i, s in enumerate(seeds)}
    return run


def _hw4_runs(task: str, steps: int | None):
    def run(seed: int, opts: "Options") -> dict:
        from ..hw4.ablation import summary
        from ..hw4.impl import load_impl
        from ..hw4.trainer import default_config, train

        impl = load_impl("reference")
        out = {}
        for algo in ("grpo", "reinforce"):
            cfg = default_config(task, algo, seed=seed, **_steps(opts, steps))
            hist = train(cfg, impl, progress=False)
            row = summary(hist, "none", 0)
            row["reward_curve"] = [float(r["reward_mean"]) for r in hist if r["step"] >= 1]
            row["start_eval_exact_match"] = next((r["eval_exact_match"] for r in hist if "eval_exact_match" in r), None)
            row["steps"] = cfg.steps
            out[algo] = row
        return out
    return run


def _experiments(lr: float | dict | None = None) -> dict[str, Experiment]:
    """The experiments; ``lr``: lab21 Projects 1-5's learning rates, {project: lr} or one for all (default
    ``lab21.PROJECT_LR``). They and Projects 4-5's evaluation temperatures are in the settings, so that a
    new one recomputes them."""
    from ..labs import overopt
    from ..labs.lab19 import CLIP_ARMS
    from ..labs.lab21 import EVAL_TEMPERATURE, PROJECT_LR

    lrs = dict(PROJECT_LR) if lr is None else dict(lr) if isinstance(lr, dict) else {p: lr for p in PROJECT_LR}

    xs = [
        Experiment("lab11/sweep", "lab11", per_seed(_exp_lab11_sweep), {"n_problems": 200, "n_samples": 8}, ("sft",),
                   cheap=True),
        Experiment("lab11/kl", "lab11", per_seed(_exp_lab11_kl), {"n_problems": 16, "n_samples": 8, "n_batches": 16},
                   ("sft",), cheap=True),
        Experiment("lab19/overopt", "lab19", per_seed(_exp_lab19_overopt),
                   {"pool": 200_000, "pad_share": overopt.PAD_SHARE, "length_scale": overopt.LENGTH_SCALE,
                    "padding_cost": overopt.PADDING_COST}, cheap=True),
        Experiment("lab19/hacking", "lab19", _lab19_runs("hacking", ("0", "0.05", "gold")),
                   {"settings": "lab19.HACK_SETTINGS", "arms": ["0", "0.05", "gold"], "seeds_together": True,
                    "summary": "mid-window"}, ("sft",),
                   cost_s=300, seeds=NOTEBOOK_SEEDS["lab19"]),
        Experiment("lab19/entropy", "lab19", _lab19_runs("entropy", tuple(CLIP_ARMS)),
                   {"settings": "lab19.ENTROPY_SETTINGS", "arms": list(CLIP_ARMS), "seeds_together": True}, ("sft",),
                   cost_s=100, seeds=NOTEBOOK_SEEDS["lab19"]),
        Experiment("lab21/models", "lab21", per_seed(_exp_lab21_models), {"n": 200}, ("student", "teacher"),
                   cheap=True),
        Experiment("lab21/project0", "lab21", _lab21_project("project0"), {"steps": 200}, ("student", "teacher"), cost_s=330),
        Experiment("lab21/project1", "lab21", _lab21_project("project1"), {"steps": 150, "lr": lrs["project1"]},
                   ("student",), cost_s=140, seeds=NOTEBOOK_SEEDS["lab21/project1"]),
        Experiment("lab21/project2", "lab21", _lab21_project("project2", LAB21_ARMS["project2"]),
                   {"steps": 200, "lr": lrs["project2"]}, ("student",), cost_s=170),
        Experiment("lab21/project3", "lab21", _lab21_project("project3"),
                   {"steps": 200, "lr": lrs["project3"], "eval": "fresh samples at every evaluation"},
                   ("student",), cost_s=130),
        Experiment("lab21/project4", "lab21", _lab21_project("project4"),
                   {"steps": 200, "lr": lrs["project4"], "eval_temperature": EVAL_TEMPERATURE["project4"]},
                   ("student",), cost_s=140),
        Experiment("lab21/project5", "lab21", _lab21_project("project5"),
                   {"steps": 300, "lr": lrs["project5"], "eval_temperature": EVAL_TEMPERATURE["project5"]},
                   ("student",), cost_s=90),
        Experiment("hw4/format_copy", "hw4", per_seed(_hw4_runs("format_copy", 51)), {"steps": 51, "reward_curve": True},
                   ("hw4-charlm",), cost_s=150),
        Experiment("hw4/math_toy", "hw4", per_seed(_hw4_runs("math_toy", None)), {"steps": "default", "eval_area": True},
                   ("hw4-charlm",), cost_s=100),
        Experiment("hw4/math_hard", "hw4", None, unavailable="needs Qwen2.5-Math-1.5B-Instruct and MATH level 5 "
                   "on a GPU (hours); no model hub is reachable from the course machines"),
    ]
    return {x.name: x for x in xs}


EXPERIMENTS: dict[str, Experiment] = _experiments()
