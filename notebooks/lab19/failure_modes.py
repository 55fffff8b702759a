# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 19: failure modes you can watch happen
#
# Optimizing a reward is only as good as the reward. In this lab you make three classic failures
# happen on purpose, small enough to run on a laptop, and measure them:
#
# 1. **Overoptimization.** Pick the best of n responses by a proxy score and watch the true (gold)
#    score rise, peak and fall as n grows. Everything here is exact arithmetic, no training.
# 2. **Reward hacking.** Train the tiny addition model (TinyLM) with RL against a reward that has a
#    loophole, watch it find the loophole, then close it with a KL penalty that you write.
# 3. **Entropy collapse.** Train with several gradient epochs per batch, watch the policy's entropy
#    drain away, and find out which tokens PPO's upper clip silences.
#
# Fill in every cell that says `raise NotImplementedError()` and run the test cell below it. The
# visible tests catch most mistakes; the grader runs a few more. The training runs you would need
# for the full pictures take minutes, so the plots show stored runs of the course's reference code
# and your own code runs the first stretch of each live, drawn on top as black dots.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from llmrl import overopt
from llmrl.labs import lab19
from llmrl.losses import LossBatch
from llmrl.utils import grading_mode, set_threads

set_threads(1)
EXPECTED = lab19.EXPECTED  # the handout's "what you should see"
REFERENCE = lab19.load_reference()  # stored full-length runs of parts 2 and 3
LIVE_STEPS = 3 if grading_mode() else 30  # steps of each live run (the stored runs are longer)

# %% [markdown]
# ## Part 1: overoptimization of best-of-n
#
# Best-of-n sampling draws n responses from the base policy and keeps the one a reward model
# likes most. It is the simplest way to optimize against a reward, and it has a closed-form
# distance from the base policy: the KL divergence of the best-of-n policy from the base policy is
#
# $$\mathrm{KL}_n = \log n - \frac{n-1}{n} \quad\text{nats.}$$
#
# Gao et al. plot the gold score against $d = \sqrt{\mathrm{KL}}$ and find the curve
# $d\,(\alpha - \beta d)$: the gain grows, peaks at $d = \alpha / 2\beta$ and then turns negative.
#
# ### Task 1a: the KL of best-of-n
#
# Write `bon_kl(n)`. It must work for a single int and for a numpy array of ints.


# %% nbgrader={"grade": false, "grade_id": "task1a_bon_kl", "locked": false, "schema_version": 3, "solution": true, "task": false}
def bon_kl(n):
    """KL(best-of-n || base) in nats: log n - (n - 1) / n.

    n: int >= 1, or a numpy array of them
    returns: float, or a float array of n's shape
    """
    ### BEGIN SOLUTION
    n = np.asarray(n, dtype=float)
    out = np.log(n) - (n - 1) / n
    return float(out) if out.ndim == 0 else out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task1a_bon_kl", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
assert abs(bon_kl(1)) < 1e-12, "best-of-1 is the base policy: its KL is 0"
assert abs(bon_kl(2) - (np.log(2) - 0.5)) < 1e-9, f"bon_kl(2) should be log 2 - 1/2, got {bon_kl(2)}"
assert abs(bon_kl(10) - 1.4026) < 1e-3, f"bon_kl(10) should be about 1.40 nats, got {bon_kl(10)}"
print("visible tests for task 1a passed")

### BEGIN HIDDEN TESTS
_ns = np.array([1, 3, 10, 100, 3000])
_got = np.asarray(bon_kl(_ns), dtype=float)
assert _got.shape == (5,), f"an array of n gives an array of the same shape, got {_got.shape}"
assert np.allclose(_got, np.log(_ns) - (_ns - 1) / _ns), "wrong values for an array of n"
assert np.all(np.diff(_got) > 0), "the KL grows with n"
### END HIDDEN TESTS

# %% [markdown]
# ### Task 1b: the exact expected score of best-of-n from a pool
#
# Suppose we have a pool of $M$ responses with proxy scores and gold scores. Best-of-n draws n of
# them uniformly **with replacement** and keeps the one with the highest proxy score. Sort the
# pool by proxy score, lowest first, and number the responses $k = 1, \dots, M$. The winner is
# response $k$ or lower exactly when all n draws are among the lowest $k$, which happens with
# probability $(k/M)^n$. So the winner is exactly response $k$ with probability
#
# $$w_k = \left(\frac{k}{M}\right)^n - \left(\frac{k-1}{M}\right)^n ,$$
#
# and the expected proxy and gold scores of best-of-n are $\sum_k w_k\,\text{proxy}_{(k)}$ and
# $\sum_k w_k\,\text{gold}_{(k)}$, where $(k)$ is the $k$-th response in proxy order. No simulation
# is needed, and the answer is exact for the pool.
#
# A hand example: three responses with proxy scores 0.5, 2.0, 1.0 and best-of-2. The top
# response (proxy 2.0) wins with probability $1 - (2/3)^2 = 5/9$, the middle one with
# $(2/3)^2 - (1/3)^2 = 3/9$ and the lowest with $1/9$.
#
# Write `best_of_n_stats`. Sort with `np.argsort` and use the same order for both scores.


