"""Tests of llmrl.labs.lab11: lab11's experiments (against the handout's numbers), plots and widgets."""


import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from llmrl import toylm
from llmrl.addition import EOS, PROMPT_LEN, Problems, eval_problems
from llmrl.sft.checkpoints import load_checkpoint
from llmrl.labs import lab11
from llmrl.sampling import generate


@pytest.fixture(scope="module")
def sft():
    return load_checkpoint("sft", progress=False)


@pytest.fixture(scope="module")
def sweep(sft):
    return lab11.temperature_sweep(sft)


@pytest.fixture(scope="module")
def kl(sft):
    return lab11.kl_estimates(sft)


@pytest.fixture(scope="module")
def front():
    return lab11.frontier_data()


# ---------------------------------------------------------------- reference task functions

def test_reference_response_logprobs_shift_on_the_hand_example():
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3], [0.2, 0.1, 0.7], [0.4, 0.4, 0.2]])
    logits = (probs.log() + 1.0).unsqueeze(0)
    out = lab11.reference_response_logprobs(logits, torch.tensor([[0, 2, 1, 2]]), 2)
    torch.testing.assert_close(out, torch.tensor([[0.6, 0.7]]).log())


def test_reference_sequence_logprob_ignores_minus_inf_padding():
    lp = torch.tensor([[-1.0, -float("inf")], [-1.0, -2.0]])
    out = lab11.reference_sequence_logprob(lp, torch.tensor([[True, False], [True, True]]))
    torch.testing.assert_close(out, torch.tensor([-1.0, -3.0]))


def test_reference_kl_estimators():
    lp, ref = torch.tensor([np.log(0.5)]), torch.tensor([np.log(0.25)])
    k1, k2, k3 = lab11.reference_kl_estimators(lp.float(), ref.float())
    l = np.log(2)
    assert k1.item() == pytest.approx(l, rel=1e-6)
    assert k2.item() == pytest.approx(l * l / 2, rel=1e-6)
    assert k3.item() == pytest.approx(0.5 - 1 + l, rel=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k1_and_k3_are_unbiased_and_k2_is_not(seed):
    """The estimators' published properties, on a 3-token example where the KL is known exactly:
    pi = (0.5, 0.3, 0.2), pi_ref = (0.2, 0.3, 0.5), 200,000 tokens drawn from pi. The sampling error
    of the mean is below 1% of the KL (k1's spread over tokens is the largest, s.e. 0.0022 against
    a KL of 0.275), so 2% separates "unbiased" from k2's bias (7%, measured on seeds 0-2)."""
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    exact = float((p * (p / q).log()).sum())
    idx = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(seed))
    k1, k2, k3 = lab11.reference_kl_estimators(p.log()[idx], q.log()[idx])
    assert abs(float(k1.mean()) / exact - 1) < 0.02 and abs(float(k3.mean()) / exact - 1) < 0.02
    assert abs(float(k2.mean()) / exact - 1) > 0.05
    assert float(k3.min()) >= 0.0  # and k3 is never negative


def test_response_logprobs_send_no_gradient_to_the_prompt():
    """Only the response is scored: the logits of every prompt column but the last (which predicts the
    first response token) get exactly zero gradient."""
    g = torch.Generator().manual_seed(0)
    P, T, V = 4, 9, 15
    logits = torch.randn(3, T, V, generator=g, requires_grad=True)
    tokens = torch.randint(0, V, (3, T), generator=g)
    lab11.reference_response_logprobs(logits, tokens, P).sum().backward()
    assert float(logits.grad[:, :P - 1].abs().max()) == 0.0
    assert float(logits.grad[:, P - 1:-1].abs().min(dim=-1).values.min()) >= 0.0
    assert float(logits.grad[:, P - 1:-1].abs().sum()) > 0.0


