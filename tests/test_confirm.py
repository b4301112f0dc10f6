"""Confirmatory runs (fedbook.confirm, book/build.py --confirm, the findings page's section): the
plan's sizes against hand-computed noncentral-t powers, its seed parameters, its refusals, and a
confirmatory run of one cheap chapter at the smoke profile."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from fedbook.claims import Claim, claims_records, evaluate
from fedbook.confirm import ConfirmPlan, check_plan, plan, power_at, seeds_for
from fedbook.study import _read as study_cache_read

ROOT = Path(__file__).resolve().parent.parent


def _t(level: float, df: int) -> float:
    return float(stats.t.ppf((1 + level) / 2, df))


def _record(key: str, sd: float, n: int, m: float = 1.0, *, mean: float = 0.5, level: float = 0.95, kind: str = "claim",
            verdict: str = "inconclusive at this scale", unit: str = "seeds", method: str = "t+floor",
            headline: bool = False) -> dict:
    """A claims record whose t interval over ``n`` seeds has effective standard deviation ``sd``."""
    half = _t(level, n - 1) * sd / math.sqrt(n)
    return {"key": key, "kind": kind, "headline": headline, "verdict": verdict, "n": n, "unit": unit, "m": m,
            "mean": mean, "low": mean - half, "high": mean + half, "level": level, "method": method, "versus": None,
            "intervals": {}, "ours": f"{mean} [..], {n} seeds", "anchor": f"claim-{key}"}


def _every(key: str, sds: list[float], n: int, m: float = 1.0) -> dict:
    names = [f"B{i}" for i in range(len(sds))]
    ivs = {}
    for name, sd in zip(names, sds):
        half = _t(0.95, n - 1) * sd / math.sqrt(n)
        ivs[name] = {"mean": 0.5, "low": 0.5 - half, "high": 0.5 + half, "n": n, "level": 0.95, "method": "t"}
    binding = min(ivs.values(), key=lambda iv: iv["low"])
    return {**_record(key, 1.0, n, m), "versus": names, "intervals": ivs, "low": binding["low"], "high": binding["high"]}


def _write(folder: Path, chapter: str, claims: list[dict], seeds: dict, seconds: float = 60.0, **more) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{chapter}.json").write_text(json.dumps({"seconds": seconds, "claims": claims, "seeds": seeds, **more}))


def _smallest(power_of_n, target: float = 0.8) -> int:
    """The smallest n >= 2 whose power reaches the target, by a plain loop."""
    n = 2
    while power_of_n(n) < target:
        n += 1
    return n


def test_one_claim_is_sized_by_the_noncentral_t_at_m_from_the_threshold():
    # sd 2, m 1 (an effect size of 0.5 at the threshold): the one-sample t test of d = 0.5 at two-sided
    # 5 % reaches 80 % power at 34 (Cohen's tables); by hand with the noncentral t:
    def hand(n: int) -> float:
        return stats.nct.sf(_t(0.95, n - 1), n - 1, math.sqrt(n) * 1.0 / 2.0)

    assert _smallest(hand) == 34
    assert hand(33) < 0.8 <= hand(34)
    n, reason = seeds_for(_record("a", sd=2.0, n=5))
    assert (n, reason) == (34, "")
    # the pilot's mean plays no part (no "observed power"), only its spread
    assert seeds_for(_record("a", sd=2.0, n=5, mean=-3.0))[0] == 34
    # sd 1: the effect size 1 needs 10 seeds (0.803 at 10, 0.75 at 9)
    assert seeds_for(_record("a", sd=1.0, n=3))[0] == 10
    assert float(power_at(9, 1.0, 1.0, 0.95)) < 0.8 <= float(power_at(10, 1.0, 1.0, 0.95))
    # a higher power needs more seeds, and a 99 % interval more than a 95 % one
    assert seeds_for(_record("a", sd=1.0, n=3), power=0.9)[0] == _smallest(lambda n: float(power_at(n, 1, 1, 0.95)), 0.9)
    assert seeds_for(_record("a", sd=1.0, n=3, level=0.99))[0] == _smallest(lambda n: float(power_at(n, 1, 1, 0.99)))
    assert seeds_for(_record("a", sd=1.0, n=3, level=0.99))[0] > 10


def test_every_baseline_holds_needs_all_and_does_not_hold_one_at_the_bonferroni_level():
    # two baselines of sd 1 and 1.5, m 1: holds = the product of the two powers at 95 %; does not hold =
    # the smaller of the two powers at the Bonferroni 97.5 %; n reaches 80 % on both
    def p(n, sd, level):
        return stats.nct.sf(_t(level, n - 1), n - 1, math.sqrt(n) / sd)

    hand = _smallest(lambda n: min(p(n, 1.0, 0.95) * p(n, 1.5, 0.95), min(p(n, 1.0, 0.975), p(n, 1.5, 0.975))))
    assert seeds_for(_every("all", [1.0, 1.5], 4)) == (hand, "")
    assert hand == 24
    # one baseline alone needs fewer: the tuple costs seeds
    assert seeds_for(_record("one", sd=1.5, n=4))[0] == _smallest(lambda n: p(n, 1.5, 0.95)) < hand


def test_claims_records_carry_each_baselines_interval_and_the_rule():
    c = Claim("all", "X beats all.", "Table 2", "accuracy, X − baseline, points", "greater", 0.5, resolution=0.1,
              versus=("A", "B"))
    result = evaluate(c, [92.0, 93.0, 92.5], {"A": [90.0, 90.5, 90.1], "B": [91.5, 92.1, 91.2]})
    (r,) = claims_records([result])
    assert r["versus"] == ["A", "B"] and r["direction"] == "greater" and r["level"] == 0.95
    for name, iv in result.intervals.items():
        assert r["intervals"][name] == {"mean": iv.mean, "low": iv.low, "high": iv.high, "n": 3, "level": 0.95,
                                        "method": iv.method}
    assert (r["low"], r["high"]) == (result.interval.low, result.interval.high)  # the binding one, as before
    one = claims_records([evaluate(Claim("g", "X beats Y.", "T", "acc, X − Y, points", "less", 1.0, resolution=0.1),
                                   [1.0, 2.0, 1.5])])[0]
    assert one["versus"] is None and one["intervals"] == {} and one["method"] in ("t", "t+floor")
    json.dumps([r, one])


def test_only_open_claims_over_seeds_are_planned_and_the_others_say_why(tmp_path):
    claims = [_record("open", 1.0, 3), _record("wide", 20.0, 3),
              _record("done", 1.0, 3, verdict="holds"), _record("ctrl", 1.0, 3, kind="control"),
              _record("boot", 1.0, 3, unit="test samples", method="bootstrap"),
              _record("old", 1.0, 3)]
    del claims[-1]["level"]  # a record from before the plans
    _write(tmp_path, "x_experiments", claims, {"seed": 0, "n_seeds": 3})
    p = plan(tmp_path, cap=12)
    got = dict(zip(p.claims["key"], zip(p.claims["planned_n"].astype(object), p.claims["reason"])))
    assert set(got) == {"open", "wide", "boot", "old"}  # decided claims and controls are not open claims
    assert got["open"] == (10, "")
    assert got["wide"][0] is pd.NA and got["wide"][1] == "more than the cap of 12 seeds"
    assert got["boot"][1] == "an interval over test samples, not over seeds"
    assert "predates" in got["old"][1]
    assert p.chapters.to_dict("records") == [{"chapter": "x_experiments", "seeds": 10, "first_seed": 10000,
                                              "parameters": {"seed": 10000, "n_seeds": 10}, "claims": 1,
                                              "pilot_seconds": 60.0, "estimated_seconds": None,  # no studies: no estimate
                                              "pilot_key": None}]  # a record without its key
    assert p.rows("x_experiments") == [{"chapter": "x_experiments", "key": "open", "headline": False,
                                        "pilot_verdict": "inconclusive at this scale", "pilot_n": 3, "tier": "n_seeds",
                                        "planned_n": 10, "reason": ""}]
    again = ConfirmPlan.from_dict(json.loads(json.dumps(p.to_dict())))
    pd.testing.assert_frame_equal(again.claims, p.claims)
    assert again.chapters.to_dict("records") == p.chapters.to_dict("records")


def test_the_seed_parameters_of_a_chapter(tmp_path):
    # COSMOS-like: the side seeds (3) size the open claim; n_seeds must hold them (side_seeds <= n_seeds)
    _write(tmp_path, "a_experiments", [_record("side", 1.0, 3)], {"seed": 0, "n_seeds": 6, "side_seeds": 3})
    # GGEUR-like: the headline seeds (11) size it; n_seeds (every run) gets the fewest, 2
    _write(tmp_path, "b_experiments", [_record("head", 1.0, 11)], {"seed": 0, "n_seeds": 5, "headline_seeds": 11})
    # MPT at smoke: both tiers ran 2 seeds, so a 2-seed claim could be either's: both get N
    _write(tmp_path, "c_experiments", [_record("tie", 1.0, 2), _record("tie2", 2.0, 2)],
           {"seed": 0, "n_seeds": 2, "n_seeds_figure": 2})
    # a claim whose seeds match no tier is not planned
    _write(tmp_path, "d_experiments", [_record("odd", 1.0, 4)], {"seed": 0, "n_seeds": 5})
    # a tier that serves no claim gets MIN_TIER (2) even where its pilot ran 1 seed: what check_plan accepts
    _write(tmp_path, "e_experiments", [_record("head", 1.0, 11)], {"seed": 0, "n_seeds_figure": 1, "headline_seeds": 11})
    p = plan(tmp_path)
    params = dict(zip(p.chapters["chapter"], p.chapters["parameters"]))
    assert params["a_experiments"] == {"seed": 10000, "n_seeds": 10, "side_seeds": 10}
    assert params["b_experiments"] == {"seed": 10000, "n_seeds": 2, "headline_seeds": 10}
    assert params["c_experiments"] == {"seed": 10000, "n_seeds": 34, "n_seeds_figure": 34}  # the chapter's largest n
    assert "d_experiments" not in params
    assert params["e_experiments"] == {"seed": 10000, "n_seeds_figure": 2, "headline_seeds": 10}
    assert check_plan(p, tmp_path) == []  # the plan passes its own check
    tiers = dict(zip(p.claims["chapter"] + ":" + p.claims["key"], p.claims["tier"]))
    assert tiers == {"a_experiments:side": "side_seeds", "b_experiments:head": "headline_seeds",
                     "e_experiments:head": "headline_seeds", "c_experiments:tie": "n_seeds, n_seeds_figure",
                     "c_experiments:tie2": "n_seeds, n_seeds_figure", "d_experiments:odd": ""}
    assert "match none" in p.claims.set_index("key").loc["odd", "reason"]


def test_the_fresh_seeds_must_be_fresh(tmp_path):
    # one open claim of sd 1: 10 fresh seeds, first_seed..first_seed + 10 (one beyond, as the pilot's seed + n_seeds)
    _write(tmp_path, "x_experiments", [_record("open", 1.0, 3)], {"seed": 9998, "n_seeds": 3})  # ran 9998..10001
    with pytest.raises(ValueError, match=r"x_experiments: the pilot ran seeds 10000..10001 of the fresh seeds 10000..10010"):
        plan(tmp_path)
    assert plan(tmp_path, first_seed=10002).chapters.loc[0, "parameters"]["seed"] == 10002
    assert plan(tmp_path, first_seed=9987).chapters.loc[0, "parameters"]["seed"] == 9987  # 9987..9997: wholly below
    with pytest.raises(ValueError, match=r"the pilot ran seed 9998 of the fresh seeds 9988..9998"):
        plan(tmp_path, first_seed=9988)
    # COSMOS-like: seeds 0..2 (and 3, one beyond), and a pilot study at seed + 1000 that the records' studies name
    studies = [{"study": "main", "seeds": [0, 1, 2]}, {"study": "pilot", "seeds": [1000]}]
    _write(tmp_path, "x_experiments", [_record("open", 1.0, 3)], {"seed": 0, "n_seeds": 3}, studies=studies)
    for first in (990, 995, 1000):  # every range that holds 1000 is refused
        with pytest.raises(ValueError, match=rf"the pilot ran seed 1000 of the fresh seeds {first}..{first + 10}; .* "
                                             "give a first_seed above 1000"):
            plan(tmp_path, first_seed=first)
    assert plan(tmp_path).chapters.loc[0, "parameters"]["seed"] == 10000  # the default lies above them all
    # a pilot wholly above the fresh seeds is no overlap: 4..14 avoids 0..3 and 1000
    assert plan(tmp_path, first_seed=4).chapters.loc[0, "parameters"]["seed"] == 4
    with pytest.raises(ValueError, match=r"the pilot ran seed 3 of the fresh seeds 3..13"):
        plan(tmp_path, first_seed=3)
    # a record without its seeds takes them from pilot_seeds=, and is checked the same
    _write(tmp_path, "x_experiments", [_record("open", 1.0, 3)], {})
    with pytest.raises(ValueError, match="the pilot ran seeds 10000..10002 of the fresh seeds"):
        plan(tmp_path, pilot_seeds={"x_experiments": {"seed": 9999, "n_seeds": 3}})
    assert "names no seed parameters" in plan(tmp_path).claims.loc[0, "reason"]


@pytest.mark.parametrize("kwargs, message", [
    ({"power": 1.0}, "power must be a number in (0, 1)"), ({"power": 0}, "power must be"),
    ({"power": "0.8"}, "power must be"), ({"power": True}, "power must be"),
    ({"cap": 1}, "cap must be an integer >= 2"), ({"cap": 10.5}, "cap must be an integer"),
    ({"first_seed": -1}, "first_seed must be an integer >= 0, got -1"),
])
def test_bad_settings_are_refused_by_name(tmp_path, kwargs, message):
    _write(tmp_path, "x_experiments", [_record("open", 1.0, 3)], {"seed": 0, "n_seeds": 3})
    with pytest.raises(ValueError, match=re.escape(message)):
        plan(tmp_path, **kwargs)


def test_an_empty_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no chapter records in"):
        plan(tmp_path / "nothing")


FINDINGS_COMMANDS = (".venv/bin/python book/build.py --confirm --plan-only",
                     ".venv/bin/python book/build.py --confirm",
                     ".venv/bin/python book/build.py --confirm -p executor=ray --workers 16")
"""The commands of the findings page's section on confirmatory runs (tests/test_commands.py's COVERAGE names this test)."""


def _build_module():
    spec = importlib.util.spec_from_file_location("book_build_confirm", ROOT / "book" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_findings_pages_confirm_commands_plan_and_pass_the_plans_parameters(monkeypatch, tmp_path, capsys):
    build = _build_module()
    source = (ROOT / "notebooks" / "findings.py").read_text()
    pilot, out, ran = tmp_path / "pilot", tmp_path / "confirm", {}
    # a book-profile pilot of HDC-FL (8 seeds): one open claim of sd 1 (10 fresh seeds), one decided
    _write(pilot, "hdcfl_experiments", [_record("donor-ls", 1.0, 8, headline=True), _record("mean", 1.0, 8, verdict="holds")],
           {"seed": 0, "n_seeds": 8}, seconds=255.0, key="pilot-1")
    start = {"event": "start", "study": "main", "total": 20, "cached": 0, "seeds": list(range(10000, 10010)),
             "cached_seconds": 0.0}

    def execute(name, params, output, cwd=None):
        ran[name] = params
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("{}")
        with open(Path(build.NOTEBOOKS, params["progress"]), "a") as log:  # the studies' progress, as run_study logs it
            log.write(json.dumps(start) + "\n" + json.dumps({"event": "cell", "study": "main", "seconds": 2.5}) + "\n")
        seconds = build.Seconds(1.0)
        seconds.cpu = 0.75
        return seconds

    monkeypatch.setattr(build, "output_dir", lambda profile: tmp_path if profile == "book" else tmp_path / profile)
    monkeypatch.setattr(build, "CONFIRM", out)
    monkeypatch.setattr(build, "execute_chapter", execute)
    monkeypatch.setattr(build, "claims_of", lambda notebook: [])
    (tmp_path / "chapters").symlink_to(pilot)
    for command in FINDINGS_COMMANDS:
        assert f"# {command} " in source  # as the page writes it
        ran.clear()
        assert build.main(shlex.split(command)[2:]) == 0
        printed = capsys.readouterr().out
        assert "[claim]    hdcfl_experiments  donor-ls (headline)  pilot: inconclusive at this scale, 8 seeds  ->  " \
               "10 fresh seeds" in printed
        assert "[chapter]  hdcfl_experiments: 10 fresh seeds (10000..10009) for 1 open claim(s)" in printed
        saved = json.loads((out / "book" / "plan.json").read_text())
        assert saved["chapters"][0]["parameters"] == {"seed": 10000, "n_seeds": 10}
        assert saved["profile"] == "book" and saved["chapters"][0]["pilot_key"] == "pilot-1"
        if "--plan-only" in command:
            assert ran == {}
            continue
        params = ran["hdcfl_experiments"]
        assert {k: params[k] for k in ("profile", "seed", "n_seeds")} == {"profile": "book", "seed": 10000, "n_seeds": 10}
        assert Path(build.NOTEBOOKS, params["cache_dir"]).resolve() == (out / "book" / "cache").resolve()
        assert Path(build.NOTEBOOKS, params["progress"]).resolve() == (out / "book" / "progress" / "hdcfl_experiments.log")
        assert (params.get("executor"), params.get("workers")) == (("ray", 16) if "executor" in command else (None, None))
        record = json.loads((out / "book" / "chapters" / "hdcfl_experiments.json").read_text())
        assert record["confirmatory"]["seeds"] == list(range(10000, 10010))
        assert [r["key"] for r in record["confirmatory"]["rows"]] == ["donor-ls"]
        assert record["confirmatory"]["pilot_key"] == "pilot-1"  # the pilot build it was planned from
        # its cost and studies, as a build's record has them: this execution's lines of the log alone (the log keeps
        # the earlier command's lines: a resumed run appends)
        assert record["cpu_seconds"] == 0.75 and record["seconds"] == 1.0
        # on Ray the workers are no children of the kernel: the record says its CPU count misses them
        assert ("cpu_escapes" in record) == ("executor" in command)
        assert "executor" not in command or "ran on Ray (executor='ray')" in record["cpu_escapes"]
        assert record["studies"] == [{"study": "main", "cells": 20, "cached": 0, "cached_seconds": 0.0,
                                      "computed_seconds": 2.5, "seeds": list(range(10000, 10010))}]
        (out / "book" / "chapters" / "hdcfl_experiments.json").unlink()  # the next command executes again
    # a finished chapter is not executed again when the same plan resumes on another executor or with other workers
    assert build.main(shlex.split(FINDINGS_COMMANDS[1])[2:]) == 0 and list(ran) == ["hdcfl_experiments"]
    ran.clear()
    assert build.main(shlex.split(FINDINGS_COMMANDS[2])[2:]) == 0 and ran == {}
    assert "[cached]   hdcfl_experiments" in capsys.readouterr().out
    # but a plan from another pilot build executes it again: the record's confirmatory block names the new pilot
    _write(pilot, "hdcfl_experiments", [_record("donor-ls", 1.0, 8, headline=True), _record("mean", 1.0, 8, verdict="holds")],
           {"seed": 0, "n_seeds": 8}, seconds=255.0, key="pilot-2")
    assert build.main(shlex.split(FINDINGS_COMMANDS[1])[2:]) == 0 and list(ran) == ["hdcfl_experiments"]
    record = json.loads((out / "book" / "chapters" / "hdcfl_experiments.json").read_text())
    assert record["confirmatory"]["pilot_key"] == "pilot-2"
    ran.clear()
    # the plan's seeds come from the build's -p values: a seed the plan sets is refused
    with pytest.raises(SystemExit, match="the confirmatory plan sets the seeds itself"):
        build.main(["--confirm", "-p", "n_seeds=3"])
    with pytest.raises(SystemExit, match="power must be a number in"):
        build.main(["--confirm", "--power", "1.5"])


def test_a_loaded_plan_is_checked_as_a_plan_is_and_a_verdict_planned_from_an_earlier_build_does_not_stand(
        monkeypatch, tmp_path, capsys):
    from fedbook.catalog import read_confirmations

    build, ran = _build_module(), {}
    pilot, out = tmp_path / "chapters", tmp_path / "confirm"
    studies = [{"study": "main", "seeds": list(range(8))}, {"study": "side", "seeds": [10012]}]  # a study far above
    _write(pilot, "hdcfl_experiments", [_record("donor-ls", 1.0, 8)], {"seed": 0, "n_seeds": 8}, key="pilot-1",
           studies=studies)
    fresh = claims_records([evaluate(Claim("donor-ls", "X beats Y.", "T", "acc, X − Y, points", "greater", 1.0,
                                           resolution=0.1), [2.0, 2.2, 1.9, 2.1, 2.0, 2.3, 1.8, 2.1, 2.2, 2.0])])

    def execute(name, params, output, cwd=None):
        ran[name] = params
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("{}")
        return 1.0

    monkeypatch.setattr(build, "output_dir", lambda profile: tmp_path)
    monkeypatch.setattr(build, "CONFIRM", out)
    monkeypatch.setattr(build, "execute_chapter", execute)
    monkeypatch.setattr(build, "claims_of", lambda notebook: fresh)
    assert build.main(["--confirm", "--plan-only"]) == 0
    good = json.loads((out / "book" / "plan.json").read_text())
    assert good["chapters"][0]["parameters"] == {"seed": 10000, "n_seeds": 10}  # 10000..10010 avoids 10012
    with pytest.raises(SystemExit, match="the pilot ran seed 10012 of the fresh seeds 10002..10012"):
        build.main(["--confirm", "--plan-only", "--first-seed", "10002"])
    capsys.readouterr()

    def refused(change, message: str, profile: str = "book") -> None:
        data = json.loads(json.dumps(good))
        change(data)
        (tmp_path / "plan.json").write_text(json.dumps(data))
        with pytest.raises(SystemExit, match=message):
            build.main(["--confirm", "--profile", profile, "--plan", str(tmp_path / "plan.json")])
        assert ran == {}

    refused(lambda d: d.update(power=1.5), "power must be a number in")
    refused(lambda d: d.update(cap=1), "cap must be an integer >= 2")
    refused(lambda d: None, "is of the 'book' build, not of --profile smoke", profile="smoke")
    refused(lambda d: d["chapters"][0].update(parameters={"seed": 10000, "n_seeds": 10, "rounds": 3}),
            r"hdcfl_experiments: the plan's parameters must be its seed and seed parameters \['n_seeds', 'seed'\]")
    refused(lambda d: d["chapters"][0]["parameters"].update(n_seeds=1), "each seed parameter must be an integer >= 2")
    refused(lambda d: d["chapters"][0]["parameters"].update(seed=5), "the pilot ran seeds 5..8 of the fresh seeds 5..15")
    refused(lambda d: d["chapters"][0]["parameters"].update(seed=10005), "the pilot ran seed 10012 of the fresh")
    refused(lambda d: d["chapters"][0].update(pilot_key="pilot-0"), "the plan was made from an earlier build")
    refused(lambda d: d["claims"][0].update(planned_n=41), "planned_n must be an integer in 2..40")
    refused(lambda d: d["chapters"][0].update(seeds=12),
            r"seeds must be the largest of its seed parameters \{'n_seeds': 10\}, 10, got 12")
    refused(lambda d: d["claims"][0].update(chapter="mpt_experiments"),
            r"its chapter 'mpt_experiments' is not among the plan's chapters \(hdcfl_experiments\)")
    refused(lambda d: d["claims"][0].update(tier="side_seeds"),
            r"tier must name the chapter's seed parameters \(n_seeds\), got 'side_seeds'")
    refused(lambda d: d["claims"][0].update(planned_n=12), r"planned_n 12 exceeds its tier's planned seeds \{'n_seeds': 10\}")
    # the plan as saved runs, and its record names the pilot it was planned from
    (tmp_path / "plan.json").write_text(json.dumps(good))
    assert build.main(["--confirm", "--plan", str(tmp_path / "plan.json")]) == 0 and list(ran) == ["hdcfl_experiments"]
    record = json.loads((out / "book" / "chapters" / "hdcfl_experiments.json").read_text())
    assert record["confirmatory"]["pilot_key"] == "pilot-1"
    parts = [("HDC-FL", ["hdcfl_experiments"])]
    f = read_confirmations(pilot, out / "book" / "chapters", parts)
    assert f[["confirmatory verdict", "stands", "standing verdict"]].values.tolist() == [["holds", "confirmatory", "holds"]]
    # the pilot is rebuilt (its record's key changes): the confirmatory verdict no longer stands
    _write(pilot, "hdcfl_experiments", [_record("donor-ls", 1.0, 8)], {"seed": 0, "n_seeds": 8}, key="pilot-2")
    f = read_confirmations(pilot, out / "book" / "chapters", parts)
    assert f[["confirmatory verdict", "stands", "standing verdict"]].values.tolist() == [
        ["planned from an earlier build", "pilot", "inconclusive at this scale"]]
    ran.clear()
    with pytest.raises(SystemExit, match="the plan was made from an earlier build"):  # and its plan is refused
        build.main(["--confirm", "--plan", str(tmp_path / "plan.json")])


def test_the_findings_page_gets_the_profiles_confirmatory_records_and_its_key_covers_them(monkeypatch, tmp_path, capsys):
    build, ran = _build_module(), {}

    def execute(name, params, output, cwd=None):
        ran[name] = params
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("{}")
        return 1.0

    monkeypatch.setattr(build, "execute_chapter", execute)
    monkeypatch.setattr(build, "CONFIRM", tmp_path / "confirm")
    monkeypatch.setattr(build, "claims_of", lambda notebook: None)
    build.build("smoke", ["findings"], {}, render=False, force=False, out=tmp_path / "out")
    folder = Path(build.NOTEBOOKS, ran["findings"]["confirm_records"]).resolve()
    assert folder == (tmp_path / "confirm" / "smoke" / "chapters").resolve()
    ran.clear()
    build.build("smoke", ["findings"], {}, render=False, force=False, out=tmp_path / "out")
    assert ran == {}  # cached
    folder.mkdir(parents=True)
    (folder / "hdcfl_experiments.json").write_text(json.dumps({"claims": [], "confirmatory": {"seeds": [1000]}}))
    build.build("smoke", ["findings"], {}, render=False, force=False, out=tmp_path / "out")
    assert list(ran) == ["findings"]  # a new confirmatory record re-runs the page
    with pytest.raises(SystemExit, match="confirm_records=... is set by the build"):
        build.build("smoke", ["findings"], {"confirm_records": "x"}, render=False, force=False, out=tmp_path / "out")


def test_a_builds_record_reads_studies_from_its_own_log_only_and_says_when_its_cpu_count_misses_workers(monkeypatch, tmp_path):
    build, ran = _build_module(), {}
    start = {"event": "start", "study": "main", "total": 2, "cached": 0, "seeds": [0], "cached_seconds": 0.0}

    def execute(name, params, output, cwd=None):
        ran[name] = params
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("{}")
        with open(Path(build.NOTEBOOKS, params["progress"]), "a") as log:
            log.write(json.dumps(start) + "\n" + json.dumps({"event": "cell", "study": "main", "seconds": 2.5}) + "\n")
        seconds = build.Seconds(1.0)
        seconds.cpu = 0.75
        return seconds

    monkeypatch.setattr(build, "execute_chapter", execute)
    monkeypatch.setattr(build, "claims_of", lambda notebook: None)
    record = tmp_path / "out" / "chapters" / f"{CHAPTER}.json"
    # a user's progress file is shared by every chapter and never emptied: no studies are read from it
    shared = tmp_path / "progress.log"
    shared.write_text(json.dumps({**start, "study": "other chapter's"}) + "\n")
    build.build("smoke", [CHAPTER], {"progress": str(shared), "executor": "ray"}, render=False, force=True,
                out=tmp_path / "out")
    got = json.loads(record.read_text())
    assert "studies" not in got and got["cpu_seconds"] == 0.75
    assert "ran on Ray (executor='ray')" in got["cpu_escapes"]  # getrusage does not see Ray's workers
    # the log the build sets itself (and empties) is the record's studies; a forked pool's CPU is counted
    build.build("smoke", [CHAPTER], {"executor": "process"}, render=False, force=True, out=tmp_path / "out")
    got = json.loads(record.read_text())
    assert [s["study"] for s in got["studies"]] == ["main"] and "cpu_escapes" not in got


# --- a confirmatory run of one cheap chapter at the smoke profile (book/build.py --confirm) ---

CHAPTER = "hdcfl_experiments"


def _hand_plan(path: Path) -> Path:
    """A plan made by hand: the HDC-FL chapter on 2 fresh seeds (1000, 1001)."""
    rows = [{"chapter": CHAPTER, "key": "donor-rot", "headline": True, "pilot_verdict": "inconclusive at this scale",
             "pilot_n": 2, "tier": "n_seeds", "planned_n": 2, "reason": ""}]
    chapters = [{"chapter": CHAPTER, "seeds": 2, "first_seed": 1000, "parameters": {"seed": 1000, "n_seeds": 2},
                 "claims": 1, "pilot_seconds": None, "estimated_seconds": None}]
    path.write_text(json.dumps({"power": 0.8, "cap": 2, "first_seed": 1000, "claims": rows, "chapters": chapters}))
    return path


def _confirm_command(plan_file: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "book" / "build.py"), "--confirm", "--profile", "smoke", "--plan", str(plan_file),
            "--out", str(out), *extra]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


MEASURED = {"server": ["refresh", "other", "seconds"]}
"""The columns of the chapter's frames that are measured times (seconds of the server's work), not results."""


def _cells(out: Path) -> dict[str, tuple[dict, dict[str, pd.DataFrame]]]:
    """Every cached cell of a confirmatory run, by its file's path under the cache: its cell and its frames."""
    found = {}
    for path in sorted((out / "cache").rglob("*.json")):
        frames, _ = study_cache_read(path)
        found[str(path.relative_to(out / "cache"))] = (json.loads(path.read_text())["cell"], frames)
    return found


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (by the parent ids in /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie, ended but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_confirmatory_run_resumes_after_a_kill_and_ray_gives_the_same_bits(tmp_path):
    plan_file = _hand_plan(tmp_path / "plan.json")
    pool, ray = tmp_path / "pool", tmp_path / "ray"
    # the process pool, killed once its first cell is cached, then run again to the end
    killed = subprocess.Popen(_confirm_command(plan_file, pool, "--workers", "1"), cwd=ROOT / "book", env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not list((pool / "cache").rglob("*.json")) and killed.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        first = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (pool / "cache").rglob("*.json")}
        ended = killed.poll()
        assert first and ended is None, f"the run ended ({ended}) before a cell was cached and it could be killed: " \
            + (killed.stdout.read()[-3000:] if ended is not None else "")
    finally:
        kernel = _descendants(killed.pid)  # the kernel papermill started (and any worker below the build)
        if killed.poll() is None:
            # the build's process group: jupyter_client starts the kernel in a session of its own, so only the build
            # dies here; the kernel sees its parent gone and exits a moment later
            os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
    deadline = time.monotonic() + 60  # the rerun must not race the killed build's kernel (it may still write a cell)
    while any(_alive(pid) for pid in kernel) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in kernel), f"the killed build's kernel {sorted(kernel)} still runs"
    assert not (pool / "chapters" / f"{CHAPTER}.json").exists()
    again = subprocess.run(_confirm_command(plan_file, pool, "--workers", "1"), cwd=ROOT / "book", env=_env(),
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    for path, (mtime, content) in first.items():  # read from the cache, not computed again
        assert path.stat().st_mtime_ns == mtime and path.read_bytes() == content
    # the same plan on a local Ray instance of 2 CPUs
    done = subprocess.run(_confirm_command(plan_file, ray, "-p", "executor=ray", "--workers", "2"), cwd=ROOT / "book",
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[progress] hdcfl_experiments: " in done.stdout  # the cells' progress, printed as they finish
    a = json.loads((pool / "chapters" / f"{CHAPTER}.json").read_text())
    b = json.loads((ray / "chapters" / f"{CHAPTER}.json").read_text())
    assert a["claims"] and a["claims"] == b["claims"]  # every claims record, bit for bit
    assert a["confirmatory"] == b["confirmatory"] and a["confirmatory"]["seeds"] == [1000, 1001]
    assert a["seeds"] == b["seeds"] == {"seed": 1000, "n_seeds": 2}
    cells, theirs = _cells(pool), _cells(ray)
    assert len(cells) == 6 and {cell["seed"] for cell, _ in cells.values()} == {1000, 1001}
    assert list(cells) == list(theirs)  # the same cells, under the same keys
    for name, (cell, frames) in cells.items():  # every study frame of every cell, bit for bit (measured times apart)
        assert theirs[name][0] == cell and list(theirs[name][1]) == list(frames)
        for frame, ours in frames.items():
            drop = MEASURED.get(frame, [])
            pd.testing.assert_frame_equal(ours.drop(columns=drop), theirs[name][1][frame].drop(columns=drop),
                                          check_exact=True)
    for csv in sorted((pool / "results" / CHAPTER).glob("*.csv")):  # and the tidy results saved
        assert csv.read_bytes() == (ray / "results" / CHAPTER / csv.name).read_bytes()