# %% nbgrader={"grade": false, "grade_id": "task1b_best_of_n_stats", "locked": false, "schema_version": 3, "solution": true, "task": false}
def best_of_n_stats(proxy, gold, n):
    """Expected proxy and gold score of the best-of-n response from a pool.

    proxy: float array [M], the proxy score of each response in the pool
    gold:  float array [M], the gold score of the same responses
    n:     int >= 1
    returns: (expected_proxy, expected_gold), two floats
    """
    ### BEGIN SOLUTION
    proxy = np.asarray(proxy, dtype=float)
    gold = np.asarray(gold, dtype=float)
    M = len(proxy)
    order = np.argsort(proxy)
    k = np.arange(1, M + 1)
    w = (k / M) ** n - ((k - 1) / M) ** n
    return float(w @ proxy[order]), float(w @ gold[order])
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task1b_best_of_n_stats", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
_proxy, _gold = np.array([0.5, 2.0, 1.0]), np.array([1.0, -1.0, 3.0])
_p, _g = best_of_n_stats(_proxy, _gold, 2)
assert abs(_p - (1 * 0.5 + 3 * 1.0 + 5 * 2.0) / 9) < 1e-9, f"hand example: expected proxy 1.722, got {_p}"
assert abs(_g - (1 * 1.0 + 3 * 3.0 + 5 * -1.0) / 9) < 1e-9, f"hand example: expected gold 0.556, got {_g}"
_p, _g = best_of_n_stats(_proxy, _gold, 1)
assert abs(_p - _proxy.mean()) < 1e-9 and abs(_g - _gold.mean()) < 1e-9, "best-of-1 is a uniform draw: the means"
print("visible tests for task 1b passed")

### BEGIN HIDDEN TESTS
# A constant gold score: the weights must sum to one (off-by-one weights do not).
_rng = np.random.default_rng(7)
_proxy = _rng.standard_normal(40)
assert abs(best_of_n_stats(_proxy, np.full(40, 2.5), 5)[1] - 2.5) < 1e-9, "the rank weights must sum to 1"
# Against brute-force simulation of best-of-n with replacement.
_gold = _rng.standard_normal(40)
_n = 4
_idx = _rng.integers(0, 40, size=(200_000, _n))
_win = _idx[np.arange(len(_idx)), _proxy[_idx].argmax(1)]
_p, _g = best_of_n_stats(_proxy, _gold, _n)
assert abs(_p - _proxy[_win].mean()) < 0.01, f"proxy {_p} disagrees with simulation {_proxy[_win].mean()}"
assert abs(_g - _gold[_win].mean()) < 0.01, f"gold {_g} disagrees with simulation {_gold[_win].mean()}"
# Large n: the winner is (almost surely) the top response.
_p, _g = best_of_n_stats(_proxy, _gold, 100_000)
assert abs(_g - _gold[_proxy.argmax()]) < 1e-6, "for huge n the best-of-n is the pool's top response"
### END HIDDEN TESTS

# %% [markdown]
# ### Task 1c: fitting Gao et al.'s curve
#
# Fit $\text{gain} \approx d(\alpha - \beta d) = \alpha d - \beta d^2$ by least squares (no
# intercept: best-of-1 has $d = 0$ and gain 0). It is linear in $(\alpha, \beta)$: build a
# two-column design matrix and call `np.linalg.lstsq`. Mind the sign of $\beta$.


