"""The one validation module: what counts as an integer and a number, and the messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlib.validation import check_int, check_real, is_int, is_real


@pytest.mark.parametrize(("value", "integer", "real"), [
    (3, True, True), (np.int64(3), True, True), (3.0, False, True), (np.float32(0.5), False, True),
    (True, False, False), (np.bool_(True), False, False), ("3", False, False), (None, False, False),
    (float("nan"), False, True), (math.inf, False, True),
])
def test_what_counts_as_an_integer_and_a_number(value, integer, real):
    assert is_int(value) is integer and is_real(value) is real


def test_check_int_returns_a_python_int_or_names_the_value_and_the_range():
    assert check_int("rounds", np.int64(4), low=0) == 4 and type(check_int("rounds", np.int64(4))) is int
    with pytest.raises(ValueError, match=r"^rounds must be an int >= 0, got 2\.5$"):
        check_int("rounds", 2.5, low=0)
    with pytest.raises(ValueError, match=r"^k must be an int >= 1 and <= 9, got 10$"):
        check_int("k", 10, low=1, high=9)
    with pytest.raises(ValueError, match=r"^seed must be an int, got True$"):
        check_int("seed", True)


def test_check_real_refuses_non_finite_values_and_honours_open_bounds():
    assert check_real("lr", 1, low=0, low_open=True) == 1.0
    assert check_real("share", 1.0, low=0, high=1) == 1.0
    with pytest.raises(ValueError, match=r"^lr must be a finite number > 0, got 0$"):
        check_real("lr", 0, low=0, low_open=True)
    with pytest.raises(ValueError, match=r"^momentum must be a finite number >= 0 and < 1, got 1\.0$"):
        check_real("momentum", 1.0, low=0, high=1, high_open=True)
    for bad in (float("nan"), math.inf, "0.1", False):
        with pytest.raises(ValueError, match="must be a finite number"):
            check_real("x", bad)