def test_distinct_answers_count_only_well_formed_answers():
    """A malformed sample ('8+', '_5', '', '1=2') is no answer: 8 samples with two numbers and four
    malformed ones give 2 distinct answers, not 6."""
    from llmrl.addition import is_answer

    assert [is_answer(x) for x in ("85", "085", "8", "", "8+", "_5", "^", "1=2", "٣")] == [
        True, True, True, False, False, False, False, False, False]
    group = ["85", "85", "86", "8+", "_5", "", "85", "1=2"]
    assert lab11._distinct_per_group(group + ["7"] * 8, 8).tolist() == [2.0, 1.0]


# ---------------------------------------------------------------- generation with a custom sampler

def test_generate_with_sampler_defaults_to_the_library(sft):
    p = eval_problems(10)
    a = lab11.generate_with_sampler(sft, p, 4, 1.0, 3)
    b = generate(sft, p, 4, 1.0, 3)
    assert a.responses == b.responses


def test_generate_with_sampler_uses_the_sampler_and_leaves_the_library_alone(sft):
    import llmrl.sampling as s
    original = s.sample_token
    calls = []

    def always_eos(logits, temperature, generator=None):
        calls.append(temperature)
        return torch.full((logits.shape[0],), EOS, dtype=torch.long)
    r = lab11.generate_with_sampler(sft, eval_problems(5), 2, 0.7, 0, always_eos)
    assert r.responses == [""] * 10 and calls == [0.7]
    assert s.sample_token is original

    def broken(logits, temperature, generator=None):
        return torch.zeros(3, dtype=torch.long)  # wrong shape
    with pytest.raises(ValueError, match="sampler"):
        lab11.generate_with_sampler(sft, eval_problems(5), 2, 1.0, 0, broken)
    assert s.sample_token is original
    with pytest.raises(TypeError, match="sampler"):
        lab11.generate_with_sampler(sft, eval_problems(5), 2, 1.0, 0, sampler=lambda l, t, g=None: l.argmax(-1).float())
    with pytest.raises(TypeError, match="sampler"):
        lab11.generate_with_sampler(sft, eval_problems(5), sampler="argmax")


# ---------------------------------------------------------------- experiment 1

def test_temperature_sweep_shapes_and_greedy_is_one_answer(sft):
    s = lab11.temperature_sweep(sft, (0.0, 1.0), n_problems=12, n_samples=4)
    assert s["accuracy"].shape == (2,) and s["distinct_answers"].shape == (2,)
    assert s["distinct_answers"][0] == 1.0
    assert 1.0 <= s["distinct_answers"][1] <= 4.0
    with pytest.raises(ValueError, match="temperature"):
        lab11.temperature_sweep(sft, (-1.0,), n_problems=2)
    with pytest.raises(ValueError, match="n_samples"):
        lab11.temperature_sweep(sft, (1.0,), n_samples=0)


def test_temperature_sweep_over_seeds_is_the_mean_of_one_sweep_per_seed(sft, tmp_path):
    import matplotlib.pyplot as plt

    one = {s: lab11.temperature_sweep(sft, (0.0, 1.5), n_problems=12, n_samples=4, seed=s) for s in (0, 3)}
    both = lab11.temperature_sweep_seeds(sft, (0.0, 1.5), seeds=(0, 3), n_problems=12, n_samples=4)
    assert both["seeds"] == [0, 3] and both["accuracy_seeds"].shape == (2, 2)
    for j, s in enumerate((0, 3)):  # seed s is exactly temperature_sweep(seed=s): the same numbers as reproduce's
        assert np.array_equal(both["accuracy_seeds"][j], one[s]["accuracy"])
        assert np.array_equal(both["distinct_seeds"][j], one[s]["distinct_answers"])
    assert np.allclose(both["accuracy"], (one[0]["accuracy"] + one[3]["accuracy"]) / 2)
    assert both["accuracy_std"][0] == 0.0  # greedy decoding does not depend on the seed
    assert not np.array_equal(one[0]["accuracy"], one[3]["accuracy"]) or not np.array_equal(
        one[0]["distinct_answers"], one[3]["distinct_answers"])  # at T = 1.5 the seeds draw different samples
    fig = lab11.plot_temperature_sweep(both, path=tmp_path / "sweep.png")
    labels = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
    plt.close(fig)
    assert "accuracy, each of seeds 0, 3" in labels and "accuracy, mean" in labels  # every seed drawn
    with pytest.raises(ValueError, match="seed"):
        lab11.temperature_sweep_seeds(sft, (1.0,), seeds=())


