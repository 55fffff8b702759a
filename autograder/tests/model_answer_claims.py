"""The directional claims of the model answers and results paragraphs, one list per notebook, with the
printed output each rests on; test_model_answers.py checks them. The fields of a `Claim` and the
functions that read the outputs are in model_answer_checks.py; thresholds are stated beside each
check with the reason.
"""

from __future__ import annotations

import re

from autograder.tests.model_answer_checks import (  # noqa: F401  (Claim and arrow are read by test_model_answers)
    Claim, FLOAT, Hypothesis, compare, se_of_difference, spread, _frontier_below, _hack_rise_fall, _kl_hot_agree, _kl_mid_noisy, _kl_sharp_low,
    _kl_sharp_pooled_low, _math_both_solved, _math_final_tie, _math_grpo_costs, _math_grpo_faster,
    _math_grpo_faster_early, _math_no_clipping, _more_steps_faster, _more_steps_leave_region,
    _no_kl_like_default, _only_degraded, _p3, _p5_sharpens, _solved, _strong_kl_pins, _sweep_seeds_close,
    _sweep_trend, _tiny_clip_slower, _worked_cooling, rows, value, arrow,
)


HW4: list[Claim] = [
    # Question 2: a hypothetical bug, not a result of a run.
    Claim("hw4/llm_rl", r"drops the first completion token",
          unchecked="the example bug is hypothetical: the notebook's runs use a correct mask"),
    # Question 3 rests on the math runs' printout ('math_toy grpo: eval exact match a -> m ± s [seeds] (... at step 10);
    # area under the eval curve ...', then 'GRPO minus GR-REINFORCE: area ..., final eval exact match ...').
    Claim("hw4/llm_rl", r"more sample-efficient in every seed", r"math_toy grpo\s*:", _math_grpo_faster),
    Claim("hw4/llm_rl", r"It learned faster early", r"math_toy grpo\s*:", _math_grpo_faster_early),
    Claim("hw4/llm_rl", r"both had nearly solved math_toy", r"math_toy grpo\s*:", _math_both_solved),
    Claim("hw4/llm_rl", r"no evidence that either ends higher", r"math_toy grpo\s*:", _math_final_tie),
    Claim("hw4/llm_rl", r"a larger KL to the reference", r"math_toy grpo\s*:", _math_grpo_costs),
    Claim("hw4/llm_rl", r"Clipping was negligible", r"math_toy grpo\s*:", _math_no_clipping),
    # Question 4 rests on the ablation's printout ('knob = value: eval exact match m ± s [seeds], ...').
    Claim("hw4/llm_rl", r"only the strong KL penalty degraded the run", r"eval exact match .*max KL",
          lambda out: _only_degraded(out, {"kl_coef=8"})),
    Claim("hw4/llm_rl", r"held the policy at the base model", r"eval exact match .*max KL", _strong_kl_pins),
    Claim("hw4/llm_rl", r"No penalty at all .* ended like the default", r"eval exact match .*max KL", _no_kl_like_default),
    Claim("hw4/llm_rl", r"did not degrade the run within the values tried; they sped it up", r"eval exact match .*max KL",
          _more_steps_faster),
    Claim("hw4/llm_rl", r"8 epochs reached a final reward", r"eval exact match .*max KL", _more_steps_leave_region),
    Claim("hw4/llm_rl", r"A tiny clip range .* clipped the most", r"eval exact match .*max KL", _tiny_clip_slower),
    # Question 5 rests on the format_copy runs' printout ('format_copy grpo: ... final rollout reward r').
    Claim("hw4/llm_rl", r"flattens once the task is solved", r"format_copy grpo\s*:.*final rollout reward",
          lambda out: _solved(out)),
]

