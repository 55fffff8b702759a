"""Tests of llmrl.labs.lab19: the stored reference runs against the handout, the pieces behind the
experiments (loss wrapper, entropy inputs, summaries) and the widgets' pure functions."""

import math

import numpy as np
import pytest
import torch

from llmrl.labs import lab19
from llmrl.losses import LossBatch, clipped_pg_loss

REF = lab19.load_reference()
SEEDS = REF["seeds"]
#: every stored seed's summaries: {beta or "gold": [hack_summary per seed]}, {arm: [entropy_summary per seed]}
HACK = {b: [lab19.hack_summary(r) for r in runs] for b, runs in REF["hacking_seeds"].items()}
ENT = {a: [lab19.entropy_summary(r) for r in runs] for a, runs in REF["entropy_seeds"].items()}


def _each(part, arm, key):
    return np.array([s[key] for s in (HACK if part == "hack" else ENT)[arm]], dtype=float)


# ----------------------------------------------------------------- stored runs vs the handout
#
# The published numbers are one run (seed 0) of the reference solution on its own model. Ours are
# five seeds (0-4) of each run, trained together, from the shipped SFT model. Each test asks for
# the published effect on every seed where the effect is a direction (longer, lower, above), and
# compares the published values with seed 0 or with the mean over the seeds where they are levels;
# the measured values of the five seeds are in the comments.

def test_reference_has_every_run():
    assert set(REF["hacking"]) == {"0", "0.01", "0.02", "0.05", "gold"}
    assert set(REF["entropy"]) == set(lab19.CLIP_ARMS)
    assert all(len(r["sampled_accuracy"]) == lab19.HACK_SETTINGS["steps"] for r in REF["hacking"].values())
    assert all(len(r["entropy_token_mean_nats"]) == lab19.ENTROPY_SETTINGS["steps"] for r in REF["entropy"].values())
    # stored in the runner's schema: one result per arm and seed, seeds 0-4 of every arm
    assert SEEDS == list(lab19.REFERENCE_SEEDS)
    assert {r["arm"] for r in REF["runs"]} == set(lab19.REFERENCE_ARMS)
    assert sorted((r["arm"], r["seed"]) for r in REF["runs"]) == sorted(
        (a, s) for a in lab19.REFERENCE_ARMS for s in SEEDS)
    assert all(len(runs) == len(SEEDS) for part in ("hacking_seeds", "entropy_seeds") for runs in REF[part].values())
    assert all(r["curve"]["step"] == list(range(1, len(r["curve"]["step"]) + 1)) for r in REF["runs"])
    # the seeds are different runs (their own prompts and samples), not copies of one
    acc = [tuple(r["sampled_accuracy"][:20]) for r in REF["hacking_seeds"]["0"]]
    assert len(set(acc)) == len(SEEDS)


