"""How each published claim's number is measured from the experiments' results, by claim id.

The claims themselves (statement, published value, experiments, tolerance and its reason) are data:
``claims.json`` beside this module, read and checked by :mod:`llmrl.tools.claims`. Each entry there
has one measure here under the same id (the checker fails on a claim without a measure or a measure
without a claim).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Measure = Callable[[dict], float]
Add = Callable[[str, Measure], None]


def _ev(res: dict, arm: str, metric: str, i: int = -1) -> float:
    v = res["arms"][arm]["evals"][metric][i]
    return float("nan") if v is None else float(v)


def measures() -> dict[str, Measure]:
    """{claim id: measure(results) -> float}: ``results`` holds one seed's result of every experiment
    the claim names (claims.json)."""
    M: dict[str, Measure] = {}

    def add(claim_id: str, measure: Measure) -> None:
        if claim_id in M:
            raise ValueError(f"claim {claim_id!r} has two measures")
        M[claim_id] = measure

    for section in (_lab11, _lab19, _lab21_projects_0_to_2, _lab21_projects_3_to_5, _hw4):
        section(add)
    return M


def _lab11(add: Add) -> None:
    """lab11: the SFT model's training and sampling from it."""
    # What a correct implementation gives on any run is not a result here but a test: the worked
    # example's pi* and soft values, the token-level optimum equal to the sequence-level one, the Gibbs
    # gap and "no random policy beats pi*", temperature below the frontier (lib/tests/test_toylm.py);
    # no gradient into the prompt, k1 and k3 unbiased and k2 biased, greedy decoding's single answer
    # (lib/tests/test_lab11.py); the toy LM's frontier, an exact computation of fixed scenarios (the worked one
    # lowers reward as T falls, the hack one's true reward rises, peaks near 0.5 nats and falls: the scenario
    # was built for it), lib/tests/test_toylm.py. The claims below are results of the SFT model's training and
    # of sampling from it. "Accuracy falls from T = 0 to 1 to 2" is no claim either: the three accuracies'
    # bands (0.75-0.85, 0.50-0.60, below 0.30) do not overlap, so it holds whenever they do.
    add("lab11.greedy-accuracy", lambda r: r["lab11/sweep"]["accuracy"]["0"])
    add("lab11.accuracy-T1", lambda r: r["lab11/sweep"]["accuracy"]["1"])
    add("lab11.accuracy-T2", lambda r: r["lab11/sweep"]["accuracy"]["2"])
    add("lab11.distinct-T2", lambda r: r["lab11/sweep"]["distinct"]["2"])
    add("lab11.distinct-climbs", lambda r: float(np.diff(r["lab11/sweep"]["distinct_all"]).min()))
    add("lab11.kl-agree-hot", lambda r: max(abs(r["lab11/kl"][T][k] - 1) for T in ("1.5", "2") for k in ("k1_ratio", "k3_ratio")))
    add("lab11.k3-low-sharp", lambda r: r["lab11/kl"]["0.25"]["k3_ratio"])
    add("lab11.k3-bars-miss", lambda r: r["lab11/kl"]["0.25"]["k3_covers"])


