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
# > Each project takes an afternoon: the starter cells run in a few minutes in all, and the
# > research part (more seeds, an extension) takes 10 to 30 minutes of computer time per project.
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
# to end on TinyLM, and plots it. The starter is where the research begins, not where it ends:
# one seed at a short budget cannot tell an effect from noise. For each project you
#
# 1. run more seeds (at least 3) and decide whether the effect is real,
# 2. try the suggested extension, or one of your own that needs new code,
# 3. write it up in the graded cell at the end of the section (half a page).
#
# **Running longer.** Every experiment is a function in `llmrl.labs.lab21` with `steps`, `seeds`
# and arguments; `workers=2` runs seeds in parallel processes. For long sweeps use the command
# line, which writes JSON results this notebook can load and plot:
#
# ```
# python -m llmrl.labs.lab21 project1 --seeds 0 1 2 3 4 --workers 2
# python -m llmrl.labs.lab21 project2 --arms stylish_w1 stylish_w1.25 stylish_w1.5 stylish_w2
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
# The default budgets below are shorter than the published runs' so that the whole notebook runs
# in a few minutes; the published numbers (printed beside yours) used the full budgets in
# `lab21.PROJECTS`.

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
SEEDS = [0]          # the research part: [0, 1, 2] or more
WORKERS = 1          # parallel processes for several seeds (one thread each)
SHORT = grading_mode()  # the autograder only needs the cells to run
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
# 4 gradient epochs per batch (with one epoch the ratio is exactly 1 and no clip ever binds).
# Measured: per-token entropy, pass@1 and pass@16 against step, and the fraction of tokens each
# bound switches off.

# %% tags=["nbval-ignore-output"]
P1_STEPS = 3 if SHORT else 100
p1 = lab21.project1(steps=P1_STEPS, seeds=SEEDS, workers=WORKERS, eval_prompts=20 if SHORT else 100)

# %% tags=["nbval-mask-numbers"]
print(lab21.summary_table(p1, ["entropy_token_mean_nats", "pass@1", "pass@16"], EXPECTED["project1"]))
print(f"published: entropy starts at {EXPECTED['project1']['start']['entropy_token_mean_nats']} nats/token (150 steps)")
for arm, runs in p1.items():
    c = runs[0]["curve"]
    print(f"{arm:<12} mean clip fraction: upper bound {np.nanmean(np.array(c['clip_fraction_high'], float)):.4f}, "
          f"lower bound {np.nanmean(np.array(c['clip_fraction_low'], float)):.4f}")

# %%
fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
plotting.plot_metric(p1, "entropy_token_mean_nats", where="curve", ax=axes[0], window=10, title="entropy (training batches)")
plotting.plot_metric(p1, "pass@1", ax=axes[1], title="pass@1")
plotting.plot_metric(p1, "pass@16", ax=axes[2], title="pass@16")
plotting.plot_metric(p1, "clip_fraction_high", where="curve", ax=axes[3], window=10,
                     title="share of tokens clipped by the upper bound")
fig.tight_layout()
plotting.save(fig, f"{ART}/project1_clip_higher.png")
plt.show()

# %% [markdown]
# **Your job.** Run seeds 0-4 per arm and report the final entropy as mean and spread. Then make the
# upper bound matter: `lab21.project1(epochs=8, eps_high=0.4, ...)`. Look at
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
# **Setup.** Student checkpoint, 2-digit prompts, 16 prompts x 8 samples, lr 3e-4, 4 epochs, no KL,
# mean-baseline advantages; evaluation on 100 fixed problems x 16 samples at T = 1; seeds 0-4.
#
# **Plot.** Entropy against step, one band per arm over 5 seeds; upper-bound clip fraction beside it.
#
# **Result.** Entropy collapses in every arm and clip-higher ends within seed noise of the symmetric
# clip, because the upper bound switches off only a small share of positive-advantage tokens.
#
# **Confounders.** Tiny vocabulary and 2-4-token answers; one learning rate; the number of epochs
# sets how far the ratio moves; the evaluation set is 100 problems.

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
# **Starter.** Binary, partial credit and stylish with $w = 2$, 200 steps each. Measured: gold
# accuracy (exact match, pass@1 at T = 1), the proxy reward being trained on, and the share of
# answers with 3+ digits among problems whose sum is below 100 ("padded small sums").

# %% tags=["nbval-ignore-output"]
P2_STEPS = 3 if SHORT else 200
p2 = lab21.project2(steps=P2_STEPS, seeds=SEEDS, workers=WORKERS, eval_prompts=20 if SHORT else 100)