def test_proxy_without_kl_hacks():
    E = lab19.EXPECTED
    length, acc, kl = (_each("hack", "0", k) for k in ("final_length", "final_accuracy", "final_kl"))
    gold = _each("hack", "gold", "final_accuracy")
    leashed = _each("hack", "0.05", "final_length")
    # Every seed pads its answers: longer than every beta = 0.05 run (measured 3.996-4.0 against
    # 2.57-2.63; the SFT model writes 2.6 characters), KL to SFT above 3 nats (14.3-16.0; leashed
    # runs below 0.5) and accuracy at least 0.15 below its own seed's gold run (gaps 0.79-0.81;
    # a 20-step mean of 128 samples varies by ~0.03), while the proxy reward climbs by more than
    # 0.15 over its first 60 steps (0.25-0.30; a 20-step mean varies by ~0.02).
    assert length.min() > leashed.max() + 0.2, (length, leashed)
    assert kl.min() > 3.0, kl
    assert (gold - acc).min() > 0.15, (gold, acc)
    for seed, run, summary in zip(SEEDS, REF["hacking_seeds"]["0"], HACK["0"]):
        proxy = np.array(run["reward_mean"], dtype=float)
        assert summary["final_proxy"] > proxy[:60].mean() + 0.15, seed
    # The complete hack (every response at the 4-character maximum, accuracy ~0, KL in the double
    # digits; published: 0.0, 4.0, ~15), on at least 4 of the 5 seeds (lab19.HACK_DONE; the sft model's
    # search required it, docs/lab19-calibration.md): measured on all 5 (length 3.996-4.0, accuracy at
    # most 0.0004), with KL within 3 nats of the published 15 on those (14.3-16.0).
    full = np.array([lab19.hack_completed(h) for h in HACK["0"]])
    assert full.sum() >= 4, (length, acc)
    assert np.all(np.abs(kl[full] - E["hack_final_kl"]) < 3.0), kl
    # Accuracy first rises (published 0.52 -> 0.62 around step 50): over steps 41-60, a fixed window,
    # the mean over the seeds is more than 0.03 above its first 10 steps (measured 0.572 -> 0.635; one
    # seed's rise is -0.01 to +0.13, so the mean's standard error is ~0.03) and within 0.06 of 0.62.
    start, mid = _each("hack", "0", "accuracy_start"), _each("hack", "0", "accuracy_mid")
    assert mid.mean() - start.mean() > 0.03, (start, mid)
    assert mid.mean() == pytest.approx(E["hack_accuracy_around_50"], abs=0.06)


def test_kl_penalty_prevents_the_hack():
    E = lab19.EXPECTED
    length, kl, acc = (_each("hack", "0.05", k) for k in ("final_length", "final_kl", "final_accuracy"))
    gold = _each("hack", "gold", "final_accuracy")
    # beta = 0.05, every seed: no padding (length below 2.8, the SFT model's 2.6 plus noise; measured
    # 2.57-2.63, padded runs >= 3.99) and KL below 1 nat (0.41-0.50), and within 0.1 of its own
    # seed's gold run ("close to the gold-reward run"; measured within 0.03).
    assert length.max() < 2.8 and kl.max() < 1.0, (length, kl)
    assert np.abs(gold - acc).max() < 0.1, (gold, acc)
    # Levels, on the mean over the seeds: published ~0.75 and ~0.8, ours 0.79 and 0.80; within 0.1
    # (another model and machine than the published one; the seeds' means vary by ~0.01).
    assert acc.mean() == pytest.approx(E["kl005_final_accuracy"], abs=0.1)
    assert gold.mean() == pytest.approx(E["gold_final_accuracy"], abs=0.1)


def test_beta_sweep_is_ordered():
    # the leash: the final KL falls as beta grows (0 -> 0.01 -> 0.02 -> 0.05) on the mean over the
    # seeds (measured 15.0, 3.4, 0.69, 0.46), and on every seed beta = 0 ends with more KL than
    # beta = 0.05 by more than 2 nats (13.9-15.5). Single seeds need not be ordered in between:
    # at beta = 0.01 seed 3 pads (KL 7.3) while seed 2 does not (0.9).
    kls = [_each("hack", b, "final_kl") for b in ("0", "0.01", "0.02", "0.05")]
    means = [k.mean() for k in kls]
    assert means == sorted(means, reverse=True), means
    assert (kls[0] - kls[-1]).min() > 2.0, kls
    assert means[0] > 5.0, means


