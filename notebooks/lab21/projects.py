# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 21, part 2: five open projects
#
# > **Before you start.** 20 points, graded by hand: one write-up of 4 points per project.
# > Each project takes an afternoon: the starter cells run in about three minutes in all (every
# > project at its published budget, with seeds), and the research part (an extension, a larger
# > evaluation) takes 10 to 30 minutes of computer time per project.
# >
# > | project | the question | points | about |
# > |---|---|---|---|
# > | 1 | clip-higher and entropy collapse | 4 | 2-3 h |
# > | 2 | rubric rewards and their exploits | 4 | 2-3 h |
# > | 3 | a proposer at the learner's frontier | 4 | 2-3 h |
# > | 4 | MaxRL, the mean baseline and GRPO's std | 4 | 2-3 h |
# > | 5 | sharpening or expanding | 4 | 2-3 h |
# >
# > **Running one project.** Run the first code cell (the imports) once, then the project's cells
# > from top to bottom. The projects are independent of each other and of `tasks.ipynb`'s code.
# >
# > **Done** means, for each project: at least 3 seeds per arm in your plot, one extension run,
# > and a write-up with its five parts (listed below) in the cell marked for it. There are no
# > tests here; the cell above each write-up says what a grader looks for.
#
# Each section below poses a question from the 2025-26 literature, runs a **starter experiment** end
# to end on TinyLM with several seeds, and plots every seed. The starter is where the research
# begins, not where it ends. For each project you
#
# 1. decide from the seeds whether the effect is real (add seeds where the spread is too wide),
# 2. try the suggested extension, or one of your own that needs new code,
# 3. write it up in the graded cell at the end of the section (half a page).
#
# **Running longer.** Every experiment is a function in `llmrl.labs.lab21` with `steps`, `seeds`
# and arguments; `workers=2` runs seeds in parallel processes. For long sweeps use the command
# line, which writes JSON results this notebook can load and plot:
#
# ```
# python -m llmrl.labs.lab21 project1 --seeds 0 1 2 3 4 --workers 2
# python -m llmrl.labs.lab21 project2 --arms stylish_w0.25 stylish_w0.5 stylish_w0.75 stylish_w1
# python -m llmrl.labs.lab21 project5 --steps 1000 --seeds 0 1 2
# ```
#
# `lab21.load_results("project1")` reads them back (from `artifacts/results/lab21/` at the root of
# the repository, wherever the command ran).
#
# **A write-up** has five parts: the hypothesis; the setup, with everything you held fixed (base
# model, budget, sampling temperature, evaluation set); a plot with every seed visible; the result
# in one sentence; what else could explain it that your runs did not exclude. Before you hand it
# in, read it the way you would review an RL-for-LLM paper: is there a baseline, is the KL or the
# reference model stated, how were the evaluation samples drawn, could the test problems have
# leaked into training, how many seeds, how much compute?
#
# Every starter below runs at the published budget (`lab21.PROJECTS`) with three seeds per arm
# (Project 1: five, seeds 0-4), two seeds at a time; the whole notebook takes about three minutes
# on a quiet two-core machine. The published numbers, one seed each, are printed beside the mean
# and spread of yours. Where our TinyLM cannot match one, the text next to it says so and why.
#
# **The model and the settings.** The student and the teacher are TinyLMs with GELU in their MLP,
# from an SFT run of their own, chosen among several ReLU and GELU runs as the one whose student
# reproduces the most published results (`docs/lab21-calibration.md` in the course repository). Every project trains at the learning rate published for Project 0, AdamW at 3e-4, and
# samples at temperature 1, in training and in every evaluation: the published setting names no
# other. Projects 1-5 use 16 prompts x 8 samples a step, as published.

# %%
import matplotlib.pyplot as plt
import numpy as np

from llmrl import plotting
from llmrl.addition import BUCKETS
from llmrl.labs import lab21
from llmrl.rewards import RubricItem
from llmrl.utils import grading_mode, set_threads

set_threads(1)
EXPECTED = lab21.EXPECTED
SHORT = grading_mode()  # the autograder only needs the cells to run: 3 steps of one seed
SEEDS = [0] if SHORT else [0, 1, 2]            # seeds per arm (Projects 2-5)
P1_SEEDS = [0] if SHORT else [0, 1, 2, 3, 4]   # Project 1 asks for seeds 0-4
WORKERS = 1 if SHORT else 2  # parallel processes (one thread each)
ART = "artifacts/lab21"

# %% [markdown]
# ## Project 1: clip-higher and entropy collapse
#
# PPO-style objectives clip the probability ratio $\rho = \pi_\theta/\pi_{\text{old}}$ to
# $[1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}}]$. A token with positive advantage stops
# contributing gradient once $\rho > 1 + \varepsilon_{\text{high}}$, which caps how fast a *rare*
# good token can gain probability. DAPO's "clip-higher" raises only the upper bound (0.2 / 0.28),
# arguing that this keeps entropy from collapsing and so helps pass@k at large k.
#
# **Starter.** Three arms, symmetric clip [0.8, 1.2], clip-higher [0.8, 1.28] and no clip, with
# 4 gradient epochs per batch (with one epoch the ratio is exactly 1 and no clip ever binds). "No
# clip" removes the upper bound and keeps the lower one, [0.8, ∞), as lab19's "no upper clip" does:
# without either bound, 4 epochs a batch break the policy down, and the published run did not.
# Measured: per-token entropy, pass@1 and pass@16 against step, and the fraction of tokens each
# bound switches off.

