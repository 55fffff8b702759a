"""The one training loop (:func:`train_loop`: a step, the evaluations on their schedule, ``on_step``)
and :func:`rl_train`, which builds a run on a TinyLM (or several seeds of one) for the labs."""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np
import torch

from ..backends.tinylm_backend import TinyLMBackend, as_backend
from .losses import BUILTIN_LOSSES
from ..tasks.rewards import exact_match
from ..tasks.task_protocol import AdditionTask
from ..utils import check_int, set_threads
from .config import RLConfig
from .run import CompletionScorer, History, Hooks, RLRun, SeedStream
from .step import PolicyOptimizer, minibatches, rl_step

def train_loop(run: RLRun, steps: int, *, eval_fn: Callable | None = None, eval_every: int = 0,
               evaluate_model=None, on_step: Callable | None = None, progress: bool = True,
               desc: str = "rl_train", history: History | None = None):
    """Step ``run`` until its step counter reaches ``steps``; the one RL loop of the library.

    ``eval_fn(evaluate_model) -> dict`` runs before the first step of a fresh run (a step-0 record),
    every ``eval_every`` steps and at the last step; its metrics are stored as ``eval_<name>``.
    ``on_step(record, batch)`` runs after each step (and gets the step-0 record with batch None);
    raise from it to stop. Returns ``history`` with one record appended per step.

    Seeds stepping together (``run.streams``, one or more): ``eval_fn`` and ``evaluate_model`` may
    be lists (one per seed), ``on_step(record, batch, seed_index)`` runs once per seed, and the
    result is a :class:`SeedHistories` (one History per seed; ``step_seconds`` is the time of the
    step of all seeds together)."""
    check_int("eval_every", eval_every, minimum=0)
    S, streams, multi = run.n_seeds, run.seed_streams, run.streams is not None
    if not multi:
        histories = [History() if history is None else history]
    else:
        histories = [History() for _ in range(S)] if history is None else list(history)
        if len(histories) != S:
            raise ValueError(f"history must hold one History per seed ({S}), got {len(histories)}")
    eval_fns = list(eval_fn) if isinstance(eval_fn, (list, tuple)) else [eval_fn] * S
    models = list(evaluate_model) if isinstance(evaluate_model, (list, tuple)) else [evaluate_model] * S
    if len(eval_fns) != S or len(models) != S:
        raise ValueError(f"eval_fn and evaluate_model must be one or one per seed ({S})")

    def evaluation(s: int) -> dict:
        return {(k if k.startswith("eval_") else f"eval_{k}"): v for k, v in eval_fns[s](models[s]).items()}

    def emit(s, record, batch):
        histories[s].append(record)
        if on_step is not None:
            on_step(record, batch, s) if multi else on_step(record, batch)

    if eval_every and run.step == 0:
        for s in range(S):
            if eval_fns[s] is not None:
                emit(s, {"step": 0, **evaluation(s)}, None)
    bar = None
    if progress and run.step < steps:
        from tqdm.auto import tqdm
        bar = tqdm(total=steps - run.step, desc=f"{desc} x {S} seeds" if multi else desc, leave=False)
    while run.step < steps:
        t0 = time.perf_counter()
        records, batches = rl_step(run)
        if not multi:
            records, batches = [records], [batches]
        due = eval_every and (run.step % eval_every == 0 or run.step == steps)
        for s in range(S):
            if due and eval_fns[s] is not None:
                records[s].update(evaluation(s))
            if streams[s].hooks.after_step is not None:
                streams[s].hooks.after_step(records[s], batches[s])
        seconds = time.perf_counter() - t0
        for s in range(S):
            records[s]["step_seconds"] = seconds
            emit(s, records[s], batches[s])
        if bar is not None:
            bar.update(1)
            bar.set_postfix(reward=f"{np.mean([r['reward_mean'] for r in records]):.2f}",
                            acc=f"{np.mean([r['sampled_accuracy'] for r in records]):.2f}")
    if bar is not None:
        bar.close()
    return SeedHistories(histories) if multi else histories[0]


class SeedHistories(list):
    """The result of a run of several seeds stepping together: one :class:`History` per seed.

    ``seeds[i]`` is the seed of ``self[i]``; ``policies[i]`` its trained model. ``series(name)`` ->
    [S, steps] array (nan where missing); ``final(name)`` -> each seed's last value."""

    seeds: tuple = ()
    policies = None

    def series(self, name: str) -> np.ndarray:
        rows = [h.series(name) for h in self]
        n = max((len(r) for r in rows), default=0)
        return np.array([np.pad(r, (0, n - len(r)), constant_values=np.nan) for r in rows], dtype=float)

    def final(self, name: str) -> list:
        return [h.final(name) for h in self]


PER_SEED = ("task", "prompt_sampler", "reward_fn", "advantage_fn", "kl_reward_fn", "hooks", "eval_fn")


