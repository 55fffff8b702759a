"""The RL step every lab and hw4 share: :func:`rl_step` and its five stages (the loop: :mod:`llmrl.rl.train`).

One step (the spine of the course), in five named stages:

1. **collect**: ``task.sample(n_prompts)`` -> ``policy.generate`` (``group_size`` completions per
   prompt, temperature, top-p) -> a :class:`llmrl.lm.sampling.Rollout`, rows grouped by prompt;
2. **score**: the task's rewards and correctness; per-token log-probs of the completion tokens
   under the sampling ("old") policy, the frozen reference and, for distillation, the teacher
   (a :class:`Scorer`: the library's, or hw4's student functions); the KL penalty folded into the
   reward when ``kl_mode == "reward"``;
3. **advantages**: ``advantage_fn(rewards, G)`` (default: :func:`llmrl.rl.advantages.group_advantages`);
4. **update**: ``epochs`` passes; each pass walks minibatches (default: the whole batch at once),
   takes the policy's log-probs with gradient, the loss (``policy_loss_fn`` on a
   :class:`llmrl.rl.losses.LossBatch`, plus the KL term when ``kl_mode == "loss"``), backpropagates it
   divided by ``grad_accum_steps`` and steps the optimizer every ``grad_accum_steps`` minibatches
   with the gradient clipped to ``max_grad_norm``;
5. **metrics**: one record of named metrics (the vocabulary: :data:`llmrl.rl.metrics.METRICS`).

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
from typing import Iterable

import numpy as np
import torch

from .advantages import group_advantages
from ..backends.protocol import completion_logits
from .losses import LossBatch, clip_stats, kl_estimate, token_mean
from ..lm.sampling import Rollout, masked_mean
from ..lm.stacked import log_softmax
from ..tasks.task_protocol import correct as task_correct, prompts_and_answers, score as task_score
from ..utils import check_int
from .config import RLConfig
from .run import Hooks, RLRun, StepBatch, token_logprobs

class PolicyOptimizer:
    """AdamW over a backend's trainable parameters; ``step`` clips the gradient first.

    The update stage calls ``zero_grad()``, ``backward(loss)`` and ``step(max_grad_norm) -> the norm
    before clipping``; ``step`` is ``clip_grad(max_grad_norm)`` then the AdamW step, so a wrapper
    that must act between the backward pass and clipping (a data-parallel run all-reducing the
    gradient) overrides ``backward`` or ``clip_grad``.

    ``n_seeds``: None clips all parameters together (one norm, a float). S >= 1 reads the leading
    dimension of every parameter as the seed (:mod:`llmrl.lm.stacked`; with S = 1 any shape) and
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
    """Stage 5: the step's record (names and meanings: :data:`llmrl.rl.metrics.METRICS`); a metric
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

