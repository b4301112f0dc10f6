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

    def __repr__(self) -> str:
        return self.to_string().rstrip("\n")

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


__all__ = ["Html", "Table", "rows_where", "table_of"]