def test_frontier_readings_are_the_curves_values(front):
    read = lab11.frontier_readings(front)
    hack, worked = read["hack"], read["worked"]
    assert hack["peak"] == front["hack"]["peak"]
    assert hack["smallest_beta"]["beta"] == front["hack"]["optimum"]["beta"].min()
    assert hack["smallest_beta"]["reward"] > hack["peak"]["reward"]  # the proxy keeps climbing past the peak
    assert hack["smallest_beta"]["true_reward"] < hack["peak"]["true_reward"]  # the true reward turns down
    assert worked["cold_T"] == front["worked"]["temperature"]["temperature"].min()
    assert worked["reward_cold"] < worked["reward_T1"]  # cooling moves "worked" toward its reward-0 response


@pytest.mark.slow
def test_experiment1_matches_the_handout(sweep):
    E = lab11.EXPECTED
    # The sft model is the shipped one (step 395 of the ReLU run of seed 1, chosen by lab19_calibration's
    # recorded search, docs/lab19-calibration.md). It is fixed, so these numbers do not move with the
    # machine's rounding beyond a near-tie or two (a greedy answer flips only where two logits tie to
    # ~1e-6; a sampled one only where its uniform draw lies within ~1e-6 of a boundary of the cumulative
    # distribution). The bounds are therefore about the published "about": greedy 0.795 here on these
    # 200 problems (0.779 on the 1,000 of its calibration): +-0.05 is 1.8 binomial s.e. at n = 200.
    assert abs(lab11.sweep_value(sweep, "accuracy", 0.0) - E["greedy_accuracy"]) <= 0.05
    # T = 1: "about 55%"; 0.576 here (1,600 samples, s.e. 0.012). +-0.08 allows for the snapshot's
    # calibration (how sharp the SFT model is varies from step to step: 0.52-0.57 among its neighbours).
    assert abs(lab11.sweep_value(sweep, "accuracy", 1.0) - E["accuracy_T1"]) <= 0.08
    # T = 2: a hard bound ("below 30%"); 0.271 measured.
    assert lab11.sweep_value(sweep, "accuracy", 2.0) < E["accuracy_T2_below"]
    # accuracy falls and diversity rises with T, as the handout's panel shows
    assert np.all(np.diff(sweep["accuracy"]) < 0.02)
    assert np.all(np.diff(sweep["distinct_answers"]) > 0)
    assert lab11.sweep_value(sweep, "distinct_answers", 0.0) == E["distinct_greedy"]
    # "climbs from 1 to about 5" at T = 2, counting well-formed answers; 5.03 measured. +-1.5: the count
    # among 8 samples depends on how flat the model's digits are at T = 2, which varies with the snapshot.
    assert abs(lab11.sweep_value(sweep, "distinct_answers", 2.0) - E["distinct_T2"]) <= 1.5


# ---------------------------------------------------------------- experiment 2

