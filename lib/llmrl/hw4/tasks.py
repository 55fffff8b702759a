"""The tasks of hw4: prompts, a fixed evaluation set and a verifiable reward, by name.

A task is anything with the members of :class:`Task` (the per-completion form of the library's
task protocol, :mod:`llmrl.tasks.task_protocol`). The trainer only calls those, so a task written elsewhere plugs
in with :func:`register_task` (``math_hard`` does this lazily: its module,
``llmrl.hw4.math_data``, is imported the first time someone asks for it).

Rewards come as a dict of named components (logged separately) whose sum is the reward the
policy sees; ``exact_match`` is the task's notion of a correct answer (the eval metric).

Built-in tasks:

* ``format_copy``: "Copy this integer exactly: N" with N uniform in [-5000, 5000]. Components
  ``tag`` 0.2 (an ``<answer>...</answer>`` tag is present), ``clean`` 0.1 (the completion, stripped,
  is that one tag and nothing else), ``correct`` 1.0 (the tag's content parses to N). Max 1.3.
  Eval: 64 fixed prompts, greedy, 24 new tokens.
* ``math_toy``: one-line arithmetic word problems answered as ``\\boxed{NUMBER}``, rewarded like
  math_hard: ``boxed`` 0.1 when ``\\boxed{`` appears, ``correct`` 1.0 when the number in the LAST box
  equals the answer, ``relaxed`` 0.1 when the last number in the text equals the answer but the box
  does not. Four families of single digits 2-9 (sums, differences, products, three-term sums); the
  eval set is 128 fixed problems, 32 per family, that training never samples.
"""

from __future__ import annotations

import importlib
import re
from typing import Callable, Protocol, Sequence, runtime_checkable

import torch

from ..tasks.task_protocol import Example, score  # noqa: F401  (the one task protocol; score() batches per-completion rewards)
from ..utils import check_int, make_generator
from .answers import _INT, _answer_value, last_boxed, last_number, parse_number  # noqa: F401  (hw4's names for them)


@runtime_checkable
class Task(Protocol):
    name: str
    max_new_tokens: int                 # cap on sampled completion length during training
    eval_max_new_tokens: int            # cap during (greedy) evaluation
    reward_components: tuple[str, ...]  # keys of reward(); their sum is the reward

    def sample(self, n: int, generator: torch.Generator) -> list[Example]:
        """``n`` training problems drawn with ``generator`` (never from the eval set)."""

    def eval_examples(self) -> list[Example]:
        """The fixed, deterministic evaluation set (the same list on every call)."""

    def reward(self, completion: str, answer: str) -> dict[str, float]:
        """Reward components of one completion; the reward is their sum."""

    def exact_match(self, completion: str, answer: str) -> bool:
        """Whether the completion's final answer is the reference answer."""


# ----------------------------------------------------------------------------- number parsing

# ----------------------------------------------------------------------------- format_copy

_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class FormatCopyTask:
    """Copy an integer into one ``<answer>`` tag (the fast pipeline check of hw4)."""

    name = "format_copy"
    reward_components = ("tag", "clean", "correct")
    PROMPT = "Copy this integer exactly: {n}"

    def __init__(self, low: int = -5000, high: int = 5000, n_eval: int = 64, eval_seed: int = 1234,
                 max_new_tokens: int = 24):
        check_int("low", low)
        check_int("high", high)
        if high < low:
            raise ValueError(f"high ({high}) must be >= low ({low})")
        self.low, self.high = int(low), int(high)
        self.n_eval = check_int("n_eval", n_eval, minimum=1)
        self.eval_seed = check_int("eval_seed", eval_seed, minimum=0)
        self.max_new_tokens = self.eval_max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        self._eval = self._draw(self.n_eval, torch.Generator().manual_seed(self.eval_seed))

    def _draw(self, n, g):
        ns = torch.randint(self.low, self.high + 1, (n,), generator=g).tolist()
        return [Example(self.PROMPT.format(n=v), str(v), {"n": v}) for v in ns]

    def sample(self, n: int, generator: torch.Generator | int | None = None) -> list[Example]:
        check_int("n", n, minimum=1)
        return self._draw(n, make_generator(generator))

    def eval_examples(self) -> list[Example]:
        return list(self._eval)

    def reward(self, completion: str, answer: str) -> dict[str, float]:
        target = _answer_value(answer, "format_copy")
        m = _TAG.search(completion)
        tag = m is not None
        clean = tag and completion.strip() == m.group(0)
        correct = tag and _INT.fullmatch(m.group(1).strip()) is not None and parse_number(m.group(1)) == target
        return {"tag": 0.2 * tag, "clean": 0.1 * clean, "correct": 1.0 * correct}

    def exact_match(self, completion: str, answer: str) -> bool:
        return self.reward(completion, answer)["correct"] > 0


# ----------------------------------------------------------------------------- math_toy

MATH_FAMILIES = ("add", "sub", "mul", "add3")
_MATH_TEXT = {
    "add": "What is {a} plus {b}?",
    "sub": "What is {a} minus {b}?",
    "mul": "What is {a} times {b}?",
    "add3": "What is {a} plus {b} plus {c}?",
}


