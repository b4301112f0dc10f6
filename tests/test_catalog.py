"""fedbook.catalog' page helpers (what the findings and teaching pages compute from the build's
records and the book's index): the counts and their words, the verdicts that change between two
builds, the open claims nearest to a decision, a handout's injected cell; and the teaching page's
demonstration (fedbook.studies.teaching) against the run it replaces."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from fedbook.claims import Claim, claims_records, effect, evaluate, seeds_to_decide, table_anchor  # noqa: E402
from fedbook.catalog import (findings_counts, findings_numbers, handout_cell, nearest_decisions,  # noqa: E402
                             paper_summaries, plot_verdicts, read_findings, verdict_changes)
from fedbook.studies.teaching import demo_cell, demo_methods  # noqa: E402
from fedbook.study import Study, run_study  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _record(folder: Path, chapter: str, claims: list[tuple[str, list[float], list[float]]]) -> None:
    """A build's record of ``chapter`` holding one claims row per (key, ours, baseline)."""
    results = [evaluate(Claim(key, f"{key} holds.", "Table 1", "accuracy, X − Y, points", "greater", 0.5,
                              resolution=0.1), ours, base) for key, ours, base in claims]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{chapter}.json").write_text(json.dumps({"seconds": 1.0, "claims": claims_records(results)}))


@pytest.fixture
def builds(tmp_path):
    """Two builds' records of one chapter: 'a' holds in both, 'b' holds only in the book build, 'c' is open."""
    _record(tmp_path / "book", "x", [("a", [3.0, 3.1, 2.9], [0.0, 0.0, 0.0]), ("b", [3.0, 3.1, 2.9], [0.0] * 3),
                                     ("c", [0.6, 0.8, 0.4, 1.5], [0.0] * 4)])
    _record(tmp_path / "smoke", "x", [("a", [3.0, 3.1], [0.0, 0.0]), ("b", [3.0, -3.1], [0.0, 0.0])])
    return {"book": str(tmp_path / "book"), "smoke": str(tmp_path / "smoke")}


def test_the_findings_numbers_and_the_changed_verdicts(builds):
    parts = [("X paper", ["x", "x_derivations"])]
    findings, missing = read_findings(builds["book"], parts)
    counts = findings_counts(findings)
    R = findings_numbers(findings, counts, missing, "book")
    assert (R["n_claims"], R["n_holds"], R["n_inconclusive"], R["n_papers"]) == (3, 2, 1, 1)
    assert (R["n_headline_method"], R["n_headline_problem"]) == (0, 0)  # the fixture declares no headline claim
    assert R["not_built_text"] == ("the chapters with claims x_derivations have no record in this build, so their "
                                   "claims are missing")
    assert R["decided_percent"] == pytest.approx(200 / 3) and type(R["decided_percent"]) is float
    changes = verdict_changes(findings, builds, "book", parts)
    assert changes["ex1_text"].startswith("Of the 2 rows both builds have, 1 change verdict between the book profile "
                                          "and the smoke profile")
    assert "verdict (book)" in changes["ex1_table"].to_html() and " b " in f" {repr(changes['ex1_table'])} "
    alone = verdict_changes(findings, {"book": builds["book"]}, "book", parts)
    assert alone["ex1_text"].startswith("This machine has no smoke-profile build")
    fig = plot_verdicts(counts)
    assert [t.get_text() for t in fig.axes[0].texts] == ["2", "1"]
    plt.close(fig)


