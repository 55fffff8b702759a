"""Reward functions: ``reward_fn(responses: list[str], answers: list[int]) -> FloatTensor [N]``.

* :func:`exact_match`: 1 when the response is exactly the decimal answer (the gold reward).
* :func:`proxy_reward`: lab19's plausible-looking but flawed reward: full credit when the answer
  appears anywhere in the response, plus ``length_bonus`` per character.
* :class:`Rubric`: lab21's weighted checklists, with :func:`binary_rubric`,
  :func:`partial_credit_rubric`, :func:`stylish_rubric` and room for negative "pitfall" items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..utils import check_float

RewardFn = Callable[[Sequence[str], Sequence[int]], torch.Tensor]


def _check(responses, answers):
    if len(responses) != len(answers):
        raise ValueError(f"responses ({len(responses)}) and answers ({len(answers)}) differ in length")


def exact_match(responses: Sequence[str], answers: Sequence[int]) -> torch.Tensor:
    """[N] float: 1.0 when the response is exactly ``str(answer)``, else 0.0."""
    _check(responses, answers)
    return torch.tensor([float(r == str(a)) for r, a in zip(responses, answers)])


def proxy_reward(responses: Sequence[str], answers: Sequence[int], length_bonus: float = 0.1) -> torch.Tensor:
    """[N] float: 1 if ``str(answer)`` occurs anywhere in the response, plus ``length_bonus`` per character.

    The flaw is deliberate: "85" earns 1.2 but "8512" earns 1.4.
    """
    _check(responses, answers)
    length_bonus = check_float("length_bonus", length_bonus, minimum=0.0)
    return torch.tensor([float(str(a) in r) + length_bonus * len(r) for r, a in zip(responses, answers)])


def make_proxy_reward(length_bonus: float = 0.1) -> RewardFn:
    """A proxy reward with a fixed length bonus (for passing to the trainer)."""
    check_float("length_bonus", length_bonus, minimum=0.0)

    def reward(responses, answers):
        return proxy_reward(responses, answers, length_bonus)

    reward.__name__ = f"proxy_reward(length_bonus={length_bonus})"
    return reward


@dataclass(frozen=True)
class RubricItem:
    """One checklist line: ``check(response, answer) -> score in [0, 1]`` times ``weight``.

    A negative weight makes a pitfall: the item costs reward when it fires.
    """

    name: str
    check: Callable[[str, int], float]
    weight: float = 1.0


class Rubric:
    """A weighted sum of rubric items; callable as a reward function."""

    def __init__(self, items: Sequence[RubricItem], name: str = "rubric"):
        if not items:
            raise ValueError("a Rubric needs at least one item")
        for it in items:
            if not isinstance(it, RubricItem):
                raise TypeError(f"rubric items must be RubricItem, got {type(it).__name__}")
            check_float(f"weight of {it.name!r}", it.weight)
        self.items = tuple(items)
        self.__name__ = name

    def scores(self, responses: Sequence[str], answers: Sequence[int]) -> dict[str, torch.Tensor]:
        """Each item's unweighted score, [N] per item name."""
        _check(responses, answers)
        return {it.name: torch.tensor([float(it.check(r, a)) for r, a in zip(responses, answers)])
                for it in self.items}

    def __call__(self, responses: Sequence[str], answers: Sequence[int]) -> torch.Tensor:
        s = self.scores(responses, answers)
        return sum(it.weight * s[it.name] for it in self.items)

    def with_item(self, item: RubricItem) -> "Rubric":
        """A copy with one more item (e.g. a pitfall with a negative weight)."""
        return Rubric(self.items + (item,), name=f"{self.__name__}+{item.name}")

    def __repr__(self) -> str:
        return "Rubric(" + ", ".join(f"{it.name}:{it.weight:g}" for it in self.items) + ")"


def is_exact(response: str, answer: int) -> float:
    return float(response == str(answer))


def right_length(response: str, answer: int) -> float:
    return float(len(response) == len(str(answer)))


def digits_right(response: str, answer: int) -> float:
    """Share of the answer's digits matched in place, aligned on the right."""
    target = str(answer)
    hits = sum(1 for i in range(1, len(target) + 1) if len(response) >= i and response[-i] == target[-i])
    return hits / len(target)


def looks_thorough(response: str, answer: int) -> float:
    """The "stylish" item: the response has three or more digits (whatever the answer)."""
    return float(len(response) >= 3 and response.isdigit())


def has_leading_zero(response: str, answer: int) -> float:
    """A pitfall detector: a multi-digit number that starts with 0 ("085")."""
    return float(len(response) > 1 and response[0] == "0")


def binary_rubric() -> Rubric:
    return Rubric([RubricItem("exact", is_exact, 1.0)], name="binary")


def partial_credit_rubric() -> Rubric:
    """Credit for the right length, each digit in place, and the exact answer (max 1.0)."""
    return Rubric([RubricItem("right_length", right_length, 0.2),
                   RubricItem("digits_right", digits_right, 0.3),
                   RubricItem("exact", is_exact, 0.5)], name="partial_credit")


def stylish_rubric(w: float = 2.0) -> Rubric:
    """Exact answer (weight 1) plus ``w`` for "looks thorough" (3+ digits): hackable once w is large."""
    w = check_float("w", w, minimum=0.0)
    return Rubric([RubricItem("exact", is_exact, 1.0), RubricItem("looks_thorough", looks_thorough, w)],
                  name=f"stylish(w={w:g})")
