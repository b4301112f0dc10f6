"""The book's tooling (fedbook.page): the chapter setup (profile resolution, papermill's parameters
checked, torch threads, the clock), tables for reading, the exercises' index, and the claims report
(its doctests run with the others: pytest --doctest-modules)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

import fedbook.page as book
from fedbook.page import (CLAIMS_RECORDS, CLAIMS_SUMMARY, MISSING, REPORT_KEYS, Settings, claims_report, clipped_error,
                         format_bytes, format_number, format_value, place_labels, resolve, setup, show_table)
from fedbook.catalog import chapter_times, chapter_title, exercise_index, exercises, record_seconds, toc_chapters
from fedbook.claims import (DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING, Claim, Read,
                            RegimeCheck, effect, evaluate, show)

ROOT = Path(__file__).resolve().parent.parent


def test_resolve_applies_overrides_and_refuses_unknowns():
    profiles = {"smoke": {"rounds": 2, "alphas": [0.3]}, "book": {"rounds": 20, "alphas": [0.3, 0.1]}}
    p = resolve(profiles, "book", rounds=None, alphas=[0.5])
    assert (p.profile, p.rounds, p.alphas) == ("book", 20, [0.5])
    with pytest.raises(ValueError, match="unknown profile 'fast'; valid: smoke, book"):
        resolve(profiles, "fast")
    with pytest.raises(ValueError, match="unknown parameter 'epochs'.*valid: alphas, rounds"):
        resolve(profiles, "book", epochs=3)


@pytest.mark.parametrize("key, value, words", [
    ("alphas", 0.5, r"'alphas' must be a list \(profile 'book' has \[0.3, 0.1\]\), got 0.5; for one value write \[0.5\]"),
    ("rounds", 2.5, r"'rounds' must be an integer .* got 2.5"),
    ("rounds", True, r"'rounds' must be an integer .* got True"),
    ("lr", "fast", r"'lr' must be a number .* got 'fast'"),
    ("dataset", 3, r"'dataset' must be a string .* got 3"),
    ("plot", 1, r"'plot' must be true or false .* got 1"),
])
def test_resolve_refuses_an_override_of_another_kind(key, value, words):
    profiles = {"book": {"rounds": 20, "alphas": [0.3, 0.1], "lr": 0.05, "dataset": "uci", "plot": True, "layers": None}}
    with pytest.raises(ValueError, match=words):
        resolve(profiles, "book", **{key: value})


def test_resolve_accepts_an_integer_for_a_number_a_tuple_for_a_list_and_anything_for_none():
    profiles = {"book": {"lr": 0.05, "alphas": [0.3], "layers": None}}
    p = resolve(profiles, "book", lr=1, alphas=(0.5, 0.1), layers=["block1"])
    assert (p.lr, p.alphas, p.layers) == (1, (0.5, 0.1), ["block1"])


class _Shell:
    """A stand-in for the IPython shell ``IPython.get_ipython()`` returns: its namespace holds ``In``."""

    def __init__(self, history):
        self.user_ns = {"In": history}


def test_setup_reads_the_notebooks_history_and_refuses_an_injected_unknown_parameter(monkeypatch):
    profiles = {"book": {"rounds": 20}}
    history = ["", "profile = 'book'\nrounds = None  # communication rounds", "# Parameters\nround = 5\n"]
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) round; valid: profile, rounds"):
        setup(profiles, "book", rounds=None, history=history)  # the history given explicitly
    monkeypatch.setattr(book, "get_ipython", lambda: _Shell(history))  # or read from the running kernel
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) round; valid: profile, rounds"):
        setup(profiles, "book", rounds=None)
    monkeypatch.setattr(book, "get_ipython", lambda: _Shell([*history[:2], "# Parameters\nrounds = 5\n"]))
    assert setup(profiles, "book", rounds=5).rounds == 5
    monkeypatch.setattr(book, "get_ipython", lambda: None)
    assert setup(profiles, "book").rounds == 20  # outside a notebook there is no history to check
    assert resolve(profiles, "book").rounds == 20  # resolve alone reads no history


def test_setup_refuses_the_parameter_before_anything_else():
    threads = torch.get_num_threads()
    history = ["", "profile = 'book'\nseed = 0", "# Parameters\nsede = 1\n"]
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) sede; valid: profile, seed"):
        setup({"book": {"rounds": 20}}, "fast", threads=threads + 1, history=history)  # not 'unknown profile'
    assert torch.get_num_threads() == threads  # nothing was set


def test_setup_sets_the_threads_starts_the_clock_and_keeps_the_namespace(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    P = setup({"smoke": {"rounds": 2, "alphas": [0.3]}}, "smoke", threads=1, rounds=None, alphas=[0.5], history=[])
    assert calls == [1] and isinstance(P, Settings)
    assert (P.profile, P.rounds, P.alphas) == ("smoke", 2, [0.5])
    assert vars(P) == {"profile": "smoke", "rounds": 2, "alphas": [0.5]}  # the clock is not a setting
    assert repr(P) == "Settings(profile='smoke', rounds=2, alphas=[0.5])"
    first = P.elapsed()
    time.sleep(0.01)
    assert 0 <= first < P.elapsed()
    setup({"smoke": {"rounds": 2}}, "smoke", history=[])  # threads=None: torch's threads left alone
    assert calls == [1]
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="threads must be None .* or an integer >= 1"):
            setup({"smoke": {"rounds": 2}}, "smoke", threads=bad, history=[])
    with pytest.raises(ValueError, match="may not be named elapsed"):
        setup({"smoke": {"elapsed": 2}}, "smoke", history=[])


def _cells(styler) -> list[list[str]]:
    """The body cells of a rendered table, as the page shows them."""
    import html as _html
    import re as _re

    body = styler.to_html().split("<tbody>", 1)[1]
    return [[_html.unescape(c) for c in _re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=_re.S)]
            for row in body.split("</tr>") if "<td" in row]


def test_show_table_puts_the_key_columns_first_and_formats_every_cell():
    frame = pd.DataFrame({"accuracy (%)": [91.234, float("nan"), 88.0], "bytes": [3373973, 512, 2.5e10],
                          "clients": [20, 1500, 3], "gamma": [1e-4, 1e-3, 0.5]},
                         index=pd.Index(["FedAvg", "Ditto", "FedRep"], name="method"))
    styler = show_table(frame, digits={"accuracy (%)": 1}, formats={"bytes": format_bytes, "gamma": ".0e"})
    assert _cells(styler) == [["FedAvg", "91.2", "3.37 MB", "20", "10⁻⁴"],  # ".0e": fedbook.tables.format_small
                              ["Ditto", MISSING, "512 B", "1,500", "0.001"],
                              ["FedRep", "88.0", "25.0 GB", "3", "0.5"]]
    html = styler.to_html()
    assert ">method<" in html and "row_heading" not in html  # the index is a column, not pandas' index
    assert "padding: 0.2em 0.8em" in html and "white-space: nowrap" in html  # columns apart, numbers unbroken
    assert styler.to_html() == show_table(frame, digits={"accuracy (%)": 1},
                                          formats={"bytes": format_bytes, "gamma": ".0e"}).to_html()  # stable id


def test_show_table_marks_the_best_value_and_compares_text_cells_by_their_number():
    frame = pd.DataFrame({"method": ["A", "B", "C"], "global": ["91.0 ± 2.5", "92.1 ± 1.0", "92.1 ± 3.0"],
                          "seconds": [3.0, 1.5, 2.0]})
    html = show_table(frame, index=False, best={"global": "max", "seconds": "min"}).to_html()
    bold = [block for block in html.split("}") if "font-weight: bold" in block]
    cells = sorted(c for block in bold for c in re.findall(r"_(row\d+_col\d+)", block))
    # both 92.1 cells of the global column (a tie), and 1.5 of the seconds column
    assert cells == ["row1_col1", "row1_col2", "row2_col1"]


def test_a_table_reads_as_its_text_not_a_memory_address():
    """What a notebook stores as a table's text form (and a glued table reads as, which
    ``book/build.py --compare`` compares) is the formatted table, the same on every run."""
    from IPython.core.formatters import PlainTextFormatter

    from fedbook.checks import CheckTable

    text = PlainTextFormatter()
    frame = pd.DataFrame({"accuracy (%)": [91.234, 80.5]}, index=pd.Index(["FedAvg", "Ditto"], name="method"))
    checks = CheckTable()
    checks.add("x = y", "100 random pairs", 3e-16, 1e-12)
    c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    for table, shown in [(show_table(frame, digits=1), "FedAvg 91.2"), (checks.show(), "x = y"),
                         (show([evaluate(c, [2.0, 3.0, 2.5])]), "X beats Y.")]:
        out = text(table)
        assert " at 0x" not in out and shown in out and out == text(table) and table.to_html()
    assert text(show_table(frame, digits=1)).splitlines() == ["method accuracy (%)", "FedAvg 91.2", "Ditto 80.5"]


def test_show_table_refuses_unknown_columns_and_kinds():
    frame = pd.DataFrame({"a": [1.0]})
    with pytest.raises(ValueError, match=r"best names columns \['b'\].*valid: \['a'\]"):
        show_table(frame, best={"b": "max"})
    with pytest.raises(ValueError, match="best must be one of max, min per column, got {'a': 'largest'}"):
        show_table(frame, best={"a": "largest"})
    with pytest.raises(ValueError, match=r"formats names columns \['z'\]"):
        show_table(frame, formats={"z": ".1f"})


def test_format_number_writes_the_limits_in_words():
    assert [format_number(v) for v in (0.12345, np.float64(2.0), 7, None, float("inf"), -np.inf, float("nan"))] == \
        ["0.123", "2.000", "7.000", "∞", "∞", "∞", "not defined"]
    assert format_number(1234.5, ".3g") == "1.23e+03" and format_number(0.5, ".2f") == "0.50"


def test_format_bytes_uses_decimal_units_and_three_digits():
    assert [format_bytes(n) for n in (0, 999, 1000, 15_300, 940_000, 3_373_973, 2.5e10)] == \
        ["0 B", "999 B", "1.00 kB", "15.3 kB", "940 kB", "3.37 MB", "25.0 GB"]
    assert format_bytes(float("nan")) == MISSING


def test_exercises_are_read_with_their_title_and_kind(tmp_path):
    source = tmp_path / "c.py"
    source.write_text(
        "# %% [markdown]\n# # The chapter\n#\n# ## Results\n#\n# 1. not an exercise\n"
        "# %%\nx = 1\n"
        "# %% [markdown]\n# ## Exercises\n#\n# 1. **More seeds.** *(parameters only)* Re-run with\n"
        "#    `n_seeds=5`.\n#\n# :::{dropdown} Hint\n# 1. a list inside a hint is not an exercise\n# :::\n"
        "#\n# 2. **A head of your own.** Write it\n#    *(code)* and test it.\n# %%\nz = 3\n"
        "# %% [markdown]\n# ### Exercise 3: Unmarked\n#\n# Think.\n"
        "# %%\ny = 2\n# %% [markdown]\n# ## After\n# 4. **Not one either.** *(code)*\n"
    )
    table = exercises(source)
    assert table.values.tolist() == [[1, "More seeds.", "parameters only"], [2, "A head of your own.", "code"],
                                     [3, "Unmarked", None]]
    assert chapter_title(source) == "The chapter"
    assert exercises(tmp_path / "c.py").columns.tolist() == ["exercise", "title", "kind"]


def test_the_build_is_read_chapter_by_chapter_with_its_times_and_exercises(tmp_path):
    (tmp_path / "_toc.yml").write_text(
        "parts:\n  - caption: Basics\n    chapters:\n      - file: intro\n      - file: chapters/one\n"
        "      - file: chapters/two\n  - caption: Back\n    chapters:\n      - file: chapters/three\n"
        "  - caption: Pages\n    chapters:\n      - file: api\n")
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "one.py").write_text("# %% [markdown]\n# # One\n# ## Exercises\n# 1. **A.** *(code)* Do.\n"
                                      "# 2. **B.** Think.\n")
    (notebooks / "two.py").write_text("# %% [markdown]\n# # Two\n")
    (notebooks / "three.py").write_text("# %% [markdown]\n# # Three\n# ## Exercises\n"
                                        "# 1. **C.** *(parameters only)* Re-run.\n")
    smoke = tmp_path / "smoke"
    smoke.mkdir()
    (smoke / "one.json").write_text('{"seconds": 30.0}')
    (smoke / "three.json").write_text('{"seconds": 4.5}')
    book = tmp_path / "book"
    book.mkdir()
    (book / "one.json").write_text('{"seconds": 90.0}')

    parts = toc_chapters(tmp_path / "_toc.yml")
    assert parts == [("Basics", ["one", "two"]), ("Back", ["three"]), ("Pages", [])]
    times = chapter_times(notebooks, parts, {"smoke": smoke, "book": book}, leave_out=["two"])
    assert times.columns.tolist() == ["part", "chapter", "smoke (s)", "book (min)"]
    assert times[["part", "chapter", "smoke (s)"]].values.tolist() == [["Basics", "One", 30.0], ["Back", "Three", 4.5]]
    assert times["book (min)"].iloc[0] == 1.5 and math.isnan(times["book (min)"].iloc[1])
    only_smoke = chapter_times(notebooks, parts, {"smoke": smoke})  # the book profile never built: no record
    assert only_smoke["smoke (s)"].isna().tolist() == [False, True, False] and only_smoke["book (min)"].isna().all()
    assert record_seconds(smoke, "two") is None and record_seconds(None, "one") is None
    assert exercise_index(notebooks, parts).values.tolist() == [["One", 1, "A.", "code"], ["One", 2, "B.", "not marked"],
                                                                ["Three", 1, "C.", "parameters only"]]
    assert exercise_index(notebooks, [("Basics", ["two"])]).columns.tolist() == ["chapter", "exercise", "title", "needs"]


class _Glue:
    """Captures what a report glues: key -> value (its rows' JSON records apart, in ``records``),
    and that nothing was displayed by the glue."""

    def __init__(self):
        self.values, self.shown, self.records, self.summary = {}, [], None, None

    def __call__(self, key, value, display=True):
        assert display is False and key not in self.values
        if key.endswith(CLAIMS_RECORDS):
            self.records = json.loads(value)
        elif key.endswith(CLAIMS_SUMMARY):
            self.summary = value
        else:
            self.values[key] = value


def _claim(key, direction="greater", min_effect=0.4, kind="claim", versus=None, within=False, headline=False):
    """A claim that reads the frame named after it: columns ``ours``, ``baseline`` (or one per
    baseline of ``versus``) and ``within``, one row per seed (:func:`_frame`); its m is half a
    paper's gain of ``2 * min_effect`` (the book's rule), read at the resolution 0.1."""
    baseline = {name: Read(key, name) for name in versus} if isinstance(versus, tuple) else Read(key, "baseline")
    return Claim(key, f"{key} is so.", "Abstract" if headline else "Table 1", "accuracy, ours − baseline, points",
                 direction, effect("points", paper=2 * min_effect), kind=kind, resolution=0.1, versus=versus, headline=headline,
                 ours=Read(key, "ours"), baseline=baseline,
                 within=({n: Read(key, f"within_{n}") for n in versus} if isinstance(versus, tuple) else Read(key, "within"))
                 if within else None)


def _frame(ours, baseline=0.0, within=None):
    """One row per seed: ``ours``, ``baseline`` (a number, an array, or a dict of arrays by name) and ``within``."""
    n = len(ours)
    columns = {"seed": np.arange(n), "ours": np.asarray(ours, dtype=float)}
    if isinstance(baseline, dict):
        columns.update({name: np.asarray(v, dtype=float) for name, v in baseline.items()})
    else:
        columns["baseline"] = np.broadcast_to(np.asarray(baseline, dtype=float), (n,))
    if isinstance(within, dict):
        columns.update({f"within_{name}": np.asarray(v, dtype=float) for name, v in within.items()})
    elif within is not None:
        columns["within"] = np.asarray(within, dtype=float)
    return pd.DataFrame(columns)


def test_claims_report_decides_every_claim_glues_the_counts_and_shows_the_table(capsys):
    claims = [
        _claim("gain", min_effect=0.5),  # every difference +2: holds
        _claim("loss"),  # every difference −1: does not hold (the opposite direction)
        _claim("one-seed"),  # one seed, an infinite interval: inconclusive
        _claim("ctrl", direction="less", kind="control"),  # holds, not counted
        _claim("not-run"),  # not run at this profile (no frame): left out
    ]
    results = {"gain": _frame([3.0, 3.0, 3.0], [1.0, 1.0, 1.0]), "loss": _frame([0.0, 0.0], [1.0, 1.0]),
               "one-seed": _frame([1.0]), "ctrl": _frame([0.0, 0.0, 0.0], 5.0)}
    glue, shown = _Glue(), []
    R = claims_report(claims, results, prefix="x_", total_seconds=12.5, glue=glue, display=shown.append)
    assert list(R) == ["gain", "loss", "one-seed", "ctrl"]
    assert [R[k].verdict for k in R] == [HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, HOLDS]
    assert glue.values == {"x_n_claims": 3, "x_n_holds": 1, "x_n_not": 1, "x_n_inconclusive": 1, "x_n_untestable": 0,
                           "x_n_not_smaller": 0, "x_n_not_opposite": 1, "x_total_seconds": 12.5}
    # and every row as a record, with the table's verdict and an anchor to the row's first cell
    assert [(r["key"], r["verdict"], r["kind"]) for r in glue.records] == [
        ("gain", HOLDS, "claim"), ("loss", DOES_NOT_HOLD, "claim"), ("one-seed", INCONCLUSIVE, "claim"), ("ctrl", HOLDS, "control")]
    assert glue.records[0]["quote"] == "gain is so." and glue.records[0]["n"] == 3
    assert glue.records[2]["low"] is None  # one seed: an unbounded interval, which JSON cannot hold
    html = shown[0].to_html()
    assert all(f'<tr id="{r["anchor"]}"' in html for r in glue.records)
    assert [r["anchor"] for r in glue.records] == ["claim-gain", "claim-loss", "claim-one-seed", "claim-ctrl"]
    assert '<tr id="claim-ctrl" class="claims-row claims-control"' in html  # a control shaded apart
    # the chapter's opening: its sentences (no headline claim here), the others counted, links to the table and findings
    assert repr(glue.summary).startswith("What this chapter found: the paper has no headline claim tested here. Of its "
                                         "3 other claims, 1 holds, 1 does not hold and 1 is inconclusive at this scale; "
                                         "the book’s 1 control is not counted.")
    assert f'href="#{shown[0].id}"' in glue.summary._repr_html_() and 'href="findings.html"' in glue.summary._repr_html_()
    assert all(type(v) is int for k, v in glue.values.items() if k != "x_total_seconds")  # glued as the page shows them
    assert [k.removeprefix("x_") for k in glue.values][:len(REPORT_KEYS)] == list(REPORT_KEYS)
    assert glue.records[1]["shortfall"] == "the opposite direction" and glue.records[0]["m"] == 0.5
    assert glue.records[0]["m_rule"] == "m = 0.5: 0.5 of the paper’s +1" and glue.records[0]["how_often"]
    assert R["gain"].interval == evaluate(claims[0], [3.0, 3.0, 3.0], [1.0, 1.0, 1.0]).interval
    # every difference +2: the seeds agree, but each is read at the resolution 0.1, so the interval keeps a
    # floor from that quantization, w = 0.1² / 6, at the share chi2_{2, 0.05} / 2 of it that 3 seeds make
    # plausible (t_{0.975, 2} * sqrt(w * chi2 / 2 / 3)), not a zero width read as certain
    half = stats.t.ppf(0.975, 2) * math.sqrt(0.1**2 / 6 * stats.chi2.ppf(0.05, 2) / 2 / 3)
    assert (R["gain"].interval.low, R["gain"].interval.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert R["gain"].interval.method == "t+floor"
    (table,) = shown  # one table, fedbook.claims.show's (shaded verdicts, stable id)
    html = table.to_html()
    assert html == show(list(R.values())).to_html() and 'class="claims-table"' in html
    assert "Control: ctrl is so." in html and "not-run" not in html
    # and the claim left out is named, with the frame it lacks, so a misspelled frame cannot pass for one not run
    assert capsys.readouterr().out == "Not decided at this profile, because it does not compute 'not-run': not-run.\n"


def test_claims_report_without_prefix_or_time_glues_the_four_counts_and_a_digits_choice():
    glue, shown = _Glue(), []
    R = claims_report([_claim("gain")], {"gain": _frame([2.0, 3.0, 2.5])}, digits=3, glue=glue, display=shown.append)
    assert glue.values == {"n_claims": 1, "n_holds": 1, "n_not": 0, "n_inconclusive": 0, "n_untestable": 0,
                           "n_not_smaller": 0, "n_not_opposite": 0}
    assert "+2.500 [" in shown[0].to_html() and R["gain"].verdict == HOLDS


def test_claims_report_takes_within_and_every_baseline_of_a_tuple():
    ours, base = [2.0, 2.0, 2.0], [1.0, 1.0, 1.0]
    within = [3.0, 5.0, 4.0]  # per seed, the variance of the difference from the test sample alone
    every = {"A": [1.0, 1.2, 0.9], "B": [0.2, 0.1, 0.3]}
    claims = [
        _claim("floor"),  # the floor of the resolution 0.1
        _claim("within", within=True),  # the floor of the test noise: 4 at the share 3 seeds allow
        _claim("every", versus=("A", "B"), within=True),
    ]
    results = {"floor": _frame(ours, base), "within": _frame(ours, base, within),
               "every": _frame(ours, every, {"A": within, "B": [0.0] * 3})}
    glue, shown = _Glue(), []
    R = claims_report(claims, results, glue=glue, display=shown.append)
    assert R["floor"].interval == evaluate(claims[0], ours, base).interval and R["floor"].verdict == HOLDS
    assert R["within"].interval == evaluate(claims[1], ours, base, within).interval
    half = stats.t.ppf(0.975, 2) * math.sqrt(4.0 * stats.chi2.ppf(0.05, 2) / 2 / 3)
    assert R["within"].interval.high == pytest.approx(1 + half) and R["within"].verdict == INCONCLUSIVE
    assert list(R["every"].intervals) == ["A", "B"] and R["every"].binding == "A"
    assert R["every"].interval == R["every"].intervals["A"] == evaluate(claims[1], ours, every["A"], within).interval
    assert glue.values == {"n_claims": 3, "n_holds": 1, "n_not": 0, "n_inconclusive": 2, "n_untestable": 0,
                           "n_not_smaller": 0, "n_not_opposite": 0}
    html = shown[0].to_html()
    assert "(vs A, B)" in html and "vs A +" in html and "; vs B +" in html and "seeds to decide" in html


def test_claims_report_glues_the_headline_claims_count_decided_and_median_half_width():
    claims = [_claim(k, headline=True) for k in "abc"] + [_claim("other")]
    results = {
        "a": _frame([3.0, 3.0, 3.0], 1.0),  # decided, a floor-width interval
        "b": _frame([1.0, 2.0, 3.0], 1.0),  # inconclusive, half-width t * 1 / sqrt(3)
        "c": _frame([1.0, 3.0, 5.0], 1.0),  # inconclusive, twice as wide
        "other": _frame([9.0, 9.0, 9.0]),  # not a headline claim
    }
    glue, shown = _Glue(), []
    R = claims_report(claims, results, glue=glue, display=shown.append)
    t = stats.t.ppf(0.975, 2)
    assert glue.values["n_headline"] == 3 and glue.values["headline_decided"] == 1
    assert glue.values["headline_half_width"] == pytest.approx(t / math.sqrt(3))  # the median: b's
    assert R["b"].interval.half_width == pytest.approx(t / math.sqrt(3))
    html = shown[0].to_html()
    assert html.count("(Abstract; headline)") == 3 and "other is so.” (Table 1)" in html
    assert "n_headline" not in _Glue().values  # and a report without headline claims glues none:
    quiet = _Glue()
    claims_report([_claim("x")], {"x": _frame([1.0])}, glue=quiet, display=lambda t: None)
    assert set(quiet.values) == set(REPORT_KEYS)


def test_claims_report_reads_each_regime_check_from_the_results_and_counts_the_untestable_apart():
    stable = RegimeCheck("backbone stable", "spread growth after the departure, ×", Read("stability", "growth"),
                         "at most", 2.0, "a backbone still reshaping its features cannot test tracking")
    regime = dataclasses.replace(_claim("regime"), regimes=(stable,))
    coarse = dataclasses.replace(_claim("coarse"), resolution=0.2)  # 0.2 > 0.25 × 0.4
    later = dataclasses.replace(_claim("later"), regimes=(dataclasses.replace(stable, read=Read("later_runs", "x")),))
    results = {"regime": _frame([3.0, 3.0, 3.0]), "coarse": _frame([3.0, 3.0, 3.0]), "later": _frame([3.0, 3.0]),
               "stability": pd.DataFrame({"seed": [0, 1, 2], "growth": [6.6, 5.0, 7.1]})}
    glue, shown = _Glue(), []
    R = claims_report([regime, coarse, later], results, glue=glue, display=shown.append)
    assert list(R) == ["regime", "coarse"]  # the regime check of 'later' was not computed: left out, said
    assert (R["regime"].verdict, R["coarse"].verdict) == (UNTESTABLE_SETTING, UNTESTABLE_RESOLUTION)
    assert R["regime"].regimes[0].value == pytest.approx(6.233333333)
    assert glue.values["n_untestable"] == 2 and glue.values["n_inconclusive"] == 0
    assert glue.records[0]["regimes"] == [{"key": "backbone stable", "value": pytest.approx(6.233333333), "op": "at most",
                                           "threshold": 2.0, "passes": False}]
    html = shown[0].to_html()
    assert "untestable in this setting: backbone stable: spread growth after the departure, × = 6.233" in html
    assert "#fbedc8" in html  # the untestable rows' own shade


def test_a_control_cannot_be_a_headline_claim_and_headline_is_a_bool():
    with pytest.raises(ValueError, match="a control cannot be a headline claim"):
        Claim("c", "q", "s", "x", "greater", resolution=0.1, kind="control", headline=True)
    with pytest.raises(ValueError, match="headline must be True or False, got 1"):
        Claim("c", "q", "s", "x", "greater", resolution=0.1, headline=1)


def test_claims_report_refuses_what_it_cannot_decide():
    quiet = dict(glue=_Glue(), display=lambda table: None)
    with pytest.raises(ValueError, match=r"claims \['bare'\] read nothing: declare ours=Read"):
        claims_report([Claim("bare", "q", "s", "x", "greater", effect("points"), resolution=0.1)], {}, **quiet)
    with pytest.raises(ValueError, match=r"claims \['typed'\] declare min_effect by hand: .*fedbook.claims.effect"):
        claims_report([Claim("typed", "q", "s", "x", "greater", 0.5, resolution=0.1, ours=Read("t", "x"))], {}, **quiet)
    with pytest.raises(ValueError, match=r"duplicates \['a'\]"):
        claims_report([_claim("a"), _claim("a")], {"a": _frame([1.0])}, **quiet)
    with pytest.raises(ValueError, match=r"claim 'short': baseline \(Read\('other', 'baseline'\)\) holds the units \[0, 1\], "
                                         r"ours \(Read\('short', 'ours'\)\) \[0, 1, 2\]"):
        claim = Claim("short", "q", "s", "x", "greater", effect("points"), resolution=0.1, ours=Read("short", "ours"),
                      baseline=Read("other", "baseline"))
        claims_report([claim], {"short": _frame([1.0, 2.0, 3.0]), "other": _frame([1.0, 2.0])}, **quiet)
    with pytest.raises(ValueError, match="claims_report takes Claims, got a str"):
        claims_report(["gain"], {}, **quiet)
    with pytest.raises(ValueError, match=r"selects 4 rows for 2 units \(seed\)") as caught:  # two values of a seed
        pooled = pd.concat([_frame([1.0, 2.0]), _frame([3.0, 4.0])], ignore_index=True)
        claims_report([_claim("pooled")], {"pooled": pooled}, **quiet)
    assert "(deciding claim 'pooled')" in caught.value.__notes__


# ---------------------------------------------------------------- figures and grid values
@pytest.mark.parametrize("x, text", [(0.0, "0"), (0.01, "0.01"), (0.1, "0.1"), (10.0, "10"), (1000.0, "1000"),
                                     (1e4, "10⁴"), (1e-4, "10⁻⁴"), (3e-3, "3 × 10⁻³"), (float("inf"), "∞")])
def test_format_value(x, text):
    assert format_value(x) == text


def test_clipped_error_keeps_the_bar_inside_the_range():
    assert clipped_error(50.0, 5.0) == [[5.0], [5.0]]
    assert clipped_error(98.0, 5.0) == [[5.0], [2.0]] and clipped_error(1.0, 5.0) == [[1.0], [5.0]]
    assert clipped_error(0.5, 1.0, low=0.0, high=1.0) == [[0.5], [0.5]]
    assert clipped_error(50.0, float("inf")) is None and clipped_error(50.0, float("nan")) is None


def test_place_labels_puts_labels_inside_the_axes_without_overlaps():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 3))
    points = [(0.0, 0.0), (0.05, 0.0), (0.0, 0.05), (1.0, 1.0)]  # three crowded points, one alone in a corner
    ax.plot(*zip(*points), "o")
    ax.set_xlim(-0.1, 1.1)
    ax.set_ylim(-0.1, 1.1)
    fig.canvas.draw()
    place_labels(ax, [(f"label {i}", p) for i, p in enumerate(points)], points)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    frame = ax.get_window_extent(renderer)
    assert [t.get_text() for t in ax.texts] == [f"label {i}" for i in range(4)]
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    plt.close(fig)


def test_a_grid_value_is_never_rounded_to_one_digit():
    assert format_value(1e-4) == "10⁻⁴" and format_value(2e5) == "2 × 10⁵"  # a digit times a power of ten
    assert format_value(1.5e-3) == "0.0015" and format_value(2.5e-5) == "2.5e-05" and format_value(12345.0) == "1.23e+04"


def test_the_publishing_workflow_parses_builds_with_the_readme_command_and_deploys_the_html():
    """The GitHub Pages workflow cannot run here: its YAML is parsed and its steps are checked."""
    import yaml

    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "push" in on and "workflow_dispatch" in on
    # only the deploy job may publish: the build job, which runs every package, reads
    assert flow["permissions"] == {"contents": "read"} and "permissions" not in flow["jobs"]["build"]
    assert flow["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    build_steps = flow["jobs"]["build"]["steps"]
    runs = [s.get("run", "") for s in build_steps]
    assert "make book" in runs and "make pdf" in runs
    assert "make book" in (ROOT / "README.md").read_text()
    # the chapter cache is restored before the build and saved after it even when it fails
    uses = [s.get("uses", "").split("@")[0] for s in build_steps]
    restore, save = (build_steps[uses.index(a)] for a in ("actions/cache/restore", "actions/cache/save"))
    assert uses.index("actions/cache/restore") < runs.index("make book") < uses.index("actions/cache/save")
    assert save["if"] == "always()" and save["with"]["path"] == restore["with"]["path"]
    assert "book/chapters" in restore["with"]["path"].split() and restore["with"]["restore-keys"].strip() == "chapters-"
    upload = next(s for s in build_steps if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "book/_build/html"
    deploy = flow["jobs"]["deploy"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