# %% tags=["nbval-ignore-output"]
P1_STEPS = 3 if SHORT else 150
P1_EVAL = 20 if SHORT else 100
p1 = lab21.project1(steps=P1_STEPS, seeds=P1_SEEDS, workers=WORKERS, eval_prompts=P1_EVAL)

# %% tags=["nbval-mask-numbers"]
print(lab21.describe_setup(p1, problems=P1_EVAL, samples=16))
print(lab21.summary_table(p1, ["entropy_token_mean_nats", "pass@1", "pass@16"], EXPECTED["project1"]))
print(f"published: entropy starts at {EXPECTED['project1']['start']['entropy_token_mean_nats']} nats/token")
_ent = {arm: [r["evals"]["entropy_token_mean_nats"][-1] for r in runs] for arm, runs in p1.items()}
print("final entropy, mean ± std over seeds:", "; ".join(f"{a} {lab21.seed_spread(v)}" for a, v in _ent.items()))
print(f"clip-higher minus symmetric, final entropy: {lab21.seed_spread(np.subtract(_ent['clip-higher'], _ent['symmetric']))}")
for arm, runs in p1.items():
    hi = [np.nanmean(np.array(r["curve"]["clip_fraction_high"], float)) for r in runs]
    lo = [np.nanmean(np.array(r["curve"]["clip_fraction_low"], float)) for r in runs]
    pos = [np.nanmean(np.array(r["curve"]["clip_high_of_positive"], float)) for r in runs]
    print(f"{arm:<12} share of tokens clipped: upper bound {lab21.seed_spread(hi, '{:.4f}')}, lower bound "
          f"{lab21.seed_spread(lo, '{:.4f}')}; positive-advantage tokens the upper bound stops {lab21.seed_spread(pos, '{:.4f}')}")

# %%
fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
plotting.plot_metric(p1, "entropy_token_mean_nats", where="curve", ax=axes[0], window=10, title="entropy (training batches)")
plotting.plot_metric(p1, "pass@1", ax=axes[1], title="pass@1")
plotting.plot_metric(p1, "pass@16", ax=axes[2], title="pass@16")
plotting.plot_metric(p1, "clip_fraction_high", where="curve", ax=axes[3], window=10,
                     title="share of tokens clipped by the upper bound")
plotting.shared_legend(fig, axes)
plotting.save(fig, f"{ART}/project1_clip_higher.png")
plt.show()

# %% [markdown]
# **Against the published run.** Entropy collapses in every arm, from 0.557 nats per token (published
# 0.54) to 0.217 with the symmetric clip and 0.220 with clip-higher (published 0.222 and 0.235), and
# to 0.255 without an upper clip (published about 0.26), whose pass@1 ends lowest, 0.466 (published
# 0.50), against 0.559 and 0.557 for the clipped arms (published 0.57). The difference between the
# two clipped arms' final entropy, 0.003, is far inside its spread over five seeds.
#
# **Your job.** The starter ran seeds 0-4 per arm: report the final entropy as mean and spread. Then
# make the upper bound matter: `lab21.project1(epochs=8, eps_high=0.4, ...)`. Look at
# `clip_high_of_positive` in the curves (the share of positive-advantage tokens the upper bound
# switches off): if it is near zero, clip-higher cannot change anything, and a null result says
# more about the setup than about the method. **What you should find:** entropy falls in every arm
# whatever the seed; any gap between the two clipped arms has to be set against the spread of five
# seeds, and it can only appear where the upper bound actually binds.

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_writeup_project1", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Write-up of Project 1: 4 points, graded by hand.** Replace the text of the next cell with your
# half page: hypothesis, setup, plot, result, what else could explain it.
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (4 points).**
#
# - **1 point** hypothesis and setup: a hypothesis that the runs can refute; the setup names what
#   was held fixed (checkpoint, budget, prompts x samples, learning rate, evaluation set and its
#   sampling temperature).
# - **1 point** plot: seeds 0-4 (at least 3) for every arm, final entropy as mean and spread; every seed
#   visible, not only the mean.
# - **1 point** result: one sentence that the plot supports, with the size of the effect set
#   against the spread between seeds (a gap inside the spread is reported as no clear effect).
# - **1 point** extension and confounders: the extension with `epochs=8, eps_high=0.4`, and
#   `clip_high_of_positive` reported: if the upper bound almost never binds, the write-up says that clip-
#   higher could not act, rather than "no effect"; at least one confounder the runs could not rule
#   out.
#
# Half points are fine. No point for a part that only restates the starter's text.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "writeup_project1", "locked": false, "points": 4, "schema_version": 3, "solution": true, "task": false}
# **Hypothesis.** Raising only the upper clip bound keeps per-token entropy higher than the symmetric
# clip and improves pass@16.
#
# **Setup.** The shipped student, 2-digit prompts, 16 prompts x 8 samples per step for 150 steps,
# AdamW lr 3e-4, 4 epochs per batch, no KL term; evaluation on 100 fixed problems x 16 samples at
# T = 1; seeds 0-4 for each of the three arms (the setup line above).
#
# **Plot.** Entropy of the training batches against step, one band per arm with every seed drawn;
# pass@1, pass@16 and the share of tokens the upper bound clips beside it.
#
# **Result.** In every arm the entropy ends below where it started (the table's start -> end column).
# On entropy, the hypothesis is inconclusive: clip-higher minus symmetric ends at 0.003 ± 0.027 over
# five seeds, inside the seed noise. On pass@16, the hypothesis is inconclusive as well, and the runs
# lean against it: pass@16 falls in every arm, from 0.932 to 0.854 (symmetric), 0.838 (clip-higher)
# and 0.768 (no clip), and clip-higher ends below the symmetric clip, by less than the seeds' spread
# (± 0.054 and ± 0.030). The upper bound stops only a small share of the positive-advantage tokens
# (the printed shares), so it had little to act on. Without the upper bound the entropy ends highest
# (0.255) and pass@1 lowest (0.466 against 0.559 with the symmetric clip).
#
# **Confounders.** Tiny vocabulary and 2-4-token answers; one learning rate; the number of epochs
# sets how far the ratio moves; the evaluation set is 100 problems. Extension to report: the run
# with `epochs=8, eps_high=0.4`, and whether the upper bound then binds.

