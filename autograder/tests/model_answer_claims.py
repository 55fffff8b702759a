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

def _ablation(out: str) -> dict[str, tuple[float, bool]]:
    """'knob = value' -> (final eval exact match, marked degraded) from the ablation's printout."""
    table = {}
    for m in re.finditer(rf"^\s*(\w+) =\s*(\S+): eval exact match ({FLOAT})[^\n]*?(<- degraded)?$", out, re.M):
        table[f"{m.group(1)}={m.group(2)}"] = (float(m.group(3)), bool(m.group(4)))
    assert table, "no ablation rows ('knob = value: eval exact match ...') in the output"
    return table


def _degraded(out: str, *keys: str) -> Optional[str]:
    """None if every row named (by its knob=value prefix) is marked degraded by the notebook's own rule."""
    table = _ablation(out)
    picked = {k: v for k, v in table.items() if k in keys}
    assert picked, f"no ablation rows {keys}"
    fine = [f"{k} (exact match {em:.3f})" for k, (em, deg) in picked.items() if not deg]
    return f"not degraded: {', '.join(fine)}" if fine else None


def _not_degraded(out: str, *keys: str) -> Optional[str]:
    table = _ablation(out)
    picked = {k: v for k, v in table.items() if k in keys}
    assert picked, f"no ablation rows {keys}"
    bad = [k for k, (_, deg) in picked.items() if deg]
    return f"degraded: {', '.join(bad)}" if bad else None


def _math_grpo_ahead(out: str) -> Optional[str]:
    g, r = arrow(out, "math_toy grpo"), arrow(out, "math_toy reinforce")
    # "ends higher": strictly above the other's final eval exact match as printed
    return None if g[1] > r[1] else f"GRPO ends at {g[1]:.3f}, GR-REINFORCE at {r[1]:.3f}"


def _math_both_above_base(out: str) -> Optional[str]:
    g, r = arrow(out, "math_toy grpo"), arrow(out, "math_toy reinforce")
    return None if min(g[1], r[1]) > g[0] else f"from {g[0]:.3f}: GRPO {g[1]:.3f}, GR-REINFORCE {r[1]:.3f}"


def _solved(out: str) -> Optional[str]:
    reward = value(out, r"format_copy grpo\s*:.*?final rollout reward")
    # 1.3 is the most a completion earns (the tag, the clean bonus and the number); 1.25 allows one
    # group in the final batch with one sloppy completion.
    return None if reward >= 1.25 else f"the final rollout reward is {reward:.3f} of at most 1.3"


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
    # hw4 Question 2: a hypothetical bug, not a result of a run.
    Claim("hw4/llm_rl", r"drops the first completion token",
          unchecked="the example bug is hypothetical: the notebook's runs use a correct mask"),
    # hw4 Question 3 rests on the math runs' printout (cell 'math_toy grpo: eval exact match a -> b').
    Claim("hw4/llm_rl", r"ends higher than GR-REINFORCE", r"math_toy grpo\s*:", _math_grpo_ahead),
    Claim("hw4/llm_rl", r"ends above the base model", r"math_toy grpo\s*:", _math_both_above_base),
    Claim("hw4/llm_rl", r"so it never clips", unchecked="GR-REINFORCE's ratio is 1 by construction (its loss has none)"),
    # hw4 Question 4 rests on the ablation's printout (cell 'knob = value: eval exact match ...').
    Claim("hw4/llm_rl", r"tiny minibatches", r"eval exact match .*max KL",
          lambda out: _degraded(out, "ppo_epochs=16", "minibatch=3x1")),
    Claim("hw4/llm_rl", r"strong KL penalty", r"eval exact match .*max KL", lambda out: _degraded(out, "kl_coef=8")),
    Claim("hw4/llm_rl", r"tiny clip range", r"eval exact match .*max KL", lambda out: _degraded(out, "clip_eps=0.02")),
    # hw4 Question 5 rests on the format_copy runs' printout ('format_copy grpo: ... final rollout reward r').
    Claim("hw4/llm_rl", r"flattens once the task is solved", r"format_copy grpo\s*:.*final rollout reward",
          lambda out: _solved(out)),
    Claim("hw4/llm_rl", r"no penalty at all works", r"eval exact match .*max KL",
          lambda out: _not_degraded(out, "kl_coef=0")),
]

# lab11: see its section below the helpers (LAB11).
LAB11: list[Claim] = []

# lab19 (failure_modes): owned by the lab19 notebook's author.
LAB19: list[Claim] = []

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


def _p0_full_ahead_every_seed(out: str) -> Optional[str]:
    d = value(out, r"opd-full minus opd-sampled, final pass@1")
    m = re.search(r"seeds where opd-full is ahead: (\d+) of (\d+)", out)
    assert m, "no count of seeds where opd-full is ahead"
    return None if d > 0 and m.group(1) == m.group(2) else f"difference {d}, ahead on {m.group(1)} of {m.group(2)}"


LAB21_TASKS: list[Claim] = [
    # Project 0 rests on its summary table and the difference lines below it (the cell after project0(...)).
    Claim("lab21/tasks", r"Dense signals beat the sparse one", r"published start: pass@1", _p0_dense_beats_sparse),
    Claim("lab21/tasks", r"The exact KL beats its one-sample estimate", r"published start: pass@1", _p0_full_beats_sampled),
    Claim("lab21/tasks", r"ends 0\.083 ahead on average, ahead on 3 of 3 seeds", r"seeds where opd-full is ahead",
          _p0_full_ahead_every_seed),
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


def _p5_lower_than_published(out: str) -> Optional[str]:
    m = re.search(rf"in distribution: pass@1 {FLOAT} -> ({FLOAT}) \(published {FLOAT} -> ({FLOAT})\)", out)
    assert m, "no Project 5 pass@1 printout with the published value"
    return None if float(m.group(1)) < float(m.group(2)) else f"pass@1 ends at {m.group(1)}, published {m.group(2)}"


LAB21_PROJECTS: list[Claim] = [
    # Project 2 rests on its summary table (the cell after project2(...)).
    Claim("lab21/projects", r"in our runs the hack already wins there", r"stylish_w1\s+\d", _p2_w1_hacked),
    Claim("lab21/projects", r"Partial credit ends at 0\.438 against binary's 0\.450: no faster", r"stylish_w1\s+\d",
          _p2_partial_no_faster),
    # Project 5 rests on its pass@k printout (the cell after project5(...)).
    Claim("lab21/projects", r"the curves cross at k = 27, 21 and 12", r"the curves cross at k", _p5_crosses),
    Claim("lab21/projects", r"pass@1 ends lower than the published 0\.67", r"in distribution: pass@1",
          _p5_lower_than_published),
]

CLAIMS: list[Claim] = HW4 + LAB11 + LAB19 + LAB21_TASKS + LAB21_PROJECTS