# %% nbgrader={"grade": false, "grade_id": "task1c_fit_gao_bon", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fit_gao_bon(d, gold_gain):
    """Least-squares (alpha, beta) of gold_gain ~ d * (alpha - beta * d).

    d:         float array [K], sqrt of the KL of each point
    gold_gain: float array [K]
    returns:   (alpha, beta), two floats
    """
    ### BEGIN SOLUTION
    d = np.asarray(d, dtype=float)
    A = np.stack([d, -d * d], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(A, np.asarray(gold_gain, dtype=float), rcond=None)
    return float(alpha), float(beta)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task1c_fit_gao_bon", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
_d = np.linspace(0.2, 2.6, 12)
_a, _b = fit_gao_bon(_d, _d * (1.1 - 0.47 * _d))
assert abs(_a - 1.1) < 1e-6 and abs(_b - 0.47) < 1e-6, f"exact data d(1.1 - 0.47 d): expected (1.1, 0.47), got ({_a}, {_b})"
print("visible tests for task 1c passed")

### BEGIN HIDDEN TESTS
# Noisy data against the normal equations; a curve that keeps rising has beta <= 0.
_rng = np.random.default_rng(3)
_d = np.sqrt(overopt.bon_kl(np.array([1, 2, 3, 5, 10, 30, 100, 300, 1000])))
_y = _d * (0.8 - 0.2 * _d) + 0.05 * _rng.standard_normal(len(_d))
_X = np.stack([_d, -_d ** 2], 1)
_want = np.linalg.solve(_X.T @ _X, _X.T @ _y)
_a, _b = fit_gao_bon(_d, _y)
assert np.allclose([_a, _b], _want, atol=1e-8), f"expected {_want}, got ({_a}, {_b})"
_a, _b = fit_gao_bon(_d, 0.5 * _d + 0.1 * _d ** 2)
assert abs(_a - 0.5) < 1e-8 and abs(_b + 0.1) < 1e-8, "a curve bending upwards has a negative beta"
### END HIDDEN TESTS

# %% [markdown]
# ### The experiment: a length-biased proxy
#
# `llmrl.overopt` holds a small generative model of a reward pool. Every response has a hidden
# *quality* $q \sim N(0, 1)$ and some *padding* $\ell \ge 0$ (extra length, exponentially
# distributed). The gold reward likes quality and dislikes padding; the proxy likes quality, is
# fooled by length with strength $b$ and is noisy with strength $\sigma$:
#
# $$\text{gold} = q - 0.3\,\ell, \qquad \text{proxy} = q + b\,\ell + \sigma\,\varepsilon .$$
#
# The exponential tail of the padding is heavier than the Gaussian tails of $q$ and
# $\varepsilon$, so the proxy's very top is increasingly made of padded responses. The cell
# below draws a pool of 200,000 responses and computes the best-of-n curves with **your**
# functions, next to the exact population values (integrated numerically, as if the pool were
# infinite).

# %%
NS = overopt.DEFAULT_NS


def pool_curves_with(pool, ns=NS):
    """The best-of-n curves of a pool, computed with the student's functions."""
    stats = np.array([best_of_n_stats(pool.proxy, pool.gold, int(n)) for n in ns])
    kl = np.asarray(bon_kl(np.array(ns)), dtype=float)
    return {"n": np.array(ns), "kl": kl, "d": np.sqrt(kl),
            "proxy_gain": stats[:, 0] - pool.proxy.mean(), "gold_gain": stats[:, 1] - pool.gold.mean()}


biased = pool_curves_with(overopt.make_pool(b=1.0, sigma=1.0, seed=0))
noisy = pool_curves_with(overopt.make_pool(b=0.0, sigma=1.0, seed=0))
exact = overopt.exact_best_of_n(NS, b=1.0, sigma=1.0)
fit_biased = fit_gao_bon(biased["d"], biased["gold_gain"])
fit_noisy = fit_gao_bon(noisy["d"], noisy["gold_gain"])

fig = lab19.overopt_figure({"length-biased proxy: b = 1, sigma = 1": (biased, fit_biased, exact),
                            "noise-only proxy: b = 0, sigma = 1": (noisy, fit_noisy, None)},
                           lab19.ARTIFACTS / "overopt.png")
plt.show()

_pk = overopt.peak(biased)
part1 = {"bon_peak_n": _pk["n"], "bon_peak_kl": _pk["kl"], "bon_peak_gold_gain": _pk["gold_gain"],
         "bon_gold_gain_n3000_sign": "negative" if biased["gold_gain"][-1] < 0 else "positive",
         "gao_alpha": fit_biased[0], "gao_beta": fit_biased[1], "noise_only_gao_beta": fit_noisy[1],
         "pool_gold_gain_n3000": float(biased["gold_gain"][-1]), "exact_gold_gain_n3000": float(exact["gold_gain"][-1])}
print(lab19.expected_report(part1))
print(f"gold gain at best-of-10: {biased['gold_gain'][list(NS).index(10)]:+.3f}")

# %% [markdown]
# **Reading the plot.** With the length bias, the gold gain climbs to about +0.7 around
# best-of-10 to best-of-30 and then sinks, while the proxy gain keeps climbing: past the peak, a
# higher proxy score buys more padding than quality. The fitted $\alpha, \beta$ describe it well.
# With a noise-only proxy the gold gain never turns down ($\beta \approx 0$): noise wastes
# samples but does not point the search anywhere harmful.
#
# Do not over-read the far right of the pool curves. At $n = 3000$ the winner almost always comes
# from the top few hundred of the 200,000 pooled responses, so those points are a small sample:
# here the pool says the gain is negative at best-of-3000 while the exact population value is
# still slightly positive. (This model's pool is off by about 0.1 there; the handout's model
# was off by 0.5.) Try another `seed` in `make_pool` and watch the right end move while the
# left end stays put.
#
# The sliders below redraw the exact curves for any $b$ and $\sigma$ (it takes a fraction of a
# second). Which of the two makes the gold curve turn down, and which only flattens it?

# %% tags=["nbval-ignore-output"]
display(lab19.bon_widget(b=1.0, sigma=1.0))

# %% [markdown]
# ## Part 2: reward hacking
#
# The addition task: the prompt is `37+48=` and the right response is `85`. The SFT checkpoint
# answers about half of the two-digit problems correctly when it samples at temperature 1. The
# gold reward is exact match. The proxy reward looks reasonable but has two flaws; read it
# before you go on:

# %%
import inspect

from llmrl.rewards import proxy_reward

print(inspect.getsource(proxy_reward))
print(proxy_reward(["85", "8512", "850", "84"], [85, 85, 85, 85]))

# %% [markdown]
# **Make a prediction before you scroll.** Full credit when the answer appears *anywhere* in
# the response, plus 0.1 per character (a response has at most 4 characters). What will RL learn
# to write? What will happen to exact-match accuracy, to the response length and to the KL from
# the SFT model?
#
# ### Task 2: a KL penalty in the reward
#
# The standard leash keeps the policy close to the reference (SFT) model by subtracting
# $\beta$ times the log-ratio summed over the response from each reward:
#
# $$\tilde r_i = r_i - \beta \sum_{t \,\in\, \text{response}_i} \big(\log\pi(y_t) - \log\pi_\text{ref}(y_t)\big).$$
#
# Responses are padded to a common length: sum over the real tokens only (`mask` is True
# there). The log-probs come from the sampling step, so no gradient flows through this.


# %% nbgrader={"grade": false, "grade_id": "task2_kl_penalized_rewards", "locked": false, "schema_version": 3, "solution": true, "task": false}
def kl_penalized_rewards(rewards, logprobs, ref_logprobs, mask, beta):
    """Rewards minus beta times the summed log-ratio of each response to the reference model.

    rewards:      float [B]
    logprobs:     float [B, R], log pi of each sampled token under the policy
    ref_logprobs: float [B, R], log pi_ref of the same tokens
    mask:         bool  [B, R], True for real response tokens
    beta:         float >= 0
    returns:      float [B]
    """
    ### BEGIN SOLUTION
    log_ratio = torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs))
    return rewards - beta * log_ratio.sum(dim=1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task2_kl_penalized_rewards", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
_r = torch.tensor([1.0, 0.0])
_lp = torch.tensor([[-0.1, -0.2], [-1.0, -0.5]])
_ref = torch.tensor([[-0.6, -0.2], [-0.5, -0.5]])
_mask = torch.ones(2, 2, dtype=torch.bool)
_out = kl_penalized_rewards(_r, _lp, _ref, _mask, 0.1)
assert _out.shape == (2,), f"one shaped reward per response: expected shape (2,), got {tuple(_out.shape)}"
assert torch.allclose(_out, torch.tensor([0.95, 0.05])), f"expected [0.95, 0.05], got {_out}"
assert torch.allclose(kl_penalized_rewards(_r, _lp, _ref, _mask, 0.0), _r), "beta = 0 leaves the rewards alone"
print("visible tests for task 2 passed")

### BEGIN HIDDEN TESTS
# Padding holds garbage (even -inf under the reference): it must not enter the sum.
_lp = torch.tensor([[-0.1, -0.2, -3.0], [-1.0, -0.5, 0.0]])
_ref = torch.tensor([[-0.6, -0.2, -float("inf")], [-0.5, -0.5, -9.0]])
_mask = torch.tensor([[True, True, False], [True, True, False]])
_out = kl_penalized_rewards(_r, _lp, _ref, _mask, 0.1)
assert torch.isfinite(_out).all(), "masked positions leaked into the sum (got a non-finite reward)"
assert torch.allclose(_out, torch.tensor([0.95, 0.05])), f"only real tokens count: expected [0.95, 0.05], got {_out}"
# Direction: a policy that raised the probability of its tokens is penalised.
_out = kl_penalized_rewards(torch.zeros(1), torch.tensor([[-0.1]]), torch.tensor([[-2.1]]), torch.ones(1, 1, dtype=torch.bool), 0.5)
assert torch.allclose(_out, torch.tensor([-1.0])), f"log pi - log pi_ref = +2 with beta 0.5 costs 1.0, got {_out}"
### END HIDDEN TESTS

# %% [markdown]
# ### The experiment
#
# Four runs from the SFT checkpoint, 16 prompts with 8 samples each per step, learning rate
# 5e-4, 300 steps: the proxy reward without a KL penalty, with $\beta = 0.05$ and, for
# comparison, the gold (exact-match) reward. The curves are stored runs of the reference
# code (a 300-step run takes about a minute on a quiet laptop); the cell first runs 30 steps of
# the $\beta = 0.05$ run **with your** `kl_penalized_rewards` and draws them as a black dashed line.
# With a correct function it lies on the orange curve (same seed, so usually exactly).

# %% tags=["nbval-ignore-output"]
live_kl = lab19.hacking_run(0.05, kl_reward_fn=kl_penalized_rewards, steps=LIVE_STEPS)
_stored = lab19.as_series(REFERENCE["hacking"]["0.05"])["shaped_reward_mean"][:LIVE_STEPS]
print("your live run's shaped rewards match the stored run:",
      bool(np.allclose(live_kl.series("shaped_reward_mean"), _stored, atol=1e-3)))

# %%
runs = {"proxy, no KL": REFERENCE["hacking"]["0"], "proxy, beta = 0.05": REFERENCE["hacking"]["0.05"],
        "gold reward": REFERENCE["hacking"]["gold"]}
fig = lab19.plot_hacking(runs, lab19.ARTIFACTS / "hack.png", live={"your code, beta = 0.05": live_kl})
plt.show()
_h, _k, _g = (lab19.hack_summary(r) for r in runs.values())
part2 = {"hack_accuracy_start": _h["accuracy_start"], "hack_accuracy_peak": _h["accuracy_peak"],
         "hack_peak_step": _h["peak_step"], "hack_final_accuracy": _h["final_accuracy"],
         "hack_final_length": _h["final_length"], "hack_final_kl": _h["final_kl"],
         "kl005_final_accuracy": _k["final_accuracy"], "gold_final_accuracy": _g["final_accuracy"]}
print(lab19.expected_report(part2))

# %% [markdown]
# **What happened.** Without a penalty the policy first gets better at addition (the proxy
# rewards a correct answer too), then discovers that `85` followed by more digits still contains
# `85` and earns the length bonus. Within a few dozen steps every response has the maximum 4
# characters, the summed log-ratio to the SFT model is in the double digits, and exact-match
# accuracy is zero, while the proxy reward is higher than ever. With $\beta = 0.05$ the extra
# 0.1 to 0.2 of length bonus is not worth the several nats it takes to write unusual digits
# after the answer, so the policy learns addition instead and ends close to the gold-reward run.
#
# The slider shows the stored sweep $\beta \in \{0, 0.01, 0.02, 0.05\}$. Where does the leash
# stop working?

# %% tags=["nbval-ignore-output"]
display(lab19.beta_widget(REFERENCE))

# %% [markdown]
# ## Part 3: entropy collapse and the clip
#
# PPO and GRPO reuse each batch for several gradient steps and stop a token's gradient once its
# probability ratio $\rho = \pi_\theta / \pi_\text{old}$ has moved far enough in the direction
# its advantage $A$ pushes it:
#
# $$L = -\operatorname{mean}_{\text{tokens}} \min\big(\rho A,\ \operatorname{clip}(\rho, 1 - \epsilon_\text{low}, 1 + \epsilon_\text{high}) A\big).$$
#
# The mean is over all real tokens of the batch together (the token-level mean of DAPO), not
# per response. DAPO's *clip-higher* uses a larger $\epsilon_\text{high}$ than $\epsilon_\text{low}$.
#
# ### Task 3: the clipped surrogate
#
# Write `clipped_pg_loss(batch)`. `batch` is an `llmrl.losses.LossBatch`; use its fields
# `logprobs` [B, R] (these carry the gradient), `old_logprobs` [B, R], `advantages` [B] (one per
# response: broadcast it over the tokens), `mask` [B, R] bool, `eps_low` and `eps_high`. Either
# epsilon may be `None`, which removes that bound. Return the scalar loss.
#
# Six cases to keep in mind (with $\epsilon = 0.2$): for $A > 0$ the gradient is switched off only
# when $\rho > 1.2$; for $A < 0$ only when $\rho < 0.8$. In the other four cases ($A > 0$ with
# $\rho < 0.8$ or in range, $A < 0$ with $\rho > 1.2$ or in range) the gradient flows.


# %% nbgrader={"grade": false, "grade_id": "task3_clipped_pg_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def clipped_pg_loss(batch):
    """PPO/GRPO clipped surrogate loss with separate lower and upper clip, token-level mean.

    batch.logprobs:     float [B, R], log pi_theta (requires grad)
    batch.old_logprobs: float [B, R], log pi_old (the policy that sampled)
    batch.advantages:   float [B]
    batch.mask:         bool  [B, R]
    batch.eps_low, batch.eps_high: float or None (None = no bound on that side)
    returns: scalar tensor
    """
    ### BEGIN SOLUTION
    adv = batch.advantages[:, None]
    ratio = torch.exp(batch.logprobs - batch.old_logprobs)
    lo = -float("inf") if batch.eps_low is None else 1 - batch.eps_low
    hi = float("inf") if batch.eps_high is None else 1 + batch.eps_high
    surrogate = torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
    m = batch.mask.to(surrogate.dtype)
    return -(surrogate * m).sum() / m.sum()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task3_clipped_pg_loss", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
def _case(ratio, adv, eps_low=0.2, eps_high=0.2):
    """Loss and d loss / d logprob for one token with the given ratio and advantage."""
    lp = torch.tensor([[float(np.log(ratio))]], requires_grad=True)
    b = LossBatch(logprobs=lp, logits=torch.zeros(1, 1, 3), old_logprobs=torch.zeros(1, 1),
                  mask=torch.ones(1, 1, dtype=torch.bool), advantages=torch.tensor([float(adv)]),
                  rewards=torch.zeros(1), eps_low=eps_low, eps_high=eps_high)
    out = clipped_pg_loss(b)
    loss = out[0] if isinstance(out, tuple) else out
    loss.backward()
    return loss.item(), lp.grad.item()


# (ratio, advantage) -> (loss, gradient w.r.t. log pi) with eps = 0.2
for (_rho, _a), (_loss, _grad) in {(1.5, 1.0): (-1.2, 0.0),       # A > 0, above 1 + eps: clipped
                                   (1.1, 1.0): (-1.1, -1.1),      # A > 0, in range
                                   (0.5, 1.0): (-0.5, -0.5),      # A > 0, below 1 - eps: not clipped
                                   (0.5, -1.0): (0.8, 0.0),       # A < 0, below 1 - eps: clipped
                                   (0.9, -1.0): (0.9, 0.9),       # A < 0, in range
                                   (1.5, -1.0): (1.5, 1.5)}.items():  # A < 0, above 1 + eps: not clipped
    _l, _gr = _case(_rho, _a)
    assert abs(_l - _loss) < 1e-5, f"ratio {_rho}, advantage {_a}: expected loss {_loss}, got {_l}"
    assert abs(_gr - _grad) < 1e-5, f"ratio {_rho}, advantage {_a}: expected gradient {_grad}, got {_gr}"
print("visible tests for task 3 passed")

### BEGIN HIDDEN TESTS
# Separate bounds, and None removes one.
assert abs(_case(1.25, 1.0, 0.2, 0.28)[0] + 1.25) < 1e-5, "eps_high = 0.28 must not clip a ratio of 1.25"
assert abs(_case(1.35, 1.0, 0.2, 0.28)[0] + 1.28) < 1e-5, "eps_high = 0.28 clips 1.35 to 1.28"
assert abs(_case(0.75, -1.0, 0.3, 0.2)[1] - 0.75) < 1e-5, "eps_low = 0.3: a ratio of 0.75 with A < 0 is not clipped"
assert abs(_case(3.0, 1.0, 0.2, None)[1] + 3.0) < 1e-5, "eps_high=None: no upper bound, the gradient flows"
assert abs(_case(0.1, -1.0, None, 0.2)[1] - 0.1) < 1e-5, "eps_low=None: no lower bound, the gradient flows"
# Token-level mean over real tokens of the whole batch (not per response, padding ignored).
_lp = torch.zeros(2, 3, requires_grad=True)
_b = LossBatch(logprobs=_lp, logits=torch.zeros(2, 3, 3), old_logprobs=torch.zeros(2, 3),
               mask=torch.tensor([[True, False, False], [True, True, True]]), advantages=torch.tensor([4.0, 1.0]),
               rewards=torch.zeros(2), eps_low=0.2, eps_high=0.2)
_out = clipped_pg_loss(_b)
_out = _out[0] if isinstance(_out, tuple) else _out
assert abs(_out.item() + (4 + 3) / 4) < 1e-5, f"token-level mean: expected -(4 + 1 + 1 + 1) / 4 = -1.75, got {_out.item()}"
_out.backward()
assert torch.allclose(_lp.grad, torch.tensor([[-1.0, 0, 0], [-0.25, -0.25, -0.25]])), f"wrong gradient: {_lp.grad}"
### END HIDDEN TESTS

# %% [markdown]
# ### Task 4: the policy's entropy
#
# Entropy measures how spread out the policy's next-token distribution is:
# $H = -\sum_v p_v \log p_v$ at each position. We track its mean over the positions where the
# policy chose a **response** token. `logits` here cover the whole sequence, prompt included;
# `mask` is True exactly at the positions whose logits chose a real response token. The prompt
# positions are the model predicting the user's text, not the policy acting: leave them out.
# Use `torch.log_softmax` (the logits are not normalized).


# %% nbgrader={"grade": false, "grade_id": "task4_token_entropy", "locked": false, "schema_version": 3, "solution": true, "task": false}
def token_entropy(logits, mask):
    """Mean entropy (nats) of the next-token distributions at the True positions of mask.

    logits: float [B, T, V] over the whole sequence
    mask:   bool  [B, T], True at the positions that chose a real response token
    returns: scalar tensor, the mean over all True positions of the batch
    """
    ### BEGIN SOLUTION
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(dim=-1)  # [B, T]
    return entropy[mask].mean()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task4_token_entropy", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
_logits = torch.zeros(1, 3, 4)  # uniform over 4 tokens: entropy log 4 everywhere
_out = token_entropy(_logits, torch.tensor([[False, True, True]]))
assert abs(float(_out) - np.log(4)) < 1e-6, f"uniform over 4 tokens: expected log 4 = 1.386, got {float(_out)}"
_logits = torch.tensor([[[0.0, 0.0], [50.0, -50.0]]])  # one uniform position, one certain position
assert abs(float(token_entropy(_logits, torch.tensor([[True, True]]))) - np.log(2) / 2) < 1e-5, "mean of log 2 and 0"
print("visible tests for task 4 passed")

### BEGIN HIDDEN TESTS
# Prompt positions (mask False) are certain here; including them lowers the mean.
_logits = torch.tensor([[[50.0, -50.0, 0.0], [1.0, 2.0, 3.0], [0.5, 0.5, -1.0]],
                        [[50.0, -50.0, 0.0], [50.0, -50.0, 0.0], [0.0, 0.0, 0.0]]])
_mask = torch.tensor([[False, True, True], [False, False, True]])
_p = torch.softmax(_logits, -1)
_h = -(_p * _p.log()).sum(-1)
_want = _h[_mask].mean()
assert abs(float(token_entropy(_logits, _mask)) - float(_want)) < 1e-5, f"expected {float(_want):.4f} (mean over response positions of the whole batch)"
# The SFT model on its own samples, against the library's measurement.
from llmrl.checkpoints import load_checkpoint
_yours, _lib = lab19.policy_entropy(load_checkpoint("sft", progress=False), token_entropy, n_prompts=32)
assert abs(_yours - _lib) < 1e-5, f"SFT model: your entropy {_yours:.4f}, the library's {_lib:.4f}"
### END HIDDEN TESTS

# %% [markdown]
# ### The experiment
#
# Three runs with the exact-match reward, 4 gradient epochs per batch (so ratios move away from
# 1 and the clip matters), learning rate 5e-4, 120 steps, differing only in the clip:
# symmetric ($\epsilon_\text{low} = \epsilon_\text{high} = 0.2$), clip-higher ($\epsilon_\text{high} = 0.28$)
# and no upper clip at all. The right panel shows, among tokens with a positive advantage, the
# share the upper clip switched off, split into rare tokens (probability below 0.5 when sampled)
# and common ones; it counts epochs 2 to 4, because in the first epoch the policy still equals
# the sampling policy and nothing can be clipped.
#
# As in part 2 the curves are stored reference runs; the dots are 30 steps of the symmetric
# run with **your** `clipped_pg_loss`, and your `token_entropy` measures the trained policy.

# %% tags=["nbval-ignore-output"]
from llmrl.checkpoints import load_checkpoint

live_policy = load_checkpoint("sft", progress=False)
live_clip = lab19.entropy_run("symmetric", policy_loss_fn=clipped_pg_loss, policy=live_policy, steps=LIVE_STEPS)
_yours, _lib = lab19.policy_entropy(live_policy, token_entropy)
print(f"your token_entropy on the policy you just trained: {_yours:.4f} (library: {_lib:.4f})")

# %%
fig = lab19.plot_entropy(REFERENCE["entropy"], lab19.ARTIFACTS / "entropy.png",
                         live={"your code, symmetric": live_clip})
plt.show()
_s, _hi, _none = (lab19.entropy_summary(REFERENCE["entropy"][a]) for a in lab19.CLIP_ARMS)
for _arm, _sum in zip(lab19.CLIP_ARMS, (_s, _hi, _none)):
    print(f"{_arm:14s} entropy {_sum['entropy_start']:.3f} -> {_sum['entropy_end']:.3f} nats/token, "
          f"accuracy {_sum['accuracy_start']:.2f} -> {_sum['final_accuracy']:.2f}")
part3 = {"entropy_start": _s["entropy_start"], "entropy_end_clipped": 0.5 * (_s["entropy_end"] + _hi["entropy_end"]),
         "entropy_end_no_upper": _none["entropy_end"],
         "clip_high_of_positive_rare": _s["late_clip_high_of_positive_rare"],
         "clip_high_of_positive_common": _s["late_clip_high_of_positive_common"]}
print(lab19.expected_report(part3))

# %% [markdown]
# **What happened.** Entropy drains steadily under both clipped settings, and at this scale the
# symmetric clip and clip-higher are hard to tell apart (run a few seeds before you believe a
# gap either way). The diagnostic shows why clip-higher was proposed: the upper clip almost never
# touches common tokens, but it silences most of the rare positive-advantage tokens, exactly the
# exploratory choices whose probability RL would need to raise to keep entropy up. Removing the
# upper bound entirely keeps entropy higher, but nothing stops a ratio from running away and the
# accuracy suffers: the clip is a safety device, not only a brake on exploration.
#
# ## Things to try (not graded)
#
# Each cell runs one variation of the experiments above when you change `RUN = False` to
# `RUN = True`. They take about a minute each on a quiet laptop. The same runs are available
# from a shell, e.g. `python -m llmrl.labs.lab19 hack --beta 0.02` or
# `python -m llmrl.labs.lab19 entropy --arm clip-higher --epochs 2`.

# %%
RUN = False  # part 2 without the length bonus: is "the answer appears anywhere" exploitable alone?
if RUN:
    run = lab19.hacking_run(0.0, length_bonus=0.0, kl_reward_fn=kl_penalized_rewards)
    print(lab19.hack_summary(run))

# %%
RUN = False  # part 2 with a weaker leash: beta = 0.01 (then try 0.02)
if RUN:
    run = lab19.hacking_run(0.01, kl_reward_fn=kl_penalized_rewards)
    print(lab19.hack_summary(run))

# %%
RUN = False  # part 2 with GRPO's std-normalised advantages: does the hack come sooner?
if RUN:
    run = lab19.hacking_run(0.0, advantage="std")
    print(lab19.hack_summary(run))

# %%
RUN = False  # part 3 with another seed (try a few before trusting a gap between the clips)
if RUN:
    for arm in lab19.CLIP_ARMS:
        print(arm, lab19.entropy_summary(lab19.entropy_run(arm, policy_loss_fn=clipped_pg_loss, seed=1)))

# %%
RUN = False  # part 3 with 2 epochs per batch: does clip-higher matter more or less?
if RUN:
    for arm in ("symmetric", "clip-higher"):
        print(arm, lab19.entropy_summary(lab19.entropy_run(arm, policy_loss_fn=clipped_pg_loss, epochs=2)))

# %%
RUN = False  # part 3 with a much looser upper clip, eps_high = 0.4
if RUN:
    print(lab19.entropy_summary(lab19.entropy_run("clip-higher", policy_loss_fn=clipped_pg_loss, eps_high=0.4)))

# %%
RUN = False  # part 1 with another pool seed or a 2,000,000-response pool: which parts of the curve move?
if RUN:
    big = pool_curves_with(overopt.make_pool(2_000_000, b=1.0, sigma=1.0, seed=1))
    print(np.round(big["gold_gain"], 3))
