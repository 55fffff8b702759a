"""The RL step every lab and hw4 share: :func:`rl_step`, and :func:`rl_train` / :func:`train_loop` around it.

One step (the spine of the course), in five named stages:

1. **collect**: ``task.sample(n_prompts)`` -> ``policy.generate`` (``group_size`` completions per
   prompt, temperature, top-p) -> a :class:`llmrl.sampling.Rollout`, rows grouped by prompt;
2. **score**: the task's rewards and correctness; per-token log-probs of the completion tokens
   under the sampling ("old") policy, the frozen reference and, for distillation, the teacher
   (a :class:`Scorer`: the library's, or hw4's student functions); the KL penalty folded into the
   reward when ``kl_mode == "reward"``;
3. **advantages**: ``advantage_fn(rewards, G)`` (default: :func:`llmrl.advantages.group_advantages`);
4. **update**: ``epochs`` passes; each pass walks minibatches (default: the whole batch at once),
   takes the policy's log-probs with gradient, the loss (``policy_loss_fn`` on a
   :class:`llmrl.losses.LossBatch`, plus the KL term when ``kl_mode == "loss"``), backpropagates it
   divided by ``grad_accum_steps`` and steps the optimizer every ``grad_accum_steps`` minibatches
   with the gradient clipped to ``max_grad_norm``;
5. **metrics**: one record of named metrics (the vocabulary: :data:`llmrl.metrics.METRICS`).

What a lab varies are arguments: the task (prompts, answers, reward), the advantage function, the
policy loss, the KL shaping, the scorer, the minibatch iterator, and :class:`Hooks` that see the
step's data (the scored batch, each minibatch's statistics with its epoch index, the record).
:func:`train_loop` is the one loop: a step, then the evaluation on its schedule (step 0, every
``eval_every`` steps, the last step), then ``on_step``. ``rl_train`` builds a run on a TinyLM for
the labs; hw4's trainer (:mod:`llmrl.hw4.trainer`) builds one on its backends and the student's
functions and manages the files around the same loop.

Log-probs are per-token tensors [B, L] aligned with their mask [B, L]: the library's scorer gives
the completion columns (L = R); hw4's scorer gives what the student's functions give (L = T - 1,
every shifted position, the mask zero on the prompt), as the CS285 starter does.

Seeds as a dimension (several models stepping together) and data-parallel updates change the
backend and the optimizer (:class:`PolicyOptimizer`: ``zero_grad``, ``backward``, ``step``), not
this function: every stage works row-wise on the rollout, and the optimizer owns clipping.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Iterable, Protocol

import numpy as np
import torch

from .advantages import ADVANTAGE_KINDS, group_advantages
from .backend import PolicyBackend, as_backend, completion_logits, completion_logits_of
from .losses import BUILTIN_LOSSES, KL_ESTIMATORS, LossBatch, clip_stats, kl_estimate, token_mean
from .rewards import exact_match
from .sampling import Rollout, gather_logprobs, masked_mean
from .tasks import AdditionTask, correct as task_correct, prompts_and_answers, score as task_score
from .utils import check_fields, check_int, set_threads

ROLLOUT_SOURCES = ("policy", "teacher")
KL_MODES = ("reward", "loss")


@dataclass(frozen=True)
class RLConfig:
    """Hyperparameters of the RL step; ``eps_low`` / ``eps_high`` None removes that bound.

    ``minibatch_size`` None: one gradient step per epoch on the whole batch (rows shuffled with the
    run's generator otherwise); ``max_new_tokens`` None: the task's cap; ``track_reference_kl``:
    keep a frozen reference to report the KL to it even without a penalty."""

    steps: int = 200
    n_prompts: int = 16
    group_size: int = 8
    lr: float = 3e-4
    epochs: int = 1
    eps_low: float | None = 0.2
    eps_high: float | None = 0.2
    advantage: str = "mean"
    kl_coef: float = 0.0
    kl_mode: str = "reward"
    kl_estimator: str = "k1"
    loss: str = "pg"
    rollout_from: str = "policy"
    temperature: float = 1.0
    max_grad_norm: float | None = 1.0
    weight_decay: float = 0.0
    seed: int = 0
    rare_prob: float = 0.5
    track_reference_kl: bool = True
    top_p: float = 1.0
    max_new_tokens: int | None = None
    minibatch_size: int | None = None
    grad_accum_steps: int = 1
    betas: tuple = (0.9, 0.999)

    def __post_init__(self):
        check_fields(self, ints={"steps": 1, "n_prompts": 1, "group_size": 1, "epochs": 1, "seed": 0,
                                 "grad_accum_steps": 1, "minibatch_size": 1, "max_new_tokens": 1},
                     floats={"lr": 0.0, "kl_coef": 0.0, "temperature": 0.0, "eps_low": 0.0, "eps_high": 0.0,
                             "max_grad_norm": 0.0, "weight_decay": 0.0})
        if self.temperature == 0:
            raise ValueError("temperature must be > 0 for RL (greedy samples have no gradient signal)")
        if self.eps_low is not None and self.eps_low >= 1:
            raise ValueError(f"eps_low must be < 1 (the ratio is clipped at 1 - eps_low), got {self.eps_low}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        for name, value, allowed in (("advantage", self.advantage, ADVANTAGE_KINDS), ("kl_mode", self.kl_mode, KL_MODES),
                                     ("kl_estimator", self.kl_estimator, KL_ESTIMATORS),
                                     ("rollout_from", self.rollout_from, ROLLOUT_SOURCES)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if self.loss not in BUILTIN_LOSSES:
            raise ValueError(f"loss must be one of {sorted(BUILTIN_LOSSES)}, got {self.loss!r}")
        if self.loss == "pg" and self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for group advantages, got {self.group_size}")


class History(list):
    """One metrics dict per step (a step-0 record holds the first evaluation), with helpers.

    ``series(name)`` -> numpy array over the records (nan where missing); ``final(name)`` -> the
    last recorded value (None if never); ``records`` -> the plain list. A run manager attaches
    ``config``, ``backend`` and ``run_dir``."""

    config = None
    backend = None
    run_dir = None

    def series(self, name: str) -> np.ndarray:
        return np.array([rec.get(name, np.nan) for rec in self], dtype=float)

    def last(self, name: str, n: int = 1) -> float:
        """Mean of the last ``n`` recorded values of ``name``."""
        s = self.series(name)
        s = s[~np.isnan(s)]
        return float(np.mean(s[-n:])) if len(s) else float("nan")

    def final(self, name: str):
        pts = [r[name] for r in self if name in r]
        return pts[-1] if pts else None

    @property
    def records(self) -> list[dict]:
        return list(self)

    @property
    def names(self) -> list[str]:
        seen = {}
        for rec in self:
            seen.update(dict.fromkeys(rec))
        return list(seen)


# ----------------------------------------------------------------------------- the pieces

class PolicyOptimizer:
    """AdamW over a backend's trainable parameters; ``step`` clips the gradient first.

    The update stage calls ``zero_grad()``, ``backward(loss)`` and ``step(max_grad_norm) -> the norm
    before clipping``. A backend holding several seeds (clipping each seed on its own) or a
    data-parallel run (averaging gradients across processes before clipping) replaces this object.
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.999), weight_decay: float = 0.0, fused: bool | None = None):
        self.params = [p for p in params]
        if not self.params:
            raise ValueError("the policy has no trainable parameters")
        self.opt = torch.optim.AdamW(self.params, lr=lr, betas=tuple(betas), weight_decay=weight_decay, fused=fused)

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, max_grad_norm: float | None) -> float:
        # an infinite bound measures the norm without clipping
        bound = max_grad_norm if max_grad_norm is not None else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, bound))
        self.opt.step()
        return norm

    def state_dict(self) -> dict:
        return self.opt.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state)


