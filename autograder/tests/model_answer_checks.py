"""How the directional claims of the model answers are checked: the `Claim` record and the functions that
read the printed outputs. The claims themselves, one list per notebook, are in model_answer_claims.py.

test_model_answers.py checks every number a model answer cites against the outputs above it; a word
like "rises", "crosses" or "stays unsolved" needs more than one number, so each sentence that uses one
is covered by a `Claim`:

- `notebook`: "assignment/name";
- `says`: a regular expression found in the sentence (case-insensitive, whitespace collapsed, math
  and code spans blanked);
- `reads`: a regular expression that picks the output the claim rests on: the nearest code cell
  above the text whose printed output matches it (the entry's comment says which cell that is);
- `check(output) -> None | str`: None when the output shows the claim, else what it shows instead;
- or `unchecked`: why no output can show it (a hypothetical bug, a fact of the maths, a property
  of the code); such an entry covers the sentence without a check.

Thresholds are stated beside each check with the reason. An entry whose sentence is gone fails the
test, so the table follows the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

FLOAT = r"[-+]?\d+(?:\.\d+)?"


@dataclass(frozen=True, eq=False)
class Claim:
    notebook: str
    says: str
    reads: str = ""
    check: Optional[Callable[[str], Optional[str]]] = field(default=None, compare=False)
    unchecked: str = ""

    def __post_init__(self):
        assert bool(self.unchecked) != bool(self.check and self.reads), (
            f"claim {self.says!r}: give either reads and check, or an unchecked reason")


# A write-up's **Hypothesis.** is a prediction; the runs support it, refute it or cannot tell. Each part of
# a hypothesis is a `Hypothesis` entry: `judge(output) -> (verdict, what the output shows)` reads the
# printed output (picked by `reads`, as for a Claim), and the write-up must give that verdict in the
# sentence matching `answer` (outside the Hypothesis and Confounders paragraphs), in words of that
# verdict only (VERDICT_WORDS), naming the hypothesis. `unchecked`: why no run of the notebook can judge it.
VERDICT_WORDS = {
    "supported": r"\b(?:supports?|supported|bears? out|borne out|as the hypothesis predicts|as predicted)\b",
    "refuted": r"\b(?:against the hypothesis|contrary to the hypothesis|refutes?|refuted|the opposite of)\b",
    "inconclusive": r"\b(?:inconclusive|no clear|not a clear|inside (?:the |its )?(?:seed )?(?:noise|spread)|"
                    r"cannot tell|does not settle|undecided)\b",
}


@dataclass(frozen=True, eq=False)
class Hypothesis:
    notebook: str
    says: str
    reads: str = ""
    judge: Optional[Callable[[str], tuple[str, str]]] = field(default=None, compare=False)
    answer: str = ""
    unchecked: str = ""

    def __post_init__(self):
        assert bool(self.unchecked) != bool(self.judge and self.reads and self.answer), (
            f"hypothesis {self.says!r}: give reads, judge and answer, or an unchecked reason")


def compare(diff: float, se: float) -> str:
    """The verdict on "a is above b" from their difference and its standard error: 'supported' beyond two
    standard errors above 0, 'refuted' beyond two below, else 'inconclusive' (a gap the seeds cannot
    separate from 0 tells neither way)."""
    if diff > 2 * se:
        return "supported"
    if diff < -2 * se:
        return "refuted"
    return "inconclusive"


def se_of_difference(sd_a: float, sd_b: float, n: int) -> float:
    """Standard error of the difference of two means over n seeds each, taken as independent (the arms
    share their seeds, so this is conservative: a paired difference, where printed, is used instead)."""
    return ((sd_a ** 2 + sd_b ** 2) / n) ** 0.5


def spread(out: str, pattern: str) -> tuple[float, float, int]:
    """The 'm ± s (n seeds)' printed after `pattern` (a regular expression; the first match): mean,
    standard deviation, seeds."""
    m = re.search(pattern + rf"[^\n]*?({FLOAT}) ± ({FLOAT}) \((\d+) seeds\)", out)
    assert m, f"no {pattern!r} ... m ± s (n seeds) in the output"
    return float(m.group(1)), float(m.group(2)), int(m.group(3))


def arrow(out: str, label: str) -> tuple[float, float]:
    """The 'start -> end' pair printed after `label` (the first one in the output)."""
    m = re.search(re.escape(label) + rf"[^\n]*?({FLOAT})\s*->\s*({FLOAT})", out)
    assert m, f"no '{label} ... a -> b' in the output"
    return float(m.group(1)), float(m.group(2))


def value(out: str, pattern: str) -> float:
    """The first number after `pattern` (a regular expression) in the output."""
    m = re.search(pattern + rf"\s*[:=]?\s*({FLOAT})", out)
    assert m, f"no {pattern!r} followed by a number in the output"
    return float(m.group(1))


def rows(out: str, pattern: str) -> list[re.Match]:
    return list(re.finditer(pattern, out))


# ----------------------------------------------------------------------------- hw4

def _ablation(out: str) -> dict[str, dict[str, float | bool]]:
    """'knob=value' -> its row (means over seeds) from the ablation's printout."""
    table = {}
    for m in re.finditer(rf"^\s*(\w+) =\s*(\S+): eval exact match ({FLOAT})[^\n]*?final reward ({FLOAT})[^\n]*?"
                         rf"mean clip fraction ({FLOAT}), max KL ({FLOAT})(  <- degraded)?$", out, re.M):
        table[f"{m.group(1)}={m.group(2)}"] = {"em": float(m.group(3)), "reward": float(m.group(4)),
                                                "clip": float(m.group(5)), "kl": float(m.group(6)),
                                                "degraded": bool(m.group(7))}
    assert table, "no ablation rows ('knob = value: eval exact match ..., final reward ..., max KL ...') in the output"
    return table


