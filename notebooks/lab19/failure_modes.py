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
# > **Before you start.** 14 points, all graded automatically. Plan on about 2 hours for the
# > tasks; the two cells that train (parts 2 and 3, five seeds each, on your code) take about half
# > a minute and a minute on a quiet laptop.
# >
# > | task | you write | points | about |
# > |---|---|---|---|
# > | 1a | `bon_kl`: the KL of best-of-n | 1 | 10 min |
# > | 1b | `best_of_n_stats`: best-of-n on a pool, exactly, ties included | 3 | 30 min |
# > | 1c | `fit_gao_bon`: least squares for Gao et al.'s curve | 2 | 15 min |
# > | 2 | `kl_penalized_rewards`: a KL penalty folded into the reward | 2 | 15 min |
# > | 3 | `clipped_pg_loss`: the clipped surrogate with two bounds | 4 | 40 min |
# > | 4 | `token_entropy`: the policy's mean entropy on the response | 2 | 15 min |
# >
# > **Testing one task.** Run the first code cell (the imports) once. Then run the task's cell and
# > the test cell right below it (Shift+Enter on each); after every change, run both again. The
# > tasks of one part build on each other only through the experiments, so you may do them in any
# > order.
# >
# > **Done** means: every test cell prints `visible tests for task ... passed`; in parts 2 and 3
# > the check under each experiment says your runs agree with the course's reference code on the
# > same seed; the printed tables show your numbers beside the published ones. The grader runs further tests in the same cells (ties,
# > `-inf` padding, very unlikely tokens, peaked logits), so a visible pass is necessary, not
# > sufficient.
# >
# > **When graded**, your functions run in a kernel where the course library `llmrl` keeps its
# > names and constants but none of its code: they have torch, numpy, `math` and Python's
# > standard library, the helpers you write and this notebook's other functions,
# > and a call to a library function fails its test with `LibraryNotAvailable`. Of a cell you add,
# > only its imports, functions, classes and constants run there.
#
# Optimizing a reward is only as good as the reward. In this lab you make three classic failures
# happen on purpose, small enough to run on a laptop, and measure them:
#
# 1. **Overoptimization.** Pick the best of n responses by a proxy score and watch the true (gold)
#    score rise, peak and fall as n grows. Everything here is exact arithmetic, no training.
# 2. **Reward hacking.** Train the tiny addition model (TinyLM) with RL against a reward that has a
#    loophole, watch it find the loophole, then close it with a KL penalty that you write.
# 3. **Entropy collapse.** Train with several gradient epochs per batch, see the policy's entropy
#    fall step after step, and find out which tokens PPO's upper clip silences.
#
# Fill in every cell that says `raise NotImplementedError()`. Every experiment runs on **your**
# functions: part 1 computes its curves with them, and parts 2 and 3 train five seeds of each run
# that uses them (all seeds as one computation), so a wrong function shows up in the plots.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import display

from llmrl import live_checks, overopt
from llmrl.labs import lab19
from llmrl.losses import LossBatch
from llmrl.utils import grading_mode, set_threads

set_threads(1)
EXPECTED = lab19.EXPECTED  # the published reference numbers, printed beside yours
REFERENCE = lab19.load_reference()  # the reference code's runs of parts 2 and 3, seeds 0-4 (checks, slider)
SEEDS = [0] if grading_mode() else list(lab19.REFERENCE_SEEDS)  # seeds of every training run below
STEPS = 3 if grading_mode() else None  # None: the full length of each run (300 steps in part 2, 120 in part 3)

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


# %% nbgrader={"grade": true, "grade_id": "test_task1a_bon_kl_values", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1a, values: log n - (n - 1) / n.
assert abs(bon_kl(1)) < 1e-12, "best-of-1 is the base policy: its KL is 0"
assert abs(bon_kl(2) - (np.log(2) - 0.5)) < 1e-9, f"bon_kl(2) should be log 2 - 1/2, got {bon_kl(2)}"
assert abs(bon_kl(10) - 1.4026) < 1e-3, f"bon_kl(10) should be about 1.40 nats, got {bon_kl(10)}"
print("visible tests for task 1a (values) passed")

### BEGIN HIDDEN TESTS
_ns = np.array([1, 3, 10, 100, 3000])
_got = np.asarray(bon_kl(_ns), dtype=float)
assert np.allclose(_got, np.log(_ns) - (_ns - 1) / _ns), "wrong values for an array of n"
assert np.all(np.diff(_got) > 0), "the KL grows with n"
# float64 all the way: exact to 1e-12 at large n (float32 is off by about 1e-7 there).
_ns = np.array([3000, 7, 123456])
assert np.allclose(bon_kl(_ns), np.log(_ns.astype(float)) - (_ns - 1) / _ns, rtol=0, atol=1e-12)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1a_bon_kl_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1a, types and shapes: a float for an int n, a float64 numpy array of n's shape for an array.
try:
    _got = bon_kl(np.array([1, 2, 10]))
except TypeError as e:
    raise AssertionError(f"bon_kl(np.array([1, 2, 10])) raised TypeError ({e}): use numpy (np.log, array "
                         "arithmetic) rather than math.log, so that an array of n works too") from None
assert isinstance(_got, np.ndarray) and _got.shape == (3,), (
    f"an array of 3 values of n must give a numpy array of 3 KLs, got {type(_got).__name__} {np.shape(_got)}")
assert _got.dtype == np.float64, f"the KLs came back as {_got.dtype}: compute in float64"
assert isinstance(bon_kl(7), float), f"an int n gives a float, got {type(bon_kl(7)).__name__}"
print("visible tests for task 1a (types and shapes) passed")

### BEGIN HIDDEN TESTS
_got = bon_kl(np.array([[1, 2], [3, 4]]))
assert np.shape(_got) == (2, 2), f"the result has the shape of n: (2, 2), got {np.shape(_got)}"
assert isinstance(bon_kl(np.int64(5)), float), "a numpy integer n gives a float too"
assert np.asarray(bon_kl(np.array([[3]]))).shape == (1, 1)
### END HIDDEN TESTS


# %% [markdown]
# ### Task 1b: best-of-n on a finite pool, computed exactly
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
# **Ties.** A real reward model often gives several responses the same score. Best-of-n cannot
# tell tied responses apart, so it picks one of them at random: tied responses are equally likely
# to win. A block of responses that share a proxy score and sit at sorted positions
# $lo + 1, \dots, hi$ wins with total probability $(hi/M)^n - (lo/M)^n$ (the formula above summed
# over the block), and each response of the block gets an equal share of it. Example: proxy
# scores 1, 1, 0 and best-of-2: the two tied responses share $1 - (1/3)^2 = 8/9$, so each wins
# with probability $4/9$, whichever order a sort leaves them in.
#
# Write `best_of_n_stats`. Sort with `np.argsort`, use the same order for both scores, then
# spread each block of tied proxy scores' weight evenly over the block (`np.unique(...,
# return_inverse=True)` or `np.searchsorted` on the sorted scores find the blocks).


# %% nbgrader={"grade": false, "grade_id": "task1b_best_of_n_stats", "locked": false, "schema_version": 3, "solution": true, "task": false}
def best_of_n_stats(proxy, gold, n):
    """Expected proxy and gold score of the best-of-n response from a pool.

    proxy: float array [M], the proxy score of each response in the pool
    gold:  float array [M], the gold score of the same responses
    n:     int >= 1
    returns: (expected_proxy, expected_gold), two floats

    Ties: responses with equal proxy scores are equally likely to win (each gets the same share of
    their block's weight), so the result does not depend on the order of the pool.
    """
    ### BEGIN SOLUTION
    proxy = np.asarray(proxy, dtype=float)
    gold = np.asarray(gold, dtype=float)
    M = len(proxy)
    order = np.argsort(proxy)                       # lowest proxy first; the same order for both scores
    p, g = proxy[order], gold[order]
    lo = np.searchsorted(p, p, side="left")         # responses with a strictly lower score
    hi = np.searchsorted(p, p, side="right")        # ... with a lower or equal score
    w = ((hi / M) ** n - (lo / M) ** n) / (hi - lo)  # the block's weight, shared by its hi - lo members
    return float(w @ p), float(w @ g)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_task1b_best_of_n_stats_values", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 1b, values: the rank weights on a pool without ties.
