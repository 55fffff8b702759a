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

import copy
import math
import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np
import torch

from .advantages import ADVANTAGE_KINDS, group_advantages
from .backend import PolicyBackend, TinyLMBackend, as_backend, completion_logits, completion_logits_of
from .losses import BUILTIN_LOSSES, KL_ESTIMATORS, LossBatch, clip_stats, kl_estimate, token_mean
from .rewards import exact_match
from .sampling import Rollout, masked_mean
from .stacked import log_softmax
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
    seed = None

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
    before clipping``; ``step`` is ``clip_grad(max_grad_norm)`` then the AdamW step, so a wrapper
    that must act between the backward pass and clipping (a data-parallel run all-reducing the
    gradient) overrides ``backward`` or ``clip_grad``.

    ``n_seeds``: None clips all parameters together (one norm, a float). S >= 1 reads the leading
    dimension of every parameter as the seed (:mod:`llmrl.stacked`; with S = 1 any shape) and
    clips each seed's gradient on its own, to its own norm: ``step`` then returns the S norms (a
    list). AdamW is elementwise, so one optimizer over stacked parameters is S optimizers.
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.999), weight_decay: float = 0.0, fused: bool | None = None,
                 n_seeds: int | None = None):
        self.params = [p for p in params]
        if not self.params:
            raise ValueError("the policy has no trainable parameters")
        if n_seeds is not None:
            check_int("n_seeds", n_seeds, minimum=1)
            bad = [tuple(p.shape) for p in self.params if n_seeds > 1 and (p.ndim == 0 or p.shape[0] != n_seeds)]
            if bad:
                raise ValueError(f"n_seeds={n_seeds}: every parameter needs a leading seed dimension of that size, "
                                 f"got shapes {bad[:3]}")
        self.n_seeds = n_seeds
        self.opt = torch.optim.AdamW(self.params, lr=lr, betas=tuple(betas), weight_decay=weight_decay, fused=fused)

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    @torch.no_grad()
    def clip_grad(self, max_grad_norm: float | None) -> float | list[float]:
        """Scale the gradient to a norm of at most ``max_grad_norm`` (None: measure only); return the
        norm before clipping (with ``n_seeds``: each seed's, a list)."""
        if self.n_seeds is None:
            # an infinite bound measures the norm without clipping
            bound = max_grad_norm if max_grad_norm is not None else float("inf")
            return float(torch.nn.utils.clip_grad_norm_(self.params, bound))
        S = self.n_seeds
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return [0.0] * S
        # each seed's norm from its parameters' norms, [S, n] reduced along contiguous rows. One seed:
        # one foreach call over the whole gradients; several: each parameter's [S, -1] rows. Both
        # reduce a seed's slice with the same kernel (checked to the last bit), so seed s of a stack
        # gets the norm of its one-seed run; foreach over S*n slices would be slower on the CPU
        if S == 1:
            per = torch.stack(torch._foreach_norm(grads)).view(1, -1)
        else:
            per = torch.stack([torch.linalg.vector_norm(g.reshape(S, -1), 2, dim=1) for g in grads], 1)
        norms = torch.linalg.vector_norm(per, 2, dim=1)
        if max_grad_norm is not None:
            coef = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
            if S == 1:
                torch._foreach_mul_(grads, coef[0])
            else:
                for g in grads:
                    g.mul_(coef.view(S, *([1] * (g.ndim - 1))))
        return norms.tolist()

    def step(self, max_grad_norm: float | None) -> float | list[float]:
        norm = self.clip_grad(max_grad_norm)
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


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, R, V] logits, [B, R] targets -> [B, R] log-probs of the targets (the vectorised
    log-softmax of :func:`llmrl.stacked.log_softmax`)."""
    return log_softmax(logits).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def scored_columns(mask: torch.Tensor) -> int:
    """How many leading columns of a [B, R] mask hold a token of some row (at least 1): the columns
    past them need no logits."""
    used = mask.any(0).nonzero()
    return int(used[-1]) + 1 if len(used) else 1


class CompletionScorer:
    """The library's scorer: log-probs of the completion tokens, [B, R], under the policy's
    ``completion_logits`` (TinyLM encodes each group's prompt once, and computes no column past
    the last one any row has a token in)."""

    def __init__(self, policy: PolicyBackend):
        self.policy = policy

    def mask(self, rollout: Rollout) -> torch.Tensor:
        return rollout.completion_mask

    @torch.no_grad()
    def old_logprobs(self, rollout: Rollout, sampled_here: bool) -> torch.Tensor:
        if sampled_here and rollout.temperature == 1.0 and rollout.sample_logprobs is not None:
            return rollout.sample_logprobs  # recorded while sampling, from the same weights
        return token_logprobs(completion_logits(self.policy, rollout, n_cols=scored_columns(rollout.completion_mask)),
                              rollout.response_tokens)

    @torch.no_grad()
    def ref_logprobs(self, rollout: Rollout) -> torch.Tensor:
        return token_logprobs(completion_logits(self.policy, rollout, reference=True,
                                                n_cols=scored_columns(rollout.completion_mask)),
                              rollout.response_tokens)

    def forward(self, minibatch: dict, rollout: Rollout | None):
        n_cols = scored_columns(minibatch["mask"])
        if rollout is not None:
            logits = completion_logits(self.policy, rollout, n_cols=n_cols)
        else:
            ids = minibatch["input_ids"]
            logits = completion_logits_of(self.policy, ids, minibatch["attention_mask"],
                                          ids.shape[1] - minibatch["mask"].shape[1], n_cols=n_cols)
        return token_logprobs(logits, minibatch["input_ids"][:, -logits.shape[1]:]), logits


@dataclass
class Hooks:
    """Where an experiment looks into the step. Each may return a dict of metrics for the record.

    ``after_score(batch: StepBatch)``: the rollout, its rewards, correctness and log-probs (e.g. a
    prompt curriculum that learns from the step's successes); ``after_minibatch(epoch, stats)``:
    the epoch index and the statistics of one minibatch's loss (e.g. clip shares of later epochs);
    ``after_step(record, batch)``: the step's metrics (logging, live plots). With several seeds
    each seed has its own hooks and they see that seed's rows only."""

    after_score: Callable | None = None
    after_minibatch: Callable | None = None
    after_step: Callable | None = None


_BATCH_ROWS = ("rewards", "correct", "mask", "old_logprobs", "ref_logprobs", "teacher_logprobs", "teacher_logits",
               "shaped_rewards", "advantages")


@dataclass
class StepBatch:
    """What one step computed before its update. Rows grouped by prompt, B = n_prompts * G.

    rewards [B] (the task's), components {name: [B]}, correct [B] bool, mask [B, L] bool,
    old_logprobs / ref_logprobs [B, L] (ref None without a reference), teacher_logprobs [B, L]
    and teacher_logits [B, L, V] (distillation only), shaped_rewards [B] (after a KL penalty in the
    reward), advantages [B]. With S seeds stepping together the tensors hold S*B rows, seed-major;
    :meth:`seed_view` is one seed's batch (what its hooks and its metrics see)."""

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
    seed_extras: list | None = None  # S > 1: each seed's ``extra``

    @property
    def n_seeds(self) -> int:
        return self.rollout.n_seeds

    def seed_view(self, s: int) -> "StepBatch":
        """Seed ``s``'s rows (views of this batch's tensors; its ``extra`` is that seed's)."""
        S = self.n_seeds
        if S == 1:
            return self
        if self.seed_extras is None:
            self.seed_extras = [{} for _ in range(S)]
        B = len(self.rollout) // S
        rows = slice(s * B, (s + 1) * B)
        part = {k: (None if getattr(self, k) is None else getattr(self, k)[rows]) for k in _BATCH_ROWS}
        return StepBatch(self.step, self.rollout.seed_view(s), components={k: v[rows] for k, v in self.components.items()},
                         extra=self.seed_extras[s], **part)


@dataclass
class SeedStream:
    """One seed of a run whose seeds step together: its random stream and the pieces that hold
    state of their own (a prompt curriculum, its advantage function and hooks, a reward with memory)."""

    seed: int
    generator: torch.Generator
    task: object
    hooks: Hooks = field(default_factory=Hooks)
    advantage_fn: Callable | None = None
    kl_reward_fn: Callable | None = None


@dataclass
class RLRun:
    """Everything a step needs: the policy and what it learns from, the optimizer and the random stream.

    ``streams``: for S seeds stepping together (a policy backend holding S seeds, an optimizer with
    ``n_seeds=S``), one :class:`SeedStream` per seed; then ``task``, ``generator``, ``hooks``,
    ``advantage_fn`` and ``kl_reward_fn`` are the first seed's."""

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
    streams: list | None = None

    @property
    def n_seeds(self) -> int:
        return 1 if self.streams is None else len(self.streams)

    @property
    def seed_streams(self) -> list[SeedStream]:
        if self.streams is not None:
            return self.streams
        return [SeedStream(self.config.seed, self.generator, self.task, self.hooks, self.advantage_fn,
                           self.kl_reward_fn)]


def minibatches(fields: dict, minibatch_size: int, generator: torch.Generator | None = None) -> Iterable[dict]:
    """Dicts of the same rows of every field, ``minibatch_size`` rows each (the last may be
    smaller), in an order shuffled with ``generator`` (in order without one)."""
    n_rows = len(next(iter(fields.values())))
    order = torch.arange(n_rows) if generator is None else torch.randperm(n_rows, generator=generator)
    for rows in torch.split(order, minibatch_size):
        yield {name: tensor[rows] for name, tensor in fields.items()}


# ----------------------------------------------------------------------------- the step

def collect(run: RLRun) -> Rollout:
    """Stage 1: problems from the task, ``group_size`` completions each from the policy (or the teacher).

    With several seeds: each seed's task draws its prompts with its own generator, and one
    ``generate`` samples every seed's completions (seed-major rows)."""
    cfg, streams = run.config, run.seed_streams
    problems, prompts, answers = [], [], []
    for st in streams:
        p = st.task.sample(cfg.n_prompts, st.generator)
        texts, ans = prompts_and_answers(p)
        problems.append(p)
        prompts += texts
        answers += [a for a in ans for _ in range(cfg.group_size)]
    source = run.teacher if cfg.rollout_from == "teacher" else run.policy
    max_new = cfg.max_new_tokens or getattr(streams[0].task, "max_new_tokens", None)
    generator = streams[0].generator if len(streams) == 1 else [st.generator for st in streams]
    rollout = source.generate(prompts, cfg.group_size, max_new, cfg.temperature, cfg.top_p, generator)
    rollout.n_seeds = len(streams)
    rollout.problems = problems[0] if len(streams) == 1 else problems
    rollout.answers = answers
    return rollout


def _per_seed(S: int, B: int, fn, *rows):
    """``fn`` on each seed's slice of the [S*B, ...] tensors (or lists) ``rows``."""
    return [fn(s, *(r[s * B:(s + 1) * B] for r in rows)) for s in range(S)]


def score(run: RLRun, step: int, rollout: Rollout) -> StepBatch:
    """Stage 2: rewards and correctness; log-probs under the old policy, the reference and the teacher;
    the KL penalty folded into the reward."""
    cfg, streams = run.config, run.seed_streams
    S, n = len(streams), len(rollout)
    B = n // S
    parts = _per_seed(S, B, lambda s, c, a: task_score(streams[s].task, c, a), rollout.completions, rollout.answers)
    for rewards, _ in parts:
        if rewards.shape != (B,):
            raise ValueError(f"the task's rewards have shape {tuple(rewards.shape)}, expected ({B},)")
    correct = _per_seed(S, B, lambda s, c, a: task_correct(streams[s].task, c, a), rollout.completions,
                        rollout.answers)
    if S == 1:
        (rewards, components), correct = parts[0], correct[0]
    else:
        rewards = torch.cat([r for r, _ in parts])
        components = {k: torch.cat([c[k] for _, c in parts]) for k in parts[0][1]}
        correct = torch.cat(correct)
    batch = StepBatch(step, rollout, rewards, components, correct)
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
            batch.teacher_logprobs = token_logprobs(batch.teacher_logits, rollout.response_tokens)
    shaped = rewards
    if cfg.kl_coef > 0 and cfg.kl_mode == "reward":
        if any(st.kl_reward_fn is not None for st in streams):
            def penalised(s, r, lp, ref, m):
                fn = streams[s].kl_reward_fn
                return fn(r, lp, ref, m, cfg.kl_coef) if fn is not None else _kl_shaped(cfg, r, lp, ref, m)
            shaped = _per_seed(S, B, penalised, rewards, batch.old_logprobs, batch.ref_logprobs, batch.mask)
            shaped = shaped[0] if S == 1 else torch.cat([torch.as_tensor(x) for x in shaped])
        else:
            shaped = _kl_shaped(cfg, rewards, batch.old_logprobs, batch.ref_logprobs, batch.mask)
    batch.shaped_rewards = shaped
    for s, st in enumerate(streams):
        if st.hooks.after_score is not None:
            view = batch.seed_view(s)
            view.extra.update(st.hooks.after_score(view) or {})
    return batch


def _kl_shaped(cfg: RLConfig, rewards, logprobs, ref_logprobs, mask) -> torch.Tensor:
    """The default KL penalty in the reward: r - beta * the estimator summed over each completion's tokens."""
    per_tok = kl_estimate(logprobs, ref_logprobs, cfg.kl_estimator)
    return rewards - cfg.kl_coef * torch.where(mask, per_tok, torch.zeros_like(per_tok)).sum(1)


def compute_advantages(run: RLRun, batch: StepBatch) -> torch.Tensor:
    """Stage 3: one advantage per completion (zeros for the distillation losses, which use none).

    The default group advantages work row-wise on every seed's groups at once; an
    ``advantage_fn`` gets one seed's rewards at a time."""
    streams = run.seed_streams
    S, n, G = len(streams), len(batch.rollout), run.config.group_size
    B = n // S
    if run.config.loss != "pg":
        return torch.zeros(n)
    r = batch.shaped_rewards
    if all(st.advantage_fn is None for st in streams):
        return group_advantages(r, G, run.config.advantage).reshape(-1)

    def one(s, rs):
        fn = streams[s].advantage_fn
        adv = fn(rs, G) if fn is not None else group_advantages(rs, G, run.config.advantage)
        adv = torch.as_tensor(adv, dtype=torch.float)
        if adv.numel() != B:
            raise ValueError(f"advantage_fn must return {B} advantages (one per completion), got shape "
                             f"{tuple(adv.shape)}")
        return adv.reshape(-1)

    advs = _per_seed(S, B, one, r)
    return advs[0] if S == 1 else torch.cat(advs)


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
def _minibatch_stats(run: RLRun, hooks: Hooks, mb: dict, lp: torch.Tensor, logits: torch.Tensor, stats: dict,
                     epoch: int, out: dict) -> None:
    """Record one minibatch: the loss's statistics (the library's clip statistics when a clipped
    loss reports none), the entropy of the first epoch, the hook's additions."""
    cfg, m = run.config, mb["mask"]
    if cfg.loss == "pg" and "clip_fraction" not in stats:
        ratio = (lp.detach() - mb["old_logprobs"]).exp()
        stats.update(clip_stats(ratio, mb["advantages"][:, None].expand_as(lp), m, mb["old_logprobs"],
                                cfg.eps_low, cfg.eps_high, cfg.rare_prob))
    if epoch == 0:  # the policy's entropy at the batch's states (token mean over the whole batch)
        lsm = log_softmax(logits.detach())
        w = m.to(lsm.dtype)
        out["entropy_sum"].append(((-(lsm.exp() * lsm).sum(-1)) * w).sum())
        out["entropy_count"].append(w.sum())
    if hooks.after_minibatch is not None:
        stats.update(hooks.after_minibatch(epoch, stats) or {})
    for k, v in stats.items():
        out["stats"].setdefault(k, []).append(float(v))


def _seed_minibatches(run: RLRun, fields: dict, S: int) -> list[dict]:
    """The epoch's minibatches: ``run.minibatches`` over each seed's rows with that seed's
    generator, the i-th minibatches of the seeds joined (seed-major) into one."""
    streams = run.seed_streams
    if S == 1:
        return list(run.minibatches(fields, streams[0].generator))
    B = len(next(iter(fields.values()))) // S
    per = [list(run.minibatches({k: v[s * B:(s + 1) * B] for k, v in fields.items()}, st.generator))
           for s, st in enumerate(streams)]
    if len({len(p) for p in per}) != 1 or any(len({len(next(iter(mb.values()))) for mb in col}) != 1 for col in zip(*per)):
        raise ValueError("with several seeds every seed's minibatches must have the same sizes")
    return [{k: torch.cat([mb[k] for mb in col]) for k in col[0]} for col in zip(*per)]


def update(run: RLRun, batch: StepBatch) -> list[dict]:
    """Stage 4: ``epochs`` passes of minibatches, gradient accumulation, clipped optimizer steps.

    Returns, per seed, every minibatch's loss and statistics, every optimizer step's gradient norm
    and the first epoch's entropy sums. With S seeds the loss is computed on each seed's rows and
    the seeds' losses are summed: their weights are disjoint, so one backward pass gives every
    seed the gradient of its own loss."""
    cfg, opt, accum, streams = run.config, run.optimizer, run.config.grad_accum_steps, run.seed_streams
    S = len(streams)
    fields = {"input_ids": batch.rollout.input_ids, "attention_mask": batch.rollout.attention_mask,
              "mask": batch.mask, "old_logprobs": batch.old_logprobs, "advantages": batch.advantages.detach(),
              "rewards": batch.shaped_rewards}
    for name in ("ref_logprobs", "teacher_logprobs", "teacher_logits"):
        if getattr(batch, name) is not None:
            fields[name] = getattr(batch, name)
    outs = [{"loss": [], "grad_norm": [], "stats": {}, "entropy_sum": [], "entropy_count": []} for _ in range(S)]
    set_mode = getattr(run.policy, "train", None)
    if callable(set_mode):
        set_mode(True)
    for epoch in range(cfg.epochs):
        if run.minibatches is None:  # the whole batch at once: the scorer may use its grouped layout
            mbs, whole = [fields], batch.rollout
        else:
            mbs, whole = _seed_minibatches(run, fields, S), None
        for i, mb in enumerate(mbs):
            if i % accum == 0:  # the first minibatch of an optimizer step
                opt.zero_grad()
            lp, logits = run.scorer.forward(mb, whole)
            where = f"step {batch.step}, epoch {epoch}"
            if S == 1:
                seeds = [(mb, lp, logits)]
            else:
                b = len(lp) // S
                seeds = [({k: v[s * b:(s + 1) * b] for k, v in mb.items()}, lp[s * b:(s + 1) * b],
                          logits[s * b:(s + 1) * b]) for s in range(S)]
            losses = []
            for s, (mb_s, lp_s, logits_s) in enumerate(seeds):
                loss, stats = _minibatch_loss(run, mb_s, lp_s, logits_s, where if S == 1 else f"{where}, seed {s}")
                losses.append(loss)
                _minibatch_stats(run, streams[s].hooks, mb_s, lp_s, logits_s, stats, epoch, outs[s])
            total = losses[0] if S == 1 else torch.stack(losses).sum()
            opt.backward(total / accum if accum > 1 else total)
            for out, loss in zip(outs, losses):
                out["loss"].append(loss.item())
            if (i + 1) % accum == 0 or i == len(mbs) - 1:
                norms = opt.step(cfg.max_grad_norm)
                norms = norms if isinstance(norms, list) else [norms]
                if len(norms) != S:
                    raise ValueError(f"the optimizer returned {len(norms)} gradient norms for {S} seeds")
                for out, norm in zip(outs, norms):
                    out["grad_norm"].append(norm)
    if callable(set_mode):
        set_mode(False)
    return outs


def _nanmean(xs) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return float(np.mean(vals)) if vals else float("nan")


def step_metrics(run: RLRun, batch: StepBatch, upd: dict) -> dict:
    """Stage 5: the step's record (names and meanings: :data:`llmrl.metrics.METRICS`); a metric
    with nothing to measure in this step is None. ``batch`` and ``upd`` are one seed's."""
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


def rl_step(run: RLRun):
    """One RL step of ``run`` (its ``step`` counter advances): collect, score, advantages, update,
    metrics. Returns (the step's record, the scored batch); with several seeds (``run.streams``)
    (one record per seed, one batch view per seed)."""
    run.step += 1
    rollout = collect(run)
    batch = score(run, run.step, rollout)
    batch.advantages = compute_advantages(run, batch)
    upd = update(run, batch)
    if run.streams is None:
        return step_metrics(run, batch, upd[0]), batch
    views = [batch.seed_view(s) for s in range(run.n_seeds)]
    return [step_metrics(run, v, u) for v, u in zip(views, upd)], views


# ----------------------------------------------------------------------------- the loop

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


def rl_train(policy, config: RLConfig | None = None, *, reward_fn: Callable = exact_match,
             prompt_sampler: Callable | None = None, task=None, advantage_fn: Callable | None = None,
             policy_loss_fn: Callable | None = None, kl_reward_fn: Callable | None = None,
             ref_model=None, teacher=None, hooks: Hooks | None = None, callback: Callable | None = None,
             eval_fn: Callable | None = None, eval_every: int = 0, progress: bool = True,
             seeds: Sequence[int] | None = None, per_seed: Callable | None = None, **overrides):
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

    ``seeds=[0, 1, 2, 3, 4]`` trains one model per seed, all seeds as one computation (the
    weights stacked along a seed dimension, :mod:`llmrl.stacked`), each with its own prompts,
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
    if seeds is not None:
        seeds = [check_int("seed", s, minimum=0) for s in ([seeds] if isinstance(seeds, int) else seeds)]
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be a non-empty list of distinct seeds, got {seeds}")
    elif per_seed is not None:
        raise ValueError("per_seed needs seeds=[...]")
    if per_seed is not None and not callable(per_seed):
        raise TypeError(f"per_seed must be a function seed -> dict, got {type(per_seed).__name__}")
    torch.manual_seed(config.seed if seeds is None else seeds[0])
    needs_teacher = config.loss in ("opd-sampled", "opd-full") or config.rollout_from == "teacher"
    if needs_teacher and teacher is None:
        raise ValueError(f"loss={config.loss!r} / rollout_from={config.rollout_from!r} needs a teacher model")
    needs_ref = config.kl_coef > 0 or config.track_reference_kl
    reference = (ref_model if ref_model is not None else "copy") if needs_ref else None
    if seeds is None:
        if isinstance(policy, torch.nn.Module):
            # TinyLM has no dropout, so eval mode is right for sampling and for the gradient steps alike
            policy.eval()
            backend = as_backend(policy, reference=reference)
        else:
            backend = as_backend(policy)
        models, run_seeds = policy, [config.seed]
    else:
        models = _seed_models(policy, seeds)
        for m in models:
            m.eval()
        backend = TinyLMBackend(models, reference=reference)
        run_seeds = seeds
    streams, eval_fns = [], []
    for seed in run_seeds:
        own = dict(per_seed(seed) or {}) if per_seed is not None else {}
        unknown = sorted(set(own) - set(PER_SEED))
        if unknown:
            raise ValueError(f"per_seed returned unknown pieces {unknown}; known: {list(PER_SEED)}")
        get = lambda name, default: own.get(name, default)  # noqa: E731
        seed_task = get("task", task)
        if seed_task is None:
            seed_task = AdditionTask(get("prompt_sampler", prompt_sampler), get("reward_fn", reward_fn))
        streams.append(SeedStream(seed, torch.Generator().manual_seed(seed), seed_task, get("hooks", hooks) or Hooks(),
                                  get("advantage_fn", advantage_fn), get("kl_reward_fn", kl_reward_fn)))
        eval_fns.append(get("eval_fn", eval_fn))
    first = streams[0]
    run = RLRun(policy=backend, task=first.task, config=config,
                optimizer=PolicyOptimizer(backend.trainable_parameters(), config.lr, config.betas,
                                          config.weight_decay, fused=True, n_seeds=len(streams)),
                generator=first.generator, scorer=CompletionScorer(backend),
                loss_fn=policy_loss_fn or BUILTIN_LOSSES[config.loss], advantage_fn=first.advantage_fn,
                kl_reward_fn=first.kl_reward_fn,
                minibatches=(None if config.minibatch_size is None else
                             lambda f, g: minibatches(f, config.minibatch_size, g)),
                teacher=as_backend(teacher) if teacher is not None else None, hooks=first.hooks,
                streams=None if seeds is None else streams)

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


def config_dict(config) -> dict:
    return {f.name: getattr(config, f.name) for f in fields(config)}