class Scorer(Protocol):
    """How the step turns a rollout into per-token log-probs [B, L] and their mask [B, L]."""

    def mask(self, rollout: Rollout) -> torch.Tensor: ...

    def old_logprobs(self, rollout: Rollout, sampled_here: bool) -> torch.Tensor: ...

    def ref_logprobs(self, rollout: Rollout) -> torch.Tensor: ...

    def forward(self, minibatch: dict, rollout: Rollout | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs [b, L] with gradient, logits [b, L, V] aligned with them) of a minibatch;
        ``rollout`` is given when the minibatch is the whole rollout (grouped rows)."""


class CompletionScorer:
    """The library's scorer: log-probs of the completion tokens, [B, R], under the policy's
    ``completion_logits`` (TinyLM encodes each group's prompt once)."""

    def __init__(self, policy: PolicyBackend):
        self.policy = policy

    def mask(self, rollout: Rollout) -> torch.Tensor:
        return rollout.completion_mask

    @torch.no_grad()
    def old_logprobs(self, rollout: Rollout, sampled_here: bool) -> torch.Tensor:
        if sampled_here and rollout.temperature == 1.0 and rollout.sample_logprobs is not None:
            return rollout.sample_logprobs  # recorded while sampling, from the same weights
        return gather_logprobs(completion_logits(self.policy, rollout), rollout.response_tokens)

    @torch.no_grad()
    def ref_logprobs(self, rollout: Rollout) -> torch.Tensor:
        return gather_logprobs(completion_logits(self.policy, rollout, reference=True), rollout.response_tokens)

    def forward(self, minibatch: dict, rollout: Rollout | None):
        if rollout is not None:
            logits = completion_logits(self.policy, rollout)
        else:
            ids = minibatch["input_ids"]
            logits = completion_logits_of(self.policy, ids, minibatch["attention_mask"],
                                          ids.shape[1] - minibatch["mask"].shape[1])
        return gather_logprobs(logits, minibatch["input_ids"][:, -logits.shape[1]:]), logits


@dataclass
class Hooks:
    """Where an experiment looks into the step. Each may return a dict of metrics for the record.

    ``after_score(batch: StepBatch)``: the rollout, its rewards, correctness and log-probs (e.g. a
    prompt curriculum that learns from the step's successes); ``after_minibatch(epoch, stats)``:
    the epoch index and the statistics of one minibatch's loss (e.g. clip shares of later epochs);
    ``after_step(record, batch)``: the step's metrics (logging, live plots)."""

    after_score: Callable | None = None
    after_minibatch: Callable | None = None
    after_step: Callable | None = None


@dataclass
class StepBatch:
    """What one step computed before its update. Rows grouped by prompt, B = n_prompts * G.

    rewards [B] (the task's), components {name: [B]}, correct [B] bool, mask [B, L] bool,
    old_logprobs / ref_logprobs [B, L] (ref None without a reference), teacher_logprobs [B, L]
    and teacher_logits [B, L, V] (distillation only), shaped_rewards [B] (after a KL penalty in the
    reward), advantages [B]."""

    step: int
    rollout: Rollout
    rewards: torch.Tensor
    components: dict
    correct: torch.Tensor
    mask: torch.Tensor = None
    old_logprobs: torch.Tensor = None
    ref_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None
    teacher_logits: torch.Tensor | None = None
    shaped_rewards: torch.Tensor = None
    advantages: torch.Tensor = None
    extra: dict = field(default_factory=dict)


@dataclass
class RLRun:
    """Everything a step needs: the policy and what it learns from, the optimizer and the random stream."""

    policy: PolicyBackend
    task: object
    config: RLConfig
    optimizer: PolicyOptimizer
    generator: torch.Generator
    scorer: Scorer
    loss_fn: Callable
    advantage_fn: Callable | None = None
    kl_reward_fn: Callable | None = None
    minibatches: Callable | None = None
    teacher: PolicyBackend | None = None
    hooks: Hooks = field(default_factory=Hooks)
    step: int = 0


def minibatches(fields: dict, minibatch_size: int, generator: torch.Generator | None = None) -> Iterable[dict]:
    """Dicts of the same rows of every field, ``minibatch_size`` rows each (the last may be
    smaller), in an order shuffled with ``generator`` (in order without one)."""
    n_rows = len(next(iter(fields.values())))
    order = torch.arange(n_rows) if generator is None else torch.randperm(n_rows, generator=generator)
    for rows in torch.split(order, minibatch_size):
        yield {name: tensor[rows] for name, tensor in fields.items()}


# ----------------------------------------------------------------------------- the step

def collect(run: RLRun) -> Rollout:
    """Stage 1: problems from the task, ``group_size`` completions each from the policy (or the teacher)."""
    cfg = run.config
    problems = run.task.sample(cfg.n_prompts, run.generator)
    prompts, answers = prompts_and_answers(problems)
    source = run.teacher if cfg.rollout_from == "teacher" else run.policy
    max_new = cfg.max_new_tokens or getattr(run.task, "max_new_tokens", None)
    rollout = source.generate(prompts, cfg.group_size, max_new, cfg.temperature, cfg.top_p, run.generator)
    rollout.problems = problems
    rollout.answers = [a for a in answers for _ in range(cfg.group_size)]
    return rollout


def score(run: RLRun, step: int, rollout: Rollout) -> StepBatch:
    """Stage 2: rewards and correctness; log-probs under the old policy, the reference and the teacher;
    the KL penalty folded into the reward."""
    cfg = run.config
    rewards, components = task_score(run.task, rollout.completions, rollout.answers)
    if rewards.shape != (len(rollout),):
        raise ValueError(f"the task's rewards have shape {tuple(rewards.shape)}, expected ({len(rollout)},)")
    batch = StepBatch(step, rollout, rewards, components, task_correct(run.task, rollout.completions, rollout.answers))
    batch.old_logprobs = run.scorer.old_logprobs(rollout, cfg.rollout_from == "policy")
    if cfg.kl_coef > 0 or cfg.track_reference_kl:
        batch.ref_logprobs = run.scorer.ref_logprobs(rollout)
    batch.mask = run.scorer.mask(rollout)
    if batch.mask.shape != batch.old_logprobs.shape:
        raise ValueError(f"the completion mask has shape {tuple(batch.mask.shape)} and the per-token log-probs "
                         f"{tuple(batch.old_logprobs.shape)}: they must match")
    if run.teacher is not None and cfg.loss in ("opd-sampled", "opd-full"):
        with torch.no_grad():
            batch.teacher_logits = completion_logits(run.teacher, rollout)
            batch.teacher_logprobs = gather_logprobs(batch.teacher_logits, rollout.response_tokens)
    shaped = rewards
    if cfg.kl_coef > 0 and cfg.kl_mode == "reward":
        if run.kl_reward_fn is not None:
            shaped = run.kl_reward_fn(rewards, batch.old_logprobs, batch.ref_logprobs, batch.mask, cfg.kl_coef)
        else:
            per_tok = kl_estimate(batch.old_logprobs, batch.ref_logprobs, cfg.kl_estimator)
            shaped = rewards - cfg.kl_coef * torch.where(batch.mask, per_tok, torch.zeros_like(per_tok)).sum(1)
    batch.shaped_rewards = shaped
    if run.hooks.after_score is not None:
        batch.extra.update(run.hooks.after_score(batch) or {})
    return batch


def compute_advantages(run: RLRun, batch: StepBatch) -> torch.Tensor:
    """Stage 3: one advantage per completion (zeros for the distillation losses, which use none)."""
    B, G = len(batch.rollout), run.config.group_size
    if run.config.loss != "pg":
        return torch.zeros(B)
    r = batch.shaped_rewards
    adv = run.advantage_fn(r, G) if run.advantage_fn is not None else group_advantages(r, G, run.config.advantage)
    adv = torch.as_tensor(adv, dtype=torch.float)
    if adv.numel() != B:
        raise ValueError(f"advantage_fn must return {B} advantages (one per completion), got shape {tuple(adv.shape)}")
    return adv.reshape(-1)


def _minibatch_loss(run: RLRun, mb: dict, lp: torch.Tensor, logits: torch.Tensor, where: str):
    """The policy loss of one minibatch (plus the KL term when kl_mode == "loss") and its statistics."""
    cfg = run.config
    lb = LossBatch(logprobs=lp, logits=logits, old_logprobs=mb["old_logprobs"], mask=mb["mask"],
                   advantages=mb["advantages"], rewards=mb["rewards"], ref_logprobs=mb.get("ref_logprobs"),
                   teacher_logprobs=mb.get("teacher_logprobs"), teacher_logits=mb.get("teacher_logits"),
                   eps_low=cfg.eps_low, eps_high=cfg.eps_high, rare_prob=cfg.rare_prob)
    res = run.loss_fn(lb)
    loss, stats = res if isinstance(res, tuple) else (res, {})
    if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
        raise ValueError("policy_loss_fn must return a scalar tensor (or (scalar, stats))")
    if cfg.kl_coef > 0 and cfg.kl_mode == "loss":
        loss = loss + cfg.kl_coef * token_mean(kl_estimate(lp, mb["ref_logprobs"], cfg.kl_estimator), mb["mask"])
    if not torch.isfinite(loss):
        raise FloatingPointError(f"the loss became {loss.item()} at {where} (check masks and log-probs)")
    return loss, dict(stats or {})


@torch.no_grad()
def _minibatch_stats(run: RLRun, mb: dict, lp: torch.Tensor, logits: torch.Tensor, stats: dict, epoch: int,
                     out: dict) -> None:
    """Record one minibatch: the loss's statistics (the library's clip statistics when a clipped
    loss reports none), the entropy of the first epoch, the hook's additions."""
    cfg, m = run.config, mb["mask"]
    if cfg.loss == "pg" and "clip_fraction" not in stats:
        ratio = (lp.detach() - mb["old_logprobs"]).exp()
        stats.update(clip_stats(ratio, mb["advantages"][:, None].expand_as(lp), m, mb["old_logprobs"],
                                cfg.eps_low, cfg.eps_high, cfg.rare_prob))
    if epoch == 0:  # the policy's entropy at the batch's states (token mean over the whole batch)
        lsm = torch.log_softmax(logits.detach(), -1)
        w = m.to(lsm.dtype)
        out["entropy_sum"].append(((-(lsm.exp() * lsm).sum(-1)) * w).sum())
        out["entropy_count"].append(w.sum())
    if run.hooks.after_minibatch is not None:
        stats.update(run.hooks.after_minibatch(epoch, stats) or {})
    for k, v in stats.items():
        out["stats"].setdefault(k, []).append(float(v))


def update(run: RLRun, batch: StepBatch) -> dict:
    """Stage 4: ``epochs`` passes of minibatches, gradient accumulation, clipped optimizer steps.

    Returns every minibatch's loss and statistics, every optimizer step's gradient norm and the
    first epoch's entropy sums."""
    cfg, opt, accum = run.config, run.optimizer, run.config.grad_accum_steps
    fields = {"input_ids": batch.rollout.input_ids, "attention_mask": batch.rollout.attention_mask,
              "mask": batch.mask, "old_logprobs": batch.old_logprobs, "advantages": batch.advantages.detach(),
              "rewards": batch.shaped_rewards}
    for name in ("ref_logprobs", "teacher_logprobs", "teacher_logits"):
        if getattr(batch, name) is not None:
            fields[name] = getattr(batch, name)
    out = {"loss": [], "grad_norm": [], "stats": {}, "entropy_sum": [], "entropy_count": []}
    set_mode = getattr(run.policy, "train", None)
    if callable(set_mode):
        set_mode(True)
    for epoch in range(cfg.epochs):
        if run.minibatches is None:  # the whole batch at once: the scorer may use its grouped layout
            mbs, whole = [fields], batch.rollout
        else:
            mbs, whole = list(run.minibatches(fields, run.generator)), None
        for i, mb in enumerate(mbs):
            if i % accum == 0:  # the first minibatch of an optimizer step
                opt.zero_grad()
            lp, logits = run.scorer.forward(mb, whole)
            loss, stats = _minibatch_loss(run, mb, lp, logits, f"step {batch.step}, epoch {epoch}")
            opt.backward(loss / accum if accum > 1 else loss)
            out["loss"].append(loss.item())
            _minibatch_stats(run, mb, lp, logits, stats, epoch, out)
            if (i + 1) % accum == 0 or i == len(mbs) - 1:
                out["grad_norm"].append(opt.step(cfg.max_grad_norm))
    if callable(set_mode):
        set_mode(False)
    return out


def _nanmean(xs) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return float(np.mean(vals)) if vals else float("nan")


def step_metrics(run: RLRun, batch: StepBatch, upd: dict) -> dict:
    """Stage 5: the step's record (names and meanings: :data:`llmrl.metrics.METRICS`); a metric
    with nothing to measure in this step is None."""
    G = run.config.group_size
    r, mask, adv = batch.rewards, batch.mask, batch.advantages
    rec = {
        "step": batch.step,
        "reward_mean": float(r.mean()),
        "reward_std": float(r.std(unbiased=False)),
        **{f"reward_{k}_mean": float(v.mean()) for k, v in batch.components.items()},
        "shaped_reward_mean": float(batch.shaped_rewards.mean()),
        "sampled_accuracy": float(batch.correct.float().mean()),
        "completion_chars_mean": float(batch.rollout.lengths.mean()),
        "completion_tokens_mean": float(mask.sum(1).float().mean()),
        "entropy_token_mean_nats": float(sum(upd["entropy_sum"]) / sum(upd["entropy_count"]).clamp(min=1)),
        "loss_mean": float(np.mean(upd["loss"])),
        "grad_norm_mean": float(np.mean(upd["grad_norm"])),
        "advantage_abs_mean": float(adv.abs().mean()),
        "frac_zero_std_groups": float((r.view(-1, G).std(1, unbiased=False) == 0).float().mean()),
        "frac_zero_advantage_groups": float((adv.view(-1, G).abs().sum(1) == 0).float().mean())
        if run.config.loss == "pg" else float("nan"),
    }
    if batch.ref_logprobs is not None:
        d = batch.old_logprobs - batch.ref_logprobs
        rec["kl_to_reference_k1_sum_nats"] = float(torch.where(mask, d, torch.zeros_like(d)).sum(1).mean())
    if batch.teacher_logprobs is not None:
        rec["teacher_logprob_token_mean"] = float(masked_mean(batch.teacher_logprobs, mask))
    for k, v in upd["stats"].items():
        rec[k] = _nanmean(v)
    rec.update(batch.extra)
    # a metric with nothing to measure (no negative advantages, no distillation loss) is None: null in JSON
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in rec.items()}


