"""Group advantages: one scalar per sample, relative to the other samples of its prompt.

``rewards`` is [B] with rows grouped by prompt (B = P * G) or already [P, G]; the result has the
shape of the input.

* ``"mean"``: r - mean(group) (Dr. GRPO / plain RLOO-style baseline);
* ``"std"``: (r - mean) / (std + eps), GRPO's original normalisation (population std);
* ``"maxrl"``: (r - p_hat) / p_hat with p_hat the group mean, MaxRL's maximum-likelihood weight;
  a group with no success (p_hat = 0) gets zero advantage.

A group whose G rewards are all equal gets advantages of exactly zero (it carries no signal). The
float mean of G equal values is not always that value to the last bit, so without this rule such
a group's advantages would be rounding noise (~1e-7, or ~0.1 after the "std" normalisation with
its eps of 1e-6) whenever the rewards are continuous, e.g. after a KL penalty.
"""

from __future__ import annotations

import torch

from ..utils import check_int

ADVANTAGE_KINDS = ("mean", "std", "maxrl")


def _grouped(rewards: torch.Tensor, group_size: int | None) -> torch.Tensor:
    if not isinstance(rewards, torch.Tensor) or not rewards.is_floating_point():
        raise TypeError(f"rewards must be a float tensor, got {getattr(rewards, 'dtype', type(rewards).__name__)}")
    if rewards.ndim == 2:
        if group_size is not None and rewards.shape[1] != group_size:
            raise ValueError(f"rewards is {tuple(rewards.shape)} but group_size={group_size}")
        return rewards
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be [B] or [P, G], got shape {tuple(rewards.shape)}")
    if group_size is None:
        raise ValueError("group_size is needed when rewards is 1-D")
    check_int("group_size", group_size, minimum=2)
    if rewards.numel() % group_size:
        raise ValueError(f"rewards has {rewards.numel()} entries, not a multiple of group_size={group_size}")
    return rewards.view(-1, group_size)


def group_advantages(rewards: torch.Tensor, group_size: int | None = None, kind: str = "mean",
                     eps: float = 1e-6) -> torch.Tensor:
    if kind not in ADVANTAGE_KINDS:
        raise ValueError(f"kind must be one of {ADVANTAGE_KINDS}, got {kind!r}")
    r = _grouped(rewards, group_size)
    if r.shape[1] < 2:
        raise ValueError(f"a group needs at least 2 samples, got G={r.shape[1]}")
    mean = r.mean(1, keepdim=True)
    if kind == "mean":
        adv = r - mean
    elif kind == "std":
        adv = (r - mean) / (r.std(1, unbiased=False, keepdim=True) + eps)
    else:
        safe = torch.where(mean > 0, mean, torch.ones_like(mean))
        adv = torch.where(mean > 0, (r - mean) / safe, torch.zeros_like(r))
    constant = r.amax(1, keepdim=True) == r.amin(1, keepdim=True)
    adv = torch.where(constant, torch.zeros_like(adv), adv)
    return adv.reshape(rewards.shape)