DEFAULT_RUN = "ppo_epochs=2"  # the default configuration, printed on every axis


def _only_degraded(out: str, which: set[str]) -> Optional[str]:
    got = {k for k, row in _ablation(out).items() if row["degraded"]}
    return None if got == which else f"degraded: {sorted(got) or 'none'}"


def _strong_kl_pins(out: str) -> Optional[str]:
    t = _ablation(out)
    strong, default = t["kl_coef=8"], t[DEFAULT_RUN]
    # "held at the base model": a KL under a tenth of the default run's; reward below it; exact match
    # within 0.02 (one prompt of 64) of it: the number is copied, the format is not
    if not strong["kl"] < default["kl"] / 10:
        return f"kl_coef=8 reaches KL {strong['kl']:.3f} against the default's {default['kl']:.3f}"
    if not strong["reward"] < default["reward"]:
        return f"kl_coef=8's final reward {strong['reward']:.2f} is not below the default's {default['reward']:.2f}"
    return None if strong["em"] >= default["em"] - 0.02 else f"kl_coef=8's exact match is {strong['em']:.3f}"


def _no_kl_like_default(out: str) -> Optional[str]:
    t = _ablation(out)
    none, default = t["kl_coef=0"], t[DEFAULT_RUN]
    # "like the default": not degraded and its final reward within 0.05 (about one seed's spread)
    if none["degraded"] or abs(none["reward"] - default["reward"]) > 0.05:
        return f"kl_coef=0: final reward {none['reward']:.2f} against {default['reward']:.2f}"
    return None


def _more_steps_faster(out: str) -> Optional[str]:
    t = _ablation(out)
    bad = [k for k in ("ppo_epochs=8", "minibatch=3x1") if t[k]["degraded"] or not t[k]["reward"] > t[DEFAULT_RUN]["reward"]]
    return f"not degraded and faster than the default: false for {bad}" if bad else None


