"""The GRPO-family trainer every lab runs: ``rl_train``.

One step (the spine of the course): sample P prompts -> G completions each -> rewards -> (optional
KL penalty folded into the reward) -> group advantages -> ``epochs`` gradient steps of a policy loss
on log-probs under the current, old (sampling-time) and reference policy -> metrics -> callbacks.

The pieces a lab is about are arguments, so an experiment runs on the student's own code:
``reward_fn``, ``advantage_fn``, ``policy_loss_fn``, ``prompt_sampler`` and ``kl_reward_fn``.
Distillation arms use the same loop: ``loss="opd-sampled" | "opd-full"`` score the student's own
samples with a teacher; ``loss="sft", rollout_from="teacher"`` fits the teacher's samples.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Callable

import numpy as np
import torch

from .addition import PromptSampler, TWO_DIGIT
from .advantages import ADVANTAGE_KINDS, group_advantages
from .losses import BUILTIN_LOSSES, KL_ESTIMATORS, LossBatch, kl_estimate, token_mean
from .rewards import exact_match
from .sampling import generate, masked_mean, response_logits, gather_logprobs
from .utils import check_float, check_int, set_threads

ROLLOUT_SOURCES = ("policy", "teacher")
KL_MODES = ("reward", "loss")


@dataclass(frozen=True)
class RLConfig:
    """Hyperparameters of ``rl_train``; ``eps_low`` / ``eps_high`` None removes that bound."""

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

    def __post_init__(self):
        check_int("steps", self.steps, minimum=1)
        check_int("n_prompts", self.n_prompts, minimum=1)
        check_int("group_size", self.group_size, minimum=1)
        check_int("epochs", self.epochs, minimum=1)
        check_int("seed", self.seed, minimum=0)
        check_float("lr", self.lr, minimum=0.0)
        check_float("kl_coef", self.kl_coef, minimum=0.0)
        check_float("temperature", self.temperature, minimum=0.0)
        if self.temperature == 0:
            raise ValueError("temperature must be > 0 for RL (greedy samples have no gradient signal)")
        for name in ("eps_low", "eps_high"):
            v = getattr(self, name)
            if v is not None:
                check_float(name, v, minimum=0.0)
        if self.eps_low is not None and self.eps_low >= 1:
            raise ValueError(f"eps_low must be < 1 (the ratio is clipped at 1 - eps_low), got {self.eps_low}")
        if self.max_grad_norm is not None:
            check_float("max_grad_norm", self.max_grad_norm, minimum=0.0)
        if self.advantage not in ADVANTAGE_KINDS:
            raise ValueError(f"advantage must be one of {ADVANTAGE_KINDS}, got {self.advantage!r}")
        if self.kl_mode not in KL_MODES:
            raise ValueError(f"kl_mode must be one of {KL_MODES}, got {self.kl_mode!r}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        if self.loss not in BUILTIN_LOSSES:
            raise ValueError(f"loss must be one of {sorted(BUILTIN_LOSSES)}, got {self.loss!r}")
        if self.rollout_from not in ROLLOUT_SOURCES:
            raise ValueError(f"rollout_from must be one of {ROLLOUT_SOURCES}, got {self.rollout_from!r}")
        if self.loss == "pg" and self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for group advantages, got {self.group_size}")


class History(list):
    """One metrics dict per step, with ``series(name)`` -> numpy array (nan where missing)."""

    def series(self, name: str) -> np.ndarray:
        return np.array([rec.get(name, np.nan) for rec in self], dtype=float)

    def last(self, name: str, n: int = 1) -> float:
        """Mean of the last ``n`` recorded values of ``name``."""
        s = self.series(name)
        s = s[~np.isnan(s)]
        return float(np.mean(s[-n:])) if len(s) else float("nan")

    @property
    def names(self) -> list[str]:
        seen = {}
        for rec in self:
            seen.update(dict.fromkeys(rec))
        return list(seen)


def _frozen(model):
    ref = copy.deepcopy(model)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def rl_train(policy, config: RLConfig | None = None, *, reward_fn: Callable = exact_match,
             prompt_sampler: Callable | None = None, advantage_fn: Callable | None = None,
             policy_loss_fn: Callable | None = None, kl_reward_fn: Callable | None = None,
             ref_model=None, teacher=None, callback: Callable | None = None,
             eval_fn: Callable | None = None, eval_every: int = 0, progress: bool = True,
             **overrides) -> History:
    """Train ``policy`` in place; return a :class:`History` of per-step metrics.

    reward_fn(responses, answers) -> [B]; prompt_sampler(n, generator) -> Problems;
    advantage_fn(rewards [B], group_size) -> [B] (default: ``group_advantages`` of config.advantage);
    policy_loss_fn(LossBatch) -> loss or (loss, stats) (default: the built-in ``config.loss``);
    kl_reward_fn(rewards [B], logprobs [B, R], ref_logprobs [B, R], mask [B, R], beta) -> [B]
    (default: r - beta * sum of the chosen estimator over real tokens) when kl_mode == "reward";
    callback(step, record, policy) after each step; eval_fn(policy) -> dict every ``eval_every``
    steps (and at the last one). ``overrides`` replace fields of ``config``.
    """
    config = replace(config or RLConfig(), **overrides) if overrides else (config or RLConfig())
    check_int("eval_every", eval_every, minimum=0)
    set_threads(1)
    torch.manual_seed(config.seed)
    g = torch.Generator().manual_seed(config.seed)
    sampler = prompt_sampler or PromptSampler(TWO_DIGIT)
    loss_fn = policy_loss_fn or BUILTIN_LOSSES[config.loss]
    needs_teacher = config.loss in ("opd-sampled", "opd-full") or config.rollout_from == "teacher"
    if needs_teacher and teacher is None:
        raise ValueError(f"loss={config.loss!r} / rollout_from={config.rollout_from!r} needs a teacher model")
    if config.kl_coef > 0 or config.track_reference_kl:
        ref_model = ref_model if ref_model is not None else _frozen(policy)
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay,
                            betas=(0.9, 0.999), fused=True)
    G = config.group_size
    # TinyLM has no dropout, so eval mode is right for sampling and for the gradient steps alike
    policy.eval()
    history = History()
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=config.steps, desc=f"rl_train[{config.loss}]", leave=False)
    for step in range(1, config.steps + 1):
        problems = sampler(config.n_prompts, g)
        source = teacher if config.rollout_from == "teacher" else policy
        roll = generate(source, problems, G, config.temperature, g)
        mask = roll.response_mask
        answers = roll.answers
        rewards = reward_fn(roll.responses, answers)
        if not isinstance(rewards, torch.Tensor):
            rewards = torch.as_tensor(rewards, dtype=torch.float)
        rewards = rewards.float()
        if rewards.shape != (len(roll),):
            raise ValueError(f"reward_fn returned shape {tuple(rewards.shape)}, expected ({len(roll)},)")
        task_rewards = rewards
        correct = exact_match(roll.responses, answers)
        with torch.no_grad():
            if config.rollout_from == "policy" and config.temperature == 1.0:
                old_lp = roll.sample_logprobs
            else:
                old_lp = gather_logprobs(response_logits(policy, roll.tokens, G), roll.response_tokens)
            ref_lp = None
            if ref_model is not None:
                ref_lp = gather_logprobs(response_logits(ref_model, roll.tokens, G), roll.response_tokens)
            t_logits = t_lp = None
            if teacher is not None and config.loss in ("opd-sampled", "opd-full"):
                t_logits = response_logits(teacher, roll.tokens, G)
                t_lp = gather_logprobs(t_logits, roll.response_tokens)
        if config.kl_coef > 0 and config.kl_mode == "reward":
            if kl_reward_fn is not None:
                rewards = kl_reward_fn(rewards, old_lp, ref_lp, mask, config.kl_coef)
            else:
                per_tok = kl_estimate(old_lp, ref_lp, config.kl_estimator)
                rewards = rewards - config.kl_coef * torch.where(mask, per_tok, torch.zeros_like(per_tok)).sum(1)
        if config.loss == "pg":
            adv = advantage_fn(rewards, G) if advantage_fn is not None else group_advantages(rewards, G, config.advantage)
            adv = torch.as_tensor(adv, dtype=torch.float).reshape(-1)
        else:
            adv = torch.zeros(len(roll))
        stats_acc: dict[str, list] = {}
        entropy = None
        grad_norm = 0.0
        for epoch in range(config.epochs):
            logits = response_logits(policy, roll.tokens, G)
            lp = gather_logprobs(logits, roll.response_tokens)
            if epoch == 0:
                with torch.no_grad():
                    lsm = torch.log_softmax(logits, -1)
                    entropy = float(masked_mean(-(lsm.exp() * lsm).sum(-1), mask))
            batch = LossBatch(logprobs=lp, logits=logits, old_logprobs=old_lp, mask=mask, advantages=adv,
                              rewards=rewards, ref_logprobs=ref_lp, teacher_logprobs=t_lp,
                              teacher_logits=t_logits, eps_low=config.eps_low, eps_high=config.eps_high,
                              rare_prob=config.rare_prob)
            out = loss_fn(batch)
            loss, stats = out if isinstance(out, tuple) else (out, {})
            if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
                raise ValueError("policy_loss_fn must return a scalar tensor (or (scalar, stats))")
            if config.kl_coef > 0 and config.kl_mode == "loss":
                loss = loss + config.kl_coef * token_mean(kl_estimate(lp, ref_lp, config.kl_estimator), mask)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at step {step}, epoch {epoch}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            # the norm before clipping; an infinite bound measures it without clipping
            bound = config.max_grad_norm if config.max_grad_norm is not None else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), bound))
            opt.step()
            for k, v in (stats or {}).items():
                stats_acc.setdefault(k, []).append(float(v))
        lengths = roll.lengths
        rec = {
            "step": step,
            "reward": float(task_rewards.mean()),
            "shaped_reward": float(rewards.mean()),
            "sampled_accuracy": float(correct.mean()),
            "entropy_nats": entropy,
            "response_length": float(lengths.mean()),
            "loss": float(loss.detach()),
            "grad_norm": grad_norm,
            "frac_zero_advantage_groups": float((adv.view(-1, G).abs().sum(1) == 0).float().mean())
            if config.loss == "pg" else float("nan"),
        }
        if ref_lp is not None:
            rec["kl_to_reference_nats"] = float(torch.where(mask, old_lp - ref_lp, torch.zeros_like(old_lp)).sum(1).mean())
        if t_lp is not None:
            rec["teacher_logprob"] = float(masked_mean(t_lp, mask))
        for k, v in stats_acc.items():
            vals = [x for x in v if not math.isnan(x)]
            rec[k] = float(np.mean(vals)) if vals else float("nan")
        if eval_fn is not None and eval_every and (step % eval_every == 0 or step == config.steps):
            rec.update(eval_fn(policy))
        history.append(rec)
        if callback is not None:
            callback(step, rec, policy)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(reward=f"{rec['reward']:.2f}", acc=f"{rec['sampled_accuracy']:.2f}")
    if bar is not None:
        bar.close()
    policy.eval()
    return history


def config_dict(config: RLConfig) -> dict:
    return {f.name: getattr(config, f.name) for f in fields(config)}