LAB11: list[Claim] = [
    # Experiment 1 rests on the sweep's table ('T = x: accuracy a ± s, distinct answers among 8: d ± s').
    Claim("lab11/llm_as_policy", r"right most often", r"distinct answers among 8: .* ±", lambda out: _sweep_trend(out)),
    Claim("lab11/llm_as_policy", r"accuracy falls at every step of the sweep", r"distinct answers among 8: .* ±",
          lambda out: _sweep_trend(out)),
    Claim("lab11/llm_as_policy", r"The seeds lie close together", r"distinct answers among 8: .* ±", _sweep_seeds_close),
    # Experiment 2 rests on the KL table ('T = x: exact KL ... | median batch / exact: k1 a, k3 b | ...').
    Claim("lab11/llm_as_policy", r"k1 and k3 both sit close to the exact value", r"median batch / exact", _kl_hot_agree),
    Claim("lab11/llm_as_policy", r"this draw of 16 batches is noisier", r"median batch / exact", _kl_mid_noisy),
    Claim("lab11/llm_as_policy", r"Draw again with another\s+and those two move", unchecked="what another draw would "
          "do (the notebook draws one; lib/tests/test_lab11.py runs seeds 0-2: 0.70-1.04 at T = 1.5)"),
    Claim("lab11/llm_as_policy", r"k3's median batch is well under\s+half of it", r"median batch / exact",
          _kl_sharp_low),
    Claim("lab11/llm_as_policy", r"Pooling all 16 batches does not rescue it", r"all batches pooled / exact",
          _kl_sharp_pooled_low),
    Claim("lab11/llm_as_policy", r"almost never draws has",
          unchecked="the mechanism behind the low median (which tokens pi_T rarely draws), a property of the two "
                    "distributions that no printed number isolates; the numbers it explains are checked above"),
    # Experiment 3 rests on the frontier cell's printout ('... stays below the frontier at every KL: True', ...).
    Claim("lab11/llm_as_policy", r"Temperature never reaches the frontier", r"stays below the frontier",
          _frontier_below),
    Claim("lab11/llm_as_policy", r"so the reward falls, to nearly 0", r"worked: cooling pi_ref", _worked_cooling),
    Claim("lab11/llm_as_policy", r"proxy reward keeps climbing", r"hack: pi\* at the peak", _hack_rise_fall),
]

# lab19 (failure_modes): owned by the lab19 notebook's author.
def _lab19_report(out: str, key: str) -> float:
    """The mean of ``key``'s row of lab19.expected_report ('key  ours  m ± sd (n seeds)  published x')."""
    return value(out, re.escape(key) + r"\s+ours")


def _lab19_pools(out: str, label: str) -> list[float]:
    """The per-pool list printed after ``label`` ('...: [0.68 0.691 0.69]')."""
    m = re.search(re.escape(label) + r"[^\n]*?\[([^\]]*)\]", out)
    assert m, f"no '{label} [...]' in the output"
    return [float(x) for x in m.group(1).replace(",", " ").split()]


def _lab19_overopt(out: str) -> Optional[str]:
    # "climbs to about +0.69 at best-of-10 (every pool peaks there) and then sinks below zero by
    # best-of-3000, while the proxy gain keeps climbing": the peak's n (mean over the pools) is 10
    # with no spread, every pool's best-of-10 gain is positive, their best-of-3000 mean below zero,
    # and every pool's proxy gain grows at every step of n.
    at10, at3000 = _lab19_pools(out, "best-of-10, every pool"), _lab19_pools(out, "best-of-3000, every pool")
    steps = _lab19_pools(out, "smallest step of the proxy gain")
    if not re.search(r"bon_peak_n\s+ours\s+10\.0 ± 0\.0", out):
        return "the pools do not all peak at best-of-10"
    if min(at10) <= 0 or sum(at3000) / len(at3000) >= 0:
        return f"best-of-10 {at10}, best-of-3000 {at3000}: no rise and fall below zero"
    return None if min(steps) > 0 else f"the proxy gain does not rise at every step: {steps}"


def _lab19_noise_never_down(out: str) -> Optional[str]:
    steps = _lab19_pools(out, "noise-only proxy, smallest step of the gold gain")
    return None if min(steps) > 0 else f"the noise-only gold gain turns down somewhere: {steps}"


def _lab19_hack_rows(out: str) -> dict[str, list[dict[str, float]]]:
    """Part 2's per-seed lines: {label: [{start, mid, end, length, kl, peak_step}, ...]} (mid: steps 41-60)."""
    rows: dict[str, list[dict[str, float]]] = {}
    for m in re.finditer(rf"^(.+?)\s+seed (\d+): accuracy ({FLOAT}) -> ({FLOAT}) \(steps \d+-\d+\) -> end ({FLOAT}), "
                         rf"length ({FLOAT}), KL ({FLOAT}), training reward {FLOAT}; best 10 steps end at step (\d+)",
                         out, re.M):
        rows.setdefault(m.group(1).strip(), []).append(
            dict(zip(("seed", "start", "mid", "end", "length", "kl", "peak_step"), map(float, m.groups()[1:]))))
    assert rows, "no per-seed lines 'LABEL seed S: accuracy a -> b (steps 41-60) -> end ...' in the output"
    return rows


