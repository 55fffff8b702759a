"""Plots with seeds shown: the mean over seeds as a line, the spread (min to max) as a band, and the
single seeds as thin lines or dots. Inputs are the ``{arm: [result per seed]}`` dicts of
:mod:`llmrl.experiments.runner` (lab21's projects, lab19's stored runs, hw4's ablation).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np


def smooth(y: Sequence[float], window: int, full: bool = False) -> np.ndarray:
    """Trailing moving average over ``window`` points, NaN entries skipped (None reads as NaN); a
    window with no number is NaN. The first points average what there is so far, or with
    ``full=True`` are NaN until the window is full. Window 1 returns y."""
    y = np.asarray([np.nan if v is None else v for v in y], dtype=float)
    if window <= 1 or len(y) == 0:
        return y
    ok = ~np.isnan(y)
    sums = np.concatenate([[0.0], np.cumsum(np.where(ok, y, 0.0))])
    counts = np.concatenate([[0], np.cumsum(ok)])
    i = np.arange(len(y))
    lo = np.maximum(0, i - window + 1)
    n = counts[i + 1] - counts[lo]
    out = np.where(n > 0, (sums[i + 1] - sums[lo]) / np.maximum(n, 1), np.nan)
    if full:
        out[:window - 1] = np.nan
    return out


def seed_band(ax, x, ys: Sequence[Sequence[float]], label: str, color=None, show_seeds: bool = True,
              ls: str = "-"):
    """Plot the mean of ``ys`` (one row per seed) with a min-max band and, with ``show_seeds``,
    every seed as a thin line (all in the line style ``ls``); returns the mean's line."""
    ys = np.asarray(ys, dtype=float)
    n = ys.shape[0]
    with warnings.catch_warnings():  # a step no seed has a value for yet (a smoothing window filling) stays a gap
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, low, high = np.nanmean(ys, axis=0), np.nanmin(ys, 0), np.nanmax(ys, 0)
    line, = ax.plot(x, mean, color=color, lw=2, ls=ls, label=f"{label} (n={n})" if n > 1 else label)
    if n > 1:
        ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, lw=0)
        if show_seeds:
            for row in ys:
                ax.plot(x, row, color=line.get_color(), lw=0.6, alpha=0.5, ls=ls)
    return line


def _series(results, metric, where, window):
    """x and the per-seed rows of ``metric`` for one arm (trimmed to the shortest seed)."""
    rows, x = [], None
    for r in results:
        block = r[where]
        if metric not in block:
            continue
        y = smooth(block[metric], window if where == "curve" else 1)
        xs = np.asarray(block["step"])
        if x is None or len(xs) < len(x):
            x = xs
        rows.append(y)
    if not rows:
        return None, None
    m = len(x)
    return x, [row[:m] for row in rows]