def _more_steps_leave_region(out: str) -> Optional[str]:
    t = _ablation(out)
    d = t[DEFAULT_RUN]
    ranked = sorted(t, key=lambda k: t[k]["kl"], reverse=True)[:2]
    if set(ranked) != {"ppo_epochs=8", "minibatch=3x1"}:
        return f"the two largest KLs are {ranked}"
    for k in ("ppo_epochs=8", "minibatch=3x1"):
        # "the first clipping": above the default's clip fraction; "a hair below": within 0.02 (one prompt of 64)
        if not t[k]["clip"] > d["clip"] or not d["em"] - 0.02 <= t[k]["em"] <= d["em"]:
            return f"{k}: clip fraction {t[k]['clip']:.3f}, exact match {t[k]['em']:.3f}"
    return None


def _tiny_clip_slower(out: str) -> Optional[str]:
    t = _ablation(out)
    tiny = t["clip_eps=0.02"]
    if tiny["clip"] < max(row["clip"] for row in t.values()):
        return f"clip_eps=0.02's clip fraction {tiny['clip']:.3f} is not the largest"
    ok = tiny["reward"] < t[DEFAULT_RUN]["reward"] and not tiny["degraded"]
    return None if ok else f"clip_eps=0.02: final reward {tiny['reward']:.2f}, degraded {tiny['degraded']}"


SEEDS_OF = rf"({FLOAT}) ± ({FLOAT}) \[([^\]]*)\]"  # 'mean ± sd [each seed]' as plots.seeds_text prints it


def _seeds(m: re.Match, at: int) -> dict:
    """The mean, the standard deviation and every seed's value of the SEEDS_OF group starting at ``at``."""
    return {"mean": float(m.group(at)), "sd": float(m.group(at + 1)),
            "seeds": [float(x) for x in m.group(at + 2).split(",")]}


def _math(out: str) -> dict[str, dict]:
    """Per algorithm, from the math runs' printout: start, end (over seeds), the eval at the early step,
    the area under the eval curve, max KL (over seeds), mean clip fraction, seconds per step."""
    rows = {}
    for m in re.finditer(rf"math_toy (\w+)\s*: eval exact match ({FLOAT}) -> {SEEDS_OF} \({SEEDS_OF} at step (\d+)\); "
                         rf"area under the eval curve {SEEDS_OF}\s+max KL {SEEDS_OF}, mean clip fraction ({FLOAT}), "
                         rf"({FLOAT}) s per step", out):
        rows[m.group(1)] = {"start": float(m.group(2)), "end": _seeds(m, 3), "early": _seeds(m, 6),
                            "area": _seeds(m, 10), "kl": _seeds(m, 13), "clip": float(m.group(16)),
                            "seconds": float(m.group(17))}
    assert set(rows) == {"grpo", "reinforce"}, "no math_toy rows for both algorithms in the output"
    m = re.search(rf"GRPO minus GR-REINFORCE: area under the eval curve {SEEDS_OF}, final eval exact match {SEEDS_OF}", out)
    assert m, "no 'GRPO minus GR-REINFORCE: area ..., final eval exact match ...' line in the output"
    rows["difference"] = {"area": _seeds(m, 1), "end": _seeds(m, 4)}
    return rows


def _math_grpo_faster(out: str) -> Optional[str]:
    d = _math(out)["difference"]["area"]
    # "faster in every seed": GRPO's area under the eval curve above GR-REINFORCE's in each seed (the
    # measure of sample efficiency argued in the notebook, not picked by result)
    return None if min(d["seeds"]) > 0 else f"GRPO minus GR-REINFORCE, area under the eval curve: {d['seeds']}"


def _math_grpo_faster_early(out: str) -> Optional[str]:
    t = _math(out)
    return None if t["grpo"]["early"]["mean"] > t["reinforce"]["early"]["mean"] else (
        f"early eval: GRPO {t['grpo']['early']['mean']:.3f}, GR-REINFORCE {t['reinforce']['early']['mean']:.3f}")


def _math_both_solved(out: str) -> Optional[str]:
    t = _math(out)
    # "nearly solved": at least 0.95 of the held-out problems in the mean over seeds, from a base far below
    low = [f"{a} {t[a]['end']['mean']:.3f}" for a in ("grpo", "reinforce")
           if t[a]["end"]["mean"] < 0.95 or t[a]["start"] > 0.5]
    return f"not nearly solved: {low}" if low else None


