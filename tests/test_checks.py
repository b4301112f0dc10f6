"""The check table of a derivations chapter (fedbook.checks): verdicts by tolerance or by the chapter's
condition, the columns shown, the page's table (its doctests run with the others: pytest --doctest-modules)."""

from __future__ import annotations

import pytest

from fedbook.checks import CheckTable


def test_check_table_verdicts_and_columns():
    checks = CheckTable()
    assert checks.add("a", "h", 1e-13, 1e-12) is None  # a cell ending with a check shows nothing
    checks.add("b", "h", 3, 0, kind="count")
    checks.add("c", "h", 0.2, 1e-3, kind="at least")
    checks.add("d", "h", "shrinks for 80 %", ok=False, partly=True)
    table = checks.frame()
    assert list(table.columns) == ["statement", "how checked", "worst error / counterexamples", "tolerance", "verdict"]
    assert table["verdict"].tolist() == ["holds", "FAILS", "holds", "partly"]
    assert table["tolerance"].tolist() == ["≤ 10⁻¹²", "≤ 0", "≥ 0.001", ""]
    assert (len(checks), checks.n_fail) == (4, 2)
    only_ok = CheckTable()
    only_ok.add("e", "h", "0 (symbolic)", ok=True)
    assert "tolerance" not in only_ok.frame().columns
    with pytest.raises(ValueError, match="give exactly one of tol and ok"):
        only_ok.add("f", "h", 0.0)
    with pytest.raises(ValueError, match="unknown kind 'relative'"):
        only_ok.add("f", "h", 0.0, 1.0, kind="relative")


def test_an_untestable_row_stays_in_the_table_whatever_its_condition_and_is_not_a_failure():
    checks = CheckTable()
    checks.add("a", "h", "reliability 0.1 < 0.5", ok=True, untestable=True)  # the setting overrides ok
    checks.add("b", "h", 3, 0, kind="count", untestable=True)  # and a tolerance
    checks.add("c", "h", 3, 0, kind="count")
    assert checks.frame()["verdict"].tolist() == ["untestable", "untestable", "FAILS"]
    assert (len(checks), checks.n_fail, checks.n_untestable) == (3, 1, 2)
    html = checks.show().to_html()
    assert "#e6e6e6" in html and "#f8d7d7" in html and "#d9f2d9" not in html


def test_check_table_show_wraps_and_shades_every_verdict():
    checks = CheckTable()
    checks.add("a long statement " * 8, "h", 1e-13, 1e-12)
    checks.add("b", "h", 3, 0, kind="count")
    html = checks.show().to_html()
    assert "white-space: normal" in html and "#d9f2d9" in html and "#f8d7d7" in html
    assert "row_heading" not in html


def test_check_table_show_is_laid_out_like_the_books_tables_with_a_stable_id():
    def table():
        checks = CheckTable()
        checks.add("x = y", "100 random pairs", 3e-16, 1e-12)
        checks.add("a bound is attained", "rank-one cases", "gap 0.1, attained", ok=True)
        return checks

    html = table().show().to_html()
    assert "padding: 0.2em 0.8em 0.2em 0.3em" in html and 'id="T_table-' in html  # show_table's layout and ids
    assert "gap 0.1, attained" in html and "3.0 × 10⁻¹⁶" in html  # every cell as its text
    assert html == table().show().to_html()  # the same table, the same page
