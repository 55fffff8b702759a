"""The task protocol: prompts with their reference answers, and a verifiable reward.

What the RL step (:func:`llmrl.rl.step.rl_step`) asks of a task, and nothing more:

* ``name``; ``max_new_tokens`` (the completion cap while training; None: the backend's own);
* ``sample(n, generator)``: ``n`` problems drawn with ``generator``: an :class:`llmrl.tasks.addition.Problems`
  batch (the addition task) or a list of :class:`Example` (hw4's tasks);
* the reward, in one of two forms: for a batch, ``score(completions, answers) -> (rewards [B],
  {component: [B]})`` and ``correct(completions, answers) -> [B] bool``; or for one completion,
  ``reward(completion, answer) -> {component: value}`` (the reward is the sum) and
  ``exact_match(completion, answer) -> bool``. :func:`score` and :func:`correct` accept both.

For evaluation a task also has ``eval_examples()`` (a fixed list) and ``eval_max_new_tokens``.

Implementations: :class:`AdditionTask` ("a+b=", labs 11-21, any reward function over the batch)
and hw4's ``format_copy``, ``math_toy`` and ``math_hard`` (:mod:`llmrl.hw4.tasks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, runtime_checkable

import torch

from .addition import MAX_ANSWER_CHARS, TWO_DIGIT, PromptSampler, Problems, is_correct
from .rewards import exact_match


@dataclass(frozen=True)
class Example:
    """One problem: the prompt text and its reference answer (as text, parsed by the task)."""

    prompt: str
    answer: str
    meta: dict = field(default_factory=dict, compare=False)


@runtime_checkable
class Task(Protocol):
    name: str

    def sample(self, n: int, generator: torch.Generator):
        """``n`` training problems drawn with ``generator`` (Problems or a list of Example)."""


def prompts_and_answers(problems) -> tuple[list[str], list]:
    """The prompt texts and reference answers of what ``Task.sample`` returned."""
    if isinstance(problems, Problems):
        return problems.texts(), problems.answers
    problems = list(problems)
    if not problems or not all(isinstance(e, Example) for e in problems):
        raise TypeError("a task's sample() must return llmrl.tasks.addition.Problems or a non-empty list of "
                        "llmrl.tasks.task_protocol.Example")
    return [e.prompt for e in problems], [e.answer for e in problems]


def score(task, completions: Sequence[str], answers: Sequence) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Rewards [B] and each named component [B] of a batch of completions.

    A task with per-completion ``reward`` gets float64 rewards (so that a group of equal rewards
    has a standard deviation of exactly 0, not float32's 1e-8)."""
    if len(completions) != len(answers):
        raise ValueError(f"completions ({len(completions)}) and answers ({len(answers)}) differ in length")
    batch = getattr(task, "score", None)
    if batch is not None:
        return batch(completions, answers)
    parts = [task.reward(c, a) for c, a in zip(completions, answers)]
    names = getattr(task, "reward_components", None) or list(dict.fromkeys(k for p in parts for k in p))
    comps = {k: torch.tensor([p.get(k, 0.0) for p in parts], dtype=torch.float64) for k in names}
    total = torch.tensor([sum(p.values()) for p in parts], dtype=torch.float64)
    return total, comps


def correct(task, completions: Sequence[str], answers: Sequence) -> torch.Tensor:
    """[B] bool: the completion's final answer is the reference answer (the task's exact match)."""
    batch = getattr(task, "correct", None)
    if batch is not None:
        return batch(completions, answers)
    return torch.tensor([bool(task.exact_match(c, a)) for c, a in zip(completions, answers)], dtype=torch.bool)


class AdditionTask:
    """The addition task of labs 11-21: prompts from ``sampler``, rewards from ``reward_fn``.

    ``sampler(n, generator) -> Problems`` (default: every 2-digit + 2-digit problem, uniformly);
    ``reward_fn(responses, answers) -> [B]`` (default: exact match), e.g. a lab's proxy reward or
    rubric, or the student's own.
    """

    name = "addition"
    max_new_tokens = MAX_ANSWER_CHARS
    eval_max_new_tokens = MAX_ANSWER_CHARS

    def __init__(self, sampler: Callable | None = None, reward_fn: Callable = exact_match):
        if sampler is not None and not callable(sampler):
            raise TypeError(f"prompt_sampler must be callable, got {type(sampler).__name__}")
        if not callable(reward_fn):
            raise TypeError(f"reward_fn must be callable, got {type(reward_fn).__name__}")
        self.sampler = sampler or PromptSampler(TWO_DIGIT)
        self.reward_fn = reward_fn

    def sample(self, n: int, generator: torch.Generator) -> Problems:
        problems = self.sampler(n, generator)
        if not isinstance(problems, Problems):
            raise TypeError(f"prompt_sampler must return llmrl.tasks.addition.Problems, got {type(problems).__name__}")
        return problems

    def score(self, completions, answers):
        rewards = self.reward_fn(completions, answers)
        if not isinstance(rewards, torch.Tensor):
            rewards = torch.as_tensor(rewards, dtype=torch.float)
        rewards = rewards.float()
        if rewards.shape != (len(completions),):
            raise ValueError(f"reward_fn returned shape {tuple(rewards.shape)}, expected ({len(completions)},)")
        return rewards, {}

    def correct(self, completions, answers) -> torch.Tensor:
        return is_correct(completions, answers)

    def __repr__(self) -> str:
        return f"AdditionTask({self.sampler!r}, {getattr(self.reward_fn, '__name__', self.reward_fn)!r})"