# %% tags=["nbval-mask-numbers"]
print(lab21.summary_table(p2, ["gold_pass@1", "proxy_reward_mean", "pad_share_small_sums"], EXPECTED["project2"]))
print("published, stylish w = 1:", EXPECTED["project2"]["stylish_w1"])

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
plotting.plot_metric(p2, "gold_pass@1", ax=axes[0], title="gold accuracy (exact match)")
plotting.plot_metric(p2, "proxy_reward_mean", ax=axes[1], title="the reward being optimised")
plotting.plot_metric(p2, "pad_share_small_sums", where="curve", ax=axes[2], window=10,
                     title="3+ digit answers to sums < 100 (training)")
fig.tight_layout()
plotting.save(fig, f"{ART}/project2_rubric.png")
plt.show()

# %% [markdown]
# **Back of the envelope.** On the 2-digit problems, an honest answer to a sum $\ge 100$ has 3
# digits anyway, so padding changes only the answers to small sums: there it trades the exact-answer
# credit (earned with probability $p$, the current accuracy on small sums) for $w$. Padding pays in
# expectation once $w > p$. Move the sliders: `w` is the rubric weight, `accuracy` the student's
# accuracy on small sums (it starts at the measured value). The right panel shows the trained run
# whose weight is closest to `w`, from this notebook and from any command-line sweep you ran.

# %% tags=["nbval-ignore-output"]
_acc_small = p2["binary"][0]["evals"]["gold_pass@1"][0]
_runs = {**lab21.load_results("project2"), **p2}  # command-line sweeps, then this notebook's runs
lab21.rubric_weight_widget(_runs, accuracy_small=_acc_small)

# %% [markdown]
# **Your job.** (i) Find the weight $w^*$ above which padding wins: run w = 1, 1.25, 1.5 and 2 (the
# command line above), browse them with the slider, and compare with the back-of-envelope threshold.
# Why might training need a larger $w$ than the expectation argument says? (ii) Add a **pitfall**:
# a rubric item with a negative weight that fires on the hack and not on honest answers. Define it
# below and run the `+pitfall` arm; it should remove the padding without costing gold accuracy.
# **What you should find:** a weight somewhere between 1 and 2 where the padded share jumps; with a
# good pitfall item the `+pitfall` arm's padded share drops back to the binary run's level. The cell
# below prints both.

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
# - **1 point** plot: w = 1, 1.25, 1.5 and 2 (3 seeds each): the padded share of small sums and gold
#   accuracy against w; every seed visible, not only the mean.
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
# **Setup.** Same trainer and student as Project 1 (1 epoch); stylish rubric with w in
# {1, 1.25, 1.5, 2}, 3 seeds each; pitfall = -2 when the response has 3+ digits and the true sum has 2.
#
# **Plot.** Final padded share of small sums and gold accuracy against w, with seeds as dots.
#
# **Result.** Padding takes over between w = 1 and w = 2 and the pitfall item brings it back to the
# binary baseline's level at no cost in gold accuracy.
#
# **Confounders.** The threshold depends on how fast accuracy grows (the break-even moves with p);
# the pitfall uses the true answer, which a real grader may not have.

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
P3_STEPS = 3 if SHORT else 150
p3 = lab21.project3(steps=P3_STEPS, seeds=SEEDS, workers=WORKERS, eval_per_bucket=20 if SHORT else 100)

# %% tags=["nbval-mask-numbers"]
print(lab21.summary_table(p3, [f"sampled_accuracy_{b}" for b in ("1d+1d", "2d+2d_ge100", "3d+1d")], EXPECTED["project3"]))
for arm, runs in p3.items():
    u = runs[0]["extra"]["total_usage"]
    print(f"{arm:<13} share of samples: " + ", ".join(f"{b} {u['usage_' + b]:.2f}" for b in BUCKETS)
          + f"   (published 3d+1d: {EXPECTED['project3'].get(arm, {}).get('usage_3d+1d', '-')})")

# %%
fig, axes = plt.subplots(1, 4, figsize=(19, 3.8))
for ax, arm in zip(axes[:3], p3):
    plotting.plot_usage(p3[arm], BUCKETS, ax=ax, title=f"{arm}: bucket usage")
ax = axes[3]
for i, b in enumerate(BUCKETS):
    for j, arm in enumerate(p3):
        vals = [r["evals"][f"sampled_accuracy_{b}"][-1] for r in p3[arm]]
        ax.bar(i + (j - 1) * 0.27, np.mean(vals), width=0.27, color=f"C{j}", label=arm if i == 0 else None)
ax.set_xticks(range(len(BUCKETS)), BUCKETS, rotation=20, fontsize=8)
ax.set_ylabel("final accuracy (T = 1)")
ax.legend(fontsize=8)
fig.tight_layout()
plotting.save(fig, f"{ART}/project3_learnability.png")
plt.show()