def test_a_papers_summary_says_its_methods_headline_claims_apart_from_those_about_its_problem(tmp_path):
    """The issue's case: the paper's own headline claim is open while a claim about the problem it
    addresses holds (with the most rows that hold). The summary must not read as the method working."""
    def claim(key, about="method", headline=True, kind="claim"):
        return Claim(key, f"{key} is so.", "Abstract", "accuracy, X − Y, points", "greater", effect("points"),
                     resolution=0.1, headline=headline, about=about, kind=kind)
    results = [evaluate(claim("beats"), [1.0, 1.9, 0.6], [0.0] * 3),  # mean 1.17, straddles m = 1: open
               evaluate(claim("degrades", about="problem"), [3.0, 3.1, 2.9], [0.0] * 3),  # holds
               evaluate(claim("side", headline=False), [3.0, 3.1, 2.9], [0.0] * 3),  # holds, not headline
               evaluate(claim("ctrl", headline=False, kind="control"), [0.0, 0.1, 0.0], [0.0] * 3)]
    (tmp_path / "x.json").write_text(json.dumps({"claims": claims_records(results)}))
    said = paper_summaries(tmp_path, [("X paper", ["x"]), ("Y paper", ["y"])])
    n = seeds_to_decide(results[0].claim, results[0])
    assert repr(said) == (
        "X paper’s 1 headline claim about its method (those of its abstract or conclusion): none is decided at this "
        f"scale; beats is inconclusive at this scale. What would decide the open ones: more seeds would decide beats "
        f"({n} seeds). About the problem the paper addresses (not its method), its headline claim: degrades holds. "
        "Of its 1 other claim, 1 holds; the book’s 1 control is not counted.")
    html = said._repr_html_()
    assert 'href="x.html#claim-beats"' in html and 'href="x.html#claim-degrades"' in html
    assert f'href="x.html#{table_anchor(["beats", "degrades", "side", "ctrl"])}"' in html  # the chapter's claims table
    assert "Y paper" not in html  # no record: no summary
    findings = read_findings(tmp_path, [("X paper", ["x"])])[0]
    R = findings_numbers(findings, findings_counts(findings), [], "book")
    assert (R["n_headline_method"], R["headline_method_holds"], R["headline_method_open"]) == (1, 0, 1)
    assert (R["n_headline_problem"], R["headline_problem_holds"]) == (1, 1)


def test_the_open_claims_nearest_to_a_decision_are_the_ones_the_pages_code_lists(builds):
    findings = read_findings(builds["book"], [("X paper", ["x"])])[0]
    R = nearest_decisions(findings)
    open_ = findings[(findings["kind"] == "claim") & (findings["verdict"] == "inconclusive at this scale")]
    needed = open_["seeds to decide"].str.extract(r"n = ([\d,]+)")[0].str.replace(",", "").astype(float)
    near = open_.assign(needed=needed).dropna(subset=["needed"])
    assert R["ex2_text"].startswith(f"1 claim is open; for {len(near)} of them")
    none = nearest_decisions(findings[findings["key"] == "a"])
    assert none["ex2_text"].startswith("0 claims are open; for 0 of them") and "no open claim" in repr(none["ex2_table"])


def test_a_handout_carries_the_students_parameters_and_no_output():
    injected, executed = handout_cell(ROOT / "book" / "build.py", "setting", seed=7)
    assert "seed = 7" in injected and 'profile = "smoke"' in injected and executed == 0


def test_the_demonstration_is_fedavg_and_fedavgm_on_one_federation():
    methods = demo_methods(ROOT / "book" / "exercises", beta=0.9)
    assert set(methods) == {"fedavg", "fedavgm"} and methods["fedavgm"].beta == 0.9
    sys.path.insert(0, str(ROOT / "book" / "exercises"))
    try:
        from fedavgm_solution import FedAvgM
    finally:
        sys.path.remove(str(ROOT / "book" / "exercises"))
    assert isinstance(methods["fedavgm"], FedAvgM)
    demo = run_study(Study("demo", lambda seed, method: demo_cell(seed, method, algorithms=methods, clients=4, rounds=1),
                           grid={"method": ["fedavg", "fedavgm"]}))["demo"]
    assert demo["method"].tolist() == ["fedavg", "fedavgm"] and demo["global"].between(0, 1).all()
    # beta = 0 and a server step of 1 are FedAvg: the same final accuracy
    plain = demo_methods(ROOT / "book" / "exercises", beta=0.0)
    same = [demo_cell(0, m, algorithms=plain, clients=4, rounds=2)["global"].iloc[0] for m in ("fedavg", "fedavgm")]
    assert same[0] == pytest.approx(same[1])
    momentum = demo_methods(ROOT / "book" / "exercises", beta=0.9)  # and with momentum the runs part
    apart = [demo_cell(0, m, algorithms=momentum, clients=4, rounds=2)["global"].iloc[0] for m in ("fedavg", "fedavgm")]
    assert apart[0] != apart[1]
    assert isinstance(demo, pd.DataFrame)


