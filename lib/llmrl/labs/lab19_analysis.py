"""Lab 19's analysis: a run's curves and summaries (smoothing, the hack's and the entropy's numbers over
seeds) and Part 1's best-of-n figures and widget. Pure functions of results; the runs themselves
are in :mod:`llmrl.labs.lab19`, which re-exports every name here."""

from __future__ import annotations

import math

import numpy as np

from . import overopt
from ..experiments.plotting import figure_png, save
from ..utils import mean_sd

SERIES = ("sampled_accuracy", "reward_mean", "shaped_reward_mean", "completion_chars_mean",
          "kl_to_reference_k1_sum_nats", "entropy_token_mean_nats", "clip_high_of_positive_rare",
          "clip_high_of_positive_common", "late_clip_high_of_positive_rare", "late_clip_high_of_positive_common")


def _rolling(x: np.ndarray, w: int) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if len(x) < w:
        return np.array([np.nanmean(x)])
    c = np.convolve(np.nan_to_num(x), np.ones(w) / w, mode="valid")
    return c


def smooth(y, window: int = 10) -> np.ndarray:
    """Trailing mean over ``window`` steps, same length as ``y`` (NaN until the window is full; NaN
    entries are skipped inside a window)."""
    from ..experiments.plotting import smooth as trailing

    return trailing(y, window, full=True)


def as_series(history, names=SERIES) -> dict[str, list]:
    """{metric: list of per-step values} (a History, or such a dict already) for plotting and storage."""
    if isinstance(history, dict):
        return history
    return {k: [None if math.isnan(v) else round(float(v), 5) for v in history.series(k)]
            for k in names if k in history.names}


def _arr(series: dict, name: str) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in series[name]], dtype=float)


def seed_runs(run) -> list[dict]:
    """A run's seeds as a list of series: a series dict or a History (one seed), or a list of them
    / a :class:`llmrl.rl.train.SeedHistories` (several seeds)."""
    from ..rl.run import History

    if isinstance(run, (dict, History)):
        return [as_series(run)]
    runs = [as_series(r) for r in run]
    if not runs:
        raise ValueError("a run needs at least one seed")
    return runs


def seed_summary(summary, run, **kw) -> dict[str, tuple[float, float]]:
    """{key: (mean, standard deviation over seeds)} of ``summary(series)`` (:func:`hack_summary`,
    :func:`entropy_summary`) over the seeds of ``run``."""
    parts = [summary(r, **kw) for r in seed_runs(run)]
    return {k: mean_sd([p[k] for p in parts]) for k in parts[0]}


def _draw(ax, run, name: str, window: int, label: str, color, **line):
    """One run's smoothed ``name`` against step: a line for one seed; for several the mean over
    seeds, a band from the lowest to the highest seed and every seed as a thin line."""
    from ..experiments.plotting import seed_band

    runs = [r for r in seed_runs(run) if name in r]
    if not runs:
        return
    n = min(len(r[name]) for r in runs)
    ys = [smooth(_arr(r, name)[:n], window) for r in runs]
    x = np.arange(1, n + 1)
    if len(ys) == 1:
        ax.plot(x, ys[0], color=color, label=label, **line)
    else:
        seed_band(ax, x, ys, label, color=color, ls=line.get("ls", "-"))


#: Steps (first, last; 1-based, inclusive) of the window "around step 50" where the published run's
#: accuracy stood at its rise (about 0.62): a fixed window, so that a run is measured where the
#: published one was, not at the best of its own noisy windows.
MID_WINDOW = (41, 60)


def hack_summary(run, window: int = 10) -> dict[str, float]:
    """A hacking run's numbers (means over ``window`` steps unless said otherwise):

    ``accuracy_start`` (the first ``window`` steps), ``accuracy_mid`` and ``proxy_mid`` (steps
    :data:`MID_WINDOW`, around step 50), ``accuracy_peak`` and ``peak_step`` (the best ``window``-step
    mean and the last step of its window: a description of one run's curve, biased upwards as the
    best of many noisy windows, so no claim rests on its value), and the end: ``final_accuracy``,
    ``final_length``, ``final_kl`` and ``final_proxy`` over the last ``2 * window`` steps."""
    s = as_series(run)
    acc = _arr(s, "sampled_accuracy")
    proxy = _arr(s, "reward_mean")
    roll = _rolling(acc, window)
    i = int(np.argmax(roll))
    lo, hi = MID_WINDOW
    mid = slice(lo - 1, hi) if len(acc) >= hi else slice(max(0, len(acc) - (hi - lo + 1)), len(acc))
    return {
        "accuracy_start": float(np.mean(acc[:window])),
        "accuracy_mid": float(np.mean(acc[mid])),
        "proxy_mid": float(np.mean(proxy[mid])),
        "accuracy_peak": float(roll[i]),
        "peak_step": i + window,  # last step of the best window
        "final_accuracy": float(np.mean(acc[-2 * window:])),
        "final_length": float(np.mean(_arr(s, "completion_chars_mean")[-2 * window:])),
        "final_kl": float(np.mean(_arr(s, "kl_to_reference_k1_sum_nats")[-2 * window:])),
        "final_proxy": float(np.mean(proxy[-2 * window:])),
    }


#: A no-KL hacking run has *completed* the hack when its last 20 steps write the 4-character maximum
#: (mean length at least this) at an accuracy of at most ``HACK_DONE["accuracy"]`` (published: length
#: 4, accuracy 0).
HACK_DONE = {"length": 3.9, "accuracy": 0.05}


def hack_completed(summary: dict) -> bool:
    """Whether a :func:`hack_summary` shows the complete hack (:data:`HACK_DONE`)."""
    return summary["final_length"] >= HACK_DONE["length"] and summary["final_accuracy"] <= HACK_DONE["accuracy"]