def test_entropy_collapse_and_clip_diagnostic():
    E = lab19.EXPECTED
    start = {a: _each("ent", a, "entropy_start") for a in lab19.CLIP_ARMS}
    end = {a: _each("ent", a, "entropy_end") for a in lab19.CLIP_ARMS}
    # Published: 0.35 -> 0.15 in 120 steps under both clipped arms. We start lower, at 0.287 (seed mean;
    # the seeds 0.28-0.29: the sft model chosen for the end level and the hack is sharper at T = 1 than the
    # published one; docs/lab19-calibration.md), and end at 0.173 (0.16-0.19), within 0.03 of 0.15 (the
    # search's gate: docs/lab19-calibration.md). Every seed of both clipped arms loses at least 30% of its
    # entropy (measured 34-45%), the seed mean at least 35% (40%).
    assert 0.25 <= start["symmetric"].mean() <= E["entropy_start"], start["symmetric"]
    for arm in ("symmetric", "clip-higher"):
        assert (end[arm] / start[arm]).max() < 0.7, (arm, end[arm], start[arm])
        assert end[arm].mean() < 0.65 * start[arm].mean()
    assert 0.5 * (end["symmetric"].mean() + end["clip-higher"].mean()) == pytest.approx(
        E["entropy_end_clipped"], abs=0.03)
    # "nearly indistinguishable": the two clipped arms' mean final entropies differ by less than two
    # standard errors of their difference over the seeds (measured 0.005 against 2 x 0.005): no clear
    # effect at this scale, and less than 0.05 in any case.
    a, b = end["symmetric"], end["clip-higher"]
    se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    assert abs(a.mean() - b.mean()) < max(2 * se, 1e-3) and abs(a.mean() - b.mean()) < 0.05, (a, b)
    # without an upper clip entropy stays higher (published 0.19 against 0.15): on the mean over the
    # seeds (measured 0.216 against 0.173) and on each seed against the same seed's clipped arms
    # (one no-upper-clip seed, 0.195, is below another seed's clipped 0.188: seeds differ by ~0.02)
    assert end["no upper clip"].mean() > max(a.mean(), b.mean()) + 0.02, end
    assert np.all(end["no upper clip"] > np.maximum(a, b)), end
    # the upper clip switches off most rare positive-advantage tokens (published >90%; we count
    # epochs 2-4 only, where clipping is possible: 0.86-0.90 on every seed) and few common ones
    # (published "almost none": below 10%, measured 0.04-0.05)
    assert _each("ent", "symmetric", "late_clip_high_of_positive_rare").min() > 0.8
    assert _each("ent", "symmetric", "late_clip_high_of_positive_common").max() < 0.1


def test_part_values_give_every_seed_and_the_report_their_spread():
    p2, p3 = lab19.part2_values(REF), lab19.part3_values(REF)
    assert set(p2) | set(p3) <= set(lab19.EXPECTED)
    assert all(len(v) == len(SEEDS) for v in {**p2, **p3}.values())
    assert p2["hack_final_kl"] == [s["final_kl"] for s in HACK["0"]]
    report = lab19.expected_report({**p2, **p3})
    assert report.count(f"({len(SEEDS)} seeds)") == len(p2) + len(p3)
    m = lab19.measured(REF)
    assert m["hack_final_kl"] == pytest.approx(np.mean(p2["hack_final_kl"]))


# ----------------------------------------------------------------- pieces

def _batch(lp, old, adv, mask, eps_low=0.2, eps_high=0.2):
    return LossBatch(logprobs=lp, logits=torch.zeros(*lp.shape, 3), old_logprobs=old, mask=mask,
                     advantages=adv, rewards=torch.zeros(len(adv)), eps_low=eps_low, eps_high=eps_high)


def test_late_clip_stats_skip_the_first_epoch():
    lp = torch.log(torch.tensor([[0.9, 0.2]]))
    old = torch.log(torch.tensor([[0.5, 0.1]]))  # ratios 1.8 (common) and 2.0 (rare), both > 1.2
    b = _batch(lp.clone().requires_grad_(), old, torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool))
    _, st = clipped_pg_loss(b)
    assert st["clip_high_of_positive_rare"] == 1.0 and st["clip_high_of_positive_common"] == 1.0
    first = lab19.late_clip_stats(0, st)  # the step's hook gets the epoch index with the stats
    assert set(first) == {"late_clip_high_of_positive_rare", "late_clip_high_of_positive_common"}
    assert all(math.isnan(v) for v in first.values())
    assert lab19.late_clip_stats(1, st) == {"late_clip_high_of_positive_rare": 1.0,
                                             "late_clip_high_of_positive_common": 1.0}


