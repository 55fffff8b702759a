"""What the numbers of the notebooks' prose are, where their section does not print them.

test_model_answers.py checks that every number reading as a result in a notebook's prose (outside
the model answers and results paragraphs, which have their own rules) is printed by a code cell of
its section. A number that is not a result of the section's code is bound here to what it is:

- `Setting(notebook, says, code)`: a setting of the code the notebook runs. `code` is a Python
  expression over the library (``llmrl`` and its modules, imported by name) whose value, or list of
  values, each of the sentence's unprinted numbers must equal to the digits written.
- `Published(notebook, says, reads)`: a published value. The notebook prints it on an output line
  matching `reads` (anywhere in the notebook), and each unprinted number must be on such a line.
- `Example(notebook, says, why)`: the text's own example or definition (a hand example's inputs, the
  formula a task states): `why` says so.

`says` is a regular expression found in the sentence (case-insensitive; math and code spans
blanked). An entry that matches no sentence any more fails the test, so the table follows the text.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass


def _library_value(code: str):
    ns = {}
    for name in re.findall(r"\b(llmrl(?:\.\w+)*)", code):
        parts = name.split(".")
        for j in range(1, len(parts) + 1):
            try:
                importlib.import_module(".".join(parts[:j]))
            except ImportError:
                break
    import llmrl

    ns["llmrl"] = llmrl
    return eval(code, ns)  # noqa: S307 (our own table)


def _rounds(num, value: float) -> bool:
    return abs(value - num.value) <= 0.5 * 10.0 ** -num.decimals + 1e-9 * max(1.0, abs(value))


@dataclass(frozen=True, eq=False)
class Setting:
    notebook: str
    says: str
    code: str

    def verify(self, nums, outputs: str):
        got = _library_value(self.code)
        values = [float(v) for v in (got if isinstance(got, (list, tuple)) else [got])]
        bad = [n.value for n in nums if not any(_rounds(n, v) for v in values)]
        return f"{bad} is not the code's setting {self.code} = {values}" if bad else None


@dataclass(frozen=True, eq=False)
class Published:
    notebook: str
    says: str
    reads: str

    def verify(self, nums, outputs: str):
        from autograder.tests.test_model_answers import numbers

        lines = [line for line in outputs.splitlines() if re.search(self.reads, line)]
        if not lines:
            return f"no output line matches {self.reads!r}: print the published value"
        printed = [p for line in lines for p in numbers(line)]
        bad = [n.value for n in nums if not any(n.rounds_to(p) for p in printed)]
        return f"{bad} is not on the printed line {lines[0].strip()!r}" if bad else None


@dataclass(frozen=True, eq=False)
class Example:
    notebook: str
    says: str
    why: str

    def verify(self, nums, outputs: str):
        return None


_HW4 = "llmrl.hw4.settings"
_TOL = "__import__('inspect').signature(llmrl.hw4.ablation.sweep).parameters['tolerance'].default"

PROSE = [
    # ---------------------------------------------------------------- hw4
    Example("hw4/llm_rl", r"mean of eight copies of 0\.1",
            "the float32 trap of Task 5 worked by hand: eight copies of 0.1, the standard deviation their rounding "
            "leaves (about 1e-8) and the advantage that dividing by it makes"),
    Setting("hw4/llm_rl", r"clip advantages to", f"{_HW4}.HW4Config().adv_clip"),
    Setting("hw4/llm_rl", r"\| learning rate \| 5e-5 \| 3e-5 \|",
            f"[{_HW4}.default_config('format_copy', 'grpo').lr, {_HW4}.default_config('math_hard', 'grpo').lr]"),
    Setting("hw4/llm_rl", r"Everything else is as published",
            f"(lambda c: [c.temperature, c.top_p, c.clip_eps, c.kl_coef, c.max_grad_norm, *c.betas])({_HW4}.HW4Config())"),
    Example("hw4/llm_rl", r"to the maximum of 1\.3 within these steps",
            "format_copy's largest reward, 0.2 + 0.1 + 1.0 as the task's reward states it (tag, clean tag, number)"),
    Example("hw4/llm_rl", r"format_copy's reward reaches 1\.3 within the run",
            "format_copy's largest reward, 0.2 + 0.1 + 1.0 as the task's reward states it (tag, clean tag, number)"),
    Setting("hw4/llm_rl", r"A run counts as degraded", f"(lambda t: [t, 1.3 * t])({_TOL})"),
    # ---------------------------------------------------------------- lab11
    Example("lab11/llm_as_policy", r"In the \"worked\" scenario the first token is",
            "the worked scenario's own probabilities, stated as the task's input (llmrl.toylm.scenario('worked'))"),
    Example("lab11/llm_as_policy", r"error bar \(1\.96 standard errors\)",
            "the normal quantile of a 95% interval, the width of the plot's error bars"),
    # ---------------------------------------------------------------- lab19
    Example("lab19/failure_modes", r"A hand example: three responses with proxy scores",
            "the hand example's own inputs (the visible test checks it)"),
    Example("lab19/failure_modes", r"The top response \(proxy 2\.0\) wins",
            "the hand example's own inputs (the visible test checks it)"),
    Setting("lab19/failure_modes", r"4 gradient epochs per batch .* learning rate 5e-4",
            "llmrl.labs.lab19.ENTROPY_SETTINGS['lr']"),
    Setting("lab19/failure_modes", r"16 prompts with 8 samples each per step, learning rate 5e-4, 300 steps",
            "llmrl.labs.lab19.HACK_SETTINGS['lr']"),
    # ---------------------------------------------------------------- lab21
    Setting("lab21/projects", r"DAPO's \"clip-higher\" raises only the upper bound",
            "[llmrl.labs.lab21.CLIP_BOUNDS[a][k] for a in ('symmetric', 'clip-higher') for k in (0, 1)]"),
    Setting("lab21/projects", r"Three arms, symmetric clip \[0\.8, 1\.2\]",
            "[1 + s * e for a in ('symmetric', 'clip-higher') for s, e in zip((-1, 1), llmrl.labs.lab21.CLIP_BOUNDS[a])]"),
]
