"""The walk from a notebook's training call to the optimizer step stays short (issue 32, docs/architecture.md).

Measured, not described: the optimizer's ``step`` records the Python stack the first time it runs,
and the test reads which files of the library are on it between the caller (this file, standing in
for the notebook's cell) and the optimizer. The walks of lab19's hacking runs and hw4's trainer are
both ``caller -> the assignment's module -> rl/train.py -> rl/step.py``: 4 files, 3 hops, under the
5 files the layers promise. A change that routes the step through another module shows here.
"""

from __future__ import annotations

import traceback

import pytest
import torch

LIB = "/llmrl/"


def _walk(monkeypatch, fn) -> list[str]:
    seen = []
    orig = torch.optim.AdamW.step

    def step(self, *a, **k):
        if not seen:
            seen.extend(traceback.extract_stack()[:-1])
        return orig(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    fn()
    assert seen, "the optimizer never stepped"
    files = []
    for frame in seen:
        name = frame.filename.split(LIB, 1)[1] if LIB in frame.filename else (
            "caller" if frame.filename == __file__ else None)
        if name and (not files or files[-1] != name):
            files.append(name)
    return files[files.index("caller"):]


def test_lab19_walk_from_the_notebook_call_to_the_optimizer(monkeypatch):
    from llmrl.labs import lab19

    walk = _walk(monkeypatch, lambda: lab19.part2_runs(None, seeds=(0,), steps=1))
    assert walk == ["caller", "labs/lab19.py", "rl/train.py", "rl/step.py"]


def test_hw4_walk_from_the_notebook_call_to_the_optimizer(monkeypatch, tmp_path):
    from llmrl.hw4.impl import load_impl
    from llmrl.hw4.trainer import default_config, train

    impl = load_impl("reference")
    cfg = default_config("format_copy", "grpo", steps=1, eval_limit=2)
    walk = _walk(monkeypatch, lambda: train(cfg, impl, run_dir=tmp_path / "run", resume=False, progress=False))
    assert walk == ["caller", "hw4/trainer.py", "rl/train.py", "rl/step.py"]
    assert len(set(walk)) <= 5


def test_the_walk_reader_sees_a_longer_route(monkeypatch):
    """The measurement itself: a call routed through one more module of the library is counted."""
    from llmrl.rl import train as loop

    def detour():
        import llmrl.runner as runner  # a core module standing in for an extra hop

        def arm(name, seed, **kw):
            loop.rl_train(_tiny(), steps=1, progress=False)
            return {}

        return runner.run_arms("walk/detour", arm, ["a"], seeds=(0,))

    walk = _walk(monkeypatch, detour)
    assert walk[:3] == ["caller", "runner.py", "caller"] and walk[-2:] == ["rl/train.py", "rl/step.py"]


def _tiny():
    from llmrl.tinylm import TinyLM

    torch.manual_seed(0)
    return TinyLM()
