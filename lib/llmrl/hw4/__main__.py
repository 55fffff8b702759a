"""hw4's command line. The four required runs:

    python -m llmrl.hw4 train --task format_copy --algo grpo
    python -m llmrl.hw4 train --task format_copy --algo reinforce
    python -m llmrl.hw4 train --task math_toy --algo grpo
    python -m llmrl.hw4 train --task math_toy --algo reinforce

``--impl PATH.ipynb`` runs them on your own functions (default: the course's reference). Rerunning a
command continues an interrupted run from its last checkpoint; ``--fresh`` starts over.
``python -m llmrl.hw4 sweep`` runs the ablation study; ``python -m llmrl.hw4 pretrain`` builds the
character model's cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path

from .trainer import ALGOS, HW4Config, default_config


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _pairs(items, what) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"{what} expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = _value(v)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llmrl.hw4", description="hw4: GR-REINFORCE and GRPO on language models")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="one run (the four required runs are train --task T --algo A)")
    t.add_argument("--task", required=True, help="format_copy | math_toy | math_hard | a registered task")
    t.add_argument("--algo", required=True, choices=ALGOS)
    t.add_argument("--impl", default="reference",
                   help="'reference' (the course's solutions) or the path of your notebook (.ipynb or jupytext .py)")
    t.add_argument("--steps", type=int, help="number of RL steps (default: the run's own)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--run-dir", help="logs and checkpoints (default artifacts/hw4/runs/TASK-ALGO-seedS)")
    t.add_argument("--fresh", action="store_true", help="start over instead of resuming a run found in --run-dir")
    t.add_argument("--backend", choices=("char", "hf"), help="policy backend (default: char, hf for math_hard)")
    t.add_argument("--model", help="model name or path for the hf backend (passed as backend_kwargs['model'])")
    t.add_argument("--backend-arg", action="append", metavar="KEY=VALUE", help="extra backend keyword (repeatable)")
    t.add_argument("--task-arg", action="append", metavar="KEY=VALUE", help="extra task keyword (repeatable)")
    t.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="override any HW4Config field, e.g. --set kl_coef=0.1 (repeatable)")
    t.add_argument("--wandb", action="store_true", help="also log to Weights & Biases (needs wandb installed)")
    t.add_argument("--wandb-mode", default="offline", choices=("offline", "online", "disabled"))
    t.add_argument("--no-progress", action="store_true")

    s = sub.add_parser("sweep", help="the GRPO ablation on format_copy, pushing each axis until a run degrades")
    s.add_argument("--impl", default="reference")
    s.add_argument("--steps", type=int, default=30)
    s.add_argument("--axes", default="ppo_epochs,minibatch,kl_coef,clip_eps")
    s.add_argument("--tolerance", type=float, default=0.15, help="drop in final eval exact match that counts as degraded")
    s.add_argument("--out", default="artifacts/hw4/ablation")
    s.add_argument("--workers", type=int, default=1, help="parallel processes (the two directions of an axis side by side)")
    s.add_argument("--no-progress", action="store_true")

    sub.add_parser("pretrain", help="build (or check) the cached character model")
    return p


def config_from_args(args) -> HW4Config:
    known = {f.name for f in fields(HW4Config)}
    overrides = _pairs(args.set, "--set")
    bad = sorted(set(overrides) - known)
    if bad:
        raise SystemExit(f"--set: unknown config field(s) {bad}; known: {sorted(known)}")
    if args.steps is not None:
        overrides["steps"] = args.steps
    overrides["seed"] = args.seed
    if args.backend:
        overrides["backend"] = args.backend
    bkw = _pairs(args.backend_arg, "--backend-arg")
    if args.model:
        bkw["model"] = args.model
    if bkw:
        overrides["backend_kwargs"] = bkw
    tkw = _pairs(args.task_arg, "--task-arg")
    if tkw:
        overrides["task_kwargs"] = tkw
    if args.wandb:
        overrides.update(wandb=True, wandb_mode=args.wandb_mode)
    try:
        return default_config(args.task, args.algo, **overrides)
    except (TypeError, ValueError) as e:
        raise SystemExit(f"bad configuration: {e}") from None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "pretrain":
        from .charlm import load_base_model
        t0 = time.perf_counter()
        model = load_base_model(progress=True)
        print(f"character model ready: {model.num_parameters():,} parameters ({time.perf_counter() - t0:.1f} s)")
        return 0
    from .impl import load_impl
    impl = load_impl(args.impl)
    if args.command == "train":
        cfg = config_from_args(args)
        run_dir = Path(args.run_dir or f"artifacts/hw4/runs/{cfg.task}-{cfg.algo}-seed{cfg.seed}")
        from .trainer import train
        t0 = time.perf_counter()
        try:
            res = train(cfg, impl, run_dir=run_dir, resume=not args.fresh, progress=not args.no_progress)
        except NotImplementedError:
            raise SystemExit(f"{impl.source}: a required function still raises NotImplementedError; "
                             f"complete the notebook's tasks first") from None
        first = next(r for r in res.records if "eval_exact_match" in r)
        print(f"{cfg.task} {cfg.algo}: {cfg.steps} steps in {time.perf_counter() - t0:.1f} s; eval exact match "
              f"{first['eval_exact_match']:.3f} -> {res.final('eval_exact_match'):.3f}; final rollout reward "
              f"{res.final('reward_mean'):.3f}; logs in {run_dir}")
        return 0
    if args.command == "sweep":
        from .ablation import AXES, plot_sweep, sweep
        names = [a.strip() for a in args.axes.split(",") if a.strip()]
        bad = [a for a in names if a not in AXES]
        if bad:
            raise SystemExit(f"--axes: unknown {bad}; known: {sorted(AXES)}")
        base = default_config("format_copy", "grpo", steps=args.steps)
        rows = sweep(impl, args.out, base, {a: AXES[a] for a in names}, args.tolerance, progress=not args.no_progress,
                     workers=args.workers,
                     callback=lambda r: print(f"  {r['axis']:>10} = {r['label']:>6}: eval exact match "
                                              f"{r['final_eval_exact_match']:.3f}, reward {r['final_reward']:.3f}",
                                              flush=True))
        fig = plot_sweep(rows, Path(args.out) / "ablation.png")
        print(f"{len(rows)} runs; degraded: {[(r['axis'], r['label']) for r in rows if r['degraded']]}; "
              f"plot {Path(args.out) / 'ablation.png'}")
        del fig
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
