"""After an experiment runs on the student's functions: do its numbers agree with the reference's?

An experiment cell that runs a student's function with a bug should say so, and say where to
look, instead of drawing a plausible curve next to the reference one. Each check prints one line:
"matches the reference" or "differs from the reference ... check Task N (`function`)", and returns
True or False so that a notebook can also assert on it.

- :func:`compare_exact`: the same inputs, the same seeds, so a correct function gives the same
  numbers up to floating-point noise (``atol``).
- :func:`compare_rates`: shares estimated from samples that a correct function may draw in a
  different random order (an inverse-CDF sampler, say): allowed to differ by ``z`` standard errors.
- :func:`at_least`: a floor that a correct run reaches, where only the published numbers exist.
- :func:`differing`: which single replacement of a reference function by the student's changes
  the result (to name the task when several feed one experiment).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..utils import check_float


def _line(label: str, ok: bool, detail: str, task: str, allowed: str) -> str:
    if ok:  # no measured gap in the line: it is the same on every machine (stored outputs, nbval)
        return f"{label}: matches the reference ({allowed})"
    return (f"{label}: DIFFERS from the reference ({detail}). Check {task}: on the same inputs the "
            "reference code gives other numbers, whatever the visible tests said")


def compare_exact(label: str, yours, reference, *, task: str, atol: float = 1e-4, quiet: bool = False) -> bool:
    """``yours`` and ``reference`` (numbers or arrays of one shape) agree within ``atol``."""
    atol = check_float("atol", atol, minimum=0.0)
    y, r = np.asarray(yours, dtype=float), np.asarray(reference, dtype=float)
    if y.shape != r.shape:
        ok, detail = False, f"shape {y.shape} against {r.shape}"
    else:
        gap = float(np.nanmax(np.abs(y - r))) if y.size else 0.0
        finite_alike = bool(np.array_equal(np.isfinite(y), np.isfinite(r)))
        ok = finite_alike and gap <= atol
        detail = f"largest difference {gap:.2g}, allowed {atol:g}" if finite_alike else "inf or nan where the reference has none"
    if not quiet:
        print(_line(label, ok, detail, task, f"within {atol:g}"))
    return ok


def compare_rates(label: str, yours: Sequence[float], reference: Sequence[float], n: int, *, task: str,
                  z: float = 4.0, quiet: bool = False) -> bool:
    """Shares (in [0, 1]) each estimated from ``n`` samples agree within ``z`` standard errors of the difference."""
    if int(n) < 1:
        raise ValueError(f"n must be a positive number of samples, got {n!r}")
    y, r = np.asarray(yours, dtype=float), np.asarray(reference, dtype=float)
    if y.shape != r.shape:
        ok, detail = False, f"shape {y.shape} against {r.shape}"
    else:
        p = np.clip((y + r) / 2, 1.0 / n, 1 - 1.0 / n)
        allowed = z * np.sqrt(2 * p * (1 - p) / n)
        worst = int(np.argmax(np.abs(y - r) - allowed)) if y.size else 0
        ok = bool(np.all(np.abs(y - r) <= allowed))
        detail = (f"largest gap {abs(y - r).max():.3f}; sampling noise allows {allowed[worst]:.3f} there"
                  if y.size else "nothing to compare")
    if not quiet:
        print(_line(label, ok, detail, task, f"within {z:g} standard errors of sampling noise"))
    return ok


def at_least(label: str, value: float, minimum: float, *, task: str, quiet: bool = False) -> bool:
    """A number that a correct run reaches (a trained reward, say) is at least ``minimum``.

    For experiments whose reference numbers come from another machine or model, where only a
    floor can be promised."""
    value, minimum = float(value), check_float("minimum", minimum)
    ok = value == value and value >= minimum
    if not quiet:
        print(f"{label}: {value:.3f}, as a correct solution reaches (at least {minimum:g})" if ok else
              f"{label}: only {value:.3f}, where a correct solution reaches at least {minimum:g}. Check {task}")
    return ok


def differing(label: str, candidates: dict, run, reference, *, atol: float = 1e-4) -> list[str]:
    """The tasks whose replacement alone makes ``run`` differ from ``reference``.

    ``candidates`` maps a task name to the keyword arguments that put the student's function for
    that task (and only that one) into ``run(**kwargs)``; each run is compared with ``reference``
    by :func:`compare_exact` (silently). Returns the names of the tasks that changed the result.
    """
    return [task for task, kwargs in candidates.items()
            if not compare_exact(label, run(**kwargs), reference, task=task, atol=atol, quiet=True)]
