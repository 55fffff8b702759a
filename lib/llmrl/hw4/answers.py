"""Reading answers out of completions: exact numbers, the last ``\\boxed{...}``, the last number.

Shared by hw4's tasks (:mod:`llmrl.hw4.tasks`) and the MATH task (:mod:`llmrl.hw4.math_data`),
so that neither imports the other.
"""

from __future__ import annotations

import re
from fractions import Fraction

_INT = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def parse_number(text: str) -> Fraction | None:
    """'85', '-3', ' 0.5 ', '3/4', '1,024', '$12$' -> an exact Fraction; anything else -> None."""
    if not isinstance(text, str):
        return None
    s = text.strip().strip("$").strip().replace(",", "")
    if s.startswith("+"):
        s = s[1:]
    if not s or not _NUMBER.fullmatch(s):
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (braces balanced), or None when there is none or it is unclosed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def last_number(text: str) -> Fraction | None:
    found = _NUMBER.findall(text)
    return parse_number(found[-1]) if found else None


def _answer_value(answer: str, who: str) -> Fraction:
    value = parse_number(answer)
    if value is None:
        raise ValueError(f"{who}: answer must be a number as text, got {answer!r}")
    return value
