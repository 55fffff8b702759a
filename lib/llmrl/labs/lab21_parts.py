"""Lab 21's pieces that need no training run: Project 2's rubrics and its small-sum measures, Project 3's
bucket sampler, Project 5's pass@k curves and their crossing. :mod:`llmrl.labs.lab21` runs the
projects with them and re-exports every name here."""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np
import torch

from ..tasks.addition import BUCKETS, TWO_DIGIT, Problems, is_correct, sample_problems
from ..rl.evaluation import pass_at_k
from ..tasks.rewards import Rubric, RubricItem, binary_rubric, looks_thorough, partial_credit_rubric, stylish_rubric
from ..lm.sampling import generate
from ..utils import check_float, check_int


def rubric_for(arm: str, pitfall: RubricItem | None = None) -> Rubric:
    """'binary', 'partial', 'stylish_w<w>' (e.g. stylish_w1.25); a '+pitfall' suffix adds ``pitfall``."""
    base, plus = (arm[:-len("+pitfall")], True) if arm.endswith("+pitfall") else (arm, False)
    if base == "binary":
        r = binary_rubric()
    elif base == "partial":
        r = partial_credit_rubric()
    elif base.startswith("stylish_w"):
        try:
            w = float(base[len("stylish_w"):])
        except ValueError:
            raise ValueError(f"arm {arm!r}: expected stylish_w<number>, e.g. stylish_w1.5") from None
        r = stylish_rubric(w)
    else:
        raise ValueError(f"arm must be binary, partial or stylish_w<w> (optionally +pitfall), got {arm!r}")
    if plus:
        if pitfall is None:
            raise ValueError(f"arm {arm!r} needs a pitfall RubricItem (pitfall=...)")
        r = r.with_item(pitfall)
    return r


def pad_share_small_sums(responses: Sequence[str], answers: Sequence[int]) -> float:
    """Share of responses with 3+ digits among problems whose sum is below 100 (nan if none)."""
    small = [looks_thorough(r, a) for r, a in zip(responses, answers) if a < 100]
    return float(np.mean(small)) if small else float("nan")


@lru_cache(maxsize=1)
def two_digit_share_large() -> float:
    """The share of 2-digit + 2-digit training problems whose sum has 3 digits (20,000 drawn with
    seed 0; computed once: the widget asks for it at every point of its curves)."""
    return float(np.mean([a >= 100 for a in sample_problems(20000, TWO_DIGIT, 0).answers]))


def honest_vs_pad(w: float, accuracy_small: float, accuracy_large: float | None = None,
                  share_large: float | None = None) -> dict[str, float]:
    """Expected stylish-rubric reward per answer of two policies on the 2-digit training prompts.

    "honest" answers as now: exact with probability ``accuracy_small`` on sums < 100 and
    ``accuracy_large`` on sums >= 100 (whose honest answers have 3 digits anyway). "pad" writes
    3+ digits everywhere: it keeps the large-sum reward and trades the small-sum exact credit for
    ``w``. So padding pays exactly when w > accuracy_small.
    """
    w = check_float("w", w, minimum=0.0)
    p_s = check_float("accuracy_small", accuracy_small, minimum=0.0)
    p_l = p_s if accuracy_large is None else check_float("accuracy_large", accuracy_large, minimum=0.0)
    q = check_float("share_large", two_digit_share_large() if share_large is None else share_large, minimum=0.0)
    large = p_l * 1.0 + w  # 3-digit answers earn the style credit whether right or not
    honest = (1 - q) * p_s + q * large
    pad = (1 - q) * w + q * large
    return {"honest": honest, "pad": pad, "threshold_w": p_s, "share_large": q}