# %% [markdown]
# ## Project 2: rubric rewards and their exploits
#
# A rubric scores a response with a weighted checklist instead of one bit. Two questions:
#
# 1. Partial credit (right length, digits in place, exact answer) gives more signal per response
#    than the binary verifier. Does the policy learn any faster for it?
# 2. A "stylish" rubric pays 1 for the exact answer plus $w$ for *looking thorough* (3 or more
#    digits), which is not the goal. At what weight does the policy start padding answers?
#
# **Starter.** Binary, partial credit, and stylish with $w = 2$ and with $w = 1$, 200 steps each.
# Measured: gold accuracy (exact match, pass@1 at T = 1), the proxy reward being trained on, and
# the share of answers with 3+ digits among problems whose sum is below 100 ("padded small sums").
#
# Our rubrics are not scaled like the published ones: a stylish answer can earn 1 + w, so the
# proxy reward of the stylish arms runs above 1 (about 2.3 at w = 2 where the published run shows
# 0.61). Compare the stylish arms' proxy column within one run, not with the published numbers.

# %% tags=["nbval-ignore-output"]
P2_STEPS = 3 if SHORT else 200
P2_EVAL = 20 if SHORT else 100
p2 = lab21.project2(steps=P2_STEPS, seeds=SEEDS, workers=WORKERS, eval_prompts=P2_EVAL,
                    arms=["binary", "partial", "stylish_w2", "stylish_w1"])

# %% tags=["nbval-mask-numbers"]
print(lab21.describe_setup(p2, problems=P2_EVAL, samples=8))
print(lab21.summary_table(p2, ["gold_pass@1", "proxy_reward_mean", "pad_share_small_sums"], EXPECTED["project2"]))

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
plotting.plot_metric(p2, "gold_pass@1", ax=axes[0], title="gold accuracy (exact match)")
plotting.plot_metric(p2, "proxy_reward_mean", ax=axes[1], title="the reward being optimised")
plotting.plot_metric(p2, "pad_share_small_sums", where="curve", ax=axes[2], window=10,
                     title="3+ digit answers to sums < 100 (training)")
plotting.shared_legend(fig, axes)
plotting.save(fig, f"{ART}/project2_rubric.png")
plt.show()

# %% [markdown]
# **Against the published run.** Binary and partial credit end at gold pass@1 0.532 and 0.540
# (published 0.55 and 0.54) and pad almost no small sums; the stylish rubric at w = 2 is hacked as
# published (0.999 of small sums padded, gold 0.319 against the published 0.29). With w = 1 our runs
# pad almost every small sum too (0.992, published 0.08) and gold accuracy barely moves (0.341,
# published 0.50): in our rubric padding pays at w = 1 already (the rule below), so the published
# threshold between 1 and 2 does not carry over. The published rubric's exact form is not given.
#
# **Back of the envelope.** On the 2-digit problems, an honest answer to a sum $\ge 100$ has 3
# digits anyway, so padding changes only the answers to small sums: there it trades the exact-answer
# credit (earned with probability $p$, the current accuracy on small sums) for $w$. Padding pays in
# expectation once $w > p$. The next cell measures $p$ for the student before training (sampled at
# T = 1 on 2-digit problems whose sum is below 100; the 2-digit pass@1 above also counts the sums of
# 100 and more). Move the sliders: `w` is the rubric weight, `accuracy` the student's accuracy on
# small sums (it starts at the measured value). The right panel shows the trained run whose weight
# is closest to `w`, from this notebook and from any command-line sweep you ran.

# %%
_n_small = 50 if SHORT else 400
_acc_small = lab21.small_sum_accuracy(n_problems=_n_small)
print(f"the student's accuracy on sums below 100 (T = 1, {_n_small} problems x 4 samples): p = {_acc_small:.3f}, "
      f"so padding pays once w > {_acc_small:.2f}")

