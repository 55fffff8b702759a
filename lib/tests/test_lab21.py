"""Tests of llmrl.labs.lab21: Project 2's rubric-weight figure and widget, without a browser."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from llmrl.labs import lab21


def _fake_run(w, pad):
    return {"arm": f"stylish_w{w:g}", "seed": 0,
            "evals": {"step": [0, 100, 200], "gold_pass@1": [0.3, 0.4, 0.3],
                      "pad_share_small_sums": [0.0, pad / 2, pad]},
            "curve": {"step": [1, 2]}, "extra": {}}


RESULTS = {"binary": [_fake_run(0, 0.0)], "stylish_w1": [_fake_run(1, 0.1)], "stylish_w2": [_fake_run(2, 0.9)],
           "stylish_w2+pitfall": [_fake_run(2, 0.0)]}


def test_stylish_runs_parses_weights_and_skips_other_arms():
    runs = lab21.stylish_runs(RESULTS)
    assert list(runs) == [1.0, 2.0]
    assert lab21.stylish_runs(None) == {}


def test_figure_marks_which_policy_pays():
    fig = lab21.rubric_weight_figure(2.0, 0.3, RESULTS, share_large=0.4)
    ax, ax2 = fig.axes[:2]
    assert "padding pays" in ax.get_title()
    assert "w = 2" in ax2.get_title()  # the nearest trained run
    plt.close(fig)
    fig = lab21.rubric_weight_figure(0.2, 0.3, None, share_large=0.4)
    assert len(fig.axes) == 1 and "honesty pays" in fig.axes[0].get_title()
    plt.close(fig)
    fig = lab21.rubric_weight_figure(1.2, 0.5, RESULTS, share_large=0.4)
    assert "w = 1 " in fig.axes[1].get_title()
    plt.close(fig)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="accuracy_small"):
        lab21.rubric_weight_figure(1.0, 1.5)
    with pytest.raises(ValueError, match="w"):
        lab21.rubric_weight_figure(-1.0, 0.5)
    with pytest.raises(TypeError, match="w"):
        lab21.rubric_weight_figure("2", 0.5)


def test_widget_builds_and_redraws():
    box = lab21.rubric_weight_widget(RESULTS, accuracy_small=0.4)
    w_slider, acc_slider = box.children[0].children
    assert acc_slider.value == pytest.approx(0.4)
    image = box.children[2]
    first = image.value
    assert first[:4] == b"\x89PNG"
    w_slider.value = 1.0  # triggers a redraw
    assert image.value != first and image.value[:4] == b"\x89PNG"
    acc_slider.value = 0.9
    assert "1, 2" in box.children[1].value
    plt.close("all")
