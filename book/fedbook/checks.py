"""The check table of a derivations chapter: every identity, bound and property checked, with a computed verdict.

A *derivations* chapter checks its paper's mathematics numerically (on random instances, in double
precision: :func:`float64_tensor`) or symbolically, records each check in a :class:`CheckTable`
and shows the table at its end. A check holds or not by a tolerance declared with it, or by the
chapter's own computed condition: the verdict is computed, never typed. The claims of an
*experiments* chapter are decided the same way, from intervals over seeds (:mod:`fedbook.claims`).

Examples
--------
>>> checks = CheckTable()
>>> checks.add("x = y", "100 random pairs", 3e-16, 1e-12)
>>> checks.frame()["verdict"].tolist()
['holds']
"""

from __future__ import annotations

import hashlib
import html
import re
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedbook.tables import format_small, table_of

CHECK_KINDS = ("error", "count", "at least")
"""How :meth:`CheckTable.add` compares a measured value with its tolerance."""


SHADES = {"holds": "#d9f2d9", "untestable": "#e6e6e6"}
"""The check table's verdict shading; any other verdict is shaded red."""


def float64_tensor(a: Any) -> torch.Tensor:
    """``a`` (an array, a nested list, a number) as a float64 tensor: the derivations chapters
    check identities in double precision.

    Examples
    --------
    >>> float64_tensor([[1, 2]]).dtype
    torch.float64
    """
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


_MATH = re.compile(r"\$([^$]+)\$")


def with_math(text: str) -> str:
    r"""A cell's text as markup for the page: each ``$…$`` part inline TeX that the book's MathJax
    typesets (a ``span.math``, as Sphinx writes inline math), the rest escaped. A check's statement
    writes its formulas in TeX between dollars, as the chapter's prose does.

    Examples
    --------
    >>> print(with_math(r"Eq. (21): $\operatorname{tr}\Sigma_{l,c} \ge 0$ for a < b"))
    Eq. (21): <span class="math notranslate nohighlight">\(\operatorname{tr}\Sigma_{l,c} \ge 0\)</span> for a &lt; b
    """
    parts = _MATH.split(str(text))
    return "".join(html.escape(p, quote=False) if i % 2 == 0 else
                   f'<span class="math notranslate nohighlight">\\({html.escape(p, quote=False)}\\)</span>'
                   for i, p in enumerate(parts))


