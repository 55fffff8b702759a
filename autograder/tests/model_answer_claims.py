"""The directional claims of the model answers and results paragraphs, with the printed output each rests on.

test_model_answers.py checks every number a model answer cites against the outputs above it; a word
like "rises", "crosses" or "stays unsolved" needs more than one number, so each sentence that uses one
is covered here by a `Claim`:

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



# ----------------------------------------------------------------------------- the claims, one list per notebook

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
]

CLAIMS: list[Claim] = HW4 + LAB11 + LAB19 + LAB21_TASKS + LAB21_PROJECTS
