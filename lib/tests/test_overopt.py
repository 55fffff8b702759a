"""Tests of llmrl.overopt: best-of-n KL, exact rank weights, the Gao fit and the reward-pool model."""

import numpy as np
import pytest

from llmrl import overopt
from llmrl.labs.lab19 import EXPECTED


def test_bon_kl_values():
    assert overopt.bon_kl(1) == 0.0
    assert overopt.bon_kl(2) == pytest.approx(np.log(2) - 0.5)
    assert overopt.bon_kl(10) == pytest.approx(1.4026, abs=1e-4)  # the handout's "KL ~ 1.4" at n = 10
    np.testing.assert_allclose(overopt.bon_kl([1, 3]), [0.0, np.log(3) - 2 / 3])


@pytest.mark.parametrize("bad", [0, -3, [1, 0]])
def test_bon_kl_rejects_n_below_one(bad):
    with pytest.raises(ValueError, match="ns"):
        overopt.bon_kl(bad)


def test_rank_weights_sum_to_one_and_favour_the_top():
    w = overopt.rank_weights(5, 3)
    assert w.sum() == pytest.approx(1.0)
    assert np.all(np.diff(w) > 0)
    np.testing.assert_allclose(overopt.rank_weights(4, 1), np.full(4, 0.25))


def test_best_of_n_stats_hand_example():
    # three responses, best-of-2: the top one wins with 1 - (2/3)^2 = 5/9, the middle with 3/9, the bottom 1/9
    proxy, gold = np.array([0.5, 2.0, 1.0]), np.array([1.0, -1.0, 3.0])
    p, g = overopt.best_of_n_stats(proxy, gold, 2)
    assert p == pytest.approx((1 * 0.5 + 3 * 1.0 + 5 * 2.0) / 9)
    assert g == pytest.approx((1 * 1.0 + 3 * 3.0 + 5 * -1.0) / 9)
    assert overopt.best_of_n_stats(proxy, gold, 1) == pytest.approx((proxy.mean(), gold.mean()))


def test_best_of_n_stats_matches_brute_force():
    rng = np.random.default_rng(1)
    proxy, gold = rng.standard_normal(50), rng.standard_normal(50)
    n = 4
    idx = rng.integers(0, 50, size=(200_000, n))
    win = idx[np.arange(len(idx)), proxy[idx].argmax(1)]
    p, g = overopt.best_of_n_stats(proxy, gold, n)
    # 200,000 draws: standard errors ~0.002, so 0.01 is about 5 standard errors
    assert p == pytest.approx(proxy[win].mean(), abs=0.01)
    assert g == pytest.approx(gold[win].mean(), abs=0.01)


def test_best_of_n_stats_shares_a_tie_evenly_whatever_the_order():
    # proxy 1, 1, 0 and best-of-2: the tied pair shares 8/9, 4/9 each
    assert overopt.best_of_n_stats(np.array([1.0, 1.0, 0.0]), np.array([3.0, 0.0, 0.0]), 2)[1] == pytest.approx(4 / 3)
    rng = np.random.default_rng(0)
    proxy, gold = rng.integers(0, 4, 30).astype(float), rng.standard_normal(30)
    want = overopt.best_of_n_stats(proxy, gold, 5)
    for _ in range(5):
        perm = rng.permutation(30)
        assert overopt.best_of_n_stats(proxy[perm], gold[perm], 5) == pytest.approx(want, abs=1e-12)


def test_best_of_n_stats_checks_arguments():
    with pytest.raises(ValueError, match="gold"):
        overopt.best_of_n_stats(np.zeros(3), np.zeros(4), 2)
    with pytest.raises(ValueError, match="n"):
        overopt.best_of_n_stats(np.zeros(3), np.zeros(3), 0)


def test_fit_gao_bon_recovers_parameters():
    d = np.linspace(0.1, 3, 20)
    a, b = overopt.fit_gao_bon(d, d * (1.1 - 0.47 * d))
    assert (a, b) == pytest.approx((1.1, 0.47))
    with pytest.raises(ValueError, match="gold_gain"):
        overopt.fit_gao_bon(d, d[:-1])


def test_exact_agrees_with_a_large_pool():
    # A pool of 2 million: at n <= 300 the rank-weighted pool value has a standard error of ~0.01.
    e = overopt.exact_best_of_n(ns=[1, 3, 10, 30, 100, 300])
    pool = overopt.pool_curves(overopt.make_pool(2_000_000, seed=3), ns=[1, 3, 10, 30, 100, 300])
    np.testing.assert_allclose(e["gold_gain"], pool["gold_gain"], atol=0.03)
    np.testing.assert_allclose(e["proxy_gain"], pool["proxy_gain"], atol=0.03)


def test_exact_noise_only_is_gaussian_max():
    # b = 0: the proxy is q + sigma * eps and padding plays no part, so gold gain = E[max of n N(0,1)] / sqrt(1 + sigma^2)
    e = overopt.exact_best_of_n(ns=[2, 10], b=0.0, sigma=1.0)
    np.testing.assert_allclose(e["gold_gain"], np.array([1 / np.sqrt(np.pi), 1.538753]) / np.sqrt(2), atol=2e-3)