class CheckTable:
    """The live table of checks that closes a derivations chapter.

    Each row is a statement, how it was checked, the worst error (or the counterexamples) found,
    and a computed verdict: ``"holds"``, ``"partly"`` or ``"FAILS"``, or ``"untestable"`` where the
    chapter's own computed regime condition says the setting cannot test the statement
    (``untestable``; the row stays in the table, its value saying why). A row is decided either by a
    tolerance (``tol`` with ``kind``; the table then shows the tolerance too) or by the chapter's
    own computed condition (``ok``).

    Examples
    --------
    >>> checks = CheckTable()
    >>> checks.add("x = y", "100 random pairs", 3e-16, 1e-12)
    >>> checks.add("no counterexample", "100 draws", 2, 0, kind="count")
    >>> checks.add("a bound is attained", "rank-one cases", "gap 0.0", ok=True)
    >>> len(checks), checks.n_fail
    (3, 1)
    >>> checks.frame()[["worst error / counterexamples", "tolerance", "verdict"]].values.tolist()
    [['3.0 × 10⁻¹⁶', '≤ 10⁻¹²', 'holds'], ['2 counterexamples', '≤ 0', 'FAILS'], ['gap 0.0', '', 'holds']]
    >>> checks.add("a trend", "too noisy a probe", "reliability 0.2 < 0.5", ok=False, untestable=True)
    >>> checks.frame()["verdict"].iloc[-1], checks.n_fail, checks.n_untestable
    ('untestable', 1, 1)
    """

    COLUMNS = ("statement", "how checked", "worst error / counterexamples", "tolerance", "verdict")
    WORST = "worst error / counterexamples"

    def __init__(self) -> None:
        self.rows: list[dict[str, str]] = []

    def add(
        self,
        statement: str,
        how: str,
        worst: Any,
        tol: float | None = None,
        *,
        kind: str = "error",
        ok: bool | None = None,
        partly: bool = False,
        untestable: bool = False,
    ) -> None:
        """Record one check (the call returns nothing, so a cell that ends with it shows nothing).

        Parameters
        ----------
        statement, how : str
            What is claimed, and how it was checked.
        worst : float or str
            With ``tol``: the measured worst value (shown by :func:`fedbook.tables.format_small`: ``1.0 × 10⁻¹²``, zero as ``0``; or as ``n
            counterexamples`` for ``kind="count"``). With ``ok``: shown as given.
        tol : float, optional
            The tolerance: the check holds if ``worst <= tol`` (``kind`` ``"error"`` or ``"count"``)
            or ``worst >= tol`` (``kind="at least"``).
        kind : {"error", "count", "at least"}
        ok : bool, optional
            The chapter's computed condition, instead of ``tol``.
        partly : bool, default False
            With ``ok`` false: the statement holds in part (verdict ``"partly"``, not ``"FAILS"``).
        untestable : bool, default False
            The chapter's computed regime condition is not met: the verdict is ``"untestable"``
            whatever ``ok`` or ``tol`` say (``worst`` should say why).
        """
        if (tol is None) == (ok is None):
            raise ValueError(f"give exactly one of tol and ok, got tol={tol!r}, ok={ok!r}")
        if kind not in CHECK_KINDS:
            raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(CHECK_KINDS)}")
        if tol is not None:
            worst = float(worst)
            ok = worst >= tol if kind == "at least" else worst <= tol
            shown = f"{int(worst)} counterexamples" if kind == "count" else format_small(worst)
            bound = {"error": f"≤ {format_small(tol, None)}", "count": f"≤ {int(tol)}",
                     "at least": f"≥ {format_small(tol, None)}"}[kind]
        else:
            ok, shown, bound = bool(ok), worst, ""
        self.rows.append({"statement": statement, "how checked": how, "worst error / counterexamples": shown,
                          "tolerance": bound, "verdict": "untestable" if untestable else "holds" if ok
                          else ("partly" if partly else "FAILS")})

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def n_fail(self) -> int:
        """How many checks do not hold (``"FAILS"`` and ``"partly"``; not the untestable ones)."""
        return sum(row["verdict"] in ("FAILS", "partly") for row in self.rows)

    @property
    def n_untestable(self) -> int:
        """How many checks the setting cannot test (verdict ``"untestable"``)."""
        return sum(row["verdict"] == "untestable" for row in self.rows)

    def frame(self) -> pd.DataFrame:
        """The table; the ``tolerance`` column only where some check has one."""
        table = pd.DataFrame(self.rows, columns=list(self.COLUMNS))
        return table if any(row["tolerance"] for row in self.rows) else table.drop(columns="tolerance")

    def show(self):
        """The table for a page: every cell as text, statements wrapped so the verdict column stays
        on screen (their formulas, written ``$…$``, typeset: :func:`with_math`), a measured value,
        its tolerance and the verdict never wrapped inside, the index hidden, verdicts shaded (holds
        green, untestable grey, anything else red).

        Returns
        -------
        fedbook.tables.Table
            Displayed as an HTML table, laid out like the book's other tables
            (:func:`fedbook.page.show_table`); its id comes from the content, so the same table
            gives the same page.

        Examples
        --------
        >>> checks = CheckTable()
        >>> checks.add("x = y", "100 random pairs", 3e-16, 1e-12)
        >>> "holds" in checks.show().to_html()
        True
        """
        table = self.frame()
        uuid = hashlib.sha1(table.to_json(default_handler=str).encode()).hexdigest()[:8]
        styles = [{"selector": "th", "props": [("text-align", "left")]},
                  {"selector": "td, th", "props": [("padding", "0.2em 0.8em 0.2em 0.3em")]}]
        shown = table_of(table)
        shown.text_form = table_of(table).hide(axis="index").format(str).to_string().rstrip("\n")
        return (
            shown.set_uuid(f"table-{uuid}").set_table_attributes('class="check-table"').hide(axis="index")
            .format(with_math)
            .set_properties(**{"text-align": "left", "vertical-align": "top", "white-space": "normal"})
            .set_table_styles(styles)
            .map(lambda v: f"background-color: {SHADES.get(v, '#f8d7d7')}; white-space: nowrap", subset=["verdict"])
            # a measured value and its tolerance never wrap inside the number (3.0 × 10⁻¹⁶)
            .apply(lambda col: ["white-space: nowrap" if row["tolerance"] else "" for row in self.rows], subset=[self.WORST])
            .map(lambda v: "white-space: nowrap", subset=[c for c in ("tolerance",) if c in table.columns])
        )


__all__ = ["CHECK_KINDS", "CheckTable", "SHADES", "float64_tensor", "with_math"]
