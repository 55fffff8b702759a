"""Lab 21 (the frontier): widgets behind the projects notebook.

:func:`rubric_weight_widget` is Project 2's slider. For a rubric weight ``w`` and the student's
current accuracy it shows the expected reward per answer of "pad every answer to 3+ digits" against
"answer honestly" (:func:`llmrl.experiments.honest_vs_pad`), and next to it the trained runs
(gold accuracy and the share of padded small sums) for the stylish weight closest to ``w``.
:func:`rubric_weight_figure` draws the same picture without a browser (the tests call it).
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np

from .. import experiments, plotting
from ..plotting import figure_png
from ..utils import check_float

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
    ev = [experiments.honest_vs_pad(x, accuracy_small, share_large=share_large) for x in ws]
    ax.plot(ws, [e["honest"] for e in ev], label="answer honestly")
    ax.plot(ws, [e["pad"] for e in ev], label="pad everything to 3+ digits")
    now = experiments.honest_vs_pad(w, accuracy_small, share_large=share_large)
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
