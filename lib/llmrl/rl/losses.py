"""Policy losses for the trainer, each ``loss_fn(batch: LossBatch) -> (loss, stats)``.

* :func:`clipped_pg_loss`: the PPO/GRPO clipped surrogate with separate eps_low / eps_high and a
  token-level mean; also returns clip fractions split by bound, advantage sign and token rarity.
* :func:`opd_sampled_loss`, :func:`opd_full_loss`, :func:`sft_nll_loss`: the distillation arms.
* :func:`kl_estimate`: k1, k2, k3 per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


@dataclass
class LossBatch:
    """Everything a loss may need for one gradient step. Shapes: B rows, R response columns, V vocab.

    logprobs [B, R] and logits [B, R, V] carry gradients (current policy); old_logprobs [B, R]
    (policy at sampling time), ref_logprobs [B, R] (frozen reference, or None), teacher_logprobs
    [B, R] and teacher_logits [B, R, V] (or None), advantages [B], rewards [B], mask [B, R] bool.
    """

    logprobs: torch.Tensor
    logits: torch.Tensor
    old_logprobs: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    rewards: torch.Tensor
    ref_logprobs: torch.Tensor | None = None
    teacher_logprobs: torch.Tensor | None = None
    teacher_logits: torch.Tensor | None = None
    eps_low: float | None = 0.2
    eps_high: float | None = 0.2
    rare_prob: float = 0.5


def token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over all True positions of the batch (the token-level mean of DAPO / Dr. GRPO)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from tokens sampled from pi; l = log pi - log ref.

    k1 = l, k2 = l^2 / 2, k3 = exp(-l) - 1 + l.
    """
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"kl estimator must be one of {KL_ESTIMATORS}, got {kind!r}")
    l = logprobs - ref_logprobs
    if kind == "k1":
        return l
    if kind == "k2":
        return 0.5 * l * l
    return torch.exp(-l) - 1 + l


def clip_stats(ratio: torch.Tensor, adv_tok: torch.Tensor, mask: torch.Tensor, old_logprobs: torch.Tensor,
               eps_low: float | None, eps_high: float | None, rare_prob: float) -> dict[str, float]:
    """Fractions of tokens whose gradient a bound switches off.

    The upper bound acts on positive-advantage tokens whose ratio exceeds 1 + eps_high; the lower
    bound on negative-advantage tokens whose ratio is below 1 - eps_low. Tokens are split into
    rare (probability under the old policy < ``rare_prob``) and common.
    """
    with torch.no_grad():
        m = mask
        pos, neg = m & (adv_tok > 0), m & (adv_tok < 0)
        rare = old_logprobs.exp() < rare_prob
        hi = pos & (ratio > 1 + eps_high) if eps_high is not None else torch.zeros_like(m)
        lo = neg & (ratio < 1 - eps_low) if eps_low is not None else torch.zeros_like(m)

        common = ~rare
        # every count at once (one reduction, one transfer): 9 numerators over 7 denominators
        names = ("clip_fraction", "clip_fraction_high", "clip_fraction_low", "clip_high_of_positive",
                 "clip_low_of_negative", "clip_high_of_positive_rare", "clip_high_of_positive_common",
                 "clip_low_of_negative_rare", "clip_low_of_negative_common")
        nums = [hi | lo, hi, lo, hi, lo, hi & rare, hi & common, lo & rare, lo & common]
        dens = [m, pos, neg, pos & rare, pos & common, neg & rare, neg & common]
        which = (0, 0, 0, 1, 2, 3, 4, 5, 6)  # the denominator of each numerator
        counts = torch.stack(nums + dens).reshape(len(nums) + len(dens), -1).sum(1).tolist()
        num, den = counts[:len(nums)], counts[len(nums):]
        return {name: (num[i] / den[which[i]] if den[which[i]] else float("nan")) for i, name in enumerate(names)}


def clipped_surrogate(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.2):
    """Token-mean of -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A); returns (loss, ratio)."""
    if advantages.ndim == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    ratio = torch.exp(logprobs - old_logprobs)
    lo = -float("inf") if eps_low is None else 1 - eps_low
    hi = float("inf") if eps_high is None else 1 + eps_high
    clipped = ratio.clamp(lo, hi)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    return -token_mean(surrogate, mask), ratio


def clipped_pg_loss(batch: LossBatch):
    loss, ratio = clipped_surrogate(batch.logprobs, batch.old_logprobs, batch.advantages, batch.mask,
                                    batch.eps_low, batch.eps_high)
    adv_tok = batch.advantages[:, None].expand_as(batch.logprobs)
    return loss, clip_stats(ratio.detach(), adv_tok, batch.mask, batch.old_logprobs,
                            batch.eps_low, batch.eps_high, batch.rare_prob)


def _need(batch, name):
    if getattr(batch, name) is None:
        raise ValueError(f"this loss needs batch.{name}: pass a teacher to the trainer")
    return getattr(batch, name)


def opd_sampled_loss(batch: LossBatch):
    """On-policy distillation, sampled token: REINFORCE with per-token reward log pT - log ptheta."""
    reward = (_need(batch, "teacher_logprobs") - batch.logprobs).detach()
    return -token_mean(reward * batch.logprobs, batch.mask), {}


def full_vocab_kl(logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """[B, R] exact KL(p_theta || p_T) over the vocabulary at each position."""
    lp = torch.log_softmax(logits, -1)
    lq = torch.log_softmax(teacher_logits, -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def opd_full_loss(batch: LossBatch):
    """On-policy distillation, full vocabulary: the exact reverse KL at every visited state."""
    return token_mean(full_vocab_kl(batch.logits, _need(batch, "teacher_logits")), batch.mask), {}


def sft_nll_loss(batch: LossBatch):
    """Off-policy distillation: negative log-likelihood of the (teacher's) sampled tokens."""
    return -token_mean(batch.logprobs, batch.mask), {}


BUILTIN_LOSSES = {"pg": clipped_pg_loss, "opd-sampled": opd_sampled_loss, "opd-full": opd_full_loss,
                  "sft": sft_nll_loss}