def _lab19_hack_rises_first(out: str) -> Optional[str]:
    # "gets better on most seeds ... seeds 0, 1 and 4 rise ... seeds 2 and 3 peak earlier and are back
    # where they started": the seeds whose accuracy over steps 41-60 is above their first 10 steps are
    # 0, 1 and 4 (a majority), and seeds 2 and 3 have their best window end before step 41
    no_kl = _lab19_hack_rows(out)["proxy, no KL"]
    rising = {int(r["seed"]) for r in no_kl if r["mid"] > r["start"]}
    early = {int(r["seed"]) for r in no_kl if r["peak_step"] < 41 and r["mid"] <= r["start"]}
    if rising != {0, 1, 4} or early != {2, 3}:
        return f"rising over steps 41-60: {sorted(rising)}; peaking before step 41 and back at the start: {sorted(early)}"
    return None


def _lab19_hack_complete(out: str) -> Optional[str]:
    # "every seed goes all the way": length 4.00 (>= 3.9) and accuracy 0.00 (<= 0.05) at the end, gold near 0.8
    rows = _lab19_hack_rows(out)
    bad = [int(r["seed"]) for r in rows["proxy, no KL"] if not (r["length"] >= 3.9 and r["end"] <= 0.05)]
    return f"seeds {bad} did not complete the hack" if bad else None


def _lab19_leash(out: str) -> Optional[str]:
    # "on every seed ... learns addition instead and ends within 0.1 of the gold-reward run of the same seed"
    rows = _lab19_hack_rows(out)
    gold = {int(r["seed"]): r["end"] for r in rows["gold reward"]}
    bad = [int(r["seed"]) for r in rows["proxy, beta = 0.05"] if abs(r["end"] - gold[int(r["seed"])]) > 0.1
           or r["length"] >= 3.0]
    return f"seeds {bad} pad or end more than 0.1 from their gold run" if bad else None


def _lab19_clip_shares(out: str) -> Optional[str]:
    # "rarely touches common tokens (about 5%), ... silences most of the rare ones (about 85%)":
    # common below 10% and rare above half, on the mean over the seeds
    common = _lab19_report(out, "clip_high_of_positive_common")
    rare = _lab19_report(out, "clip_high_of_positive_rare")
    return None if common < 0.1 and rare > 0.5 else f"rare {rare}, common {common}"


def _lab19_no_upper(out: str) -> Optional[str]:
    # "keeps entropy higher ... and the accuracy suffers": the per-arm lines
    # 'ARM entropy a ± s -> b ± s nats/token, accuracy c ± s -> d ± s'
    arms = {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(rf"^(symmetric|clip-higher|no upper clip)\s+entropy {FLOAT} ± {FLOAT} -> ({FLOAT}) ± "
                                 rf"{FLOAT} nats/token, accuracy {FLOAT} ± {FLOAT} -> ({FLOAT})", out, re.M)}
    if set(arms) != {"symmetric", "clip-higher", "no upper clip"}:
        return f"per-arm lines found for {sorted(arms)}"
    ent, acc = arms["no upper clip"]
    if ent <= max(arms["symmetric"][0], arms["clip-higher"][0]):
        return f"no upper clip ends at entropy {ent}, not above the clipped arms {arms}"
    return None if acc < arms["symmetric"][1] else f"no upper clip's accuracy {acc} is not below the symmetric {arms}"


LAB19: list[Claim] = [
    # Part 1 rests on the cell that computes the pools' curves (it prints the per-pool lines).
    Claim("lab19/failure_modes", r"gold gain climbs to about", r"best-of-3000, every pool", _lab19_overopt),
    Claim("lab19/failure_modes", r"noise-only proxy the gold gain never turns down",
          r"noise-only proxy, smallest step", _lab19_noise_never_down),
    # Part 2 rests on the per-seed lines under the hacking plot.
    Claim("lab19/failure_modes", r"first gets better at addition on most seeds", r"proxy, no KL\s+seed",
          _lab19_hack_rises_first),
    Claim("lab19/failure_modes", r"on seeds 0, 1 and 4 its accuracy rises", r"proxy, no KL\s+seed", _lab19_hack_rises_first),
    Claim("lab19/failure_modes", r"Every seed goes all the way within 300 steps", r"proxy, no KL\s+seed",
          _lab19_hack_complete),
    Claim("lab19/failure_modes", r"learns addition instead and ends within 0\.1", r"proxy, beta = 0\.05\s+seed",
          _lab19_leash),
    Claim("lab19/failure_modes", r"\*When\* the hack takes over is a matter of the seed", r"proxy, no KL\s+seed",
          lambda out: None if (lambda s: max(s) - min(s) >= 50)([r["peak_step"] for r in _lab19_hack_rows(out)["proxy, no KL"]])
          else "the seeds' peak steps lie within 50 steps of each other"),
    # Part 3 rests on the table under the entropy plot.
    Claim("lab19/failure_modes", r"rarely touches common tokens", r"clip_high_of_positive_common\s+ours",
          _lab19_clip_shares),
    Claim("lab19/failure_modes", r"entropy higher, but nothing stops a ratio", r"no upper clip\s+entropy",
          _lab19_no_upper),
]