def rl_step(run: RLRun) -> tuple[dict, StepBatch]:
    """One RL step of ``run`` (its ``step`` counter advances): collect, score, advantages, update,
    metrics. Returns (the step's record, the scored batch)."""
    run.step += 1
    rollout = collect(run)
    batch = score(run, run.step, rollout)
    batch.advantages = compute_advantages(run, batch)
    upd = update(run, batch)
    return step_metrics(run, batch, upd), batch


# ----------------------------------------------------------------------------- the loop

def train_loop(run: RLRun, steps: int, *, eval_fn: Callable | None = None, eval_every: int = 0,
               evaluate_model=None, on_step: Callable | None = None, progress: bool = True,
               desc: str = "rl_train", history: History | None = None) -> History:
    """Step ``run`` until its step counter reaches ``steps``; the one RL loop of the library.

    ``eval_fn(evaluate_model) -> dict`` runs before the first step of a fresh run (a step-0 record),
    every ``eval_every`` steps and at the last step; its metrics are stored as ``eval_<name>``.
    ``on_step(record, batch)`` runs after each step (and gets the step-0 record with batch None);
    raise from it to stop. Returns ``history`` with one record appended per step."""
    check_int("eval_every", eval_every, minimum=0)
    history = History() if history is None else history

    def evaluation() -> dict:
        return {(k if k.startswith("eval_") else f"eval_{k}"): v for k, v in eval_fn(evaluate_model).items()}

    def emit(record, batch):
        history.append(record)
        if on_step is not None:
            on_step(record, batch)

    if eval_fn is not None and eval_every and run.step == 0:
        emit({"step": 0, **evaluation()}, None)
    bar = None
    if progress and run.step < steps:
        from tqdm.auto import tqdm
        bar = tqdm(total=steps - run.step, desc=desc, leave=False)
    while run.step < steps:
        t0 = time.perf_counter()
        record, batch = rl_step(run)
        if eval_fn is not None and eval_every and (run.step % eval_every == 0 or run.step == steps):
            record.update(evaluation())
        if run.hooks.after_step is not None:
            run.hooks.after_step(record, batch)
        record["step_seconds"] = time.perf_counter() - t0
        emit(record, batch)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(reward=f"{record['reward_mean']:.2f}", acc=f"{record['sampled_accuracy']:.2f}")
    if bar is not None:
        bar.close()
    return history


