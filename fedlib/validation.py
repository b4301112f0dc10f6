"""Number checks at the public edge, written once.

Every public function and config of fedlib checks its arguments where the user hands them in
(and only there), with the offending value and the valid range in the message; the private
helpers behind it assume valid input. The predicates below are the library's one definition of
"an integer" and "a real number": a ``bool`` (and NumPy's ``bool_``) is neither, although Python
counts ``True`` as the integer 1.

>>> is_int(3), is_int(3.0), is_int(True)
(True, False, False)
>>> is_real(0.5), is_real(2), is_real(False)
(True, True, False)
>>> check_int("rounds", 2.5, low=0)
Traceback (most recent call last):
...
ValueError: rounds must be an int >= 0, got 2.5
>>> check_real("lr", float("nan"), low=0, low_open=True)
Traceback (most recent call last):
...
ValueError: lr must be a finite number > 0, got nan
"""

from __future__ import annotations

import math
import numbers

import numpy as np


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer (Python's or NumPy's), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value: object) -> bool:
    """Whether ``value`` is a real number (an integer counts; a bool does not). NaN and the
    infinities are real numbers here: :func:`check_real` asks for finiteness separately."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _bounds(low, high, low_open: bool, high_open: bool) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high}")
    return (" " + " and ".join(parts)) if parts else ""


def check_int(name: str, value: object, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` when it is an integer in ``[low, high]`` (either bound optional);
    otherwise a ``ValueError`` naming ``name``, the valid range and the value."""
    if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be an int{_bounds(low, high, False, False)}, got {value!r}")
    return int(value)


def check_real(name: str, value: object, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a ``float`` when it is a finite real number within the bounds (open or
    closed, either optional); otherwise a ``ValueError`` naming ``name``, the valid range and
    the value."""
    ok = is_real(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        raise ValueError(f"{name} must be a finite number{_bounds(low, high, low_open, high_open)}, got {value!r}")
    return float(value)


__all__ = ["check_int", "check_real", "is_int", "is_real"]