def _math_final_tie(out: str) -> Optional[str]:
    gap = _math(out)["difference"]["end"]
    # "no evidence": the mean gap at most 0.03 (4 of 128 problems) and within two of its standard
    # deviations over the seeds, i.e. inside the noise of a 128-problem eval
    ok = abs(gap["mean"]) <= 0.03 and abs(gap["mean"]) <= 2 * gap["sd"]
    return None if ok else f"the final evals differ by {gap['mean']:.3f} ± {gap['sd']:.3f}"


def _math_grpo_costs(out: str) -> Optional[str]:
    t = _math(out)
    g, r = t["grpo"]["kl"], t["reinforce"]["kl"]
    # the seconds per step are wall time on a shared machine: printed for the reader, not claimed
    return None if g["mean"] > r["mean"] else f"max KL: GRPO {g['mean']:.3f}, GR-REINFORCE {r['mean']:.3f}"


def _math_no_clipping(out: str) -> Optional[str]:
    t = _math(out)
    # "negligible": a mean clip fraction that prints as 0.000 (below 0.0005 of the tokens)
    clipped = [a for a in ("grpo", "reinforce") if t[a]["clip"] > 0]
    return f"clipped: {clipped}" if clipped else None


def _solved(out: str) -> Optional[str]:
    reward = value(out, r"format_copy grpo\s*:.*?final rollout reward")
    # 1.3 is the most a completion earns (the tag, the clean bonus and the number); 1.25 allows one
    # group in the final batch with one sloppy completion.
    return None if reward >= 1.25 else f"the final rollout reward is {reward:.3f} of at most 1.3"


# ----------------------------------------------------------------------------- lab11

def _sweep(out: str) -> list[tuple[float, float, float, float, float]]:
    """(T, accuracy, its spread over seeds, distinct answers, its spread) per printed temperature."""
    got = [tuple(float(x) for x in m.groups()) for m in re.finditer(
        rf"T = ({FLOAT}): accuracy ({FLOAT}) ± ({FLOAT}), distinct answers among 8: ({FLOAT}) ± ({FLOAT})", out)]
    assert len(got) >= 3, "fewer than three temperatures in the sweep's printout"
    return got


def _sweep_trend(out: str) -> Optional[str]:
    rows = _sweep(out)
    acc, distinct = [r[1] for r in rows], [r[3] for r in rows]
    # "falls at every step", "grows": strictly, between every two neighbouring temperatures printed
    if any(b >= a for a, b in zip(acc, acc[1:])):
        return f"accuracy over T: {acc}"
    return None if all(b > a for a, b in zip(distinct, distinct[1:])) else f"distinct answers over T: {distinct}"


def _sweep_seeds_close(out: str) -> Optional[str]:
    rows = _sweep(out)
    # "a few hundredths at most": no standard deviation over seeds above 0.05; greedy (T = 0): exactly 0
    worst = max(r[2] for r in rows)
    greedy = [r[2] for r in rows if r[0] == 0.0]
    if worst > 0.05:
        return f"the accuracy's spread over seeds reaches {worst:.3f}"
    return None if greedy == [0.0] else f"greedy decoding's spread over seeds is {greedy}"


def _kl_rows(out: str) -> dict[float, dict[str, float]]:
    rows = {}
    for m in re.finditer(rf"T = ({FLOAT}): exact KL ({FLOAT}) nats per response \| median batch / exact: "
                         rf"k1 ({FLOAT}), k3 ({FLOAT}) \| bars covering the truth: k1 (\d+)%, k3 (\d+)%"
                         rf"(?: \| all batches pooled / exact: k1 ({FLOAT}), k3 ({FLOAT}))?", out):
        g = m.groups()
        rows[float(g[0])] = {"k1": float(g[2]), "k3": float(g[3]), "k1_covers": float(g[4]) / 100,
                             "k3_covers": float(g[5]) / 100, "k1_pooled": float(g[6] or "nan"),
                             "k3_pooled": float(g[7] or "nan")}
    assert rows, "no KL rows in the output"
    return rows