_proxy, _gold = np.array([0.5, 2.0, 1.0]), np.array([1.0, -1.0, 3.0])
_p, _g = best_of_n_stats(_proxy, _gold, 2)
assert abs(_p - (1 * 0.5 + 3 * 1.0 + 5 * 2.0) / 9) < 1e-9, (
    f"hand example: expected proxy 1.722, got {_p:.3f}: the top response (proxy 2.0) wins with 5/9, "
    "the lowest with 1/9; sort lowest first")
assert abs(_g - (1 * 1.0 + 3 * 3.0 + 5 * -1.0) / 9) < 1e-9, (
    f"hand example: expected gold 0.556, got {_g:.3f}: order the gold scores by the PROXY ranking "
    "(the same argsort for both)")
_p, _g = best_of_n_stats(_proxy, _gold, 1)
assert abs(_p - _proxy.mean()) < 1e-9 and abs(_g - _gold.mean()) < 1e-9, "best-of-1 is a uniform draw: the means"
print("visible tests for task 1b (values) passed")

### BEGIN HIDDEN TESTS
_rng = np.random.default_rng(7)
# A constant gold score: the weights must sum to one (off-by-one weights do not).
_proxy = _rng.standard_normal(40)
assert abs(best_of_n_stats(_proxy, np.full(40, 2.5), 5)[1] - 2.5) < 1e-9, "the rank weights must sum to 1"
# Against brute-force simulation of best-of-n with replacement (no ties).
_gold = _rng.standard_normal(40)
_n = 4
_idx = _rng.integers(0, 40, size=(200_000, _n))
_win = _idx[np.arange(len(_idx)), _proxy[_idx].argmax(1)]
_p, _g = best_of_n_stats(_proxy, _gold, _n)
assert abs(_p - _proxy[_win].mean()) < 0.01, f"proxy {_p} disagrees with simulation {_proxy[_win].mean()}"
assert abs(_g - _gold[_win].mean()) < 0.01, f"gold {_g} disagrees with simulation {_gold[_win].mean()}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1b_best_of_n_stats_ties", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 1b, ties: tied proxy scores share their block's weight evenly, whatever the order of the pool.
# The tie example of the text: the two responses with proxy 1 share 8/9, 4/9 each.
_g = best_of_n_stats(np.array([1.0, 1.0, 0.0]), np.array([3.0, 0.0, 0.0]), 2)[1]
assert abs(_g - 4 / 3) < 1e-9, (
    f"tie example: expected gold 4/9 * 3 = 1.333, got {_g:.3f}: tied proxy scores must share their block's "
    "weight evenly, whatever order the sort leaves them in")
print("visible tests for task 1b (ties) passed")

### BEGIN HIDDEN TESTS
_rng = np.random.default_rng(8)
_proxy = _rng.standard_normal(40)
assert abs(best_of_n_stats(np.round(_proxy), np.full(40, 2.5), 5)[1] - 2.5) < 1e-9, "with ties the weights must sum to 1"
# Many ties (proxy scores 0..4): the simulation breaks them at random; any order of the pool
# (non-identity permutations) gives the same answer.
_gold = _rng.standard_normal(40)
_n = 4
_idx = _rng.integers(0, 40, size=(200_000, _n))
_tied = _rng.integers(0, 5, size=40).astype(float)
_noise = _rng.uniform(0, 0.5, size=_idx.shape)  # a random tie-break for every draw
_win = _idx[np.arange(len(_idx)), (_tied[_idx] + _noise).argmax(1)]
_p, _g = best_of_n_stats(_tied, _gold, _n)
assert abs(_g - _gold[_win].mean()) < 0.01, f"ties: gold {_g} disagrees with simulation {_gold[_win].mean()}"
for _ in range(5):
    _perm = _rng.permutation(40)
    _pp, _gp = best_of_n_stats(_tied[_perm], _gold[_perm], _n)
    assert abs(_pp - _p) < 1e-9 and abs(_gp - _g) < 1e-9, "the answer changed when the pool was shuffled: handle ties"
# Close but different scores are not tied: 1.0 and 1.0001 are ranked.
_p, _g = best_of_n_stats(np.array([1.0, 1.0001, 0.0]), np.array([3.0, 0.0, 0.0]), 2)
assert abs(_g - 3 * 3 / 9) < 1e-9, f"1.0 < 1.0001: the response with proxy 1.0 wins with 3/9 only, gold {_g}"
# Huge n with a tied top score: the mean gold of the tied top.
_g = best_of_n_stats(_tied, _gold, 100_000)[1]
assert abs(_g - _gold[_tied == _tied.max()].mean()) < 1e-6, "huge n with a tied top score: the mean gold of the tied top"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1b_best_of_n_stats_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1b, types and inputs: a tuple of two floats; the caller's arrays untouched.
_proxy, _gold = np.array([0.5, 2.0, 1.0]), np.array([1.0, -1.0, 3.0])
_out = best_of_n_stats(_proxy, _gold, 3)
assert isinstance(_out, tuple) and len(_out) == 2 and all(isinstance(x, float) for x in _out), (
    f"return a tuple of two floats (expected_proxy, expected_gold), got {type(_out).__name__} "
    f"{[type(x).__name__ for x in _out] if isinstance(_out, (tuple, list)) else np.shape(_out)}")
assert np.array_equal(_proxy, [0.5, 2.0, 1.0]) and np.array_equal(_gold, [1.0, -1.0, 3.0]), (
    "best_of_n_stats changed the caller's arrays (proxy.sort() sorts in place): sort a copy, or index with argsort")
print("visible tests for task 1b (types and inputs) passed")

### BEGIN HIDDEN TESTS
_out = best_of_n_stats(np.array([0.3, 0.1]), np.array([-2.0, 1.0]), 1)
assert isinstance(_out, tuple) and all(isinstance(x, float) for x in _out)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1b_best_of_n_stats_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1b, extreme inputs: a very large n, where the winner is (almost surely) the pool's top response.
_rng = np.random.default_rng(9)
_proxy, _gold = _rng.standard_normal(40), _rng.standard_normal(40)
_p, _g = best_of_n_stats(_proxy, _gold, 1_000)
assert np.isfinite(_p) and np.isfinite(_g) and abs(_g - _gold[_proxy.argmax()]) < 0.05, (
    f"best-of-1000 from 40 responses: the top response wins with probability 1 - (39/40)^1000, almost 1, so the "
    f"expected gold is about {_gold[_proxy.argmax()]:.3f}, got {_g:.3f}: compute (k / M)^n in floating point")
