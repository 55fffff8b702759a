"""The tests' strength, measured on the submission corpus (autograder/catch_rates.py).

Every corpus wrong answer (one edit of a `wrong-*` entry, applied alone to the reference) must fail
a test of its own task; the visible tests a student sees must fail at least two thirds of them in
every assignment; the reference and every alternative correct answer (`rewritten`, `right-*`) must
pass every test cell, visible and hidden. The notebooks are executed without nbgrader (one process
per notebook, forked per answer), about 15 s for the whole corpus on a quiet machine.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

import catch_rates
import corpus

ASSIGNMENTS = corpus.available()
VISIBLE_AT_LEAST = Fraction(2, 3)  # the course's target (issue 19): visible tests teach most of the mistakes


@pytest.fixture(scope="module")
def plans():
    if not ASSIGNMENTS:
        pytest.skip("no assignment has both a corpus spec and its notebooks")
    out = catch_rates.measure(ASSIGNMENTS)
    print("\n" + catch_rates.table(out))
    return out


def test_every_assignment_with_tasks_has_wrong_answers(plans):
    for a in ASSIGNMENTS:
        wrong = [v for p in plans if p.assignment == a for v in p.variants if v.kind == "wrong"]
        assert len(wrong) >= 8, f"{a}: only {len(wrong)} wrong answers in the corpus"


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
              if v.kind == "wrong" and catch_rates.failed(v, v.own_test, "visible") is None]
    assert n and Fraction(caught, n) >= VISIBLE_AT_LEAST, (
        f"{assignment}: the visible tests catch {caught} of {n} wrong answers; they miss: {', '.join(missed)}")


def test_the_evaluator_sees_a_failing_test(plans):
    """A wrong answer whose own test fails really is reported as failing (the instrument is not blind)."""
    v = next(v for p in plans for v in p.variants if v.kind == "wrong")
    assert catch_rates.failed(v, v.own_test, "full"), v.result
    ref = next(v for p in plans for v in p.variants if v.kind == "reference")
    assert all(r == {"visible": None, "full": None} for k, r in ref.result.items() if not k.startswith("_")), ref.result