# %% tags=["nbval-ignore-output"]
_runs = {**lab21.load_results("project2"), **p2}  # command-line sweeps, then this notebook's runs
lab21.rubric_weight_widget(_runs, accuracy_small=_acc_small)

# %% [markdown]
# **Your job.** (i) Find the weight $w^*$ above which padding wins: run a range of weights (the
# command line above), browse them with the slider, and compare with the back-of-envelope threshold.
# Why might training need a larger $w$ than the expectation argument says? (ii) Add a **pitfall**:
# a rubric item with a negative weight that fires on the hack and not on honest answers. Define it
# below and run the `+pitfall` arm; it should remove the padding without costing gold accuracy.
# Start below 1: with this rubric the rule puts the threshold at the accuracy on small sums, the $p$
# printed above. **What you should find:** a weight where the padded share jumps, near the
# rule's threshold; with a good pitfall item the `+pitfall` arm's padded share drops back to the
# binary run's level. The cell below prints both.

# %%
PITFALL = None  # e.g. RubricItem("pads_small_sum", check=lambda response, answer: ..., weight=-2.0)
if PITFALL is not None:
    p2_pitfall = lab21.project2(steps=P2_STEPS, seeds=SEEDS, arms=["stylish_w2", "stylish_w2+pitfall"],
                                      pitfall=PITFALL, workers=WORKERS)
    print(lab21.summary_table(p2_pitfall, ["gold_pass@1", "pad_share_small_sums"]))

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_writeup_project2", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Write-up of Project 2: 4 points, graded by hand.** Replace the text of the next cell with your
# half page: hypothesis, setup, plot, result, what else could explain it.
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (4 points).**
#
# - **1 point** hypothesis and setup: a hypothesis that the runs can refute; the setup names what
#   was held fixed (checkpoint, budget, prompts x samples, learning rate, evaluation set and its
#   sampling temperature).
# - **1 point** plot: at least four weights around the threshold, e.g. 0.25, 0.5, 1 and 2 (3 seeds
#   each): the padded share of small sums and gold accuracy against w; every seed visible, not only the mean.
# - **1 point** result: one sentence that the plot supports, with the size of the effect set
#   against the spread between seeds (a gap inside the spread is reported as no clear effect).
# - **1 point** extension and confounders: the threshold compared with the back-of-envelope rule (padding
#   pays once w exceeds the accuracy p on small sums) and a pitfall item that removes the padding at no
#   cost in gold accuracy, or an honest account of why it did not; at least one confounder the runs could
#   not rule
#   out.
#
# Half points are fine. No point for a part that only restates the starter's text.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "writeup_project2", "locked": false, "points": 4, "schema_version": 3, "solution": true, "task": false}
# **Hypothesis.** A style item worth about as much as correctness gets exploited, and a pitfall item
# aimed at the exploit removes it without hurting accuracy.
#
# **Setup.** The trainer and student of Project 1 with 1 epoch per batch, 200 steps of 16 prompts x
# 8 samples, AdamW lr 3e-4; binary, partial-credit and stylish rubrics (w = 2 and w = 1); gold
# accuracy on 100 fixed problems x 8 samples at T = 1; seeds 0, 1, 2 (the setup line above).
#
# **Plot.** Gold accuracy, the proxy reward and the padded share of small sums against step, every
# seed drawn.
#
# **Result.** On the style item, the hypothesis is supported: both stylish rubrics are hacked, the
# padded share of small sums ending at 0.999 for w = 2 and 0.992 for w = 1, while gold accuracy ends
# at 0.319 and 0.341 from 0.295 at the start. The published run padded only 0.08 at w = 1; in our runs
# the hack already wins there, as the break-even rule (padding pays once w is above the accuracy on
# small sums) predicts for any accuracy short of perfect. The pitfall half of the hypothesis is
# untested here: the starter does not run that arm. Partial credit ends at 0.540 against binary's
# 0.532: no faster.
#
# **Confounders.** The threshold depends on how fast accuracy grows (the break-even moves with p);
# the pitfall uses the true answer, which a real grader may not have. Extension to report: weights
# below 1, around the threshold, and the pitfall arm's padded share against binary's.

# %% [markdown]
# ## Project 3: a proposer at the learner's frontier
#
# Absolute Zero's proposer is rewarded for problems the solver *sometimes* solves: a group of
# samples earns learnability 0 if none or all of its samples succeed, else $1 - \hat p$. Problems the
# student never solves give no gradient (every advantage in the group is 0), and neither do
# problems it always solves.
#
# **Starter.** Five buckets: 1d+1d (rare in the SFT data, so rarely solved), three 2-digit buckets,
# and 3d+1d (never seen). Three ways to choose training problems: **target-only** (only 3d+1d),
# **uniform** over buckets, and **learnability**, a softmax bandit (temperature 0.1) over each
# bucket's running learnability. Measured: accuracy per bucket (T = 1) and the share of samples spent
# on each bucket.

# %% tags=["nbval-ignore-output"]
P3_STEPS = 3 if SHORT else 200
P3_EVAL = 20 if SHORT else 100
p3 = lab21.project3(steps=P3_STEPS, seeds=SEEDS, workers=WORKERS, eval_per_bucket=P3_EVAL)