def test_length_biased_pool_shows_overoptimization():
    pool = overopt.pool_curves(overopt.make_pool())  # b = sigma = 1, 200,000 responses, seed 0
    pk = overopt.peak(pool)
    # handout: the gold gain peaks at best-of-10 (KL 1.4) at about +0.66. The calibrated model
    # (pad_share 0.25) peaks at n = 10 on every pool seed 0-4 (+0.68 to +0.69; the exact curve
    # +0.686 with n = 7 and 15 at 0.659 and 0.684): the peak's n exactly, its height within 0.07
    # ("about" to two figures).
    assert pk["n"] == EXPECTED["bon_peak_n"]
    assert pk["gold_gain"] == pytest.approx(EXPECTED["bon_peak_gold_gain"], abs=0.07)
    assert pool["gold_gain"][-1] < 0  # handout: negative by best-of-3000 ...
    assert np.all(np.diff(pool["proxy_gain"]) > 0)  # ... while the proxy keeps rising
    alpha, beta = overopt.fit_gao_bon(pool["d"], pool["gold_gain"])
    # handout alpha ~1.1, beta ~0.47; ours (seed 0) 1.07 and 0.46, seeds 0-4 1.00-1.09 and
    # 0.40-0.47: 10% on alpha, 15% on beta (the less determined of the two)
    assert alpha == pytest.approx(EXPECTED["gao_alpha"], abs=0.11)
    assert beta == pytest.approx(EXPECTED["gao_beta"], abs=0.07)


def test_every_response_padded_flattens_the_peak():
    # the model before the calibration (every response pads, padding_cost 0.3, mean 0.75): the
    # gold curve's top is flat (n = 10 to 50 within 0.05 of it) and peaks at n = 30, not 10
    e = overopt.exact_best_of_n(pad_share=1.0, padding_cost=0.3, length_scale=0.75)
    assert overopt.peak(e)["n"] >= 20
    g = dict(zip(e["n"], e["gold_gain"]))
    assert max(g[10], g[50]) > overopt.peak(e)["gold_gain"] - 0.06
    # pad_share = 1 draws the same pool as before pad_share existed (the share is drawn last)
    rng = np.random.default_rng(0)
    q, l = rng.standard_normal(50), rng.exponential(0.75, 50)
    pool = overopt.make_pool(50, pad_share=1.0, padding_cost=0.3, length_scale=0.75)
    np.testing.assert_array_equal(pool.quality, q)
    np.testing.assert_array_equal(pool.padding, l)


def test_pad_share_is_the_share_of_padded_responses():
    pool = overopt.make_pool(100_000, seed=1)
    assert (pool.padding > 0).mean() == pytest.approx(overopt.PAD_SHARE, abs=0.01)  # s.e. 0.0014
    assert pool.padding[pool.padding > 0].mean() == pytest.approx(overopt.LENGTH_SCALE, rel=0.03)
    with pytest.raises(ValueError, match="pad_share"):
        overopt.make_pool(10, pad_share=1.5)
    with pytest.raises(ValueError, match="pad_share"):
        overopt.exact_best_of_n(pad_share=-0.1)


def test_noise_only_never_turns_down():
    pool = overopt.pool_curves(overopt.make_pool(b=0.0))
    assert np.all(np.diff(pool["gold_gain"]) > -0.02)  # pool noise at the far right is ~0.02
    _, beta = overopt.fit_gao_bon(pool["d"], pool["gold_gain"])
    assert abs(beta) < 0.05  # handout: beta ~ 0
    # exactly (an infinite pool) the gold gain of a noise-only proxy rises with n at every n and any noise
    for sigma in (0.5, 1.0, 3.0):
        assert np.all(np.diff(overopt.exact_best_of_n(b=0.0, sigma=sigma)["gold_gain"]) > 0), sigma


def test_finite_pool_error_at_large_n():
    # handout: for b = sigma = 1 at n = 3000 one pool says about -0.4 while the exact value is about
    # +0.10. A pool of 200,000 is a fair sample there: over pool seeds 0-4 ours scatter around the
    # exact value -0.19 (measured -0.33 to -0.03, mean -0.23, so the pool's -0.4 is within reach
    # of one pool), while no pool model of our search put the exact value at +0.10 together with
    # the peak at best-of-10 (docs/reproducibility.md, "lab19 calibration"). Checked: the seeds' mean
    # within 0.15 of the exact value (5 seeds of spread ~0.11: s.e. ~0.05, 3 s.e.), and the
    # single seeds spread (the far right is noisy): range above 0.1.
    e = overopt.exact_best_of_n(ns=[3000])["gold_gain"][0]
    p = np.array([overopt.pool_curves(overopt.make_pool(seed=s), ns=[3000])["gold_gain"][0] for s in range(5)])
    assert e < 0 and p.mean() < 0
    assert abs(p.mean() - e) < 0.15, (p, e)
    assert p.max() - p.min() > 0.1, p


def test_make_pool_checks_arguments():
    with pytest.raises(ValueError, match="sigma"):
        overopt.make_pool(10, sigma=-1.0)
    with pytest.raises(TypeError, match="M"):
        overopt.make_pool(10.5)