def _lab19(add: Add) -> None:
    """lab19: best-of-n overoptimization, reward hacking, entropy under the clip variants."""
    from ..labs.lab19_analysis import MID_WINDOW, hack_completed

    # Part 1's pools are samples (seeded); "the proxy gain keeps rising with n" and "with b = 0 the
    # exact gold gain never turns down" hold for every pool and every noise level (the best of more
    # draws of a score is at least as high; with b = 0 gold and proxy rise together): tests
    # (lib/tests/test_overopt.py), not results. The peak's KL is log n - (n - 1)/n of the peak's n, so the
    # peak is one claim (its KL), and "negative by best-of-3000" is the same number as the pool's value there.
    o = lambda k: (lambda r: r["lab19/overopt"][k])  # noqa: E731
    add("lab19.bon-peak-kl", o("peak_kl"))
    add("lab19.bon-peak-gain", o("peak_gain"))
    add("lab19.gao-alpha", o("alpha"))
    add("lab19.gao-beta", o("beta"))
    add("lab19.noise-beta", o("noise_beta"))
    add("lab19.pool-3000", o("pool_gain_3000"))
    add("lab19.exact-3000", o("exact_gain_3000"))
    h = lambda arm, k: (lambda r: r["lab19/hacking"][arm][k])  # noqa: E731
    w0, w1 = MID_WINDOW
    add("lab19.hack-acc-start", h("0", "accuracy_start"))
    add("lab19.hack-acc-mid", h("0", "accuracy_mid"))
    add("lab19.hack-rises-first", lambda r: r["lab19/hacking"]["0"]["accuracy_mid"] - r["lab19/hacking"]["0"]["accuracy_start"])
    add("lab19.hack-peak-step", h("0", "peak_step"))
    # "completed" is the final length at the 4-character maximum and the final accuracy at 0 (lab19_analysis.
    # HACK_DONE), seed by seed: the final accuracy and length are that one fact, not two more claims.
    add("lab19.hack-completed", lambda r: float(hack_completed(r["lab19/hacking"]["0"])))
    add("lab19.hack-final-kl", h("0", "final_kl"))
    add("lab19.hack-proxy-climbs", lambda r: r["lab19/hacking"]["0"]["final_proxy"] - r["lab19/hacking"]["0"]["proxy_mid"])
    add("lab19.kl005-no-hack", lambda r: 4.0 - r["lab19/hacking"]["0.05"]["final_length"])
    add("lab19.kl005-acc", h("0.05", "final_accuracy"))
    add("lab19.gold-acc", h("gold", "final_accuracy"))
    add("lab19.kl005-near-gold", lambda r: r["lab19/hacking"]["gold"]["final_accuracy"]
        - r["lab19/hacking"]["0.05"]["final_accuracy"])
    en = lambda arm, k: (lambda r: r["lab19/entropy"][arm][k])  # noqa: E731
    add("lab19.entropy-start", en("symmetric", "entropy_start"))
    add("lab19.entropy-end", lambda r: 0.5 * (r["lab19/entropy"]["symmetric"]["entropy_end"]
                                                               + r["lab19/entropy"]["clip-higher"]["entropy_end"]))
    add("lab19.entropy-falls-both", lambda r: min(r["lab19/entropy"][a]["entropy_start"] - r["lab19/entropy"][a]["entropy_end"]
                                  for a in ("symmetric", "clip-higher")))
    add("lab19.clips-indistinguishable", lambda r: r["lab19/entropy"]["clip-higher"]["entropy_end"] - r["lab19/entropy"]["symmetric"]["entropy_end"])
    add("lab19.no-upper-higher", lambda r: r["lab19/entropy"]["no upper clip"]["entropy_end"]
        - 0.5 * (r["lab19/entropy"]["symmetric"]["entropy_end"] + r["lab19/entropy"]["clip-higher"]["entropy_end"]))
    add("lab19.no-upper-entropy", en("no upper clip", "entropy_end"))
    add("lab19.no-upper-unstable", lambda r: r["lab19/entropy"]["symmetric"]["final_accuracy"] - r["lab19/entropy"]["no upper clip"]["final_accuracy"])
    add("lab19.clip-rare", en("symmetric", "late_clip_high_of_positive_rare"))
    add("lab19.clip-common", en("symmetric", "late_clip_high_of_positive_common"))