# %% tags=["nbval-mask-numbers"]
print(lab21.describe_setup(p3, problems_per_bucket=P3_EVAL, samples=1))
print(lab21.summary_table(p3, [f"sampled_accuracy_{b}" for b in ("1d+1d", "2d+2d_ge100", "3d+1d")], EXPECTED["project3"]))
for arm, runs in p3.items():
    u = {b: np.mean([r["extra"]["total_usage"]["usage_" + b] for r in runs]) for b in BUCKETS}
    print(f"{arm:<13} share of samples: " + ", ".join(f"{b} {u[b]:.2f}" for b in BUCKETS)
          + f"   (mean over seeds; published 3d+1d: {EXPECTED['project3'].get(arm, {}).get('usage_3d+1d', '-')})")
_2d = ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100")
for arm, runs in p3.items():
    gain = [np.mean([r["evals"][f"sampled_accuracy_{b}"][-1] - r["evals"][f"sampled_accuracy_{b}"][0] for b in _2d])
            for r in runs]
    top = [r["evals"]["sampled_accuracy_1d+1d"][-1] for r in runs]
    print(f"{arm:<13} mean gain on the 2-digit buckets {lab21.seed_spread(gain)}; final 1d+1d {lab21.seed_spread(top)}; "
          f"largest final 1d+1d of a seed {max(top):.3f}")
_hits = [round(sum(r["curve"]["sampled_accuracy"]) * r["config"]["n_prompts"] * r["config"]["group_size"])
         for r in p3["target-only"]]
print(f"target-only: correct answers among all its training samples, per seed: {_hits}")
_drift = [np.mean([r["evals"][f"sampled_accuracy_{b}"][0] - r["evals"][f"sampled_accuracy_{b}"][-1] for b in _2d])
          for r in p3["target-only"]]
print(f"target-only: start minus end on the 2-digit buckets (each evaluation draws fresh samples), per seed: "
      f"{np.round(_drift, 3).tolist()}, mean {np.mean(_drift):+.3f}")

# %%
fig, axes = plt.subplots(1, 4, figsize=(19, 4.3))
for ax, arm in zip(axes[:3], p3):
    plotting.plot_usage(p3[arm], BUCKETS, ax=ax, title=f"{arm}: bucket usage", legend=False)
_h, _l = axes[0].get_legend_handles_labels()  # one legend of the buckets, under the three stacks they fill
fig.legend(_h, _l, loc="lower left", bbox_to_anchor=(0.04, 0.0), ncol=len(_l), fontsize=9, frameon=False)
ax = axes[3]
for i, b in enumerate(BUCKETS):
    for j, arm in enumerate(p3):
        vals = [r["evals"][f"sampled_accuracy_{b}"][-1] for r in p3[arm]]
        x = i + (j - 1) * 0.27
        ax.bar(x, np.mean(vals), width=0.27, color=f"C{j}", alpha=0.7, label=arm if i == 0 else None)
        ax.scatter(np.full(len(vals), x), vals, color="k", s=8, zorder=3)  # one dot per seed
ax.set_xticks(range(len(BUCKETS)), BUCKETS, rotation=20, fontsize=8)
ax.set_ylabel("final accuracy (T = 1), dots: seeds")
ax.set_ylim(0, 1)
ax.legend(fontsize=8, loc="upper left", ncol=3)  # above the bars, which stay under 0.8
fig.tight_layout(rect=(0, 0.07, 1, 1))
plotting.save(fig, f"{ART}/project3_learnability.png")
plt.show()