def math_problem(family: str, a: int, b: int, c: int = 0) -> Example:
    """The math_toy problem of ``family`` on operands a, b (and c for add3)."""
    if family not in _MATH_TEXT:
        raise ValueError(f"family must be one of {MATH_FAMILIES}, got {family!r}")
    value = {"add": a + b, "sub": a - b, "mul": a * b, "add3": a + b + c}[family]
    meta = {"family": family, "a": a, "b": b, "c": c}
    return Example(_MATH_TEXT[family].format(a=a, b=b, c=c), str(value), meta)


def math_reward(completion: str, answer: str) -> dict[str, float]:
    """The math_hard reward: boxed 0.1, correct 1.0 (last box exact), relaxed 0.1 (last number exact, box not)."""
    target = _answer_value(answer, "math reward")
    boxed = "\\boxed{" in completion
    inner = last_boxed(completion)
    correct = inner is not None and parse_number(inner) == target
    relaxed = (not correct) and last_number(completion) == target
    return {"boxed": 0.1 * boxed, "correct": 1.0 * correct, "relaxed": 0.1 * relaxed}


class MathToyTask:
    """Small arithmetic word problems with \\boxed{} answers: math_hard's shape at CPU scale."""

    name = "math_toy"
    reward_components = ("boxed", "correct", "relaxed")

    def __init__(self, low: int = 2, high: int = 9, n_eval_per_family: int = 32, eval_seed: int = 4321,
                 max_new_tokens: int = 24, families: Sequence[str] = MATH_FAMILIES):
        self.low, self.high = check_int("low", low), check_int("high", high)
        if high < low:
            raise ValueError(f"high ({high}) must be >= low ({low})")
        self.families = tuple(families)
        for f in self.families:
            if f not in _MATH_TEXT:
                raise ValueError(f"families must be drawn from {MATH_FAMILIES}, got {f!r}")
        check_int("n_eval_per_family", n_eval_per_family, minimum=1)
        self.max_new_tokens = self.eval_max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        g = torch.Generator().manual_seed(check_int("eval_seed", eval_seed, minimum=0))
        self._eval, seen = [], set()
        for fam in self.families:
            got = 0
            n_distinct = (high - low + 1) ** (3 if fam == "add3" else 2)
            if n_eval_per_family > n_distinct // 2:
                raise ValueError(f"n_eval_per_family={n_eval_per_family} leaves too few training problems "
                                 f"for {fam!r} ({n_distinct} distinct)")
            while got < n_eval_per_family:
                ex = self._draw_one(fam, g)
                if ex.prompt not in seen:
                    seen.add(ex.prompt)
                    self._eval.append(ex)
                    got += 1
        self._eval_prompts = frozenset(seen)

    def _draw_one(self, fam, g):
        a, b, c = torch.randint(self.low, self.high + 1, (3,), generator=g).tolist()
        return math_problem(fam, a, b, c if fam == "add3" else 0)

    def sample(self, n: int, generator: torch.Generator | int | None = None, include_eval: bool = False) -> list[Example]:
        """``n`` problems, families uniform; eval problems are redrawn unless ``include_eval``."""
        check_int("n", n, minimum=1)
        g = make_generator(generator)
        out = []
        while len(out) < n:
            fam = self.families[int(torch.randint(len(self.families), (1,), generator=g))]
            ex = self._draw_one(fam, g)
            if include_eval or ex.prompt not in self._eval_prompts:
                out.append(ex)
        return out

    def eval_examples(self) -> list[Example]:
        return list(self._eval)

    def reward(self, completion: str, answer: str) -> dict[str, float]:
        return math_reward(completion, answer)

    def exact_match(self, completion: str, answer: str) -> bool:
        return self.reward(completion, answer)["correct"] > 0


# ----------------------------------------------------------------------------- registry

def _math_hard(**kw):
    try:
        mod = importlib.import_module("llmrl.hw4.math_data")
    except ImportError as e:  # the real-data task ships with the hf extra
        raise ImportError(f"task 'math_hard' needs llmrl.hw4.math_data and its dependencies: {e}") from e
    return mod.make_math_hard_task(**kw)


_REGISTRY: dict[str, Callable[..., Task]] = {
    "format_copy": FormatCopyTask,
    "math_toy": MathToyTask,
    "math_hard": _math_hard,
}


def register_task(name: str, factory: Callable[..., Task]) -> None:
    """Make ``make_task(name, **kw)`` call ``factory(**kw)``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {type(factory).__name__}")
    _REGISTRY[name] = factory


def task_names() -> list[str]:
    return sorted(_REGISTRY)


def make_task(name: str, **kw) -> Task:
    """A task by name: 'format_copy', 'math_toy', 'math_hard' (real MATH data) or a registered one."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown task {name!r}; known: {task_names()}")
    task = _REGISTRY[name](**kw)
    missing = [m for m in ("name", "max_new_tokens", "eval_max_new_tokens", "reward_components", "sample",
                           "eval_examples", "reward", "exact_match") if not hasattr(task, m)]
    if missing:
        raise TypeError(f"task {name!r} lacks {missing} of the Task protocol")
    return task