def test_the_findings_count_each_kind_of_does_not_hold_and_the_untestable_apart(tmp_path):
    from fedbook.claims import RESOLUTION_SHARE, effect
    rows = [evaluate(Claim("tie", "t.", "T", "accuracy, points", "greater", effect("points"), resolution=0.1),
                     [0.1, -0.1, 0.0, 0.05]),
            evaluate(Claim("worse", "w.", "T", "accuracy, points", "greater", effect("points"), resolution=0.1),
                     [-3.0, -3.1, -2.9]),
            evaluate(Claim("coarse", "c.", "T", "accuracy, points", "greater", effect("points", paper=1.0),
                           resolution=2.0), [5.0, 5.0, 5.0])]
    (tmp_path / "x.json").write_text(json.dumps({"seconds": 1.0, "claims": claims_records(rows)}))
    findings, _ = read_findings(tmp_path, [("X paper", ["x"])])
    assert findings["shortfall"].tolist() == ["smaller than claimed", "the opposite direction", ""]
    assert findings.loc[2, "verdict text"].startswith("untestable at this resolution: the resolution 2 is above")
    counts = findings_counts(findings).loc["X paper"]
    assert (counts["does not hold"], counts["of which smaller"], counts["of which opposite"],
            counts["untestable at this resolution"], counts["inconclusive at this scale"]) == (2, 1, 1, 1, 0)
    R = findings_numbers(findings, findings_counts(findings), [], "book")
    assert (R["n_not_smaller"], R["n_not_opposite"], R["n_untestable"], R["decided_percent"]) == (1, 1, 1,
                                                                                                  pytest.approx(200 / 3))
    assert R["resolution_share"] == f"{100 * RESOLUTION_SHARE:g} %"
    fig = plot_verdicts(findings_counts(findings))
    assert [t.get_text() for t in fig.axes[0].texts] == ["1", "1", "1"]
    plt.close(fig)


def test_the_rule_figure_in_the_repository_is_the_one_the_code_draws_and_the_reading_page_says_the_rule(tmp_path):
    from fedbook.catalog import ZONES_FIGURE, write_rule_zones
    from fedbook.claims import EFFECT_KINDS, EFFECT_SHARE, RESOLUTION_SHARE
    assert write_rule_zones(tmp_path / "zones.svg") == ZONES_FIGURE.read_bytes(), \
        "the rule's figure changed: run fedbook.catalog.write_rule_zones() and commit book/figures/rule-zones.svg"
    reading = (ROOT / "book" / "reading.md").read_text()
    assert "figures/rule-zones.svg" in reading and "../figures/rule-zones.svg" in (ROOT / "notebooks" / "findings.py").read_text()
    # the reading page says the rule's constants in words: keep them in step with the code
    assert EFFECT_SHARE == 0.5 and "takes half the gain the paper reports" in reading
    assert RESOLUTION_SHARE == 0.25 and "more than a quarter of $m$" in reading
    assert [k.default for k in EFFECT_KINDS.values()] == [1.0, 0.01, 0.1, 0.1, 0.05, 0.2]
    assert "0.2 of a within-class standard deviation" in reading


def test_a_record_of_the_old_rule_is_refused_by_name_and_not_compared(builds, tmp_path):
    old = json.loads((Path(builds["smoke"]) / "x.json").read_text())
    for r in old["claims"]:
        del r["m"]
    (Path(builds["smoke"]) / "x.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"predates the book's smallest-effect rule .* rebuild the chapter 'x'"):
        read_findings(builds["smoke"], [("X paper", ["x"])])
    findings = read_findings(builds["book"], [("X paper", ["x"])])[0]
    changes = verdict_changes(findings, builds, "book", [("X paper", ["x"])])
    assert changes["ex1_text"].startswith("The smoke-profile build on this machine is older than this page's rule")