class BucketSampler:
    """``prompt_sampler(n, generator) -> Problems`` over BUCKETS that records what it served.

    mode "target" (only ``target``), "uniform" or "learnability": a softmax bandit over each bucket's
    running learnability reward L_b (EMA with rate ``ema``, start ``init``), where one group's reward
    is 0 when none or all of its samples succeed, else 1 - p_hat (Absolute Zero). ``rare_group`` = m
    serves a ``rare`` prompt as m adjacent copies whose samples form one group of m * G
    (see :meth:`advantages`). :meth:`observe` takes the step's per-sample correctness.
    """

    def __init__(self, mode: str = "learnability", buckets: Sequence[str] = BUCKETS, target: str = "3d+1d",
                 temperature: float = 0.1, ema: float = 0.1, init: float = 0.5, rare: str = "1d+1d",
                 rare_group: int = 1, group_size: int = 8):
        if mode not in ("target", "uniform", "learnability"):
            raise ValueError(f"mode must be 'target', 'uniform' or 'learnability', got {mode!r}")
        for b in list(buckets) + [target, rare]:
            if b not in BUCKETS:
                raise ValueError(f"unknown bucket {b!r}; known: {BUCKETS}")
        self.mode, self.buckets, self.target, self.rare = mode, tuple(buckets), target, rare
        self.temperature = check_float("temperature", temperature, minimum=1e-6)
        self.ema = check_float("ema", ema, minimum=0.0)
        self.rare_group = check_int("rare_group", rare_group, minimum=1)
        self.group_size = check_int("group_size", group_size, minimum=1)
        self.learnability = {b: float(init) for b in self.buckets}
        self.usage: list[dict[str, float]] = []      # share of samples per bucket, one dict per step
        self.weights: list[dict[str, float]] = []    # the bandit's probabilities, one dict per step
        self.last: Problems | None = None
        self.last_groups: torch.Tensor | None = None  # [n] group id of each prompt slot

    def probabilities(self) -> dict[str, float]:
        if self.mode == "target":
            return {b: float(b == self.target) for b in self.buckets}
        if self.mode == "uniform":
            return {b: 1.0 / len(self.buckets) for b in self.buckets}
        z = torch.tensor([self.learnability[b] for b in self.buckets]) / self.temperature
        return dict(zip(self.buckets, torch.softmax(z, 0).tolist()))

    def __call__(self, n: int, generator: torch.Generator | None = None) -> Problems:
        probs = self.probabilities()
        w = torch.tensor([probs[b] for b in self.buckets])
        slots, units = 0, []
        while slots < n:
            b = self.buckets[int(torch.multinomial(w, 1, generator=generator))]
            m = self.rare_group if b == self.rare else 1
            if slots + m > n:  # a super-group that does not fit: fill with ordinary buckets
                if all(x == self.rare for x in self.buckets):
                    m = n - slots
                else:
                    continue
            units.append((b, m))
            slots += m
        parts, groups = [], []
        for gid, (b, m) in enumerate(units):
            parts.append(sample_problems(1, [b], generator).repeat(m))
            groups += [gid] * m
        self.last = Problems(torch.cat([p.a for p in parts]), torch.cat([p.b for p in parts]),
                             torch.cat([p.bucket for p in parts]))
        self.last_groups = torch.tensor(groups)
        counts = torch.bincount(self.last.bucket, minlength=len(BUCKETS)).float() / n
        self.usage.append({b: float(counts[BUCKETS.index(b)]) for b in self.buckets})
        self.weights.append(probs)
        return self.last

    def observe(self, correct: torch.Tensor) -> None:
        """Update the running learnability from ``correct`` [n * G] of the last served prompts."""
        if self.last is None:
            return
        G = self.group_size
        c = correct.float().view(len(self.last), G)
        for gid in self.last_groups.unique().tolist():
            rows = (self.last_groups == gid).nonzero().flatten()
            p = float(c[rows].mean())
            reward = 0.0 if p in (0.0, 1.0) else 1.0 - p
            b = BUCKETS[int(self.last.bucket[rows[0]])]
            self.learnability[b] = (1 - self.ema) * self.learnability[b] + self.ema * reward

    def advantages(self, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        """[B] mean-baseline advantages over each served group (m * G samples for a super-group)."""
        r = rewards.float().view(-1, group_size)
        ids = self.last_groups
        out = torch.empty_like(r)
        for gid in ids.unique().tolist():
            rows = (ids == gid).nonzero().flatten()
            out[rows] = r[rows] - r[rows].mean()
        return out.reshape(-1)



def _eval_seed(seed: int, evaluation: int, bucket: int) -> int:
    """Project 3's sampling seed for one evaluation of one bucket (distinct for every triple)."""
    return 1_000_003 * evaluation + 1_009 * bucket + seed


def pass_curves(model, problems: Problems, n_samples: int, seed: int, temperature: float = 1.0) -> list[float]:
    """pass@k for k = 1..n_samples of ``model`` on ``problems`` (``n_samples`` draws at ``temperature``)."""
    r = generate(model, problems, n_samples, temperature, seed)
    c = is_correct(r.responses, r.answers).view(len(problems), n_samples).sum(1).numpy()
    return [float(np.mean(pass_at_k(n_samples, c, k))) for k in range(1, n_samples + 1)]


def crossing_k(before: Sequence[float], after: Sequence[float]) -> int | None:
    """The smallest k at which the base model's pass@k is at least the trained model's (None: never)."""
    for k, (b, a) in enumerate(zip(before, after), start=1):
        if b >= a:
            return k
    return None
