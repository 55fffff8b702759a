"""hw4's run manager (llmrl.hw4.run_manager), impl loading, resume, WandB (faked), command line."""

import json
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from llmrl import metrics
from llmrl.hw4 import charlm
from llmrl.hw4.__main__ import build_parser, config_from_args, main
from llmrl.hw4.char_backend import CharBackend
from llmrl.hw4.impl import REQUIRED, Impl, load_impl
from llmrl.hw4.plots import eval_area, plot_runs, seeds_text
from llmrl.hw4.settings import HW4Config, default_config
from llmrl.hw4.run_manager import read_jsonl, train

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "hw4" / "llm_rl.py"


@pytest.fixture(scope="module")
def impl():
    return load_impl(NOTEBOOK)


def tiny_backend(seed=0):
    torch.manual_seed(seed)
    return CharBackend(TinyLM_small())


def TinyLM_small():
    from llmrl.tinylm import TinyLM
    return TinyLM(vocab_size=charlm.VOCAB_SIZE, d=32, n_layers=1, n_heads=2, max_len=charlm.MAX_LEN)


TINY = dict(n_prompts=2, group_size=2, minibatch_size=2, grad_accum_steps=1, max_new_tokens=6, eval_limit=4,
            eval_every=2, ckpt_every=2, gen_every=1)


def test_load_impl_from_notebook_source_and_ipynb(impl, tmp_path):
    assert set(REQUIRED) == {n for n in Impl.__dataclass_fields__ if n != "source"}
    # only the definitions run: an ipynb whose other cells would fail still loads
    cells = [{"cell_type": "code", "source": "import torch\nraise RuntimeError('experiment cell must not run')"},
             {"cell_type": "markdown", "source": "def grpo_loss(): pass"},
             {"cell_type": "code", "source": "%matplotlib inline\n" + "\n".join(
                 f"def {n}(*a, **k):\n    return '{n}'" for n in REQUIRED)}]
    nb = tmp_path / "student.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    got = load_impl(nb)
    assert got.grpo_loss() == "grpo_loss" and got.source == str(nb)
    cells[2]["source"] = "def grpo_loss(): pass"
    nb.write_text(json.dumps({"cells": cells}))
    with pytest.raises(ValueError, match="does not define"):
        load_impl(nb)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_impl(tmp_path / "missing.ipynb")
    with pytest.raises(ValueError, match="'reference' or a path"):
        (tmp_path / "x.txt").write_text("")
        load_impl(tmp_path / "x.txt")
    assert isinstance(load_impl("reference"), Impl)


def test_reference_functions_behave(impl):
    lg = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    assert impl.compute_per_token_logprobs(lg, ids).shape == (2, 4)
    assert impl.build_completion_mask(torch.tensor([[0, 1, 1, 1, 0]]), 2).tolist() == [[False, True, True, False]]
    adv = impl.compute_group_advantages(torch.tensor([0.1] * 8, dtype=torch.float64), 8)
    assert adv.abs().max() < 1e-6  # float64 rewards: a constant group is ~0, not float32's ~1e-2


def test_train_records_and_files(impl, tmp_path):
    cfg = default_config("format_copy", "grpo", steps=3, **TINY)
    res = train(cfg, impl, backend=tiny_backend(), run_dir=tmp_path, progress=False)
    steps = [r["step"] for r in res.records]
    assert steps == [0, 1, 2, 3]
    for key in ("reward_mean", "reward_tag_mean", "kl_to_reference_k3_token_mean_nats", "kl_to_reference_k1_sum_nats",
                "clip_fraction", "grad_norm_mean", "entropy_token_mean_nats", "completion_tokens_mean",
                "sampled_accuracy"):
        assert key in res.records[1]
    for key in res.records[1]:
        metrics.entry(key)  # the labs' vocabulary, the same names
    assert "eval_exact_match" in res.records[0] and "eval_exact_match" in res.records[2]
    assert read_jsonl(tmp_path / "metrics.jsonl") == res.records
    gens = read_jsonl(tmp_path / "generations.jsonl")
    assert {g["step"] for g in gens} == {1, 2, 3} and {"completion", "reward", "advantage"} <= set(gens[0])
    assert json.loads((tmp_path / "config.json").read_text())["algo"] == "grpo"
    assert len(list(tmp_path.glob("policy-step*"))) == 1


