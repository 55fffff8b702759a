"""hw4's settings, in one place: :class:`HW4Config` (a doc per field), each required run's
departures from its defaults (:data:`DEFAULTS`, :func:`default_config`), and how a run's settings
reach the library's RL step (:data:`SPINE_SAME`, :data:`SPINE_DERIVED`, :data:`SPINE_FIXED`,
:func:`spine_config`). TRL's names for the same settings: :data:`llmrl.hw4.trl_runner.HYPERPARAMETERS`.

One name per knob: the KL penalty's weight is ``kl_coef`` here, in :class:`llmrl.rl.config.RLConfig`
and in the student's ``grpo_loss`` / ``reinforce_loss``; the notebooks' equations write it beta, and
TRL's ``GRPOConfig`` calls it ``beta`` (the TRL runner maps one onto the other). The coefficient acts
in the student's loss: the spine's settings carry it with ``kl_mode="policy_loss_fn"`` (the loss
function applies it, the step adds none), so what a run prints or saves is the coefficient it uses.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from ..rl.config import RLConfig
from ..utils import check_fields, check_int

ALGOS = ("grpo", "reinforce")


@dataclass(frozen=True)
class HW4Config:
    task: str = "format_copy"
    """the task by name: 'format_copy', 'math_toy', 'math_hard' or a registered one"""
    algo: str = "grpo"
    """'grpo' (clipped, several epochs, KL penalty) or 'reinforce' (GR-REINFORCE: one plain pass)"""
    steps: int = 50
    """RL steps (rollout batches); the evaluation also runs at step 0"""
    n_prompts: int = 8
    """prompts per step"""
    group_size: int = 6
    """completions per prompt"""
    lr: float = 5e-5
    """AdamW's learning rate"""
    temperature: float = 0.8
    """sampling temperature of the rollouts"""
    top_p: float = 0.95
    """nucleus sampling's probability mass (1: all tokens)"""
    clip_eps: float = 0.2
    """GRPO's ratio clip: [1 - clip_eps, 1 + clip_eps]"""
    kl_coef: float = 0.05
    """weight of the KL penalty to the reference in your loss (GRPO and GR-REINFORCE; beta in the equations, TRL)"""
    max_grad_norm: float = 0.5
    """clip the gradient's global norm to this before each optimizer step"""
    adv_clip: float = 5.0
    """advantages are clipped to +-adv_clip after the optional normalisation"""
    normalize_advantages: bool = False
    """normalise the advantages over the whole batch (your maybe_normalize_advantages)"""
    ppo_epochs: int = 2
    """GRPO's passes over each batch; GR-REINFORCE always makes one"""
    minibatch_size: int = 24
    """rows per minibatch of the update"""
    grad_accum_steps: int = 2
    """minibatches accumulated before one optimizer step"""
    max_new_tokens: int | None = None
    """completion cap (None: the task's)"""
    eval_every: int = 5
    """evaluate every N steps (and at step 0 and the last step)"""
    eval_limit: int | None = None
    """evaluate on the first N eval problems only (None: all)"""
    gen_every: int = 5
    """log one group of generations every N steps"""
    ckpt_every: int = 10
    """save the policy and the trainer state every N steps (a run resumes from the last)"""
    seed: int = 0
    """seeds the prompts, the samples and the minibatch order"""
    betas: tuple = (0.9, 0.95)
    """AdamW's (beta1, beta2)"""
    weight_decay: float = 0.0
    """AdamW's weight decay"""
    shares: int = 1
    """the batch in equal shares of whole prompt groups (data parallel: docs/hw4_gpu.md)"""
    backend: str = "char"
    """policy backend: 'char' (the character TinyLM) or 'hf' (a Hugging Face model with LoRA)"""
    backend_kwargs: dict = field(default_factory=dict)
    """keyword arguments of the backend (e.g. model, device, dtype)"""
    task_kwargs: dict = field(default_factory=dict)
    """keyword arguments of the task"""
    wandb: bool = False
    """also log to Weights & Biases (needs wandb installed)"""
    wandb_mode: str = "offline"
    """Weights & Biases mode: 'offline', 'online' or 'disabled'"""
    wandb_project: str = "llmrl-hw4"
    """Weights & Biases project name"""

    def __post_init__(self):
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        check_fields(self, ints={"steps": 1, "n_prompts": 1, "group_size": 1, "ppo_epochs": 1, "minibatch_size": 1,
                                 "grad_accum_steps": 1, "eval_every": 1, "gen_every": 1, "ckpt_every": 1, "seed": 0,
                                 "max_new_tokens": 1, "eval_limit": 1, "shares": 1},
                     floats={"lr": 0.0, "temperature": 0.0, "clip_eps": 0.0, "kl_coef": 0.0, "max_grad_norm": 0.0,
                             "adv_clip": 0.0, "weight_decay": 0.0})
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.wandb_mode not in ("offline", "online", "disabled"):
            raise ValueError(f"wandb_mode must be 'offline', 'online' or 'disabled', got {self.wandb_mode!r}")
        if self.n_prompts % self.shares:
            raise ValueError(f"n_prompts={self.n_prompts} must be a multiple of shares={self.shares} "
                             f"(each share holds whole prompt groups)")
        if self.minibatch_size < self.n_prompts * self.group_size and self.minibatch_size % self.shares:
            raise ValueError(f"minibatch_size={self.minibatch_size} must be a multiple of shares={self.shares} "
                             f"(a minibatch takes minibatch_size / shares rows of every share)")

    @property
    def epochs(self) -> int:
        return self.ppo_epochs if self.algo == "grpo" else 1

    def to_dict(self) -> dict:
        return asdict(self)

    def key(self) -> str:
        """Hash of everything that determines the run's numbers (not the logging options)."""
        d = self.to_dict()
        for k in ("steps", "eval_every", "gen_every", "ckpt_every", "wandb", "wandb_mode", "wandb_project"):
            d.pop(k)
        if d["shares"] == 1:  # the 1-process layout: keys of runs from before shares existed stay valid
            d.pop("shares")
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