def _kl_hot_agree(out: str) -> Optional[str]:
    rows = _kl_rows(out)
    # "within a tenth" of the truth, as the sentence says, at the hottest T
    r = rows[max(rows)]
    off = [f"{k} {r[k]:.2f}" for k in ("k1", "k3") if abs(r[k] - 1) > 0.1]
    return f"more than a tenth away at T = {max(rows):g}: {', '.join(off)}" if off else None


def _kl_mid_noisy(out: str) -> Optional[str]:
    # at T = 1.5: "noisier", yet "most of their error bars still cover it" (both covers above half)
    r = _kl_rows(out)[1.5]
    if max(abs(r["k1"] - 1), abs(r["k3"] - 1)) <= 0.1:
        return "at T = 1.5 both are within a tenth: not noisier"
    return None if min(r["k1_covers"], r["k3_covers"]) > 0.5 else f"bars cover {r['k1_covers']}, {r['k3_covers']}"


def _kl_sharp_low(out: str) -> Optional[str]:
    r = _kl_rows(out)[min(_kl_rows(out))]
    # k1 "still is" within a tenth; k3 "well under half" (below 0.5); bars "miss in most batches" (cover < 50%)
    if abs(r["k1"] - 1) > 0.1:
        return f"k1's median batch / exact is {r['k1']:.2f}"
    if r["k3"] >= 0.5:
        return f"k3's median batch / exact is {r['k3']:.2f}"
    return None if r["k3_covers"] < 0.5 else f"k3's bars cover the truth in {r['k3_covers']:.0%} of the batches"


def _kl_sharp_pooled_low(out: str) -> Optional[str]:
    r = _kl_rows(out)[min(_kl_rows(out))]
    # "does not rescue it": still more than a tenth below the truth
    return None if r["k3_pooled"] < 0.9 else f"k3 pooled over all batches / exact is {r['k3_pooled']:.2f}"


def _frontier_below(out: str) -> Optional[str]:
    verdicts = re.findall(r"(\w+): temperature stays below the frontier at every KL: (True|False)", out)
    assert verdicts, "no frontier verdicts in the output"
    bad = [name for name, v in verdicts if v != "True"]
    return f"temperature reaches the frontier in {bad}" if bad else None


def _worked_cooling(out: str) -> Optional[str]:
    m = re.search(rf"worked: cooling pi_ref from T = 1 to T = ({FLOAT}) takes its reward from ({FLOAT}) to ({FLOAT})", out)
    assert m, "no 'worked: cooling pi_ref ...' line"
    t1, cold = float(m.group(2)), float(m.group(3))
    # "falls, to nearly 0": below its value at T = 1 and at most 0.05 (the rewards here are 0 to 2)
    return None if cold < t1 and cold <= 0.05 else f"the reward goes {t1:.2f} -> {cold:.2f}"


def _hack_rise_fall(out: str) -> Optional[str]:
    m = re.search(rf"at the peak: proxy reward ({FLOAT}), true reward ({FLOAT}); at the smallest beta \({FLOAT}, "
                  rf"KL ({FLOAT}) nats\): proxy reward ({FLOAT}), true reward ({FLOAT})", out)
    assert m, "no 'hack: pi* at the peak ...' line"
    proxy_peak, true_peak, _, proxy_last, true_last = (float(x) for x in m.groups())
    if not proxy_last > proxy_peak:
        return f"the proxy reward goes {proxy_peak:.2f} -> {proxy_last:.2f} past the peak"
    # "falls, to 0": to at most 0.005, what prints as 0.00
    return None if true_last < true_peak and true_last <= 0.005 else f"the true reward ends at {true_last:.2f}"


# ----------------------------------------------------------------------------- lab21 projects