def rl_train(policy, config: RLConfig | None = None, *, reward_fn: Callable = exact_match,
             prompt_sampler: Callable | None = None, task=None, advantage_fn: Callable | None = None,
             policy_loss_fn: Callable | None = None, kl_reward_fn: Callable | None = None,
             ref_model=None, teacher=None, hooks: Hooks | None = None, callback: Callable | None = None,
             eval_fn: Callable | None = None, eval_every: int = 0, progress: bool = True,
             **overrides) -> History:
    """Train ``policy`` (a TinyLM, or any :class:`llmrl.backend.PolicyBackend`) in place; return
    a :class:`History` of per-step metrics.

    The task: ``task`` (the :mod:`llmrl.tasks` protocol), or the addition task built from
    ``prompt_sampler(n, generator) -> Problems`` and ``reward_fn(responses, answers) -> [B]``.
    advantage_fn(rewards [B], group_size) -> [B] (default: ``group_advantages`` of config.advantage);
    policy_loss_fn(LossBatch) -> loss or (loss, stats) (default: the built-in ``config.loss``);
    kl_reward_fn(rewards [B], logprobs [B, R], ref_logprobs [B, R], mask [B, R], beta) -> [B]
    (default: r - beta * sum of the chosen estimator over real tokens) when kl_mode == "reward";
    ``hooks``: see :class:`Hooks`; callback(step, record, policy) after each step; eval_fn(policy)
    -> dict at step 0, every ``eval_every`` steps and at the last one (stored as ``eval_<name>``).
    ``overrides`` replace fields of ``config``.
    """
    config = replace(config or RLConfig(), **overrides) if overrides else (config or RLConfig())
    set_threads(1)
    torch.manual_seed(config.seed)
    needs_teacher = config.loss in ("opd-sampled", "opd-full") or config.rollout_from == "teacher"
    if needs_teacher and teacher is None:
        raise ValueError(f"loss={config.loss!r} / rollout_from={config.rollout_from!r} needs a teacher model")
    needs_ref = config.kl_coef > 0 or config.track_reference_kl
    if isinstance(policy, torch.nn.Module):
        # TinyLM has no dropout, so eval mode is right for sampling and for the gradient steps alike
        policy.eval()
        backend = as_backend(policy, reference=(ref_model if ref_model is not None else "copy") if needs_ref else None)
    else:
        backend = as_backend(policy)
    run = RLRun(policy=backend, task=task if task is not None else AdditionTask(prompt_sampler, reward_fn),
                config=config,
                optimizer=PolicyOptimizer(backend.trainable_parameters(), config.lr, config.betas,
                                          config.weight_decay, fused=True),
                generator=torch.Generator().manual_seed(config.seed), scorer=CompletionScorer(backend),
                loss_fn=policy_loss_fn or BUILTIN_LOSSES[config.loss], advantage_fn=advantage_fn,
                kl_reward_fn=kl_reward_fn,
                minibatches=(None if config.minibatch_size is None else
                             lambda f, g: minibatches(f, config.minibatch_size, g)),
                teacher=as_backend(teacher) if teacher is not None else None, hooks=hooks or Hooks())
    def on_step(record, batch):
        if callback is not None and batch is not None:
            callback(record["step"], record, policy)

    return train_loop(run, config.steps, eval_fn=eval_fn, eval_every=eval_every, evaluate_model=policy,
                      on_step=on_step, progress=progress, desc=f"rl_train[{config.loss}]")


def config_dict(config) -> dict:
    return {f.name: getattr(config, f.name) for f in fields(config)}
