"""The benchmark's measuring pieces measure what they say (no speed is asserted: speed is the
bench's output, as ratios within one run, not a test)."""

from __future__ import annotations

import json

from llmrl.tools import bench
from llmrl.rl import step
from llmrl.tinylm import TinyLM


def test_stage_profile_covers_the_step_and_puts_everything_back():
    before = {name: getattr(step, name) for name in ("collect", "score", "update", "step_metrics", "task_score")}
    prof = bench.stage_ms(TinyLM(), steps=2)
    assert {name: getattr(step, name) for name in before} == before  # the patched functions are restored
    assert step.PolicyOptimizer.step.__name__ == "step"
    stages = ("collect", "score", "advantages", "update", "step_metrics")
    assert set(prof) == {label for label, *_ in bench.PROFILED} | {"step", "step_wall"}
    assert all(prof[k] >= 0 for k in prof)
    # the five stages are the step (the loop around them adds little); a nested call is part of its stage
    assert 0.5 * prof["step"] <= sum(prof[s] for s in stages) <= prof["step"] * 1.05 + 0.5
    assert prof["  generate (sampling)"] <= prof["collect"] + 0.05
    assert prof["  backward"] <= prof["update"] + 0.05


def test_counted_flops_grow_with_the_seeds():
    model = TinyLM()
    one, two = bench.counted_gflop(model, 1), bench.counted_gflop(model, 1, seeds=[0, 1])
    # two seeds do each seed's products; the scorer may pack one seed's rows into fewer columns
    # than the pair's, so not exactly twice
    assert 0 < one and 1.8 * one < two <= 2.2 * one
    assert one < bench.rl_step_flops(model) / 1e9  # fewer than the plain way's yardstick


def test_baseline_clock_reads_cpu_time(tmp_path):
    """The baseline script runs unchanged; with cpu=True its perf_counter is its process's CPU time."""
    script = tmp_path / "fake_baseline.py"
    script.write_text("import json, time\nt = time.perf_counter()\ntime.sleep(0.3)\n"
                      "print(json.dumps({'name': 'baseline_rl_step', 'ms': 1000 * (time.perf_counter() - t)}))\n")
    wall, cpu = bench.baseline_ms(script), bench.baseline_ms(script, cpu=True)
    assert wall >= 290 and cpu < 100, (wall, cpu)  # asleep: wall time passes, CPU time hardly
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit('no figure')\n")
    assert bench.baseline_ms(broken) is None


def test_emit_prints_one_json_object_per_figure(capsys):
    rec = bench.emit("x_ms", 1.5, "ms", cpu_ms=1.0)
    assert json.loads(capsys.readouterr().out) == rec == {"figure": "x_ms", "value": 1.5, "unit": "ms", "cpu_ms": 1.0}


def test_against_runs_each_library_in_its_own_process(tmp_path):
    """--against: the "before" library is the one the worker imports (a folder or a git revision),
    never the installed one; a worker that imports another library is refused."""
    from pathlib import Path

    here = Path(bench.__file__).resolve().parents[2]
    assert bench.library_at(str(here), tmp_path) == here  # a folder holding llmrl/
    got = bench.step_in_process(here, 1, [2])
    assert set(got) == {2} and got[2][0] > 0 and got[2][1] > 0
    lib = bench.library_at("HEAD", tmp_path)  # a revision, extracted with git archive
    assert (lib / "llmrl" / "rl" / "train.py").is_file() and lib != here
    fake = tmp_path / "fake"
    (fake / "llmrl").mkdir(parents=True)
    (fake / "llmrl" / "__init__.py").write_text("")  # no trainer in it: the worker fails with the reason
    try:
        bench.step_in_process(fake, 1, [1])
    except RuntimeError as e:
        assert "step worker failed" in str(e) and "llmrl.tinylm" in str(e)
    else:
        raise AssertionError("a library without the step was timed")
