"""The RL run's settings: :class:`RLConfig` (every field documented) and :func:`config_dict`."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..advantages import ADVANTAGE_KINDS
from ..losses import BUILTIN_LOSSES, KL_ESTIMATORS
from ..utils import check_fields

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




def config_dict(config) -> dict:
    return {f.name: getattr(config, f.name) for f in fields(config)}
