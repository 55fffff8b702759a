"""hw4's command line. The four required runs:

    python -m llmrl.hw4 train --task format_copy --algo grpo
    python -m llmrl.hw4 train --task format_copy --algo reinforce
    python -m llmrl.hw4 train --task math_toy --algo grpo
    python -m llmrl.hw4 train --task math_toy --algo reinforce

``--impl PATH.ipynb`` runs them on your own functions (default: the course's reference). Rerunning a
command continues an interrupted run from its last checkpoint; ``--fresh`` starts over. On several
processes: ``torchrun --nproc_per_node 2 -m llmrl.hw4 train ...`` or ``accelerate launch
--config_file configs/accelerate/ddp.yaml --num_processes 2 -m llmrl.hw4 train ...`` (docs/hw4_gpu.md).
``python -m llmrl.hw4 sweep`` runs the ablation study; ``python -m llmrl.hw4 pretrain`` builds the
character model's cache. ``python -m llmrl.hw4 train-trl --task format_copy --algo grpo`` runs the same
configuration with TRL's GRPOTrainer (docs/hw4_trl.md; ``--dry-run`` prints the mapped settings only).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path

from .settings import ALGOS, HW4Config, default_config


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
    s.add_argument("--seeds", default="0", help="comma-separated seeds; each run once per seed, judged on the mean")
    s.add_argument("--no-progress", action="store_true")

    sub.add_parser("pretrain", help="build (or check) the cached character model")

    # train-trl trains with TRL's GRPOTrainer; export-trl, its first name, still works
    e = sub.add_parser("train-trl", aliases=["export-trl"], help="the same run with TRL's GRPOTrainer (a Hugging Face model; docs/hw4_trl.md)")
    e.add_argument("--task", required=True, help="format_copy | math_toy | math_hard | a registered task")
    e.add_argument("--algo", required=True, choices=ALGOS)
    e.add_argument("--model", help="hub name, local directory, smollm2-135m-instruct (default) or tiny-random")
    e.add_argument("--steps", type=int, help="number of rollout steps (default: the run's own)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--run-dir", help="logs and TRL checkpoints (default artifacts/hw4/trl/TASK-ALGO-seedS)")
    e.add_argument("--fresh", action="store_true", help="start over instead of resuming a run found in --run-dir")
    e.add_argument("--backend-arg", action="append", metavar="KEY=VALUE", help="extra HFBackend keyword (repeatable)")
    e.add_argument("--task-arg", action="append", metavar="KEY=VALUE", help="extra task keyword (repeatable)")
    e.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override any HW4Config field (repeatable)")
    e.add_argument("--trl-arg", action="append", metavar="FIELD=VALUE",
                   help="override any trl.GRPOConfig field after the mapping, e.g. --trl-arg loss_type=dapo (repeatable)")
    e.add_argument("--trl-temperature", action="store_true",
                   help="give TRL the sampling temperature (it then scores log-probs at it too; default: score at 1)")
    e.add_argument("--dry-run", action="store_true", help="print the mapped GRPOConfig and write nothing")
    e.add_argument("--wandb", action="store_true", help="also log to Weights & Biases (needs wandb installed)")
    e.add_argument("--wandb-mode", default="offline", choices=("offline", "online", "disabled"))
    e.add_argument("--progress", action="store_true", help="TRL's progress bar and log lines")
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
    if getattr(args, "backend", None):
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
    if args.command in ("train-trl", "export-trl"):
        return train_trl(args)
    from .impl import load_impl
    impl = load_impl(args.impl)
    if args.command == "train":
        cfg = config_from_args(args)
        run_dir = Path(args.run_dir or f"artifacts/hw4/runs/{cfg.task}-{cfg.algo}-seed{cfg.seed}")
        from ..rl import data_parallel as distributed
        from .run_manager import data_parallel_config, train
        try:
            group = distributed.process_group()  # torchrun / accelerate launch / mpirun: the processes of one run
        except RuntimeError as e:
            raise SystemExit(f"train: {e}") from None
        try:
            try:
                cfg = data_parallel_config(cfg, group)
            except ValueError as e:
                raise SystemExit(f"train: {e}") from None
            if group.active and group.is_main:
                print(f"{group.world_size} processes ({group.device.type}): shares={cfg.shares}, each process "
                      f"samples {cfg.n_prompts // group.world_size} of the {cfg.n_prompts} prompts of every step",
                      flush=True)
            t0, c0 = time.perf_counter(), time.process_time()
            res = train(cfg, impl, run_dir=run_dir, resume=not args.fresh, progress=not args.no_progress, group=group)
            seconds = time.perf_counter() - t0
            cpu = group.all_gather_objects(time.process_time() - c0)  # every process's CPU seconds of training
        except NotImplementedError:
            distributed.shutdown(wait=False)
            raise SystemExit(f"{impl.source}: a required function still raises NotImplementedError; "
                             f"complete the notebook's tasks first") from None
        except BaseException:
            distributed.shutdown(wait=False)
            raise
        distributed.shutdown()
        first = next(r for r in res.records if "eval_exact_match" in r)
        if group.is_main:
            print(f"{cfg.task} {cfg.algo}: {cfg.steps} steps in {seconds:.2f} s "
                  f"(CPU {', '.join(f'{c:.2f}' for c in cpu)} s{' per process' if len(cpu) > 1 else ''}); eval exact match "
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
        try:
            seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        except ValueError:
            raise SystemExit(f"--seeds: comma-separated integers, got {args.seeds!r}") from None
        rows = sweep(impl, args.out, base, {a: AXES[a] for a in names}, args.tolerance, progress=not args.no_progress,
                     workers=args.workers, seeds=seeds,
                     callback=lambda r: print(f"  {r['axis']:>10} = {r['label']:>6}: eval exact match "
                                              f"{r['final_eval_exact_match']:.3f}, reward {r['final_reward']:.3f}",
                                              flush=True))
        fig = plot_sweep(rows, Path(args.out) / "ablation.png")
        print(f"{len(rows)} runs; degraded: {[(r['axis'], r['label']) for r in rows if r['degraded']]}; "
              f"plot {Path(args.out) / 'ablation.png'}")
        del fig
        return 0
    return 1


def train_trl(args) -> int:
    """``train-trl``: the run's configuration, mapped onto trl.GRPOConfig and trained by TRL."""
    from dataclasses import replace

    cfg = config_from_args(args)
    cfg = replace(cfg, backend="hf")
    trl_overrides = _pairs(args.trl_arg, "--trl-arg")
    try:
        from . import trl_runner
    except ImportError as e:
        raise SystemExit(f"train-trl needs the trl extra (pip install -e '.[hf,trl]'): {e}") from None
    run_dir = Path(args.run_dir or f"artifacts/hw4/trl/{cfg.task}-{cfg.algo}-seed{cfg.seed}")
    try:
        kwargs = trl_runner.grpo_config_kwargs(cfg, run_dir / "trl", trl_temperature=args.trl_temperature,
                                               **trl_overrides)
    except ValueError as e:
        raise SystemExit(f"train-trl: {e}") from None
    if args.dry_run:
        print(trl_runner.describe_mapping(cfg, kwargs))
        return 0
    try:
        import trl  # noqa: F401
        from trl import GRPOConfig
        unknown = sorted(set(trl_overrides) - set(GRPOConfig.__dataclass_fields__))
    except ImportError as e:
        raise SystemExit(f"train-trl needs the trl extra (pip install -e '.[hf,trl]'): {e}") from None
    if unknown:
        raise SystemExit(f"--trl-arg: unknown trl.GRPOConfig field(s) {unknown}")
    t0 = time.perf_counter()
    try:
        run = trl_runner.train_trl(cfg, run_dir=run_dir, resume=not args.fresh, progress=args.progress,
                                   trl_temperature=args.trl_temperature, trl_overrides=trl_overrides)
    except ValueError as e:
        raise SystemExit(f"train-trl: {e}") from None
    first = next((r for r in run.records if "eval_exact_match" in r), {})
    print(f"{cfg.task} {cfg.algo} on TRL {trl.__version__}: {cfg.steps} rollout steps "
          f"({trl_runner.optimizer_steps_per_rollout(cfg)} optimizer steps each) in {time.perf_counter() - t0:.1f} s; "
          f"eval exact match {first.get('eval_exact_match', float('nan')):.3f} -> "
          f"{run.final('eval_exact_match') or 0.0:.3f}; final rollout reward {run.final('rollout_reward') or 0.0:.3f}; "
          f"logs in {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
