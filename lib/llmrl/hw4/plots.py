"""Plots and tables of hw4 runs, drawn from the records of ``metrics.jsonl`` / ``generations.jsonl``."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..experiments.plotting import save, shared_legend
from ..utils import mean_sd

PANELS = (
    ("eval_exact_match", "eval exact match (greedy, held out)"),
    ("reward_mean", "rollout reward (thin: raw, thick: 5-step mean)"),
    ("kl_to_reference_k3_token_mean_nats", "KL to reference (k3, nats/token)"),
    ("clip_fraction", "clip fraction (tokens whose gradient the clip stops)"),
    ("grad_norm_mean", "gradient norm (before clipping)"),
    ("entropy_token_mean_nats", "entropy (nats/token)"),
)


def _series(records, name):
    pts = [(r["step"], r[name]) for r in records if name in r and r[name] is not None]
    return np.array([p[0] for p in pts]), np.array([p[1] for p in pts], dtype=float)


def smooth(y: np.ndarray, window: int = 5) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far)."""
    c = np.cumsum(np.insert(np.asarray(y, dtype=float), 0, 0.0))
    n = np.arange(1, len(y) + 1)
    lo = np.maximum(0, n - window)
    return (c[n] - c[lo]) / (n - lo)


def eval_area(records, name: str = "eval_exact_match") -> float | None:
    """The area under a run's eval curve divided by the steps it spans: the mean of ``name`` over the
    run, read between the eval points by the trapezoid rule (None with fewer than two eval points).

    hw4's measure of sample efficiency. Both algorithms draw the same rollouts per step, so a curve
    over steps is a curve over samples, and the run whose curve lies higher over the whole budget
    learned more from the same samples. Unlike the final eval it does not vanish once both runs
    reach the task's ceiling, and unlike the eval at one early step it needs no step chosen by
    looking at where the curves level off."""
    x, y = _series(records, name)
    if len(x) < 2:
        return None
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def reward_rise(curve: Sequence[float], top: float = 1.3, window: int = 3) -> dict:
    """Where and how fast a reward curve rises from its start (mean of the first ``window`` steps) to
    ``top``, on its ``window``-step trailing mean: ``mid`` (the first step at least halfway) and
    ``width`` (steps from 20% to 80% of the way); NaN where the curve never gets there."""
    y = np.asarray(curve, dtype=float)
    if len(y) < window:
        return {"mid": float("nan"), "width": float("nan")}
    sm = np.convolve(y, np.ones(window) / window, mode="valid")  # sm[i]: steps i+1..i+window
    start = float(y[:window].mean())

    def first(frac):
        hit = np.flatnonzero(sm >= start + frac * (top - start) - 1e-12)
        return float(hit[0] + window) if hit.size else float("nan")  # the last step of that window
    return {"mid": first(0.5), "width": first(0.8) - first(0.2)}


def seeds_text(values, digits: int = 3, seed_digits: int = 2) -> str:
    """'mean ± sample standard deviation [each seed]' of one number over seeds
    (:func:`llmrl.utils.mean_sd`)."""
    m, sd = mean_sd(values)
    return f"{m:.{digits}f} ± {sd:.{digits}f} [{', '.join(f'{float(x):.{seed_digits}f}' for x in values)}]"


def _mean_over_seeds(seed_series):
    """(steps every seed has, mean over seeds at those steps) of per-seed (x, y) series."""
    common = sorted(set.intersection(*(set(x.tolist()) for x, _ in seed_series)))
    ys = np.array([[dict(zip(x.tolist(), y))[s] for s in common] for x, y in seed_series])
    return np.array(common), ys.mean(0)


def plot_runs(runs: dict[str, list], path=None, panels=PANELS):
    """One panel per metric, one colour per run. ``runs``: label -> list of step records (one seed),
    or label -> list of such lists (one per seed): then each seed is a thin line and the mean over
    the seeds a thick one."""
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("runs must hold at least one run")
    seeded = {label: (recs if recs and isinstance(recs[0], list) else [recs]) for label, recs in runs.items()}
    if any(not seeds or not all(seeds) for seeds in seeded.values()):
        raise ValueError("every run (and every seed of a run) must hold at least one record")
    ncol = 3
    nrow = -(-len(panels) // ncol)
    fig, axs = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.0 * nrow), squeeze=False)
    for ax, (name, title) in zip(axs.flat, panels):
        for i, (label, seeds) in enumerate(seeded.items()):
            series = [_series(recs, name) for recs in seeds]
            series = [(x, smooth(y) if name == "reward_mean" else y) for x, y in series if len(x)]
            if not series:
                continue
            color = f"C{i}"
            marker = "o" if name.startswith("eval") else None
            if len(seeds) == 1:
                if name == "reward_mean":
                    ax.plot(*_series(seeds[0], name), color=color, alpha=0.25, lw=0.8)
                ax.plot(*series[0], color=color, marker=marker, ms=3, lw=2 if name == "reward_mean" else 1.5,
                        label=label)
                continue
            for x, y in series:
                ax.plot(x, y, color=color, alpha=0.3, lw=0.8)
            ax.plot(*_mean_over_seeds(series), color=color, marker=marker, ms=3, lw=2,
                    label=f"{label}, mean of {len(series)} seeds (thin: each seed)")
        if name == "reward_mean" and any(len(s) > 1 for s in seeded.values()):
            title = "rollout reward, 5-step mean (thick: mean of seeds)"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axs.flat)[len(panels):]:
        ax.axis("off")
    shared_legend(fig, list(axs.flat))  # under the panels: inside one it covers a curve
    save(fig, path, tight=False)
    return fig


def format_generations(generations: list[dict], steps=None, max_chars: int = 40) -> str:
    """A text table of logged generations (prompt, completion, reward, advantage), by step."""
    if steps is not None:
        generations = [g for g in generations if g["step"] in set(steps)]
    lines = []
    current = None
    for g in generations:
        if g["step"] != current:
            current = g["step"]
            lines.append(f"step {current}: {g['prompt']!r} (answer {g['answer']})")
            lines.append(f"  {'reward':>6} {'advantage':>9}  completion")
        comp = g["completion"] if len(g["completion"]) <= max_chars else g["completion"][:max_chars - 3] + "..."
        lines.append(f"  {g['reward']:6.2f} {g['advantage']:+9.2f}  {comp!r}")
    return "\n".join(lines)