def test_entropy_inputs_mask_matches_library():
    from llmrl.sft.checkpoints import load_checkpoint

    model = load_checkpoint("sft", progress=False)
    logits, mask, roll = lab19.entropy_inputs(model, n_prompts=16)
    assert logits.shape[:2] == mask.shape == roll.tokens.shape
    assert int(mask.sum()) == int(roll.response_mask.sum())
    assert not mask[:, :5].any()  # prompt columns never count

    def ent(lg, m):
        lp = torch.log_softmax(lg, -1)
        return (-(lp.exp() * lp).sum(-1))[m].mean()

    yours, lib = lab19.policy_entropy(model, ent, n_prompts=16)
    assert yours == pytest.approx(lib, abs=1e-5)


def test_hack_summary_on_a_made_up_run():
    acc = [0.5] * 20 + [0.7] * 20 + [0.0] * 40
    s = lab19.hack_summary({"sampled_accuracy": acc, "completion_chars_mean": [4.0] * 80,
                            "kl_to_reference_k1_sum_nats": [15.0] * 80, "reward_mean": [1.4] * 80})
    assert s["accuracy_start"] == 0.5 and s["accuracy_peak"] == pytest.approx(0.7)
    assert 30 <= s["peak_step"] <= 40 and s["final_accuracy"] == 0.0 and s["final_kl"] == 15.0


def test_argument_checks():
    with pytest.raises(ValueError, match="kl_coef"):
        lab19.hacking_run(-0.1)
    with pytest.raises(ValueError, match="reward"):
        lab19.hacking_run(0.0, reward="silver")
    with pytest.raises(ValueError, match="arm"):
        lab19.entropy_run("asymmetric")
    with pytest.raises(ValueError, match="beta"):
        lab19.sweep_run(REF, -1.0)


def test_hacking_run_takes_a_reward_function():
    """The notebook's "things to try" train against their own variant of the proxy."""
    calls = []

    def reward(responses, answers):
        calls.append(len(responses))
        return torch.tensor([float(len(r)) for r in responses])

    run = lab19.hacking_run(0.0, reward=reward, steps=1, progress=False)
    assert calls and calls[0] == 16 * 8, calls  # one step: 16 prompts x 8 samples scored by our function
    assert lab19.as_series(run)["reward_mean"][0] == pytest.approx(lab19.as_series(run)["completion_chars_mean"][0], abs=1e-5)


def test_expected_report_lists_both_numbers():
    text = lab19.expected_report({"gao_alpha": 1.07, "hack_peak_step": 120})
    assert "gao_alpha" in text and "1.070" in text and "1.1" in text and "hack_peak_step" in text
    # one value per seed: mean ± sample standard deviation, and how many seeds
    text = lab19.expected_report({"hack_final_kl": [14.0, 16.0, 15.0], "gold_final_accuracy": [0.8]})
    assert "15.000 ± 1.000 (3 seeds)" in text and "published     15.0" in text
    assert "0.800   published" in text  # one seed: the plain number
    assert "63.0 ± 17.0 (2 seeds)" in lab19.expected_report({"hack_peak_step": [51, 75]})  # steps: one decimal


# ----------------------------------------------------------------- widgets (no browser)

def test_sweep_run_picks_the_nearest_beta():
    assert lab19.sweep_run(REF, 0.012) is REF["hacking"]["0.01"]
    assert lab19.sweep_run(REF, 1.0) is REF["hacking"]["0.05"]


