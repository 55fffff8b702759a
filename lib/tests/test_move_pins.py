"""Same-seed pins taken before the library was cut into layers: the numbers must not move.

The spine equivalence tests (``test_spine_equivalence.py``) pin the RL step of lab19, lab21 and hw4;
this file pins what they do not cover and what moves with the layers:

* SFT: a 30-step run of the course's recipe (``SFTConfig(seed=1)``) with a snapshot, its losses and
  the snapshot's weights (sum of squares);
* the character model's pretraining: 20 steps of hw4's corpus, its losses;
* the command lines a student runs: a 3-step ``python -m llmrl.labs.lab19 hack`` (every number it
  prints) and a 3-step ``python -m llmrl.hw4 train`` on format_copy (every metric it logs).

Recorded on the code before the move (main at c648fd8) with ``python lib/tests/test_move_pins.py
--record``; record again only when a change of the numbers is intended and explained in its commit.
Tolerance 1e-4 absolute plus 1e-4 relative, for the reason given in test_spine_equivalence.py: one
thread is deterministic on one machine; another CPU rounds the last bits differently (~1e-6 over
a few steps), while a change of the code path (another random stream, a stage out of order) moves
these numbers by 1e-2 or more. Printed numbers are compared as numbers, the words around them exactly.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).with_name("data") / "move_pins.json"
ROOT = Path(__file__).resolve().parents[2]
ATOL = RTOL = 1e-4
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _sft() -> dict:
    try:
        from llmrl.sft.supervised import SFTConfig, Snapshot, sft_train
    except ImportError:  # TEMP: recording on the code before the move
        from llmrl.sft.supervised import SFTConfig, Snapshot, sft_train

    _, taken, losses = sft_train(SFTConfig(seed=1, steps=30, warmup=5), {"early": Snapshot(10)})
    step, state = taken["early"]
    return {"losses": losses, "snapshot_step": step,
            "snapshot_sumsq": float(sum(float((v.double() ** 2).sum()) for v in state.values()))}


def _pretrain() -> dict:
    from llmrl.hw4.charlm import PretrainConfig, pretrain

    _, losses = pretrain(PretrainConfig(seed=2, steps=20, warmup=5))
    return {"losses": losses}


def _cli(args: list[str], tmp: Path) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", *args], cwd=tmp, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.strip() and "second" not in ln and " s " not in ln]
    return {"words": [NUMBER.sub("#", ln) for ln in lines],
            "numbers": [float(x) for ln in lines for x in NUMBER.findall(ln)]}


def _lab19_hack(tmp: Path) -> dict:
    return _cli(["llmrl.labs.lab19", "hack", "--beta", "0.05", "--steps", "3"], tmp)


def _hw4_train(tmp: Path) -> dict:
    """The run prints one summary line (to stderr, with timings); its numbers are in metrics.jsonl."""
    _cli(["llmrl.hw4", "train", "--task", "format_copy", "--algo", "grpo", "--steps", "3", "--no-progress",
          "--run-dir", str(tmp / "run"), "--fresh"], tmp)
    rows = [json.loads(ln) for ln in (tmp / "run" / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    return {"metrics": [{k: v for k, v in r.items() if "seconds" not in k and "time" not in k} for r in rows]}


RUNS = {"sft": lambda tmp: _sft(), "pretrain": lambda tmp: _pretrain(), "lab19_hack": _lab19_hack,
        "hw4_train": _hw4_train}


def _close(a, b) -> bool:
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)


def _compare(got, pinned, where: str) -> None:
    if isinstance(pinned, dict):
        assert sorted(got) == sorted(pinned), f"{where}: keys {sorted(got)} != {sorted(pinned)}"
        for k in pinned:
            _compare(got[k], pinned[k], f"{where}.{k}")
    elif isinstance(pinned, list):
        assert len(got) == len(pinned), f"{where}: {len(got)} entries, pinned {len(pinned)}"
        for i, (g, p) in enumerate(zip(got, pinned)):
            _compare(g, p, f"{where}[{i}]")
    elif pinned is None or isinstance(pinned, (str, bool)):
        assert got == pinned, f"{where}: {got!r} != pinned {pinned!r}"
    else:
        assert _close(float(got), float(pinned)), f"{where}: {got} != pinned {pinned}"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_same_seeds_give_the_pinned_numbers(name, tmp_path):
    pinned = json.loads(DATA.read_text())[name]
    _compare(RUNS[name](tmp_path), pinned, name)


def test_the_comparison_catches_a_moved_number():
    with pytest.raises(AssertionError, match="pinned"):
        _compare({"losses": [1.0, 2.0]}, {"losses": [1.0, 2.01]}, "x")
    with pytest.raises(AssertionError, match="pinned"):
        _compare({"words": ["step #"]}, {"words": ["epoch #"]}, "x")


if __name__ == "__main__":  # python lib/tests/test_move_pins.py --record [RUN ...]
    import tempfile

    if "--record" not in sys.argv:
        sys.exit("usage: test_move_pins.py --record [RUN ...]")
    names = [a for a in sys.argv[1:] if a != "--record"] or sorted(RUNS)
    data = json.loads(DATA.read_text()) if DATA.exists() else {}
    for n in names:
        with tempfile.TemporaryDirectory() as d:
            data[n] = RUNS[n](Path(d))
        print(n, "recorded")
    DATA.write_text(json.dumps(data, indent=1) + "\n")
