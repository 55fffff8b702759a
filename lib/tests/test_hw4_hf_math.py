"""math_hard on MATH-format data (llmrl.hw4.math_data), offline on the fixture in fixtures/math_mini.

Skipped only when the hf extra (datasets, math-verify) is not installed."""

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("datasets", reason="the hf extra is not installed (pip install -e '.[hf]')")
pytest.importorskip("math_verify", reason="the hf extra is not installed (pip install -e '.[hf]')")

import torch  # noqa: E402

from llmrl.hw4 import math_data  # noqa: E402
from llmrl.hw4.math_data import (  # noqa: E402
    MathHardTask, boxed_answer_correct, filter_rows, math_hard_reward, parse_finite_number)

FIXTURE = Path(__file__).parent / "fixtures" / "math_mini"
FILES = {"train": str(FIXTURE / "train.jsonl"), "test": str(FIXTURE / "test.jsonl")}


@pytest.fixture(scope="module")
def task():
    return MathHardTask(data_files=FILES)


def test_loads_through_datasets_and_keeps_level5_numeric_answers(task):
    # train: 10 level-5 rows, 1 with a fraction answer (dropped), 2 of other levels, 4 malformed
    assert len(task) == 9
    answers = sorted(e.answer for e in task.sample(200, torch.Generator().manual_seed(0)))
    assert set(answers) == {"31", "24", "7", "8", "1", "0.75", "120", "-7", "12000"}  # "12{,}000" normalised
    assert all(e.meta["level"] == 5 for e in task.eval_examples())
    assert [e.answer for e in task.eval_examples()] == ["60", "11", "720", "4", "12"]  # dataset order
    assert task.eval_examples()[0].prompt.startswith("What is the smallest positive integer")
    assert "\\boxed{" in task.eval_examples()[0].prompt  # the prompt asks for a boxed answer


def test_malformed_rows_are_skipped_and_counted(task):
    s = task.skipped
    assert s["train_skipped_no_problem"] == 2 and s["train_skipped_no_answer"] == 1 and s["train_skipped_no_level"] == 1
    assert s["eval_skipped_no_answer"] == 1 and s["eval_skipped_no_problem"] == 1
    assert task.n_malformed == 6
    assert s["train_filtered_level"] == 2 and s["eval_filtered_level"] == 1
    assert s["train_filtered_not_numeric"] == 1 and s["eval_filtered_not_numeric"] == 2
    kept, why = filter_rows([None, "text", {"problem": 5}, {"problem": "p", "level": "Level 5", "solution": 3},
                             {"problem": "p", "level": "Level 5", "solution": "so $\\boxed{9}$"}])
    assert len(kept) == 1 and kept[0].answer == "9"
    assert why == Counter(skipped_not_a_row=2, skipped_no_problem=1, skipped_no_answer=1)


def test_eval_set_is_deterministic_and_capped(task):
    again = MathHardTask(data_files=FILES)
    assert again.eval_examples() == task.eval_examples()
    assert MathHardTask(data_files=FILES, n_eval=3).eval_examples() == task.eval_examples()[:3]
    import inspect

    defaults = inspect.signature(MathHardTask).parameters
    assert defaults["n_eval"].default == 512 and defaults["level"].default == 5
    assert defaults["dataset"].default == "the-jb/hendrycks-math"


def test_sampling_is_seeded_and_only_from_train(task):
    a = task.sample(16, torch.Generator().manual_seed(3))
    b = task.sample(16, torch.Generator().manual_seed(3))
    assert a == b
    eval_prompts = {e.prompt for e in task.eval_examples()}
    assert not eval_prompts & {e.prompt for e in task.sample(100, torch.Generator().manual_seed(4))}


def test_expression_answers_are_optional():
    t = MathHardTask(data_files=FILES, numeric_answers="expression")
    assert [e.answer for e in t.eval_examples()] == ["60", "11", "720", "4", "-\\frac{7}{6}", "2\\sqrt{3}", "12"]
    assert t.reward("so x = \\boxed{-\\dfrac{7}{6}}", "-\\frac{7}{6}")["correct"] == 1.0
    assert t.reward("\\boxed{\\sqrt{12}}", "2\\sqrt{3}")["correct"] == 1.0
    with pytest.raises(ValueError, match="numeric_answers"):
        MathHardTask(data_files=FILES, numeric_answers="fractions")