def test_beta_figure_and_widget():
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    n = len(SEEDS)
    fig = lab19.beta_figure(REF, 0.02)
    title = fig._suptitle.get_text()
    assert "beta = 0.02" in title and f"({n} seeds)" in title and "±" in title  # finals as mean ± sd
    # every seed drawn: per run a labelled mean line and n thin unlabelled seed lines (and a band)
    assert len(fig.axes) == 4 and len(fig.axes[0].lines) == 3 * (n + 1)
    assert len(fig.axes[0].collections) == 3
    # the slider's colours are the notebook plot's: no KL blue (C0), a KL run orange (C1), gold green (C2)
    colour = {ln.get_label(): mcolors.to_hex(ln.get_color()) for ln in fig.axes[0].lines
              if not ln.get_label().startswith("_")}
    assert colour == {f"proxy, beta = 0.02 (n={n})": mcolors.to_hex("C1"), f"proxy, no KL (n={n})": mcolors.to_hex("C0"),
                      f"gold reward (n={n})": mcolors.to_hex("C2")}, colour
    # the title's numbers are the seeds' mean ± sample standard deviation
    kl = lab19.mean_sd([s["final_kl"] for s in HACK["0.02"]])
    assert f"KL {kl[0]:.1f} ± {kl[1]:.1f} nats" in title, title
    plt.close(fig)
    fig = lab19.beta_figure(REF, 0.0)
    assert {ln.get_label() for ln in fig.axes[0].lines if not ln.get_label().startswith("_")} == {
        f"proxy, no KL (n={n})", f"gold reward (n={n})"}
    plt.close(fig)
    w = lab19.beta_widget(REF)
    assert list(w.slider.options) == [0.0, 0.01, 0.02, 0.05]
    first = w.image.value
    assert first[:4] == b"\x89PNG"
    w.slider.value = 0.05  # moving the slider redraws the image
    assert w.image.value != first
    w.slider.value = 0.0  # and back: the first drawing again
    assert w.image.value == first
    plt.close("all")


def test_bon_figure_and_widget_redraw():
    import matplotlib.pyplot as plt

    # (a redraw takes ~0.3 s on a quiet machine; not timed here, the shared CI machine is noisy)
    fig = lab19.bon_figure(1.0, 1.0)
    assert "peaks at best-of-" in fig.axes[0].get_title()
    plt.close(fig)
    fig = lab19.bon_figure(0.0, 1.0)
    assert "never turns down" in fig.axes[0].get_title()
    plt.close(fig)
    w = lab19.bon_widget()
    assert (w.b.description, w.sigma.description) == ("b (length bias)", "sigma (noise)")
    first = w.image.value
    w.b.value = 0.0
    assert w.image.value[:4] == b"\x89PNG" and w.image.value != first
    plt.close("all")


# ----------------------------------------------------------------- the code reproduces the stored runs

def _same_checkpoint():
    here = lab19.start_checkpoint()
    assert REF["checkpoint"] == here, (
        f"the stored runs start from SFT checkpoint {REF['checkpoint']}, the library ships {here}: the shipped "
        f"models were rebuilt without the stored runs. Rebuild them: python -m llmrl.labs.lab19 reference")


@pytest.mark.slow
def test_hacking_run_reproduces_reference_start():
    # Same seed and code: the first steps match the stored run (torch CPU is deterministic with one
    # thread; a different CPU may differ in the last bits, hence 1e-3 on 10-step means).
    _same_checkpoint()
    h = lab19.hacking_run(0.05, steps=10, progress=False)
    for k in ("shaped_reward_mean", "kl_to_reference_k1_sum_nats", "sampled_accuracy"):
        ref = np.array(REF["hacking"]["0.05"][k][:10], dtype=float)
        assert h.series(k).mean() == pytest.approx(ref.mean(), abs=1e-3), k


@pytest.mark.slow
def test_entropy_run_reproduces_reference_start_and_takes_student_loss():
    calls = []

    def my_loss(batch):
        calls.append(1)
        return clipped_pg_loss(batch)[0]  # a scalar only: the wrapper adds the diagnostics

    _same_checkpoint()
    h = lab19.entropy_run("symmetric", policy_loss_fn=my_loss, steps=3, progress=False)
    assert len(calls) == 3 * lab19.ENTROPY_SETTINGS["epochs"]
    ref = np.array(REF["entropy"]["symmetric"]["entropy_token_mean_nats"][:3], dtype=float)
    assert h.series("entropy_token_mean_nats") == pytest.approx(ref, abs=1e-4)
    assert "late_clip_high_of_positive_rare" in h.names


def test_command_line_runs_a_short_hack(capsys):
    import json

    lab19.main(["hack", "--beta", "0.02", "--steps", "2", "--advantage", "std"])
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"accuracy_start", "final_kl", "final_length"}
    with pytest.raises(SystemExit):
        lab19.main(["entropy", "--arm", "nonsense"])


