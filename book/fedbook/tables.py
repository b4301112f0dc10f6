"""A table for a page whose text form is the table: the book's tables (:func:`fedbook.page.show_table`,
:func:`fedbook.claims.show`, :meth:`fedbook.checks.CheckTable.show`) are :class:`Table` objects.

A pandas ``Styler`` shows as HTML in a notebook, but its text form (what a notebook stores as
``text/plain`` next to the HTML, and what a glued value reads as) is ``<pandas.io.formats.style.Styler
object at 0x7f...>``: a memory address, different on every run, so comparing two builds' glued
values (``book/build.py --compare``) would report every glued table as changed. A :class:`Table` is
a ``Styler`` (every styling method works and returns it) whose text form is the formatted table
itself (``Styler.to_string``): the same table, the same text. :class:`Html` does the same for
markup a page builds itself (the findings page's filterable table).
"""

from __future__ import annotations

import math

import pandas as pd
from pandas.io.formats.style import Styler


class Table(Styler):
    """A ``Styler`` whose ``repr`` is the formatted table as text (the index hidden when the styler hides it).

    Examples
    --------
    >>> t = Table(pd.DataFrame({"method": ["FedAvg"], "accuracy": [91.234]})).hide(axis="index").format(precision=1)
    >>> print(repr(t))
    method accuracy
    FedAvg 91.2
    >>> "91.2" in t.to_html() and isinstance(t, Styler)
    True
    """

    text_form: str | None = None
    """The text form, where the cells hold markup (a formula's MathJax span); ``None``: the formatted table."""

    def __repr__(self) -> str:
        return self.text_form if self.text_form is not None else self.to_string().rstrip("\n")

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's text/plain formatter
        printer.text(repr(self))


class Html:
    """Markup for a page with a text form of its own: a notebook shows ``html``; its text form
    (what a notebook stores next to it, what ``book/build.py --compare`` reads) is ``text``.

    Examples
    --------
    >>> h = Html("<p>two rows</p>", "two rows")
    >>> h._repr_html_(), repr(h)
    ('<p>two rows</p>', 'two rows')
    """

    def __init__(self, html: str, text: str) -> None:
        if not isinstance(html, str) or not isinstance(text, str):
            raise ValueError(f"Html takes two strings, got {type(html).__name__} and {type(text).__name__}")
        self.html, self.text = html, text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.text)


_SUPERSCRIPT = str.maketrans("-0123456789", "\N{SUPERSCRIPT MINUS}⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_small(x: float, digits: int | None = 1) -> str:
    """A measured error or a tolerance as a reader reads it: zero as ``0``, a number between 0.001
    and 10,000 as itself (``digits`` + 1 significant digits), any other as a power of ten
    (``3.0 × 10⁻¹⁶``), never ``0.0e+00`` or ``1e-12``. ``digits=None`` (a tolerance): the fewest
    digits that give the number exactly (``10⁻¹²``, ``1.5 × 10⁻⁹``).

    Examples
    --------
    >>> format_small(0.0), format_small(3e-16), format_small(1e-12, None), format_small(1.5e-9, None)
    ('0', '3.0 × 10⁻¹⁶', '10⁻¹²', '1.5 × 10⁻⁹')
    >>> format_small(0.0123), format_small(0.5, None), format_small(-2.5e-7), format_small(float("inf"))
    ('0.012', '0.5', '−2.5 × 10⁻⁷', '∞')
    """
    if digits is not None and (isinstance(digits, bool) or not isinstance(digits, int) or digits < 0):
        raise ValueError(f"digits must be an integer >= 0 or None (exact), got {digits!r}")
    x = float(x)
    if digits is None:
        digits = next((d for d in range(17) if float(f"{x:.{d}e}") == x), 16) if math.isfinite(x) else 0
    sign = "\N{MINUS SIGN}" if x < 0 else ""
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return sign + "\N{INFINITY}"
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e4:
        return sign + f"{abs(x):.{digits + 1}g}"
    mantissa, exponent = f"{abs(x):.{digits}e}".split("e")
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    return sign + (power if mantissa == "1" else f"{mantissa} × {power}")


def rows_where(frame: pd.DataFrame, **where) -> pd.DataFrame:
    """The rows of a tidy ``frame`` where every column named in ``where`` holds its value (``None``
    matches a missing value: the IID rows of a concentration column).

    Examples
    --------
    >>> t = pd.DataFrame({"alpha": [None, 0.1, 0.1], "method": ["a", "a", "b"], "acc": [1.0, 2.0, 3.0]})
    >>> rows_where(t, alpha=0.1, method="b")["acc"].tolist(), rows_where(t, alpha=None)["acc"].tolist()
    ([3.0], [1.0])
    """
    keep = pd.Series(True, index=frame.index)
    for column, value in where.items():
        keep &= frame[column].isna() if value is None else frame[column] == value
    return frame[keep]


def table_of(frame: pd.DataFrame) -> Table:
    """``frame.style`` as a :class:`Table`.

    Examples
    --------
    >>> type(table_of(pd.DataFrame({"a": [1]}))).__name__
    'Table'
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"table_of takes a DataFrame, got a {type(frame).__name__}")
    return Table(frame)


__all__ = ["Html", "Table", "format_small", "rows_where", "table_of"]