def _lab21_projects_0_to_2(add: Add) -> None:
    """lab21: the teacher and student models, Projects 0 to 2."""
    add("lab21.teacher-accuracy", lambda r: r["lab21/models"]["teacher_greedy"])
    add("lab21.student-greedy", lambda r: r["lab21/models"]["student_greedy"])
    # The projects' starting pass@1 (Projects 0, 2 and 5 print it) is this same model's sampled accuracy on
    # 2-digit sums at T = 1 before any step: one fact, claimed once here.
    add("lab21.student-sampled", lambda r: r["lab21/models"]["student_sampled"])
    add("lab21.p0-start-kl", lambda r: _ev(r["lab21/project0"], "rl", "kl_to_teacher_exact_token_mean_nats", 0))
    for arm in ("opd-full", "sft-teacher", "opd-sampled", "rl"):
        add(f"lab21.p0-{arm}-pass1", (lambda a: lambda r: _ev(r["lab21/project0"], a, "pass@1"))(arm))
        add(f"lab21.p0-{arm}-kl", (lambda a: lambda r: _ev(r["lab21/project0"], a, "kl_to_teacher_exact_token_mean_nats"))(arm))
    add("lab21.p0-dense-beats-sparse", lambda r: min(_ev(r["lab21/project0"], a, "pass@1") for a in ("opd-full", "sft-teacher"))
        - _ev(r["lab21/project0"], "rl", "pass@1"))
    add("lab21.p0-full-beats-sampled", lambda r: _ev(r["lab21/project0"], "opd-full", "pass@1")
        - _ev(r["lab21/project0"], "opd-sampled", "pass@1"))
    add("lab21.p0-onpolicy-small-lead", lambda r: _ev(r["lab21/project0"], "opd-full", "pass@1") - _ev(r["lab21/project0"], "sft-teacher", "pass@1"))
    add("lab21.p1-start-entropy", lambda r: _ev(r["lab21/project1"], "symmetric", "entropy_token_mean_nats", 0))
    add("lab21.p1-collapse", lambda r: max(_ev(r["lab21/project1"], a, "entropy_token_mean_nats") for a in ("symmetric", "clip-higher", "no-clip")))
    for arm in ("symmetric", "clip-higher"):
        add(f"lab21.p1-{arm}-entropy", (lambda a: lambda r: _ev(r["lab21/project1"], a, "entropy_token_mean_nats"))(arm))
    add("lab21.p1-no-clip-highest", lambda r: _ev(r["lab21/project1"], "no-clip", "entropy_token_mean_nats")
        - max(_ev(r["lab21/project1"], a, "entropy_token_mean_nats") for a in ("symmetric", "clip-higher")))
    add("lab21.p1-no-clip-lowest-acc", lambda r: min(_ev(r["lab21/project1"], a, "pass@1") for a in ("symmetric", "clip-higher"))
        - _ev(r["lab21/project1"], "no-clip", "pass@1"))
    add("lab21.p1-clipped-pass1", lambda r: _ev(r["lab21/project1"], "symmetric", "pass@1"))
    add("lab21.p1-no-clip-pass1", lambda r: _ev(r["lab21/project1"], "no-clip", "pass@1"))
    add("lab21.p1-no-clear-effect", lambda r: _ev(r["lab21/project1"], "clip-higher", "entropy_token_mean_nats")
        - _ev(r["lab21/project1"], "symmetric", "entropy_token_mean_nats"))
    add("lab21.p1-pass16-no-clear-effect", lambda r: _ev(r["lab21/project1"], "clip-higher", "pass@16")
        - _ev(r["lab21/project1"], "symmetric", "pass@16"))
    # binary's proxy reward is exact match, the gold itself: its proxy is not a second claim
    for arm in ("binary", "partial", "stylish_w2"):
        add(f"lab21.p2-{arm}-gold", (lambda a: lambda r: _ev(r["lab21/project2"], a, "gold_pass@1"))(arm))
        if arm != "binary":
            add(f"lab21.p2-{arm}-proxy", (lambda a: lambda r: _ev(r["lab21/project2"], a, "proxy_reward_mean"))(arm))
        add(f"lab21.p2-{arm}-pad", (lambda a: lambda r: _ev(r["lab21/project2"], a, "pad_share_small_sums"))(arm))
    add("lab21.p2-w1-pad", lambda r: _ev(r["lab21/project2"], "stylish_w1", "pad_share_small_sums"))
    add("lab21.p2-w1-gold", lambda r: _ev(r["lab21/project2"], "stylish_w1", "gold_pass@1"))
    # the hack's two other halves (the padding is lab21.p2-stylish_w2-pad): gold goes nowhere, the proxy goes up
    add("lab21.p2-stylish-hacked", lambda r: _ev(r["lab21/project2"], "stylish_w2", "gold_pass@1")
        - _ev(r["lab21/project2"], "stylish_w2", "gold_pass@1", 0))
    add("lab21.p2-stylish-proxy-up", lambda r: _ev(r["lab21/project2"], "stylish_w2", "proxy_reward_mean")
        - _ev(r["lab21/project2"], "stylish_w2", "proxy_reward_mean", 0))
    add("lab21.p2-partial-no-faster", lambda r: _ev(r["lab21/project2"], "partial", "gold_pass@1")
        - _ev(r["lab21/project2"], "binary", "gold_pass@1"))