def test_smoothing_is_a_nan_aware_trailing_mean():
    from llmrl import plotting

    y = [1.0, None, 3.0, 5.0, float("nan"), float("nan"), float("nan"), 7.0]
    # partial windows at the start; NaN skipped; a window of NaN only stays NaN
    got = plotting.smooth(y, 3)
    want = [1.0, 1.0, 2.0, 4.0, 4.0, 5.0, float("nan"), 7.0]
    assert np.allclose(got, want, equal_nan=True)
    # lab19's: NaN until the window is full, then the same numbers
    assert np.allclose(lab19.smooth(y, 3), [float("nan")] * 2 + want[2:], equal_nan=True)
    assert np.array_equal(plotting.smooth([2.0, 4.0], 1), [2.0, 4.0])


def test_notebook_runs_use_the_students_functions_and_the_checks_catch_a_wrong_one():
    # The notebook trains parts 2 and 3 on the student's functions (a wrong Task 2 must not
    # show the reference curve). Four steps of seed 0: the reference code's functions match the
    # stored runs (check passes); a KL penalty with the wrong sign and a loss without the clip give
    # other numbers on the same seed, and the checks say so.
    def kl_added(rewards, logprobs, ref_logprobs, mask, beta):
        return rewards + beta * torch.where(mask, logprobs - ref_logprobs, torch.zeros_like(logprobs)).sum(1)

    def unclipped(batch):
        ratio = torch.exp(batch.logprobs - batch.old_logprobs)
        m = batch.mask.float()
        return -(ratio * batch.advantages[:, None] * m).sum() / m.sum()

    right = lab19.part2_runs(None, seeds=[0], steps=4)
    assert set(right) == set(lab19.PART2_ARMS) and all(len(r) == 1 for r in right.values())
    assert lab19.check_part2(right, REF, quiet=True)
    wrong = lab19.part2_runs(kl_added, seeds=[0], steps=4)
    assert not lab19.check_part2(wrong, REF, quiet=True)
    # the no-KL and gold runs never call the penalty (beta = 0): only beta = 0.05 moves
    assert wrong["0"].series("shaped_reward_mean").tolist() == right["0"].series("shaped_reward_mean").tolist()
    # with the stored runs at hand, the beta = 0 arms (no student function in them) are read, not
    # trained: the stored series of the same seed, cut to the steps asked for; they equal the
    # trained ones above (the same code and seed)
    read = lab19.part2_runs(kl_added, seeds=[0, 2], steps=4, stored=REF)
    assert read["0"][1] == {k: v[:4] for k, v in REF["hacking_seeds"]["0"][2].items()}
    for key in ("0", "gold"):
        np.testing.assert_allclose(read[key][0]["shaped_reward_mean"], right[key].series("shaped_reward_mean")[0],
                                   atol=1e-5)  # the stored values have five decimals
    assert not lab19.check_part2(read, REF, quiet=True)  # beta = 0.05 still trains on the given function
    runs3 = lab19.part3_runs(unclipped, seeds=[0], steps=4)
    assert set(runs3) == set(lab19.CLIP_ARMS) and runs3["symmetric"].policies is not None
    assert not lab19.check_part3(runs3, REF, quiet=True)
    assert lab19.check_part3(lab19.part3_runs(None, seeds=[0], steps=4), REF, quiet=True)


def test_expected_report_prints_the_notes_of_the_numbers_we_could_not_match():
    text = lab19.expected_report({"exact_gold_gain_n3000": -0.19, "gao_alpha": 1.06})
    lines = text.splitlines()  # in the order of EXPECTED: alpha first
    assert lines[0].startswith("gao_alpha") and lines[1].startswith("exact_gold_gain_n3000")
    assert lines[2].strip().startswith("note: differs") and len(lines) > 3
    assert "note" not in lab19.expected_report({"exact_gold_gain_n3000": -0.19}, notes={})