# %% [markdown]
# **Against the published run.** Learnability spends 0.01 of its samples on 3d+1d (published 0.03)
# against uniform's 0.20 (published 0.22), and ends ahead of uniform on sum >= 100, 0.550 against
# 0.473 (published 0.62 and 0.50). Target-only cannot behave as the published arm did: our student
# never solves a 3d+1d problem (0 correct answers among its training samples, on every seed), so
# every group's rewards are all 0, every advantage is 0 and no step changes the model. What its
# buckets show between start and end is the evaluation's own noise, since every evaluation draws
# fresh samples (start minus end on the 2-digit buckets: -0.018 on average, the seeds on both sides
# of zero). The published run saw the other buckets drift down a little; that takes an update,
# which a student with a few 3d+1d successes gets and ours never does. Neither arm fixes 1d+1d with
# groups of 8.
#
# **Your job.** The usage plots above average the seeds; plot each seed's usage over time too. Then
# give the rare bucket bigger groups: `lab21.project3(rare_group=4)` serves each 1d+1d problem as 4 adjacent prompts whose
# 32 samples form one group, so a group with at least one success becomes likely (the "more
# rollouts" argument). The hardest extension is real self-play: let the model propose "a+b="
# problems itself and reward the proposals with learnability. **What you should find:** the share
# of samples the learnability arm spends on 3d+1d stays small on every seed, and 1d+1d only moves
# once its groups are large enough to contain a success.

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_writeup_project3", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Write-up of Project 3: 4 points, graded by hand.** Replace the text of the next cell with your
# half page: hypothesis, setup, plot, result, what else could explain it.
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (4 points).**
#
# - **1 point** hypothesis and setup: a hypothesis that the runs can refute; the setup names what
#   was held fixed (checkpoint, budget, prompts x samples, learning rate, evaluation set and its
#   sampling temperature).
# - **1 point** plot: 3 seeds per arm: the share of samples per bucket over time and the final accuracy
#   per bucket; every seed visible, not only the mean.
# - **1 point** result: one sentence that the plot supports, with the size of the effect set
#   against the spread between seeds (a gap inside the spread is reported as no clear effect).
# - **1 point** extension and confounders: the `rare_group=4` run for 1d+1d and what bigger groups changed
#   (a success in a group becomes likely); target-only explained by groups without any success; at least
#   one confounder the runs could not rule
#   out.
#
# Half points are fine. No point for a part that only restates the starter's text.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "writeup_project3", "locked": false, "points": 4, "schema_version": 3, "solution": true, "task": false}
# **Hypothesis.** A learnability bandit spends little on unsolvable problems and improves the
# buckets at the frontier faster than uniform sampling; target-only training learns nothing.
#
# **Setup.** The shipped student, 200 steps of 16 prompts x 8 samples, AdamW lr 3e-4,
# mean-baseline advantages over each served group, bandit temperature 0.1 and EMA 0.1; per-bucket
# accuracy on 100 fixed problems at T = 1; seeds 0, 1, 2 (the setup line above).
#
# **Plot.** Bucket usage against step per arm (mean over seeds); final per-bucket accuracy, seeds as
# dots.
#
# **Result.** On spending, the hypothesis is supported: learnability spends 0.01 of its samples on
# 3d+1d against uniform's 0.20. On the frontier buckets, the hypothesis is supported: learnability's
# mean gain on the 2-digit buckets is 0.299 ± 0.039 against uniform's 0.190 ± 0.047, more than twice
# the standard error of the difference over three seeds, and on sum >= 100 it ends at 0.550 against
# 0.473. On target-only, the hypothesis is supported: target-only leaves 3d+1d at 0.000, since no
# group ever holds a success (0 correct training answers on every seed), so no step changes the model,
# and its 2-digit "gain" of 0.018 is the noise of two fresh evaluations. 1d+1d ends at 0.023 with
# learnability and at 0.047 with uniform (no seed above 0.080): neither fixes it with groups of 8.
#
# **Confounders.** The bandit's temperature and start values; bucket sizes differ; the 2-digit
# buckets share skills, so improvements transfer between them. Extension to report: the run with
# `rare_group=4` (32-sample groups for 1d+1d).

# %% [markdown]
# ## Project 4: MaxRL vs the mean baseline vs GRPO's std
#
# With success probability $p$ for a prompt, the expected update weights the prompt by $w(p) = 1$ for
# the mean baseline, $1/\sqrt{p(1-p)}$ for GRPO's std normalisation and $1/p$ for MaxRL's
# $(r - \hat p)/\hat p$, the maximum-likelihood weight. Giving hard prompts more weight ought to pay
# off more in pass@k at large k than in pass@1.
#
# **Starter.** Three arms, one per advantage, from the same student. Measured: final pass@1 and
# pass@16 on 100 problems x 16 samples, with the evaluation's own noise (the standard error over the
# 100 problems) as error bars.

# %% tags=["nbval-ignore-output"]
P4_STEPS = 3 if SHORT else 200
P4_EVAL = 20 if SHORT else 100
p4 = lab21.project4(steps=P4_STEPS, seeds=SEEDS, workers=WORKERS, eval_prompts=P4_EVAL)

# %% tags=["nbval-mask-numbers"]
print(lab21.describe_setup(p4, problems=P4_EVAL, samples=16))
print(lab21.summary_table(p4, ["pass@1", "pass@16"], EXPECTED["project4"]))
for arm, runs in p4.items():
    se1 = np.mean([r["evals"]["pass@1_se"][-1] for r in runs])
    se16 = np.mean([r["evals"]["pass@16_se"][-1] for r in runs])
    print(f"{arm:<6} evaluation noise (standard error over problems, mean over seeds): pass@1 ± {se1:.3f}, "
          f"pass@16 ± {se16:.3f}")
