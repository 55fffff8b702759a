"""hw4's GRPO hyperparameter study on format_copy, as one sweep that stops where runs degrade.

Four axes, each an ordered list of values around the default run (``AXES``): ``ppo_epochs``; the
minibatch layout ``(minibatch_size, grad_accum_steps)``, i.e. how many optimizer steps each epoch
takes; ``kl_coef``; ``clip_eps``. From the default value the sweep walks outwards in both
directions, one run per value and seed (the two directions' next runs side by side with ``workers=2``),
and stops walking a direction at the first run that degrades: its final eval exact match falls
more than ``tolerance`` below the default run's, or its final rollout reward (mean of the last 5
steps) more than ``1.3 * tolerance`` below (with several seeds: the means over the seeds).

Each run is one job of the library's runner (:func:`llmrl.experiments.runner.run_arms`, arm ``"<axis>=<value>"``)
and its result, in the runner's schema, is written to ``out_dir/hw4-ablation/<arm>_seed<k>.json``
with the summary of the run in ``extra``; runs already there with the same configuration are not
rerun, so an interrupted sweep continues where it stopped.

``sweep(...)`` returns one summary per run; ``plot_sweep(rows)`` draws one panel per axis with the
degraded runs marked.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..experiments.plotting import save, shared_legend
from ..experiments.runner import result_from_history, run_arms
from ..utils import mean_sd
from .settings import HW4Config, default_config
from .impl import Impl
from .plots import eval_area
from .run_manager import train

EXPERIMENT = "hw4-ablation"
# Values per axis, in order; the default run's value is the one in DEFAULT_VALUES.
AXES: dict[str, list] = {
    "ppo_epochs": [1, 2, 4, 8, 16, 32],
    "minibatch": [(48, 1), (24, 2), (24, 1), (12, 1), (6, 1), (3, 1), (1, 1)],
    "kl_coef": [0.0, 0.01, 0.05, 0.5, 2.0, 8.0],
    "clip_eps": [0.005, 0.02, 0.05, 0.2, 1.0, 5.0],
}
DEFAULT_VALUES = {"ppo_epochs": 2, "minibatch": (24, 2), "kl_coef": 0.05, "clip_eps": 0.2}


def _apply(cfg: HW4Config, axis: str, value) -> HW4Config:
    if axis == "minibatch":
        return replace(cfg, minibatch_size=int(value[0]), grad_accum_steps=int(value[1]))
    return replace(cfg, **{axis: value})


def _label(axis, value) -> str:
    return f"{value[0]}x{value[1]}" if axis == "minibatch" else f"{value:g}"


def summary(history, axis, value) -> dict:
    """One run's row: final eval exact match and reward, the largest KL, the mean clip fraction, the
    area under the eval curve (:func:`llmrl.hw4.plots.eval_area`)."""
    recs = [r for r in history if r["step"] >= 1]
    rewards = [r["reward_mean"] for r in recs]
    tail = rewards[-5:]
    jump = next((r["step"] for r in recs if r["reward_mean"] >= 1.0), None)
    return {"axis": axis, "value": list(value) if isinstance(value, tuple) else value, "label": _label(axis, value),
            "final_eval_exact_match": history.final("eval_exact_match"),
            "final_reward": sum(tail) / len(tail) if tail else None,
            "max_kl": max((r.get("kl_to_reference_k3_token_mean_nats", 0) for r in recs), default=0.0),
            "mean_clip_fraction": sum(r.get("clip_fraction", 0) for r in recs) / max(1, len(recs)),
            "first_step_reward_ge_1": jump, "eval_area": eval_area(history), "key": history.config.key()}


SEEDED = ("final_eval_exact_match", "final_reward", "max_kl", "mean_clip_fraction")


def _over_seeds(per_seed: list[dict], seeds: list[int]) -> dict:
    """One run's row from its seeds' summaries: the mean of each number in ``SEEDED`` (None if a seed
    has none), every seed's value in ``<name>_seeds`` and the standard deviation in ``<name>_std``."""
    row = dict(per_seed[0])
    for k in SEEDED:
        vals = [r[k] for r in per_seed]
        ok = all(v is not None for v in vals)
        row[k], row[k + "_std"] = mean_sd(vals) if ok else (None, None)
        row[k + "_seeds"] = vals
    row["first_step_reward_ge_1_seeds"] = [r["first_step_reward_ge_1"] for r in per_seed]
    row["seeds"] = list(seeds)
    return row


