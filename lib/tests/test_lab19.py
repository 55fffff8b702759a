"""Tests of llmrl.labs.lab19: the stored reference runs against the handout, the pieces behind the
experiments (loss wrapper, entropy inputs, summaries) and the widgets' pure functions."""

import math

import numpy as np
import pytest
import torch

from llmrl.labs import lab19
from llmrl.losses import LossBatch, clipped_pg_loss

REF = lab19.load_reference()


# ----------------------------------------------------------------- stored runs vs the handout

def test_reference_has_every_run():
    assert set(REF["hacking"]) == {"0", "0.01", "0.02", "0.05", "gold"}
    assert set(REF["entropy"]) == set(lab19.CLIP_ARMS)
    assert all(len(r["sampled_accuracy"]) == lab19.HACK_SETTINGS["steps"] for r in REF["hacking"].values())
    assert all(len(r["entropy_token_mean_nats"]) == lab19.ENTROPY_SETTINGS["steps"] for r in REF["entropy"].values())
    # stored in the runner's schema: one result per arm and seed
    assert {r["arm"] for r in REF["runs"]} == set(lab19.REFERENCE_ARMS)
    assert all(r["curve"]["step"] == list(range(1, len(r["curve"]["step"]) + 1)) for r in REF["runs"])


def test_proxy_without_kl_hacks():
    s = lab19.hack_summary(REF["hacking"]["0"])
    E = lab19.EXPECTED
    # Accuracy first rises: handout 0.52 -> 0.62. Our SFT checkpoint samples at ~0.45 in the first
    # steps (a different checkpoint), so we ask for a rise of at least 0.08 to a peak within 0.06 of 0.62.
    assert s["accuracy_peak"] - s["accuracy_start"] > 0.08
    assert s["accuracy_peak"] == pytest.approx(E["hack_accuracy_peak"], abs=0.06)
    # The hack: length at the 4-character maximum, accuracy ~0, KL in the double digits (handout ~15;
    # ours ~13-14 with this lr; a 3-nat band), while the proxy reward is above its value at the peak.
    assert s["final_length"] > 3.9
    assert s["final_accuracy"] < 0.03
    assert s["final_kl"] == pytest.approx(E["hack_final_kl"], abs=3.0)
    proxy = np.array(REF["hacking"]["0"]["reward_mean"], dtype=float)
    assert s["final_proxy"] > proxy[:60].mean() + 0.15


def test_kl_penalty_prevents_the_hack():
    k = lab19.hack_summary(REF["hacking"]["0.05"])
    g = lab19.hack_summary(REF["hacking"]["gold"])
    E = lab19.EXPECTED
    # beta = 0.05: no hack (length stays near the SFT model's ~2.6, KL small) and accuracy ~0.75;
    # gold run ~0.8. Both within 0.1: 20-step means of 128 samples vary by ~0.03, and our SFT
    # checkpoint and machine differ from the handout's.
    assert k["final_length"] < 3.0 and k["final_kl"] < 3.0
    assert k["final_accuracy"] == pytest.approx(E["kl005_final_accuracy"], abs=0.1)
    assert g["final_accuracy"] == pytest.approx(E["gold_final_accuracy"], abs=0.1)
    assert g["final_accuracy"] - k["final_accuracy"] < 0.1  # "close to the gold-reward run"


def test_beta_sweep_is_ordered():
    # the leash: the final KL falls as beta grows (0 -> 0.05)
    kls = [lab19.hack_summary(REF["hacking"][b])["final_kl"] for b in ("0", "0.01", "0.02", "0.05")]
    assert kls[0] > kls[-1]
    assert kls[0] > 10


def test_entropy_collapse_and_clip_diagnostic():
    sym, hi, none = (lab19.entropy_summary(REF["entropy"][a]) for a in lab19.CLIP_ARMS)
    E = lab19.EXPECTED
    # handout: 0.35 -> 0.15 in 120 steps under both clipped arms; we start at 0.35 (same SFT entropy,
    # 0.03) and reach ~0.2 (the TOOLCHAIN prototype also stopped at ~0.20): we require a drop of at
    # least 30% and an end within 0.08 of 0.15.
    assert sym["entropy_start"] == pytest.approx(E["entropy_start"], abs=0.03)
    for arm in (sym, hi):
        assert arm["entropy_end"] < 0.7 * arm["entropy_start"]
        assert arm["entropy_end"] == pytest.approx(E["entropy_end_clipped"], abs=0.08)
    assert abs(sym["entropy_end"] - hi["entropy_end"]) < 0.05  # "nearly indistinguishable"
    # the upper clip switches off most rare positive-advantage tokens (handout >90%; we count epochs
    # 2-4 only, where clipping is possible) and few common ones (handout "almost none": < 10%)
    assert sym["late_clip_high_of_positive_rare"] > 0.8
    assert sym["late_clip_high_of_positive_common"] < 0.1


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
    from llmrl.checkpoints import load_checkpoint

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
    with pytest.raises(ValueError, match="beta"):
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


# ----------------------------------------------------------------- widgets (no browser)

def test_sweep_run_picks_the_nearest_beta():
    assert lab19.sweep_run(REF, 0.012) is REF["hacking"]["0.01"]
    assert lab19.sweep_run(REF, 1.0) is REF["hacking"]["0.05"]


def test_beta_figure_and_widget():
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    fig = lab19.beta_figure(REF, 0.02)
    assert "beta = 0.02" in fig._suptitle.get_text()
    assert len(fig.axes) == 4 and len(fig.axes[0].lines) == 3  # beta = 0.02, beta = 0, gold
    # the slider's colours are the notebook plot's: no KL blue (C0), a KL run orange (C1), gold green (C2)
    colour = {ln.get_label(): mcolors.to_hex(ln.get_color()) for ln in fig.axes[0].lines}
    assert colour == {"proxy, beta = 0.02": mcolors.to_hex("C1"), "proxy, no KL": mcolors.to_hex("C0"),
                      "gold reward": mcolors.to_hex("C2")}, colour
    plt.close(fig)
    fig = lab19.beta_figure(REF, 0.0)
    assert {ln.get_label() for ln in fig.axes[0].lines} == {"proxy, no KL", "gold reward"}
    plt.close(fig)
    w = lab19.beta_widget(REF)
    assert list(w.slider.options) == [0.0, 0.01, 0.02, 0.05]
    first = w.image.value
    assert first[:4] == b"\x89PNG"
    w.slider.value = 0.05  # moving the slider redraws the image
    assert w.image.value != first
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
        f"the stored runs start from SFT checkpoint {REF['checkpoint']}, this machine built {here}: another CPU "
        f"took the snapshot at another step. Rebuild them here: python -m llmrl.labs.lab19 reference")


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
