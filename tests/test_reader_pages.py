"""What a reader sees of the book's tables and figures, checked without a browser: errors and
tolerances written as a reader reads them, formulas of the check tables typeset, intervals inside
their metric's range, numbers kept on one line, methods shown by their names, and the MPT
chapter's per-round figures with their subject standing out and a legend of a legible size
(tests/test_browser.py checks the rendered pages themselves)."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from fedbook.checks import CheckTable, with_math
from fedbook.intervals import plus_minus, seed_table
from fedbook.page import show_table
from fedbook.tables import format_small
from fedlib.algorithms import registered


# ------------------------------------------------------------------ numbers
@pytest.mark.parametrize("x, digits, shown", [
    (0.0, 1, "0"), (-0.0, None, "0"), (3e-16, 1, "3.0 × 10⁻¹⁶"), (1e-12, None, "10⁻¹²"), (2e-8, None, "2 × 10⁻⁸"),
    (1.5e-9, None, "1.5 × 10⁻⁹"), (0.05, None, "0.05"), (0.0123, 1, "0.012"), (12345.0, 1, "1.2 × 10⁴"),
    (-2.5e-7, 1, "−2.5 × 10⁻⁷"), (math.inf, 1, "∞"), (math.nan, 1, "n/a"), (1e-3, None, "0.001"),
])
def test_small_numbers_read_as_a_reader_reads_them(x, digits, shown):
    assert format_small(x, digits) == shown
    assert "e+" not in shown and "e-" not in shown


def test_format_small_refuses_a_bad_number_of_digits():
    with pytest.raises(ValueError, match=r"digits must be an integer >= 0 or None \(exact\), got -1"):
        format_small(1.0, -1)


def test_check_table_writes_zero_as_zero_and_thresholds_with_signs():
    checks = CheckTable()
    checks.add("exact", "h", 0.0, 1e-12)  # was "0.0e+00" and "<= 1e-12"
    checks.add("at least zero", "h", 0.3, 0.0, kind="at least")  # was ">= 0e+00"
    checks.add("count", "h", 0, 0, kind="count")
    t = checks.frame()
    assert t["worst error / counterexamples"].tolist() == ["0", "0.3", "0 counterexamples"]
    assert t["tolerance"].tolist() == ["≤ 10⁻¹²", "≥ 0", "≤ 0"]
    assert t["verdict"].tolist() == ["holds", "holds", "holds"]


# ------------------------------------------------------------------ formulas
def test_a_statement_s_formula_is_typeset_and_the_rest_escaped():
    cell = with_math(r"Eq. (38): $|s_c - s_c^0| \le b_c(z)$ when a < b & c")
    assert cell == (r'Eq. (38): <span class="math notranslate nohighlight">\(|s_c - s_c^0| \le b_c(z)\)</span>'
                    " when a &lt; b &amp; c")
    assert with_math("no formula here") == "no formula here"
    assert with_math(r"$a < b$") == r'<span class="math notranslate nohighlight">\(a &lt; b\)</span>'


def test_the_check_table_shows_formulas_as_math_and_its_text_form_as_written():
    checks = CheckTable()
    checks.add(r"Eq. (21): $\operatorname{tr}\Sigma_{l,c} \ge 0$", "random instances", 1e-13, 1e-10)
    shown = checks.show()
    html = shown.to_html()
    assert r'<span class="math notranslate nohighlight">\(\operatorname{tr}\Sigma_{l,c} \ge 0\)</span>' in html
    assert 'class="check-table"' in html
    text = repr(shown)
    assert r"$\operatorname{tr}\Sigma_{l,c} \ge 0$" in text and "<span" not in text and "holds" in text


def test_the_fedgrc_check_statements_write_formulas_in_tex():
    """The FedGRC derivations' statements (the issue's "tr Sigma_{l,c} = (1/2N_c^2) sum_ij ...")
    are TeX between dollars: no ASCII Sigma, sum_ or ^-1 outside a formula."""
    from pathlib import Path

    source = (Path(__file__).resolve().parents[1] / "book" / "fedbook" / "studies" / "fedgrc_derivations.py").read_text()
    statements = re.findall(r'checks\.add\(r?"([^"]*)"', source)
    assert len(statements) > 40
    outside = [re.sub(r"\$[^$]*\$", "", s) for s in statements]
    ascii_maths = [s for s, o in zip(statements, outside) if re.search(r"Sigma|sum_|\^-1|<=|=>|mu~|\|\w\|_", o)]
    assert not ascii_maths, ascii_maths
    assert all(s.count("$") % 2 == 0 for s in statements)


# ------------------------------------------------------------------ intervals
def _ends(cell: str) -> tuple[float, float]:
    m = re.fullmatch(r"([-−\d.]+) (?:± ([\d.]+)|\[([-−\d.]+), ([-−\d.]+)\])", cell)
    assert m, cell
    num = lambda s: float(s.replace("−", "-"))  # noqa: E731
    mean = num(m.group(1))
    return (mean - num(m.group(2)), mean + num(m.group(2))) if m.group(2) else (num(m.group(3)), num(m.group(4)))


def test_no_interval_leaves_its_metric_s_range():
    # the cell: an F1 of 0.306 ± 1.030 read as [-0.724, 1.336]
    assert plus_minus(0.306, 1.030, 3, bounds=(0, 1)) == "0.306 [0.000, 1.000]"
    rng = np.random.default_rng(0)
    for _ in range(300):
        mean, half = rng.uniform(0, 1), rng.uniform(0, 1.5)
        low, high = _ends(plus_minus(mean, half, 3, bounds=(0, 1)))
        assert -1e-9 <= low <= high <= 1 + 1e-9
        inside = mean - half >= 0 and mean + half <= 1
        assert ("±" in plus_minus(mean, half, 3, bounds=(0, 1))) == inside  # an interval inside stays as it was
    assert plus_minus(0.5, math.inf, 3, bounds=(0, 1)) == "0.500 ± ∞"  # one seed: no interval to clip
    with pytest.raises(ValueError, match=r"bounds must be \(low, high\) with low < high"):
        plus_minus(0.5, 0.1, bounds=(1, 0))


def test_seed_table_clips_to_the_bounds_it_is_given():
    tidy = pd.DataFrame({"seed": [0, 1], "method": ["a", "a"], "f1": [0.0, 0.6]})  # mean 0.3, t half 3.81
    assert seed_table(tidy, "method", None, "f1", digits=3).loc["a", "f1"] == "0.300 ± 3.812"
    assert seed_table(tidy, "method", None, "f1", digits=3, bounds=(0, 1)).loc["a", "f1"] == "0.300 [0.000, 1.000]"


def test_a_number_is_never_wrapped_and_its_interval_only_before_it():
    frame = pd.DataFrame({"method": ["FedAvg", "Ditto"], "accuracy": ["93.2 ± 1.6", "0.306 [0.000, 1.000]"],
                          "bytes": ["15.2 kB", "1.05 MB"], "note": ["a long sentence that wraps", "another"]})
    html = show_table(frame, index=False).to_html()
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", html.split("</style>")[0])
    nowrap = {c for selectors, body in rules if "nowrap" in body for c in re.findall(r"_row\d+_col(\d+)", selectors)}
    assert nowrap == {"2"}  # the size; the text columns wrap, the intervals below only before them
    assert "93.2 ±\xa01.6<" in html and "0.306 [0.000,\xa01.000]<" in html and ">a long sentence that wraps<" in html


# ------------------------------------------------------------------ leaderboard
def test_every_registered_method_has_a_name_for_the_page():
    from fedbook.studies.leaderboard import DISPLAY_NAMES, display_name, named

    assert set(DISPLAY_NAMES) == set(registered())
    names = [display_name(k) for k in registered()]
    assert len(set(names)) == len(names) and display_name("fedavg_ft") == "FedAvg-FT"
    assert not any("_" in n for n in names)  # no registry key on the page
    frame = pd.DataFrame({"acc": [1.0, 2.0]}, index=pd.MultiIndex.from_tuples([(0.1, "rebalanced"), (0.1, "fedavg")],
                                                                                names=["alpha", "method"]))
    assert named(frame).index.get_level_values("method").tolist() == ["rebalancing control", "FedAvg"]
    with pytest.raises(ValueError, match="unknown method"):
        display_name("fedavgg")


# ------------------------------------------------------------------ figures
def _history(methods, seeds=(0, 1, 2), rounds=6):
    rng = np.random.default_rng(1)
    rows = [{"round": r, "method": m, "metric": k, "value": float(rng.uniform()), "seed": s}
            for m in methods for s in seeds for r in range(1, rounds + 1) for k in ("f1", "accuracy", "dist_oracle")]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("which", ["rounds", "distances"])
def test_mpt_s_per_round_figures_draw_mpt_on_top_and_a_legible_legend(which):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedbook.studies import mpt_experiments as M

    methods = (["fedavg", "ccvr", "icarl", "sdc", "ldc", "frozen", "mpt_lite", "mpt", "oracle"] if which == "rounds"
               else ["frozen", "barycentric", "stored_residual", "transported", "mpt_lite", "mpt_predicted",
                     "mpt_measured", "mpt", "icarl", "sdc", "ldc"])
    history = _history(methods)
    fig = M.plot_rounds(history, methods, 3) if which == "rounds" else M.plot_distances(history, methods, 3)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    mpt = lines[M.LABELS["mpt"]]
    others = [line for label, line in lines.items() if label != M.LABELS["mpt"]]
    assert matplotlib.colors.to_hex(mpt.get_color()) == M.SUBJECT_COLOR
    assert all(mpt.get_zorder() > o.get_zorder() and mpt.get_linewidth() > o.get_linewidth() for o in others)
    assert all(matplotlib.colors.to_hex(o.get_color()) not in (M.SUBJECT_COLOR, "#7f7f7f") for o in others)
    legend = fig.legends[0] if fig.legends else ax.get_legend()
    size_pt = legend.get_texts()[0].get_fontsize()
    # the book's text column at 1280 px is 688 px wide: the figure is scaled to it
    shown_px = size_pt * 688 / (fig.get_figwidth() * 72)
    assert shown_px >= 12, f"legend drawn {shown_px:.1f} px high at 1280 px (9 pt = 12 px)"
    plt.close(fig)


def test_a_table_s_scientific_column_reads_as_a_power_of_ten():
    frame = pd.DataFrame({"check": ["a", "b"], "max difference": [0.0, 3e-16]})
    text = repr(show_table(frame, formats={"max difference": ".1e"}, index=False))
    assert text.splitlines()[1:] == ["a 0", "b 3.0 × 10⁻¹⁶"]


def test_a_check_table_keeps_a_measured_value_its_tolerance_and_its_verdict_on_one_line():
    checks = CheckTable()
    checks.add("x = y", "random pairs", 3e-16, 1e-12)
    checks.add("a bound is attained", "rank-one cases", "gap 0.1 on every one of the cases", ok=True)
    html = checks.show().to_html()
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", html.split("</style>")[0])
    nowrap = {cell for selectors, body in rules if body.strip().endswith("nowrap;")
              for cell in re.findall(r"_(row\d+_col\d+)", selectors)}
    # row 0: its value (col 2), tolerance (col 3), verdict (col 4); row 1: its tolerance (empty) and verdict,
    # not its text value
    assert nowrap == {"row0_col2", "row0_col3", "row0_col4", "row1_col3", "row1_col4"}