def sweep(impl: Impl, out_dir="artifacts/hw4/ablation", base: HW4Config | None = None,
          axes: dict[str, list] | None = None, tolerance: float = 0.15, progress: bool = True,
          callback=None, fresh: bool = False, backend_factory=None, workers: int = 1,
          seeds=None) -> list[dict]:
    """Run the study; returns the summaries (each also in its run's result under ``out_dir``).

    ``seeds``: each run once per seed (default: ``base.seed`` alone); a row's numbers are the means
    over its seeds (every seed's value in ``<name>_seeds``), and "degraded" is judged on the means.
    A configuration that two axes share (the default run is on every axis) is trained once and
    reported on each. ``fresh``: forget earlier results in ``out_dir`` and rerun everything.
    ``backend_factory()``: a fresh policy for each run (default: built from the config).
    ``workers``: processes (the runs of one walk step, all seeds, side by side)."""
    axes = AXES if axes is None else axes
    base = _reference_config(base or default_config("format_copy", "grpo"), axes)
    seeds = [base.seed] if seeds is None else [int(s) for s in seeds]
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct non-negative integers, got {seeds!r}")
    out = Path(out_dir)
    if fresh and (out / EXPERIMENT).is_dir():
        shutil.rmtree(out / EXPERIMENT)
    values_of = {f"{axis}={_label(axis, v)}": (axis, v) for axis, vs in axes.items() for v in vs}
    run = _arm_runner(impl, base, seeds, out, values_of, fresh=fresh, backend_factory=backend_factory,
                      workers=workers, progress=progress, callback=callback)
    rows: list[dict] = []
    for axis, values in axes.items():
        rows += _walk_axis(run, axis, values, tolerance)
    for r in rows:
        r.setdefault("degraded", False)
        r.setdefault("is_default", False)
    return rows


def _reference_config(base: HW4Config, axes: dict[str, list]) -> HW4Config:
    """``base`` at the default value of every axis at once (the sweep's reference point); the axes checked."""
    for axis in axes:
        if axis not in DEFAULT_VALUES:
            raise ValueError(f"unknown axis {axis!r}; known: {sorted(DEFAULT_VALUES)}")
    for k, v in DEFAULT_VALUES.items():
        base = _apply(base, k, v)
    return base


def _arm_runner(impl: Impl, base: HW4Config, seeds: list[int], out: Path, values_of: dict, *, fresh: bool,
                backend_factory, workers: int, progress: bool, callback):
    """A function ``arms -> rows``: trains each arm ("<axis>=<label>") on every seed through the runner
    (a configuration trained before, under any axis, is not trained again) and gives each arm's row
    over its seeds (:func:`_over_seeds`), passing each row to ``callback``."""

    def config_of(arm, seed):
        axis, value = values_of[arm]
        return replace(_apply(base, axis, value), seed=seed)

    def arm_fn(arm, seed, progress=False):
        cfg = config_of(arm, seed)
        history = train(cfg, impl, run_dir=out / f"{arm.replace('=', '-')}-seed{seed}", resume=not fresh,
                        progress=progress, backend=backend_factory() if backend_factory else None)
        return result_from_history(history, cfg.to_dict(), extra=summary(history, *values_of[arm]))

    trained: dict[str, list[dict]] = {}  # configuration (at the first seed) -> its seeds' summaries

    def run(arms) -> list[dict]:
        todo = [a for a in arms if config_of(a, seeds[0]).key() not in trained]
        if todo:
            res = run_arms(EXPERIMENT, arm_fn, todo, seeds, workers=workers, out_dir=out, progress=progress,
                           resume_key=lambda a, s: config_of(a, s).key())
            for a in todo:
                trained[config_of(a, seeds[0]).key()] = [res[a][i]["extra"] for i in range(len(seeds))]
        rows = []
        for a in arms:
            axis, value = values_of[a]
            per_seed = [dict(r, axis=axis, label=_label(axis, value),
                             value=list(value) if isinstance(value, tuple) else value)
                        for r in trained[config_of(a, seeds[0]).key()]]
            rows.append(_over_seeds(per_seed, seeds))
        for row in rows:
            if callback is not None:
                callback(row)
        return rows

    return run