def plot_metric(results: dict, metric: str, where: str = "evals", ax=None, window: int = 10,
                title: str | None = None, ylabel: str | None = None, skip: Sequence[str] = ()):
    """One line per arm of ``metric`` against step (``where``: 'evals' or per-step 'curve').

    Arm i of ``results`` is always drawn in colour C<i>, so that panels of one figure agree; ``skip``
    leaves arms out of this panel without shifting the others' colours.
    """
    ax = ax or plt.gca()
    unknown = [a for a in skip if a not in results]
    if unknown:
        raise ValueError(f"skip names arms that are not in results: {unknown} (arms: {list(results)})")
    for i, (arm, runs) in enumerate(results.items()):
        if arm in skip:
            continue
        x, rows = _series(runs, metric, where, window)
        if x is not None:
            seed_band(ax, x, rows, arm, color=f"C{i % 10}")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel or metric)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_final(results: dict, metric: str, ax=None, expected: dict | None = None, where: str = "evals",
               start: bool = True, title: str | None = None):
    """Bars: final ``metric`` per arm (mean over seeds, each seed a dot, +- the eval's standard error
    when a ``<metric>_se`` series exists); the published value (``expected``) as a black tick, labelled
    "published" (what students read names no source document); the
    start as a dashed line."""
    ax = ax or plt.gca()
    arms = list(results)
    labelled = False
    for i, arm in enumerate(arms):
        vals = [r[where][metric][-1] for r in results[arm] if metric in r[where]]
        vals = [v for v in vals if v is not None]
        if not vals:
            continue
        se = [r[where].get(f"{metric}_se", [None])[-1] for r in results[arm]]
        se = [s for s in se if s is not None]
        ax.bar(i, np.mean(vals), color=f"C{i}", alpha=0.6, yerr=np.mean(se) if se else None, capsize=4)
        ax.scatter(np.full(len(vals), i) + np.linspace(-0.15, 0.15, len(vals)), vals, color="k", s=12, zorder=3)
        e = (expected or {}).get(arm, {}).get(metric)
        if isinstance(e, (int, float)):
            ax.plot([i - 0.35, i + 0.35], [e, e], color="k", lw=2, label=None if labelled else "published")
            labelled = True
    if start:
        s = [r[where][metric][0] for runs in results.values() for r in runs if metric in r[where]]
        s = [v for v in s if v is not None]
        if s:
            ax.axhline(np.mean(s), color="gray", ls="--", lw=1, label="start")
    ax.set_xticks(range(len(arms)), arms, rotation=15)
    ax.set_ylabel(metric)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars: inside, it covers one
    ax.grid(alpha=0.3, axis="y")
    return ax


def plot_pass_at_k(results: dict, which: str = "in_dist", ax=None, title: str | None = None):
    """pass@k against k (log axis), before and after training, mean and spread over seeds."""
    ax = ax or plt.gca()
    for arm, runs in results.items():
        ks = np.asarray(runs[0]["extra"]["ks"])
        if arm == list(results)[0]:
            seed_band(ax, ks, [r["extra"]["before"][which] for r in runs], "before RL", color="gray")
        seed_band(ax, ks, [r["extra"]["after"][which] for r in runs], f"after ({arm})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title or which)
    ax.legend(fontsize=8)
    return ax


def plot_usage(runs: Sequence[dict], buckets: Sequence[str], ax=None, window: int = 10, title: str | None = None,
               legend: bool = True):
    """Stacked share of samples per bucket against step (mean over seeds). The stack fills the panel, so
    its legend (``legend``) goes outside it, on the right; a figure of several such panels passes
    ``legend=False`` and draws one legend for all."""
    ax = ax or plt.gca()
    x = np.asarray(runs[0]["curve"]["step"])
    ys = [np.nanmean([smooth(r["curve"][f"usage_{b}"], window)[:len(x)] for r in runs], 0) for b in buckets]
    ax.stackplot(x, ys, labels=buckets, alpha=0.8)
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_ylabel("share of samples")
    ax.set_title(title or f"bucket usage (n={len(runs)} seeds)")
    if legend:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def shared_legend(fig, axes, fontsize: int = 9) -> None:
    """One legend for panels that draw the same arms in the same colours: the panels' own legends go
    (inside a panel a legend covers whatever runs through its corner) and one goes under the panels,
    with every label any panel has, once. Then lays the figure out with room for it."""
    seen = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=min(len(seen), 6), fontsize=fontsize,
               frameon=False)
    rows = -(-len(seen) // 6)
    fig.tight_layout(rect=(0, 0.06 * rows + 0.02, 1, 1))


def figure_png(fig) -> bytes:
    """PNG bytes of a matplotlib figure, for an ipywidgets.Image; the figure is closed."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def save(fig, path: str | Path | None, tight: bool = True) -> Path | None:
    """Save ``fig`` as a PNG at ``path`` (creating the folder); return the path written, or None.

    Nothing is written when ``path`` is None, or in grading mode (:func:`llmrl.utils.grading_mode`:
    nbgrader's autograde and validate runs, ``LLMRL_FAST=1``). Those runs shrink every experiment to
    a few steps, and their plots would replace the full runs' PNGs next to the notebook.
    """
    from ..utils import grading_mode

    if path is None or grading_mode():
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight" if tight else None)
    return path
