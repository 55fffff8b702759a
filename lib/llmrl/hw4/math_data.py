"""math_hard: level-5 MATH problems with numeric answers, loaded through the ``datasets`` library.

Rows follow the MATH dataset's format: ``problem``, ``solution`` (the worked solution, whose last
``\\boxed{...}`` holds the answer), ``level`` ("Level 5"), ``type`` (or ``subject``); an ``answer``
column, where a copy of the dataset has one, is used instead of the solution's box.

* Filter: the level (default 5) and answers that parse to a finite number (``"12"``, ``"-3.5"``,
  ``"1,000"``, ``"$7$"``; not ``"\\frac{3}{4}"`` or ``"x+1"`` unless ``numeric_answers="expression"``).
  Rows with a missing or non-text field are skipped and counted in :attr:`MathHardTask.skipped`
  (never an exception halfway through a run).
* Eval: the first ``n_eval`` (512) kept problems of the test split, in the dataset's order, so every
  run and every machine evaluates on the same list. Training samples from the train split.
* Reward (components ``boxed``, ``correct``, ``relaxed``): 0.1 when ``\\boxed{`` appears; 1.0 when
  the content of the LAST ``\\boxed{}`` equals the answer (checked with math-verify, which accepts
  ``0.5`` for ``1/2``); 0.1 when the box is not right but the last number in the text is. math-verify
  alone would also accept an answer without any box, so the box is checked here first.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from typing import Sequence

import torch

from ..utils import check_int, make_generator
from ..tasks.task_protocol import Example
from .answers import last_boxed

try:
    import datasets
    from math_verify import parse as mv_parse, verify as mv_verify
except ImportError as e:  # pragma: no cover - only without the extra
    raise ImportError("math_hard needs the hf extra (datasets, math-verify): pip install -e '.[hf]': "
                      f"{e}") from e

DEFAULT_DATASET = "the-jb/hendrycks-math"
PROMPT_SUFFIX = "\n\nReason step by step, then give the final answer as \\boxed{NUMBER}."

_NUM_LITERAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_LAST_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+")


def normalize_answer(text: str) -> str:
    """Strip what MATH answers wrap numbers in: $...$, \\!, thin spaces, thousands commas, spaces,
    a trailing period, \\text{...} units after the number, ^\\circ."""
    s = text.strip().strip("$").strip()
    s = s.replace("\\!", "").replace("\\,", "").replace("\\ ", "").replace("{,}", ",")
    s = re.sub(r"\\(?:text|mbox|mathrm)\{[^{}]*\}$", "", s).strip()
    s = re.sub(r"\^\{?\\circ\}?$", "", s)
    s = s.rstrip(".").strip()
    if re.fullmatch(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    return s.replace(" ", "")


def parse_finite_number(text: str) -> float | None:
    """The answer as a finite float when it is a plain number literal (after normalisation), else None."""
    if not isinstance(text, str):
        return None
    s = normalize_answer(text)
    if not _NUM_LITERAL.fullmatch(s):
        return None
    value = float(s)
    return value if math.isfinite(value) else None


def parse_finite_expression(text: str) -> float | None:
    """Any closed-form real number math-verify can read (``\\frac{3}{4}``, ``2\\sqrt{3}``), as a float."""
    if not isinstance(text, str):
        return None
    try:
        parsed = mv_parse(f"${normalize_answer(text)}$")
    except Exception:  # math-verify raises assorted errors on odd LaTeX
        return None
    if not parsed:
        return None
    expr = parsed[0]
    try:
        if getattr(expr, "free_symbols", None) or not getattr(expr, "is_number", False):
            return None
        value = complex(expr)
    except (TypeError, ValueError, AttributeError):
        return None
    if value.imag != 0 or not math.isfinite(value.real):
        return None
    return value.real


def answer_from_row(row: dict) -> str | None:
    """The reference answer of a MATH row: its ``answer`` field, else the last box of its solution."""
    ans = row.get("answer")
    if isinstance(ans, str) and ans.strip():
        return ans.strip()
    sol = row.get("solution")
    if not isinstance(sol, str):
        return None
    boxed = last_boxed(sol.replace("\\fbox{", "\\boxed{"))
    if boxed is None:  # MATH sometimes writes "\boxed 5" without braces
        m = re.findall(r"\\boxed\s+([^\s$]+)", sol)
        boxed = m[-1] if m else None
    return boxed.strip() if boxed else None


def _level_of(row: dict) -> int | None:
    lv = row.get("level")
    if isinstance(lv, int):
        return lv
    if isinstance(lv, str):
        m = re.search(r"\d+", lv)
        return int(m.group()) if m else None
    return None


def filter_rows(rows, level: int | None = 5, numeric_answers: str = "literal") -> tuple[list[Example], Counter]:
    """Examples from MATH rows, and a Counter of why rows were dropped.

    ``skipped_*`` counts malformed rows (missing problem, unreadable level or answer); ``filtered_*``
    counts well-formed rows left out on purpose (other levels, non-numeric answers)."""
    parse = {"literal": parse_finite_number, "expression": parse_finite_expression}.get(numeric_answers)
    if parse is None:
        raise ValueError(f"numeric_answers must be 'literal' or 'expression', got {numeric_answers!r}")
    kept, why = [], Counter()
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            why["skipped_not_a_row"] += 1
            continue
        problem = row.get("problem")
        if not isinstance(problem, str) or not problem.strip():
            why["skipped_no_problem"] += 1
            continue
        lv = _level_of(row)
        if level is not None:
            if lv is None:
                why["skipped_no_level"] += 1
                continue
            if lv != level:
                why["filtered_level"] += 1
                continue
        answer = answer_from_row(row)
        if answer is None:
            why["skipped_no_answer"] += 1
            continue
        value = parse(answer)
        if value is None:
            why["filtered_not_numeric"] += 1
            continue
        meta = {"index": i, "level": lv, "type": row.get("type") or row.get("subject"), "value": value,
                "raw_answer": answer}
        kept.append(Example(problem.strip() + PROMPT_SUFFIX, normalize_answer(answer), meta))
    return kept, why


def load_rows(name: str = DEFAULT_DATASET, split: str = "test", config: str | Sequence[str] | None = None,
              data_files=None):
    """Rows of one split through ``datasets.load_dataset``. ``config``: a configuration name, a list
    of them, or "all" (every configuration, concatenated: for copies of MATH split by subject).
    ``data_files`` (a path or {split: path}) loads local JSON/JSONL/Parquet/CSV files instead of a
    hub dataset (offline tests)."""
    if data_files is not None:
        files = data_files if isinstance(data_files, dict) else {split: data_files}
        if split not in files:
            raise ValueError(f"data_files has no {split!r} split: {sorted(files)}")
        path = str(files[split])
        ext = path.rsplit(".", 1)[-1].lower()
        builder = {"json": "json", "jsonl": "json", "parquet": "parquet", "csv": "csv"}.get(ext)
        if builder is None:
            raise ValueError(f"data_files: unsupported file type {path!r} (json, jsonl, parquet, csv)")
        return datasets.load_dataset(builder, data_files={split: path}, split=split)
    try:
        if config == "all":  # copies of MATH split by subject (one configuration per subject)
            config = datasets.get_dataset_config_names(name)
        if isinstance(config, (list, tuple)):
            return datasets.concatenate_datasets([datasets.load_dataset(name, c, split=split) for c in config])
        return datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - many error types; one message says what to do
        raise ValueError(f"dataset {name!r} (split {split!r}) cannot be loaded: {type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200] if str(e) else ''}. Offline, pass data_files= a local "
                         f"JSON/Parquet copy, or unset HF_DATASETS_OFFLINE/HF_HUB_OFFLINE with network.") from None


class MathHardTask:
    """The math_hard task of hw4 on real MATH data (implements ``llmrl.hw4.tasks.Task``).

    Args:
        dataset: hub name (default ``the-jb/hendrycks-math``); ``config``: its configuration, if any
            (a list, or "all" to concatenate every configuration).
        data_files: local files instead ({"train": path, "test": path} or one path for both).
        train_split, eval_split: split names; level: MATH level kept (None keeps all).
        n_eval: size of the fixed eval set (first kept test problems); numeric_answers: "literal"
            (plain numbers, the published filter) or "expression" (any finite closed form).
        max_new_tokens / eval_max_new_tokens: completion caps (training / greedy eval).
    """

    name = "math_hard"
    reward_components = ("boxed", "correct", "relaxed")

    def __init__(self, dataset: str = DEFAULT_DATASET, config: str | Sequence[str] | None = None, data_files=None,
                 train_split: str = "train", eval_split: str = "test", level: int | None = 5,
                 n_eval: int = 512, numeric_answers: str = "literal", max_new_tokens: int = 512,
                 eval_max_new_tokens: int = 512):
        self.dataset = dataset
        self.n_eval = check_int("n_eval", n_eval, minimum=1)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        self.eval_max_new_tokens = check_int("eval_max_new_tokens", eval_max_new_tokens, minimum=1)
        if level is not None:
            check_int("level", level, minimum=1)
        if isinstance(data_files, (str, os.PathLike)):
            data_files = {train_split: data_files, eval_split: data_files}
        self.skipped: Counter = Counter()
        self._train, why_t = filter_rows(load_rows(dataset, train_split, config, data_files), level, numeric_answers)
        test, why_e = filter_rows(load_rows(dataset, eval_split, config, data_files), level, numeric_answers)
        self.skipped.update({f"train_{k}": v for k, v in why_t.items()})
        self.skipped.update({f"eval_{k}": v for k, v in why_e.items()})
        if not self._train:
            raise ValueError(f"dataset {dataset!r}: no usable training problems in split {train_split!r} "
                             f"(dropped: {dict(why_t)})")
        if not test:
            raise ValueError(f"dataset {dataset!r}: no usable eval problems in split {eval_split!r} "
                             f"(dropped: {dict(why_e)})")
        self._eval = test[: self.n_eval]
        self._bad_answers = 0

    @property
    def n_malformed(self) -> int:
        """Rows skipped because they were malformed (not the ones filtered out on purpose)."""
        return sum(v for k, v in self.skipped.items() if "_skipped_" in k)

    def __len__(self) -> int:
        return len(self._train)

    def sample(self, n: int, generator: torch.Generator | int | None = None) -> list[Example]:
        """``n`` training problems drawn uniformly with replacement."""
        check_int("n", n, minimum=1)
        idx = torch.randint(len(self._train), (n,), generator=make_generator(generator)).tolist()
        return [self._train[i] for i in idx]

    def eval_examples(self) -> list[Example]:
        return list(self._eval)

    def reward(self, completion: str, answer: str) -> dict[str, float]:
        return math_hard_reward(completion, answer)

    def exact_match(self, completion: str, answer: str) -> bool:
        return boxed_answer_correct(completion, answer)

    def describe(self) -> str:
        return (f"math_hard from {self.dataset}: {len(self._train)} train / {len(self._eval)} eval problems; "
                f"dropped {dict(self.skipped)}")


# ----------------------------------------------------------------------------- reward

def _equal(pred: str, answer: str) -> bool:
    """Whether the text ``pred`` states the number ``answer`` (math-verify, then a float fallback)."""
    gold_value = parse_finite_number(answer)
    pv = parse_finite_number(pred)
    if gold_value is not None and pv is not None:
        return math.isclose(pv, gold_value, rel_tol=1e-9, abs_tol=1e-9)
    try:
        gold = mv_parse(f"${normalize_answer(answer)}$")
        guess = mv_parse(f"${normalize_answer(pred)}$")
        return bool(gold) and bool(guess) and bool(mv_verify(gold, guess))
    except Exception:  # noqa: BLE001 - math-verify's parser raises assorted errors on odd LaTeX
        return False


def boxed_answer_correct(completion: str, answer: str) -> bool:
    """The content of the completion's last ``\\boxed{}`` equals ``answer`` (a box is required)."""
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a string, got {type(completion).__name__}")
    inner = last_boxed(completion)
    return inner is not None and bool(inner.strip()) and _equal(inner, answer)


def math_hard_reward(completion: str, answer: str) -> dict[str, float]:
    """boxed 0.1 (``\\boxed{`` appears), correct 1.0 (last box right), relaxed 0.1 (box not right,
    last number of the text right). Max 1.1."""
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a string, got {type(answer).__name__}")
    correct = boxed_answer_correct(completion, answer)
    relaxed = False
    if not correct:
        nums = _LAST_NUMBER.findall(completion)
        relaxed = bool(nums) and _equal(nums[-1], answer)
    return {"boxed": 0.1 * ("\\boxed{" in completion), "correct": 1.0 * correct, "relaxed": 0.1 * relaxed}


def make_math_hard_task(**kw) -> MathHardTask:
    """Factory behind ``make_task("math_hard", **kw)``."""
    return MathHardTask(**kw)
