"""Reproduce the published results of the four assignments, with seeds: ``make reproduce``.

Every "what you should see" / "what we observed" statement of the material the course was built
from (lab11, lab19, lab21, hw4) is a :class:`Claim` in :data:`CLAIMS`: an id, the lab, the
statement in the course's words, the published value, a :class:`Check` (the tolerance, with its
reason) and a function that computes our value from one seed's experiment results. Claims read
the results of :data:`EXPERIMENTS`; each experiment is computed once per seed and shared by every
claim that reads it, and each (experiment, seed) result is cached as JSON under
``artifacts/reproduce/`` (:func:`cache_dir`), so a rerun of the report only computes what is
missing. The cache key is the experiment's settings, the fingerprints of the models it starts
from and the torch version; library code is not in the key (every result records the library's
source fingerprint, and the report marks results computed by other code: rerun with ``--fresh``).

Command line::

    python -m llmrl.tools.reproduce                     # every claim, seeds 0,1,2 -> docs/reproduction.md
    python -m llmrl.tools.reproduce --fast              # the claims on cheap experiments only (~1 minute)
    python -m llmrl.tools.reproduce --only lab19 --seeds 0,1,2,3,4
    python -m llmrl.tools.reproduce --report-only       # rewrite the report from the cache, run nothing

A claim's verdict: ``holds`` (a qualitative claim true of the mean over seeds, or an exact value
within its rounding), ``within about`` (a number within the published "about"), ``differs`` (with
the reason when known), ``not run`` (its experiment was not run or cannot run here).

Seeds: every experiment takes a list of seeds. The runner-based ones (lab19's parts 2-3, lab21's
projects) hand the list to :func:`llmrl.runner.run_arms`, whose arm functions train an arm's seeds
as one stacked computation; :func:`per_seed` is the one loop over seeds for the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..utils import mean_sd, repo_root

CACHE_VERSION = 1
DEFAULT_SEEDS = (0, 1, 2)
# Experiments whose notebook trains other seeds than DEFAULT_SEEDS run at the notebook's (unless --seeds is
# given): lab19's Parts 2-3 train lab19.REFERENCE_SEEDS, and lab21's Project 1 asks for seeds 0-4
# (projects.ipynb's P1_SEEDS). lib/tests/test_reproduce.py keeps these equal to the notebooks'.
NOTEBOOK_SEEDS = {"lab19": (0, 1, 2, 3, 4), "lab21/project1": (0, 1, 2, 3, 4)}
LABS = ("lab11", "lab19", "lab21", "hw4")


def cache_dir() -> Path:
    """``$LLMRL_REPRODUCE_CACHE``, else ``artifacts/reproduce`` at the repository root (else here)."""
    env = os.environ.get("LLMRL_REPRODUCE_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "artifacts" / "reproduce"


def default_report_path() -> Path:
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "docs" / "reproduction.md"


# ============================================================================ checks (tolerances)

@dataclass(frozen=True)
class Check:
    """How a claim is judged on the mean over seeds.

    ``kind``: "near" (|mean - target| <= tol), "range" (lo <= mean <= hi), "above" (mean > lo),
    "below" (mean < hi). ``about``: the published value was stated loosely ("about", "~"): a pass
    is "within about"; otherwise a pass is "holds" (qualitative claims, exact values). ``reason``:
    why this tolerance."""

    kind: str
    reason: str
    target: float | None = None
    tol: float | None = None
    lo: float | None = None
    hi: float | None = None
    about: bool = False

    def passes(self, x: float) -> bool:
        if x is None or not math.isfinite(x):
            return False
        if self.kind == "near":
            return abs(x - self.target) <= self.tol + 1e-12
        if self.kind == "range":
            return self.lo - 1e-12 <= x <= self.hi + 1e-12
        if self.kind == "above":
            return x > self.lo
        if self.kind == "below":
            return x < self.hi
        raise ValueError(f"unknown check kind {self.kind!r}")

    def describe(self) -> str:
        if self.kind == "near":
            return f"±{self.tol:g}"
        if self.kind == "range":
            return f"in [{self.lo:g}, {self.hi:g}]"
        if self.kind == "above":
            return f"> {self.lo:g}"
        return f"< {self.hi:g}"


def near(target: float, tol: float, reason: str, about: bool = True) -> Check:
    return Check("near", reason, target=target, tol=tol, about=about)


def between(lo: float, hi: float, reason: str, about: bool = True) -> Check:
    return Check("range", reason, lo=lo, hi=hi, about=about)


def above(lo: float, reason: str) -> Check:
    return Check("above", reason, lo=lo)


def below(hi: float, reason: str, about: bool = False) -> Check:
    return Check("below", reason, hi=hi, about=about)


# "About" tolerances, shared by many claims (each claim names one, so its reason is in the report).
ACC_ABOUT = ("accuracies stated to two figures as 'about' or a single seed's value: ±0.05 covers the "
             "rounding and the evaluation noise of a few hundred samples (s.e. about 0.02)")
ACC_SEED = ("a single seed's published value of a short RL run: ±0.07 covers the seed-to-seed spread "
            "of such runs (about 0.03-0.05) and the evaluation noise")
KL_ABOUT = "a single seed's KL: ±15% of the published value covers seed spread and rounding"
SLOWER_P0 = ("the split of the 64 sequences into prompts x samples, which is not published, moves the distillation "
             "arms most: 16 x 4 is the split that holds the most claims, 32 x 2 overshoots the published pass@1 and "
             "8 x 8 falls short (docs/lab21-calibration.md, second search)")
ENT_ABOUT = "a single seed's entropy to two or three figures: ±0.03 nats/token covers seed spread"
GREEDY = "greedy decoding: the same answers on every seed, so one value"
# Why lab19's claims differ where the shipped sft model misses them (shown only where they do). The model
# was chosen by a recorded search (docs/lab19-calibration.md) whose gates were the entropy level, the
# hack's completion and lab11's greedy accuracy; these reasons come from its records.
SFT_SHARPER = ("the sft model is sharper at T = 1 than the published one: of the 17 candidates of the model's search "
               "(docs/lab19-calibration.md), the only one through all three of its gates (entropy after 120 steps, "
               "the hack completed, greedy accuracy) starts here")
HACK_PARTIAL = ("the complete hack came on fewer seeds than a published run's statement needs (the search's gate asked "
                "for 4 of 5)")
ENT_FLOOR = ("the entropy ends above the published level (the search's gate asked for 0.15 +- 0.03 after 120 steps)")
CLIP_RARE = ("epochs 2-4 of the second half of the run, where clipping is possible, give 0.85-0.90 on the five seeds; "
             "every candidate of the sft model's search stayed below 0.90 (0.78-0.89, docs/lab19-calibration.md)")
CLIP_COMMON = ""


# ============================================================================ claims

@dataclass(frozen=True)
class Claim:
    """One published result. ``measure(results) -> float`` gets {experiment: result} of one seed
    (for every experiment in ``experiments``) and returns our number; the check is applied to the
    mean over seeds, or, with ``min_seeds`` (a statement about one published run, such as "the hack
    completes"), to each seed: at least that share of the seeds must pass. ``seedless``: why the
    seed cannot change the value (greedy decoding, an exact computation): it is judged and reported
    as one value, not as "n of n seeds". ``fmt`` formats values; ``known``: why ours differs, when
    we know (shown only when it does)."""

    id: str
    lab: str
    statement: str
    published: str
    experiments: tuple[str, ...]
    measure: Callable[[dict], float]
    check: Check
    qualitative: bool = False
    fmt: str = "{:.3f}"
    known: str = ""
    seedless: str = ""                 # why the seed cannot change the value (greedy decoding, exact maths): one value
    min_seeds: float | None = None     # a statement about one published run: the share of seeds that must pass


def _ev(res: dict, arm: str, metric: str, i: int = -1) -> float:
    v = res["arms"][arm]["evals"][metric][i]
    return float("nan") if v is None else float(v)


def _curve(res: dict, arm: str, metric: str) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in res["arms"][arm]["curve"][metric]], dtype=float)


def _claims() -> list[Claim]:
    from ..hw4.plots import reward_rise
    from ..labs.lab19 import MID_WINDOW, hack_completed

    C = []

    def add(*a, **k):
        C.append(Claim(*a, **k))

    # ------------------------------------------------------------------------------------ lab11
    # What a correct implementation gives on any run is not a result here but a test: the worked
    # example's pi* and soft values, the token-level optimum equal to the sequence-level one, the Gibbs
    # gap and "no random policy beats pi*", temperature below the frontier (lib/tests/test_toylm.py);
    # no gradient into the prompt, k1 and k3 unbiased and k2 biased, greedy decoding's single answer
    # (lib/tests/test_lab11.py). The claims below are results of the SFT model's training and of
    # sampling from it, or the toy LM's published frontier (an exact computation of its scenario).
    S = ("lab11/sweep",)
    add("lab11.greedy-accuracy", "lab11", "The SFT TinyLM's accuracy with greedy decoding (200 problems).",
        "about 0.80", S, lambda r: r["lab11/sweep"]["accuracy"]["0"], near(0.80, 0.05, ACC_ABOUT),
        seedless=GREEDY)
    add("lab11.accuracy-T1", "lab11", "Its accuracy when sampling at T = 1.", "about 0.55", S,
        lambda r: r["lab11/sweep"]["accuracy"]["1"], near(0.55, 0.05, ACC_ABOUT))
    add("lab11.accuracy-T2", "lab11", "Its accuracy at T = 2.", "below 0.30", S,
        lambda r: r["lab11/sweep"]["accuracy"]["2"], below(0.30, "a bound, as published"))
    add("lab11.accuracy-falls", "lab11", "Accuracy falls as T rises from 0 to 1 to 2 (smallest of the two drops).",
        "falls", S, lambda r: min(r["lab11/sweep"]["accuracy"]["0"] - r["lab11/sweep"]["accuracy"]["1"],
                                  r["lab11/sweep"]["accuracy"]["1"] - r["lab11/sweep"]["accuracy"]["2"]),
        above(0.0, "a direction"), qualitative=True)
    add("lab11.distinct-T2", "lab11", "Distinct well-formed answers among 8 samples at T = 2 (a malformed "
        "sample, with a '+', '=' or special token in it, is no answer).", "about 5", S,
        lambda r: r["lab11/sweep"]["distinct"]["2"], near(5.0, 1.0, "a count published as 'about 5': ±1"),
        fmt="{:.2f}")
    add("lab11.distinct-climbs", "lab11", "The number of distinct answers climbs with T over the sweep "
        "(smallest change between neighbouring temperatures; negative is a fall).", "climbs", S,
        lambda r: float(np.diff(r["lab11/sweep"]["distinct_all"]).min()),
        above(-0.1, "a direction; a dip under 0.1 answers is sampling noise of 200 prompts"), qualitative=True,
        fmt="{:.2f}")
    K = ("lab11/kl",)
    add("lab11.kl-agree-hot", "lab11", "At T = 1.5 and 2, k1 and k3 agree with the exact KL (largest "
        "|median batch estimate / exact - 1| over both estimators and both temperatures).", "agree", K,
        lambda r: max(abs(r["lab11/kl"][T][k] - 1) for T in ("1.5", "2") for k in ("k1_ratio", "k3_ratio")),
        below(0.2, "one batch of 128 responses estimates to about ±10%; 20% is 'agree'"), qualitative=True)
    add("lab11.k3-low-sharp", "lab11", "At T = 0.25, k3 is far below the exact KL (median batch estimate / exact).",
        "far too low", K, lambda r: r["lab11/kl"]["0.25"]["k3_ratio"],
        below(0.5, "'far too low': less than half the truth"), qualitative=True)
    add("lab11.k3-bars-miss", "lab11", "At T = 0.25, most batches' k3 error bars do not cover the exact KL "
        "(share of batches whose bar covers it).", "bars miss", K, lambda r: r["lab11/kl"]["0.25"]["k3_covers"],
        below(0.5, "'don't cover the truth': fewer than half the batches"), qualitative=True)
    F = ("lab11/frontier",)
    add("lab11.cooling-reduces-reward", "lab11", "In the worked scenario lowering T below 1 lowers the reward "
        "(reward at T = 1 minus the largest reward at T < 1; exact, from the scenario's numbers).", "reduces", F,
        lambda r: r["lab11/frontier"]["worked_cooling_loss"], above(0.0, "a direction"), qualitative=True)
    add("lab11.hack-rises-falls", "lab11", "In the hack scenario the true reward of pi* rises and then falls "
        "(smaller of: peak minus start, peak minus the value at the smallest beta).", "rises, peaks, falls", F,
        lambda r: r["lab11/frontier"]["hack_rise_fall"], above(0.0, "a shape"), qualitative=True)
    add("lab11.hack-peak-kl", "lab11", "Where that true reward peaks (KL of pi* to pi_ref, nats).", "about 0.5",
        F, lambda r: r["lab11/frontier"]["hack_peak_kl"], near(0.5, 0.1, "'around 0.5': ±0.1, the beta grid's "
                                                                       "resolution near the peak is 0.03"))

    # ------------------------------------------------------------------------------------ lab19
    # Part 1's pools are samples (seeded); "the proxy gain keeps rising with n" and "with b = 0 the
    # exact gold gain never turns down" hold for every pool and every noise level (the best of more
    # draws of a score is at least as high; with b = 0 gold and proxy rise together): tests
    # (lib/tests/test_overopt.py), not results.
    P = ("lab19/overopt",)
    o = lambda k: (lambda r: r["lab19/overopt"][k])  # noqa: E731
    add("lab19.bon-peak-n", "lab19", "With a length-biased proxy (b = sigma = 1) best-of-n's gold gain peaks at "
        "this n (finite pool of 200,000).", "10", P, o("peak_n"),
        between(7, 15, "the neighbouring n of the grid (7, 15): the curve is flat near its top"), fmt="{:.0f}",
        known="the reward-pool model's peak (calibrated: llmrl.overopt's pad_share, padding cost and scale)")
    add("lab19.bon-peak-kl", "lab19", "The KL of that peak, nats.", "about 1.4", P, o("peak_kl"),
        near(1.4, 0.3, "'about': ±0.3, about a fifth (the grid's neighbours n = 7 and 15 sit at 1.09 and 1.78)"),
        known="follows the peak's n")
    add("lab19.bon-peak-gain", "lab19", "The gold gain at the peak.", "about +0.66", P, o("peak_gain"),
        near(0.66, 0.07, "'about' to two figures: ±0.07 (10%)"))
    add("lab19.bon-negative-3000", "lab19", "The pool's gold gain is negative by best-of-3000.", "negative", P,
        o("pool_gain_3000"), below(0.0, "a sign"), qualitative=True)
    add("lab19.gao-alpha", "lab19", "Gao et al.'s fit d(alpha - beta d) to the pool's gold gain: alpha.",
        "about 1.1", P, o("alpha"), near(1.1, 0.11, "'about' to two figures: ±10%"))
    add("lab19.gao-beta", "lab19", "The same fit's beta.", "about 0.47", P, o("beta"),
        near(0.47, 0.07, "'about' to two figures: ±15% (beta is the less determined of the two)"),
        known="a different reward-pool model from the published one (calibrated, not the same): the fit's "
              "curvature depends on it")
    add("lab19.noise-beta", "lab19", "With a noise-only proxy (b = 0) the fit's beta is about zero.", "about 0", P,
        o("noise_beta"), near(0.0, 0.05, "'about 0': ±0.05, a tenth of the biased case's beta"))
    add("lab19.pool-3000", "lab19", "The pool's (noisy) gold gain at n = 3000.", "about -0.4", P,
        o("pool_gain_3000"), near(-0.4, 0.25, "the published note calls these points noisy: ±0.25 is about "
                                              "the spread of that point over pool seeds"))
    add("lab19.exact-3000", "lab19", "The exact (infinite-pool) gold gain at n = 3000 (an exact computation of the "
        "pool model, the same on every seed).", "about +0.10", P, o("exact_gain_3000"),
        near(0.10, 0.05, "'about' with one figure: ±0.05"), seedless="an exact computation of the pool model",
        known="a pool of 200,000 is a fair sample at n = 3000 (the pools scatter around the exact value), so the "
              "published pool's -0.4 and exact +0.10 cannot both hold in the mean over seeds; the pool model "
              "is calibrated to the pool's value, the peak and the fit, and no candidate of the search put the "
              "exact value near +0.10 with the peak at best-of-10")
    H = ("lab19/hacking",)
    h = lambda arm, k: (lambda r: r["lab19/hacking"][arm][k])  # noqa: E731
    w0, w1 = MID_WINDOW
    add("lab19.hack-acc-start", "lab19", "Proxy reward, no KL: sampled accuracy over the first 10 steps.",
        "about 0.52", H, h("0", "accuracy_start"), near(0.52, 0.05, ACC_ABOUT), known=SFT_SHARPER)
    add("lab19.hack-acc-mid", "lab19", f"Its accuracy around step 50 (steps {w0}-{w1}, a fixed window), where "
        "the published run stood at its rise.", "about 0.62", H, h("0", "accuracy_mid"), near(0.62, 0.05, ACC_ABOUT))
    add("lab19.hack-rises-first", "lab19", f"Accuracy first rises (accuracy over steps {w0}-{w1} minus the first "
        "10 steps).", "rises", H,
        lambda r: r["lab19/hacking"]["0"]["accuracy_mid"] - r["lab19/hacking"]["0"]["accuracy_start"],
        above(0.0, "a direction"), qualitative=True)
    add("lab19.hack-peak-step", "lab19", "Step at which the run's best 10-step accuracy window ends (where it "
        "peaks; a location, its value is not claimed).", "around 50", H, h("0", "peak_step"),
        near(50, 25, "'around step 50': ±25 steps, half the distance to the start"), fmt="{:.0f}",
        known="the peak's step scatters widely by seed (a location, not a level): on some seeds accuracy keeps "
              "rising well past step 50 before the hack takes over, on others it peaks before step 30")
    add("lab19.hack-completed", "lab19", "The hack completes within 300 steps: every response at the 4-character "
        "maximum and accuracy at 0 (seeds whose last 20 steps have mean length >= 3.9 and accuracy <= 0.05; the "
        "published statement is one run's, so it must hold on at least 4 of 5 seeds).", "falls to 0 at length 4",
        H, lambda r: float(hack_completed(r["lab19/hacking"]["0"])),
        near(1.0, 0.0, "1 = this seed completed the hack", about=False), qualitative=True, fmt="{:.0f}",
        min_seeds=0.8, known=HACK_PARTIAL)
    add("lab19.hack-final-acc", "lab19", "Accuracy at the end (last 20 steps of 300).", "0", H,
        h("0", "final_accuracy"), below(0.05, "'falls to 0': below 0.05 on each seed"), min_seeds=0.8,
        known=HACK_PARTIAL)
    add("lab19.hack-final-length", "lab19", "Response length at the end, characters.", "4 (the maximum)", H,
        h("0", "final_length"), near(4.0, 0.1, "the maximum is 4: within 0.1 of it on each seed"), fmt="{:.2f}",
        min_seeds=0.8, known=HACK_PARTIAL)
    add("lab19.hack-final-kl", "lab19", "KL to the SFT model at the end, nats per response.", "about 15", H,
        h("0", "final_kl"), near(15.0, 2.25, KL_ABOUT), fmt="{:.1f}", min_seeds=0.8, known=HACK_PARTIAL)
    add("lab19.hack-proxy-climbs", "lab19", f"The proxy keeps climbing while accuracy collapses (final proxy "
        f"minus the proxy over steps {w0}-{w1}).", "keeps climbing", H,
        lambda r: r["lab19/hacking"]["0"]["final_proxy"] - r["lab19/hacking"]["0"]["proxy_mid"],
        above(0.0, "a direction"), qualitative=True)
    add("lab19.kl005-no-hack", "lab19", "With beta = 0.05 there is no hack: final length stays well below the "
        "maximum (4 minus the final length).", "no hack", H, lambda r: 4.0 - r["lab19/hacking"]["0.05"]["final_length"],
        above(0.5, "the hacked run sits at 4; half a character below it is no hack"), qualitative=True, fmt="{:.2f}")
    add("lab19.kl005-acc", "lab19", "Final accuracy with beta = 0.05.", "about 0.75", H, h("0.05", "final_accuracy"),
        near(0.75, 0.05, ACC_ABOUT))
    add("lab19.gold-acc", "lab19", "Final accuracy with the gold (exact-match) reward.", "about 0.8", H,
        h("gold", "final_accuracy"), near(0.80, 0.05, ACC_ABOUT))
    add("lab19.kl005-near-gold", "lab19", "Beta = 0.05 ends close to the gold run (gold minus beta = 0.05, "
        "final accuracy).", "close", H, lambda r: r["lab19/hacking"]["gold"]["final_accuracy"]
        - r["lab19/hacking"]["0.05"]["final_accuracy"], between(-0.1, 0.1, "'close': within 0.1", about=False),
        qualitative=True)
    N = ("lab19/entropy",)
    en = lambda arm, k: (lambda r: r["lab19/entropy"][arm][k])  # noqa: E731
    add("lab19.entropy-start", "lab19", "Entropy at the start of the 4-epoch runs, nats per token.", "about 0.35",
        N, en("symmetric", "entropy_start"), near(0.35, 0.03, ENT_ABOUT), known=SFT_SHARPER)
    add("lab19.entropy-end", "lab19", "Entropy after 120 steps (the last 10), mean of the symmetric and "
        "clip-higher runs.", "about 0.15", N, lambda r: 0.5 * (r["lab19/entropy"]["symmetric"]["entropy_end"]
                                                               + r["lab19/entropy"]["clip-higher"]["entropy_end"]),
        near(0.15, 0.03, ENT_ABOUT), known=ENT_FLOOR)
    add("lab19.entropy-falls-both", "lab19", "Entropy falls under either clip (smaller of the two drops, nats).",
        "falls", N, lambda r: min(r["lab19/entropy"][a]["entropy_start"] - r["lab19/entropy"][a]["entropy_end"]
                                  for a in ("symmetric", "clip-higher")), above(0.0, "a direction"), qualitative=True)
    add("lab19.clips-indistinguishable", "lab19", "Symmetric clip and clip-higher end at nearly the same entropy "
        "(clip-higher minus symmetric, nats).", "nearly indistinguishable", N,
        lambda r: r["lab19/entropy"]["clip-higher"]["entropy_end"] - r["lab19/entropy"]["symmetric"]["entropy_end"],
        between(-0.03, 0.03, "'nearly indistinguishable': within 0.03 nats, the seed spread of one arm",
                about=False), qualitative=True)
    add("lab19.no-upper-higher", "lab19", "Without an upper clip entropy stays higher (its end minus the clipped "
        "runs' mean end).", "higher", N, lambda r: r["lab19/entropy"]["no upper clip"]["entropy_end"]
        - 0.5 * (r["lab19/entropy"]["symmetric"]["entropy_end"] + r["lab19/entropy"]["clip-higher"]["entropy_end"]),
        above(0.0, "a direction"), qualitative=True)
    add("lab19.no-upper-entropy", "lab19", "Its entropy after 120 steps.", "about 0.19", N,
        en("no upper clip", "entropy_end"), near(0.19, 0.03, ENT_ABOUT), known=ENT_FLOOR)
    add("lab19.no-upper-unstable", "lab19", "...but its accuracy ends lower than the symmetric run's "
        "(symmetric minus no upper clip, final accuracy).", "accuracy falls", N,
        lambda r: r["lab19/entropy"]["symmetric"]["final_accuracy"] - r["lab19/entropy"]["no upper clip"]["final_accuracy"],
        above(0.0, "a direction"), qualitative=True)
    add("lab19.clip-rare", "lab19", "The upper clip switches off most rare positive-advantage tokens (share, "
        "epochs 2-4, second half of the symmetric run).", "over 0.90", N,
        en("symmetric", "late_clip_high_of_positive_rare"), above(0.90, "a bound, as published"),
        known=CLIP_RARE)
    add("lab19.clip-common", "lab19", "...and hardly any common ones (share).", "almost none", N,
        en("symmetric", "late_clip_high_of_positive_common"), below(0.05, "'almost none': below 5%"),
        qualitative=True, known=CLIP_COMMON)

    # ------------------------------------------------------------------------------------ lab21
    M = ("lab21/models",)
    add("lab21.teacher-accuracy", "lab21", "The teacher's greedy accuracy on 2-digit sums.", "about 1.0", M,
        lambda r: r["lab21/models"]["teacher_greedy"], near(1.0, 0.03, "'about 100%': within 0.03"), seedless=GREEDY)
    add("lab21.student-greedy", "lab21", "The student's greedy accuracy on 2-digit sums.", "about 0.50", M,
        lambda r: r["lab21/models"]["student_greedy"], near(0.50, 0.05, ACC_ABOUT), seedless=GREEDY)
    add("lab21.student-sampled", "lab21", "The student's sampled (T = 1) accuracy on 2-digit sums.", "about 0.30",
        M, lambda r: r["lab21/models"]["student_sampled"], near(0.30, 0.05, ACC_ABOUT))
    P0 = ("lab21/project0",)
    add("lab21.p0-start-pass1", "lab21", "Project 0: the student's pass@1 before training.", "0.31", P0,
        lambda r: _ev(r["lab21/project0"], "rl", "pass@1", 0), near(0.31, 0.05, ACC_ABOUT))
    add("lab21.p0-start-kl", "lab21", "Project 0: KL(student || teacher) per token before training.", "1.98", P0,
        lambda r: _ev(r["lab21/project0"], "rl", "kl_to_teacher_exact_token_mean_nats", 0),
        near(1.98, 0.3, KL_ABOUT))
    for arm, p1, kl in (("opd-full", 0.67, 0.70), ("sft-teacher", 0.64, 0.75), ("opd-sampled", 0.54, 1.01),
                        ("rl", 0.54, 1.07)):
        add(f"lab21.p0-{arm}-pass1", "lab21", f"Project 0, arm {arm}: pass@1 after 200 steps.", f"{p1:.2f}", P0,
            (lambda a: lambda r: _ev(r["lab21/project0"], a, "pass@1"))(arm), near(p1, 0.07, ACC_SEED),
            known=SLOWER_P0 if arm != "rl" else "one bit per response: of the four arms, rl's end point spreads "
                                                "most between seeds")
        add(f"lab21.p0-{arm}-kl", "lab21", f"Project 0, arm {arm}: KL to the teacher per token after 200 steps.",
            f"{kl:.2f}", P0, (lambda a: lambda r: _ev(r["lab21/project0"], a, "kl_to_teacher_exact_token_mean_nats"))(arm),
            near(kl, 0.15 * kl, KL_ABOUT), known=SLOWER_P0)
    add("lab21.p0-dense-beats-sparse", "lab21", "Dense signals beat one bit per response: the worse of "
        "opd-full and sft-teacher minus rl, final pass@1.", "dense > sparse", P0,
        lambda r: min(_ev(r["lab21/project0"], a, "pass@1") for a in ("opd-full", "sft-teacher"))
        - _ev(r["lab21/project0"], "rl", "pass@1"), above(0.0, "a direction"), qualitative=True)
    add("lab21.p0-full-beats-sampled", "lab21", "Full-vocabulary OPD beats sampled-token OPD (final pass@1 "
        "difference).", "full > sampled", P0, lambda r: _ev(r["lab21/project0"], "opd-full", "pass@1")
        - _ev(r["lab21/project0"], "opd-sampled", "pass@1"), above(0.0, "a direction"), qualitative=True)
    add("lab21.p0-onpolicy-small-lead", "lab21", "On-policy distillation does not beat SFT on teacher samples by "
        "much (opd-full minus sft-teacher, final pass@1).", "small lead", P0,
        lambda r: _ev(r["lab21/project0"], "opd-full", "pass@1") - _ev(r["lab21/project0"], "sft-teacher", "pass@1"),
        between(-0.05, 0.08, "published +0.03; 'not by more': within -0.05 to +0.08", about=False), qualitative=True)
    P1 = ("lab21/project1",)
    slower = ("the published value is one seed's; at the published settings (lr 3e-4, T = 1) our seeds spread by "
              "about as much as the gap")
    add("lab21.p1-start-entropy", "lab21", "Project 1: entropy before training, nats per token.", "0.54", P1,
        lambda r: _ev(r["lab21/project1"], "symmetric", "entropy_token_mean_nats", 0), near(0.54, 0.03, ENT_ABOUT))
    add("lab21.p1-collapse", "lab21", "Entropy collapses in every arm (the highest final entropy over the three "
        "arms, nats).", "about 0.22-0.26", P1,
        lambda r: max(_ev(r["lab21/project1"], a, "entropy_token_mean_nats") for a in ("symmetric", "clip-higher", "no-clip")),
        between(0.19, 0.29, "the published range widened by 0.03 (seed spread)"),
        known="the arm without an upper clip keeps the most entropy, and sets this maximum")
    for arm, ent in (("symmetric", 0.222), ("clip-higher", 0.235)):
        add(f"lab21.p1-{arm}-entropy", "lab21", f"Project 1, {arm}: final entropy.", f"{ent:.3f}", P1,
            (lambda a: lambda r: _ev(r["lab21/project1"], a, "entropy_token_mean_nats"))(arm), near(ent, 0.03, ENT_ABOUT),
            known=slower)
    add("lab21.p1-no-clip-highest", "lab21", "No clip ends with the highest entropy (no-clip minus the larger of "
        "the two clipped arms).", "highest", P1, lambda r: _ev(r["lab21/project1"], "no-clip", "entropy_token_mean_nats")
        - max(_ev(r["lab21/project1"], a, "entropy_token_mean_nats") for a in ("symmetric", "clip-higher")),
        above(0.0, "a direction"), qualitative=True)
    add("lab21.p1-no-clip-lowest-acc", "lab21", "...and the lowest pass@1 (the smaller clipped arm minus no-clip).",
        "lowest", P1, lambda r: min(_ev(r["lab21/project1"], a, "pass@1") for a in ("symmetric", "clip-higher"))
        - _ev(r["lab21/project1"], "no-clip", "pass@1"), above(0.0, "a direction"), qualitative=True)
    add("lab21.p1-clipped-pass1", "lab21", "Project 1: final pass@1 of the symmetric arm.", "0.57", P1,
        lambda r: _ev(r["lab21/project1"], "symmetric", "pass@1"), near(0.57, 0.07, ACC_SEED),
        known=slower)
    add("lab21.p1-no-clip-pass1", "lab21", "Project 1: final pass@1 without a clip.", "0.50", P1,
        lambda r: _ev(r["lab21/project1"], "no-clip", "pass@1"), near(0.50, 0.07, ACC_SEED),
        known="4 epochs a batch without an upper bound make the run unstable (the published run too: its lowest "
              "accuracy)")
    add("lab21.p1-no-clear-effect", "lab21", "No clear clip-higher effect: clip-higher minus symmetric final "
        "entropy.", "inside seed noise", P1, lambda r: _ev(r["lab21/project1"], "clip-higher", "entropy_token_mean_nats")
        - _ev(r["lab21/project1"], "symmetric", "entropy_token_mean_nats"),
        between(-0.03, 0.03, "'well inside seed noise': within 0.03 nats", about=False), qualitative=True)
    P2 = ("lab21/project2",)
    add("lab21.p2-start-gold", "lab21", "Project 2: gold pass@1 before training.", "0.29", P2,
        lambda r: _ev(r["lab21/project2"], "binary", "gold_pass@1", 0), near(0.29, 0.05, ACC_ABOUT))
    for arm, g, px, pad in (("binary", 0.55, 0.56, 0.02), ("partial", 0.54, 0.74, 0.01), ("stylish_w2", 0.29, 0.61, 0.98)):
        add(f"lab21.p2-{arm}-gold", "lab21", f"Project 2, {arm}: gold pass@1 after 200 steps.", f"{g:.2f}", P2,
            (lambda a: lambda r: _ev(r["lab21/project2"], a, "gold_pass@1"))(arm), near(g, 0.07, ACC_SEED))
        add(f"lab21.p2-{arm}-proxy", "lab21", f"Project 2, {arm}: training (proxy) reward after 200 steps.",
            f"{px:.2f}", P2, (lambda a: lambda r: _ev(r["lab21/project2"], a, "proxy_reward_mean"))(arm),
            near(px, 0.1, "a reward on the rubric's own scale from one seed: ±0.1"),
            known="our rubrics' items and weights put the proxy reward on another scale")
        add(f"lab21.p2-{arm}-pad", "lab21", f"Project 2, {arm}: share of 3-digit answers to sums below 100.",
            f"{pad:.2f}", P2, (lambda a: lambda r: _ev(r["lab21/project2"], a, "pad_share_small_sums"))(arm),
            near(pad, 0.05, "a share near 0 or 1 from one seed: ±0.05"))
    add("lab21.p2-w1-pad", "lab21", "Project 2, stylish with w = 1: padded share of small sums.", "0.08", P2,
        lambda r: _ev(r["lab21/project2"], "stylish_w1", "pad_share_small_sums"),
        near(0.08, 0.07, "a small share from one seed: ±0.07"),
        known="padding pays once w exceeds the accuracy on small sums (lab21.honest_vs_pad); our student's is "
              "well below 1, so w = 1 is already past the threshold")
    add("lab21.p2-w1-gold", "lab21", "Project 2, stylish with w = 1: gold pass@1.", "0.50", P2,
        lambda r: _ev(r["lab21/project2"], "stylish_w1", "gold_pass@1"), near(0.50, 0.07, ACC_SEED),
        known="padding pays once w exceeds the accuracy on small sums (lab21.honest_vs_pad); our student's is "
              "well below 1, so w = 1 is already past the threshold")
    add("lab21.p2-stylish-hacked", "lab21", "The w = 2 stylish rubric is hacked: it pads most small sums while "
        "gold accuracy gains nothing (padded share minus 0.5, or -1 if gold rose by more than 0.05).", "hacked", P2,
        lambda r: (_ev(r["lab21/project2"], "stylish_w2", "pad_share_small_sums") - 0.5)
        if _ev(r["lab21/project2"], "stylish_w2", "gold_pass@1") - _ev(r["lab21/project2"], "stylish_w2", "gold_pass@1", 0) <= 0.05
        else -1.0, above(0.0, "both halves of the statement"), qualitative=True)
    add("lab21.p2-partial-no-faster", "lab21", "Partial credit does not speed learning up (partial minus binary, "
        "final gold pass@1).", "no faster", P2, lambda r: _ev(r["lab21/project2"], "partial", "gold_pass@1")
        - _ev(r["lab21/project2"], "binary", "gold_pass@1"), below(0.05, "'did not speed up': not ahead by more "
                                                                          "than 0.05"), qualitative=True)
    P3 = ("lab21/project3",)
    b3 = lambda arm, b, i=-1: (lambda r: _ev(r["lab21/project3"], arm, f"sampled_accuracy_{b}", i))  # noqa: E731
    add("lab21.p3-start-1d1d", "lab21", "Project 3: the student's success rate on 1d+1d before training.",
        "about 0.02", P3, b3("uniform", "1d+1d", 0), near(0.02, 0.03, "'about 2%': ±0.03 (100 samples)"))
    add("lab21.p3-start-2d", "lab21", "...on the three 2-digit buckets (lowest and highest, checked as a range).",
        "0.30-0.50", P3, lambda r: float(np.mean([_ev(r["lab21/project3"], "uniform", f"sampled_accuracy_{b}", 0)
                                                  for b in ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100")])),
        between(0.25, 0.55, "the published range widened by 0.05 (100 samples per bucket)"),
        known="the mean of the three buckets is checked against the published range; our student's carries "
              "(2d+2d without a sum >= 100) are its weakest bucket, near 0.15, and pull the mean below it")
    add("lab21.p3-start-3d1d", "lab21", "...and on 3d+1d.", "about 0", P3, b3("uniform", "3d+1d", 0),
        below(0.03, "'about 0%': below 0.03"))
    add("lab21.p3-target-only-3d1d", "lab21", "Target-only learns nothing: 3d+1d after 200 steps.", "0.00", P3,
        b3("target-only", "3d+1d"), below(0.03, "'stayed at 0.00': below 0.03"))
    add("lab21.p3-target-only-drift", "lab21", "...and the other buckets drift down (start minus end, mean of the "
        "2-digit buckets; every evaluation draws fresh samples, 100 per bucket).", "drift down", P3, lambda r: float(np.mean(
            [_ev(r["lab21/project3"], "target-only", f"sampled_accuracy_{b}", 0) - _ev(r["lab21/project3"], "target-only", f"sampled_accuracy_{b}")
             for b in ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100")])),
        above(0.045, "a drift beyond the evaluation's noise: two standard errors (0.022) of the mean over three "
                     "seeds of a start-minus-end difference of two fresh 300-sample evaluations"), qualitative=True,
        known="our student never solves a 3d+1d problem (0 of the 25,600 samples of the 200 steps, printed in the "
              "notebook), so every group's advantage is exactly 0 and target-only never changes the model (no KL, no "
              "weight decay): what the fresh evaluations show is their own noise. The published drift needs an "
              "update, which a student with a few 3d+1d successes gets and ours does not")
    add("lab21.p3-both-improve", "lab21", "Uniform and learnability both improve the 2-digit buckets (the smaller "
        "of the two arms' mean gains).", "improve", P3, lambda r: min(float(np.mean(
            [_ev(r["lab21/project3"], a, f"sampled_accuracy_{b}") - _ev(r["lab21/project3"], a, f"sampled_accuracy_{b}", 0)
             for b in ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100")])) for a in ("uniform", "learnability")),
        above(0.0, "a direction"), qualitative=True)
    add("lab21.p3-uniform-ge100", "lab21", "Uniform: sum >= 100 accuracy after 200 steps.", "0.50", P3,
        b3("uniform", "2d+2d_ge100"), near(0.50, 0.07, ACC_SEED), known=slower)
    add("lab21.p3-learnability-ge100", "lab21", "Learnability: sum >= 100 accuracy after 200 steps.", "0.62", P3,
        b3("learnability", "2d+2d_ge100"), near(0.62, 0.07, ACC_SEED),
        known="the published value is one seed's; this arm's seeds spread widely (the bandit's choices compound), "
              "and it still ends ahead of uniform, as published")
    add("lab21.p3-learnability-ahead", "lab21", "Learnability ends slightly ahead of uniform on sum >= 100 "
        "(difference).", "slightly ahead", P3, lambda r: _ev(r["lab21/project3"], "learnability", "sampled_accuracy_2d+2d_ge100")
        - _ev(r["lab21/project3"], "uniform", "sampled_accuracy_2d+2d_ge100"), above(0.0, "a direction"), qualitative=True)
    add("lab21.p3-uniform-usage", "lab21", "Uniform's share of samples on the unsolvable 3d+1d bucket.", "0.22", P3,
        lambda r: r["lab21/project3"]["arms"]["uniform"]["extra"]["total_usage"]["usage_3d+1d"],
        near(0.22, 0.03, "one seed's share of a uniform draw over five buckets (0.20 expected): ±0.03"))
    add("lab21.p3-learnability-usage", "lab21", "Learnability's share on 3d+1d.", "0.03", P3,
        lambda r: r["lab21/project3"]["arms"]["learnability"]["extra"]["total_usage"]["usage_3d+1d"],
        near(0.03, 0.03, "a small share from one seed: ±0.03"))
    add("lab21.p3-neither-fixes-1d1d", "lab21", "Neither uniform nor learnability fixes 1d+1d (the higher of the "
        "two arms' final 1d+1d accuracy).", "not fixed", P3,
        lambda r: max(_ev(r["lab21/project3"], a, "sampled_accuracy_1d+1d") for a in ("uniform", "learnability")),
        below(0.10, "'not fixed': below 0.10"), qualitative=True)
    P4 = ("lab21/project4",)
    for arm, p1, p16 in (("mean", 0.55, 0.89), ("std", 0.51, 0.88), ("maxrl", 0.51, 0.91)):
        add(f"lab21.p4-{arm}-pass1", "lab21", f"Project 4, {arm} advantage: final pass@1.", f"{p1:.2f}", P4,
            (lambda a: lambda r: _ev(r["lab21/project4"], a, "pass@1"))(arm), near(p1, 0.07, ACC_SEED))
        add(f"lab21.p4-{arm}-pass16", "lab21", f"Project 4, {arm} advantage: final pass@16.", f"{p16:.2f}", P4,
            (lambda a: lambda r: _ev(r["lab21/project4"], a, "pass@16"))(arm),
            near(p16, 0.04, "pass@16 near 0.9 varies less: ±0.04 (about two evaluation standard errors)"),
            known="pass@16 near 1 on 100 prompts: one seed's value moves by a few hundredths")
    add("lab21.p4-maxrl-direction", "lab21", "MaxRL's pass@16 is at least the mean baseline's (difference).",
        "maxrl >= mean", P4, lambda r: _ev(r["lab21/project4"], "maxrl", "pass@16") - _ev(r["lab21/project4"], "mean", "pass@16") + 1e-9,
        above(0.0, "a direction (the published gap is about the evaluation noise)"), qualitative=True)
    P5 = ("lab21/project5",)
    x5 = lambda r: r["lab21/project5"]["arms"]["rl"]["extra"]  # noqa: E731
    add("lab21.p5-start-pass1", "lab21", "Project 5: pass@1 of the student before RL, in distribution.", "0.31", P5,
        lambda r: x5(r)["before"]["in_dist"][0], near(0.31, 0.05, ACC_ABOUT))
    add("lab21.p5-end-pass1", "lab21", "...after 300 steps of RL.", "0.67", P5, lambda r: x5(r)["after"]["in_dist"][0],
        near(0.67, 0.07, ACC_SEED), known=slower)
    add("lab21.p5-start-pass64", "lab21", "pass@64 before RL.", "0.97", P5, lambda r: x5(r)["before"]["in_dist"][63],
        near(0.97, 0.03, "pass@64 near 1: ±0.03"))
    add("lab21.p5-end-pass64", "lab21", "pass@64 after RL.", "0.92", P5, lambda r: x5(r)["after"]["in_dist"][63],
        near(0.92, 0.03, "pass@64 near 1: ±0.03"))
    add("lab21.p5-pass64-falls", "lab21", "RL sharpens: pass@64 falls (before minus after).", "falls", P5,
        lambda r: x5(r)["before"]["in_dist"][63] - x5(r)["after"]["in_dist"][63], above(0.0, "a direction"),
        qualitative=True)
    add("lab21.p5-crossing", "lab21", "The before and after pass@k curves cross (smallest k where the base "
        "model is at least as good; 65 when they never cross).", "between 16 and 32", P5,
        lambda r: float(x5(r)["crossing_k"] or 65), between(16, 32, "the published interval, on each seed"), fmt="{:.0f}",
        min_seeds=0.5, known="where the curves cross moves widely from seed to seed (a mean of crossing points is "
                             "not a crossing): a majority of seeds must cross within the published interval")
    add("lab21.p5-3d1d-zero", "lab21", "On never-seen 3d+1d both models stay near zero at every k (the largest "
        "pass@k, k = 1..64, of either model).", "near zero", P5,
        lambda r: max(max(x5(r)["before"]["3d+1d"]), max(x5(r)["after"]["3d+1d"])),
        below(0.1, "'near zero at every k': below 0.1 even at k = 64"), qualitative=True)

    # -------------------------------------------------------------------------------------- hw4
    # k3's non-negativity and unbiasedness are properties of the estimator (lib/tests/test_core_eval.py),
    # not results of a run.
    FC = ("hw4/format_copy",)
    add("hw4.fc-reward", "hw4", "format_copy, GRPO, 51 steps at the course's CPU settings (character model, "
        "every weight trained, lr 5e-5 where the published runs use LoRA at 3e-5): rollout reward at the end "
        "(mean of the last 5 steps).", "about 1.3 (the maximum)", FC,
        lambda r: r["hw4/format_copy"]["grpo"]["final_reward"],
        near(1.3, 0.05, "'about 1.3', the maximum: ±0.05, one wrong tag or number in about ten groups"))
    add("hw4.fc-exact-match", "hw4", "format_copy, GRPO: greedy eval exact match on the 64 eval prompts.",
        "approaching 1.0", FC, lambda r: r["hw4/format_copy"]["grpo"]["final_eval_exact_match"],
        near(1.0, 1 / 64 + 1e-9, "one prompt of 64"))
    add("hw4.fc-reinforce-exact-match", "hw4", "format_copy, GR-REINFORCE: greedy eval exact match.",
        "approaching 1.0", FC, lambda r: r["hw4/format_copy"]["reinforce"]["final_eval_exact_match"],
        near(1.0, 1 / 64 + 1e-9, "one prompt of 64"))
    add("hw4.fc-rise-step", "hw4", "format_copy, GRPO: where the reward rises (first step whose 3-step mean "
        "reward is halfway from the first 3 steps' mean to the maximum 1.3).", "around step 10", FC,
        lambda r: float(reward_rise(r["hw4/format_copy"]["grpo"]["reward_curve"])["mid"]),
        near(10, 5, "'around step 10': ±5 steps, half the distance to the start"), fmt="{:.0f}")
    add("hw4.fc-rise-sharp", "hw4", "format_copy, GRPO: the rise is a jump (steps from 20% to 80% of the way "
        "from the first 3 steps' mean to 1.3, on the 3-step mean).", "jumps sharply", FC,
        lambda r: float(reward_rise(r["hw4/format_copy"]["grpo"]["reward_curve"])["width"]),
        below(5.5, "'jumps sharply': within 5 steps, half the published step of the jump"), qualitative=True,
        fmt="{:.0f}", known="the character model, trained whole at lr 5e-5, climbs steadily from about 0.6 to 1.3 "
                            "over 10-20 steps: a ramp, where the published 1.5B model with LoRA jumps")
    MT = ("hw4/math_toy",)
    # Sample efficiency is how fast a run learns from the rollouts it draws, not where it ends. Both
    # algorithms draw the same rollouts per step, so the eval curve over steps is a curve over samples.
    # Published on math_hard, neither run is near its ceiling after ~200 steps, so the final eval
    # answers that question there; math_toy is solved by both within 30 steps, where the final eval
    # only says that both reach the ceiling. The measure, argued before it was computed on any run:
    # the area under the greedy eval curve over the whole 30-step run (every eval point the
    # run already makes, trapezoid rule, divided by the steps: the run's mean eval exact match). It
    # needs no step or threshold chosen by looking at where the curves level off (an eval at one early
    # step would), it credits the run that gets there first, and the steps where both sit at the
    # ceiling add about the same to both areas (they shrink the gap, they do not make it).
    add("hw4.math-grpo-beats-reinforce", "hw4", "At the same batch, minibatch and learning rate GRPO's two "
        "clipped epochs make it the more sample-efficient (GRPO minus GR-REINFORCE, area under the greedy eval "
        "exact-match curve over the 30 steps divided by the steps, i.e. each run's mean eval over its budget; "
        "math_toy on the character model stands in for math_hard: both runs solve it within the budget, so "
        "the final eval shows only the shared ceiling, while the area shows which run got there on fewer "
        "samples).", "GRPO ahead", MT,
        lambda r: r["hw4/math_toy"]["grpo"]["eval_area"] - r["hw4/math_toy"]["reinforce"]["eval_area"],
        above(0.0, "a direction"), qualitative=True)
    add("hw4.math-reinforce-beats-base", "hw4", "GR-REINFORCE improves on the model before RL (final minus step-0 "
        "eval exact match, math_toy).", "above base", MT,
        lambda r: r["hw4/math_toy"]["reinforce"]["final_eval_exact_match"] - r["hw4/math_toy"]["reinforce"]["start_eval_exact_match"],
        above(0.0, "a direction"), qualitative=True)
    NR = ("hw4/math_hard",)
    for cid, text, pub in (("hw4.math-hard-base", "math_hard: eval accuracy of the base 1.5B model.", "0.23-0.26"),
                           ("hw4.math-hard-reinforce", "math_hard: GR-REINFORCE's final eval accuracy.",
                            "near 0.31"),
                           ("hw4.math-hard-grpo", "math_hard: GRPO's final eval accuracy.", "above 0.37"),
                           ("hw4.math-hard-grpo-train", "math_hard: GRPO's training reward at the end.", "above 0.55")):
        add(cid, "hw4", text, pub, NR, lambda r: float("nan"), near(0.0, 0.03, "'about': ±0.03"))
    return C


CLAIMS: list[Claim] = _claims()


# ============================================================================ experiments

@dataclass(frozen=True)
class Options:
    """How experiments run: ``smoke`` (every training run :data:`SMOKE_STEPS` long, to check the
    pipeline end to end; separate cache, numbers meaningless), ``workers`` (processes for the
    runner's arms x seeds jobs; one thread each)."""

    smoke: bool = False
    workers: int = 1


@dataclass(frozen=True)
class Experiment:
    """``run(seeds, options) -> {seed: JSON-able result}`` computes the given seeds from scratch.
    ``seeded``: False for a deterministic computation (run once, at the first seed). ``cheap``:
    part of ``--fast``. ``settings``: what determines the numbers (goes into the cache key).
    ``models``: names for :func:`model_fingerprint`. ``unavailable``: why it cannot run here (its
    claims are "not run"). ``seeds``: the seeds its notebook trains, where that is not the run's
    default (lab19's Parts 2-3 and lab21's Project 1: 0-4); with the default seeds the experiment runs
    at these, so that its rows show what the student's notebook shows."""

    name: str
    lab: str
    run: Callable[[Sequence[int], Options], dict] | None
    settings: dict = field(default_factory=dict)
    models: tuple[str, ...] = ()
    seeded: bool = True
    cheap: bool = False
    unavailable: str = ""
    cost_s: float = 1.0   # rough CPU seconds per seed on the development machine: orders the runs
    seeds: tuple[int, ...] | None = None


def per_seed(fn: Callable) -> Callable[[Sequence[int], Options], dict]:
    """An experiment's ``run`` from a one-seed function ``fn(seed)`` or ``fn(seed, options)``: the one
    loop over seeds for experiments whose library functions take a single seed. (The runner-based
    experiments hand the whole list to :func:`llmrl.runner.run_arms` or :func:`llmrl.labs.lab21.run`,
    which is where seeds can be trained stacked.)"""
    import inspect

    takes_opts = len(inspect.signature(fn).parameters) > 1

    def run(seeds: Sequence[int], opts: Options) -> dict:
        return {s: fn(s, opts) if takes_opts else fn(s) for s in seeds}
    run.__name__ = getattr(fn, "__name__", "run")
    return run


def _tiny(name: str):
    from ..sft.checkpoints import load_checkpoint
    return load_checkpoint(name, progress=False)


def _exp_lab11_sweep(seed: int) -> dict:
    from ..labs import lab11

    s = lab11.temperature_sweep(_tiny("sft"), seed=seed)
    key = lambda T: f"{T:g}"  # noqa: E731
    return {"accuracy": {key(T): float(a) for T, a in zip(s["temperature"], s["accuracy"])},
            "distinct": {key(T): float(d) for T, d in zip(s["temperature"], s["distinct_answers"])},
            "distinct_all": [float(d) for d in s["distinct_answers"]]}


def _exp_lab11_kl(seed: int) -> dict:
    from ..labs import lab11

    checks = lab11.kl_checks(lab11.kl_estimates(_tiny("sft"), seed=seed))
    return {f"{T:g}": row for T, row in checks.items()}


def _exp_lab11_frontier(seed: int) -> dict:
    from .. import toylm
    from ..labs import lab11

    d = lab11.frontier_data()
    gaps = [float(lab11.temperature_gap(d, n).min()) for n in d if len(lab11.temperature_gap(d, n))]
    w = d["worked"]["temperature"]
    cool = w["reward"][w["temperature"] < 1]
    at1 = float(np.interp(1.0, w["temperature"], w["reward"]))
    hack = d["hack"]["optimum"]
    tr = hack["true_reward"]
    i = int(np.argmax(tr))
    small_beta = int(np.argmin(hack["beta"]))
    large_beta = int(np.argmax(hack["beta"]))
    return {"temperature_gap_min": min(gaps), "worked_cooling_loss": at1 - float(np.max(cool)),
            "hack_rise_fall": float(min(tr[i] - tr[large_beta], tr[i] - tr[small_beta])),
            "hack_peak_kl": d["hack"]["peak"]["kl_nats"], "n_betas": int(len(hack["beta"])),
            "toylm_scenarios": list(toylm.SCENARIOS)}


def _exp_lab19_overopt(seed: int) -> dict:
    from .. import overopt

    pool = overopt.pool_curves(overopt.make_pool(seed=seed))
    pk = overopt.peak(pool)
    alpha, beta = overopt.fit_gao_bon(pool["d"], pool["gold_gain"])
    noise = overopt.pool_curves(overopt.make_pool(b=0.0, seed=seed))
    exact = overopt.exact_best_of_n()
    exact_noise = overopt.exact_best_of_n(b=0.0)
    return {"peak_n": pk["n"], "peak_kl": pk["kl"], "peak_gain": pk["gold_gain"],
            "pool_gain_3000": float(pool["gold_gain"][-1]), "exact_gain_3000": float(exact["gold_gain"][-1]),
            "proxy_min_increase": float(np.diff(pool["proxy_gain"]).min()), "alpha": float(alpha),
            "beta": float(beta), "noise_beta": float(overopt.fit_gao_bon(noise["d"], noise["gold_gain"])[1]),
            "noise_min_increase": float(np.diff(exact_noise["gold_gain"]).min()),
            "ns_last": int(pool["n"][-1])}


SMOKE_STEPS = 6  # --smoke: every training run this long (checks the pipeline; the numbers mean nothing)


def _steps(opts: "Options", full: int | None) -> dict:
    return {"steps": SMOKE_STEPS} if opts.smoke else ({} if full is None else {"steps": full})


def _lab19_arm(arm: str, seeds: Sequence[int], steps: int | None = None, progress: bool = False) -> list[dict]:
    """One lab19 run (``hacking/<beta>``, ``hacking/gold`` or ``entropy/<clip arm>``) for every seed of
    ``seeds`` trained together (lab19's ``seeds=``: one computation), as one per-step series per seed."""
    from ..labs import lab19

    kind, _, name = arm.partition("/")
    over = {} if steps is None else {"steps": steps}
    if kind == "hacking":
        gold = name == "gold"
        hist = lab19.hacking_run(0.0 if gold else float(name), reward="gold" if gold else "proxy", seeds=list(seeds),
                                 progress=progress, **over)
    else:
        hist = lab19.entropy_run(name, seeds=list(seeds), progress=progress, **over)
    runs = hist if isinstance(hist, list) else [hist]
    if len(runs) != len(seeds):
        raise RuntimeError(f"lab19 {arm}: {len(runs)} runs for seeds {list(seeds)}")
    return [{"curve": lab19.as_series(h)} for h in runs]


_lab19_arm.seeds_together = True  # llmrl.runner.seeds_together: run_arms hands it an arm's seeds at once


def _lab19_runs(kind: str, arms: Sequence[str]):
    def run(seeds: Sequence[int], opts: "Options") -> dict[int, dict]:
        from ..labs import lab19
        from ..runner import run_arms

        res = run_arms(f"reproduce/lab19/{kind}", _lab19_arm, [f"{kind}/{a}" for a in arms], seeds,
                       workers=opts.workers, progress=False, steps=SMOKE_STEPS if opts.smoke else None)
        out = {}
        for i, s in enumerate(seeds):
            row = {}
            for a in arms:
                series = res[f"{kind}/{a}"][i]["curve"]
                row[a] = lab19.hack_summary(series) if kind == "hacking" else lab19.entropy_summary(series)
            out[s] = row
        return out
    return run


def _exp_lab21_models(seed: int) -> dict:
    from ..addition import TWO_DIGIT, eval_problems
    from ..evaluation import accuracy

    probs = eval_problems(200, TWO_DIGIT)
    student, teacher = _tiny("student"), _tiny("teacher")
    return {"teacher_greedy": accuracy(teacher, probs), "student_greedy": accuracy(student, probs),
            "student_sampled": accuracy(student, probs, temperature=1.0, n_samples=8, seed=seed)}


# The arms of a lab21 project that the claims read, where they are not the project's default arms.
LAB21_ARMS = {"project2": ("binary", "partial", "stylish_w2", "stylish_w1")}


def _lab21_project(project: str, arms: Sequence[str] | None = None):
    def run(seeds: Sequence[int], opts: "Options") -> dict[int, dict]:
        from ..labs import lab21

        res = lab21.run(project, arms, seeds=list(seeds), workers=opts.workers, progress=False,
                        **_steps(opts, None))
        return {s: {"arms": {arm: {k: runs[i][k] for k in ("config", "curve", "evals", "extra")}
                             for arm, runs in res.items()}} for i, s in enumerate(seeds)}
    return run


def _hw4_runs(task: str, steps: int | None):
    def run(seed: int, opts: "Options") -> dict:
        from ..hw4.ablation import summary
        from ..hw4.impl import load_impl
        from ..hw4.trainer import default_config, train

        impl = load_impl("reference")
        out = {}
        for algo in ("grpo", "reinforce"):
            cfg = default_config(task, algo, seed=seed, **_steps(opts, steps))
            hist = train(cfg, impl, progress=False)
            row = summary(hist, "none", 0)
            row["reward_curve"] = [float(r["reward_mean"]) for r in hist if r["step"] >= 1]
            row["start_eval_exact_match"] = next((r["eval_exact_match"] for r in hist if "eval_exact_match" in r), None)
            row["steps"] = cfg.steps
            out[algo] = row
        return out
    return run


def _experiments(lr: float | dict | None = None) -> dict[str, Experiment]:
    """The experiments; ``lr``: lab21 Projects 1-5's learning rates, {project: lr} or one for all (default
    ``lab21.PROJECT_LR``). They and Projects 4-5's evaluation temperatures are in the settings, so that a
    new one recomputes them."""
    from .. import overopt
    from ..labs.lab19 import CLIP_ARMS
    from ..labs.lab21 import EVAL_TEMPERATURE, PROJECT_LR

    lrs = dict(PROJECT_LR) if lr is None else dict(lr) if isinstance(lr, dict) else {p: lr for p in PROJECT_LR}

    xs = [
        Experiment("lab11/sweep", "lab11", per_seed(_exp_lab11_sweep), {"n_problems": 200, "n_samples": 8}, ("sft",),
                   cheap=True),
        Experiment("lab11/kl", "lab11", per_seed(_exp_lab11_kl), {"n_problems": 16, "n_samples": 8, "n_batches": 16},
                   ("sft",), cheap=True),
        Experiment("lab11/frontier", "lab11", per_seed(_exp_lab11_frontier),
                   {"betas": "default_betas(100, 1000, 0.02)"}, seeded=False, cheap=True),
        Experiment("lab19/overopt", "lab19", per_seed(_exp_lab19_overopt),
                   {"pool": 200_000, "pad_share": overopt.PAD_SHARE, "length_scale": overopt.LENGTH_SCALE,
                    "padding_cost": overopt.PADDING_COST}, cheap=True),
        Experiment("lab19/hacking", "lab19", _lab19_runs("hacking", ("0", "0.05", "gold")),
                   {"settings": "lab19.HACK_SETTINGS", "arms": ["0", "0.05", "gold"], "seeds_together": True,
                    "summary": "mid-window"}, ("sft",),
                   cost_s=300, seeds=NOTEBOOK_SEEDS["lab19"]),
        Experiment("lab19/entropy", "lab19", _lab19_runs("entropy", tuple(CLIP_ARMS)),
                   {"settings": "lab19.ENTROPY_SETTINGS", "arms": list(CLIP_ARMS), "seeds_together": True}, ("sft",),
                   cost_s=100, seeds=NOTEBOOK_SEEDS["lab19"]),
        Experiment("lab21/models", "lab21", per_seed(_exp_lab21_models), {"n": 200}, ("student", "teacher"),
                   cheap=True),
        Experiment("lab21/project0", "lab21", _lab21_project("project0"), {"steps": 200}, ("student", "teacher"), cost_s=330),
        Experiment("lab21/project1", "lab21", _lab21_project("project1"), {"steps": 150, "lr": lrs["project1"]},
                   ("student",), cost_s=140, seeds=NOTEBOOK_SEEDS["lab21/project1"]),
        Experiment("lab21/project2", "lab21", _lab21_project("project2", LAB21_ARMS["project2"]),
                   {"steps": 200, "lr": lrs["project2"]}, ("student",), cost_s=170),
        Experiment("lab21/project3", "lab21", _lab21_project("project3"),
                   {"steps": 200, "lr": lrs["project3"], "eval": "fresh samples at every evaluation"},
                   ("student",), cost_s=130),
        Experiment("lab21/project4", "lab21", _lab21_project("project4"),
                   {"steps": 200, "lr": lrs["project4"], "eval_temperature": EVAL_TEMPERATURE["project4"]},
                   ("student",), cost_s=140),
        Experiment("lab21/project5", "lab21", _lab21_project("project5"),
                   {"steps": 300, "lr": lrs["project5"], "eval_temperature": EVAL_TEMPERATURE["project5"]},
                   ("student",), cost_s=90),
        Experiment("hw4/format_copy", "hw4", per_seed(_hw4_runs("format_copy", 51)), {"steps": 51, "reward_curve": True},
                   ("hw4-charlm",), cost_s=150),
        Experiment("hw4/math_toy", "hw4", per_seed(_hw4_runs("math_toy", None)), {"steps": "default", "eval_area": True},
                   ("hw4-charlm",), cost_s=100),
        Experiment("hw4/math_hard", "hw4", None, unavailable="needs Qwen2.5-Math-1.5B-Instruct and MATH level 5 "
                   "on a GPU (hours); no model hub is reachable from the course machines"),
    ]
    return {x.name: x for x in xs}


EXPERIMENTS: dict[str, Experiment] = _experiments()


# ============================================================================ running and caching

def model_fingerprint(name: str) -> str:
    """A short hash of a model's weights: TinyLM checkpoints by name, ``hw4-charlm`` for hw4's model."""
    import torch

    if name == "hw4-charlm":
        from ..hw4.charlm import load_base_model
        model = load_base_model(progress=False)
    else:
        model = _tiny(name)
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes() if isinstance(v, torch.Tensor) else repr(v).encode())
    return h.hexdigest()[:16]


def code_fingerprint() -> str:
    """A short hash of the library's sources (this module excluded)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parents[1]  # the whole package (llmrl/)
    for f in sorted(here.rglob("*.py")):
        if f.name != "reproduce.py":
            h.update(str(f.relative_to(here)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _key(exp: Experiment, models: dict[str, str], opts: Options = Options()) -> str:
    import torch
    blob = json.dumps({"v": CACHE_VERSION, "name": exp.name, "settings": exp.settings, "torch": torch.__version__,
                       "smoke": opts.smoke,
                       "models": {m: models[m] for m in exp.models}}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cache_path(exp: Experiment, seed: int, root: Path) -> Path:
    return root / exp.name / (f"seed{seed}.json" if exp.seeded else "deterministic.json")


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return None if math.isnan(x) else x
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    return x


def _run_seeds(exp: Experiment, seeds: Sequence[int], opts: Options) -> dict[int, dict]:
    """Every seed of ``seeds`` in one call of the experiment (see :func:`per_seed`)."""
    got = exp.run(list(seeds), opts)
    missing = [s for s in seeds if s not in got]
    if missing:
        raise RuntimeError(f"experiment {exp.name} returned no result for seed(s) {missing}")
    return got


def compute(exp: Experiment, seeds: Sequence[int], *, root: Path | None = None, fresh: bool = False,
            cached_only: bool = False, models: dict[str, str] | None = None, opts: Options = Options(),
            log=print) -> dict[int, dict]:
    """{seed: cached blob} of ``exp`` (the result under ``"result"``), read from the cache where
    present with the same key, else computed and stored. A deterministic experiment is computed
    once and returned for every seed. ``cached_only``: compute nothing."""
    root = cache_dir() if root is None else Path(root)
    if opts.smoke:
        root = root / "smoke"
    if exp.unavailable or exp.run is None:
        return {}
    models = models if models is not None else {m: model_fingerprint(m) for m in exp.models}
    key = _key(exp, models, opts)
    wanted = list(seeds) if exp.seeded else [seeds[0]]
    out, missing = {}, []
    for s in wanted:
        path = _cache_path(exp, s, root)
        if not fresh and path.exists():
            try:
                blob = json.loads(path.read_text())
            except json.JSONDecodeError:
                blob = {}
            if blob.get("key") == key:
                out[s] = blob
                continue
        missing.append(s)
    if missing and not cached_only:
        t0 = time.time()
        log(f"[reproduce] {exp.name}: computing seed(s) {missing}")
        results = _run_seeds(exp, missing, opts)
        dt = (time.time() - t0) / max(1, len(missing))
        for s in missing:
            blob = {"key": key, "experiment": exp.name, "seed": s if exp.seeded else None, "models": models,
                    "code": code_fingerprint(), "seconds": round(dt, 1),
                    "computed": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "result": _jsonable(results[s])}
            path = _cache_path(exp, s, root)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(blob))
            os.replace(tmp, path)
            out[s] = blob
        log(f"[reproduce] {exp.name}: {dt:.1f} s per seed")
    if not exp.seeded and out:
        only = next(iter(out.values()))
        return {s: only for s in seeds}
    return out


# ============================================================================ judging

@dataclass
class Outcome:
    claim: Claim
    values: dict[int, float]       # seed -> our value
    verdict: str
    mean: float = float("nan")
    spread: float = float("nan")
    seeds_passing: int = 0
    deterministic: bool = False
    note: str = ""


def judge(claim: Claim, per_seed: dict[int, dict], deterministic: bool = False, unavailable: str = "") -> Outcome:
    """Apply ``claim`` to ``per_seed`` = {seed: {experiment: result}} (seeds lacking one of its
    experiments are left out)."""
    if unavailable:
        return Outcome(claim, {}, "not run", note=unavailable)
    vals = {}
    for s, res in sorted(per_seed.items()):
        if all(e in res for e in claim.experiments):
            v = claim.measure(res)
            vals[s] = float("nan") if v is None else float(v)
    if not vals:
        return Outcome(claim, {}, "not run", note="its experiment was not run")
    if claim.seedless:  # the seed cannot change it: one value (the first seed's)
        first = next(iter(vals))
        vals, deterministic = {first: vals[first]}, True
    arr = np.array(list(vals.values()), dtype=float)
    finite = arr[np.isfinite(arr)]
    mean, spread = mean_sd(finite) if finite.size else (float("nan"), 0.0)
    spread = 0.0 if deterministic else spread
    passing = int(sum(claim.check.passes(v) for v in arr))
    if claim.min_seeds is not None and not deterministic:
        passes = passing >= seeds_needed(claim, len(arr))
    else:
        passes = claim.check.passes(mean)
    verdict = ("within about" if claim.check.about else "holds") if passes else "differs"
    note = "" if passes else claim.known
    return Outcome(claim, vals, verdict, mean, spread, passing, deterministic, note)


def seeds_needed(claim: Claim, n: int) -> int:
    """How many of ``n`` seeds must pass a claim with ``min_seeds`` (at least one)."""
    return max(1, math.ceil(claim.min_seeds * n - 1e-9))


def judge_all(claims: Sequence[Claim], per_seed: dict[int, dict], skipped: dict[str, str] | None = None) -> list[Outcome]:
    """Judge every claim on {seed: {experiment: result}} (claims whose experiments are missing: "not run";
    ``skipped`` = {experiment: why} gives the reason)."""
    skipped = skipped or {}
    out = []
    for c in claims:
        una = next((EXPERIMENTS[e].unavailable or skipped.get(e, "") for e in c.experiments
                    if EXPERIMENTS[e].unavailable or e in skipped), "")
        det = all(not EXPERIMENTS[e].seeded for e in c.experiments)
        out.append(judge(c, per_seed, det, una))
    return out


def experiments_of(claims: Sequence[Claim]) -> list[str]:
    """The experiments the claims read, most claims per CPU second first (so a run stopped early has
    judged as many claims as it could)."""
    count = {}
    for c in claims:
        for e in c.experiments:
            count[e] = count.get(e, 0) + 1
    return sorted(count, key=lambda n: (not EXPERIMENTS[n].cheap, -count[n] / EXPERIMENTS[n].cost_s))


def evaluate_claims(claims: Sequence[Claim], seeds: Sequence[int], *, root: Path | None = None, fresh: bool = False,
                    cached_only: bool = False, opts: Options = Options(), progressive: bool = True,
                    cheap_only: bool = False, deadline: float | None = None, after_each: Callable | None = None,
                    own_seeds: bool = False, log=print) -> tuple[list[Outcome], dict]:
    """Compute (or read) every experiment the claims need and judge them; returns (outcomes, info)
    where info = {experiment: {"seconds_by_seed", "code", "computed", "seeds"}}. ``cheap_only``: run
    only the cheap experiments (``--fast``); the other claims are "not run". ``deadline`` (a
    ``time.time()``): start no experiment after it (its claims are "not run", saying so).

    ``progressive``: first every experiment at the first seed, then every experiment at the other
    seeds, so that a run stopped early has covered as many claims as it could. ``after_each(outcomes,
    info)`` is called after each experiment (the command line rewrites the report there).
    ``own_seeds``: an experiment with its own ``seeds`` (its notebook's) runs at those instead of ``seeds``."""
    names = experiments_of(claims)
    skipped = {n: "not in the fast subset (make reproduce runs it)" for n in names
               if cheap_only and not EXPERIMENTS[n].cheap and not EXPERIMENTS[n].unavailable}
    names = [n for n in names if n not in skipped]
    fps: dict[str, str] = {}
    per_seed: dict[int, dict] = {s: {} for s in seeds}
    info: dict[str, dict] = {}
    def seeds_of(exp: Experiment) -> list[int]:
        return list(exp.seeds) if own_seeds and exp.seeds else list(seeds)

    def rounds_of(exp: Experiment) -> list[list[int]]:
        mine = seeds_of(exp)
        return [mine[:1], mine[1:]] if progressive and len(mine) > 1 else [mine]

    for r in range(2 if progressive else 1):
        for name in names:
            exp = EXPERIMENTS[name]
            rounds = rounds_of(exp)
            if r >= len(rounds) or not rounds[r]:
                continue
            round_seeds = rounds[r]
            if exp.unavailable:
                info[name] = {"unavailable": exp.unavailable}
                continue
            if not exp.seeded and r > 0:
                continue
            if deadline is not None and time.time() > deadline and not cached_only:
                have_any = any(name in per_seed[s] for s in per_seed)
                why = "not reached within the run's time budget (--stop-after)"
                if not have_any:
                    skipped[name] = why
                    info[name] = {"unavailable": why}
                elif name in info:
                    info[name]["note"] = f"seeds {','.join(map(str, round_seeds))}: {why}"
                continue
            want = round_seeds if exp.seeded else seeds_of(exp)  # deterministic: computed once, one blob for all
            for m in exp.models:
                if m not in fps:
                    fps[m] = model_fingerprint(m)
            got = compute(exp, want, root=root, fresh=fresh, cached_only=cached_only, models=fps, opts=opts, log=log)
            for s, blob in got.items():
                per_seed.setdefault(s, {})[name] = blob["result"]
            have = {s: per_seed[s][name] for s in per_seed if name in per_seed[s]}
            blobs = list({id(b): b for b in got.values()}.values())
            old = info.get(name, {})
            seconds = dict(old.get("seconds_by_seed", {}))
            for s, b in (got.items() if exp.seeded else list(got.items())[:1]):
                seconds[s] = b.get("seconds", 0.0)
            info[name] = {"seconds_by_seed": seconds,
                          "code": sorted(set(old.get("code", [])) | {b.get("code") for b in blobs}),
                          "computed": sorted(set(old.get("computed", [])) | {b.get("computed") for b in blobs}),
                          "seeds": sorted(have) if exp.seeded else "deterministic"}
            if after_each is not None:
                after_each(judge_all(claims, per_seed, skipped), info)
    for n, why in skipped.items():
        info[n] = {"unavailable": why}
    return judge_all(claims, per_seed, skipped), info


def select(only: Sequence[str] | None = None, fast: bool = False) -> list[Claim]:
    """The claims of the labs or experiments named in ``only`` (None: all); ``fast``: only those whose
    experiments are all cheap."""
    out = []
    for c in CLAIMS:
        if only and not any(c.lab == o or c.id.startswith(o) or o in c.experiments for o in only):
            continue
        if fast and not all(EXPERIMENTS[e].cheap for e in c.experiments):
            continue
        out.append(c)
    return out


# ============================================================================ the report

def _fmt(claim: Claim, x: float) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return claim.fmt.format(x)


def ours_cell(o: Outcome) -> str:
    """The report's "ours" cell: the mean ± sd over seeds, then every seed's own value and how many
    pass (with the share a per-run claim needs); one value where the seed cannot change it."""
    c = o.claim
    if o.deterministic:
        why = c.seedless or "deterministic"
        return f"{_fmt(c, o.mean)} (one value: {why})" if c.seedless else f"{_fmt(c, o.mean)} ({why})"
    if len(o.values) < 2:
        s, v = next(iter(o.values.items()))
        return f"{_fmt(c, v)} (seed {s})"
    each = ", ".join(f"{s}: {_fmt(c, v)}" for s, v in o.values.items())
    n = len(o.values)
    if c.min_seeds is not None:  # judged seed by seed: the mean would say nothing
        return f"seeds {each} ({o.seeds_passing}/{n} pass, needs {seeds_needed(c, n)})"
    spread = f" ± {_fmt(c, o.spread)}" if math.isfinite(o.mean) else ""
    return f"{_fmt(c, o.mean)}{spread} (seeds {each}; {o.seeds_passing}/{n} pass)"


def summary_counts(outcomes: Sequence[Outcome]) -> dict[str, dict[str, int]]:
    """{lab: {"total", "holds", "within about", "differs", "not run", "qualitative", "qualitative_held",
    "numeric", "numeric_held"}} plus an "all" row."""
    rows: dict[str, dict[str, int]] = {}
    for o in outcomes:
        for lab in (o.claim.lab, "all"):
            r = rows.setdefault(lab, {k: 0 for k in ("total", "holds", "within about", "differs", "not run",
                                                     "qualitative", "qualitative_held", "numeric", "numeric_held")})
            r["total"] += 1
            r[o.verdict] += 1
            kind = "qualitative" if o.claim.qualitative else "numeric"
            if o.verdict != "not run":
                r[kind] += 1
                r[kind + "_held"] += o.verdict in ("holds", "within about")
    order = [lab for lab in LABS if lab in rows] + ["all"]
    return {lab: rows[lab] for lab in order if lab in rows}


def write_report(outcomes: Sequence[Outcome], info: dict, seeds: Sequence[int], path: Path | str,
                 wall_s: float | None = None, load: str | None = None, fast: bool = False,
                 command: str = "python -m llmrl.tools.reproduce", state: str = "complete", smoke: bool = False,
                 own_seeds: bool = False) -> Path:
    """docs/reproduction.md: the summary by lab, then one table per lab (claim, statement, published,
    ours, tolerance and its reason, verdict), then the experiments' cost and provenance."""
    path = Path(path)
    code_now = code_fingerprint()
    lines = ["# Reproduction of the published results", "",
             f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f" ({'fast subset: only the cheap experiments were run' if fast else 'every claim'}); seeds {', '.join(map(str, seeds))}"
             + ("" if not own_seeds else " (" + "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in NOTEBOOK_SEEDS.items())
                + ", the seeds their notebooks train)") + "."
             " Regenerate with `make reproduce` (the cache under `artifacts/reproduce/` makes a rerun cheap;"
             " `--fresh` recomputes). The claims are data in `lib/llmrl/tools/reproduce.py`; each is judged on the"
             " mean over seeds, or, where the published statement is about one run (\"the hack completes\"),"
             " on each seed with the share of seeds it needs: **holds** (a qualitative claim, or an exact value"
             " within its rounding), **within about** (a number within the published \"about\"), **differs**,"
             " **not run**. Each row lists every seed's own value. Identities that hold for any correct"
             " implementation (the worked example's pi*, the Gibbs gap, unbiased estimators, greedy decoding's"
             " single answer) are tested in `lib/tests`, not claimed here: no run can miss them."
             " Seeds: the RL experiments (lab19 parts 2-3, lab21's projects, hw4) train one run per seed; the"
             " claims about a checkpoint (lab11, lab21's models) vary only the sampling with the seed, since the"
             " checkpoints come from one SFT run; greedy decoding and exact computations give one value.", ""]
    if smoke:
        lines += [f"**Smoke run**: every training run was {SMOKE_STEPS} steps long. It checks that every experiment and"
                  " claim runs; its numbers mean nothing.", ""]
    if state != "complete":
        how = "the run stopped at its time budget" if state.startswith("stopped") else \
            "the run had not finished when this was written"
        lines += [f"**Partial report ({state})**: {how}. Claims marked \"not run\" were not reached; the others"
                  " are judged on the seeds listed in their row.", ""]
    if wall_s is not None:
        lines += [f"Wall time of this run{'' if state == 'complete' else ' so far'}: {wall_s / 60:.1f} min"
                  + (f" (load average {load})" if load else "")
                  + "; experiments read from the cache cost nothing here (their own cost is in the last table).", ""]
    secs = [v for i in info.values() for v in i.get("seconds_by_seed", {}).values()]
    if secs:
        lines += [f"Computing the results in the cache took {sum(secs) / 60:.1f} min of wall time in all (the sum over"
                  " the experiments and seeds of the last table; on a shared machine).", ""]
    lines += ["## Summary", "", "| lab | claims | holds | within about | differs | not run | qualitative held |"
              " numeric held |", "|---|---|---|---|---|---|---|---|"]
    for lab, r in summary_counts(outcomes).items():
        q = f"{r['qualitative_held']}/{r['qualitative']}" if r["qualitative"] else "-"
        n = f"{r['numeric_held']}/{r['numeric']}" if r["numeric"] else "-"
        lines.append(f"| {'**all**' if lab == 'all' else lab} | {r['total']} | {r['holds']} | {r['within about']} |"
                     f" {r['differs']} | {r['not run']} | {q} | {n} |")
    lines.append("")
    for lab in LABS:
        rows = [o for o in outcomes if o.claim.lab == lab]
        if not rows:
            continue
        lines += [f"## {lab}", "", "| id | claim | published | ours (mean ± sd; seeds) | tolerance | verdict |",
                  "|---|---|---|---|---|---|"]
        for o in rows:
            c = o.claim
            ours = ours_cell(o) if o.values else "–"
            tol = f"{c.check.describe()}: {c.check.reason}"
            verdict = f"**{o.verdict}**" + (f": {o.note}" if o.note else "")
            cell = lambda s: s.replace("|", "\\|")  # noqa: E731
            lines.append(f"| `{c.id}` | {cell(c.statement)} | {cell(c.published)} | {cell(ours)} | {cell(tol)} |"
                         f" {cell(verdict)} |")
        lines.append("")
    lines += ["## Experiments", "", "Each is computed once per seed and shared by the claims that read it."
              " Seconds: wall time per seed when it was computed (divided among the seeds computed together;"
              " on a shared machine, so noisy).", "",
              "| experiment | seeds | s per seed | computed | library code |", "|---|---|---|---|---|"]
    for name, i in info.items():
        if "unavailable" in i:
            lines.append(f"| {name} | – | – | not run: {i['unavailable']} | – |")
            continue
        if not i.get("code"):
            lines.append(f"| {name} | – | – | not run | – |")
            continue
        stale = [c for c in i["code"] if c != code_now]
        code = ", ".join(i["code"]) + (" (**older than the current library: rerun with --fresh**)" if stale else " (current)")
        seeds_txt = i["seeds"] if isinstance(i["seeds"], str) else ",".join(map(str, i["seeds"]))
        secs = list(i["seconds_by_seed"].values())
        per = f"{np.mean(secs):.1f}" if secs else "–"
        note = f" ({i['note']})" if i.get("note") else ""
        lines.append(f"| {name} | {seeds_txt}{note} | {per} | {', '.join(i['computed'])} | {code} |")
    lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def _load() -> str | None:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m llmrl.tools.reproduce", description=__doc__.splitlines()[0])
    p.add_argument("--fast", action="store_true", help="only the claims whose experiments are cheap (about a minute)")
    p.add_argument("--only", action="append", default=None, metavar="LAB|CLAIM|EXPERIMENT",
                   help="restrict to a lab (lab11), a claim id prefix or an experiment (lab21/project5); repeatable")
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds for every experiment (default 0,1,2, and each notebook's own seeds "
                        "where it trains others: " + "; ".join(f"{k} {','.join(map(str, v))}"
                                                              for k, v in NOTEBOOK_SEEDS.items()) + ")")
    p.add_argument("--out", default=None, help="report path (default docs/reproduction.md)")
    p.add_argument("--cache", default=None, help="cache folder (default artifacts/reproduce)")
    p.add_argument("--fresh", action="store_true", help="recompute everything, ignoring the cache")
    p.add_argument("--report-only", action="store_true", help="run nothing; report from the cache")
    p.add_argument("--workers", type=int, default=1, help="processes for the training runs (one thread each)")
    p.add_argument("--smoke", action="store_true",
                   help=f"every training run {SMOKE_STEPS} steps: checks the pipeline end to end; the numbers mean "
                        "nothing (own cache; report in artifacts/reproduce/smoke/)")
    p.add_argument("--stop-after", type=float, default=None, metavar="MIN",
                   help="start no experiment after MIN minutes; the report says which claims were not reached")
    p.add_argument("--list", action="store_true", help="print the claims and exit")
    a = p.parse_args(argv)
    try:
        seeds = list(DEFAULT_SEEDS) if a.seeds is None else [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds must be comma-separated integers, got {a.seeds!r}")
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        p.error(f"--seeds must name distinct seeds >= 0, got {a.seeds!r}")
    if a.workers < 1:
        p.error(f"--workers must be >= 1, got {a.workers}")
    if a.only:
        known = set(LABS) | set(EXPERIMENTS)
        for o in a.only:
            if o not in known and not any(c.id.startswith(o) for c in CLAIMS):
                p.error(f"--only {o!r} names no lab, experiment or claim (labs: {', '.join(LABS)})")
    claims = select(a.only, a.fast and a.list)
    if a.list:
        for c in claims:
            print(f"{c.id:34s} {c.published:24s} {c.statement}")
        print(f"{len(claims)} claims")
        return 0
    from ..utils import set_threads
    set_threads(1)
    opts = Options(smoke=a.smoke, workers=a.workers)
    root = Path(a.cache) if a.cache else cache_dir()
    out = Path(a.out) if a.out else (root / "smoke" / "reproduction.md" if a.smoke else default_report_path())
    cmd = ("python -m llmrl.tools.reproduce " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    t0 = time.time()

    def report(outcomes, info, state):
        write_report(outcomes, info, seeds, out, time.time() - t0, _load(), a.fast, cmd, state=state, smoke=a.smoke,
                     own_seeds=a.seeds is None)

    try:
        outcomes, info = evaluate_claims(claims, seeds, root=root, fresh=a.fresh, cached_only=a.report_only, opts=opts,
                                         cheap_only=a.fast, after_each=lambda o, i: report(o, i, "in progress"),
                                         own_seeds=a.seeds is None,
                                         deadline=None if a.stop_after is None else t0 + 60 * a.stop_after)
    except KeyboardInterrupt:
        print(f"[reproduce] stopped; the report so far is in {out}", file=sys.stderr)
        return 130
    stopped = [n for n, i in info.items() if "time budget" in i.get("unavailable", "") + i.get("note", "")]
    report(outcomes, info, f"stopped at --stop-after {a.stop_after:g} min before {', '.join(stopped)}" if stopped
           else "complete")
    wall = time.time() - t0
    for lab, r in summary_counts(outcomes).items():
        print(f"{lab:6s} {r['holds'] + r['within about']}/{r['total']} hold or within about, {r['differs']} differ, "
              f"{r['not run']} not run")
    print(f"report: {out}; wall time {wall / 60:.1f} min (load average {_load()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
