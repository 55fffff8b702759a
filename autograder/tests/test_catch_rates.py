"""The tests' strength, measured on the submission corpus and its hold-out set (autograder/corpus/catch_rates.py).

Every corpus wrong answer (one edit of a `wrong-*` entry, applied alone to the reference) must fail
a test cell of its own task; the visible tests a student sees must fail at least two thirds of them
in every assignment. The hold-out set (autograder/corpus/_holdout_<assignment>.py: wrong
answers of kinds nobody had listed, written before the contract tests) must be caught at least 90%
by all tests and 75% by the visible ones, in every assignment. The reference and every alternative
correct answer (`rewritten`, `right-*`, hold-out ones included) must pass every test cell, visible
and hidden. The honest wrong answers of the hostile corpus lose exactly the cells the hostile spec
says (its class 3 and 4 attacks are graded against that table). The notebooks are executed without
nbgrader (one process per notebook, forked per answer), about a minute for everything on a quiet
machine.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from autograder.corpus import catch_rates
from autograder.corpus.catch_rates import failed
from autograder import corpus
from autograder.corpus import hostile

ASSIGNMENTS = corpus.available()
VISIBLE_AT_LEAST = Fraction(2, 3)  # the course's target: visible tests teach most of the mistakes
HOLDOUT_ALL_AT_LEAST = Fraction(9, 10)      # the target on mistakes nobody listed
HOLDOUT_VISIBLE_AT_LEAST = Fraction(3, 4)


@pytest.fixture(scope="module")
def plans():
    if not ASSIGNMENTS:
        pytest.skip("no assignment has both a corpus spec and its notebooks")
    out = []
    for a in ASSIGNMENTS:
        for p in catch_rates.plan(a):
            shifted = corpus.Entry("honest-wrong-answers", p.notebook, "hostile.wrong_answers() handed in honestly",
                                   [hostile.wrong_answers()])
            p.variants.append(catch_rates.Variant(a, p.notebook, "other", shifted.name, None, shifted.what,
                                                  catch_rates.entry_solutions(a, shifted)))
            out.append(catch_rates.evaluate(p))
    print("\n" + catch_rates.table(out) + "\n\n" + catch_rates.summary(out))
    return out


def test_every_assignment_with_tasks_has_wrong_answers(plans):
    for a in ASSIGNMENTS:
        wrong = [v for p in plans if p.assignment == a for v in p.variants if v.kind == "wrong" and not v.holdout]
        assert len(wrong) >= 8, f"{a}: only {len(wrong)} wrong answers in the corpus"


def test_every_task_has_tests_by_concern(plans):
    for p in plans:
        for task, cells in p.tasks.items():
            assert len(cells) >= 2, f"{p.notebook}: {task} has {cells}: split its tests by concern"
            assert all(c.startswith(f"test_{task}_") for c in cells), f"{p.notebook}: {task}'s cells {cells}"
            assert any(c.endswith("_values") for c in cells), f"{p.notebook}: {task} has no values cell"


def test_reference_and_alternative_answers_pass_every_test_cell(plans):
    bad = catch_rates.problems(plans)
    assert not bad["broken"], "\n".join(bad["broken"])
    assert not bad["correct_fails"], "\n".join(bad["correct_fails"])


def test_every_wrong_answer_fails_a_test_of_its_own_task(plans):
    missed = catch_rates.problems(plans)["uncaught"]
    assert not missed, "\n".join(missed)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_visible_tests_catch_at_least_two_thirds_of_the_wrong_answers(plans, assignment):
    mine = [p for p in plans if p.assignment == assignment]
    caught, n = catch_rates.rates(mine)["visible"]
    missed = [v.label for p in mine for v in p.variants
              if v.kind == "wrong" and not v.holdout and catch_rates.caught(v, "visible") is None]
    assert n and Fraction(caught, n) >= VISIBLE_AT_LEAST, (
        f"{assignment}: the visible tests catch {caught} of {n} wrong answers; they miss: {', '.join(missed)}")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_hold_out_set_is_caught(plans, assignment):
    mine = [p for p in plans if p.assignment == assignment]
    r = catch_rates.rates(mine, holdout="A")
    (vis, n), (full, _) = r["visible"], r["full"]
    assert n >= 15, f"{assignment}: only {n} hold-out wrong answers"
    assert Fraction(full, n) >= HOLDOUT_ALL_AT_LEAST, f"{assignment}: all tests catch {full} of {n} hold-out answers"
    assert Fraction(vis, n) >= HOLDOUT_VISIBLE_AT_LEAST, f"{assignment}: visible tests catch {vis} of {n} hold-out answers"


def test_the_hostile_table_says_what_honest_wrong_answers_lose(plans):
    for p in plans:
        v = next(v for v in p.variants if v.entry == "honest-wrong-answers")
        fails = tuple(t for t in p.full if catch_rates.failed(v, t, "full"))
        want = hostile.WRONG_ANSWERS_LOSE.get((p.assignment, p.notebook))
        assert want is not None and set(want) == set(fails), (
            f"{p.assignment}/{p.notebook}: hostile.WRONG_ANSWERS_LOSE says {want}, the shifted answers fail {fails}")


def test_the_evaluator_sees_a_failing_test(plans):
    """A wrong answer whose own test fails really is reported as failing (the instrument is not blind)."""
    v = next(v for p in plans for v in p.variants if v.kind == "wrong")
    assert catch_rates.caught(v, "full"), v.result
    ref = next(v for p in plans for v in p.variants if v.kind == "reference")
    assert all(r == {"visible": None, "full": None} for k, r in ref.result.items() if not k.startswith("_")), ref.result


def test_every_concern_cell_is_failed_by_two_wrong_answers(plans):
    """Every graded cell catches something: at least two wrong answers of the corpus and the hold-out
    sets together fail it (all tests), as measured here; a cell no mistake fails tests nothing."""
    short = []
    for p in plans:
        for cells in p.tasks.values():
            for t in cells:
                n = sum(1 for v in p.variants if v.kind == "wrong" and t in v.own_tests and failed(v, t, "full"))
                if n < 2:
                    short.append(f"{p.notebook}: {t} failed by {n}")
    assert not short, "; ".join(short)