_d16 = np.subtract([r["evals"]["pass@16"][-1] for r in p4["maxrl"]], [r["evals"]["pass@16"][-1] for r in p4["mean"]])
print(f"maxrl minus mean, final pass@16: {lab21.seed_spread(_d16)}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
plotting.plot_final(p4, "pass@1", ax=axes[0], expected=EXPECTED["project4"], title="final pass@1 (± eval noise)")
plotting.plot_final(p4, "pass@16", ax=axes[1], expected=EXPECTED["project4"], title="final pass@16 (± eval noise)")
fig.tight_layout()
plotting.save(fig, f"{ART}/project4_maxrl.png")
plt.show()

# %% [markdown]
# **Against the published run.** The arms end at pass@1 0.530, 0.560 and 0.578 (mean, std, MaxRL;
# published 0.55, 0.51 and 0.51) and pass@16 0.880, 0.903 and 0.947 (published 0.89, 0.88 and
# 0.91), from 0.290 and 0.930. MaxRL ends highest at pass@16, as published, by 0.067 over the mean
# baseline with a spread of 0.042 over seeds: the published direction, on three seeds and with the
# evaluation's own standard error near 0.03 (the `±` lines), not yet a clear gap. At pass@1 the
# order is the published one reversed: MaxRL first and the mean baseline last, where the published
# run had the mean baseline first and MaxRL tied last.
#
# **Your job.** Shrink the evaluation noise (`eval_prompts=400`, seeds 0-2 as above), and start from a
# weaker student where more prompts have small $p$: `student={"greedy_at_least": 0.4}` takes an
# earlier snapshot of the SFT run. Does MaxRL's lead at pass@16 grow? **What you should find:** with
# 400 problems the error bars shrink by half; decide whether the gaps between the arms are still
# inside them before you name a winner.

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_writeup_project4", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Write-up of Project 4: 4 points, graded by hand.** Replace the text of the next cell with your
# half page: hypothesis, setup, plot, result, what else could explain it.
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (4 points).**
#
# - **1 point** hypothesis and setup: a hypothesis that the runs can refute; the setup names what
#   was held fixed (checkpoint, budget, prompts x samples, learning rate, evaluation set and its
#   sampling temperature).
# - **1 point** plot: 3 seeds per arm with `eval_prompts=400`: final pass@1 and pass@16 with the
#   evaluation's standard error as bars; every seed visible, not only the mean.
# - **1 point** result: one sentence that the plot supports, with the size of the effect set
#   against the spread between seeds (a gap inside the spread is reported as no clear effect).
# - **1 point** extension and confounders: the weaker student (`greedy_at_least=0.4`); a gap judged
#   against both seed spread and evaluation noise, and the step-size confound (std and MaxRL scale the
#   advantages) named; at least one confounder the runs could not rule
#   out.
#
# Half points are fine. No point for a part that only restates the starter's text.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "writeup_project4", "locked": false, "points": 4, "schema_version": 3, "solution": true, "task": false}
# **Hypothesis.** MaxRL's 1/p weighting improves pass@16 more than the mean and std baselines do, at
# equal or slightly lower pass@1.
#
# **Setup.** The same student, trainer, budget (200 steps of 16 prompts x 8 samples, AdamW lr 3e-4)
# and prompts for all three arms; only the advantage changes; evaluation on 100 problems x 16
# samples at T = 1, as in training; seeds 0, 1, 2 (the setup line above).
#
# **Plot.** Final pass@1 and pass@16 per arm, seeds as dots, the evaluation's standard error as bars.
#
# **Result.** pass@1 ends at 0.530, 0.560 and 0.578 (mean, std, MaxRL) and pass@16 at 0.880, 0.903 and
# 0.947, from 0.290 and 0.930 at the start: the mean and std arms lose a little pass@16 while MaxRL
# gains a little. Against the mean baseline, the hypothesis is supported at pass@16: MaxRL ends 0.067
# above it with a spread of 0.042 over three seeds, more than twice the standard error of that mean.
# Against the std baseline, the hypothesis is inconclusive: MaxRL's 0.947 ± 0.015 and std's 0.903 ±
# 0.038 differ by less than twice the standard error of their difference over three seeds. On pass@1,
# the hypothesis is refuted: MaxRL pays nothing in pass@1 for its pass@16 and ends highest there too,
# above the mean baseline by more than the seeds' noise. That is the published pass@1 order reversed:
# the published run had the mean baseline first and MaxRL tied last (0.55, 0.51 and 0.51).
#
# **Confounders.** The advantage scale changes the effective learning rate (std and MaxRL make
# larger steps), so a gap may be a step-size effect; few hard prompts in the 2-digit distribution.
# Extension to report: 400 evaluation problems and the weaker student.

# %% [markdown]
# ## Project 5: sharpening or expanding
#
# If RL only re-weights answers the base model could already sample, pass@1 rises while pass@k at
# large k stays flat or falls: the trained model becomes more confident on fewer answers. If RL
# teaches new skills, pass@k rises at every k, including on problems outside the training set.
#
# **Starter.** RL from the student for 300 steps, then pass@k for k = 1..64 (64 samples on each of
# 100 problems) before and after, on the 2-digit training distribution and on never-seen 3d+1d.

# %% tags=["nbval-ignore-output"]
P5_STEPS = 3 if SHORT else 300
P5_EVAL = 20 if SHORT else 100
p5 = lab21.project5(steps=P5_STEPS, seeds=SEEDS, workers=WORKERS, eval_prompts=P5_EVAL)

# %% tags=["nbval-mask-numbers"]
print(lab21.describe_setup(p5, problems=P5_EVAL, samples=64))
_e = EXPECTED["project5"]
for arm, runs in p5.items():
    xs = [r["extra"] for r in runs]
    col = lambda which, k, where="in_dist": [x[which][where][k - 1] for x in xs]  # noqa: E731
    print(f"{arm}, mean over seeds {[r['seed'] for r in runs]}:")
    print(f"in distribution: pass@1 {np.mean(col('before', 1)):.3f} -> {np.mean(col('after', 1)):.3f} "
          f"(published {_e['start']['pass@1']} -> {_e['rl']['pass@1']}); pass@64 {np.mean(col('before', 64)):.3f} -> "
          f"{np.mean(col('after', 64)):.3f} (published {_e['start']['pass@64']} -> {_e['rl']['pass@64']})")
    print(f"  spread over seeds: pass@1 after {lab21.seed_spread(col('after', 1))}; pass@64 before "
          f"{lab21.seed_spread(col('before', 64))}, after {lab21.seed_spread(col('after', 64))}")
    print(f"  the curves cross at k = {[x['crossing_k'] for x in xs]}, one per seed (published: between "
          f"{_e['rl']['crossing_k'][0]} and {_e['rl']['crossing_k'][1]}; None = the trained model stays ahead up to k = 64)")
    _mean_curves = [np.mean([x[which]["in_dist"] for x in xs], axis=0) for which in ("before", "after")]
    print(f"  the mean curves (the thick lines of the plot) cross at k = {lab21.crossing_k(*_mean_curves)}")
    print(f"3d+1d: pass@64 {np.mean(col('before', 64, '3d+1d')):.3f} -> {np.mean(col('after', 64, '3d+1d')):.3f}; "
          f"largest pass@k of any k and seed: before {max(max(x['before']['3d+1d']) for x in xs):.3f}, "
          f"after {max(max(x['after']['3d+1d']) for x in xs):.3f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
plotting.plot_pass_at_k(p5, "in_dist", ax=axes[0], title="2-digit problems (trained on)")
plotting.plot_pass_at_k(p5, "3d+1d", ax=axes[1], title="3d+1d (never seen)")
fig.tight_layout()
plotting.save(fig, f"{ART}/project5_sharpen_or_expand.png")
plt.show()

# %% [markdown]
# **Against the published run.** Our student starts at pass@1 0.287 (published 0.31) and pass@64
# 1.000 (published 0.97); after RL its pass@1 is 0.623 (published 0.67) and its pass@64 has fallen
# to 0.940 (published 0.92). The curves cross on every seed, but where varies widely (k = 10, 38 and
# 15), and no seed crosses inside the published 16-32; the thick mean curves of the plot cross at
# k = 14. The two are different numbers (the
# crossing of the averaged curves is not the average of the crossings), and with seeds this far
# apart neither is a precise one. On 3d+1d both models stay at 0 at every k.
#
# **Your job.** Run 1,000 steps (`steps=1000`, on the command line) and find out whether the two
# pass@k curves still cross at the same k. Then add a KL penalty to the reference: the arm
# `"rl+kl"` (`kl_coef=0.05` by default, k3 estimator in the loss). Does it protect pass@64?
# **What you should find:** the printed `crossing_k` of each run, and pass@64 before and after for
# both arms, side by side.

# %% [markdown] nbgrader={"grade": false, "grade_id": "rubric_writeup_project5", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Write-up of Project 5: 4 points, graded by hand.** Replace the text of the next cell with your
# half page: hypothesis, setup, plot, result, what else could explain it.
#
# <!-- BEGIN MARK SCHEME -->
# **Rubric for graders (4 points).**
#
# - **1 point** hypothesis and setup: a hypothesis that the runs can refute; the setup names what
#   was held fixed (checkpoint, budget, prompts x samples, learning rate, evaluation set and its
#   sampling temperature).
# - **1 point** plot: 3 seeds: pass@k against k (log scale) before and after, in distribution and on
#   3d+1d; every seed visible, not only the mean.
# - **1 point** result: one sentence that the plot supports, with the size of the effect set
#   against the spread between seeds (a gap inside the spread is reported as no clear effect).
# - **1 point** extension and confounders: the 1,000-step run and the `rl+kl` arm: does the crossing point
#   move, does the KL penalty protect pass@64; at least one confounder the runs could not rule
#   out.
#
# Half points are fine. No point for a part that only restates the starter's text.
# <!-- END MARK SCHEME -->

# %% [markdown] nbgrader={"grade": true, "grade_id": "writeup_project5", "locked": false, "points": 4, "schema_version": 3, "solution": true, "task": false}
# **Hypothesis.** RL raises pass@1 but not pass@64; the base model catches up at large k.
#
# **Setup.** The shipped student, 300 steps of 16 prompts x 8 samples, AdamW lr 3e-4, no KL term;
# pass@k from 64 samples on 100 fixed problems per set at T = 1, as in training; seeds 0, 1, 2 (the
# setup line above).
#
# **Plot.** pass@k against k (log scale), before and after, mean and spread over seeds, both sets.
#
# **Result.** RL sharpens: in distribution pass@1 goes from 0.287 to 0.623 while pass@64 goes from
# 1.000 to 0.940, and the curves cross at k = 10, 38 and 15 (seeds 0, 1, 2), none of them inside the
# published run's 16 to 32. On pass@1, the hypothesis is supported: it more than doubles. On pass@64,
# the hypothesis is supported: RL does not raise it, the trained model ends below the base model's
# 1.000. On the crossing, the hypothesis is supported: the base model catches up on every seed, though
# where it does moves widely from seed to seed. On 3d+1d every pass@k is 0.000 before and after.
#
# **Confounders.** pass@64 is close to 1 already, so there is little room to expand; one evaluation
# temperature (1) for both models, and the crossing moves with it; 100 problems per set. Extension to report: 1,000 steps and the `rl+kl` arm.
