"""The GPU-side pieces of hw4, tested offline: the Modal launcher's command lines (and its app, when
the modal client is installed) and the gpu_check benchmark on a tiny CPU model."""

import pytest

from llmrl.hw4 import modal_app


def parse_cli(argv):
    """The config the hw4 command line would build from a launcher's argv."""
    from llmrl.hw4.__main__ import build_parser, config_from_args

    assert argv[:4] == ["python", "-m", "llmrl.hw4", "train"]
    args = build_parser().parse_args(argv[3:])
    return args, config_from_args(args)


@pytest.mark.parametrize("run, task, algo, steps, G", [
    ("format_copy-grpo", "format_copy", "grpo", 51, 6),
    ("format_copy-reinforce", "format_copy", "reinforce", 51, 6),
    ("math_hard-grpo", "math_hard", "grpo", 501, 8),
    ("math_hard-reinforce", "math_hard", "reinforce", 201, 8),
])
def test_required_run_command_lines(run, task, algo, steps, G):
    argv = modal_app.train_argv(run, seed=2)
    args, cfg = parse_cli(argv)
    # the handout's settings for the 1.5B model: 8 prompts, lr 3e-5, T=0.8, top_p=0.95, eps 0.2,
    # kl 0.05, grad norm 0.5, GRPO 2 epochs
    assert (cfg.task, cfg.algo, cfg.steps, cfg.n_prompts, cfg.group_size) == (task, algo, steps, 8, G)
    assert (cfg.lr, cfg.temperature, cfg.top_p, cfg.clip_eps, cfg.kl_coef, cfg.max_grad_norm) == \
        (3e-5, 0.8, 0.95, 0.2, 0.05, 0.5)
    assert cfg.epochs == (2 if algo == "grpo" else 1)
    assert cfg.backend == "hf" and cfg.backend_kwargs["model"] == "Qwen/Qwen2.5-Math-1.5B-Instruct"
    assert cfg.seed == 2 and args.run_dir == f"/runs/{run}-seed2" and args.impl == "reference"
    assert not args.fresh and args.no_progress
    if task == "format_copy":
        assert "<answer></answer>" in cfg.backend_kwargs["system_prompt"]


def test_command_line_options():
    argv = modal_app.train_argv("math_hard-grpo", model="/models/qwen", vllm=True, impl="notebooks/hw4/llm_rl.py",
                                fresh=True)
    args, cfg = parse_cli(argv)
    assert cfg.backend_kwargs == {"model": "/models/qwen", "use_vllm": True}
    assert args.fresh and args.impl == "notebooks/hw4/llm_rl.py"
    for bad in (dict(run="math"), dict(run="math_hard-grpo", seed=-1), dict(run="math_hard-grpo", model="")):
        with pytest.raises(ValueError, match=next(iter(bad)) if len(bad) == 1 else list(bad)[1]):
            modal_app.train_argv(**bad)


def test_modal_app_builds():
    modal = pytest.importorskip("modal", reason="the modal extra is not installed (pip install -e '.[modal]')")
    import warnings

    app = modal_app.app
    assert isinstance(app, modal.App) and app.name == "llmrl-hw4"
    with warnings.catch_warnings():  # modal 1.6 deprecates these listings (removed in 1.7)
        warnings.simplefilter("ignore")
        fns = dict(app.registered_functions)
        entrypoints = dict(app.registered_entrypoints)
    assert {"train_remote", "train_remote_vllm", "bundle_remote"} <= set(fns)
    assert all(isinstance(f, modal.Function) for f in fns.values())
    assert "main" in entrypoints
    opts = modal_app.FUNCTION_OPTIONS
    assert opts["gpu"] == "H100" and opts["timeout"] >= 6 * 3600  # math GRPO: about five H100 hours
    assert set(opts["volumes"]) == {"/runs"} and isinstance(opts["volumes"]["/runs"], modal.Volume)
    assert isinstance(modal_app.image, modal.Image)
    assert "torch==2.13.0" in modal_app.IMAGE_PACKAGES


def test_gpu_check_on_a_tiny_cpu_model():
    pytest.importorskip("transformers", reason="the hf extra is not installed (pip install -e '.[hf]')")
    pytest.importorskip("peft", reason="the hf extra is not installed (pip install -e '.[hf]')")
    from llmrl.hw4 import gpu_check

    res = gpu_check.run(size="tiny", device="cpu", n_prompts=2, group_size=3, prompt_tokens=12, new_tokens=8,
                        minibatch_size=3, grad_accum_steps=2)
    assert res["steps"] == 1 and res["device"] == "cpu" and res["dtype"] == "torch.float32"
    assert res["rollout_tokens_per_second"] > 0 and res["update_tokens_per_second"] > 0
    assert res["peak_memory_gib"] > 0 and res["seconds_per_step"] > 0
    assert 0 < res["trainable_parameters"] < res["parameters"]
    assert res["final_loss"] == res["final_loss"]  # finite, not NaN


def test_gpu_check_default_is_a_realistic_size():
    pytest.importorskip("transformers", reason="the hf extra is not installed (pip install -e '.[hf]')")
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from llmrl.hw4 import gpu_check

    with torch.device("meta"):  # no memory: only the shapes
        model = Qwen2ForCausalLM(Qwen2Config(**gpu_check.SIZES["1.5b"]))
    n = sum(p.numel() for p in model.parameters())
    assert 1.4e9 < n < 1.7e9  # Qwen2.5-1.5B has 1.54B parameters (tied embeddings)


def test_launcher_imports_without_modal(monkeypatch):
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "modal", None)  # as if the modal client were not installed
    try:
        mod = importlib.reload(modal_app)
        assert mod.modal is None and mod.app is None
        assert mod.train_argv("format_copy-grpo")[:4] == ["python", "-m", "llmrl.hw4", "train"]
    finally:
        monkeypatch.undo()
        importlib.reload(modal_app)


def test_command_line_trains_a_local_model_directory(tmp_path, capsys):
    """`python -m llmrl.hw4 train --backend hf --model DIR`: a model saved with save_pretrained loads
    from its directory (no network), trains, logs, and a rerun resumes instead of starting over."""
    pytest.importorskip("transformers", reason="the hf extra is not installed (pip install -e '.[hf]')")
    pytest.importorskip("peft", reason="the hf extra is not installed (pip install -e '.[hf]')")
    from llmrl.hw4.__main__ import main
    from llmrl.hw4.hf_backend import char_tokenizer, tiny_random_model
    from llmrl.hw4.run_manager import read_jsonl

    tok = char_tokenizer()
    model_dir = tmp_path / "tiny-qwen"
    tiny_random_model(tok, seed=1).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    run = tmp_path / "run"
    argv = ["train", "--task", "format_copy", "--algo", "grpo", "--backend", "hf", "--model", str(model_dir),
            "--steps", "2", "--set", "n_prompts=2", "--set", "group_size=2", "--set", "minibatch_size=2",
            "--set", "eval_limit=2", "--set", "max_new_tokens=4", "--set", "ckpt_every=1",
            "--backend-arg", "device=cpu", "--backend-arg", "system_prompt=Use <answer></answer> tags.",
            "--run-dir", str(run), "--no-progress"]
    assert main(argv) == 0
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2]
    assert main(argv[:argv.index("--steps") + 1] + ["3"] + argv[argv.index("--steps") + 2:]) == 0
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3]
    assert "format_copy grpo" in capsys.readouterr().out
