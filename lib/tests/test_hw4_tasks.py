"""hw4 tasks: rewards on hand-made completions, sampling, eval sets, the registry."""

import sys
import types

import pytest
import torch

from llmrl.hw4.tasks import (FormatCopyTask, MathToyTask, Task, last_boxed, make_task, math_reward, parse_number,
                             register_task, score, task_names)


def total(d):
    return round(sum(d.values()), 6)


@pytest.mark.parametrize("completion, want", [
    ("<answer>-42</answer>", (0.2, 0.1, 1.0)),             # the perfect completion: 1.3
    ("  <answer>-42</answer>\n", (0.2, 0.1, 1.0)),         # surrounding whitespace is still clean
    ("<answer>-42</answer> ok", (0.2, 0.0, 1.0)),          # extra text: not clean
    ("<answer> -42 </answer>", (0.2, 0.1, 1.0)),           # spaces inside the tag parse
    ("<answer>-43</answer>", (0.2, 0.1, 0.0)),             # wrong copy
    ("<answer>42</answer>", (0.2, 0.1, 0.0)),              # sign lost
    ("<answer>-42.0</answer>", (0.2, 0.1, 0.0)),           # not an integer
    ("Answer: -42", (0.0, 0.0, 0.0)),                      # no tag: nothing, even with the right number
    ("<answer>-42", (0.0, 0.0, 0.0)),                      # unclosed tag
    ("<answer>1</answer><answer>-42</answer>", (0.2, 0.0, 0.0)),  # two tags: the first one counts
    ("", (0.0, 0.0, 0.0)),
])
def test_format_copy_reward_components(completion, want):
    r = FormatCopyTask().reward(completion, "-42")
    assert (r["tag"], r["clean"], r["correct"]) == pytest.approx(want)
    assert FormatCopyTask().exact_match(completion, "-42") == (want[2] == 1.0)


def test_format_copy_max_reward_is_1_3_and_prompts():
    task = FormatCopyTask()
    assert total(task.reward("<answer>7</answer>", "7")) == pytest.approx(1.3)
    exs = task.sample(500, torch.Generator().manual_seed(0))
    ns = [int(e.answer) for e in exs]
    assert min(ns) >= -5000 and max(ns) <= 5000 and min(ns) < -4000 and max(ns) > 4000
    assert all(e.prompt == f"Copy this integer exactly: {e.answer}" for e in exs)
    ev = task.eval_examples()
    assert len(ev) == 64 and ev == FormatCopyTask().eval_examples()   # deterministic
    assert task.max_new_tokens == 24 and task.eval_max_new_tokens == 24


@pytest.mark.parametrize("completion, want", [
    ("\\boxed{12}", (0.1, 1.0, 0.0)),
    ("so 5+7 = \\boxed{12}.", (0.1, 1.0, 0.0)),
    ("\\boxed{11} no wait \\boxed{12}", (0.1, 1.0, 0.0)),    # the LAST box counts
    ("\\boxed{12} no wait \\boxed{11}", (0.1, 0.0, 0.0)),
    ("\\boxed{11} but really 12", (0.1, 0.0, 0.1)),          # relaxed: last number right, box wrong
    ("The answer is 12.", (0.0, 0.0, 0.1)),                  # relaxed without a box
    ("12 is not it, 13", (0.0, 0.0, 0.0)),
    ("\\boxed{12.0}", (0.1, 1.0, 0.0)),                     # numerically equal
    ("\\boxed{24/2}", (0.1, 1.0, 0.0)),
    ("\\boxed{12", (0.1, 0.0, 0.1)),                         # unclosed box: no boxed answer, relaxed
    ("\\boxed{\\frac{1}{2}}", (0.1, 0.0, 0.0)),
])
def test_math_reward_components(completion, want):
    r = math_reward(completion, "12")
    assert (r["boxed"], r["correct"], r["relaxed"]) == pytest.approx(want)


def test_number_helpers():
    assert parse_number(" -3 ") == -3 and parse_number("1,024") == 1024 and parse_number("$5$") == 5
    assert parse_number("3/4") == parse_number("0.75")
    assert parse_number("x") is None and parse_number("") is None and parse_number(None) is None
    assert last_boxed("a \\boxed{1} b \\boxed{{2}}") == "{2}" and last_boxed("none") is None


def test_math_toy_eval_is_held_out_and_balanced():
    task = MathToyTask()
    ev = task.eval_examples()
    assert len(ev) == 128 and ev == MathToyTask().eval_examples()
    fams = [e.meta["family"] for e in ev]
    assert {f: fams.count(f) for f in set(fams)} == {"add": 32, "sub": 32, "mul": 32, "add3": 32}
    assert len(MathToyTask(families=("sub", "mul")).eval_examples()) == 64
    held = {e.prompt for e in ev}
    train = task.sample(2000, torch.Generator().manual_seed(1))
    assert not held & {e.prompt for e in train}
    for e in train[:50]:  # every answer is right and scores 1.1 when boxed
        assert total(task.reward(f"\\boxed{{{e.answer}}}", e.answer)) == pytest.approx(1.1)
    assert task.sample(5, 3) == task.sample(5, 3)  # seeded


def test_score_batches_components():
    task = make_task("format_copy")
    tot, comps = score(task, ["<answer>1</answer>", "Answer: 1"], ["1", "1"])
    assert tot.tolist() == pytest.approx([1.3, 0.0]) and set(comps) == {"tag", "clean", "correct"}
    with pytest.raises(ValueError, match="differ in length"):
        score(task, ["a"], ["1", "2"])


def test_registry_and_bad_input():
    assert {"format_copy", "math_toy", "math_hard"} <= set(task_names())
    assert isinstance(make_task("math_toy"), Task)
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        make_task("nope")
    with pytest.raises(ValueError, match="high"):
        FormatCopyTask(low=5, high=1)
    with pytest.raises(TypeError, match="n_eval"):
        FormatCopyTask(n_eval=2.5)
    with pytest.raises(ValueError, match="answer must be a number"):
        FormatCopyTask().reward("<answer>1</answer>", "one")
    with pytest.raises(ValueError, match="families"):
        MathToyTask(families=("div",))
    with pytest.raises(TypeError, match="factory"):
        register_task("x", 3)


def test_math_hard_imports_math_data_lazily(monkeypatch):
    fake = types.ModuleType("llmrl.hw4.math_data")
    fake.make_math_hard_task = lambda **kw: MathToyTask(**kw)  # stands in for the real MATH task
    monkeypatch.setitem(sys.modules, "llmrl.hw4.math_data", fake)
    task = make_task("math_hard", n_eval_per_family=4)
    assert len(task.eval_examples()) == 16