def _lab21_projects_3_to_5(add: Add) -> None:
    """lab21: Projects 3 to 5."""
    b3 = lambda arm, b, i=-1: (lambda r: _ev(r["lab21/project3"], arm, f"sampled_accuracy_{b}", i))  # noqa: E731
    add("lab21.p3-start-1d1d", b3("uniform", "1d+1d", 0))
    # "30-50% on the 2-digit buckets": every bucket, so the worst bucket's distance outside [0.30, 0.50]
    add("lab21.p3-start-2d", lambda r: max(max(0.30 - v, v - 0.50, 0.0) for v in (
        _ev(r["lab21/project3"], "uniform", f"sampled_accuracy_{b}", 0) for b in ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100"))))
    add("lab21.p3-start-3d1d", b3("uniform", "3d+1d", 0))
    add("lab21.p3-target-only-3d1d", b3("target-only", "3d+1d"))
    add("lab21.p3-target-only-drift", lambda r: float(np.mean(
            [_ev(r["lab21/project3"], "target-only", f"sampled_accuracy_{b}", 0) - _ev(r["lab21/project3"], "target-only", f"sampled_accuracy_{b}")
             for b in ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100")])))
    add("lab21.p3-both-improve", lambda r: min(float(np.mean(
            [_ev(r["lab21/project3"], a, f"sampled_accuracy_{b}") - _ev(r["lab21/project3"], a, f"sampled_accuracy_{b}", 0)
             for b in ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100")])) for a in ("uniform", "learnability")))
    add("lab21.p3-uniform-ge100", b3("uniform", "2d+2d_ge100"))
    add("lab21.p3-learnability-ge100", b3("learnability", "2d+2d_ge100"))
    add("lab21.p3-learnability-ahead", lambda r: _ev(r["lab21/project3"], "learnability", "sampled_accuracy_2d+2d_ge100")
        - _ev(r["lab21/project3"], "uniform", "sampled_accuracy_2d+2d_ge100"))
    add("lab21.p3-uniform-usage", lambda r: r["lab21/project3"]["arms"]["uniform"]["extra"]["total_usage"]["usage_3d+1d"])
    add("lab21.p3-learnability-usage", lambda r: r["lab21/project3"]["arms"]["learnability"]["extra"]["total_usage"]["usage_3d+1d"])
    add("lab21.p3-neither-fixes-1d1d", lambda r: max(_ev(r["lab21/project3"], a, "sampled_accuracy_1d+1d") for a in ("uniform", "learnability")))
    for arm in ("mean", "std", "maxrl"):
        add(f"lab21.p4-{arm}-pass1", (lambda a: lambda r: _ev(r["lab21/project4"], a, "pass@1"))(arm))
        add(f"lab21.p4-{arm}-pass16", (lambda a: lambda r: _ev(r["lab21/project4"], a, "pass@16"))(arm))
    add("lab21.p4-maxrl-direction", lambda r: _ev(r["lab21/project4"], "maxrl", "pass@16") - _ev(r["lab21/project4"], "mean", "pass@16") + 1e-9)
    add("lab21.p4-mean-pass1-ahead", lambda r: _ev(r["lab21/project4"], "mean", "pass@1")
        - max(_ev(r["lab21/project4"], a, "pass@1") for a in ("std", "maxrl")))
    x5 = lambda r: r["lab21/project5"]["arms"]["rl"]["extra"]  # noqa: E731
    add("lab21.p5-end-pass1", lambda r: x5(r)["after"]["in_dist"][0])
    # "pass@64 falls" is no claim of its own: the base solves every problem within 64 samples (pass@64 1.000,
    # the ceiling, on every seed), so the fall is 1 minus the end value, which lab21.p5-end-pass64 judges.
    add("lab21.p5-start-pass64", lambda r: x5(r)["before"]["in_dist"][63])
    add("lab21.p5-end-pass64", lambda r: x5(r)["after"]["in_dist"][63])
    add("lab21.p5-crossing", lambda r: float(x5(r)["crossing_k"] or 65))
    add("lab21.p5-3d1d-zero", lambda r: max(max(x5(r)["before"]["3d+1d"]), max(x5(r)["after"]["3d+1d"])))


def _hw4(add: Add) -> None:
    """hw4: format_copy, math_toy and the GPU-only math_hard runs."""
    from ..hw4.plots import reward_rise

    # k3's non-negativity and unbiasedness are properties of the estimator (lib/tests/test_core_eval.py),
    # not results of a run.
    add("hw4.fc-reward", lambda r: r["hw4/format_copy"]["grpo"]["final_reward"])
    add("hw4.fc-exact-match", lambda r: r["hw4/format_copy"]["grpo"]["final_eval_exact_match"])
    add("hw4.fc-reinforce-exact-match", lambda r: r["hw4/format_copy"]["reinforce"]["final_eval_exact_match"])
    add("hw4.fc-rise-step", lambda r: float(reward_rise(r["hw4/format_copy"]["grpo"]["reward_curve"])["mid"]))
    add("hw4.fc-rise-sharp", lambda r: float(reward_rise(r["hw4/format_copy"]["grpo"]["reward_curve"])["width"]))
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
    add("hw4.math-grpo-beats-reinforce", lambda r: r["hw4/math_toy"]["grpo"]["eval_area"] - r["hw4/math_toy"]["reinforce"]["eval_area"])
    add("hw4.math-reinforce-beats-base", lambda r: r["hw4/math_toy"]["reinforce"]["final_eval_exact_match"] - r["hw4/math_toy"]["reinforce"]["start_eval_exact_match"])
    for cid in ("hw4.math-hard-base", "hw4.math-hard-reinforce", "hw4.math-hard-grpo", "hw4.math-hard-grpo-train"):
        add(cid, lambda r: float("nan"))  # a 1.5B model on a GPU: the experiment is unavailable here, never measured
