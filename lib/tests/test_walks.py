"""The walk from a notebook's training call to the optimizer step stays short (docs/architecture.md).

Measured, not described: the optimizer's ``step`` records the Python stack the first time it runs,
and the test reads which files of the library are on it between the caller (this file, standing in
for the notebook's cell) and the optimizer. The walks of lab19's hacking runs and hw4's run manager
are both ``caller -> the assignment's module -> rl/train.py -> rl/step.py``: 4 files, 3 hops, under
the 5 files the layers promise. A change that routes the step through another module shows here.
hw4's KL coefficient is followed the same way, from the notebook's ``default_config(kl_coef=...)`` to
the student's loss that applies it.
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
    return _files(seen)


def _files(frames) -> list[str]:
    """The library's files (and this file, as "caller") the frames pass, from the first "caller" on."""
    files = []
    for frame in frames:
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
    from llmrl.hw4.trainer import default_config, train  # the notebook's import (the old module name)

    impl = load_impl("reference")
    cfg = default_config("format_copy", "grpo", steps=1, eval_limit=2)
    walk = _walk(monkeypatch, lambda: train(cfg, impl, run_dir=tmp_path / "run", resume=False, progress=False))
    assert walk == ["caller", "hw4/run_manager.py", "rl/train.py", "rl/step.py"]
    assert len(set(walk)) <= 5


def test_hw4_kl_coefficient_walk_from_the_notebook_to_the_students_loss():
    """kl_coef set in the notebook's call reaches the student's grpo_loss, where it acts, through
    hw4/settings.py (HW4Config holds it) and the run: at most 5 files, the notebook's included."""
    from dataclasses import replace

    from llmrl.hw4.impl import load_impl
    from llmrl.hw4.trainer import default_config, train

    ref = load_impl("reference")
    seen = []

    def grpo_loss(*args):  # the student's function, in the notebook (here: this file)
        if not seen:
            seen.append((traceback.extract_stack(), args[-1]))
        return ref.grpo_loss(*args)

    cfg = default_config("format_copy", "grpo", steps=1, eval_limit=2, kl_coef=0.125)
    train(cfg, replace(ref, grpo_loss=grpo_loss), progress=False)
    assert seen and seen[0][1] == 0.125, "the coefficient did not reach the student's loss as set"
    walk = _files(seen[0][0])
    assert walk == ["caller", "hw4/run_manager.py", "rl/train.py", "rl/step.py", "hw4/run_manager.py", "caller"]
    assert len(set(walk) | {"hw4/settings.py"}) <= 5  # the files it passes, and HW4Config's, where it is held


def test_the_walk_reader_sees_a_longer_route(monkeypatch):
    """The measurement itself: a call routed through one more module of the library is counted."""
    from llmrl.rl import train as loop

    def detour():
        import llmrl.experiments.runner as runner  # a module of the layer below the labs, standing in for an extra hop

        def arm(name, seed, **kw):
            loop.rl_train(_tiny(), steps=1, progress=False)
            return {}

        return runner.run_arms("walk/detour", arm, ["a"], seeds=(0,))

    walk = _walk(monkeypatch, detour)
    assert walk[:3] == ["caller", "experiments/runner.py", "caller"] and walk[-2:] == ["rl/train.py", "rl/step.py"]


def _tiny():
    from llmrl.lm.tinylm import TinyLM

    torch.manual_seed(0)
    return TinyLM()