def _seed_models(policy, seeds: list[int]) -> list:
    """One TinyLM per seed: copies of one model, the given list, or a factory's models."""
    if isinstance(policy, torch.nn.Module):
        return [copy.deepcopy(policy) for _ in seeds]
    if isinstance(policy, (list, tuple)):
        models = list(policy)
        if len(models) != len(seeds):
            raise ValueError(f"policy holds {len(models)} models for {len(seeds)} seeds: give one per seed")
    elif callable(policy):
        models = [policy(s) for s in seeds]
    else:
        raise TypeError(f"with seeds, policy must be a TinyLM, a list of one TinyLM per seed or a function "
                        f"seed -> TinyLM, got {type(policy).__name__}")
    for m in models:
        if not isinstance(m, torch.nn.Module):
            raise TypeError(f"every seed's policy must be a TinyLM, got {type(m).__name__}")
    return models


def _checked_seeds(seeds, per_seed) -> list[int] | None:
    """``seeds`` as a list of distinct seeds (None without seeds); ``per_seed`` checked against it."""
    if seeds is not None:
        seeds = [check_int("seed", s, minimum=0) for s in ([seeds] if isinstance(seeds, int) else seeds)]
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be a non-empty list of distinct seeds, got {seeds}")
    elif per_seed is not None:
        raise ValueError("per_seed needs seeds=[...]")
    if per_seed is not None and not callable(per_seed):
        raise TypeError(f"per_seed must be a function seed -> dict, got {type(per_seed).__name__}")
    return seeds


def _training_backend(policy, seeds: list[int] | None, reference):
    """The backend that trains ``policy`` and the model(s) the callback and evaluations see: ``policy``
    itself for one seed, one TinyLM per seed (:func:`_seed_models`) with seeds."""
    if seeds is None:
        if isinstance(policy, torch.nn.Module):
            # TinyLM has no dropout, so eval mode is right for sampling and for the gradient steps alike
            policy.eval()
            return as_backend(policy, reference=reference), policy
        return as_backend(policy), policy
    models = _seed_models(policy, seeds)
    for m in models:
        m.eval()
    return TinyLMBackend(models, reference=reference), models


def _seed_streams(run_seeds: list[int], per_seed: Callable | None, shared: dict) -> tuple[list, list]:
    """One :class:`SeedStream` and one evaluation function per seed: the pieces of ``per_seed(seed)``
    where it gives them, else those of ``shared`` (rl_train's arguments, under the names of PER_SEED)."""
    streams, eval_fns = [], []
    for seed in run_seeds:
        own = dict(per_seed(seed) or {}) if per_seed is not None else {}
        unknown = sorted(set(own) - set(PER_SEED))
        if unknown:
            raise ValueError(f"per_seed returned unknown pieces {unknown}; known: {list(PER_SEED)}")
        piece = {**shared, **own}
        seed_task = piece["task"]
        if seed_task is None:
            seed_task = AdditionTask(piece["prompt_sampler"], piece["reward_fn"])
        streams.append(SeedStream(seed, torch.Generator().manual_seed(seed), seed_task, piece["hooks"] or Hooks(),
                                  piece["advantage_fn"], piece["kl_reward_fn"]))
        eval_fns.append(piece["eval_fn"])
    return streams, eval_fns


def _new_run(backend, config: RLConfig, streams: list, *, policy_loss_fn, teacher, multi: bool) -> RLRun:
    """The :class:`RLRun` at step 0: its optimizer, scorer and loss; the first stream's pieces (all streams
    when ``multi``)."""
    first = streams[0]
    return RLRun(policy=backend, task=first.task, config=config,
                 optimizer=PolicyOptimizer(backend.trainable_parameters(), config.lr, config.betas,
                                           config.weight_decay, fused=True, n_seeds=len(streams)),
                 generator=first.generator, scorer=CompletionScorer(backend),
                 loss_fn=policy_loss_fn or BUILTIN_LOSSES[config.loss], advantage_fn=first.advantage_fn,
                 kl_reward_fn=first.kl_reward_fn,
                 minibatches=(None if config.minibatch_size is None else
                              lambda f, g: minibatches(f, config.minibatch_size, g)),
                 teacher=as_backend(teacher) if teacher is not None else None, hooks=first.hooks,
                 streams=streams if multi else None)