def test_resume_after_interruption_keeps_metrics(impl, tmp_path):
    cfg = default_config("format_copy", "reinforce", steps=5, **TINY)
    full = train(cfg, impl, backend=tiny_backend(), run_dir=tmp_path / "full", progress=False).records

    class Stop(Exception):
        pass

    def stop_at_3(rec):
        if rec["step"] == 3:
            raise Stop

    with pytest.raises(Stop):
        train(cfg, impl, backend=tiny_backend(), run_dir=tmp_path / "cut", progress=False, callback=stop_at_3)
    assert [r["step"] for r in read_jsonl(tmp_path / "cut" / "metrics.jsonl")] == [0, 1, 2, 3]
    resumed = train(cfg, impl, backend=tiny_backend(), run_dir=tmp_path / "cut", progress=False).records
    assert [r["step"] for r in resumed] == [0, 1, 2, 3, 4, 5]  # step 3 redone from the step-2 checkpoint, once
    strip = lambda rs: [{k: v for k, v in r.items() if k != "step_seconds"} for r in rs]  # noqa: E731
    assert strip(resumed) == strip(full)                          # the same numbers as an uninterrupted run
    with pytest.raises(ValueError, match="different configuration"):
        train(replace(cfg, lr=0.5), impl, backend=tiny_backend(), run_dir=tmp_path / "cut", progress=False)
    again = train(replace(cfg, lr=0.5), impl, backend=tiny_backend(), run_dir=tmp_path / "cut", resume=False,
                  progress=False)
    assert [r["step"] for r in read_jsonl(tmp_path / "cut" / "metrics.jsonl")] == [r["step"] for r in again.records]


def test_wandb_offline_is_optional(impl, tmp_path, monkeypatch):
    cfg = default_config("format_copy", "grpo", steps=1, wandb=True, **TINY)
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    with pytest.raises(ImportError, match="pip install wandb"):
        train(cfg, impl, backend=tiny_backend(), run_dir=tmp_path, progress=False)
    logged, inits = [], []
    fake = types.SimpleNamespace(
        init=lambda **kw: inits.append(kw) or types.SimpleNamespace(log=lambda d, step: logged.append((step, d)),
                                                                     finish=lambda: None),
        Table=lambda columns, data: ("table", columns, len(data)))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    train(cfg, impl, backend=tiny_backend(), run_dir=tmp_path, progress=False, resume=False)
    assert inits[0]["mode"] == "offline" and [s for s, _ in logged] == [0, 1]
    assert logged[1][1]["generations"][0] == "table" and "reward_mean" in logged[1][1]


def test_bad_config_and_arguments(impl):
    with pytest.raises(ValueError, match="algo"):
        HW4Config(algo="ppo")
    with pytest.raises(TypeError, match="n_prompts"):
        HW4Config(n_prompts=2.0)
    with pytest.raises(ValueError, match="top_p"):
        HW4Config(top_p=0.0)
    with pytest.raises(ValueError, match="kl_coef"):
        HW4Config(kl_coef=-1.0)
    with pytest.raises(TypeError, match="impl"):
        train(HW4Config(), {"grpo_loss": None})
    with pytest.raises(TypeError, match="config"):
        train({"task": "format_copy"}, impl)
    with pytest.raises(ValueError, match="unknown task"):
        train(HW4Config(task="nope"), impl, backend=tiny_backend())


@pytest.mark.parametrize("task", ["format_copy", "math_toy"])
@pytest.mark.parametrize("algo", ["grpo", "reinforce"])
def test_cli_parses_the_four_required_commands(task, algo):
    args = build_parser().parse_args(["train", "--task", task, "--algo", algo])
    cfg = config_from_args(args)
    assert (cfg.task, cfg.algo, cfg.backend) == (task, algo, "char") and args.impl == "reference"
    assert cfg.temperature == 0.8 and cfg.top_p == 0.95 and cfg.clip_eps == 0.2 and cfg.kl_coef == 0.05
    assert cfg.max_grad_norm == 0.5 and cfg.adv_clip == 5.0 and cfg.epochs == (2 if algo == "grpo" else 1)


def test_cli_overrides_and_errors(capsys):
    p = build_parser()
    cfg = config_from_args(p.parse_args(["train", "--task", "math_hard", "--algo", "grpo", "--model", "m",
                                         "--set", "kl_coef=0.1", "--steps", "7", "--wandb"]))
    assert cfg.backend == "hf" and cfg.backend_kwargs == {"model": "m"} and cfg.kl_coef == 0.1 and cfg.steps == 7
    assert cfg.wandb and cfg.wandb_mode == "offline"
    with pytest.raises(SystemExit, match="unknown config field"):
        config_from_args(p.parse_args(["train", "--task", "format_copy", "--algo", "grpo", "--set", "nope=1"]))
    with pytest.raises(SystemExit, match="bad configuration"):
        config_from_args(p.parse_args(["train", "--task", "format_copy", "--algo", "grpo", "--set", "top_p=2"]))
    with pytest.raises(SystemExit):
        p.parse_args(["train", "--task", "format_copy", "--algo", "ppo"])
    with pytest.raises(SystemExit, match="unknown"):
        main(["sweep", "--axes", "lr", "--impl", str(NOTEBOOK)])