# lab21 tasks: owned by the lab21 notebooks' author.
def _summary_rows(out: str, arms: str) -> dict[str, list[tuple[float, float]]]:
    """arm -> [(start, end) per metric] from a lab21.summary_table printout; ``arms``: a regex of arm names."""
    t = {}
    for line in out.splitlines():
        m = re.match(rf"({arms})\s+(\d.*)$", line)
        if m:
            t[m.group(1)] = [(float(a), float(b)) for a, b in re.findall(rf"({FLOAT})\s*->\s*({FLOAT})", m.group(2))]
    return t


def _p0(out: str) -> dict[str, list[tuple[float, float]]]:
    """arm -> [(start, end) of pass@1, pass@8, KL] from Project 0's summary table (seed means)."""
    t = _summary_rows(out, r"opd-full|sft-teacher|opd-sampled|rl")
    assert set(t) == {"opd-full", "sft-teacher", "opd-sampled", "rl"}, "no Project 0 summary table"
    return t


def _p0_dense_beats_sparse(out: str) -> Optional[str]:
    t = _p0(out)
    # both dense arms end above rl on pass@1 (column 0) and below it on the KL (column 2), seed means
    bad = [a for a in ("opd-full", "sft-teacher") if not (t[a][0][1] > t["rl"][0][1] and t[a][2][1] < t["rl"][2][1])]
    return f"{bad} do not end above rl on pass@1 and below it on KL" if bad else None


def _p0_full_beats_sampled(out: str) -> Optional[str]:
    t = _p0(out)
    return None if t["opd-full"][0][1] > t["opd-sampled"][0][1] else "opd-full does not end above opd-sampled"


