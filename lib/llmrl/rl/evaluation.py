"""Evaluation of a TinyLM policy on the addition task.

Greedy and sampled accuracy, the unbiased pass@k, mean per-token entropy, per-token KL between two
policies (exact, summed over the vocabulary) and answer diversity. Every
function takes a seed, so the same model gives the same numbers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..tasks.addition import TWO_DIGIT, Problems, eval_problems, is_answer, is_correct
from .losses import full_vocab_kl
from ..lm.sampling import Rollout, generate, masked_mean, response_logits


def pass_at_k(n, c, k):
    """Unbiased pass@k = 1 - C(n - c, k) / C(n, k), stable for large n (arrays broadcast).

    Computed as 1 - prod_{i = n - c + 1}^{n} (1 - k / i), which never forms a binomial coefficient.
    """
    n, c, k = np.broadcast_arrays(np.asarray(n), np.asarray(c), np.asarray(k))
    if np.any(n < 1) or np.any(c < 0) or np.any(c > n) or np.any(k < 1) or np.any(k > n):
        raise ValueError("pass_at_k needs 1 <= k <= n and 0 <= c <= n")
    out = np.empty(n.shape, dtype=float)
    for idx in np.ndindex(n.shape):
        ni, ci, ki = int(n[idx]), int(c[idx]), int(k[idx])
        if ni - ci < ki:
            out[idx] = 1.0
        else:
            i = np.arange(ni - ci + 1, ni + 1, dtype=float)
            out[idx] = 1.0 - float(np.prod(1.0 - ki / i))
    return out if out.shape else float(out)


def pass_at_k_per_problem(n: int, counts, k: int, pass_at_k_fn=None) -> np.ndarray:
    """[P] pass@k of each problem from its ``counts`` [P] of correct samples out of ``n``.

    ``pass_at_k_fn(n, c, k) -> float`` (a student's scalar version) is called once per problem;
    None uses :func:`pass_at_k`. A value that is not a finite probability raises ValueError.
    """
    if pass_at_k_fn is None:
        return np.asarray(pass_at_k(n, np.asarray(counts), k), dtype=float).reshape(-1)
    out = np.array([float(pass_at_k_fn(int(n), int(c), int(k))) for c in np.asarray(counts).reshape(-1)])
    if not np.all(np.isfinite(out)) or np.any(out < 0) or np.any(out > 1):
        raise ValueError(f"pass_at_k_fn must return probabilities in [0, 1], got {out[~((out >= 0) & (out <= 1))][:3]}")
    return out


@torch.no_grad()
def accuracy(model, problems: Problems, temperature: float = 0.0, n_samples: int = 1, seed: int = 0) -> float:
    """Share of correct responses (greedy when temperature = 0)."""
    r = generate(model, problems, n_samples, temperature, seed)
    return float(is_correct(r.responses, r.answers).float().mean())


def greedy_accuracy(model, problems: Problems | None = None) -> float:
    return accuracy(model, eval_problems() if problems is None else problems, 0.0)


def sampled_accuracy(model, problems: Problems | None = None, temperature: float = 1.0,
                     n_samples: int = 1, seed: int = 0) -> float:
    return accuracy(model, eval_problems() if problems is None else problems, temperature, n_samples, seed)


@torch.no_grad()
def correct_counts(model, problems: Problems, n_samples: int, temperature: float = 1.0, seed: int = 0) -> np.ndarray:
    """[N] number of correct answers among ``n_samples`` samples per problem."""
    r = generate(model, problems, n_samples, temperature, seed)
    return is_correct(r.responses, r.answers).view(len(problems), n_samples).sum(1).numpy()


@torch.no_grad()
def token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean entropy (nats) of softmax(logits) [B, R, V] over the True positions of mask [B, R]."""
    lp = torch.log_softmax(logits, -1)
    return float(masked_mean(-(lp.exp() * lp).sum(-1), mask))


@torch.no_grad()
def mean_token_entropy(model, rollout: Rollout) -> float:
    """Per-token entropy of ``model`` at the states of ``rollout`` (response positions only)."""
    return token_entropy(response_logits(model, rollout.tokens), rollout.response_mask)


@torch.no_grad()
def exact_token_kl(model_p, model_q, rollout: Rollout) -> float:
    """Mean per-token KL(p || q), summed over the vocabulary, at the states visited by ``rollout``."""
    lp = response_logits(model_p, rollout.tokens)
    lq = response_logits(model_q, rollout.tokens)
    return float(masked_mean(full_vocab_kl(lp, lq), rollout.response_mask))


def kl_to_teacher(student, teacher, problems: Problems | None = None, n_samples: int = 4,
                  seed: int = 0) -> float:
    """Per-token KL(student || teacher) on the student's own samples (T = 1)."""
    problems = eval_problems() if problems is None else problems
    return exact_token_kl(student, teacher, generate(student, problems, n_samples, 1.0, seed))


@torch.no_grad()
def distinct_answers(model, problems: Problems, n_samples: int = 8, temperature: float = 1.0,
                     seed: int = 0) -> float:
    """Mean number of distinct well-formed answers (:func:`llmrl.tasks.addition.is_answer`) among
    ``n_samples`` samples per problem; a malformed sample is no answer."""
    r = generate(model, problems, n_samples, temperature, seed)
    groups = [r.responses[i * n_samples:(i + 1) * n_samples] for i in range(len(problems))]
    return float(np.mean([len({x for x in g if is_answer(x)}) for g in groups]))


def evaluate(model, problems: Problems | None = None, n_samples: int = 16, ks: Sequence[int] = (1, 8, 16),
             temperature: float = 1.0, seed: int = 0, teacher=None, pass_at_k_fn=None) -> dict[str, float]:
    """One dictionary of the usual metrics: greedy accuracy, pass@k, entropy (and KL to a teacher).

    ``pass_at_k_fn(n, c, k)`` computes each problem's pass@k (a student's; default :func:`pass_at_k`).
    """
    problems = eval_problems(100, TWO_DIGIT) if problems is None else problems
    r = generate(model, problems, n_samples, temperature, seed)
    c = is_correct(r.responses, r.answers).view(len(problems), n_samples).sum(1).numpy()
    out = {"greedy_accuracy": greedy_accuracy(model, problems)}
    for k in ks:
        if k <= n_samples:
            out[f"pass@{k}"] = float(np.mean(pass_at_k_per_problem(n_samples, c, k, pass_at_k_fn)))
    out["entropy_token_mean_nats"] = mean_token_entropy(model, r)
    if teacher is not None:
        out["kl_to_teacher_exact_token_mean_nats"] = exact_token_kl(model, teacher, r)
    return out
