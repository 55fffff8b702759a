"""hw4's settings are one config (llmrl.hw4.settings): HW4Config, the required runs' departures from it,
and a declared map onto the RL step's RLConfig that shows the KL coefficient the run really uses.

The numbers of the runs and of every config are pinned in test_hw4_config_pins.py; this file checks
the map itself, where the KL penalty acts, the one name of the KL knob, and the old import paths.
"""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from llmrl.hw4 import settings as C
from llmrl.hw4.settings import DEFAULTS, HW4Config, default_config, spine_config
from llmrl.rl.config import KL_MODES, RLConfig


def test_the_spine_map_names_every_rlconfig_field_exactly_once():
    parts = [set(C.SPINE_SAME), set(C.SPINE_DERIVED), set(C.SPINE_FIXED), set(C.SPINE_UNUSED)]
    named = [name for part in parts for name in part]
    assert len(named) == len(set(named)), f"a field is named twice: {sorted(n for n in named if named.count(n) > 1)}"
    assert set(named) == {f.name for f in fields(RLConfig)}, "a field of RLConfig is missing from the spine's map"
    hw4 = {f.name for f in fields(HW4Config)}
    assert set(C.SPINE_SAME) <= hw4, f"SPINE_SAME names fields HW4Config lacks: {sorted(set(C.SPINE_SAME) - hw4)}"
    defaults = RLConfig()
    rl = spine_config(default_config("math_toy", "reinforce", seed=3, top_p=0.9))
    for name in C.SPINE_UNUSED:
        assert getattr(rl, name) == getattr(defaults, name), name


@pytest.mark.parametrize("kl_coef", [0.0, 0.05, 8.0])
@pytest.mark.parametrize("algo", ["grpo", "reinforce"])
def test_the_spine_shows_the_kl_coefficient_the_students_loss_uses(algo, kl_coef):
    rl = spine_config(default_config("format_copy", algo, kl_coef=kl_coef))
    assert rl.kl_coef == kl_coef and rl.kl_mode == "policy_loss_fn" and rl.kl_estimator == "k3"
    assert "policy_loss_fn" in KL_MODES
    assert rl.epochs == (2 if algo == "grpo" else 1)


def test_spine_settings_follow_the_config_and_the_process_count():
    cfg = default_config("math_toy", "grpo", clip_eps=1.5, lr=1e-4, betas=[0.8, 0.9])
    one, four = spine_config(cfg), spine_config(cfg, 4)
    assert (one.n_prompts, four.n_prompts) == (8, 2)
    assert (one.eps_low, one.eps_high) == (None, 1.5)  # a bound of 1 or more cannot bind from below
    assert one.lr == 1e-4 and one.betas == (0.8, 0.9) and one.minibatch_size == 32 and one.group_size == 8
    with pytest.raises(ValueError, match="n_prompts=8 must be a multiple of processes=3"):
        spine_config(cfg, 3)
    with pytest.raises(ValueError, match="processes"):
        spine_config(cfg, 0)
    with pytest.raises(TypeError, match="cfg must be an HW4Config"):
        spine_config(RLConfig())


def test_rlconfig_refuses_an_unknown_kl_mode_by_name():
    assert RLConfig(kl_coef=0.1, kl_mode="policy_loss_fn").kl_mode == "policy_loss_fn"
    with pytest.raises(ValueError, match="kl_mode must be one of"):
        RLConfig(kl_mode="student")


def test_the_step_adds_no_second_kl_term_to_the_students_loss(tmp_path):
    """With kl_coef = 8 the penalty is large; the run's logged loss is the mean of the values the
    student's grpo_loss returned, so the step added nothing on top of it."""
    from llmrl.hw4.impl import load_impl
    from llmrl.hw4.run_manager import train

    ref = load_impl("reference")
    seen = []

    def grpo_loss(*args):
        value = ref.grpo_loss(*args)
        assert args[-1] == 8.0  # the coefficient reaches the student's loss as it was set
        seen.append(value.item())
        return value

    impl = replace(ref, grpo_loss=grpo_loss)
    res = train(default_config("format_copy", "grpo", steps=1, kl_coef=8.0, eval_limit=2), impl, progress=False)
    step = res.records[-1]
    assert len(seen) == 4  # 2 epochs x 2 minibatches of 24 rows
    assert step["loss_mean"] == pytest.approx(sum(seen) / len(seen), rel=1e-9, abs=1e-12)  # the same floats, averaged
    assert step["kl_to_reference_k3_token_mean_nats"] > 0  # the reference is there, the KL is measured


def test_defaults_hold_only_departures_from_hw4configs_defaults():
    base = HW4Config()
    for run, settings in DEFAULTS.items():
        restated = sorted(k for k, v in settings.items() if getattr(base, k) == v)
        assert not restated, f"DEFAULTS[{run}] restates HW4Config's defaults {restated}: say them once, in HW4Config"
    assert default_config("math_hard", "grpo").steps == 501 and default_config("math_hard", "reinforce").steps == 201
    assert default_config("format_copy", "grpo", lr=1e-3).lr == 1e-3  # overrides come last


def test_one_name_for_the_kl_knob():
    """kl_coef in every config of the library; 'beta' only where TRL's GRPOConfig takes it."""
    for cls in (HW4Config, RLConfig):
        names = {f.name for f in fields(cls)}
        assert "kl_coef" in names and "beta" not in names, cls.__name__
    from llmrl.hw4 import trl_runner

    kw = trl_runner.grpo_config_kwargs(default_config("format_copy", "grpo", kl_coef=0.3), "out")
    assert kw["beta"] == 0.3
    assert any(m.course == "kl_coef" and m.trl == "beta" for m in trl_runner.HYPERPARAMETERS)


def test_the_old_import_paths_are_the_renamed_modules():
    import llmrl.hw4.run_manager as run_manager
    import llmrl.hw4.trainer as trainer
    import llmrl.hw4.trl_export as trl_export
    import llmrl.hw4.trl_runner as trl_runner
    from llmrl.hw4.trainer import DEFAULTS as defaults, HW4Config as cls, default_config as dc, read_jsonl, train

    assert trainer is run_manager and trl_export is trl_runner
    assert (cls, defaults, dc) == (HW4Config, DEFAULTS, default_config)
    assert (train, read_jsonl) == (run_manager.train, run_manager.read_jsonl)
    assert trl_export.train_trl is trl_runner.train_trl


def test_rl_train_refuses_a_kl_left_to_a_loss_function_it_was_not_given():
    from llmrl.rl.train import rl_train
    from llmrl.tinylm import TinyLM

    with pytest.raises(ValueError, match="penalty would be dropped"):
        rl_train(TinyLM(), steps=1, kl_coef=0.1, kl_mode="policy_loss_fn", progress=False)
