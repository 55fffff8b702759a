"""The handouts' calibration of the cached checkpoints (slow: builds the cache on a fresh machine).

Targets (handouts): teacher about 100% greedy; student about 50% greedy and 30% sampled at T=1,
about 2% on 1d+1d, 30-50% on the 2-digit buckets, about 0% on 3d+1d; the lab11/lab19 SFT model
about 80% greedy, 55% at T=1, under 30% at T=2, and RL from it starts near 0.52 sampled accuracy.

Tolerances: accuracies are measured on 1,000 fixed problems (binomial standard error about 1.6
points at p = 0.5), and the snapshots are taken at the first check where greedy accuracy crosses a
threshold, so greedy accuracy lands within a few points of it; sampled rates follow greedy with
the spread seen across seeds (about +-8 points). Each bound below is the target with that margin.
"""

import pytest

from llmrl.addition import BUCKETS, eval_problems
from llmrl.checkpoints import load_checkpoint
from llmrl.evaluation import accuracy
from llmrl.trainer import rl_train

pytestmark = pytest.mark.slow
EVAL = eval_problems(1000)


def test_teacher_is_near_perfect():
    t = load_checkpoint("teacher", progress=False)
    assert accuracy(t, EVAL, 0.0) >= 0.97  # "about 100%"


def test_student_is_half_right():
    s, meta = load_checkpoint("student", progress=False, with_meta=True)
    assert 0.45 <= accuracy(s, EVAL, 0.0) <= 0.65        # about 50% greedy
    assert 0.22 <= accuracy(s, EVAL, 1.0, 1, 0) <= 0.42  # about 30% sampled
    rate = {b: accuracy(s, eval_problems(300, [b], 1), 1.0, 4, 0) for b in BUCKETS}
    assert rate["1d+1d"] <= 0.08                          # about 2%: rare in SFT (1,200 samples, SE ~0.5 pt)
    for b in ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100"):
        assert 0.2 <= rate[b] <= 0.55, (b, rate[b])       # 30-50% on the 2-digit buckets
    assert rate["3d+1d"] <= 0.01                          # never seen in SFT
    assert meta["step"] <= 1200


def test_sft_model_matches_lab11_and_lab19():
    m = load_checkpoint("sft", progress=False)
    assert 0.74 <= accuracy(m, EVAL, 0.0) <= 0.90          # about 80% greedy
    assert 0.45 <= accuracy(m, EVAL, 1.0, 1, 0) <= 0.63    # about 55% at T=1
    assert accuracy(m, EVAL, 2.0, 1, 0) < 0.30             # under 30% at T=2
    h = rl_train(m, steps=5, progress=False)
    # RL starts near 0.52: five steps of 128 samples (SE ~2 pt each) before the policy moves much
    assert 0.42 <= h.series("sampled_accuracy").mean() <= 0.62