print("visible tests for task 1b (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# Huge n: no integer overflow in (k / M)^n; a pool of one response.
_p, _g = best_of_n_stats(_proxy, _gold, 100_000)
assert abs(_g - _gold[_proxy.argmax()]) < 1e-6 and abs(_p - _proxy.max()) < 1e-6, "for huge n the best-of-n is the top response"
assert best_of_n_stats(np.array([0.3]), np.array([-2.0]), 5) == (0.3, -2.0), "a pool of one response"
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


# %% nbgrader={"grade": true, "grade_id": "test_task1c_fit_gao_bon_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 1c, values: the least-squares fit of d (alpha - beta d).
_d = np.linspace(0.2, 2.6, 12)
_a, _b = fit_gao_bon(_d, _d * (1.1 - 0.47 * _d))
assert abs(_a - 1.1) < 1e-6 and abs(_b - 0.47) < 1e-6, (
    f"exact data d(1.1 - 0.47 d): expected (1.1, 0.47), got ({_a:.4f}, {_b:.4f})"
    + (": beta has the wrong sign; the model is alpha d - beta d^2, so the second column is -d^2" if abs(_b + 0.47) < 1e-6 else ""))
# Data off the curve: the least-squares fit with exactly two columns (d and -d^2) and no intercept.
_a, _b = fit_gao_bon(np.array([0.5, 1.0, 1.5, 2.0, 2.5]), np.array([0.4, 0.6, 0.65, 0.5, 0.3]))
assert abs(_a - 0.91192547) < 1e-6 and abs(_b - 0.32049689) < 1e-6, (
    f"expected (alpha, beta) = (0.91193, 0.32050), got ({_a:.5f}, {_b:.5f}): no intercept column "
    "(the curve passes through 0 at d = 0), a least-squares fit (np.linalg.lstsq)")
print("visible tests for task 1c (values) passed")

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
# d = 0 (best-of-1) is a data point like any other.
_a, _b = fit_gao_bon(np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.5, 0.6]))
_X = np.array([[0.0, 0.0], [1.0, -1.0], [2.0, -4.0]])
assert np.allclose([_a, _b], np.linalg.lstsq(_X, np.array([0.0, 0.5, 0.6]), rcond=None)[0], atol=1e-10)
# float64: exact to 1e-8 on data whose columns are nearly parallel (float32 loses about 1e-6 here).
_d = np.linspace(1.0, 1.2, 7)
_y = _d * (0.9 - 0.3 * _d) + np.array([1, -1, 1, -1, 1, -1, 1]) * 1e-4
_X = np.stack([_d, -_d ** 2], 1)
assert np.allclose(fit_gao_bon(_d, _y), np.linalg.lstsq(_X, _y, rcond=None)[0], rtol=0, atol=1e-8)
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task1c_fit_gao_bon_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 1c, types and inputs: a tuple of two floats, computed in float64; the caller's arrays untouched.
_d, _y = np.array([0.5, 1.0, 1.5, 2.0, 2.5]), np.array([0.4, 0.6, 0.65, 0.5, 0.3])
_out = fit_gao_bon(_d, _y)
assert isinstance(_out, tuple) and len(_out) == 2 and all(isinstance(x, float) for x in _out), (
    f"return a tuple of two floats (alpha, beta), got {type(_out).__name__} "
    f"{[type(x).__name__ for x in _out] if isinstance(_out, (tuple, list)) else np.shape(_out)}: float(...) each")
assert np.array_equal(_d, [0.5, 1.0, 1.5, 2.0, 2.5]) and np.array_equal(_y, [0.4, 0.6, 0.65, 0.5, 0.3]), (
    "fit_gao_bon changed the caller's arrays")
print("visible tests for task 1c (types and inputs) passed")

### BEGIN HIDDEN TESTS
_out = fit_gao_bon(np.array([1.0, 2.0]), np.array([0.5, 0.4]))
assert isinstance(_out, tuple) and len(_out) == 2 and all(isinstance(x, float) for x in _out), "two points"
### END HIDDEN TESTS


# %% [markdown]
# ### The experiment: a length-biased proxy
#
# `llmrl.overopt` holds a small generative model of a reward pool. Every response has a hidden
# *quality* $q \sim N(0, 1)$ and some *padding* $\ell \ge 0$ (extra length): a quarter of the
# responses pad, by an exponentially distributed amount with mean 1.4, the rest have $\ell = 0$.
# The gold reward likes quality and dislikes padding; the proxy likes quality, is fooled by length
# with strength $b$ and is noisy with strength $\sigma$:
#
# $$\text{gold} = q - 0.1\,\ell, \qquad \text{proxy} = q + b\,\ell + \sigma\,\varepsilon .$$
#
# The exponential tail of the padding is heavier than the Gaussian tails of $q$ and
# $\varepsilon$, so the proxy's very top is increasingly made of padded responses. (The padding's
# share, mean and cost are this course's calibration: with them the published numbers of this
# part hold; see the note under the table.) The cell
# below draws three pools of 200,000 responses (seeds 0-2) and computes their best-of-n curves
# with **your** functions, next to the exact population values (integrated numerically, as if the
# pool were infinite). The plot shows seed 0's pool with its fit and every other seed's gold curve
# as a thin line; the table gives the mean ± standard deviation over the three pools.

# %%
NS = overopt.DEFAULT_NS


def pool_curves_with(pool, ns=NS):
    """The best-of-n curves of a pool, computed with the student's functions."""
    stats = np.array([best_of_n_stats(pool.proxy, pool.gold, int(n)) for n in ns])
    kl = np.asarray(bon_kl(np.array(ns)), dtype=float)
    return {"n": np.array(ns), "kl": kl, "d": np.sqrt(kl),
            "proxy_gain": stats[:, 0] - pool.proxy.mean(), "gold_gain": stats[:, 1] - pool.gold.mean()}


POOL_SEEDS = SEEDS[:3]  # three pools (a pool's 18 best-of-n values take a second or two)
biased_seeds = [pool_curves_with(overopt.make_pool(b=1.0, sigma=1.0, seed=s)) for s in POOL_SEEDS]
noisy_seeds = [pool_curves_with(overopt.make_pool(b=0.0, sigma=1.0, seed=s)) for s in POOL_SEEDS]
biased, noisy = biased_seeds[0], noisy_seeds[0]  # seed 0's pool: the plot's fit and the checks below
exact = overopt.exact_best_of_n(NS, b=1.0, sigma=1.0)
fits_biased = [fit_gao_bon(c["d"], c["gold_gain"]) for c in biased_seeds]
fits_noisy = [fit_gao_bon(c["d"], c["gold_gain"]) for c in noisy_seeds]

fig = lab19.overopt_figure({lab19.PANEL_BIASED: (biased, fits_biased[0], exact),
                            lab19.PANEL_NOISY: (noisy, fits_noisy[0], None)},
                           lab19.ARTIFACTS / "overopt.png",
                           seeds={lab19.PANEL_BIASED: biased_seeds[1:],
                                  lab19.PANEL_NOISY: noisy_seeds[1:]})
plt.show()

_peaks = [overopt.peak(c) for c in biased_seeds]
_n3000 = [float(c["gold_gain"][-1]) for c in biased_seeds]
part1 = {"bon_peak_n": [p["n"] for p in _peaks], "bon_peak_kl": [p["kl"] for p in _peaks],
         "bon_peak_gold_gain": [p["gold_gain"] for p in _peaks],
         "bon_gold_gain_n3000_sign": "negative" if np.mean(_n3000) < 0 else "positive",
         "gao_alpha": [f[0] for f in fits_biased], "gao_beta": [f[1] for f in fits_biased],
         "noise_only_gao_beta": [f[1] for f in fits_noisy],
         "pool_gold_gain_n3000": _n3000, "exact_gold_gain_n3000": float(exact["gold_gain"][-1])}
print(lab19.expected_report(part1))  # lists: mean ± standard deviation over the pools' seeds
for _n in (10, 3000):
    print(f"gold gain at best-of-{_n}, every pool: {np.round([c['gold_gain'][list(NS).index(_n)] for c in biased_seeds], 3)}")
print(f"smallest step of the proxy gain from one n to the next, every pool: "
      f"{np.round([np.diff(c['proxy_gain']).min() for c in biased_seeds], 3)}")
print(f"noise-only proxy, smallest step of the gold gain, every pool: "
      f"{np.round([np.diff(c['gold_gain']).min() for c in noisy_seeds], 3)}")

