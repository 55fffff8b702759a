"""Supervised training of TinyLM: the schedule (:class:`ScheduleConfig`), the loop
(:func:`supervised_train`, shared with hw4's character-model pretraining) and the SFT run on the
addition task (:class:`SFTConfig`, :func:`sft_train`) with its snapshots."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from ..tasks.addition import SFT_MIX, sft_batch
from ..lm.sampling import response_logits
from ..store.cache_files import FORMAT_VERSION
from ..lm.tinylm import TinyLM, TinyLMConfig
from ..utils import check_fields, set_threads


def _field(default, doc: str):
    """A dataclass field with its documentation (``dataclasses.fields(cfg)[i].metadata["doc"]``)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class ScheduleConfig:
    """A supervised run's schedule: ``steps`` of ``batch_size`` rows, AdamW at ``lr`` after a linear
    ``warmup``, cosine decay to ``min_lr_ratio * lr``; weight decay on the matrices only."""

    steps: int = _field(1200, "optimizer steps, one batch each")
    batch_size: int = _field(64, "rows per batch")
    lr: float = _field(3e-3, "peak learning rate, reached after the warmup")
    warmup: int = _field(50, "steps of linear warmup from lr / warmup")
    min_lr_ratio: float = _field(0.1, "the cosine decay ends at min_lr_ratio * lr on the last step")
    weight_decay: float = _field(0.01, "AdamW's weight decay on the matrices (embeddings too), none on biases and norms")
    seed: int = _field(0, "seeds the initial weights and the batches")

    def __post_init__(self):
        check_fields(self, ints={"steps": 1, "batch_size": 1, "warmup": 0, "seed": 0}, floats={"lr": 0.0})


@dataclass(frozen=True)
class SFTConfig(ScheduleConfig):
    """The SFT run of TinyLM on the addition task's ``mix`` (the checkpoints every lab starts from)."""

    mix: tuple = tuple(SFT_MIX.items())
    """the SFT data's mix: (bucket of problems, share of rows) pairs of the addition task"""
    model: TinyLMConfig = field(default_factory=TinyLMConfig)
    """the TinyLM trained (its TinyLMConfig)"""

    def key(self) -> str:
        blob = json.dumps({"cfg": asdict(self), "v": FORMAT_VERSION, "torch": torch.__version__},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def lr_at(step: int, cfg: ScheduleConfig) -> float:
    """Linear warmup, then cosine decay to ``min_lr_ratio * lr`` at the last step."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def supervised_train(cfg: ScheduleConfig, batch_fn, loss_fn, model: TinyLM | None = None, *, fused: bool | None = True,
                     progress: bool = False, desc: str = "SFT", callback=None) -> tuple[TinyLM, list[float]]:
    """The supervised loop on ``cfg``'s schedule: SFT of the addition TinyLM and the character
    model's pretraining. ``batch_fn(generator) -> (tokens, mask)``; ``loss_fn(model, tokens, mask)``
    -> scalar; ``callback(step, model, loss)`` after each optimizer step. A fresh ``TinyLM(cfg.model)``
    (seeded with ``cfg.seed``) unless ``model`` is given. Returns (model in eval mode, losses)."""
    set_threads(1)
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    model = model if model is not None else TinyLM(cfg.model)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98), fused=fused)
    losses = []
    steps = range(cfg.steps)
    if progress:
        from tqdm.auto import tqdm
        steps = tqdm(steps, desc=desc, leave=False)
    model.train()
    for step in steps:
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, cfg)
        tokens, mask = batch_fn(g)
        loss = loss_fn(model, tokens, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if callback is not None:
            callback(step + 1, model, losses[-1])
    model.eval()
    return model, losses


def sft_loss(model, tokens, response_mask) -> torch.Tensor:
    """Mean cross-entropy over real response tokens (the prompt is never a target)."""
    logits = response_logits(model, tokens)
    targets = tokens[:, -logits.shape[1]:]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    m = response_mask.reshape(-1).float()
    return (ce * m).sum() / m.sum()


@dataclass(frozen=True)
class Snapshot:
    """Take a copy at the first check (every ``every`` steps) at or after ``min_step`` where greedy
    accuracy on the fixed SFT check set is at least ``greedy_at_least`` (None: at ``min_step``)."""

    min_step: int
    greedy_at_least: float | None = None
    every: int = 10


def _check_set():
    from ..tasks.addition import TWO_DIGIT, eval_problems
    return eval_problems(200, TWO_DIGIT, seed=777)


def sft_train(cfg: SFTConfig = SFTConfig(), snapshots: dict[str, Snapshot] | None = None,
              model: TinyLM | None = None, progress: bool = False, callback=None):
    """Run SFT; return (model, {name: (step, state_dict)}, losses).

    A snapshot whose accuracy is never reached is taken at the last step.
    """
    snapshots = dict(snapshots or {})
    for name, s in snapshots.items():
        if not isinstance(s, Snapshot):
            raise TypeError(f"snapshot {name!r} must be a Snapshot, got {type(s).__name__}")
        if not 1 <= s.min_step <= cfg.steps:
            raise ValueError(f"snapshot {name!r} at step {s.min_step} is outside 1..{cfg.steps}")
    check = _check_set() if any(s.greedy_at_least is not None for s in snapshots.values()) else None
    mix = dict(cfg.mix)
    taken = {}

    def after_step(n, model, loss):
        if callback is not None:
            callback(n, model, loss)
        acc = None
        for name, s in snapshots.items():
            if name in taken or n < s.min_step:
                continue
            ok = n == cfg.steps
            if s.greedy_at_least is None:
                ok = ok or n == s.min_step
            elif (n - s.min_step) % s.every == 0:
                if acc is None:
                    from ..rl.evaluation import accuracy
                    acc = accuracy(model, check, 0.0)
                    model.train()
                ok = ok or acc >= s.greedy_at_least
            if ok:
                taken[name] = (n, {k: v.detach().clone() for k, v in model.state_dict().items()})

    model, losses = supervised_train(cfg, lambda g: sft_batch(cfg.batch_size, g, mix), sft_loss, model,
                                     progress=progress, callback=after_step)
    return model, taken, losses
