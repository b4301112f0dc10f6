"""The chapter helper (fedlib.chapter): profile resolution, the seeded data choice, the check table
(its doctests run with the others: pytest --doctest-modules)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import re

import pandas as pd

from fedlib.chapter import (MISSING, CheckTable, chapter_title, exercises, format_bytes, load_data, resolve,
                            show_table, subsample)
from fedlib.data import ArrayDataset
from fedlib.rng import DATA_SUBSET, derive_seed


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


def _toy(n=50):
    return ArrayDataset(torch.arange(float(n))[:, None], torch.arange(n) % 3, n_classes=3, name="toy")


def test_subsample_is_the_sorted_seeded_choice_of_the_purpose_stream():
    toy = _toy()
    for seed in (0, 3):
        expected = np.sort(np.random.default_rng(derive_seed(seed, DATA_SUBSET)).choice(50, 7, replace=False))
        assert subsample(toy, 7, seed).x.flatten().long().tolist() == expected.tolist()
        other = np.sort(np.random.default_rng(derive_seed(seed, 13)).choice(50, 7, replace=False))
        assert subsample(toy, 7, seed, key=13).x.flatten().long().tolist() == other.tolist()
    assert subsample(toy, None, 0) is toy and subsample(toy, 80, 0) is toy
    with pytest.raises(ValueError, match="n_samples must be None .* or an integer >= 1, got 0"):
        subsample(toy, 0, 0)


def test_load_data_names_and_cifar_root():
    with pytest.raises(ValueError, match="unknown data set 'svhn'; valid: mnist5k, uci, uci8, cifar10, cifar100"):
        load_data("svhn")
    with pytest.raises(ValueError, match="cifar100 needs cifar_root: the folder that holds cifar-100-python/"):
        load_data("cifar100")
    uci = load_data("uci", n_samples=5000)  # more than it has: every sample
    assert len(uci) == 1797 and tuple(uci.x.shape[1:]) == (1, 28, 28)
    assert len(load_data("mnist5k", n_samples=300, seed=1)) == 300


def test_check_table_verdicts_and_columns():
    checks = CheckTable()
    assert checks.add("a", "h", 1e-13, 1e-12) is None  # a cell ending with a check shows nothing
    checks.add("b", "h", 3, 0, kind="count")
    checks.add("c", "h", 0.2, 1e-3, kind="at least")
    checks.add("d", "h", "shrinks for 80 %", ok=False, partly=True)
    table = checks.frame()
    assert list(table.columns) == ["statement", "how checked", "worst error / counterexamples", "tolerance", "verdict"]
    assert table["verdict"].tolist() == ["holds", "FAILS", "holds", "partly"]
    assert table["tolerance"].tolist() == ["<= 1e-12", "<= 0", ">= 1e-03", ""]
    assert (len(checks), checks.n_fail) == (4, 2)
    only_ok = CheckTable()
    only_ok.add("e", "h", "0 (symbolic)", ok=True)
    assert "tolerance" not in only_ok.frame().columns
    with pytest.raises(ValueError, match="give exactly one of tol and ok"):
        only_ok.add("f", "h", 0.0)
    with pytest.raises(ValueError, match="unknown kind 'relative'"):
        only_ok.add("f", "h", 0.0, 1.0, kind="relative")


def test_resolve_reads_the_notebooks_history_and_refuses_an_injected_unknown_parameter():
    profiles = {"book": {"rounds": 20}}
    history = ["", "profile = 'book'\nrounds = None  # communication rounds", "# Parameters\nround = 5\n"]
    namespace = {"In": history, "resolve": resolve, "profiles": profiles}
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) round; valid: profile, rounds"):
        exec("resolve(profiles, 'book', rounds=None)", namespace)
    namespace["In"] = [*history[:2], "# Parameters\nrounds = 5\n"]
    exec("P = resolve(profiles, 'book', rounds=5)", namespace)
    assert namespace["P"].rounds == 5
    assert resolve(profiles, "book").rounds == 20  # outside a notebook there is no history to check


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
    assert _cells(styler) == [["FedAvg", "91.2", "3.37 MB", "20", "1e-04"],
                              ["Ditto", MISSING, "512 B", "1,500", "1e-03"],
                              ["FedRep", "88.0", "25.0 GB", "3", "5e-01"]]
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


def test_show_table_refuses_unknown_columns_and_kinds():
    frame = pd.DataFrame({"a": [1.0]})
    with pytest.raises(ValueError, match=r"best names columns \['b'\].*valid: \['a'\]"):
        show_table(frame, best={"b": "max"})
    with pytest.raises(ValueError, match="best must be one of max, min per column, got {'a': 'largest'}"):
        show_table(frame, best={"a": "largest"})
    with pytest.raises(ValueError, match=r"formats names columns \['z'\]"):
        show_table(frame, formats={"z": ".1f"})


def test_format_bytes_uses_decimal_units_and_three_digits():
    assert [format_bytes(n) for n in (0, 999, 1000, 15_300, 940_000, 3_373_973, 2.5e10)] == \
        ["0 B", "999 B", "1.00 kB", "15.3 kB", "940 kB", "3.37 MB", "25.0 GB"]
    assert format_bytes(float("nan")) == MISSING


def test_check_table_show_wraps_and_shades_every_verdict():
    checks = CheckTable()
    checks.add("a long statement " * 8, "h", 1e-13, 1e-12)
    checks.add("b", "h", 3, 0, kind="count")
    html = checks.show().to_html()
    assert "white-space: normal" in html and "#d9f2d9" in html and "#f8d7d7" in html
    assert "row_heading" not in html


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
