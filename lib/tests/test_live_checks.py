"""live_checks: one line that says whether an experiment on the student's code matches the reference."""

import numpy as np
import pytest

from llmrl import live_checks


def test_exact_match_and_mismatch_name_the_task(capsys):
    assert live_checks.compare_exact("run", [1.0, 2.0], [1.0, 2.00001], task="Task 9 (`f`)", atol=1e-4)
    assert "matches the reference" in capsys.readouterr().out
    assert not live_checks.compare_exact("run", [1.0, 2.5], [1.0, 2.0], task="Task 9 (`f`)", atol=1e-4)
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "Task 9 (`f`)" in out and "0.5" in out


def test_nan_where_the_reference_is_finite_is_a_difference(capsys):
    assert not live_checks.compare_exact("run", [np.nan, 1.0], [0.0, 1.0], task="Task 1")
    assert not live_checks.compare_exact("run", [1.0], [1.0, 2.0], task="Task 1")
    assert "shape" in capsys.readouterr().out


def test_rates_allow_sampling_noise_only(capsys):
    # 1600 samples: a 0.02 gap is noise (4 standard errors of the difference are about 0.07 at p = 0.5)
    assert live_checks.compare_rates("acc", [0.50, 0.80], [0.52, 0.79], n=1600, task="Task 2")
    assert not live_checks.compare_rates("acc", [0.50, 0.80], [0.65, 0.79], n=1600, task="Task 2")
    assert "Task 2" in capsys.readouterr().out
    with pytest.raises(ValueError, match="n must be"):
        live_checks.compare_rates("acc", [0.5], [0.5], n=0, task="Task 2")


def test_a_match_prints_no_machine_dependent_number(capsys):
    live_checks.compare_exact("run", [1.0], [1.0 + 3e-15], task="Task 1", atol=1e-9)
    assert capsys.readouterr().out.strip() == "run: matches the reference (within 1e-09)"


def test_pass_at_k_per_problem_calls_a_scalar_function_per_problem():
    from llmrl.evaluation import pass_at_k, pass_at_k_per_problem

    calls = []

    def scalar(n, c, k):
        calls.append((n, c, k))
        return float(pass_at_k(n, c, k))

    counts = np.array([0, 3, 8])
    assert np.allclose(pass_at_k_per_problem(8, counts, 2, scalar), pass_at_k_per_problem(8, counts, 2))
    assert calls == [(8, 0, 2), (8, 3, 2), (8, 8, 2)] and all(type(x) is int for c in calls for x in c)
    with pytest.raises(ValueError, match="probabilities"):
        pass_at_k_per_problem(8, counts, 2, lambda n, c, k: float("nan"))


def test_differing_names_each_replacement_that_changes_the_result():
    def run(a=1.0, b=2.0, c=0.0):
        return [a, b, c]

    found = live_checks.differing("run", {"Task A": {"a": 1.0}, "Task B": {"b": 3.0}, "Task C": {"c": 1.0}},
                                  run, [1.0, 2.0, 0.0])
    assert found == ["Task B", "Task C"]
    assert live_checks.differing("run", {"Task A": {"a": 1.0}}, run, [1.0, 2.0, 0.0]) == []


def test_at_least_names_the_task_below_the_floor(capsys):
    assert live_checks.at_least("reward", 1.2, 0.8, task="Task 5")
    assert not live_checks.at_least("reward", 0.3, 0.8, task="Task 5")
    assert not live_checks.at_least("reward", float("nan"), 0.8, task="Task 5")
    out = capsys.readouterr().out
    assert "only 0.300" in out and out.count("Check Task 5") == 2