@pytest.mark.slow
def test_grpo_fixes_format_copy_on_a_tiny_budget(impl, tmp_path):
    """The pretrained base model answers "Answer: N" greedily (exact match ~0); 15 GRPO steps at the
    default settings must make the tag win. Measured from the shipped model (llmrl.store.shipped): eval
    1.0 at step 15 (and from step 5 on in a 40-step run), rollout reward 0.655 at steps 1-2 and 1.026
    at steps 12-15. The thresholds leave room for other seeds and machines (8 x 6 rollouts per step
    are noisy, and a CPU that rounds differently takes another path through them; the emulated CPUs
    of docs/reproducibility.md gave the same to 3 decimals): eval above 0.8, reward up by at least 0.25."""
    cfg = default_config("format_copy", "grpo", steps=15, eval_every=15)
    res = train(cfg, impl, backend=CharBackend(progress=False), run_dir=tmp_path, progress=False)
    rewards = [r["reward_mean"] for r in res.records[1:]]
    assert res.records[0]["eval_exact_match"] < 0.1
    assert sum(rewards[-4:]) / 4 > sum(rewards[:2]) / 2 + 0.25
    assert res.final("eval_exact_match") > 0.8


def test_ablation_sweep_goes_through_the_runner_and_resumes(impl, tmp_path):
    from llmrl import runner
    from llmrl.hw4.ablation import sweep

    base = default_config("format_copy", "grpo", steps=1, **TINY)
    axes = {"kl_coef": [0.05, 8.0]}
    rows = sweep(impl, tmp_path, base, axes, progress=False, backend_factory=tiny_backend)
    assert [(r["axis"], r["label"], r["is_default"]) for r in rows] == [("kl_coef", "0.05", True), ("kl_coef", "8", False)]
    res = runner.load_results("hw4-ablation", tmp_path)  # one result per run, in the runner's schema
    assert set(res) == {"kl_coef=0.05", "kl_coef=8"} and res["kl_coef=8"][0]["config"]["kl_coef"] == 8.0
    assert res["kl_coef=8"][0]["evals"]["step"] == [0, 1] and "exact_match" in res["kl_coef=8"][0]["evals"]
    assert res["kl_coef=8"][0]["curve"]["step"] == [1] and "reward_mean" in res["kl_coef=8"][0]["curve"]
    built = []
    again = sweep(impl, tmp_path, base, axes, progress=False, backend_factory=lambda: built.append(1) or tiny_backend())
    assert not built and [r["final_reward"] for r in again] == [r["final_reward"] for r in rows]  # nothing rerun


def test_ablation_sweep_runs_every_seed_and_trains_the_shared_default_once(impl, tmp_path):
    from llmrl.hw4.ablation import sweep

    base = default_config("format_copy", "grpo", steps=1, **TINY)
    built = []
    rows = sweep(impl, tmp_path, base, {"kl_coef": [0.05, 8.0], "clip_eps": [0.2, 0.02]}, progress=False,
                 seeds=(0, 1), backend_factory=lambda: built.append(1) or tiny_backend(len(built)))
    # kl_coef=0.05 and clip_eps=0.2 are the same (default) run: 3 configurations x 2 seeds, not 4 x 2
    assert len(built) == 6
    by = {(r["axis"], r["label"]): r for r in rows}
    assert set(by) == {("kl_coef", "0.05"), ("kl_coef", "8"), ("clip_eps", "0.2"), ("clip_eps", "0.02")}
    default, again = by[("kl_coef", "0.05")], by[("clip_eps", "0.2")]
    assert again["is_default"] and again["final_reward_seeds"] == default["final_reward_seeds"]
    for r in rows:
        assert r["seeds"] == [0, 1] and len(r["final_eval_exact_match_seeds"]) == 2
        assert r["final_reward"] == pytest.approx(sum(r["final_reward_seeds"]) / 2)
        assert r["final_reward_std"] == pytest.approx(abs(r["final_reward_seeds"][0] - r["final_reward_seeds"][1]) / 2)
    with pytest.raises(ValueError, match="seeds"):
        sweep(impl, tmp_path, base, {"kl_coef": [0.05]}, progress=False, seeds=(0, 0))


def _evals(steps, values, reward=0.5):
    return [dict({"step": s, "eval_exact_match": v}, **({"reward_mean": reward} if s else {}))
            for s, v in zip(steps, values)]