# CPU-sized required runs, as their departures from HW4Config's defaults (HW4Config's defaults are
# format_copy's: 8 prompts x 6 completions, lr 5e-5, minibatch 24 with 2 accumulated). The published
# ones (a 1.5B model with LoRA on an H100): 8 x 6 (format_copy) / 8 x 8 (math) rollouts, lr 3e-5,
# 51 / 201 / 501 steps. The character model trains every weight, takes lr 5e-5 for both tasks, and
# needs far fewer steps: format_copy's reward climbs to the maximum 1.3 within about 25 steps, and 30
# math steps separate GRPO from GR-REINFORCE (both runs share batch, minibatch and learning rate;
# GRPO differs by its two clipped epochs).
_MATH_TOY = dict(steps=30, group_size=8, minibatch_size=32)
_MATH_HARD = dict(group_size=8, lr=3e-5, backend="hf", minibatch_size=8, grad_accum_steps=8, eval_every=25,
                  ckpt_every=25)
DEFAULTS = {
    ("format_copy", "grpo"): dict(steps=40),
    ("format_copy", "reinforce"): dict(steps=40),
    ("math_toy", "grpo"): dict(_MATH_TOY),
    ("math_toy", "reinforce"): dict(_MATH_TOY),
    ("math_hard", "grpo"): dict(steps=501, **_MATH_HARD),
    ("math_hard", "reinforce"): dict(steps=201, **_MATH_HARD),
}


def default_config(task: str = "format_copy", algo: str = "grpo", **overrides) -> HW4Config:
    """The required run's configuration for (task, algo), with ``overrides`` applied."""
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    base = dict(DEFAULTS.get((task, algo), {}))
    base.update(overrides)
    return HW4Config(task=task, algo=algo, **base)


# ----------------------------------------------------------------------------- the spine's settings

#: RLConfig fields an hw4 run sets from the HW4Config field of the same name, unchanged.
SPINE_SAME = ("steps", "group_size", "lr", "temperature", "top_p", "max_new_tokens", "max_grad_norm",
              "weight_decay", "seed", "minibatch_size", "grad_accum_steps", "kl_coef")

#: RLConfig fields derived from the run's settings: field -> rule(cfg, processes).
SPINE_DERIVED = {
    "n_prompts": lambda cfg, processes: cfg.n_prompts // processes,  # one process's share of the prompts
    "epochs": lambda cfg, processes: cfg.epochs,                     # ppo_epochs for GRPO, 1 for GR-REINFORCE
    # the clip bounds only feed the step's clip statistics (the student's loss clips); a bound of 1 or
    # more cannot bind from below (the ratio is positive)
    "eps_low": lambda cfg, processes: cfg.clip_eps if cfg.clip_eps < 1 else None,
    "eps_high": lambda cfg, processes: cfg.clip_eps,
    "betas": lambda cfg, processes: tuple(cfg.betas),
}

#: RLConfig fields every hw4 run sets the same way.
SPINE_FIXED = {
    "kl_mode": "policy_loss_fn",   # kl_coef acts in the student's loss (student_loss); the step adds none
    "kl_estimator": "k3",          # the estimator of that penalty (the student's approx_kl_from_logprobs)
    "track_reference_kl": True,    # the reference's log-probs feed that loss
    "loss": "pg",                  # the step's policy-gradient path (the student's loss replaces its loss)
}

#: RLConfig fields an hw4 run leaves at their defaults, and why none of them acts.
SPINE_UNUSED = {
    "advantage": "the student's advantage functions replace the step's (student_advantages)",
    "rollout_from": "RL: the policy samples its own rollouts",
    "rare_prob": "splits only the clip statistics into rare and common tokens (RLConfig's 0.5)",
}


def spine_config(cfg: HW4Config, processes: int = 1) -> RLConfig:
    """The RL step's settings of the run ``cfg`` (in one of ``processes`` data-parallel processes:
    its share of the prompts), by the declared map above: :data:`SPINE_SAME` taken as they are,
    :data:`SPINE_DERIVED` by their rules, :data:`SPINE_FIXED`; the rest (:data:`SPINE_UNUSED`) at
    RLConfig's defaults."""
    if not isinstance(cfg, HW4Config):
        raise TypeError(f"cfg must be an HW4Config, got {type(cfg).__name__}")
    check_int("processes", processes, minimum=1)
    if cfg.n_prompts % processes:
        raise ValueError(f"n_prompts={cfg.n_prompts} must be a multiple of processes={processes} "
                         f"(each process samples an equal share of the prompts)")
    return RLConfig(**{name: getattr(cfg, name) for name in SPINE_SAME},
                    **{name: rule(cfg, processes) for name, rule in SPINE_DERIVED.items()}, **SPINE_FIXED)
