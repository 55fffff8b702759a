"""Plots and tables of hw4 runs, drawn from the records of ``metrics.jsonl`` / ``generations.jsonl``."""

from __future__ import annotations

import numpy as np

from ..plotting import save

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


def plot_runs(runs: dict[str, list[dict]], path=None, panels=PANELS):
    """One panel per metric, one line per run. ``runs``: label -> list of step records."""
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("runs must hold at least one run")
    ncol = 3
    nrow = -(-len(panels) // ncol)
    fig, axs = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.0 * nrow), squeeze=False)
    for ax, (name, title) in zip(axs.flat, panels):
        for i, (label, recs) in enumerate(runs.items()):
            x, y = _series(recs, name)
            if not len(x):
                continue
            color = f"C{i}"
            if name == "reward_mean":
                ax.plot(x, y, color=color, alpha=0.25, lw=0.8)
                ax.plot(x, smooth(y), color=color, lw=2, label=label)
            else:
                ax.plot(x, y, color=color, marker="o" if name.startswith("eval") else None, ms=3, label=label)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axs.flat)[len(panels):]:
        ax.axis("off")
    axs.flat[0].legend(fontsize=8)
    fig.tight_layout()
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