def test_kl_estimates_small_run_and_bad_input(sft):
    k = lab11.kl_estimates(sft, (0.5, 2.0), n_problems=4, n_samples=4, n_batches=3)
    assert k["k3_batches"].shape == (2, 3) and k["exact"].shape == (2,)
    assert np.all(k["exact"] > 0) and np.all(k["k3_batches"] >= 0) and np.all(k["k2_batches"] >= 0)
    # the pooled estimate is the mean of the batch means (equal batch sizes)
    np.testing.assert_allclose(k["k1"], k["k1_batches"].mean(1))
    # the student's functions are used: a k3 with the sign of l flipped gives other numbers
    flipped = lambda lp, ref: (lp - ref, (lp - ref) ** 2 / 2, torch.exp(lp - ref) - 1 - (lp - ref))
    k_bad = lab11.kl_estimates(sft, (0.5, 2.0), n_problems=4, n_samples=4, n_batches=3, kl_estimators_fn=flipped)
    np.testing.assert_allclose(k_bad["k1"], k["k1"])
    assert not np.allclose(k_bad["k3"], k["k3"])
    with pytest.raises(ValueError, match="temperatures"):
        lab11.kl_estimates(sft, (0.0, 1.0), n_problems=2)
    with pytest.raises(ValueError, match="kl_estimators_fn"):
        lab11.kl_estimates(sft, (1.0,), n_problems=2, n_samples=2, n_batches=1,
                           kl_estimators_fn=lambda lp, ref: lp - ref)


def test_kl_estimates_at_temperature_one_are_zero(sft):
    k = lab11.kl_estimates(sft, (1.0,), n_problems=4, n_samples=4, n_batches=2)
    for name in ("exact", "k1", "k2", "k3"):
        assert abs(k[name][0]) < 1e-5


@pytest.fixture(scope="module")
def kl_seeds(sft, kl):
    """Experiment 2 on seeds 0, 1 and 2 (seed 0 is the notebook's draw)."""
    return [lab11.kl_checks(kl)] + [lab11.kl_checks(lab11.kl_estimates(sft, seed=s)) for s in (1, 2)]


@pytest.mark.slow
def test_experiment2_matches_the_handout(kl_seeds):
    sharp_T = lab11.EXPECTED["kl_sharp_temperature"]
    for c in kl_seeds:
        sharp = c[sharp_T]
        # T = 0.25: k3 "far too low" with error bars that miss the truth, on every seed. Over 16 batches
        # of 128 responses the median batch estimate is 0.30-0.45 of the truth here (seeds 0-2) and only
        # 25-38% of the batches' bars cover it; the bounds leave room for another seed.
        assert sharp["k3_ratio"] < 0.6 and sharp["k3_covers"] <= 0.5, sharp
        # k1 is fine there: its median batch is within 15% of the truth (measured 0.99-1.00).
        assert abs(sharp["k1_ratio"] - 1) < 0.15, sharp
        # k2 is biased: at T = 2 it overshoots by more than 50% (measured about 2.5x)
        assert c[2.0]["k2_ratio"] > 1.5
    for T in lab11.EXPECTED["kl_agree_temperatures"]:
        # T > 1: both agree with the truth. One draw of 16 batches is noisy (seed 0's k1 at T = 1.5 has its
        # median batch at 0.70 of the truth, its pooled estimate at 0.79; seeds 1 and 2 at 0.89 and 0.98),
        # so as make reproduce judges it: on the mean over seeds 0-2, each estimator's median batch within
        # 20% of the truth (measured 0.86-1.01), and most bars (a 1.96 s.e. bar should cover 95% of the time;
        # measured 81-100% on each seed) cover it.
        for k in ("k1", "k3"):
            assert abs(np.mean([c[T][k + "_ratio"] for c in kl_seeds]) - 1) < 0.2, (T, k)
            assert min(c[T][k + "_covers"] for c in kl_seeds) >= 0.7, (T, k)


# ---------------------------------------------------------------- experiment 3

def test_experiment3_matches_the_handout(front):
    # the handout: "peaks around KL = 0.5 nats"; 0.54 on this beta grid. +-0.1: the grid's spacing.
    assert abs(front["hack"]["peak"]["kl_nats"] - lab11.EXPECTED["hack_peak_kl_nats"]) <= 0.1
    for name in toylm.SCENARIOS:
        # temperature always lies below the frontier (rounding and interpolation aside)
        assert np.all(lab11.temperature_gap(front, name) >= -1e-9)
    w = front["worked"]["temperature"]
    cold = w["temperature"] < 1
    assert np.all(w["reward"][cold] < front["worked"]["toy"].ref_probs @ front["worked"]["toy"].reward_vector)
    np.testing.assert_allclose(lab11.beta_view("worked", 1.0)["policy"], lab11.EXPECTED["worked_pi_star"], atol=1e-3)


