"""The RL run's settings: :class:`RLConfig` (every field documented) and :func:`config_dict`."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .advantages import ADVANTAGE_KINDS
from .losses import BUILTIN_LOSSES, KL_ESTIMATORS
from ..utils import check_fields

ROLLOUT_SOURCES = ("policy", "teacher")
#: where the KL penalty acts: the step subtracts it from the reward ("reward") or adds it to the loss
#: ("loss"); with "policy_loss_fn" the policy loss function applies ``kl_coef`` itself and the step adds
#: nothing (hw4: the student's grpo_loss and reinforce_loss take the coefficient as an argument)
KL_MODES = ("reward", "loss", "policy_loss_fn")


@dataclass(frozen=True)
class RLConfig:
    """Hyperparameters of the RL step; ``eps_low`` / ``eps_high`` None removes that bound.

    ``minibatch_size`` None: one gradient step per epoch on the whole batch (rows shuffled with the
    run's generator otherwise); ``max_new_tokens`` None: the task's cap; ``track_reference_kl``:
    keep a frozen reference to report the KL to it even without a penalty."""

    steps: int = 200
    """RL steps (one rollout batch each) that rl_train runs"""
    n_prompts: int = 16
    """prompts drawn per step; the batch has n_prompts * group_size rows"""
    group_size: int = 8
    """completions sampled per prompt (G); group advantages compare a prompt's G rewards"""
    lr: float = 3e-4
    """AdamW's learning rate for the policy"""
    epochs: int = 1
    """passes of the update over each step's batch (1: on-policy; more: PPO-style reuse, clipped)"""
    eps_low: float | None = 0.2
    """lower clip of the probability ratio at 1 - eps_low (None: no lower bound)"""
    eps_high: float | None = 0.2
    """upper clip of the ratio at 1 + eps_high (None: no upper bound; above eps_low: clip-higher)"""
    advantage: str = "mean"
    """group advantage: 'mean' (reward minus group mean), 'std' (also divided by the group's sd), 'maxrl'"""
    kl_coef: float = 0.0
    """weight of the KL penalty to the frozen reference (0: none); beta in the labs' equations and in TRL"""
    kl_mode: str = "reward"
    """where the KL penalty acts: 'reward' or 'loss' (the step puts it there) or 'policy_loss_fn' (that function does)"""
    kl_estimator: str = "k1"
    """per-token KL estimator of the penalty: 'k1', 'k2' or 'k3'"""
    loss: str = "pg"
    """policy loss by name: 'pg' (clipped policy gradient), 'opd-sampled', 'opd-full' (distillation), 'sft'"""
    rollout_from: str = "policy"
    """who samples the rollouts: 'policy' (RL) or 'teacher' (off-policy distillation)"""
    temperature: float = 1.0
    """sampling temperature of the rollouts (> 0)"""
    max_grad_norm: float | None = 1.0
    """clip the gradient's global norm to this before each optimizer step (None: no clipping)"""
    weight_decay: float = 0.0
    """AdamW's weight decay"""
    seed: int = 0
    """seeds the prompts, the samples and the minibatch order"""
    rare_prob: float = 0.5
    """a token whose old probability is below this counts as rare in the clip statistics"""
    track_reference_kl: bool = True
    """keep a frozen reference to report the KL to it even without a penalty"""
    top_p: float = 1.0
    """nucleus sampling: keep the smallest set of tokens with this much probability (1: all)"""
    max_new_tokens: int | None = None
    """completion cap while training (None: the task's own)"""
    minibatch_size: int | None = None
    """rows per gradient step within an epoch (None: the whole batch, one step per epoch)"""
    grad_accum_steps: int = 1
    """minibatches whose gradients are summed before one optimizer step"""
    betas: tuple = (0.9, 0.999)
    """AdamW's (beta1, beta2)"""

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




def config_dict(config) -> dict:
    return {f.name: getattr(config, f.name) for f in fields(config)}
