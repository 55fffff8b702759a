"""An enumerable toy language model for lab11: every response is exactly two tokens.

With a handful of first tokens and a handful of second tokens there are only ``A * B`` possible
responses, so the reference policy pi_ref, the KL-regularized optimum

    pi*(y) = pi_ref(y) exp(r(y) / beta) / Z,

every reward expectation and every KL can be computed exactly, by summing over all responses.
That makes the toy LM the place to see the reward-KL frontier without sampling noise.

Responses are ordered row-major: response ``i * B + j`` is first token ``i`` then second token
``j``. Arrays: ``first_probs`` [A], ``second_probs`` [A, B] (row i: pi_ref(. | first token i)),
``rewards`` [A, B] (the reward pi* is tilted toward; a learned proxy in "hack") and
``true_rewards`` [A, B] (what we actually want; the same as ``rewards`` in "worked").

Scenarios (:func:`scenario`):

* ``"worked"``: first token a / b with pi_ref 0.7 / 0.3; second token x / y with 0.6 / 0.4 after a
  and 0.5 / 0.5 after b; rewards 0, 1 after a and 0, 2 after b. At beta = 1, pi* = (0.17217,
  0.31200, 0.06149, 0.45434) and the soft values are V(a) = 0.52314, V(b) = 1.43378.
* ``"hack"``: first token a / b (0.6 / 0.4), second token x / y / z. The proxy reward agrees with
  the true reward everywhere except on the rare response "bz", which it scores 2 while its true
  reward is 0. As beta falls, the true reward of pi* rises, peaks near KL = 0.5 nats and then falls
  as pi* piles onto "bz".

Everything here is numpy float64. Functions that take a policy accept any function with the
signature of :func:`tilted_optimum`, so lab11's experiments can run on the student's own code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..utils import check_float

SCENARIOS = ("worked", "hack")

#: The worked example's exact numbers (beta = 1), for tests and the notebook's "what you should see".
WORKED_PI_STAR = (0.17217, 0.31200, 0.06149, 0.45434)
WORKED_SOFT_VALUES = (0.52314, 1.43378)

OptimumFn = Callable[[np.ndarray, np.ndarray, float], np.ndarray]


def _as_array(name: str, x, what: str) -> np.ndarray:
    """``x`` as a float64 array, or a TypeError naming ``name`` and ``what`` it should hold."""
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be an array of {what}, got {type(x).__name__}")
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be an array of {what}: {e}") from None


def _as_prob_vector(name: str, p, ndim: int) -> np.ndarray:
    arr = _as_array(name, p, "probabilities")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must hold finite, non-negative probabilities, got {arr}")
    if not np.allclose(arr.sum(-1), 1.0, atol=1e-6):
        raise ValueError(f"{name} must sum to 1 along its last axis, got sums {arr.sum(-1)}")
    return arr


def _as_rewards(name: str, r, shape: tuple) -> np.ndarray:
    arr = _as_array(name, r, "numbers")
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr}")
    return arr


def _check_beta(beta) -> float:
    beta = check_float("beta", beta)
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    return beta


@dataclass(frozen=True, eq=False)
class ToyLM:
    """A two-token reference policy with rewards. See the module docstring for the layout."""

    name: str
    first_tokens: tuple
    second_tokens: tuple
    first_probs: np.ndarray
    second_probs: np.ndarray
    rewards: np.ndarray
    true_rewards: np.ndarray
    description: str = ""

    def __post_init__(self):
        A, B = len(self.first_tokens), len(self.second_tokens)
        first = _as_prob_vector("first_probs", self.first_probs, 1)
        second = _as_prob_vector("second_probs", self.second_probs, 2)
        if first.shape != (A,) or second.shape != (A, B):
            raise ValueError(f"first_probs must be [{A}] and second_probs [{A}, {B}], "
                             f"got {first.shape} and {second.shape}")
        object.__setattr__(self, "first_probs", first)
        object.__setattr__(self, "second_probs", second)
        object.__setattr__(self, "rewards", _as_rewards("rewards", self.rewards, (A, B)))
        object.__setattr__(self, "true_rewards", _as_rewards("true_rewards", self.true_rewards, (A, B)))

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.first_tokens), len(self.second_tokens)

    @property
    def responses(self) -> list[str]:
        """The A * B responses, row-major ("ax", "ay", "bx", ...)."""
        return [f + s for f in self.first_tokens for s in self.second_tokens]

    @property
    def ref_probs(self) -> np.ndarray:
        """[A * B] pi_ref of every whole response: pi_ref(first) * pi_ref(second | first)."""
        return (self.first_probs[:, None] * self.second_probs).ravel()

    @property
    def reward_vector(self) -> np.ndarray:
        """[A * B] the (proxy) reward of every response, row-major."""
        return self.rewards.ravel().copy()

    @property
    def true_reward_vector(self) -> np.ndarray:
        """[A * B] the true reward of every response, row-major."""
        return self.true_rewards.ravel().copy()

    def tempered(self, temperature: float) -> tuple[np.ndarray, np.ndarray]:
        """Per-token temperature on pi_ref: (first [A], second [A, B]); T = 0 is greedy."""
        return temper(self.first_probs, temperature), temper(self.second_probs, temperature)

    def tempered_probs(self, temperature: float) -> np.ndarray:
        """[A * B] probability of every response when each token is sampled at ``temperature``."""
        first, second = self.tempered(temperature)
        return (first[:, None] * second).ravel()


def scenario(name: str) -> ToyLM:
    """The toy LM of one scenario: ``"worked"`` or ``"hack"`` (see the module docstring)."""
    if name == "worked":
        return ToyLM(
            name="worked", first_tokens=("a", "b"), second_tokens=("x", "y"),
            first_probs=np.array([0.7, 0.3]),
            second_probs=np.array([[0.6, 0.4], [0.5, 0.5]]),
            rewards=np.array([[0.0, 1.0], [0.0, 2.0]]),
            true_rewards=np.array([[0.0, 1.0], [0.0, 2.0]]),
            description="the chapter's worked example: the likeliest responses are not the best ones")
    if name == "hack":
        proxy = np.array([[0.0, 0.5, 1.0], [0.0, 1.0, 2.0]])
        true = proxy.copy()
        true[1, 2] = 0.0  # "bz": the reward model's blind spot
        return ToyLM(
            name="hack", first_tokens=("a", "b"), second_tokens=("x", "y", "z"),
            first_probs=np.array([0.6, 0.4]),
            second_probs=np.array([[0.5, 0.3, 0.2], [0.6, 0.35, 0.05]]),
            rewards=proxy, true_rewards=true,
            description='a proxy reward that scores the rare response "bz" 2 although it is worth 0')
    raise ValueError(f"scenario name must be one of {SCENARIOS}, got {name!r}")


def temper(probs, temperature: float) -> np.ndarray:
    """probs [..., K] -> probs ** (1 / T), renormalised along the last axis (in log space).

    T = 0 puts all mass on the argmax (the first one on ties); T = 1 returns ``probs``.
    """
    p = _as_prob_vector("probs", probs, np.ndim(probs))
    T = check_float("temperature", temperature, minimum=0.0)
    if T == 0:
        out = np.zeros_like(p)
        np.put_along_axis(out, p.argmax(-1)[..., None], 1.0, axis=-1)
        return out
    with np.errstate(divide="ignore"):
        logit = np.log(p) / T
    logit = logit - logit.max(-1, keepdims=True)
    w = np.exp(logit)
    return w / w.sum(-1, keepdims=True)


def tilted_optimum(ref_probs, rewards, beta: float) -> np.ndarray:
    """[N] pi* = pi_ref e^(r / beta) / Z over all N responses, computed in log space.

    Zero-probability responses of pi_ref stay at 0; any beta > 0 works (no overflow).
    """
    ref = _as_prob_vector("ref_probs", ref_probs, 1)
    r = _as_rewards("rewards", rewards, ref.shape)
    beta = _check_beta(beta)
    with np.errstate(divide="ignore"):
        logits = np.log(ref) + r / beta
    logits = logits - logits.max()
    w = np.exp(logits)
    return w / w.sum()


def soft_values(second_probs, rewards, beta: float) -> np.ndarray:
    """[A] V(i) = beta log sum_j pi_ref(j | i) e^(r_ij / beta) (a stable log-sum-exp)."""
    second = _as_prob_vector("second_probs", second_probs, 2)
    r = _as_rewards("rewards", rewards, second.shape)
    beta = _check_beta(beta)
    with np.errstate(divide="ignore"):
        logits = np.log(second) + r / beta
    return beta * np.logaddexp.reduce(logits, axis=-1)


def token_level_optimum(first_probs, second_probs, rewards, beta: float):
    """pi* built backwards, one token at a time.

    Returns (first [A], second [A, B], values [A]): pi*(j | i) = pi_ref(j | i) e^((r_ij - V(i)) / beta)
    and pi*(i) = pi_ref(i) e^(V(i) / beta) / Z, with V from :func:`soft_values`.
    """
    first = _as_prob_vector("first_probs", first_probs, 1)
    second = _as_prob_vector("second_probs", second_probs, 2)
    if second.shape[0] != first.shape[0]:
        raise ValueError(f"second_probs must have {first.shape[0]} rows, got {second.shape}")
    r = _as_rewards("rewards", rewards, second.shape)
    beta = _check_beta(beta)
    values = soft_values(second, r, beta)
    with np.errstate(divide="ignore"):
        second_star = np.exp(np.log(second) + (r - values[:, None]) / beta)
    second_star = second_star / second_star.sum(-1, keepdims=True)  # only rounding to remove
    return tilted_optimum(first, values, beta), second_star, values


def kl_divergence(p, q) -> float:
    """Exact KL(p || q) in nats over a finite set (0 log 0 = 0; inf when p > 0 where q = 0)."""
    p = _as_prob_vector("p", p, 1)
    q = _as_prob_vector("q", q, 1)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    m = p > 0
    if np.any(q[m] == 0):
        return float("inf")
    return float(np.sum(p[m] * (np.log(p[m]) - np.log(q[m]))))


def expected_reward(p, rewards) -> float:
    """E_p[r] over a finite set of responses."""
    p = _as_prob_vector("p", p, 1)
    return float(p @ _as_rewards("rewards", rewards, p.shape))


def kl_objective(p, ref_probs, rewards, beta: float) -> float:
    """J(p) = E_p[r] - beta KL(p || pi_ref)."""
    return expected_reward(p, rewards) - _check_beta(beta) * kl_divergence(p, ref_probs)


def default_betas(n: int = 60, largest: float = 30.0, smallest: float = 0.03) -> np.ndarray:
    """[n] betas from large (pi* close to pi_ref) to small (pi* close to the reward's argmax)."""
    return np.geomspace(largest, smallest, n)


def default_temperatures() -> np.ndarray:
    """Temperatures for the frontier: from nearly greedy through T = 1 (pi_ref) to very flat."""
    return np.concatenate([np.geomspace(0.05, 1.0, 25, endpoint=False), np.geomspace(1.0, 20.0, 25)])


def _policy_stats(toy: ToyLM, p: np.ndarray) -> tuple[float, float, float]:
    return (kl_divergence(p, toy.ref_probs), expected_reward(p, toy.reward_vector),
            expected_reward(p, toy.true_reward_vector))


def _checked_policy(p, n: int, who: str) -> np.ndarray:
    try:
        arr = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{who} must return an array of {n} probabilities, got {type(p).__name__}") from None
    if arr.shape != (n,):
        raise ValueError(f"{who} must return shape ({n},), got {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or not np.isclose(arr.sum(), 1.0, atol=1e-6):
        raise ValueError(f"{who} must return finite probabilities that sum to 1, got {arr}")
    return arr


def frontier(toy: ToyLM, betas: Sequence[float] | None = None,
             optimum_fn: OptimumFn | None = None) -> dict[str, np.ndarray]:
    """The reward-KL frontier: pi* for each beta (default :func:`default_betas`).

    ``optimum_fn(ref_probs [N], rewards [N], beta) -> [N]`` computes pi* (default
    :func:`tilted_optimum`; pass the student's). Returns arrays: beta, kl_nats = KL(pi* || pi_ref),
    reward (the reward pi* is tilted toward), true_reward, and policies [len(betas), N].
    """
    if not isinstance(toy, ToyLM):
        raise TypeError(f"toy must be a ToyLM (see llmrl.lm.toylm.scenario), got {type(toy).__name__}")
    betas = default_betas() if betas is None else np.asarray([_check_beta(b) for b in betas])
    fn = tilted_optimum if optimum_fn is None else optimum_fn
    n = toy.ref_probs.size
    pols = np.stack([_checked_policy(fn(toy.ref_probs, toy.reward_vector, float(b)), n, "optimum_fn")
                     for b in betas]) if len(betas) else np.zeros((0, n))
    stats = np.array([_policy_stats(toy, p) for p in pols]).reshape(-1, 3)
    return {"beta": np.asarray(betas, dtype=float), "kl_nats": stats[:, 0], "reward": stats[:, 1],
            "true_reward": stats[:, 2], "policies": pols}


def temperature_curve(toy: ToyLM, temperatures: Sequence[float] | None = None) -> dict[str, np.ndarray]:
    """Reward and KL of pi_ref sampled at each temperature (every token tempered), exactly.

    Returns arrays: temperature, kl_nats = KL(pi_T || pi_ref), reward, true_reward, policies.
    """
    if not isinstance(toy, ToyLM):
        raise TypeError(f"toy must be a ToyLM (see llmrl.lm.toylm.scenario), got {type(toy).__name__}")
    temps = default_temperatures() if temperatures is None else np.asarray(
        [check_float("temperature", t, minimum=0.0) for t in temperatures], dtype=float)
    pols = np.stack([toy.tempered_probs(float(t)) for t in temps]) if len(temps) else np.zeros((0, toy.ref_probs.size))
    stats = np.array([_policy_stats(toy, p) for p in pols]).reshape(-1, 3)
    return {"temperature": temps, "kl_nats": stats[:, 0], "reward": stats[:, 1],
            "true_reward": stats[:, 2], "policies": pols}


def frontier_reward_at(front: dict, kl_nats) -> np.ndarray:
    """Reward of the pi* frontier at the given KLs (linear interpolation along increasing KL)."""
    order = np.argsort(front["kl_nats"])
    return np.interp(kl_nats, front["kl_nats"][order], front["reward"][order])


def true_reward_peak(toy: ToyLM, betas: Sequence[float] | None = None,
                     optimum_fn: OptimumFn | None = None) -> dict[str, float]:
    """Where the true reward of pi* is highest along the beta sweep: beta, kl_nats, reward, true_reward."""
    front = frontier(toy, default_betas(400, 100.0, 0.005) if betas is None else betas, optimum_fn)
    i = int(np.argmax(front["true_reward"]))
    return {k: float(front[k][i]) for k in ("beta", "kl_nats", "reward", "true_reward")}