def test_frontier_data_rejects_a_probability_space_optimum():
    def prob_space(ref, r, beta):
        with np.errstate(over="ignore", invalid="ignore"):
            w = ref * np.exp(r / beta)
            return w / w.sum()
    # e^(2 / beta) overflows once beta < 2 / 709
    with pytest.raises(ValueError, match="optimum_fn"):
        lab11.frontier_data(prob_space, betas=[1.0, 0.001])
    ok = lab11.frontier_data(prob_space, betas=[5.0, 1.0, 0.5])  # fine where nothing overflows
    assert ok["worked"]["optimum"]["policies"].shape == (3, 4)


# ---------------------------------------------------------------- report, summary, plots

@pytest.mark.slow
def test_report_summary_and_plots(sweep, kl, front, tmp_path):
    report = lab11.expected_report(sweep, kl, front)
    for key in ("greedy_accuracy", "accuracy_T1", "distinct_T2", "hack_peak_kl_nats", "k3/exact at T=0.25"):
        assert key in report
    line = lab11.summary_line(sweep, kl, front)
    assert "\n" not in line and "greedy" in line and "KL" in line
    for fn, data in ((lab11.plot_temperature_sweep, sweep), (lab11.plot_kl_estimates, kl),
                     (lab11.plot_frontier, front)):
        path = tmp_path / f"{fn.__name__}.png"
        fig = fn(data, path=path)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        matplotlib.pyplot.close(fig)


def test_report_with_partial_results(front):
    report = lab11.expected_report(front=front)
    assert "hack_peak_kl_nats" in report and "greedy_accuracy" not in report


# ---------------------------------------------------------------- widgets

def test_temperature_view(sft):
    p = eval_problems(20)
    v0 = lab11.temperature_view(sft, 0.0, p, n_samples=4, n_show=3)
    assert v0["distinct_answers"] == 1.0 and len(v0["shown"]) == 3
    assert all(len(set(s["samples"])) == 1 for s in v0["shown"])
    v2 = lab11.temperature_view(sft, 2.0, p, n_samples=4, n_show=3)
    assert v2["distinct_answers"] > v0["distinct_answers"]
    html = lab11.format_temperature_view(v2)
    assert "T = 2.00" in html and p.texts()[0] in html
    with pytest.raises(ValueError, match="temperature"):
        lab11.temperature_view(sft, -0.5, p)


def test_beta_view_and_figure():
    v = lab11.beta_view("worked", 1.0)
    assert v["responses"] == ["ax", "ay", "bx", "by"]
    assert v["kl_nats"] == pytest.approx(toylm.kl_divergence(v["policy"], v["ref_probs"]))
    assert v["objective"] == pytest.approx(v["reward"] - v["kl_nats"])
    hv = lab11.beta_view(toylm.scenario("hack"), 0.6)
    assert hv["true_reward"] < hv["reward"]
    assert "true reward" in lab11.format_beta_view(hv) and "true reward" not in lab11.format_beta_view(v)
    png = lab11.beta_figure_png("hack", 0.6)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="beta"):
        lab11.beta_view("worked", -1.0)


def test_widgets_redraw_when_a_slider_moves(sft):
    # how fast they redraw is a benchmark figure (python -m llmrl.tools.bench), not a timed test
    tw = lab11.temperature_widget(sft, eval_problems(100))
    before = tw.html.value
    for v in (2.0, 0.0, 1.5):
        tw.slider.value = v
    assert tw.html.value != before and "T = 1.50" in tw.html.value
    bw = lab11.beta_widget("hack")
    img = bw.image.value
    for v in (0.1, 3.0, 0.6):
        bw.slider.value = v
    assert bw.image.value != img and "beta = 0.6" in bw.html.value
    assert len(bw.image.value) > 1000
