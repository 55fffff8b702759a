"""Where a notebook prints one of our numbers beside its published value and the reproduction's claim
about it does not hold on that number, a note beside it says so and why; where the claim holds, no
note says it differs.

Reads the executed source notebooks (source/<assignment>/<name>.ipynb) and the claims of
``llmrl.tools.reproduce.CLAIMS`` (their tolerances, so the notebook and docs/reproduction.md judge a number
alike); executes nothing. Every published value a notebook prints in one of the formats below is
either bound to the claim that judges it (`CLAIMED`) or listed in `UNCLAIMED` with the reason no
claim judges it, so a new published column cannot slip in unjudged.

The formats: lab19's ``expected_report`` rows ("key  ours  m ± sd (n seeds)  published x", a note on
the indented lines after it) and lab21's ``summary_table`` ("arm  start -> m ± sd  published" per
metric, notes as "note: ARM METRIC ..." lines under the table).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from autograder.tests.test_model_answers import output_text
from llmrl.tools.reproduce import CLAIMS

ROOT = Path(__file__).resolve().parents[2]
FLOAT = r"[-+]?\d+(?:\.\d+)?"

# (notebook, printed key) -> claim id. lab19's keys are expected_report's; lab21's are
# "project/arm/metric" of a summary table.
CLAIMED = {
    ("lab19/failure_modes", "bon_peak_kl"): "lab19.bon-peak-kl",
    ("lab19/failure_modes", "bon_peak_gold_gain"): "lab19.bon-peak-gain",
    ("lab19/failure_modes", "gao_alpha"): "lab19.gao-alpha",
    ("lab19/failure_modes", "gao_beta"): "lab19.gao-beta",
    ("lab19/failure_modes", "pool_gold_gain_n3000"): "lab19.pool-3000",
    ("lab19/failure_modes", "exact_gold_gain_n3000"): "lab19.exact-3000",
    ("lab19/failure_modes", "hack_accuracy_start"): "lab19.hack-acc-start",
    ("lab19/failure_modes", "hack_accuracy_around_50"): "lab19.hack-acc-mid",
    ("lab19/failure_modes", "hack_peak_step"): "lab19.hack-peak-step",
    ("lab19/failure_modes", "kl005_final_accuracy"): "lab19.kl005-acc",
    ("lab19/failure_modes", "gold_final_accuracy"): "lab19.gold-acc",
    ("lab19/failure_modes", "entropy_start"): "lab19.entropy-start",
    ("lab19/failure_modes", "entropy_end_no_upper"): "lab19.no-upper-entropy",
    ("lab19/failure_modes", "clip_high_of_positive_rare"): "lab19.clip-rare",
    ("lab19/failure_modes", "clip_high_of_positive_common"): "lab19.clip-common",
    **{("lab21/tasks", f"project0/{arm}/{m}"): f"lab21.p0-{arm}-{c}"
       for arm in ("opd-full", "sft-teacher", "opd-sampled", "rl")
       for m, c in (("pass@1", "pass1"), ("kl_to_teacher_exact_token_mean_nats", "kl"))},
    ("lab21/projects", "project1/symmetric/entropy_token_mean_nats"): "lab21.p1-symmetric-entropy",
    ("lab21/projects", "project1/clip-higher/entropy_token_mean_nats"): "lab21.p1-clip-higher-entropy",
    ("lab21/projects", "project1/symmetric/pass@1"): "lab21.p1-clipped-pass1",
    ("lab21/projects", "project1/no-clip/pass@1"): "lab21.p1-no-clip-pass1",
    **{("lab21/projects", f"project2/{arm}/{m}"): f"lab21.p2-{arm}-{c}"
       for arm in ("binary", "partial", "stylish_w2")
       for m, c in (("gold_pass@1", "gold"), ("proxy_reward_mean", "proxy"), ("pad_share_small_sums", "pad"))
       if (arm, m) != ("binary", "proxy_reward_mean")},
    ("lab21/projects", "project2/stylish_w1/gold_pass@1"): "lab21.p2-w1-gold",
    ("lab21/projects", "project2/stylish_w1/pad_share_small_sums"): "lab21.p2-w1-pad",
    ("lab21/projects", "project3/uniform/sampled_accuracy_2d+2d_ge100"): "lab21.p3-uniform-ge100",
    ("lab21/projects", "project3/learnability/sampled_accuracy_2d+2d_ge100"): "lab21.p3-learnability-ge100",
    ("lab21/projects", "project3/target-only/sampled_accuracy_3d+1d"): "lab21.p3-target-only-3d1d",
    **{("lab21/projects", f"project4/{arm}/{m}"): f"lab21.p4-{arm}-{c}"
       for arm in ("mean", "std", "maxrl") for m, c in (("pass@1", "pass1"), ("pass@16", "pass16"))},
}

# Printed published values no claim judges on the printed number, and why.
UNCLAIMED = {
    ("lab19/failure_modes", "bon_peak_n"): "the peak's n is judged with the peak's KL (lab19.bon-peak-kl): the grid's n "
                                           "and its KL are one fact",
    ("lab19/failure_modes", "bon_gold_gain_n3000_sign"): "a sign, printed as a word; lab19.pool-3000 judges the value",
    ("lab19/failure_modes", "noise_only_gao_beta"): "lab19.noise-beta judges its sign on every pool, not the mean "
                                                    "printed here; the row's note gives the sign",
    ("lab19/failure_modes", "hack_final_accuracy"): "the completed hack is judged on each seed (lab19.hack-completed), "
                                                    "not on the mean; the note under the KL row counts the seeds",
    ("lab19/failure_modes", "hack_final_length"): "as hack_final_accuracy: one fact with it, judged per seed",
    ("lab19/failure_modes", "hack_final_kl"): "judged on each seed (lab19.hack-final-kl needs 4 of 5); the note counts them",
    ("lab19/failure_modes", "entropy_end_clipped"): "lab19.entropy-end judges the mean of the symmetric and "
                                                    "clip-higher runs, which this row prints; its note is the "
                                                    "no-upper row's",
    ("lab21/projects", "project1/clip-higher/pass@1"): "the published run gives one pass@1 for both clipped arms; "
                                                       "lab21.p1-clipped-pass1 judges it on the symmetric arm",
    ("lab21/projects", "project1/no-clip/entropy_token_mean_nats"): "published as the top of a range ('about "
                                                                    "0.22-0.26'), judged by lab21.p1-collapse",
    ("lab21/projects", "project2/binary/proxy_reward_mean"): "the binary reward is gold accuracy: the proxy is the "
                                                             "gold column again, judged there",
}


def _lab19_rows(out: str):
    """(key, mean, has a note) for each expected_report row."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        m = re.match(rf"^(\w+)\s+ours\s+(\S+)(?: ± {FLOAT} \(\d+ seeds\))?\s+published\s+\S+\s*$", line)
        if m:
            note = i + 1 < len(lines) and lines[i + 1].startswith("    note:")
            try:
                value = float(m.group(2))
            except ValueError:
                value = None  # a word ('negative')
            yield m.group(1), value, note


