"""What one RL run holds between steps: the run (:class:`RLRun`) with its scorer, hooks and random
streams, the scored batch of a step and the history of records (its optimizer: :mod:`llmrl.rl.step`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
import torch

from ..backends.protocol import PolicyBackend, completion_logits, completion_logits_of
from ..lm.sampling import Rollout
from ..lm.stacked import log_softmax
from .config import RLConfig


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
    log-softmax of :func:`llmrl.lm.stacked.log_softmax`)."""
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
    optimizer: object  # llmrl.rl.step.PolicyOptimizer, or a wrapper with its zero_grad / backward / step
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