def rl_train(policy, config: RLConfig | None = None, *, reward_fn: Callable = exact_match,
             prompt_sampler: Callable | None = None, task=None, advantage_fn: Callable | None = None,
             policy_loss_fn: Callable | None = None, kl_reward_fn: Callable | None = None,
             ref_model=None, teacher=None, hooks: Hooks | None = None, callback: Callable | None = None,
             eval_fn: Callable | None = None, eval_every: int = 0, progress: bool = True,
             seeds: Sequence[int] | None = None, per_seed: Callable | None = None, **overrides):
    """Train ``policy`` (a TinyLM, or any :class:`llmrl.backends.protocol.PolicyBackend`) in place; return
    a :class:`History` of per-step metrics.

    The task: ``task`` (the :mod:`llmrl.tasks.task_protocol` protocol), or the addition task built from
    ``prompt_sampler(n, generator) -> Problems`` and ``reward_fn(responses, answers) -> [B]``.
    advantage_fn(rewards [B], group_size) -> [B] (default: ``group_advantages`` of config.advantage);
    policy_loss_fn(LossBatch) -> loss or (loss, stats) (default: the built-in ``config.loss``);
    kl_reward_fn(rewards [B], logprobs [B, R], ref_logprobs [B, R], mask [B, R], kl_coef) -> [B], the
    coefficient passed by position (default: r - kl_coef * sum of the chosen estimator over real
    tokens) when kl_mode == "reward";
    ``hooks``: see :class:`Hooks`; callback(step, record, policy) after each step; eval_fn(policy)
    -> dict at step 0, every ``eval_every`` steps and at the last one (stored as ``eval_<name>``).
    ``overrides`` replace fields of ``config``.

    ``seeds=[0, 1, 2, 3, 4]`` trains one model per seed, all seeds as one computation (the
    weights stacked along a seed dimension, :mod:`llmrl.lm.stacked`), each with its own prompts,
    samples, optimizer state, gradient clipping and metrics: seed s gives the numbers of a run with
    ``seed=s`` (``config.seed`` is then unused). ``policy`` is then a TinyLM (each seed trains a
    copy of it; it stays as it was), a list of one TinyLM per seed (trained in place) or a function
    seed -> TinyLM. ``per_seed(seed) -> dict`` gives the pieces that must not be shared between
    seeds because they hold state (a prompt curriculum, its advantage function and hooks), under
    the names of the arguments: task, prompt_sampler, reward_fn, advantage_fn, kl_reward_fn, hooks,
    eval_fn. The result is a :class:`SeedHistories` (one History per seed, ``.seeds``,
    ``.policies``); ``callback(step, record, policy)`` runs for every seed.
    """
    config = replace(config or RLConfig(), **overrides) if overrides else (config or RLConfig())
    set_threads(1)
    seeds = _checked_seeds(seeds, per_seed)
    torch.manual_seed(config.seed if seeds is None else seeds[0])
    needs_teacher = config.loss in ("opd-sampled", "opd-full") or config.rollout_from == "teacher"
    if needs_teacher and teacher is None:
        raise ValueError(f"loss={config.loss!r} / rollout_from={config.rollout_from!r} needs a teacher model")
    needs_ref = config.kl_coef > 0 or config.track_reference_kl
    reference = (ref_model if ref_model is not None else "copy") if needs_ref else None
    backend, models = _training_backend(policy, seeds, reference)
    shared = {"task": task, "prompt_sampler": prompt_sampler, "reward_fn": reward_fn, "advantage_fn": advantage_fn,
              "kl_reward_fn": kl_reward_fn, "hooks": hooks, "eval_fn": eval_fn}
    streams, eval_fns = _seed_streams([config.seed] if seeds is None else seeds, per_seed, shared)
    if config.kl_mode == "policy_loss_fn" and config.kl_coef > 0 and policy_loss_fn is None:
        raise ValueError(f"kl_mode='policy_loss_fn' leaves the KL penalty (kl_coef={config.kl_coef}) to the policy loss "
                         f"function, and none was given: the built-in {config.loss!r} loss ignores kl_coef, so the "
                         "penalty would be dropped; pass policy_loss_fn or use kl_mode 'reward' or 'loss'")
    run = _new_run(backend, config, streams, policy_loss_fn=policy_loss_fn, teacher=teacher, multi=seeds is not None)

    def on_step(record, batch, s=0):
        if callback is not None and batch is not None:
            callback(record["step"], record, models if seeds is None else models[s])

    desc = f"rl_train[{config.loss}]"
    try:
        if seeds is None:
            return train_loop(run, config.steps, eval_fn=eval_fns[0], eval_every=eval_every, evaluate_model=policy,
                              on_step=on_step, progress=progress, desc=desc)
        out = train_loop(run, config.steps, eval_fn=eval_fns, eval_every=eval_every, evaluate_model=models,
                         on_step=on_step, progress=progress, desc=desc)
    finally:
        release = getattr(getattr(backend, "stack", None), "release", None)
        if callable(release) and isinstance(backend, TinyLMBackend) and backend is not policy:
            release()  # the trained models keep their weights, each in storage of its own
    out.seeds, out.policies = tuple(seeds), models
    for h, s in zip(out, seeds):
        h.seed = s
    return out