def _lab21_rows(out: str, project: str):
    """(project/arm/metric, mean, has a note) for each published cell of a summary table."""
    lines = out.splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith("arm ") and "published" in line), None)
    if head is None:
        return
    metrics = re.findall(r"(\S+) start->end", lines[head])
    notes = "\n".join(line for line in lines if line.startswith("note: "))
    for line in lines[head + 1:]:
        m = re.match(r"^(\S+)\s+(\d.*)$", line)
        if not m or "->" not in line:
            break
        cells = re.findall(rf"{FLOAT} -> ({FLOAT})(?: ± {FLOAT})?\s+({FLOAT}|-)", m.group(2))
        for metric, (end, published) in zip(metrics, cells):
            if published != "-":
                yield (f"{project}/{m.group(1)}/{metric}", float(end),
                       bool(re.search(rf"^note: {re.escape(m.group(1))} {re.escape(metric)} ", notes, re.M)))


def printed_published(notebook: str, nb) -> list[tuple[str, float | None, bool, int]]:
    """Every printed published comparison of a notebook: (key, our mean, note beside it, cell)."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        out = output_text(cell)
        if notebook == "lab19/failure_modes":
            found += [(k, v, n, i) for k, v, n in _lab19_rows(out)]
        project = re.search(r"EXPECTED\[[\"'](project\d)[\"']\]", cell.source)
        if project and "summary_table" in cell.source:
            found += [(k, v, n, i) for k, v, n in _lab21_rows(out, project.group(1))]
    return found


NOTEBOOKS = ["lab19/failure_modes", "lab21/tasks", "lab21/projects"]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_a_number_the_reproduction_says_differs_has_a_note_beside_it(notebook):
    nb = nbformat.read(ROOT / "source" / f"{notebook}.ipynb", as_version=4)
    claims = {c.id: c for c in CLAIMS}
    rows = printed_published(notebook, nb)
    assert rows, f"{notebook}: no printed published comparison found (did a format change?)"
    problems = []
    for key, value, noted, cell in rows:
        where = (notebook, key)
        if where in UNCLAIMED:
            continue
        if where not in CLAIMED:
            problems.append(f"cell {cell}: {key} prints a published value that no claim judges: bind it in CLAIMED "
                            "or say in UNCLAIMED why no claim does")
            continue
        claim = claims.get(CLAIMED[where])
        if claim is None:
            problems.append(f"cell {cell}: {key} is bound to {CLAIMED[where]}, which claims.json no longer has")
            continue
        holds = claim.check.passes(value)
        if not holds and not noted:
            problems.append(f"cell {cell}: {key} = {value} is outside {claim.id}'s tolerance "
                            f"({claim.check.describe()}) and no note beside it says so")
        if holds and noted:
            problems.append(f"cell {cell}: {key} = {value} holds {claim.id} ({claim.check.describe()}), yet a note "
                            "beside it says it differs")
    stale = [k for (nb_name, k) in list(CLAIMED) + list(UNCLAIMED) if nb_name == notebook
             and k not in {r[0] for r in rows}]
    problems += [f"{k}: bound here but printed nowhere in {notebook} any more" for k in stale]
    assert not problems, f"{notebook}:\n  " + "\n  ".join(problems)


def test_the_row_readers_see_notes_and_their_absence():
    report = ("entropy_start                    ours    0.287 ± 0.005 (5 seeds)   published     0.35\n"
              "    note: differs from the published 0.35\n"
              "entropy_end_clipped              ours    0.173 ± 0.007 (5 seeds)   published     0.15\n")
    assert list(_lab19_rows(report)) == [("entropy_start", 0.287, True), ("entropy_end_clipped", 0.173, False)]
    table = ("arm         gold_pass@1 start->end  published  pad_share_small_sums start->end  published\n"
             "binary      0.295 -> 0.532 ± 0.025      0.550           0.049 -> 0.036 ± 0.030      0.020\n"
             "stylish_w1  0.295 -> 0.341 ± 0.005      0.500           0.049 -> 0.992 ± 0.005          -\n"
             "note: stylish_w1 gold_pass@1 ends at 0.341, more than 0.07 from the published 0.5: why\n")
    assert list(_lab21_rows(table, "project2")) == [
        ("project2/binary/gold_pass@1", 0.532, False), ("project2/binary/pad_share_small_sums", 0.036, False),
        ("project2/stylish_w1/gold_pass@1", 0.341, True)]
