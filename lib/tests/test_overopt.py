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
    # handout: peak near best-of-10 at +0.66. Our model's gold curve is flat between n = 10 and 50
    # (within 0.05 of its top), so the argmax may sit anywhere in 10..50; the value within 0.1.
    assert 10 <= pk["n"] <= 50
    assert pk["gold_gain"] == pytest.approx(EXPECTED["bon_peak_gold_gain"], abs=0.1)
    i10 = list(pool["n"]).index(10)
    assert pool["gold_gain"][i10] == pytest.approx(EXPECTED["bon_peak_gold_gain"], abs=0.05)
    assert pool["gold_gain"][-1] < 0  # handout: negative by best-of-3000 ...
    assert np.all(np.diff(pool["proxy_gain"]) > 0)  # ... while the proxy keeps rising
    alpha, beta = overopt.fit_gao_bon(pool["d"], pool["gold_gain"])
    # handout alpha ~1.1, beta ~0.47; ours 1.07 and 0.41 (a different pool model): 0.1 on each
    assert alpha == pytest.approx(EXPECTED["gao_alpha"], abs=0.1)
    assert beta == pytest.approx(EXPECTED["gao_beta"], abs=0.1)


def test_noise_only_never_turns_down():
    pool = overopt.pool_curves(overopt.make_pool(b=0.0))
    assert np.all(np.diff(pool["gold_gain"]) > -0.02)  # pool noise at the far right is ~0.02
    _, beta = overopt.fit_gao_bon(pool["d"], pool["gold_gain"])
    assert abs(beta) < 0.05  # handout: beta ~ 0


def test_finite_pool_error_at_large_n():
    # handout: for b = sigma = 1 at n = 3000 the pool says about -0.4, the exact value about +0.10.
    # Ours: pool (seed 0) -0.10, exact +0.02: the same sign flip, a smaller error.
    e = overopt.exact_best_of_n(ns=[3000])["gold_gain"][0]
    p = overopt.pool_curves(overopt.make_pool(), ns=[3000])["gold_gain"][0]
    assert e > 0 > p
    assert 0.05 < e - p < 0.6


def test_make_pool_checks_arguments():
    with pytest.raises(ValueError, match="sigma"):
        overopt.make_pool(10, sigma=-1.0)
    with pytest.raises(TypeError, match="M"):
        overopt.make_pool(10.5)