def _p3(out: str) -> dict[str, dict[str, float]]:
    """arm -> {'1d+1d': end accuracy, ..., 'share 3d+1d': share of samples} from Project 3's printout."""
    head = next(line for line in out.splitlines() if line.startswith("arm"))
    buckets = re.findall(r"sampled_accuracy_(\S+) start->end", head)
    table = {}
    for line in out.splitlines():
        m = re.match(r"(target-only|uniform|learnability)\s+(\d.*)$", line)
        if m:
            ends = [float(b) for _, b in re.findall(rf"({FLOAT})\s*->\s*({FLOAT})", m.group(2))]
            table[m.group(1)] = dict(zip(buckets, ends))
        m = re.match(r"(target-only|uniform|learnability)\s+share of samples: (.*?)(?:\(|$)", line)
        if m:
            for b, v in re.findall(r"([\w+]+) (\d+\.\d+)", m.group(2)):
                table.setdefault(m.group(1), {})[f"share {b}"] = float(v)
    assert table, "no Project 3 rows in the output"
    return table


def _p3_little_on_3d1d(out: str) -> Optional[str]:
    share = _p3(out)["learnability"]["share 3d+1d"]
    # "almost nothing": under a quarter of uniform's one in five buckets
    return None if share <= 0.05 else f"the learnability arm spends {share:.2f} of its samples on 3d+1d"


def _p3_matches_uniform(out: str) -> Optional[str]:
    t = _p3(out)
    two_digit = [b for b in t["uniform"] if b.startswith("2d") and not b.startswith("share")]
    behind = [f"{b}: {t['learnability'][b]:.3f} < {t['uniform'][b]:.3f}" for b in two_digit
              if t["learnability"][b] < t["uniform"][b]]
    return f"learnability is behind uniform on {', '.join(behind)}" if behind else None


def _p3_1d1d_unsolved(out: str) -> Optional[str]:
    t = _p3(out)
    # "unsolved": no arm ends above 0.05 (one success in 20 problems) on 1d+1d
    solved = [f"{arm} {row['1d+1d']:.3f}" for arm, row in t.items() if row.get("1d+1d", 0) > 0.05]
    return f"1d+1d ends at {', '.join(solved)}" if solved else None


def _p3_rare_group_improves(out: str) -> Optional[str]:
    line = next(line for line in out.splitlines() if re.search(r"rare_group=4.*1d\+1d", line))
    a, b = arrow(line, "1d+1d")
    # "improves": by more than 0.05, one problem in 20 of the bucket's evaluation
    return None if b - a > 0.05 else f"with rare_group=4, 1d+1d goes {a:.3f} -> {b:.3f}"


def _p5(out: str) -> dict[str, tuple[float, float]]:
    m = re.search(rf"in distribution: pass@1 ({FLOAT}) -> ({FLOAT}).*?pass@64 ({FLOAT}) -> ({FLOAT})", out)
    hard = re.search(rf"3d\+1d: pass@64 ({FLOAT}) -> ({FLOAT})", out)
    assert m and hard, "no Project 5 pass@k printout"
    return {"pass@1": (float(m.group(1)), float(m.group(2))), "pass@64": (float(m.group(3)), float(m.group(4))),
            "3d+1d pass@64": (float(hard.group(1)), float(hard.group(2)))}


def _p5_sharpens(out: str) -> Optional[str]:
    t = _p5(out)
    (p1a, p1b), (p64a, p64b) = t["pass@1"], t["pass@64"]
    # "rises a lot": by at least 0.1; "barely moves or falls": pass@64 gains at most 0.01 (one problem of 100)
    if p1b - p1a < 0.1:
        return f"pass@1 {p1a:.3f} -> {p1b:.3f}"
    return None if p64b - p64a <= 0.01 else f"pass@64 rises {p64a:.3f} -> {p64b:.3f}"


def _p5_3d1d_near_zero(out: str) -> Optional[str]:
    a, b = _p5(out)["3d+1d pass@64"]
    # pass@64 bounds pass@k at every smaller k; "near zero": at most 0.05
    return None if max(a, b) <= 0.05 else f"3d+1d pass@64 {a:.3f} -> {b:.3f}"