def entropy_summary(run, window: int = 10) -> dict[str, float]:
    """Entropy at the start and end, final accuracy and the upper clip's share of rare/common tokens."""
    s = as_series(run)
    ent = _arr(s, "entropy_token_mean_nats")
    out = {"entropy_start": float(np.mean(ent[:window])), "entropy_end": float(np.mean(ent[-window:])),
           "accuracy_start": float(np.mean(_arr(s, "sampled_accuracy")[:window])),
           "final_accuracy": float(np.mean(_arr(s, "sampled_accuracy")[-2 * window:]))}
    half = len(ent) // 2
    for k in ("clip_high_of_positive_rare", "clip_high_of_positive_common",
              "late_clip_high_of_positive_rare", "late_clip_high_of_positive_common"):
        if k in s:
            out[k] = float(np.nanmean(_arr(s, k)[half:]))  # second half of the run
    return out


# ------------------------------------------------------------------------------- plots

def bon_figure(b: float = 1.0, sigma: float = 1.0, pool: dict | None = None, path=None):
    """Exact best-of-n proxy and gold gains against sqrt(KL) for one (b, sigma), with the Gao fit;
    ``pool`` (a :func:`llmrl.labs.overopt.pool_curves` dict) is overlaid as dots. Returns the figure."""
    import matplotlib.pyplot as plt

    e = overopt.exact_best_of_n(b=b, sigma=sigma)
    fit = overopt.fit_gao_bon(e["d"], e["gold_gain"])
    fig, ax = plt.subplots(figsize=(6.8, 4.0))
    pax = ax.twinx()
    overopt.plot_best_of_n(ax, e, label="(exact)", fit=fit, color="C0", proxy_ax=pax)
    if pool is not None:
        ax.plot(pool["d"], pool["gold_gain"], "o", ms=3, color="C3", label="gold (finite pool)")
    pk = overopt.peak(e)
    where = "never turns down" if pk["n"] == e["n"][-1] else f"peaks at best-of-{pk['n']} ({pk['gold_gain']:+.2f})"
    ax.set_title(rf"$b$ = {b:g}, $\sigma$ = {sigma:g}: gold {where}", fontsize=10)
    _align(ax, pax, e)
    save(fig, path)
    return fig


def _align(ax, pax, curves, gold_top: float = 2.0):
    """Shared zero for the gold (left) and proxy (right) axes, and one legend."""
    lo = min(-1.0, float(np.nanmin(curves["gold_gain"])) - 0.2)
    hi = max(gold_top, float(np.nanmax(curves["gold_gain"])) + 0.3)
    ax.set_ylim(lo, hi)
    ptop = max(8.0, float(np.nanmax(curves["proxy_gain"])) * 1.05)
    pax.set_ylim(lo / hi * ptop, ptop)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = pax.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")


#: The titles of Part 1's two panels (the notebook's keys for them).
PANEL_BIASED = r"length-biased proxy: $b$ = 1, $\sigma$ = 1"
PANEL_NOISY = r"noise-only proxy: $b$ = 0, $\sigma$ = 1"


def overopt_figure(panels: dict, path=None, seeds: dict | None = None):
    """One panel per {title: (pool curves, (alpha, beta) fit, exact curves or None)}; ``seeds``
    ({title: [pool curves of other pool seeds]}) adds each as a thin gold line. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6.8 * len(panels), 4.2), squeeze=False)
    for i, (ax, (title, (curves, fit, exact))) in enumerate(zip(axes[0], panels.items())):
        pax = ax.twinx()
        overopt.plot_best_of_n(ax, curves, label="(pool)", fit=fit, color=f"C{2 * i}", style="o-", proxy_ax=pax)
        others = (seeds or {}).get(title, [])
        for j, other in enumerate(others):
            ax.plot(other["d"], other["gold_gain"], "-", color=f"C{2 * i}", lw=0.6, alpha=0.5,
                    label=f"gold, {len(others)} other pool seeds" if j == 0 else None)
        if exact is not None:
            ax.plot(exact["d"], exact["gold_gain"], "k--", lw=1, label="gold (exact, infinite pool)")
        top = ax.secondary_xaxis("top")
        top.set_ticks(np.sqrt(overopt.bon_kl(np.array([3, 10, 100, 3000]))), labels=["n=3", "10", "100", "3000"])
        ax.set_title(title, fontsize=10)
        _align(ax, pax, curves, gold_top=3.0)
    fig.tight_layout()
    save(fig, path)
    return fig


def bon_widget(b: float = 1.0, sigma: float = 1.0):
    """Sliders for b and sigma redrawing the exact best-of-n curves (a redraw takes ~0.3 s).

    An image widget (not an Output widget), so the notebook also executes headless. The box has
    attributes ``b``, ``sigma``, ``image`` and ``update()``.
    """
    import ipywidgets as w

    bs = w.FloatSlider(value=b, min=0.0, max=2.0, step=0.1, description="b (length bias)",
                       continuous_update=False, style={"description_width": "initial"})
    ss = w.FloatSlider(value=sigma, min=0.0, max=3.0, step=0.1, description="sigma (noise)",
                       continuous_update=False, style={"description_width": "initial"})
    image = w.Image(format="png")

    def update(_=None):
        image.value = figure_png(bon_figure(bs.value, ss.value))

    bs.observe(update, names="value")
    ss.observe(update, names="value")
    update()
    box = w.VBox([w.HBox([bs, ss]), image])
    box.b, box.sigma, box.image, box.update = bs, ss, image, update
    return box
