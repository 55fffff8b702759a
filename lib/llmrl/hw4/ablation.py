"""hw4's GRPO hyperparameter study on format_copy, as one sweep that stops where runs degrade.

Four axes, each an ordered list of values around the default run (``AXES``): ``ppo_epochs``; the
minibatch layout ``(minibatch_size, grad_accum_steps)``, i.e. how many optimizer steps each epoch
takes; ``kl_coef``; ``clip_eps``. From the default value the sweep walks outwards in both
directions, one run per value, and stops walking a direction at the first run that degrades:
its final eval exact match falls more than ``tolerance`` below the default run's, or its
final rollout reward (mean of the last 5 steps) more than ``1.3 * tolerance`` below. Runs already in
the results file are not rerun, so an interrupted sweep continues where it stopped.

``sweep(...)`` returns and writes one summary line per run; ``plot_sweep(rows)`` draws one panel
per axis with the degraded runs marked.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..plotting import save
from .impl import Impl
from .trainer import HW4Config, default_config, read_jsonl, train

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


def _summary(result, axis, value) -> dict:
    recs = result.records
    rewards = [r["rollout_reward"] for r in recs if "rollout_reward" in r]
    tail = rewards[-5:]
    jump = next((r["step"] for r in recs if r.get("rollout_reward", 0) >= 1.0), None)
    return {"axis": axis, "value": list(value) if isinstance(value, tuple) else value, "label": _label(axis, value),
            "final_eval_exact_match": result.final("eval_exact_match"),
            "final_reward": sum(tail) / len(tail) if tail else None,
            "max_kl": max((r.get("kl_to_reference_nats", 0) for r in recs), default=0.0),
            "mean_clip_fraction": sum(r.get("clip_fraction", 0) for r in recs[1:]) / max(1, len(recs) - 1),
            "first_step_reward_ge_1": jump, "key": result.config.key()}


def sweep(impl: Impl, out_dir="artifacts/hw4/ablation", base: HW4Config | None = None,
          axes: dict[str, list] | None = None, tolerance: float = 0.15, progress: bool = True,
          callback=None, fresh: bool = False, backend_factory=None) -> list[dict]:
    """Run the study; returns the summaries (also appended to ``out_dir/results.jsonl``).

    ``fresh``: forget earlier results in ``out_dir`` and rerun everything. ``backend_factory()``:
    a fresh policy for each run (default: built from the config)."""
    base = base or default_config("format_copy", "grpo")
    axes = AXES if axes is None else axes
    for axis in axes:
        if axis not in DEFAULT_VALUES:
            raise ValueError(f"unknown axis {axis!r}; known: {sorted(DEFAULT_VALUES)}")
    for k, v in DEFAULT_VALUES.items():  # the reference point is the default of every axis at once
        base = _apply(base, k, v)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    if fresh and results_path.exists():
        results_path.unlink()
    done = {r["key"]: r for r in read_jsonl(results_path)}
    rows: list[dict] = []

    def run(axis, value):
        cfg = _apply(base, axis, value)
        if cfg.key() in done:
            row = dict(done[cfg.key()], axis=axis, value=list(value) if isinstance(value, tuple) else value,
                       label=_label(axis, value))
        else:
            res = train(cfg, impl, run_dir=out / f"{axis}-{_label(axis, value)}", resume=not fresh,
                        progress=progress, backend=backend_factory() if backend_factory else None)
            row = _summary(res, axis, value)
            done[cfg.key()] = row
            with open(results_path, "a") as f:
                f.write(json.dumps(row) + "\n")
        if callback is not None:
            callback(row)
        return row

    for axis, values in axes.items():
        if DEFAULT_VALUES[axis] not in values:
            raise ValueError(f"axes[{axis!r}] must contain the default value {DEFAULT_VALUES[axis]!r}")
        centre = values.index(DEFAULT_VALUES[axis])
        ref = run(axis, values[centre])
        ref["is_default"] = True
        rows.append(ref)
        floor_em = (ref["final_eval_exact_match"] or 0.0) - tolerance
        floor_reward = (ref["final_reward"] or 0.0) - 1.3 * tolerance
        for direction in (1, -1):
            i = centre + direction
            while 0 <= i < len(values):
                row = run(axis, values[i])
                row["degraded"] = ((row["final_eval_exact_match"] or 0.0) < floor_em
                                   or (row["final_reward"] or 0.0) < floor_reward)
                rows.append(row)
                if row["degraded"]:
                    break
                i += direction
    for r in rows:
        r.setdefault("degraded", False)
        r.setdefault("is_default", False)
    return rows


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
        ax.plot(xs, [p["final_eval_exact_match"] for p in pts], "o-", label="eval exact match")
        ax.plot(xs, [p["final_reward"] / 1.3 for p in pts], "s--", alpha=0.7, label="rollout reward / 1.3")
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
    axs[0][0].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    save(fig, path, tight=False)
    return fig