def _walk_axis(run, axis: str, values: list, tolerance: float) -> list[dict]:
    """One axis's rows: the default run (``is_default``), then the walk to larger values and the walk to
    smaller ones, side by side, each stopping after its first degraded run."""
    if DEFAULT_VALUES[axis] not in values:
        raise ValueError(f"axes[{axis!r}] must contain the default value {DEFAULT_VALUES[axis]!r}")
    centre = values.index(DEFAULT_VALUES[axis])
    ref = run([f"{axis}={_label(axis, values[centre])}"])[0]
    ref["is_default"] = True
    floor_em = (ref["final_eval_exact_match"] or 0.0) - tolerance
    floor_reward = (ref["final_reward"] or 0.0) - 1.3 * tolerance
    walked = {1: [], -1: []}
    at = {d: centre + d for d in (1, -1) if 0 <= centre + d < len(values)}
    while at:
        order = sorted(at, reverse=True)
        for d, row in zip(order, run([f"{axis}={_label(axis, values[at[d]])}" for d in order])):
            row["degraded"] = ((row["final_eval_exact_match"] or 0.0) < floor_em
                               or (row["final_reward"] or 0.0) < floor_reward)
            walked[d].append(row)
            at[d] += d
            if row["degraded"] or not 0 <= at[d] < len(values):
                del at[d]
    return [ref] + walked[1] + walked[-1]


def plot_sweep(rows: list[dict], path=None):
    """One panel per axis: final eval exact match and final rollout reward against the value."""
    import matplotlib.pyplot as plt

    axes_names = list(dict.fromkeys(r["axis"] for r in rows))
    fig, axs = plt.subplots(1, len(axes_names), figsize=(4 * len(axes_names), 3.4), squeeze=False)
    for ax, name in zip(axs[0], axes_names):
        order = AXES.get(name, [])
        pts = sorted((r for r in rows if r["axis"] == name),
                     key=lambda r: order.index(tuple(r["value"]) if isinstance(r["value"], list) else r["value"])
                     if (tuple(r["value"]) if isinstance(r["value"], list) else r["value"]) in order else 0)
        xs = list(range(len(pts)))
        n_seeds = len(pts[0].get("seeds", [])) if pts else 0
        mean = ", mean of {} seeds".format(n_seeds) if n_seeds > 1 else ""
        ax.plot(xs, [p["final_eval_exact_match"] for p in pts], "o-", label="eval exact match" + mean)
        ax.plot(xs, [p["final_reward"] / 1.3 for p in pts], "s--", alpha=0.7, label="rollout reward / 1.3" + mean)
        if n_seeds > 1:  # every seed, as small marks beside the means
            jitter = np.linspace(-0.12, 0.12, n_seeds)
            for x, p in zip(xs, pts):
                ax.plot(x + jitter, p["final_eval_exact_match_seeds"], ".", color="C0", ms=5, alpha=0.6,
                        label="each seed" if x == 0 else None)
                ax.plot(x + jitter, [v / 1.3 for v in p["final_reward_seeds"]], ".", color="C1", ms=5, alpha=0.6)
        for x, p in zip(xs, pts):
            if p.get("degraded"):
                ax.axvspan(x - 0.4, x + 0.4, color="tab:red", alpha=0.15)
            if p.get("is_default"):
                ax.axvspan(x - 0.4, x + 0.4, color="tab:green", alpha=0.15)
        ax.set_xticks(xs, [p["label"] for p in pts])
        ax.set_ylim(-0.05, 1.1)
        ax.set_title(name + (" (size x accum)" if name == "minibatch" else ""))
        ax.set_xlabel("value (green: default, red: degraded)")
    axs[0][0].set_ylabel("end of run")
    shared_legend(fig, list(axs[0]))
    save(fig, path, tight=False)
    return fig
