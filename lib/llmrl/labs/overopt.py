"""Lab 19, part 1: overoptimization of best-of-n against a length-biased proxy reward.

The reward-pool model (a generative model of scored responses, designed for this course)
------------------------------------------------------------------------------------------
Each response has two hidden properties:

* quality ``q ~ N(0, 1)``: how good the content is;
* padding ``l >= 0``: extra length beyond what the answer needs. Most responses have none: a share
  ``pad_share`` of them pads, by an amount ``Exponential(mean = length_scale)``; the rest have
  ``l = 0``.

The gold reward (what we care about) likes quality and dislikes padding; the proxy reward (what a
learned reward model measures) likes quality, is fooled by length and is noisy::

    gold  = q - padding_cost * l
    proxy = q + b * l + sigma * eps,          eps ~ N(0, 1)

With ``b > 0`` the proxy's highest scores come more and more from long responses, because the
exponential tail of ``l`` is heavier than the Gaussian tails of ``q`` and ``eps``: best-of-n first
picks good responses, then padded ones, and the gold gain turns down. With ``b = 0`` (noise only)
it never turns down.

The defaults (``padding_cost = 0.10``, ``length_scale = 1.4``, ``pad_share = 0.25``) are a
calibration: the published setting fixes ``b = sigma = 1``, the pool of 200,000 and the grid of n,
not the pool model, and these values were chosen from a recorded search (docs/reproducibility.md,
"lab19 calibration") as the candidate under which the most published Part 1 numbers hold in the
mean over pool seeds 0-4 (best-of-10 peak near +0.66, the fit's alpha 1.1 and beta 0.47, the
pool's -0.4 at n = 3000). With every response padded (``pad_share = 1``, the model before the
calibration) no padding cost and scale gave both the peak's place and its height: a peak at
best-of-10 came with a gain near +0.5, a gain near +0.66 with a flat top from n = 15 to 30.

Two ways to evaluate best-of-n on this model:

* :func:`make_pool` draws a finite pool of M responses and :func:`best_of_n_stats` weighs them
  exactly by rank (the winner of n draws with replacement is the k-th lowest of M with probability
  ``(k/M)^n - ((k-1)/M)^n``): exact for that pool, but the pool itself is a sample, so the far
  right (n in the thousands) rests on the top few hundred responses and is noisy;
* :func:`exact_best_of_n` integrates over the population (a grid over the proxy score and the
  padding), the same rank weights in the limit M -> infinity. It is what the sliders draw.

:func:`bon_kl` is the KL of best-of-n from the base policy and :func:`fit_gao_bon` fits Gao et
al.'s best-of-n form ``gain = d (alpha - beta d)`` with ``d = sqrt(KL)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..utils import check_float, check_int

#: n values the lab plots and fits (best-of-1 is the base policy).
DEFAULT_NS = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 200, 300, 500, 1000, 2000, 3000)
POOL_SIZE = 200_000
PADDING_COST = 0.10
LENGTH_SCALE = 1.4
PAD_SHARE = 0.25


def _check_ns(ns) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(ns))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"ns must be a non-empty 1-D sequence of ints, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise TypeError(f"ns must hold integers, got {arr!r}")
        arr = arr.astype(np.int64)
    if np.any(arr < 1):
        raise ValueError(f"ns must be >= 1, got {arr.min()}")
    return arr.astype(np.int64)


def bon_kl(n):
    """KL(best-of-n || base) = log n - (n - 1) / n, in nats (scalar or array of n >= 1)."""
    ns = _check_ns(n)
    out = np.log(ns) - (ns - 1) / ns
    return float(out[0]) if np.ndim(n) == 0 else out


def rank_weights(M: int, n: int) -> np.ndarray:
    """[M] probability that the best of n draws (with replacement) is the k-th lowest of M, k = 1..M."""
    check_int("M", M, minimum=1)
    check_int("n", n, minimum=1)
    k = np.arange(1, M + 1, dtype=float)
    return (k / M) ** n - ((k - 1) / M) ** n


def best_of_n_stats(proxy, gold, n: int) -> tuple[float, float]:
    """Expected (proxy, gold) score of the best-of-n response, exactly, from a pool.

    proxy, gold: [M] scores of the same M responses. Best-of-n draws n responses uniformly with
    replacement and keeps the one with the highest proxy. Sorting by proxy, the winner is the
    k-th lowest with probability w_k = (k/M)^n - ((k-1)/M)^n, so the answer is sum_k w_k * score_k.
    Ties in the proxy: tied responses are equally likely to win (each gets an equal share of its
    block's weight), so the answer does not depend on the order of the pool.
    """
    proxy = np.asarray(proxy, dtype=float)
    gold = np.asarray(gold, dtype=float)
    if proxy.ndim != 1 or proxy.size == 0:
        raise ValueError(f"proxy must be a non-empty 1-D array, got shape {proxy.shape}")
    if gold.shape != proxy.shape:
        raise ValueError(f"gold must have the shape of proxy {proxy.shape}, got {gold.shape}")
    n = check_int("n", n, minimum=1)
    order = np.argsort(proxy, kind="stable")
    w = rank_weights(proxy.size, n)
    # a block of equal proxy scores shares its weight evenly
    _, block, size = np.unique(proxy[order], return_inverse=True, return_counts=True)
    w = np.bincount(block, weights=w)[block] / size[block]
    return float(w @ proxy[order]), float(w @ gold[order])


def fit_gao_bon(d, gold_gain) -> tuple[float, float]:
    """Least-squares (alpha, beta) of gold_gain ~ d * (alpha - beta * d), d = sqrt(KL) (no intercept)."""
    d = np.asarray(d, dtype=float)
    y = np.asarray(gold_gain, dtype=float)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"d must be 1-D with at least 2 points, got shape {d.shape}")
    if y.shape != d.shape:
        raise ValueError(f"gold_gain must have the shape of d {d.shape}, got {y.shape}")
    A = np.stack([d, -d * d], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(alpha), float(beta)


@dataclass(frozen=True)
class Pool:
    """M sampled responses: their hidden quality and padding and their gold and proxy scores [M]."""

    quality: np.ndarray
    padding: np.ndarray
    gold: np.ndarray
    proxy: np.ndarray

    def __len__(self) -> int:
        return self.gold.size


def _check_model(b, sigma, padding_cost, length_scale, pad_share=1.0):
    pad_share = check_float("pad_share", pad_share, minimum=0.0)
    if pad_share > 1:
        raise ValueError(f"pad_share is a probability: it must be in [0, 1], got {pad_share}")
    b = check_float("b", b, minimum=0.0)
    sigma = check_float("sigma", sigma, minimum=0.0)
    padding_cost = check_float("padding_cost", padding_cost, minimum=0.0)
    length_scale = check_float("length_scale", length_scale, minimum=0.0)
    if length_scale == 0:
        raise ValueError("length_scale must be > 0")
    return b, sigma, padding_cost, length_scale, pad_share


def make_pool(M: int = POOL_SIZE, b: float = 1.0, sigma: float = 1.0, seed: int = 0,
              padding_cost: float = PADDING_COST, length_scale: float = LENGTH_SCALE,
              pad_share: float = PAD_SHARE) -> Pool:
    """Draw M responses from the reward-pool model (see the module docstring)."""
    M = check_int("M", M, minimum=1)
    b, sigma, padding_cost, length_scale, pad_share = _check_model(b, sigma, padding_cost, length_scale, pad_share)
    rng = np.random.default_rng(check_int("seed", seed, minimum=0))
    q = rng.standard_normal(M)
    l = rng.exponential(length_scale, M)
    eps = rng.standard_normal(M)
    if pad_share < 1:  # drawn after the others, so pad_share = 1 keeps the pools of a seed as they were
        l = np.where(rng.random(M) < pad_share, l, 0.0)
    return Pool(quality=q, padding=l, gold=q - padding_cost * l, proxy=q + b * l + sigma * eps)


def pool_curves(pool: Pool, ns=DEFAULT_NS) -> dict[str, np.ndarray]:
    """Best-of-n curves of a finite pool: {"n", "kl", "d", "proxy_gain", "gold_gain"} (gains vs best-of-1)."""
    ns = _check_ns(ns)
    order = np.argsort(pool.proxy, kind="stable")
    p, g = pool.proxy[order], pool.gold[order]
    M = len(pool)
    k = np.arange(1, M + 1, dtype=float) / M
    km1 = np.arange(0, M, dtype=float) / M
    proxy_gain, gold_gain = [], []
    for n in ns:
        w = k ** n - km1 ** n
        proxy_gain.append(w @ p - p.mean())
        gold_gain.append(w @ g - g.mean())
    kl = bon_kl(ns)
    return {"n": ns, "kl": kl, "d": np.sqrt(kl), "proxy_gain": np.array(proxy_gain),
            "gold_gain": np.array(gold_gain)}


def _ndtr(x: np.ndarray) -> np.ndarray:
    return torch.special.ndtr(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))).numpy()


def exact_best_of_n(ns=DEFAULT_NS, b: float = 1.0, sigma: float = 1.0, padding_cost: float = PADDING_COST,
                    length_scale: float = LENGTH_SCALE, grid: int = 1500,
                    pad_share: float = PAD_SHARE) -> dict[str, np.ndarray]:
    """Population (M -> infinity) best-of-n curves of the reward-pool model, by numerical integration.

    With Z = q + sigma * eps ~ N(0, s^2), s^2 = 1 + sigma^2, the proxy is P = Z + b * l. On a grid of
    proxy values p and padding values l (exact exponential mass per cell) we get the CDF F(p) and
    E[gold | P = p] = sum_l (E[q | Z = p - b l] - padding_cost * l) * density / sum_l density, with
    E[q | Z = z] = z / s^2. The best of n has CDF F^n, so its expected gold is
    sum_cells E[gold | p] * (F(p_hi)^n - F(p_lo)^n): the rank weights of a pool of infinite size.
    Returns {"n", "kl", "d", "proxy_gain", "gold_gain"} (gains vs the base policy); about 20 ms.
    """
    ns = _check_ns(ns)
    b, sigma, padding_cost, length_scale, pad_share = _check_model(b, sigma, padding_cost, length_scale, pad_share)
    check_int("grid", grid, minimum=100)
    s2 = 1.0 + sigma ** 2
    s = np.sqrt(s2)
    # padding grid: cells of equal width up to 30 means, exact exponential mass per cell
    edges = np.linspace(0.0, 30.0 * length_scale, 241)
    mass = np.exp(-edges[:-1] / length_scale) - np.exp(-edges[1:] / length_scale)
    l_mid = length_scale + edges[:-1] - (edges[1:] - edges[:-1]) * np.exp(-(edges[1:] - edges[:-1]) / length_scale) \
        / (1 - np.exp(-(edges[1:] - edges[:-1]) / length_scale))  # mean of l within each cell
    if pad_share < 1:  # the unpadded responses: a cell of their own at l = 0
        mass = np.concatenate([[1.0 - pad_share], pad_share * mass])
        l_mid = np.concatenate([[0.0], l_mid])
    # proxy grid wide enough for best-of-10^4
    hi = 6.0 * s + b * 15.0 * length_scale
    p_edges = np.linspace(-8.0 * s, hi, grid + 1)
    p_mid = 0.5 * (p_edges[:-1] + p_edges[1:])
    F = _ndtr((p_edges[:, None] - b * l_mid[None, :]) / s) @ mass  # [grid + 1]
    F = np.clip(F / mass.sum(), 0.0, 1.0)
    z = p_mid[:, None] - b * l_mid[None, :]
    dens = np.exp(-0.5 * z * z / s2) * mass[None, :]  # unnormalised joint density of (p, l) per cell
    tot = dens.sum(1)
    safe = np.where(tot > 0, tot, 1.0)
    e_gold = np.where(tot > 0, ((z / s2 - padding_cost * l_mid[None, :]) * dens).sum(1) / safe, 0.0)
    base_gold = -padding_cost * length_scale * pad_share
    base_proxy = b * length_scale * pad_share
    proxy_gain, gold_gain = [], []
    for n in ns:
        w = np.diff(F ** n)
        wsum = w.sum()
        proxy_gain.append(w @ p_mid / wsum - base_proxy)
        gold_gain.append(w @ e_gold / wsum - base_gold)
    kl = bon_kl(ns)
    return {"n": ns, "kl": kl, "d": np.sqrt(kl), "proxy_gain": np.array(proxy_gain),
            "gold_gain": np.array(gold_gain)}


def peak(curves: dict) -> dict[str, float]:
    """Where the gold gain of a curve dict peaks: {"n", "kl", "gold_gain"}."""
    i = int(np.argmax(curves["gold_gain"]))
    return {"n": int(curves["n"][i]), "kl": float(curves["kl"][i]), "gold_gain": float(curves["gold_gain"][i])}


def plot_best_of_n(ax, curves: dict, label: str = "", style: str = "-", fit: tuple | None = None, color=None,
                   proxy_ax=None):
    """Draw gold (and proxy) gain against sqrt(KL) on ``ax``, with the fitted d(alpha - beta d).

    The proxy gain grows several times faster than the gold gain: pass ``proxy_ax`` (e.g.
    ``ax.twinx()``) to draw it on its own scale, or None to draw it on ``ax``.
    """
    d = curves["d"]
    line, = ax.plot(d, curves["gold_gain"], style, color=color, ms=3, label=f"gold {label}".strip())
    pax = ax if proxy_ax is None else proxy_ax
    pax.plot(d, curves["proxy_gain"], style, color=line.get_color(), ms=3, alpha=0.35,
             label=f"proxy {label}".strip() + (" (right axis)" if proxy_ax is not None else ""))
    if proxy_ax is not None:
        proxy_ax.set_ylabel("proxy gain", color="grey")
    if fit is not None:
        dd = np.linspace(0, d.max(), 100)
        ax.plot(dd, dd * (fit[0] - fit[1] * dd), ":", color=line.get_color(),
                label=rf"fit $d\,(\alpha - \beta d)$: $\alpha$ = {fit[0]:.2f}, $\beta$ = {fit[1]:.2f}")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel(r"$d = \sqrt{\mathrm{KL}}$ from the base policy (KL in nats)")
    ax.set_ylabel("gold gain over the base policy")
    return ax