def test_eval_area_is_the_mean_eval_over_the_run():
    # trapezoid over steps 0, 5, 10 divided by the 10 steps: (0.5 * 5 + 1 * 5) / 10
    assert eval_area(_evals((0, 5, 10), (0.0, 1.0, 1.0))) == pytest.approx(0.75)
    # the same end, reached later: a smaller area (the final eval cannot tell the two apart)
    assert eval_area(_evals((0, 5, 10), (0.0, 0.0, 1.0))) == pytest.approx(0.25)
    # uneven spacing and records without an eval (training steps) in between
    recs = _evals((0, 2, 10), (0.2, 0.6, 0.6)) + [{"step": 11, "reward_mean": 1.0}]
    assert eval_area(recs) == pytest.approx(((0.2 + 0.6) / 2 * 2 + 0.6 * 8) / 10)
    assert eval_area(_evals((0,), (0.3,))) is None
    assert seeds_text([0.5, 1.0, 0.75]) == "0.750 ± 0.250 [0.50, 1.00, 0.75]"  # the sample sd (ddof 1)


def test_plot_runs_draws_every_seed_and_their_mean(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    seeds = [_evals((0, 5, 10), v) for v in ((0.0, 0.4, 1.0), (0.0, 0.2, 0.9), (0.0, 0.6, 0.8))]
    fig = plot_runs({"a": seeds, "b": _evals((0, 5, 10), (0.0, 0.1, 0.2))}, path=tmp_path / "p.png")
    lines = fig.axes[0].get_lines()  # the eval panel: 3 thin seed lines and the mean of "a", one line of "b"
    assert len(lines) == 5 and (tmp_path / "p.png").is_file()
    assert list(lines[3].get_ydata()) == pytest.approx([0.0, 0.4, 0.9]) and "mean of 3 seeds" in lines[3].get_label()
    assert list(lines[4].get_ydata()) == pytest.approx([0.0, 0.1, 0.2]) and lines[4].get_label() == "b"
    with pytest.raises(ValueError, match="at least one record"):
        plot_runs({"a": [seeds[0], []]})


@pytest.mark.slow
def test_grpo_and_reinforce_learn_math_toy(impl, tmp_path):
    """math_toy at the notebook's budget (30 steps), from the shipped character model. Published
    (hw4's EXPECTED): base 0.27, GR-REINFORCE 0.8, GRPO 0.95. Measured here: base 0.273 (35 of 128),
    GRPO 0.977 and GR-REINFORCE 0.992 at step 30, GRPO ahead at step 10 (0.91 against 0.51).
    The base model is fixed, so its score moves only at a near-tie of two logits (+-0.02: 2-3 of the
    128 problems); the runs are 8 x 8 samples a step and a CPU that rounds differently takes another
    path through them, so the trained scores get 0.1 below the published ones."""
    got = {}
    for algo in ("grpo", "reinforce"):
        torch.manual_seed(0)
        cfg = default_config("math_toy", algo)  # the notebook's run (evaluated every 5 steps)
        got[algo] = train(cfg, impl, backend=CharBackend(progress=False), run_dir=tmp_path / algo, progress=False)
    evals = {a: {r["step"]: r["eval_exact_match"] for r in res.records if "eval_exact_match" in r} for a, res in got.items()}
    assert evals["grpo"][0] == pytest.approx(0.27, abs=0.02) and evals["reinforce"][0] == evals["grpo"][0]
    assert evals["grpo"][30] >= 0.95 - 0.1 and evals["reinforce"][30] >= 0.8 - 0.1, evals
    assert evals["grpo"][10] > evals["reinforce"][10], evals  # the clipped, normalised update learns faster
    # ...and over the whole budget: the notebook's measure of sample efficiency (seeds 0-2: GRPO ahead in each)
    assert eval_area(got["grpo"]) > eval_area(got["reinforce"]), evals


def test_ablation_walk_runs_both_directions_side_by_side_and_stops_at_the_first_degraded_run():
    from llmrl.hw4.ablation import _walk_axis

    values = [1, 2, 4, 8, 16, 32]  # default 2: one step down, four up
    reward = {1: 0.9, 2: 1.0, 4: 0.95, 8: 0.5, 16: 1.0, 32: 1.0}  # 8 degrades: 16 and 32 never run
    calls = []

    def run(arms):
        calls.append(arms)
        return [{"final_eval_exact_match": 1.0, "final_reward": reward[int(a.split("=")[1])], "arm": a} for a in arms]

    rows = _walk_axis(run, "ppo_epochs", values, tolerance=0.15)
    assert calls == [["ppo_epochs=2"], ["ppo_epochs=4", "ppo_epochs=1"], ["ppo_epochs=8"]]
    assert [(r["arm"], r.get("degraded"), r.get("is_default")) for r in rows] == [
        ("ppo_epochs=2", None, True), ("ppo_epochs=4", False, None), ("ppo_epochs=8", True, None),
        ("ppo_epochs=1", False, None)]
    with pytest.raises(ValueError, match="default value"):
        _walk_axis(run, "ppo_epochs", [1, 4], tolerance=0.15)