# %% [markdown]
# **Your job.** Run 3 seeds and plot usage over time for each. Then give the rare bucket bigger
# groups: `lab21.project3(rare_group=4)` serves each 1d+1d problem as 4 adjacent prompts whose
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
# **Setup.** Student checkpoint, 16 prompts x 8 samples, mean-baseline advantages over each served
# group, bandit temperature 0.1 and EMA 0.1; per-bucket accuracy on 100 fixed problems; 3 seeds.
#
# **Plot.** Stacked bucket usage against step per arm; final per-bucket accuracy with seeds as dots.
#
# **Result.** Learnability puts almost nothing on 3d+1d and matches or beats uniform on the 2-digit
# buckets, while 1d+1d stays unsolved with groups of 8 and improves with groups of 32.
#
# **Confounders.** The bandit's temperature and start values; bucket sizes differ; the 2-digit
# buckets share skills, so improvements transfer between them.

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
P4_STEPS = 3 if SHORT else 150
p4 = lab21.project4(steps=P4_STEPS, seeds=SEEDS, workers=WORKERS, eval_prompts=20 if SHORT else 100)

# %% tags=["nbval-mask-numbers"]
print(lab21.summary_table(p4, ["pass@1", "pass@16"], EXPECTED["project4"]))
for arm, runs in p4.items():
    ev = runs[0]["evals"]
    print(f"{arm:<6} evaluation noise (standard error over problems): pass@1 ± {ev['pass@1_se'][-1]:.3f}, "
          f"pass@16 ± {ev['pass@16_se'][-1]:.3f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
plotting.plot_final(p4, "pass@1", ax=axes[0], expected=EXPECTED["project4"], title="final pass@1 (± eval noise)")
plotting.plot_final(p4, "pass@16", ax=axes[1], expected=EXPECTED["project4"], title="final pass@16 (± eval noise)")
fig.tight_layout()
plotting.save(fig, f"{ART}/project4_maxrl.png")
plt.show()

# %% [markdown]
# **Your job.** Shrink the evaluation noise (`eval_prompts=400`), run 3 seeds, and start from a
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
# **Setup.** Same student, trainer, budget and prompts for all three arms; only the advantage
# changes; evaluation on 400 problems x 16 samples; 3 seeds; repeated from a weaker student.
#
# **Plot.** Final pass@1 and pass@16 per arm, seeds as dots, standard error of the evaluation as bars.
#
# **Result.** The differences between advantages are about the size of the seed and evaluation
# noise at this scale, with MaxRL at best slightly ahead on pass@16.
#
# **Confounders.** The advantage scale changes the effective learning rate (std and MaxRL make
# larger steps), so a gap may be a step-size effect; few hard prompts in the 2-digit distribution.

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
p5 = lab21.project5(steps=P5_STEPS, seeds=SEEDS, workers=WORKERS, eval_prompts=20 if SHORT else 100)

# %% tags=["nbval-mask-numbers"]
_e = EXPECTED["project5"]
for arm, runs in p5.items():
    x = runs[0]["extra"]
    print(f"in distribution: pass@1 {x['before']['in_dist'][0]:.3f} -> {x['after']['in_dist'][0]:.3f} "
          f"(published {_e['start']['pass@1']} -> {_e['rl']['pass@1']}); "
          f"pass@64 {x['before']['in_dist'][-1]:.3f} -> {x['after']['in_dist'][-1]:.3f} "
          f"(published {_e['start']['pass@64']} -> {_e['rl']['pass@64']})")
    print(f"curves cross at k = {x['crossing_k']} (published: between {_e['rl']['crossing_k'][0]} and "
          f"{_e['rl']['crossing_k'][1]}; None = the trained model stays ahead up to k = 64)")
    print(f"3d+1d: pass@64 {x['before']['3d+1d'][-1]:.3f} -> {x['after']['3d+1d'][-1]:.3f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
plotting.plot_pass_at_k(p5, "in_dist", ax=axes[0], title="2-digit problems (trained on)")
plotting.plot_pass_at_k(p5, "3d+1d", ax=axes[1], title="3d+1d (never seen)")
fig.tight_layout()
plotting.save(fig, f"{ART}/project5_sharpen_or_expand.png")
plt.show()

# %% [markdown]
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
# **Setup.** Student checkpoint, 16 x 8, lr 3e-4, no KL, 300 and 1,000 steps; pass@k from 64
# samples on 100 fixed problems per set, T = 1; 3 seeds; then with a k3 KL penalty of 0.05.
#
# **Plot.** pass@k against k (log scale), before and after, mean and spread over seeds, both sets.
#
# **Result.** RL sharpens: pass@1 rises a lot, pass@64 barely moves or falls, and 3d+1d stays near
# zero at every k.
#
# **Confounders.** pass@64 is close to 1 already, so there is little room to expand; temperature 1
# for both models; 100 problems per set.