@pytest.mark.parametrize("completion, answer, expected", [
    ("so the answer is \\boxed{60}.", "60", (0.1, 1.0, 0.0)),
    ("\\boxed{60.0}", "60", (0.1, 1.0, 0.0)),                      # the same number
    ("\\boxed{\\frac{3}{4}}", "0.75", (0.1, 1.0, 0.0)),            # math-verify: 3/4 == 0.75
    ("\\boxed{12,000}", "12000", (0.1, 1.0, 0.0)),
    ("The answer is 60.", "60", (0.0, 0.0, 0.1)),                  # right but unboxed: relaxed only
    ("\\boxed{59}, no wait, 60", "60", (0.1, 0.0, 0.1)),           # box wrong, last number right
    ("\\boxed{60} then \\boxed{61}", "60", (0.1, 0.0, 0.0)),       # the LAST box counts
    ("\\boxed{61} then \\boxed{60}", "60", (0.1, 1.0, 0.0)),
    ("\\boxed{6}0", "60", (0.1, 0.0, 0.0)),
    ("\\boxed{-7}", "7", (0.1, 0.0, 0.0)),                         # sign matters
    ("\\boxed{}", "60", (0.1, 0.0, 0.0)),
    ("\\boxed{60", "60", (0.1, 0.0, 0.1)),                         # unclosed box: format only (+ relaxed)
    ("no number here", "60", (0.0, 0.0, 0.0)),
])
def test_reward(completion, answer, expected):
    r = math_hard_reward(completion, answer)
    assert (r["boxed"], r["correct"], r["relaxed"]) == pytest.approx(expected)
    assert boxed_answer_correct(completion, answer) == (expected[1] == 1.0)


def test_math_verify_alone_would_accept_an_unboxed_answer():
    """Why the box is checked here: math-verify finds the answer in plain text too."""
    from math_verify import parse, verify

    assert verify(parse("$60$"), parse("The answer is 60"))
    assert not boxed_answer_correct("The answer is 60", "60")


def test_parse_finite_number():
    assert parse_finite_number("$1,000$") == 1000.0
    assert parse_finite_number("-2.5") == -2.5
    assert parse_finite_number("45^\\circ") == 45.0
    assert parse_finite_number("5\\text{ cm}") == 5.0
    for bad in ("\\frac{3}{4}", "x+1", "\\infty", "", "1e400", None):
        assert parse_finite_number(bad) is None


def test_registry_and_bad_input(monkeypatch):
    from llmrl.hw4.tasks import make_task

    t = make_task("math_hard", data_files=FILES, n_eval=2)
    assert t.name == "math_hard" and len(t.eval_examples()) == 2
    assert t.reward_components == ("boxed", "correct", "relaxed")
    with pytest.raises(ValueError, match="data_files"):
        MathHardTask(data_files={"train": FILES["train"]})
    with pytest.raises(ValueError, match="n_eval"):
        MathHardTask(data_files=FILES, n_eval=0)
    with pytest.raises(ValueError, match="no usable"):
        MathHardTask(data_files=FILES, level=2)
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # fail at once instead of retrying
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="nobody-here/no-such-math"):
        math_data.load_rows("nobody-here/no-such-math")


def test_subject_configurations_are_concatenated(monkeypatch):
    """Copies of MATH split by subject: config="all" loads every configuration and concatenates them
    (the hub is replaced by the fixture, one 'subject' per file)."""
    import datasets

    real_load = datasets.load_dataset

    def fake_load(name, config, split):
        assert name == "some/math-by-subject" and split in ("train", "test")
        return real_load("json", data_files={split: FILES[config]}, split=split)

    monkeypatch.setattr(math_data.datasets, "load_dataset", fake_load)
    monkeypatch.setattr(math_data.datasets, "get_dataset_config_names", lambda name: ["train", "test"])
    rows = math_data.load_rows("some/math-by-subject", "test", config="all")
    assert len(rows) == 16 + 10  # every row of both files
    t = MathHardTask(dataset="some/math-by-subject", config=["test"])
    assert [e.answer for e in t.eval_examples()] == ["60", "11", "720", "4", "12"]