# %%
# The same pool through the course's reference code: each of your three functions must give the
# same numbers (your fit is given the reference curve, so that a wrong 1a or 1b cannot hide in it).
_pool = overopt.make_pool(b=1.0, sigma=1.0, seed=0)
_ref = overopt.pool_curves(_pool, NS)
_ok = live_checks.compare_exact("Part 1, KL of best-of-n", biased["kl"], _ref["kl"], task="Task 1a (`bon_kl`)", atol=1e-9)
_ok = live_checks.compare_exact("Part 1, proxy and gold gains", [biased["proxy_gain"], biased["gold_gain"]],
                                [_ref["proxy_gain"], _ref["gold_gain"]], task="Task 1b (`best_of_n_stats`)", atol=1e-9)
_ok = live_checks.compare_exact("Part 1, the fitted alpha and beta", fit_gao_bon(_ref["d"], _ref["gold_gain"]),
                                overopt.fit_gao_bon(_ref["d"], _ref["gold_gain"]), task="Task 1c (`fit_gao_bon`)",
                                atol=1e-6)

# %% [markdown]
# **Reading the plot.** With the length bias, the gold gain climbs to about +0.69 at best-of-10
# (every pool peaks there) and then sinks below zero by best-of-3000, while the proxy gain keeps
# climbing: past the peak, a higher proxy score buys more padding than quality. The fitted
# $\alpha, \beta$ describe it well. With a noise-only proxy the gold gain never turns down
# ($\beta \approx 0$): noise wastes samples but does not point the search anywhere harmful.
#
# Trust the right end of the pool curves less than the left. At $n = 3000$ nearly every winner is
# one of a few hundred responses at the very top of the 200,000 in the pool, so each of those
# points rests on a small sample: at best-of-3000 the three pools give -0.27, -0.25 and -0.03,
# at best-of-10 they all give 0.68 to 0.69. The published pool said about -0.4 there with an
# exact value of about +0.10; our pools scatter around our exact value, itself below zero (the
# note under the table says why we could not match the +0.10). Try another `seed` in `make_pool`
# and watch the right end move while the left end hardly moves at all.
#
# The sliders below redraw the exact curves for any $b$ and $\sigma$ (it takes a fraction of a
# second). Which of $b$ and $\sigma$ makes the gold curve turn down, and which only flattens it?

# %% tags=["nbval-ignore-output"]
display(lab19.bon_widget(b=1.0, sigma=1.0))

# %% [markdown]
# ## Part 2: reward hacking
#
# The addition task: the prompt is `37+48=` and the right response is `85`. The SFT checkpoint
# answers a little over half of the two-digit problems correctly when it samples at temperature 1. The
# gold reward is exact match. The proxy reward looks reasonable but has two flaws; read it
# before you go on:

# %%
import inspect

from llmrl.rewards import proxy_reward

print(inspect.getsource(proxy_reward))
print(proxy_reward(["85", "8512", "850", "84"], [85, 85, 85, 85]))

# %% [markdown]
# **Predict first, then scroll.** The proxy pays 1 when the right number occurs somewhere in the
# response and adds 0.1 for each character (4 characters at most). What will RL teach the model to
# write? Where will exact-match accuracy, the response length and the KL from the SFT model go?
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


# %% nbgrader={"grade": true, "grade_id": "test_task2_kl_penalized_rewards_values", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 2, values: r - beta * sum over the real tokens of (log pi - log pi_ref).
_r = torch.tensor([1.0, 0.0])
_lp = torch.tensor([[-0.1, -0.2], [-1.0, -0.5]])
_ref = torch.tensor([[-0.6, -0.2], [-0.5, -0.5]])
_mask = torch.ones(2, 2, dtype=torch.bool)
_out = kl_penalized_rewards(_r.clone(), _lp, _ref, _mask, 0.1)
assert _out.shape == (2,), f"one shaped reward per response: expected shape (2,), got {tuple(_out.shape)}"
assert not torch.allclose(_out, torch.tensor([1.05, -0.05])), (
    "got [1.05, -0.05]: the log-ratio was ADDED. The penalty is subtracted: r - beta * sum(log pi - log pi_ref)")
assert torch.allclose(_out, torch.tensor([0.95, 0.05])), (
    f"expected [0.95, 0.05], got {_out}: subtract beta times the SUM over the response's tokens of "
    "log pi - log pi_ref (a sum, not a mean)")
# Only real tokens count.
_mask = torch.tensor([[True, False], [True, True]])
_out = kl_penalized_rewards(_r.clone(), _lp, _ref, _mask, 0.1)
assert torch.allclose(_out, torch.tensor([0.95, 0.05])), f"mask [[T, F], [T, T]]: expected [0.95, 0.05], got {_out}"
print("visible tests for task 2 (values) passed")

### BEGIN HIDDEN TESTS
# Responses of different lengths, against a loop.
_g = torch.Generator().manual_seed(2)
_lp, _ref = -torch.rand(5, 6, generator=_g) * 3, -torch.rand(5, 6, generator=_g) * 3
_lens = [6, 1, 3, 0, 5]
_mask = torch.arange(6)[None, :] < torch.tensor(_lens)[:, None]
_r = torch.rand(5, generator=_g)
_want = torch.stack([_r[b] - 0.3 * (_lp[b, :_lens[b]] - _ref[b, :_lens[b]]).sum() for b in range(5)])
_out = kl_penalized_rewards(_r.clone(), _lp, _ref, _mask, 0.3)
assert torch.allclose(_out, _want, atol=1e-5), f"expected {_want}, got {_out} (sum per response over its own real tokens)"
# Direction: a policy that raised the probability of its tokens is penalised, one that lowered it is not.
_out = kl_penalized_rewards(torch.zeros(2), torch.tensor([[-0.1], [-2.1]]), torch.tensor([[-2.1], [-0.1]]),
                            torch.ones(2, 1, dtype=torch.bool), 0.5)
assert torch.allclose(_out, torch.tensor([-1.0, 1.0])), f"log pi - log pi_ref = +2 / -2 with beta 0.5: expected [-1, 1], got {_out}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task2_kl_penalized_rewards_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 2, extreme inputs: padding (mask False) holds garbage, even -inf under the reference.
_r = torch.tensor([1.0, 0.0])
_lp = torch.tensor([[-0.1, -0.2, -3.0], [-1.0, -0.5, 0.0]])
_ref = torch.tensor([[-0.6, -0.2, -float("inf")], [-0.5, -0.5, -9.0]])
_mask = torch.tensor([[True, True, False], [True, True, False]])
_out = kl_penalized_rewards(_r.clone(), _lp, _ref, _mask, 0.1)
assert torch.isfinite(_out).all(), (
    f"got {_out}: a padding position leaked into the sum (0 * inf is nan). Select the real tokens with "
    "torch.where(mask, logprobs - ref_logprobs, 0) instead of multiplying by the mask")
