"""The metric vocabulary: every name the RL step, its evaluations and the experiments record.

A name says what it measures, with which estimator and how it was reduced over the batch:

* ``_mean``: the mean over the batch's completions (B = n_prompts x G of them); ``_std``: their
  population standard deviation; ``_token_mean``: the mean over all completion tokens of the batch
  (every token weighs the same, long completions weigh more); ``_sum``: per completion, the sum
  over its tokens, then the mean over completions;
* a KL names its estimator: ``k1`` = log pi - log pi_ref, ``k3`` = e^(-k1) - 1 + k1 (unbiased and
  never negative), ``exact`` = the sum over the whole vocabulary at each visited state;
* ``_nats``: natural-log units; ``frac_`` / ``_fraction`` / ``share``: a proportion in [0, 1];
* ``eval_<name>``: measured on a fixed evaluation set, not on the training batch (a runner result
  keeps these under ``evals`` without the prefix).

``python -m llmrl.rl.metrics`` prints the table that docs/metrics.md holds (a test keeps them equal).
"""

from __future__ import annotations

import re
import sys

# One metric a line: name | recorded by | what it measures; a line that starts with spaces goes on
# with the previous one. ``<...>`` marks a part of the name that varies.
_TABLE = """
step | step | the step number; 0 is the evaluation before the first step
reward_mean | step | the task's reward (before any KL penalty), mean over the batch
reward_std | step | the task's reward, population standard deviation over the batch
reward_<component>_mean | step | one named component of the task's reward (hw4: tag, clean, correct,
    boxed, relaxed), mean over the batch
shaped_reward_mean | step | the reward after the KL penalty folded into it (kl_mode 'reward'), mean over
    the batch; equal to reward_mean without a penalty
sampled_accuracy | step | share of the batch's completions that are exactly right (the task's exact
    match), sampled at the run's temperature
completion_chars_mean | step | characters of a decoded completion (EOS not counted), mean over the batch
completion_tokens_mean | step | tokens the policy chose in a completion (its EOS included), mean over
    the batch
entropy_token_mean_nats | step, eval | exact entropy of the policy's next-token distribution at each
    completion token, mean over the tokens; in a step, under the policy of the first epoch's forward
    passes
kl_to_reference_k1_sum_nats | step | KL to the frozen reference: per completion the sum of k1 over its
    tokens, under the sampling policy; mean over completions (what the labs' KL penalty in the reward
    uses)
kl_to_reference_k3_token_mean_nats | step (hw4) | KL to the reference: k3 of each token under the policy
    being updated (the student's approx_kl_from_logprobs), mean over a minibatch's tokens, then over the
    step's minibatches and epochs
teacher_logprob_token_mean | step (distillation) | the teacher's log-prob of the student's sampled
    tokens, mean over the tokens
advantage_abs_mean | step | absolute advantage, mean over the batch
frac_zero_std_groups | step | share of prompt groups whose G rewards are all equal
frac_zero_advantage_groups | step | share of prompt groups whose advantages are all zero (they give no
    gradient); nan for the distillation losses
loss_mean | step | the loss, mean over the step's minibatches and epochs
grad_norm_mean | step | the gradient norm before clipping, mean over the step's optimizer steps
clip_fraction | step | share of completion tokens whose gradient a clip bound switches off (positive
    advantage and ratio > 1 + eps_high, or negative and ratio < 1 - eps_low), mean over minibatches and
    epochs (TRL's clip_ratio/region_mean)
clip_fraction_high | step | the same, upper bound only
clip_fraction_low | step | the same, lower bound only
clip_high_of_positive | step | share of positive-advantage tokens the upper bound switches off
clip_low_of_negative | step | share of negative-advantage tokens the lower bound switches off
clip_high_of_positive_<rare|common> | step | the same among rare (probability under the sampling policy
    < rare_prob) or common positive-advantage tokens
clip_low_of_negative_<rare|common> | step | the same among rare or common negative-advantage tokens
late_clip_high_of_positive_<rare|common> | lab19 | clip_high_of_positive_<rare|common> counted from the
    second epoch on (in the first the ratio is 1)
step_seconds | step | wall time of the step and its evaluation, seconds (seeds stepping together: the
    step of all of them)
pad_share_small_sums | lab21 Project 2, step and eval | share of completions with 3 or more digits among
    problems whose sum is below 100
usage_<bucket> | lab21 Project 3 | share of the step's completions drawn from a difficulty bucket
sampling_probability_<bucket> | lab21 Project 3 | the prompt sampler's probability of a bucket at the
    step
eval_exact_match | eval (hw4) | greedy decoding on the task's fixed eval set: share exactly right
eval_reward | eval (hw4) | greedy decoding on the task's fixed eval set: reward, mean over problems
greedy_accuracy | eval | greedy decoding: share of the eval problems answered exactly
pass@<k> | eval | unbiased pass@k from n samples per problem at temperature 1, mean over problems
pass@<k>_se | eval | standard error of pass@k over the eval problems
kl_to_teacher_exact_token_mean_nats | eval | exact KL(student || teacher), summed over the vocabulary at
    each state of the student's own samples, mean over tokens
gold_pass@1 | eval, lab21 Project 2 | share of samples exactly right (the gold reward)
proxy_reward_mean | eval, lab21 Project 2 | the rubric being optimised, mean over the samples
sampled_accuracy_<bucket> | eval, lab21 Project 3 | one sample at temperature 1 per problem of a
    bucket's eval set: share exactly right
"""


def _parse(table: str) -> dict[str, tuple[str, str]]:
    rows = []
    for line in table.strip("\n").splitlines():
        if line.startswith(" "):
            rows[-1] += " " + line.strip()
        else:
            rows.append(line)
    out = {}
    for row in rows:
        name, where, what = (part.strip() for part in row.split(" | ", 2))
        out[name] = (where, what)
    return out


#: name -> (where it is recorded, what it measures)
METRICS: dict[str, tuple[str, str]] = _parse(_TABLE)

_PATTERNS = [(re.compile("^" + re.escape(name).replace(re.escape("<rare|common>"), "(rare|common)")
                         .replace(re.escape("<k>"), r"\d+").replace(re.escape("<component>"), r"[A-Za-z0-9]+")
                         .replace(re.escape("<bucket>"), r"[0-9a-z+_]+") + "$"), name) for name in METRICS]


def entry(name: str) -> str:
    """The vocabulary entry that covers ``name`` (``eval_`` prefix allowed); KeyError if none."""
    for candidate in (name, name[len("eval_"):] if name.startswith("eval_") else None):
        if candidate is None:
            continue
        if candidate in METRICS:
            return candidate
        for pattern, key in _PATTERNS:
            if pattern.match(candidate):
                return key
    raise KeyError(f"metric {name!r} is not in llmrl.rl.metrics.METRICS; add it with what it measures")


def markdown_table() -> str:
    lines = ["| name | recorded by | what it measures |", "|---|---|---|"]
    lines += [f"| `{name}` | {where} | {what} |" for name, (where, what) in METRICS.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
