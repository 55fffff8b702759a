"""Small helpers shared by every module: threads, seeds, grading mode, argument checks."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch


def grading_mode() -> bool:
    """True when experiment cells should shrink to a few steps.

    nbgrader sets NBGRADER_EXECUTION while it runs a notebook (autograde, validate); LLMRL_FAST=1
    asks for the same from anywhere else (the browser test, a quick look at a notebook).
    """
    return bool(os.environ.get("NBGRADER_EXECUTION")) or os.environ.get("LLMRL_FAST", "") not in ("", "0")


def repo_root() -> Path | None:
    """The root of the course repository the library runs from (an editable install of its
    ``lib/``), or None when the library is installed elsewhere."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "notebooks").is_dir() else None


def set_threads(n: int = 1) -> None:
    """Pin torch to ``n`` intra-op threads (1 by default: deterministic and fast at this size)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n (threads) must be a positive int, got {n!r}")
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def make_generator(seed_or_generator: int | torch.Generator | None) -> torch.Generator:
    """Accept a seed, a generator or None (a fresh generator seeded from torch's global RNG)."""
    if isinstance(seed_or_generator, torch.Generator):
        return seed_or_generator
    if seed_or_generator is None:
        return torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
    check_int("seed", seed_or_generator, minimum=0)
    return torch.Generator().manual_seed(int(seed_or_generator))


def mean_sd(values) -> tuple[float, float]:
    """(mean, sample standard deviation) of one number per seed; the deviation is 0 for one value.

    Every spread over seeds the course prints (the notebooks' tables and sentences, hw4's plots,
    docs/reproduction.md) is this one: the sample standard deviation (ddof = 1), the estimate of how
    far another seed would land, not the population value of the seeds at hand."""
    v = np.asarray(list(values), dtype=float)
    if v.size == 0:
        raise ValueError("mean_sd needs at least one value")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def sd_over_seeds(a, axis: int = 0) -> np.ndarray:
    """:func:`mean_sd`'s standard deviation along ``axis`` (the seeds) of an array: zeros for one seed."""
    a = np.asarray(a, dtype=float)
    return a.std(axis, ddof=1) if a.shape[axis] > 1 else np.zeros(np.delete(a.shape, axis))


def check_int(name: str, value, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_float(name: str, value, minimum: float | None = None, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if value != value or (not allow_inf and value in (float("inf"), float("-inf"))):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_fields(obj, ints: dict[str, int] | None = None, floats: dict[str, float] | None = None) -> None:
    """Check a config's fields by name: ``ints`` / ``floats`` map a field to its minimum. A field
    that is None is left alone (an optional setting that is off)."""
    for name, minimum in (ints or {}).items():
        if getattr(obj, name) is not None:
            check_int(name, getattr(obj, name), minimum=minimum)
    for name, minimum in (floats or {}).items():
        if getattr(obj, name) is not None:
            check_float(name, getattr(obj, name), minimum=minimum)


def field_docs(cls) -> dict[str, str]:
    """{field: its one-line doc} of a config dataclass: a field's ``metadata["doc"]``, else the string
    literal written right under the field in the class body (an attribute docstring); a field that a
    subclass redeclares without a doc keeps its base class's. A field with neither maps to ""."""
    import ast
    import dataclasses
    import inspect
    import textwrap

    written: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        except (OSError, TypeError):
            continue
        for node, nxt in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                written[node.target.id] = " ".join(nxt.value.value.split())
    return {f.name: f.metadata.get("doc") or written.get(f.name, "") for f in dataclasses.fields(cls)}
