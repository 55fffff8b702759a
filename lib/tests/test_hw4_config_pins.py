"""Same-seed pins of hw4's configuration and of two short hw4 runs, taken before hw4's three configs
(HW4Config, the required runs' DEFAULTS, the RL step's RLConfig) were made one: nothing may move.

Pinned in ``data/hw4_config_pins.json``:

* ``runs``: format_copy with GRPO (4 steps) and GR-REINFORCE (3 steps) on the character model, the
  reference functions, eval every 2 steps on 8 problems: every metric of every step (rewards and
  their components, loss, KL to the reference, entropy, clip statistics, gradient norm, eval),
  and the ``config.json`` the run saves;
* ``configs``: ``default_config(task, algo)`` of every required run and ``HW4Config()``: every field
  and the run key (a checkpoint resumes only under the same key, so a key that moved would orphan
  every saved run);
* ``spine``: the RL step's settings of those runs (``spine_config``), on 1 and 2 processes;
* ``trl``: the ``trl.GRPOConfig`` keywords of those runs and the text ``train-trl --dry-run`` prints.

Tolerance of the runs' numbers: 1e-5 absolute plus 1e-5 relative. One thread is deterministic: on
the machine that recorded them a rerun agrees to the last bit. Another CPU rounds the last bits of
a matmul or a sum differently, which moved the spine pins' values by at most 4e-6 under the emulated
CPUs of docs/reproducibility.md (test_spine_equivalence.py); a change of the code path (another
random stream, the KL term missing or doubled, a stage out of order) moves them by 1e-3 or more.
Everything else (configs, keys, keywords, printed text) must be equal.

The one intended change is where the spine says the KL penalty acts: it used to zero
``RLConfig.kl_coef`` (the penalty lives in the student's loss), hiding the run's real coefficient;
it now records the coefficient, that the policy loss function applies it and with which estimator
(k3, the student's approx_kl_from_logprobs, where RLConfig's default k1 was shown). Those fields
(``SPINE_KL``) are left out of the spine's comparison and asserted in test_hw4_config.py.

Record again (only for an intended change of the numbers, explained in its commit):
``python lib/tests/test_hw4_config_pins.py --record``.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import fields
from pathlib import Path

import pytest

DATA = Path(__file__).with_name("data") / "hw4_config_pins.json"
ATOL = RTOL = 1e-5
RUNS = (("grpo", 4), ("reinforce", 3))
SPINE_KL = ("kl_coef", "kl_mode", "kl_estimator")  # the intended change (module docstring)


def _required():
    from llmrl.hw4.trainer import DEFAULTS

    return sorted(DEFAULTS)


def _runs(tmp: Path) -> dict:
    from llmrl.hw4.impl import load_impl
    from llmrl.hw4.trainer import default_config, train

    impl = load_impl("reference")
    out = {}
    for algo, steps in RUNS:
        run_dir = tmp / algo
        cfg = default_config("format_copy", algo, steps=steps, eval_every=2, eval_limit=8)
        res = train(cfg, impl, run_dir=run_dir, resume=False, progress=False)
        out[algo] = {"records": [{k: v for k, v in r.items() if k != "step_seconds"} for r in res.records],
                     "config.json": json.loads((run_dir / "config.json").read_text())}
    return out


def _configs() -> dict:
    from llmrl.hw4.trainer import HW4Config, default_config

    out = {"HW4Config()": {"fields": json.loads(json.dumps(HW4Config().to_dict(), default=str)),
                           "key": HW4Config().key()}}
    for task, algo in _required():
        cfg = default_config(task, algo)
        out[f"{task}/{algo}"] = {"fields": json.loads(json.dumps(cfg.to_dict(), default=str)), "key": cfg.key()}
    return out


def _spine() -> dict:
    from llmrl.hw4.trainer import default_config, spine_config

    out = {}
    for task, algo in _required():
        for processes in (1, 2):
            rl = spine_config(default_config(task, algo), processes)
            out[f"{task}/{algo}/{processes}"] = {f.name: _plain(getattr(rl, f.name)) for f in fields(rl)}
    return out


def _trl() -> dict:
    from llmrl.hw4 import trl_export
    from llmrl.hw4.trainer import default_config

    out = {}
    for task, algo in _required():
        cfg = default_config(task, algo)
        kw = trl_export.grpo_config_kwargs(cfg, "out")
        out[f"{task}/{algo}"] = {"kwargs": json.loads(json.dumps(kw, default=str)),
                                 "dry_run": trl_export.describe_mapping(cfg, kw)}
    return out


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def record(tmp: Path) -> None:
    data = {"runs": _runs(tmp), "configs": _configs(), "spine": _spine(), "trl": _trl()}
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA}")


def _close(want, got, where):
    """``got`` equals ``want`` (nested dicts and lists), floats within ATOL + RTOL * |want|."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), \
            f"{where}: keys {sorted(got) if isinstance(got, dict) else got!r}, expected {sorted(want)}"
        for k in want:
            _close(want[k], got[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: expected {len(want)} entries, got {got!r}"
        for i, (w, g) in enumerate(zip(want, got)):
            _close(w, g, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool) and isinstance(got, (int, float)):
        if math.isnan(want):
            assert math.isnan(got), f"{where}: expected nan, got {got!r}"
        else:
            assert abs(got - want) <= ATOL + RTOL * abs(want), f"{where}: expected {want!r}, got {got!r}"
    else:
        assert got == want and type(got) is type(want), f"{where}: expected {want!r}, got {got!r}"


@pytest.fixture(scope="module")
def pinned():
    assert DATA.exists(), f"{DATA} is missing: python {__file__} --record"
    return json.loads(DATA.read_text())


def test_short_hw4_runs_give_the_pinned_numbers(pinned, tmp_path):
    got = json.loads(json.dumps(_runs(tmp_path)))
    _close(pinned["runs"], got, "runs")


def test_required_runs_configs_and_keys_are_the_pinned_ones(pinned):
    assert pinned["configs"] == _configs()


def test_spine_settings_are_the_pinned_ones_apart_from_where_the_kl_acts(pinned):
    got = _spine()
    assert sorted(got) == sorted(pinned["spine"])
    for name, want in pinned["spine"].items():
        assert {k: v for k, v in got[name].items() if k not in SPINE_KL} == \
            {k: v for k, v in want.items() if k not in SPINE_KL}, name


def test_trl_keywords_and_dry_run_text_are_the_pinned_ones(pinned):
    assert pinned["trl"] == _trl()


def test_the_comparison_catches_a_moved_number():
    """The tolerance is tight: a relative change of 1e-4 (smaller than any code-path change) fails."""
    _close({"a": [1.0, {"b": 2.5}]}, {"a": [1.0 + 1e-7, {"b": 2.5}]}, "same")
    with pytest.raises(AssertionError, match=r"a\[1\]\.b"):
        _close({"a": [1.0, {"b": 2.5}]}, {"a": [1.0, {"b": 2.5 * (1 + 1e-4)}]}, "moved")
    with pytest.raises(AssertionError):
        _close({"n": 3}, {"n": 3.0}, "type")


if __name__ == "__main__":
    if "--record" not in sys.argv[1:]:
        sys.exit(f"usage: python {sys.argv[0]} --record")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record(Path(tmp))