def _p0_published(out: str) -> dict[str, tuple[float, float]]:
    """arm -> (seed-mean pass@1 at the end, the published value printed beside it), Project 0's table."""
    got = {}
    for line in out.splitlines():
        m = re.match(rf"(opd-full|sft-teacher|opd-sampled|rl)\s+{FLOAT}\s*->\s*({FLOAT})\s*±\s*{FLOAT}\s+({FLOAT})", line)
        if m:
            got[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    assert len(got) == 4 == len(_p0(out)), "no Project 0 summary table with the published pass@1"
    return got


def _p0_pass1_near_published(out: str) -> Optional[str]:
    # "close to it, within the spread a single published seed can have": reproduce's tolerance for one
    # published seed of a short RL run, 0.07 (docs/reproduction.md)
    far = {a: v for a, v in _p0_published(out).items() if abs(v[0] - v[1]) > 0.07}
    return f"{far} end more than 0.07 from the published pass@1" if far else None


def _p0_full_kl_below(out: str) -> Optional[str]:
    # opd-full's seed-mean KL at the end (the table's third column) below the published 0.70 by more than
    # reproduce's 15%, the other three within it
    t = _p0(out)
    published = {"opd-full": 0.70, "sft-teacher": 0.75, "opd-sampled": 1.01, "rl": 1.07}
    end = {a: t[a][2][1] for a in published}
    if not end["opd-full"] < published["opd-full"] * 0.85:
        return f"opd-full's KL ends at {end['opd-full']:.3f}, not below 0.85 x 0.70"
    off = [a for a in ("sft-teacher", "opd-sampled", "rl") if abs(end[a] - published[a]) > 0.15 * published[a]]
    return f"{off} end more than 15% from the published KL" if off else None


def _p0_full_ahead_every_seed(out: str) -> Optional[str]:
    d = value(out, r"opd-full minus opd-sampled, final pass@1")
    m = re.search(r"seeds where opd-full is ahead: (\d+) of (\d+)", out)
    assert m, "no count of seeds where opd-full is ahead"
    return None if d > 0 and m.group(1) == m.group(2) else f"difference {d}, ahead on {m.group(1)} of {m.group(2)}"


def _p4_short(out: str) -> Optional[str]:
    """The short MaxRL run: both arms' pass@1 ends above its start, and the gap between the arms is
    within twice the evaluation's own standard error (the bracketed ±), 'about the size of' it."""
    rows = {m.group(1): (float(m.group(2)), float(m.group(3)), float(m.group(4))) for m in re.finditer(
        rf"^(mean|maxrl)\s+pass@1 ({FLOAT}) ± {FLOAT} \(\d+ seeds\) -> ({FLOAT}) ± {FLOAT} \(\d+ seeds\) \[± ({FLOAT})\]",
        out, re.M)}
    assert set(rows) == {"mean", "maxrl"}, "no short MaxRL table"
    flat = [a for a, (start, end, _) in rows.items() if not end > start]
    if flat:
        return f"{flat} do not end above their start"
    gap, se = abs(rows["mean"][1] - rows["maxrl"][1]), max(r[2] for r in rows.values())
    return None if gap <= 2 * se else f"the gap {gap:.3f} is more than twice the evaluation's s.e. {se:.3f}"


LAB21_TASKS: list[Claim] = [
    # The short MaxRL run's forward paragraph rests on its table (the cell after it).
    Claim("lab21/tasks", r"both arms improve pass@1 a little", r"mean\s+pass@1 .* -> .*\[±", _p4_short),
    # Project 0 rests on its summary table and the difference lines below it (the cell after project0(...)).
    Claim("lab21/tasks", r"Dense signals beat the sparse one", r"published start: pass@1", _p0_dense_beats_sparse),
    Claim("lab21/tasks", r"The exact KL beats its one-sample estimate", r"published start: pass@1", _p0_full_beats_sampled),
    Claim("lab21/tasks", r"ends 0\.102 ahead on average, ahead on 3 of 3 seeds", r"seeds where opd-full is ahead",
          _p0_full_ahead_every_seed),
    Claim("lab21/tasks", r"and so is every arm's pass@1 at the end", r"published start: pass@1", _p0_pass1_near_published),
    Claim("lab21/tasks", r"which falls further \(0\.572 against 0\.70\)", r"published start: pass@1", _p0_full_kl_below),
    Claim("lab21/tasks", r"seldom reaches a state the teacher never wrote", unchecked="a property of the task (answers "
          "of 2 to 4 tokens), not a result of a run"),
]


def _p2(out: str) -> dict[str, list[tuple[float, float]]]:
    """arm -> [(start, end) of gold pass@1, proxy reward, padded share] from Project 2's summary table."""
    t = _summary_rows(out, r"binary|partial|stylish_w[\d.]+")
    assert "binary" in t and "stylish_w1" in t, "no Project 2 summary table with the w = 1 arm"
    return t


def _p2_w1_hacked(out: str) -> Optional[str]:
    pad = _p2(out)["stylish_w1"][2][1]
    # "the hack already wins": most small sums padded (above 0.9, where the published w = 1 run had 0.08)
    return None if pad > 0.9 else f"stylish w = 1 pads only {pad:.3f} of small sums"


def _p2_partial_no_faster(out: str) -> Optional[str]:
    t = _p2(out)
    # "no faster": partial credit's final gold accuracy not above binary's by more than 0.05 (reproduce's bound)
    gap = t["partial"][0][1] - t["binary"][0][1]
    return None if gap <= 0.05 else f"partial ends {gap:.3f} above binary"


def _p5_crosses(out: str) -> Optional[str]:
    m = re.search(r"the curves cross at k = \[([^\]]*)\]", out)
    assert m, "no crossing k printout"
    ks = [k.strip() for k in m.group(1).split(",")]
    bad = _p5_sharpens(out)
    return bad or (None if "None" not in ks else f"the curves do not cross on every seed: {ks}")


def _p1_collapse(out: str) -> Optional[str]:
    """Project 1's table: every arm's entropy ends below half its start ('collapses'), and no-clip's
    pass@1 ends below both clipped arms' ('lowest')."""
    t = _summary_rows(out, r"symmetric|clip-higher|no-clip")
    assert set(t) == {"symmetric", "clip-higher", "no-clip"}, "no Project 1 summary table"
    flat = [a for a, rows in t.items() if not rows[0][1] < 0.5 * rows[0][0]]
    if flat:
        return f"{flat} keep more than half their entropy"
    low = t["no-clip"][1][1] < min(t["symmetric"][1][1], t["clip-higher"][1][1])
    return None if low else "no-clip's pass@1 does not end lowest"


def _p2_w1_barely(out: str) -> Optional[str]:
    # "gold accuracy barely moves" at w = 1: its gain is under 0.1, less than half binary's
    t = _p2(out)
    gain, binary = t["stylish_w1"][0][1] - t["stylish_w1"][0][0], t["binary"][0][1] - t["binary"][0][0]
    return None if gain < 0.1 and gain < 0.5 * binary else f"w = 1 gains {gain:.3f} (binary {binary:.3f})"


def _p3(out: str) -> dict[str, list[tuple[float, float]]]:
    t = _summary_rows(out, r"target-only|uniform|learnability")
    assert set(t) == {"target-only", "uniform", "learnability"}, "no Project 3 summary table"
    return t


def _p3_ahead(out: str) -> Optional[str]:
    t = _p3(out)  # columns: 1d+1d, 2d+2d_ge100, 3d+1d
    return None if t["learnability"][1][1] > t["uniform"][1][1] else "learnability does not end ahead on sum >= 100"


def _p3_never(out: str) -> Optional[str]:
    # "never solves a 3d+1d problem ... no step changes the model": 0 correct training answers on every seed,
    # and what the buckets show is noise: the mean start-minus-end drift within 0.045 (two standard errors of a
    # three-seed mean of two fresh 300-sample evaluations, reproduce's lab21.p3-target-only-drift)
    m = re.search(r"target-only: correct answers among all its training samples, per seed: \[([\d, ]+)\]", out)
    d = re.search(rf"target-only: start minus end on the 2-digit buckets .* mean ({FLOAT})", out)
    assert m and d, "no target-only lines"
    hits = [int(x) for x in m.group(1).split(",")]
    if any(hits):
        return f"target-only solved {hits} training samples"
    return None if abs(float(d.group(1))) <= 0.045 else f"target-only's buckets moved by {d.group(1)}: more than noise"


def _p5_none_inside(out: str) -> Optional[str]:
    m = re.search(r"the curves cross at k = \[([^\]]*)\]", out)
    ks = [int(k) for k in m.group(1).split(",") if k.strip().isdigit()]
    inside = [k for k in ks if 16 <= k <= 32]
    return f"seeds cross inside 16-32 at {inside}" if inside else None


def _p5_mean_cross(out: str) -> Optional[str]:
    m = re.search(r"the mean curves \(the thick lines of the plot\) cross at k = (\d+)", out)
    assert m, "no mean-curve crossing line"
    return None if 1 <= int(m.group(1)) <= 64 else f"mean curves cross at {m.group(1)}"


def _p5_3d1d_zero(out: str) -> Optional[str]:
    m = re.search(rf"3d\+1d: pass@64 ({FLOAT}) -> ({FLOAT}); largest pass@k of any k and seed: before ({FLOAT}), "
                  rf"after ({FLOAT})", out)
    assert m, "no 3d+1d line"
    return None if max(map(float, m.groups())) == 0.0 else f"3d+1d pass@k reaches {max(map(float, m.groups()))}"


def _p1_pass16_falls(out: str) -> Optional[str]:
    """Every arm's pass@16 ends below its start, and clip-higher's below the symmetric clip's (seed means)."""
    t = _summary_rows(out, r"symmetric|clip-higher|no-clip")
    risen = [a for a, cols in t.items() if not cols[2][1] < cols[2][0]]
    if risen:
        return f"pass@16 does not fall in {risen}"
    return None if t["clip-higher"][2][1] < t["symmetric"][2][1] else "clip-higher's pass@16 does not end below symmetric's"


def _p4_pass1_order_reversed(out: str) -> Optional[str]:
    """Ours: maxrl > std > mean at final pass@1; published: mean above both std and maxrl."""
    ours, published = {}, {}
    for arm in ("mean", "std", "maxrl"):
        m = re.search(rf"^{arm}\s+({FLOAT}) -> ({FLOAT}) ± {FLOAT}\s+({FLOAT})", out, re.M)
        assert m, f"no {arm} row with a published pass@1"
        ours[arm], published[arm] = float(m.group(2)), float(m.group(3))
    if not ours["maxrl"] > ours["std"] > ours["mean"]:
        return f"our pass@1 order is not maxrl > std > mean: {ours}"
    return None if published["mean"] > max(published["std"], published["maxrl"]) else f"published: {published}"


LAB21_PROJECTS: list[Claim] = [
    # Project 1 rests on its summary table (the cell after project1(...)).
    Claim("lab21/projects", r"Entropy collapses in every arm", r"no-clip\s+\d", _p1_collapse),
    Claim("lab21/projects", r"gold accuracy barely moves", r"stylish_w1\s+\d", _p2_w1_barely),
    # Project 3 rests on its summary table and the target-only lines under it.
    Claim("lab21/projects", r"ends ahead of uniform on sum >= 100", r"learnability\s+\d", _p3_ahead),
    Claim("lab21/projects", r"Target-only cannot behave as the published arm did", r"target-only: start minus end",
          _p3_never),
    Claim("lab21/projects", r"every advantage is 0 and no step changes the model", r"target-only: start minus end",
          _p3_never),
    Claim("lab21/projects", r"which a student with a few 3d\+1d successes gets and ours never does",
          r"target-only: start minus end", _p3_never),
    Claim("lab21/projects", r"no group ever holds a success", r"target-only: start minus end", _p3_never),
    # Project 5 rests on its pass@k printout.
    Claim("lab21/projects", r"The curves cross on every seed, but where varies widely", r"the curves cross at k",
          lambda out: _p5_crosses(out) or _p5_none_inside(out)),
    Claim("lab21/projects", r"the thick mean curves of the plot cross at k", r"the mean curves \(the thick lines", _p5_mean_cross),
    Claim("lab21/projects", r"the crossing of the averaged curves is not the average of the crossings",
          unchecked="a property of averages (a mean of curves and a mean of their crossing points differ), not a result"),
    Claim("lab21/projects", r"On 3d\+1d both models stay at 0 at every k", r"3d\+1d: pass@64", _p5_3d1d_zero),
    # Project 2 rests on its summary table (the cell after project2(...)).
    Claim("lab21/projects", r"in our runs the hack already wins there", r"stylish_w1\s+\d", _p2_w1_hacked),
    Claim("lab21/projects", r"Partial credit ends at 0\.540 against binary's 0\.532: no faster", r"stylish_w1\s+\d",
          _p2_partial_no_faster),
    # Project 5 rests on its pass@k printout (the cell after project5(...)).
    Claim("lab21/projects", r"the curves cross at k = 10, 38 and 15", r"the curves cross at k", _p5_crosses),
    Claim("lab21/projects", r"the base model catches up on every seed", r"the curves cross at k", _p5_crosses),
    # Project 1's pass@16 rests on its summary table (column 2).
    Claim("lab21/projects", r"pass@16\s+falls in every arm", r"no-clip\s+\d", _p1_pass16_falls),
    # Project 4's pass@1 order, ours against the published column of its summary table.
    Claim("lab21/projects", r"the published pass@1 order reversed|the order is the published one reversed",
          r"maxrl\s+\d", _p4_pass1_order_reversed),
]

# ----------------------------------------------------------------------------- lab21's hypotheses

def _summary_spreads(out: str, arms: str) -> tuple[dict[str, list[tuple[float, float, float]]], int]:
    """arm -> [(start, end mean, end sd) per metric] from a lab21.summary_table printout, and the seeds per
    arm from the setup line above it ('(5 per arm)')."""
    t = {}
    for line in out.splitlines():
        m = re.match(rf"({arms})\s+(\d.*)$", line)
        if m:
            t[m.group(1)] = [(float(a), float(b), float(c)) for a, b, c in
                             re.findall(rf"({FLOAT})\s*->\s*({FLOAT}) ± ({FLOAT})", m.group(2))]
    n = re.search(r"\((\d+) per arm\)", out)
    assert t and n, f"no summary table of {arms} with its setup line"
    return t, int(n.group(1))


def _above(out: str, arms: str, a: str, b: str, column: int) -> tuple[str, str]:
    """Whether arm a ends above arm b in the table's column, against the seeds' noise."""
    t, n = _summary_spreads(out, arms)
    (_, ma, sa), (_, mb, sb) = t[a][column], t[b][column]
    se = se_of_difference(sa, sb, n)
    return compare(ma - mb, se), f"{a} {ma:.3f} ± {sa:.3f} against {b} {mb:.3f} ± {sb:.3f} (difference {ma - mb:+.3f}, 2 s.e. {2 * se:.3f})"


def _paired(out: str, label: str) -> tuple[str, str]:
    m, sd, n = spread(out, re.escape(label))
    se = sd / n ** 0.5
    return compare(m, se), f"{label} {m:.3f} ± {sd:.3f} over {n} seeds (2 s.e. {2 * se:.3f})"


_P1 = r"symmetric|clip-higher|no-clip"
_P4 = r"mean|std|maxrl"


def _p4_pass1_not_higher(out: str) -> tuple[str, str]:
    # "at equal or slightly lower pass@1": refuted when MaxRL ends above a baseline beyond the noise
    verdicts = {b: _above(out, _P4, "maxrl", b, 0) for b in ("mean", "std")}
    shown = "; ".join(v[1] for v in verdicts.values())
    if any(v[0] == "supported" for v in verdicts.values()):
        return "refuted", shown  # MaxRL's pass@1 is clearly higher than a baseline's
    return "supported", shown


def _p3_spends_little(out: str) -> tuple[str, str]:
    # "spends little on unsolvable problems": learnability's share of 3d+1d under half of uniform's
    share = {a: float(re.search(rf"^{a}\s+share of samples:.*3d\+1d ({FLOAT})", out, re.M).group(1))
             for a in ("uniform", "learnability")}
    return ("supported" if share["learnability"] < 0.5 * share["uniform"] else "refuted"), f"3d+1d shares {share}"


def _p3_gain(out: str) -> tuple[str, str]:
    got = {a: spread(out, rf"(?m)^{a}\s+mean gain on the 2-digit buckets") for a in ("uniform", "learnability")}
    (mu, su, n), (ml, sl, _) = got["uniform"], got["learnability"]
    se = se_of_difference(sl, su, n)
    return compare(ml - mu, se), f"mean 2-digit gain: learnability {ml:.3f} ± {sl:.3f}, uniform {mu:.3f} ± {su:.3f}"


def _p3_target_nothing(out: str) -> tuple[str, str]:
    return ("supported" if _p3_never(out) is None else "refuted"), "target-only's training successes and drift"


def _p5_pass1_rises(out: str) -> tuple[str, str]:
    a, b = arrow(out, "in distribution: pass@1")
    return ("supported" if b > a + 0.1 else "refuted"), f"pass@1 {a} -> {b}"


def _p5_pass64_not_raised(out: str) -> tuple[str, str]:
    a, b = arrow(out, "pass@64")
    return ("supported" if b <= a else "refuted"), f"pass@64 {a} -> {b}"


def _p5_catches_up(out: str) -> tuple[str, str]:
    return ("supported" if _p5_crosses(out) is None else "refuted"), "the before and after curves cross on every seed"


def _p2_style_exploited(out: str) -> tuple[str, str]:
    t = _p2(out)  # w = 1: a style item worth as much as the answer; column 2: padded share of small sums
    pad = t["stylish_w1"][2][1]
    return ("supported" if pad > 0.5 else "refuted"), f"w = 1 pads {pad:.3f} of small sums"


HYPOTHESES: list[Hypothesis] = [
    # Project 1 rests on its summary table (entropy, pass@1, pass@16) and the paired difference under it.
    Hypothesis("lab21/projects", r"keeps per-token entropy higher", r"clip-higher minus symmetric, final entropy",
               lambda out: _paired(out, "clip-higher minus symmetric, final entropy:"),
               answer=r"\bon entropy, the hypothesis"),
    Hypothesis("lab21/projects", r"and improves pass@16", r"no-clip\s+\d",
               lambda out: _above(out, _P1, "clip-higher", "symmetric", 2), answer=r"\bon pass@16, the hypothesis"),
    # Project 2: the style half rests on the summary table; the pitfall arm is an extension.
    Hypothesis("lab21/projects", r"A style item worth about as much as correctness gets exploited", r"stylish_w1\s+\d",
               _p2_style_exploited, answer=r"\bon the style item, the hypothesis"),
    Hypothesis("lab21/projects", r"a pitfall item aimed at the exploit removes it",
               unchecked="the pitfall arm is the write-up's extension: the starter's runs do not include it"),
    # Project 3 rests on its summary table and the share and gain lines under it.
    Hypothesis("lab21/projects", r"spends little on unsolvable problems", r"learnability\s+share of samples",
               _p3_spends_little, answer=r"\bon spending, the hypothesis"),
    Hypothesis("lab21/projects", r"improves the\s+buckets at the frontier faster", r"learnability\s+mean gain",
               _p3_gain, answer=r"\bon the frontier buckets, the hypothesis"),
    Hypothesis("lab21/projects", r"target-only training learns nothing", r"target-only: start minus end",
               _p3_target_nothing, answer=r"\bon target-only, the hypothesis"),
    # Project 4 rests on its summary table and the paired pass@16 difference under it.
    Hypothesis("lab21/projects", r"improves pass@16 more than the mean", r"maxrl minus mean, final pass@16",
               lambda out: _paired(out, "maxrl minus mean, final pass@16:"), answer=r"\bagainst the mean baseline, the hypothesis"),
    Hypothesis("lab21/projects", r"improves pass@16 more than the mean and std", r"maxrl\s+\d",
               lambda out: _above(out, _P4, "maxrl", "std", 1), answer=r"\bagainst the std baseline, the hypothesis"),
    Hypothesis("lab21/projects", r"at\s+equal or slightly lower pass@1", r"maxrl\s+\d", _p4_pass1_not_higher,
               answer=r"\bon pass@1, the hypothesis"),
    # Project 5 rests on its pass@k printout.
    Hypothesis("lab21/projects", r"RL raises pass@1", r"the curves cross at k", _p5_pass1_rises,
               answer=r"\bon pass@1, the hypothesis"),
    Hypothesis("lab21/projects", r"but not pass@64", r"the curves cross at k", _p5_pass64_not_raised,
               answer=r"\bon pass@64, the hypothesis"),
    Hypothesis("lab21/projects", r"the base model catches up at large k", r"the curves cross at k", _p5_catches_up,
               answer=r"\bon the crossing, the hypothesis"),
]

CLAIMS: list[Claim] = HW4 + LAB11 + LAB19 + LAB21_TASKS + LAB21_PROJECTS