assert torch.allclose(_out, torch.tensor([0.95, 0.05])), f"only real tokens count: expected [0.95, 0.05], got {_out}"
print("visible tests for task 2 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# A response with no real token keeps its reward; -inf in both log-probs at padding is ignored too.
_out = kl_penalized_rewards(torch.tensor([0.7, 0.2]), torch.tensor([[-float("inf"), -1.0], [-1.0, -float("inf")]]),
                            torch.tensor([[-float("inf"), -2.0], [-3.0, -float("inf")]]),
                            torch.tensor([[False, False], [True, False]]), 0.5)
assert torch.allclose(_out, torch.tensor([0.7, -0.8])), f"expected [0.7, -0.8], got {_out}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task2_kl_penalized_rewards_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 2, types, shapes and inputs: a tensor [B] of the rewards' dtype, any batch size, beta as given,
# the caller's tensors untouched.
_r = torch.tensor([1.0, 0.0], dtype=torch.float64)
_lp = torch.tensor([[-0.1, -0.2], [-1.0, -0.5]], dtype=torch.float64)
_ref = torch.tensor([[-0.6, -0.2], [-0.5, -0.5]], dtype=torch.float64)
_mask = torch.ones(2, 2, dtype=torch.bool)
_copies = (_r.clone(), _lp.clone(), _ref.clone())
_out = kl_penalized_rewards(_r, _lp, _ref, _mask, 0.1)
assert all(torch.equal(a, b) for a, b in zip((_r, _lp, _ref), _copies)), (
    "kl_penalized_rewards changed the caller's tensors (rewards -= ... subtracts in place): return a new tensor")
assert isinstance(_out, torch.Tensor) and _out.dtype == torch.float64, (
    f"float64 rewards and log-probs gave {getattr(_out, 'dtype', type(_out).__name__)}: keep their dtype")
assert torch.equal(kl_penalized_rewards(_r, _lp, _ref, _mask, 0.0), _r), "beta = 0 leaves the rewards exactly as they are"
_one = kl_penalized_rewards(_r[:1], _lp[:1], _ref[:1], _mask[:1], 0.1)
assert _one.shape == (1,), f"a batch of one response: expected shape (1,), got {tuple(_one.shape)}: squeeze nothing"
print("visible tests for task 2 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_args = (torch.tensor([2.0]), torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), torch.ones(1, 1, dtype=torch.bool))
_out = kl_penalized_rewards(*_args, 2)
assert _out.shape == (1,) and torch.equal(_out, kl_penalized_rewards(*_args, 2.0)), "B = R = 1, an int beta as a float one"
### END HIDDEN TESTS


# %% [markdown]
# ### The experiment
#
# Three runs from the SFT checkpoint, 16 prompts with 8 samples each per step, learning rate
# 5e-4, 300 steps: the proxy reward without a KL penalty, with $\beta = 0.05$ and, for
# comparison, the gold (exact-match) reward. The $\beta = 0.05$ run trains five seeds (0 to 4)
# together with **your** `kl_penalized_rewards` shaping the rewards (about 30 seconds on a quiet
# laptop). The other two runs have $\beta = 0$: no penalty to compute, so none of your functions
# takes part, and the plot takes them from the stored runs of the same code and seeds (training
# them again would give the same numbers). The thick line is the mean over the seeds, the band
# runs from the lowest to the highest seed and the thin lines are the single seeds. Under the cell,
# a check compares your $\beta = 0.05$ run with the course's reference code on seed 0: same seed,
# same samples, so a correct function gives the same shaped rewards.

# %% tags=["nbval-mask-numbers"]
# {"0", "0.05", "gold"}: a run per seed; beta = 0.05 trains on your function, the beta = 0 runs are stored
hack_runs = lab19.part2_runs(kl_penalized_rewards, seeds=SEEDS, steps=STEPS, stored=REFERENCE)
_ok = lab19.check_part2(hack_runs, REFERENCE)

# %% tags=["nbval-mask-numbers"]
runs = {"proxy, no KL": hack_runs["0"], "proxy, beta = 0.05": hack_runs["0.05"], "gold reward": hack_runs["gold"]}
fig = lab19.plot_hacking(runs, lab19.ARTIFACTS / "hack.png")
plt.show()
_w = "-".join(map(str, lab19.MID_WINDOW))
for _label, _run in runs.items():  # every seed: steps 1-10, steps 41-60 (around step 50), the last 20 steps
    for _seed, _r in zip(SEEDS, _run):
        _s = lab19.hack_summary(_r)
        print(f"{_label:18s} seed {_seed}: accuracy {_s['accuracy_start']:.2f} -> {_s['accuracy_mid']:.2f} (steps {_w}) "
              f"-> end {_s['final_accuracy']:.2f}, length {_s['final_length']:.2f}, KL {_s['final_kl']:.1f}, "
              f"training reward {_s['final_proxy']:.2f}; best 10 steps end at step {_s['peak_step']}")
# every number as the mean ± standard deviation over your runs' seeds
print(lab19.expected_report(lab19.part2_values({"hacking_seeds": hack_runs})))

# %% [markdown]
# **What happened.** Without a penalty the policy first gets better at addition on most seeds (the
# proxy rewards a correct answer too): on seeds 0, 1 and 4 its accuracy rises from 0.55, 0.53 and
# 0.61 over the first 10 steps to 0.68, 0.66 and 0.68 over steps 41-60, while seeds 2 and 3 peak
# earlier (their best 10 steps end at steps 27 and 25) and are back where they started by then.
# Then the policy discovers that `85` followed by more digits still contains `85` and earns the
# length bonus. Every seed goes all the way within 300 steps: every response reaches the maximum
# of 4 characters, the KL to the SFT model ends at 14.3 to 16.0 nats and the exact-match accuracy
# at 0.00, while each seed's gold-reward run ends at 0.79 to 0.81. *When* the hack takes over is a
# matter of the seed: the best 10 steps of accuracy end anywhere from step 25 to step 154, so one
# run can make its timing look more predictable than it is. With $\beta = 0.05$ the length bonus
# of one or two more characters is not worth the several nats it takes to write unusual digits
# after the answer: on every seed the policy learns addition instead and ends within 0.1 of the
# gold-reward run of the same seed.
#
# The slider shows a finer sweep, $\beta \in \{0, 0.01, 0.02, 0.05\}$, every seed: stored runs of
# the course's reference code (the same settings; the plot above draws the same beta = 0 runs).
# Below which $\beta$ is the penalty too weak to hold the policy back, and is the answer the same
# for every seed?

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


# %% nbgrader={"grade": true, "grade_id": "test_task3_clipped_pg_loss_values", "locked": true, "points": 1.5, "schema_version": 3, "solution": false, "task": false}
# Task 3, values: the clipped surrogate, one token at a time, and the token-level mean.
def _case(ratio, adv, eps_low=0.2, eps_high=0.2):
    """Loss and d loss / d logprob for one token with the given ratio and advantage."""
    lp = torch.tensor([[float(np.log(ratio))]], requires_grad=True)
    b = LossBatch(logprobs=lp, logits=torch.zeros(1, 1, 3), old_logprobs=torch.zeros(1, 1),
                  mask=torch.ones(1, 1, dtype=torch.bool), advantages=torch.tensor([float(adv)]),
                  rewards=torch.zeros(1), eps_low=eps_low, eps_high=eps_high)
    out = clipped_pg_loss(b)
    loss = out[0] if isinstance(out, tuple) else out
    grad = torch.autograd.grad(loss, lp)[0].item() if loss.requires_grad else float("nan")
    return loss.item(), grad


def _batch(logprobs, old_logprobs, mask, advantages, eps_low=0.2, eps_high=0.2):
    B, R = mask.shape
    return LossBatch(logprobs=logprobs, logits=torch.zeros(B, R, 3), old_logprobs=old_logprobs, mask=mask,
                     advantages=advantages, rewards=torch.zeros(B), eps_low=eps_low, eps_high=eps_high)


def _loss(batch):
    out = clipped_pg_loss(batch)
    return out[0] if isinstance(out, tuple) else out


# (ratio, advantage) -> loss with eps = 0.2
for (_rho, _a), _want in {(1.5, 1.0): -1.2,      # A > 0, above 1 + eps: clipped
                          (1.1, 1.0): -1.1,      # A > 0, in range
                          (0.5, 1.0): -0.5,      # A > 0, below 1 - eps: not clipped
                          (0.5, -1.0): 0.8,      # A < 0, below 1 - eps: clipped
                          (0.9, -1.0): 0.9,      # A < 0, in range
                          (1.5, -1.0): 1.5}.items():  # A < 0, above 1 + eps: not clipped
    _l = _case(_rho, _a)[0]
    assert abs(_l - _want) < 1e-5, f"ratio {_rho}, advantage {_a}: expected loss {_want}, got {_l}"
# The token-level mean: response 0 has 1 real token (advantage 4), response 1 has 3 (advantage 1),
# every ratio is 1, so the loss is -(4 + 1 + 1 + 1) / 4 = -1.75.
_mask = torch.tensor([[True, False, False], [True, True, True]])
_l = _loss(_batch(torch.zeros(2, 3, requires_grad=True), torch.zeros(2, 3), _mask, torch.tensor([4.0, 1.0]))).item()
assert abs(_l + 2.5) > 1e-4, ("got -2.5, the mean of the two responses' own means: average over the real tokens "
                              "of the whole batch together (sum over mask, divided by the number of real tokens)")
assert abs(_l + 7 / 6) > 1e-4, "got -1.167: the padding positions were counted; divide by the number of real tokens"
assert abs(_l + 1.75) < 1e-5, f"token-level mean: expected -(4 + 1 + 1 + 1) / 4 = -1.75, got {_l}"
print("visible tests for task 3 (values) passed")

### BEGIN HIDDEN TESTS
# Mixed signs and ratios in one batch, against the formula token by token.
_g = torch.Generator().manual_seed(4)
_old = -torch.rand(3, 4, generator=_g) * 2
_lp = (_old + 0.6 * torch.randn(3, 4, generator=_g)).requires_grad_(True)
_mask = torch.tensor([[True, True, True, False], [True, False, False, False], [True, True, True, True]])
_adv = torch.tensor([1.5, -0.7, -2.0])
_rho = torch.exp(_lp.detach() - _old)
_want = -torch.minimum(_rho * _adv[:, None], _rho.clamp(0.8, 1.28) * _adv[:, None])[_mask].mean()
_l = _loss(_batch(_lp, _old, _mask, _adv, 0.2, 0.28))
assert abs(_l.item() - _want.item()) < 1e-5, f"a mixed batch: expected {_want.item():.5f}, got {_l.item():.5f}"
# Unlikely tokens in float32: log-probs near -120 (probabilities below the smallest float32). The
# ratio is exp(logprobs - old_logprobs); exp(logprobs) / exp(old_logprobs) is 0 / 0.
_l = _loss(_batch(torch.tensor([[-120.0, -1.0]], requires_grad=True), torch.tensor([[-120.1, -1.0]]),
                  torch.ones(1, 2, dtype=torch.bool), torch.tensor([1.0])))
assert abs(_l.item() + (np.exp(0.1) + 1) / 2) < 1e-5, f"unlikely tokens: expected {-(np.exp(0.1) + 1) / 2:.5f}, got {_l.item()}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_clipped_pg_loss_grad", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 3, gradient: where the clip switches the gradient off, and where it flows (eps = 0.2).
for (_rho, _a), _want in {(1.5, 1.0): 0.0,       # A > 0, above 1 + eps: clipped
                          (1.1, 1.0): -1.1,      # A > 0, in range
                          (0.5, 1.0): -0.5,      # A > 0, below 1 - eps: not clipped
                          (0.5, -1.0): 0.0,      # A < 0, below 1 - eps: clipped
                          (0.9, -1.0): 0.9,      # A < 0, in range
                          (1.5, -1.0): 1.5}.items():  # A < 0, above 1 + eps: not clipped
    _gr = _case(_rho, _a)[1]
    assert not np.isnan(_gr), ("the loss carries no gradient: compute it with torch operations on batch.logprobs "
                                 "(no .detach() of the ratio, no torch.no_grad())")
    assert abs(_gr - _want) < 1e-5, f"ratio {_rho}, advantage {_a}: expected gradient {_want}, got {_gr}"
print("visible tests for task 3 (gradient) passed")

### BEGIN HIDDEN TESTS
# The gradient of the token-level mean: -A / N for every real token, 0 at padding.
_lp = torch.zeros(2, 3, requires_grad=True)
_mask = torch.tensor([[True, False, False], [True, True, True]])
_loss(_batch(_lp, torch.zeros(2, 3), _mask, torch.tensor([4.0, 1.0]))).backward()
assert torch.allclose(_lp.grad, torch.tensor([[-1.0, 0, 0], [-0.25, -0.25, -0.25]])), f"wrong gradient: {_lp.grad}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_clipped_pg_loss_bounds", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 3, clip bounds: eps_low and eps_high as the batch gives them, and None removes that bound.
assert abs(_case(1.25, 1.0, 0.2, 0.28)[0] + 1.25) < 1e-5, (
    "eps_high = 0.28 must not clip a ratio of 1.25: use batch.eps_high for the upper bound, not a fixed 0.2")
assert abs(_case(3.0, 1.0, 0.2, None)[0] + 3.0) < 1e-5, (
    "eps_high = None removes the upper bound: a ratio of 3 with A > 0 is not clipped")
print("visible tests for task 3 (clip bounds) passed")

### BEGIN HIDDEN TESTS
assert abs(_case(1.35, 1.0, 0.2, 0.28)[0] + 1.28) < 1e-5, "eps_high = 0.28 clips 1.35 to 1.28"
assert abs(_case(0.75, -1.0, 0.3, 0.2)[1] - 0.75) < 1e-5, "eps_low = 0.3: a ratio of 0.75 with A < 0 is not clipped"
assert abs(_case(0.65, -1.0, 0.3, 0.2)[0] - 0.7) < 1e-5, "eps_low = 0.3 clips 0.65 to 0.7 when A < 0"
assert abs(_case(3.0, 1.0, 0.2, None)[1] + 3.0) < 1e-5, "eps_high=None: no upper bound, the gradient flows"
assert abs(_case(0.1, -1.0, None, 0.2)[1] - 0.1) < 1e-5, "eps_low=None: no lower bound, the gradient flows"
assert abs(_case(0.1, -1.0, None, None)[0] - 0.1) < 1e-5 and abs(_case(9.0, 1.0, None, None)[0] + 9.0) < 1e-5
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task3_clipped_pg_loss_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 3, types, shapes and inputs: a 0-dim tensor of the log-probs' dtype; one advantage per row,
# also when B = R; the batch's tensors untouched.
_lp = torch.tensor([[-1.0, -0.5], [-0.2, -2.0]], dtype=torch.float64, requires_grad=True)
_old = torch.tensor([[-1.1, -0.5], [-0.2, -1.9]], dtype=torch.float64)
_adv = torch.tensor([2.0, -1.0], dtype=torch.float64)
_mask = torch.ones(2, 2, dtype=torch.bool)
_out = _loss(_batch(_lp, _old, _mask, _adv))
assert isinstance(_out, torch.Tensor) and _out.ndim == 0, f"return a scalar tensor, got {type(_out).__name__} {tuple(getattr(_out, 'shape', ()))}"
assert _out.dtype == torch.float64, f"float64 log-probs gave a {_out.dtype} loss: keep their dtype"
# Row 0 (A = 2) and row 1 (A = -1) with B = R = 2: advantages[b] belongs to every token of row b, so
# the batch's loss is the mean of the two rows' losses (each row has 2 real tokens), each computed alone.
_rows = [_loss(_batch(_lp[b:b + 1], _old[b:b + 1], _mask[b:b + 1], _adv[b:b + 1])).item() for b in range(2)]
assert abs(_out.item() - sum(_rows) / 2) < 1e-9, (
    f"B = R = 2: the batch gave {_out.item():.5f}, its two rows alone {_rows}: advantages [B] belong to the ROWS, "
    "advantages[:, None] broadcasts each over its row's tokens")
assert torch.equal(_old, torch.tensor([[-1.1, -0.5], [-0.2, -1.9]], dtype=torch.float64)) and \
    torch.equal(_adv, torch.tensor([2.0, -1.0], dtype=torch.float64)), "clipped_pg_loss changed the batch's tensors"
print("visible tests for task 3 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
_out = _loss(_batch(torch.tensor([[-0.3]], requires_grad=True), torch.tensor([[-0.3]]), torch.ones(1, 1, dtype=torch.bool),
                    torch.tensor([0.5])))
assert isinstance(_out, torch.Tensor) and _out.ndim == 0 and _out.dtype == torch.float32, f"one token: got {_out}"
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


# %% nbgrader={"grade": true, "grade_id": "test_task4_token_entropy_values", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Task 4, values: the mean entropy over the response positions of the whole batch.
_logits = torch.zeros(1, 3, 4)  # uniform over 4 tokens: entropy log 4 everywhere
_out = token_entropy(_logits, torch.tensor([[False, True, True]]))
assert abs(float(_out) - np.log(4)) < 1e-6, f"uniform over 4 tokens: expected log 4 = 1.386, got {float(_out)}"
_logits = torch.tensor([[[0.0, 0.0], [50.0, -50.0]]]) + 3.0  # one uniform position, one certain; logits not normalised
assert abs(float(token_entropy(_logits, torch.tensor([[True, True]]))) - np.log(2) / 2) < 1e-5, (
    "expected the mean of log 2 and 0: the logits are not normalised, turn them into log-probs with torch.log_softmax")
# The prompt positions (mask False) are certain here and must not count.
_logits = torch.tensor([[[50.0, -50.0], [0.0, 0.0], [0.0, 0.0]]])
_out = float(token_entropy(_logits, torch.tensor([[False, True, True]])))
assert abs(_out - np.log(2) * 2 / 3) > 1e-4, (
    "got the mean over every position: average only where mask is True (the prompt positions are the "
    "model predicting the user's text, not the policy acting)")
assert abs(_out - np.log(2)) < 1e-5, f"expected log 2 = 0.693 at the two response positions, got {_out}"
# One mean over all response positions of the batch: row 0 has 1 response position (entropy 0),
# row 1 has 3 (entropy log 2 each): (0 + 3 log 2) / 4, not the mean of the rows' means (log 2 / 2).
_logits = torch.zeros(2, 3, 2)
_logits[0, 0] = torch.tensor([50.0, -50.0])
_out = float(token_entropy(_logits, torch.tensor([[True, False, False], [True, True, True]])))
assert abs(_out - np.log(2) / 2) > 1e-4, ("got the mean of each row's mean: average over all True positions of the "
                                          "batch together (entropy[mask].mean())")
assert abs(_out - 3 * np.log(2) / 4) < 1e-5, f"expected (0 + 3 log 2) / 4 = 0.520, got {_out}"
print("visible tests for task 4 (values) passed")

### BEGIN HIDDEN TESTS
# A random batch against the formula.
_logits = torch.tensor([[[50.0, -50.0, 0.0], [1.0, 2.0, 3.0], [0.5, 0.5, -1.0]],
                        [[50.0, -50.0, 0.0], [50.0, -50.0, 0.0], [0.0, 0.0, 0.0]]])
_mask = torch.tensor([[False, True, True], [False, False, True]])
_p = torch.softmax(_logits, -1)
_h = -(_p * _p.log()).sum(-1)
_want = _h[_mask].mean()
assert abs(float(token_entropy(_logits, _mask)) - float(_want)) < 1e-5, f"expected {float(_want):.4f} (mean over response positions of the whole batch)"
# The SFT model on its own samples, against the library's measurement.
from llmrl.sft.checkpoints import load_checkpoint
_yours, _lib = lab19.policy_entropy(load_checkpoint("sft", progress=False), token_entropy, n_prompts=32)
assert abs(_yours - _lib) < 1e-5, f"SFT model: your entropy {_yours:.4f}, the library's {_lib:.4f}"
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task4_token_entropy_contract", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 4, types, shapes and inputs: a 0-dim tensor of the logits' dtype that carries their gradient
# (an entropy bonus trains through it); the inputs untouched.
_logits = torch.tensor([[[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]]], dtype=torch.float64, requires_grad=True)
_mask = torch.tensor([[True, True]])
_out = token_entropy(_logits, _mask)
assert isinstance(_out, torch.Tensor) and _out.ndim == 0, (
    f"return a scalar tensor (no .item()), got {type(_out).__name__} {tuple(getattr(_out, 'shape', ()))}")
assert _out.dtype == torch.float64, f"float64 logits gave a {_out.dtype} entropy: keep their dtype"
assert _out.requires_grad, "the entropy carries no gradient: compute it with torch operations on the logits (no torch.no_grad())"
assert torch.equal(_logits.detach(), torch.tensor([[[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]]], dtype=torch.float64))
print("visible tests for task 4 (types, shapes and inputs) passed")

### BEGIN HIDDEN TESTS
# The gradient reaches the logits, finite; a batch of one works.
_x = torch.tensor([[[1.0, 2.0, 0.5], [0.3, 0.1, 0.0]]], requires_grad=True)
_out = token_entropy(_x, torch.tensor([[True, False]]))
_out.backward()
assert _out.ndim == 0 and torch.isfinite(_x.grad).all() and _x.grad.abs().sum() > 0
### END HIDDEN TESTS


# %% nbgrader={"grade": true, "grade_id": "test_task4_token_entropy_edge", "locked": true, "points": 0.5, "schema_version": 3, "solution": false, "task": false}
# Task 4, extreme inputs: very peaked logits in float32, where the losers' probabilities are exactly 0.
_out = token_entropy(torch.tensor([[[120.0, -120.0, 0.0], [0.0, 0.0, 0.0]]]), torch.tensor([[True, True]]))
assert torch.isfinite(_out), (
    f"peaked logits gave {float(_out)}: p * log p with p = 0 is 0 * (-inf) = nan; take log p from "
    "torch.log_softmax and p = exp(log p)")
print("visible tests for task 4 (extreme inputs) passed")

### BEGIN HIDDEN TESTS
# float32 and very peaked logits: 0 * log 0 must count as 0, not nan.
_out = token_entropy(torch.tensor([[[200.0, -200.0, 0.0], [0.0, 0.0, 0.0]]]), torch.tensor([[True, True]]))
assert torch.isfinite(_out) and abs(float(_out) - np.log(3) / 2) < 1e-5, (
    f"peaked logits gave {float(_out)}: p * log p with p = 0 is nan; use log_softmax and exp of it")
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
# As in part 2 each run trains seeds 0 to 4 together (mean, band, single seeds), here with **your**
# `clipped_pg_loss` as the loss; the check below compares your symmetric run with the reference
# code's on seed 0, and your `token_entropy` measures seed 0's trained policy.

# %% tags=["nbval-mask-numbers"]
clip_runs = lab19.part3_runs(clipped_pg_loss, seeds=SEEDS, steps=STEPS)  # {clip arm: a run per seed}
_ok = lab19.check_part3(clip_runs, REFERENCE)
_yours, _lib = lab19.policy_entropy(clip_runs["symmetric"].policies[0], token_entropy)
print(f"your token_entropy on seed 0's trained policy: {_yours:.4f} (library: {_lib:.4f})")
_ok = live_checks.compare_exact("Part 3, entropy of the trained policy", _yours, _lib, task="Task 4 (`token_entropy`)",
                                atol=1e-5)

# %% tags=["nbval-mask-numbers"]
fig = lab19.plot_entropy(clip_runs, lab19.ARTIFACTS / "entropy.png")
plt.show()
for _arm in lab19.CLIP_ARMS:  # mean ± standard deviation over your runs' seeds
    _sum = lab19.seed_summary(lab19.entropy_summary, clip_runs[_arm])
    _pm = lambda k, f: f"{_sum[k][0]:{f}} ± {_sum[k][1]:{f}}"  # noqa: E731
    print(f"{_arm:14s} entropy {_pm('entropy_start', '.3f')} -> {_pm('entropy_end', '.3f')} nats/token, "
          f"accuracy {_pm('accuracy_start', '.2f')} -> {_pm('final_accuracy', '.2f')}")
print(lab19.expected_report(lab19.part3_values({"entropy_seeds": clip_runs})))

# %% [markdown]
# **What happened.** Entropy drains steadily under both clipped settings, from about 0.29 to
# about 0.17 nats per token within the 120 steps, and at this scale you cannot tell the symmetric
# clip from clip-higher: their bands overlap and the gap between their means is smaller than the
# spread between seeds (the table's ± is one standard deviation over the seeds). The diagnostic
# shows why clip-higher was proposed: the upper clip rarely touches common tokens (about 5% of
# them), but it silences most of the rare positive-advantage tokens (about 88%), exactly the
# exploratory choices whose probability RL would need to raise to keep entropy up. Removing the
# upper bound entirely keeps entropy higher, but nothing stops a ratio from running away and the
# accuracy suffers: the clip is a safety device, not only a brake on exploration.
#
# ## Things to try (not graded)
#
# Each item below is a question with a **TODO**: write down your prediction, set `RUN = True` in
# its cell and run it (about a minute each on a quiet laptop; the same runs work from a shell, e.g.
# `python -m llmrl.labs.lab19 hack --beta 0.02` or
# `python -m llmrl.labs.lab19 entropy --arm clip-higher --epochs 2`). **Look at** says which numbers
# answer the question; part 2's runs end with a one-line verdict.
#
# 1. **Which flaw of the proxy can be exploited on its own?** It has two: credit for the answer
#    anywhere in the response, and the length bonus. TODO: predict, for each flaw alone, whether
#    the policy still learns to pad its answers. Look at: the final length and accuracy.
# 2. **A weaker leash.** TODO: predict the final accuracy with $\beta = 0.01$ and $0.02$ before you
#    run them (the slider above shows the stored runs for comparison). Look at: the final length
#    and KL.
# 3. **GRPO's std-normalised advantages.** Dividing by the group's standard deviation makes small
#    reward differences count as much as large ones. TODO: does the hack come sooner? Think of a
#    group in which every response is right and exactly one is padded: what advantage does the
#    padded one get under each normalisation? Look at: the step where accuracy peaks.
# 4. **Part 3 with 2 epochs, or $\epsilon_\text{high} = 0.4$.** The stored runs show five seeds of
#    every arm; the cell trains three seeds of each setting together. TODO: decide, before you
#    run, how large a gap between the symmetric clip and clip-higher you would need to see before
#    you believed it. Look at: the final entropy of every seed side by side.
# 5. **Part 1 with another pool.** TODO: which part of the gold curve moves with the pool's seed
#    or size? Look at: the gold gain at the smallest and the largest n.


# %%
def hack_verdict(run):
    """Print a part-2 run's final accuracy, length and KL, and whether it hacked the reward."""
    s = lab19.hack_summary(run)
    hacked = s["final_length"] > 3.5 and s["final_accuracy"] < 0.2
    print(f"final accuracy {s['final_accuracy']:.2f}, length {s['final_length']:.2f} characters, "
          f"KL {s['final_kl']:.1f} nats, accuracy peaked at step {s['peak_step']}: "
          + ("the policy padded its answers (hacked)" if hacked else "no hack"))
    return s


# %%
RUN = False  # 1. each flaw alone: substring credit without the length bonus, then an exact checker with it
if RUN:
    from llmrl.rewards import exact_match

    def exact_plus_length(responses, answers):
        return exact_match(responses, answers) + 0.1 * torch.tensor([float(len(r)) for r in responses])

    print("substring credit, no length bonus:")
    hack_verdict(lab19.hacking_run(0.0, length_bonus=0.0, kl_reward_fn=kl_penalized_rewards))
    print("exact match plus the length bonus:")
    hack_verdict(lab19.hacking_run(0.0, reward=exact_plus_length, kl_reward_fn=kl_penalized_rewards))
# BEGIN MARK SCHEME
# What the reference code shows (seeds 0-2, 300 steps; sft model of docs/lab19-calibration.md):
# neither flaw is exploited the way both together are. Substring credit without the bonus: final
# accuracy 0.61, 0.81, 0.80, length 2.82, 2.57, 2.62 (seed 0 drifts a little longer, KL 2.7 nats; no
# seed reaches the 4 characters of the full hack); exact match plus the bonus: accuracy 0.80-0.82,
# length 2.57-2.62, KL 0.45-0.54.
# Only together do they pay for padding: "85" followed by digits keeps the
# substring credit AND earns the bonus, while under an exact checker padding loses the 1.0.
# END MARK SCHEME

# %%
RUN = False  # 2. a weaker leash: beta = 0.01, then 0.02
if RUN:
    for beta in (0.01, 0.02):
        print(f"beta = {beta}:")
        hack_verdict(lab19.hacking_run(beta, kl_reward_fn=kl_penalized_rewards))
# BEGIN MARK SCHEME
# What the stored runs show (seeds 0-4): beta = 0.01 is too weak on some seeds and not on others
# (final length 2.66-3.40, KL 0.9-7.3 nats; seed 3 pads most: accuracy 0.26, length 3.4; seeds 0 and
# 2 hold: accuracy 0.72 and 0.77, length 2.7); beta = 0.02 holds every seed (accuracy 0.76-0.81,
# length 2.58-2.65, KL 0.5-1.2). The leash gives way between 0.01 and 0.02 here, and how far a
# weak leash lets the policy go depends on the seed: one seed would have given a different answer.
# END MARK SCHEME

# %%
RUN = False  # 3. std-normalised advantages: compare the step where accuracy peaks with the mean-baseline run
if RUN:
    print("mean baseline (the run above, seed 0):", lab19.hack_summary(hack_runs["0"][0])["peak_step"])
    hack_verdict(lab19.hacking_run(0.0, advantage="std"))
# BEGIN MARK SCHEME
# What the reference code shows (seeds 0-2): sooner on two seeds, not on the third. The best 10
# steps of accuracy end at steps 59, 31 and 27 under std normalisation against 138, 154 and 27 with
# the mean baseline, and every run still completes the hack (length 4.0, accuracy 0, KL 14.5-15.2
# nats). One seed per arm cannot answer this question, nor can three seeds pin the size of the
# effect; the argument
# for "sooner" is the arithmetic: in a group where all 8 responses are right and one is padded,
# the padded one's reward is only 0.2 higher; the mean baseline turns that into an advantage of
# 0.175, but dividing by the group's std (0.066) turns it into +2.6, as large as the advantage of a
# right answer over a wrong one, so padding is reinforced as strongly as being correct.
# END MARK SCHEME

# %%
RUN = False  # 4. part 3: 2 epochs, then eps_high = 0.4; seeds 0-2 of each, trained together


def final_entropies(label, runs):
    """Print every seed's final entropy (a list of runs, one per seed) and their mean ± sd."""
    ends = [lab19.entropy_summary(r)["entropy_end"] for r in runs]
    mean, sd = lab19.mean_sd(ends)
    print(f"{label}: final entropy per seed {np.round(ends, 3).tolist()}, mean {mean:.3f} ± {sd:.3f}")


if RUN:
    for arm in ("symmetric", "clip-higher"):
        final_entropies(f"{arm}, 4 epochs (your runs above)", clip_runs[arm])
        final_entropies(f"{arm}, 2 epochs", lab19.entropy_run(arm, policy_loss_fn=clipped_pg_loss, epochs=2,
                                                                seeds=[0, 1, 2]))
    final_entropies("eps_high = 0.4", lab19.entropy_run("clip-higher", policy_loss_fn=clipped_pg_loss, eps_high=0.4,
                                                         seeds=[0, 1, 2]))

# %%
RUN = False  # 5. part 1 with another pool seed and a 2,000,000-response pool
if RUN:
    for seed, size in ((1, 200_000), (0, 2_000_000)):
        curves = pool_curves_with(overopt.make_pool(size, b=1.0, sigma=1.0, seed=seed))
        print(f"seed {seed}, {size:,} responses: gold gain", np.round(curves["gold_gain"], 3))
    print("seed 0, 200,000 responses (above):  gold gain", np.round(biased["gold_gain"], 3))
