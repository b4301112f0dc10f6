r"""Confirmatory runs: the open claims of a build decided on fresh seeds, sized before they run.

A build of the book (the *pilot*) decides some claims and leaves others "inconclusive at this
scale". Adding seeds to the pilot's until a claim decides would make the number of seeds depend on
the results and inflate both error rates of the rule (:class:`fedbook.claims.Claim`): a claim
looked at after every seed is tried many times. A **confirmatory run** instead fixes its number of
seeds in advance from the pilot, runs it on **fresh seeds** (``first_seed``, ``first_seed + 1``,
..., none of them a seed any of the pilot's studies ran) and decides each claim it was planned for
on those seeds alone; the pilot only sizes it.

The size (:func:`plan`): for each open claim, the smallest number of seeds :math:`n` at which the
rule decides it with the declared **power** (80 % by default) when the true effect lies :math:`m`
(the claim's smallest effect of interest) away from the decision threshold on either side: for a
claim of a gain or a drop ("greater", "less"), an effect of twice :math:`m` in the claimed direction
when the claim holds and no effect when it does not; for a tolerance ("at least": the threshold
is :math:`-m`; "at most": :math:`+m`), no effect when it holds and :math:`-2m` ("at least") or
:math:`+2m` ("at most") when it does not. The spread is the pilot's: the
effective standard deviation :math:`\sigma` recovered from the half-width of the pilot's interval,
as :func:`fedbook.claims.seeds_to_decide` does, and taken as known: the declared power is nominal
(the pilot's :math:`\sigma` is itself an estimate from few seeds, so the true power may be lower
or higher). The pilot's observed mean is not used: power computed at the observed effect
("observed power") only restates the pilot's interval.
With :math:`t_c` the critical value of the claim's level and :math:`n - 1` degrees of freedom, the
interval clears a threshold :math:`m` away from the true mean with probability

.. math:: \pi(n) = P\left(T_{n-1}(\sqrt{n}\, m / \sigma) > t_c\right),

:math:`T_\nu(\delta)` the noncentral t with :math:`\nu` degrees of freedom and noncentrality
:math:`\delta` (``scipy.stats.nct``). Against every baseline of a tuple (:func:`fedbook.claims.decide`),
"holds" needs all :math:`k` intervals (the product of their powers, as if the baselines' differences
were independent; they share the method's runs and are positively correlated, so the product is
conservative: the true chance is at least that) and "does not hold" one at the Bonferroni level
:math:`1 - (1 - \text{level})/k` (the smallest of the baselines' powers: any one may be the one that
falls short). The planned :math:`n` gives both sides the declared power.

A chapter runs its confirmatory seeds through its notebook's seed parameters (``n_seeds``,
``side_seeds``, ``headline_seeds``, ``n_seeds_figure``: :func:`seed_parameters`); a claim is sized by
the parameter whose pilot value equals its number of seeds (its *tier*). Every tier that serves an
open claim gets the chapter's largest planned :math:`n`, the others their smallest valid value
(:data:`MIN_TIER`), and ``seed`` the first fresh seed.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from fedbook.claims import INCONCLUSIVE
from fedlib.validation import is_int, is_real

POWER = 0.8
"""The default power a confirmatory run is planned for."""
CAP = 40
"""The default largest number of fresh seeds planned for one claim."""
FIRST_SEED = 10000
"""The default first fresh seed (the book's pilot runs seeds from 0, and COSMOS its pilot studies
from ``seed + 1000``)."""
MIN_TIER = 2
"""The seeds a seed parameter that serves no open claim gets: the fewest an interval over seeds needs."""
NESTED = (("side_seeds", "n_seeds"), ("n_seeds", "headline_seeds"))
"""Seed parameters whose seeds are the first of another's, ``(inner, outer)``: a chapter needs
``outer >= inner`` (COSMOS runs its side studies on the first ``side_seeds`` of ``n_seeds``; GGEUR
runs every study on the first ``n_seeds`` of ``headline_seeds``)."""
_TIER = re.compile(r"^(n_seeds\w*|\w+_seeds)$")

CLAIM_COLUMNS = ("chapter", "key", "headline", "pilot_verdict", "pilot_n", "tier", "planned_n", "reason")
"""The columns of a plan's ``claims`` (:class:`ConfirmPlan`)."""
CHAPTER_COLUMNS = ("chapter", "seeds", "first_seed", "parameters", "claims", "pilot_seconds", "estimated_seconds",
                   "pilot_key")
"""The columns of a plan's ``chapters`` (:class:`ConfirmPlan`)."""


def seed_parameters(names: Sequence[str]) -> list[str]:
    """The seed parameters (*tiers*) among a chapter's parameters: ``n_seeds``, ``n_seeds_*`` and
    ``*_seeds`` (how many of the run seeds a group of runs uses).

    Examples
    --------
    >>> seed_parameters(["profile", "seed", "n_seeds", "side_seeds", "rounds", "n_seeds_figure"])
    ['n_seeds', 'side_seeds', 'n_seeds_figure']
    """
    return [n for n in names if _TIER.match(n)]


def _check_settings(power: Any, cap: Any, first_seed: Any) -> None:
    if not is_real(power) or isinstance(power, bool) or not 0 < power < 1:
        raise ValueError(f"power must be a number in (0, 1), e.g. 0.8, got {power!r}")
    if not is_int(cap) or cap < MIN_TIER:
        raise ValueError(f"cap must be an integer >= {MIN_TIER} (the most fresh seeds one claim may get), got {cap!r}")
    if not is_int(first_seed) or first_seed < 0:
        raise ValueError(f"first_seed must be an integer >= 0, got {first_seed!r}")


def pilot_seed_set(record: Mapping[str, Any], seeds: Mapping[str, Any] | None = None) -> set[int]:
    """Every seed a pilot chapter ran: those its studies ran (the record's ``"studies"``, each with
    its ``"seeds"``: ``book/build.py`` records them), and ``seed`` to ``seed + t`` for its largest
    seed parameter ``t`` (one beyond: a chapter's own extra seed, FedGRC's pilot seed) from
    ``seeds`` (else the record's ``"seeds"``).

    Examples
    --------
    >>> record = {"seeds": {"seed": 0, "n_seeds": 3}, "studies": [{"study": "pilot", "seeds": [1000]}]}
    >>> sorted(pilot_seed_set(record))
    [0, 1, 2, 3, 1000]
    """
    seeds = dict(seeds if seeds is not None else record.get("seeds") or {})
    out = {int(s) for study in record.get("studies") or () for s in study.get("seeds") or ()}
    tiers = [int(v) for k, v in seeds.items() if k != "seed" and v is not None]
    if tiers and seeds.get("seed") is not None:
        out.update(range(int(seeds["seed"]), int(seeds["seed"]) + max(tiers) + 1))
    return out


def check_fresh(chapter: str, pilot: set[int], first_seed: int, seeds: int) -> None:
    """Refuse fresh seeds ``first_seed`` to ``first_seed + seeds`` (one beyond, as the pilot's) that
    a pilot ran (``pilot``: :func:`pilot_seed_set`); a pilot wholly below or above them is fine.

    Examples
    --------
    >>> check_fresh("x", {0, 1, 2, 1000}, 10000, 10)
    >>> check_fresh("x", {0, 1, 2, 1000}, 995, 10)
    Traceback (most recent call last):
    ...
    ValueError: chapter x: the pilot ran seed 1000 of the fresh seeds 995..1005; the confirmatory seeds must be fresh: give a first_seed above 1000 (or one whose range avoids the pilot's seeds)
    """
    hit = sorted(s for s in pilot if first_seed <= s <= first_seed + seeds)
    if hit:
        said = f"seed {hit[0]}" if len(hit) == 1 else f"seeds {hit[0]}..{hit[-1]}"
        raise ValueError(f"chapter {chapter}: the pilot ran {said} of the fresh seeds {first_seed}..{first_seed + seeds}; "
                         f"the confirmatory seeds must be fresh: give a first_seed above {max(pilot)} "
                         "(or one whose range avoids the pilot's seeds)")


def power_at(n: Any, sd: float, m: float, level: float) -> np.ndarray:
    r"""The chance that an interval of ``n`` seeds clears a threshold that lies ``m`` from the true
    mean difference, per-seed standard deviation ``sd``, at ``level``:
    :math:`P(T_{n-1}(\sqrt n\, m/\sigma) > t_{(1+\text{level})/2,\, n-1})`.

    Examples
    --------
    >>> round(float(power_at(10, 1.0, 1.0, 0.95)), 4)  # the one-sample t test's power at effect size 1, 10 seeds
    0.8031
    """
    n = np.asarray(n, dtype=np.float64)
    if sd <= 0:
        return np.ones_like(n)
    critical = stats.t.ppf((1 + level) / 2, n - 1)
    return stats.nct.sf(critical, n - 1, np.sqrt(n) * m / sd)


def _sd(iv: Mapping[str, Any]) -> float:
    """The effective per-seed standard deviation of a t interval: half-width × √n / t."""
    n = int(iv["n"])
    return (float(iv["high"]) - float(iv["low"])) / 2 * math.sqrt(n) / float(stats.t.ppf((1 + iv["level"]) / 2, n - 1))


def seeds_for(record: Mapping[str, Any], power: float = POWER, cap: int = CAP) -> tuple[int | None, str]:
    """The fresh seeds that decide one open claim with ``power`` (module docstring), at most
    ``cap``; or ``None`` and the reason none is planned.

    Parameters
    ----------
    record : dict
        The claim's record (:func:`fedbook.claims.claims_records`).
    power : float, default :data:`POWER`
    cap : int, default :data:`CAP`

    Returns
    -------
    (int or None, str)
        The seeds and ``""``, or ``None`` and the reason.

    Examples
    --------
    >>> from fedbook.claims import Claim, claims_records, evaluate
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 1.0, resolution=0.1)
    >>> (r,) = claims_records([evaluate(c, [0.0, 2.0, 1.0])])  # sd 1: about 10 seeds for 80 %
    >>> r["verdict"], seeds_for(r)
    ('inconclusive at this scale', (10, ''))
    >>> seeds_for(r, cap=8)
    (None, 'more than the cap of 8 seeds')
    """
    _check_settings(power, cap, FIRST_SEED)
    if record.get("kind") != "claim":
        return None, "a control, not a paper's claim"
    if record.get("verdict") != INCONCLUSIVE:
        return None, f"not open: {record.get('verdict')}"
    if "level" not in record or "intervals" not in record:
        return None, "its record predates confirmatory plans (rebuild the chapter)"
    if record.get("unit") != "seeds" or record.get("method") == "bootstrap":
        return None, f"an interval over {record.get('unit')}, not over seeds"
    if int(record["n"]) < 2 or record.get("low") is None or record.get("high") is None:
        return None, "no spread from one seed"
    m, level = float(record["m"]), float(record["level"])
    intervals = list(record["intervals"].values()) if isinstance(record.get("versus"), list) else [record]
    intervals = [{**iv, "level": iv.get("level", level)} for iv in intervals]
    if any(iv.get("low") is None or iv.get("high") is None or int(iv["n"]) < 2 for iv in intervals):
        return None, "no spread from one seed"
    ns = np.arange(MIN_TIER, cap + 1)
    sds = [_sd(iv) for iv in intervals]
    holds = np.prod([power_at(ns, sd, m, level) for sd in sds], axis=0)
    if len(sds) > 1:  # does not hold: any one baseline at the Bonferroni level (fedbook.claims.decide)
        fails = np.min([power_at(ns, sd, m, 1 - (1 - level) / len(sds)) for sd in sds], axis=0)
    else:
        fails = holds
    ok = np.flatnonzero(np.minimum(holds, fails) >= power)
    if not len(ok):
        return None, f"more than the cap of {cap} seeds"
    return int(ns[ok[0]]), ""


@dataclass(frozen=True)
class ConfirmPlan:
    """A confirmatory run, planned from a pilot's records (:func:`plan`).

    Parameters
    ----------
    claims : pandas.DataFrame
        One row per open claim (columns :data:`CLAIM_COLUMNS`): its chapter and key, whether it is
        a headline claim, the pilot's verdict and seeds, its tier (the seed parameter that sizes
        it, several joined by ``", "`` where the pilot's values tie), the fresh seeds planned
        (``<NA>`` when none) and the reason when none.
    chapters : pandas.DataFrame
        One row per chapter with a planned claim (columns :data:`CHAPTER_COLUMNS`): the fresh seeds
        (the largest planned n of its claims), the first fresh seed, the papermill parameters, how
        many open claims it serves, the pilot's cost (:func:`chapter_seconds`: its CPU seconds and
        its cached cells') and an estimate of the run's (:func:`estimate_seconds`: the fixed part
        and each study's seconds per seed times its tier's planned seeds; none without the record's
        studies), and the pilot record's ``key`` (a confirmatory record names the pilot build it
        was planned from).
    power : float, default :data:`POWER`
    cap : int, default :data:`CAP`
    first_seed : int, default :data:`FIRST_SEED`
        The plan's settings.
    """

    claims: pd.DataFrame
    chapters: pd.DataFrame
    power: float = POWER
    cap: int = CAP
    first_seed: int = FIRST_SEED

    def to_dict(self) -> dict:
        """Plain JSON values: the settings, and the two tables' rows."""
        claims = self.claims.astype(object).where(self.claims.notna(), None)
        return {"power": self.power, "cap": self.cap, "first_seed": self.first_seed,
                "claims": claims.to_dict("records"), "chapters": self.chapters.to_dict("records")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfirmPlan:
        """The plan :meth:`ConfirmPlan.to_dict` wrote."""
        claims = pd.DataFrame(list(data["claims"]), columns=list(CLAIM_COLUMNS))
        claims["planned_n"] = claims["planned_n"].astype("Int64")
        chapters = pd.DataFrame(list(data["chapters"]), columns=list(CHAPTER_COLUMNS))
        chapters["pilot_key"] = [c.get("pilot_key") for c in data["chapters"]]  # None in a plan made by hand
        return cls(claims, chapters, float(data["power"]), int(data["cap"]), int(data["first_seed"]))

    def rows(self, chapter: str) -> list[dict]:
        """The claims rows planned for one chapter (the ``claims`` rows where ``planned_n`` is set), as plain values."""
        these = self.claims[(self.claims["chapter"] == chapter) & self.claims["planned_n"].notna()]
        return [{**r, "planned_n": int(r["planned_n"])} for r in these.astype(object).to_dict("records")]


def check_plan(plan: ConfirmPlan, records: str | os.PathLike, *,
               pilot_seeds: Mapping[str, Mapping[str, int]] | None = None) -> list[str]:
    """Check a plan loaded from a file (a ``plan.json`` of an earlier run, or one made by hand)
    as :func:`plan` checks its own: its settings, each chapter's ``seed`` and seed parameters
    (integers, ``seed >= 0``, each at least :data:`MIN_TIER`) and its ``seeds`` (the largest of its
    seed parameters), each planned claim's seeds within the cap and within its tier's planned
    value, its chapter among the plan's chapters, the fresh seeds against every seed the pilot's
    record in ``records`` ran (:func:`check_fresh`), and the ``pilot_key`` (where a chapter names
    one) against that record's key.

    Returns
    -------
    list of str
        The plan's chapters without a pilot record in ``records`` (nothing to check their seeds
        against).

    Raises
    ------
    ValueError
        Naming the first bad value.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "x.json").write_text(json.dumps({"key": "k1", "seeds": {"seed": 0, "n_seeds": 3}}))
    >>> def one(seed):
    ...     chapters = pd.DataFrame([{"chapter": "x", "seeds": 5, "parameters": {"seed": seed, "n_seeds": 5},
    ...                               "pilot_key": "k1"}])
    ...     return ConfirmPlan(pd.DataFrame(columns=list(CLAIM_COLUMNS)), chapters)
    >>> check_plan(one(2), folder)
    Traceback (most recent call last):
    ...
    ValueError: chapter x: the pilot ran seeds 2..3 of the fresh seeds 2..7; the confirmatory seeds must be fresh: give a first_seed above 3 (or one whose range avoids the pilot's seeds)
    >>> check_plan(one(10), folder)
    []
    """
    _check_settings(plan.power, plan.cap, plan.first_seed)
    for r in plan.claims.to_dict("records"):
        n = r.get("planned_n")
        if n is not None and n is not pd.NA and not (is_int(n) and MIN_TIER <= n <= plan.cap):
            raise ValueError(f"claim {r.get('chapter')} {r.get('key')}: planned_n must be an integer in "
                             f"{MIN_TIER}..{plan.cap} (the cap), got {n!r}")
    missing = []
    for c in plan.chapters.to_dict("records"):
        chapter, params = c["chapter"], c["parameters"]
        if not isinstance(params, Mapping) or "seed" not in params:
            raise ValueError(f"chapter {chapter}: parameters must be a dict with 'seed' and the seed parameters, "
                             f"got {params!r}")
        if not is_int(params["seed"]) or params["seed"] < 0:
            raise ValueError(f"chapter {chapter}: seed must be an integer >= 0, got {params['seed']!r}")
        tiers = {k: v for k, v in params.items() if k != "seed"}
        bad = [k for k, v in tiers.items() if not is_int(v) or v < MIN_TIER]
        if not tiers or bad:
            raise ValueError(f"chapter {chapter}: each seed parameter must be an integer >= {MIN_TIER}, got "
                             f"{ {k: tiers[k] for k in bad} if bad else tiers!r}")
        if not is_int(c.get("seeds")) or c["seeds"] != max(tiers.values()):
            raise ValueError(f"chapter {chapter}: seeds must be the largest of its seed parameters {tiers!r}, "
                             f"{max(tiers.values())}, got {c.get('seeds')!r}")
        path = Path(records) / f"{chapter}.json"
        if not path.exists():
            missing.append(chapter)
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        if c.get("pilot_key") is not None and c["pilot_key"] != record.get("key"):
            raise ValueError(f"chapter {chapter}: the plan was made from an earlier build of the pilot (its record's "
                             f"key is now {record.get('key')!r}, the plan's {c['pilot_key']!r}): plan again")
        seeds = record.get("seeds") or (pilot_seeds or {}).get(chapter)
        check_fresh(chapter, pilot_seed_set(record, seeds), int(params["seed"]), max(int(v) for v in tiers.values()))
    parameters = {c["chapter"]: c["parameters"] for c in plan.chapters.to_dict("records")}
    for r in plan.claims.to_dict("records"):
        n = r.get("planned_n")
        if n is None or n is pd.NA:
            continue
        name = f"claim {r.get('chapter')} {r.get('key')}"
        if r.get("chapter") not in parameters:
            raise ValueError(f"{name}: its chapter {r.get('chapter')!r} is not among the plan's chapters "
                             f"({', '.join(map(str, parameters)) or 'none'})")
        params = parameters[r["chapter"]]
        tiers = [t for t in str(r.get("tier") or "").split(", ") if t]
        valid = sorted(k for k in params if k != "seed")
        bad = [t for t in tiers if t not in valid]
        if not tiers or bad:
            raise ValueError(f"{name}: tier must name the chapter's seed parameters ({', '.join(valid)}), "
                             f"got {r.get('tier')!r}")
        short = {t: params[t] for t in tiers if n > params[t]}
        if short:
            raise ValueError(f"{name}: planned_n {n} exceeds its tier's planned seeds {short!r}: each tier must run "
                             f"at least planned_n seeds")
    return missing


def plan(records: str | os.PathLike, *, power: float = POWER, cap: int = CAP, first_seed: int = FIRST_SEED,
         pilot_seeds: Mapping[str, Mapping[str, int]] | None = None) -> ConfirmPlan:
    """Plan a confirmatory run of every open claim of a build (module docstring).

    Parameters
    ----------
    records : path
        The folder of a build's chapter records (``book/chapters``, ``book/_smoke/chapters``):
        ``<chapter>.json`` with ``"claims"`` (:func:`fedbook.claims.claims_records`), ``"seeds"``
        (the pilot's ``seed`` and seed parameters, which ``book/build.py`` records) and
        ``"cpu_seconds"`` and ``"studies"`` (what the estimate prices: :func:`estimate_seconds`).
    power : float, default 0.8
        The chance, in (0, 1), that the run decides each claim when the true effect lies
        :math:`m` from the threshold. It is nominal: the pilot's spread is taken as the true one,
        though it is an estimate from the pilot's few seeds.
    cap : int, default 40
        The most fresh seeds one claim may get; a claim that needs more gets a reason instead.
    first_seed : int, default 10000
        The first fresh seed: the run uses ``first_seed``, ``first_seed + 1``, ...; none of them
        may be a seed the pilot ran (:func:`pilot_seed_set`: its seed parameters' range and every
        seed its studies ran, which a pilot above the fresh seeds may hold too).
    pilot_seeds : dict of str to dict, optional
        Per chapter, the pilot's ``seed`` and seed parameters, for records that do not hold them.

    Returns
    -------
    ConfirmPlan

    Raises
    ------
    ValueError
        On a ``power`` outside (0, 1), a ``cap`` below 2 or a negative ``first_seed``; when a
        pilot ran one of a chapter's fresh seeds (:func:`check_fresh`); on a folder without records.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from fedbook.claims import Claim, claims_records, evaluate
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 1.0, resolution=0.1)
    >>> rows = claims_records([evaluate(c, [0.0, 2.0, 1.0])])
    >>> studies = [{"study": "main", "cells": 3, "cached": 0, "cached_seconds": 0.0, "computed_seconds": 21.0,
    ...             "seeds": [0, 1, 2]}]  # 7 s a seed of n_seeds; the other 9 s of the 30 are fixed
    >>> record = {"cpu_seconds": 30.0, "claims": rows, "seeds": {"seed": 0, "n_seeds": 3, "n_seeds_figure": 2},
    ...           "studies": studies}
    >>> _ = (folder / "x_experiments.json").write_text(json.dumps(record))
    >>> p = plan(folder)
    >>> p.claims[["key", "pilot_n", "tier", "planned_n"]].to_dict("records")
    [{'key': 'gain', 'pilot_n': 3, 'tier': 'n_seeds', 'planned_n': 10}]
    >>> p.chapters.loc[0, "parameters"], float(p.chapters.loc[0, "estimated_seconds"])
    ({'seed': 10000, 'n_seeds': 10, 'n_seeds_figure': 2}, 79.0)
    """
    _check_settings(power, cap, first_seed)
    folder = Path(records)
    paths = sorted(folder.glob("*.json"))
    if not folder.is_dir() or not paths:
        raise ValueError(f"no chapter records in {folder} (build the pilot first: python book/build.py)")
    claim_rows, chapter_rows = [], []
    for path in paths:
        record = json.loads(path.read_text(encoding="utf-8"))
        opened = [r for r in record.get("claims") or () if r.get("kind") == "claim" and r.get("verdict") == INCONCLUSIVE]
        if not opened:
            continue
        chapter = path.stem
        seeds = dict(record.get("seeds") or (pilot_seeds or {}).get(chapter) or {})
        tiers = {k: int(v) for k, v in seeds.items() if k != "seed" and v is not None}
        rows = []
        for r in opened:
            n, reason = seeds_for(r, power, cap)
            tier = [k for k, v in tiers.items() if v == int(r["n"])]
            if n is not None and not tiers:
                n, reason = None, "the pilot's record names no seed parameters (rebuild the chapter)"
            elif n is not None and not tier:
                n, reason = None, f"its {r['n']} seeds match none of the pilot's seed parameters {tiers}"
            rows.append({"chapter": chapter, "key": r["key"], "headline": bool(r.get("headline")),
                         "pilot_verdict": r["verdict"], "pilot_n": int(r["n"]), "tier": ", ".join(tier),
                         "planned_n": n, "reason": reason})
        claim_rows += rows
        planned = [r for r in rows if r["planned_n"] is not None]
        if not planned:
            continue
        big = max(r["planned_n"] for r in planned)
        check_fresh(chapter, pilot_seed_set(record, seeds), int(first_seed), big)
        serving = {t for r in planned for t in r["tier"].split(", ")}
        params = {"seed": int(first_seed), **{t: big if t in serving else MIN_TIER for t in tiers}}
        for inner, outer in NESTED:
            if inner in params and outer in params:
                params[outer] = max(params[outer], params[inner])
        seconds = chapter_seconds(record)  # the pilot's cost, its cached cells counted (else its wall time)
        estimate = estimate_seconds(record, params)  # None for a record without its studies
        chapter_rows.append({"chapter": chapter, "seeds": big, "first_seed": int(first_seed), "parameters": params,
                             "claims": len(planned), "pilot_seconds": seconds, "estimated_seconds": estimate,
                             "pilot_key": record.get("key")})
    claims = pd.DataFrame(claim_rows, columns=list(CLAIM_COLUMNS))
    claims["planned_n"] = claims["planned_n"].astype("Int64")
    return ConfirmPlan(claims, pd.DataFrame(chapter_rows, columns=list(CHAPTER_COLUMNS)), float(power), int(cap),
                       int(first_seed))

def chapter_seconds(record: Mapping[str, Any]) -> float | None:
    """What a chapter's execution costs as if every study cell were computed: its CPU seconds in
    this execution (``cpu_seconds``: the kernel's and its workers') plus what the cells the study
    cache served took when they were computed (each study's ``cached_seconds`` in the record's
    ``"studies"``: a cell's wall seconds when it ran on one torch thread, about its CPU). A record
    without ``cpu_seconds``, or whose CPU escapes the count (``cpu_escapes``: the Flower appendix,
    whose ClientApp processes nobody waits for), gives its wall ``seconds`` instead (the larger of
    the two, then: wall time also counts waiting); ``None`` without either.

    Examples
    --------
    >>> chapter_seconds({"seconds": 9.0, "cpu_seconds": 5.0, "studies": [{"cached_seconds": 30.0}]})
    35.0
    >>> chapter_seconds({"seconds": 9.0}), chapter_seconds({})
    (9.0, None)
    >>> chapter_seconds({"seconds": 9.0, "cpu_seconds": 2.0, "cpu_escapes": "Flower's ClientApps"})
    9.0
    """
    seconds = record.get("cpu_seconds", record.get("seconds"))
    if record.get("cpu_escapes") and record.get("seconds") is not None:
        seconds = max(float(record["seconds"]), float(seconds))
    if seconds is None:
        return None
    return float(seconds) + sum(float(s.get("cached_seconds") or 0.0) for s in record.get("studies") or ())


def estimate_parts(record: Mapping[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any] | None:
    r"""A chapter's run at ``parameters`` priced from its pilot's record: one cost model for the
    confirmatory plan (:func:`plan`), the build's printed plan and the book's page on what deciding
    every open claim costs.

    Each study run of the record's ``"studies"`` (``book/build.py`` records them) costs, per seed,
    its cells' seconds (``cached_seconds + computed_seconds``) over its seeds; it belongs to the seed
    parameter (tier) whose pilot value (the record's ``"seeds"``) equals its number of seeds. A
    study whose seeds match several tiers, or none, goes to the tier planned largest in
    ``parameters`` (the dearer guess; counted in ``unmatched``). The chapter's fixed part is its cost
    (:func:`chapter_seconds`) less its studies', at least 0, and

    .. math:: \text{seconds} = \text{fixed} + \sum_{\text{studies}} \text{per seed} \times \text{parameters}[\text{tier}].

    The pilot's per-seed costs were measured with what one process shares (MPT's table cells reuse
    its figure's runs, COSMOS's pretrained weights are memoised), which a run spread over worker
    processes or Ray loses: the estimate of such a run is then low.

    Parameters
    ----------
    record : dict
        A chapter's record: ``"studies"``, ``"seeds"`` and ``cpu_seconds`` (or ``seconds``).
    parameters : dict
        The planned seed parameters (a :class:`ConfirmPlan`'s ``parameters``); a tier missing from
        it keeps its pilot value.

    Returns
    -------
    dict or None
        ``seconds`` (the estimate), ``fixed``, ``per_seed`` (seconds one seed of every tier adds),
        ``cells`` (the study cells the run would compute), ``cell_seconds`` (their mean seconds),
        ``unmatched`` (study runs assigned by the dearer guess), ``cached`` and ``pilot_cells`` (the
        pilot's cells the cache served, of all); ``None`` for a record without ``"studies"``,
        seed parameters or seconds (rebuild the chapter).

    Examples
    --------
    >>> record = {"cpu_seconds": 20.0, "seeds": {"seed": 0, "n_seeds": 3, "n_seeds_figure": 2},
    ...           "studies": [{"study": "main", "cells": 6, "cached": 6, "cached_seconds": 30.0,
    ...                        "computed_seconds": 0.0, "seeds": [0, 1, 2]},
    ...                       {"study": "figure", "cells": 2, "cached": 0, "cached_seconds": 0.0,
    ...                        "computed_seconds": 8.0, "seeds": [0, 1]}]}
    >>> # cost 20 + 30 = 50 s; main 10 s a seed (n_seeds), figure 4 s a seed (n_seeds_figure); fixed 50 - 38 = 12 s
    >>> parts = estimate_parts(record, {"seed": 1000, "n_seeds": 10, "n_seeds_figure": 2})
    >>> parts["seconds"], parts["fixed"], parts["cells"], parts["unmatched"]
    (120.0, 12.0, 22.0, 0)
    >>> estimate_parts({"seconds": 9.0}, {"n_seeds": 4}) is None
    True
    """
    studies = record.get("studies")
    tiers = {k: int(v) for k, v in (record.get("seeds") or {}).items() if k != "seed" and v is not None}
    total = chapter_seconds(record)
    if not studies or not tiers or total is None:
        return None
    planned = {t: int(parameters.get(t, v) if parameters.get(t) is not None else v) for t, v in tiers.items()}
    fixed, seconds, cells, per_seed, unmatched = total, 0.0, 0.0, 0.0, 0
    for s in studies:
        n = len(s.get("seeds") or ())
        cost = float(s.get("cached_seconds") or 0.0) + float(s.get("computed_seconds") or 0.0)
        fixed -= cost
        if not n:
            continue
        match = [t for t, v in tiers.items() if v == n]
        unmatched += len(match) != 1
        tier = match[0] if len(match) == 1 else max(match or tiers, key=lambda t: planned[t])
        seconds += cost / n * planned[tier]
        cells += int(s.get("cells", 0)) / n * planned[tier]
        per_seed += cost / n
    fixed = max(0.0, fixed)
    return {"seconds": round(fixed + seconds, 2), "fixed": round(fixed, 2), "per_seed": round(per_seed, 2),
            "cells": round(cells, 2), "cell_seconds": seconds / cells if cells else 0.0, "unmatched": unmatched,
            "cached": sum(int(s.get("cached", 0)) for s in studies),
            "pilot_cells": sum(int(s.get("cells", 0)) for s in studies)}


def estimate_seconds(record: Mapping[str, Any], parameters: Mapping[str, Any]) -> float | None:
    """The seconds a chapter's run at ``parameters`` would take, from its pilot's record
    (:func:`estimate_parts`: the fixed part plus each study's seconds per seed times its tier's
    planned seeds); ``None`` for a record without ``"studies"`` (rebuild the chapter).

    Examples
    --------
    >>> record = {"cpu_seconds": 4.0, "seeds": {"seed": 0, "n_seeds": 2},
    ...           "studies": [{"study": "main", "cells": 2, "cached": 0, "cached_seconds": 0.0,
    ...                        "computed_seconds": 3.0, "seeds": [0, 1]}]}
    >>> estimate_seconds(record, {"seed": 1000, "n_seeds": 10})  # 1 s fixed + 1.5 s a seed x 10
    16.0
    """
    parts = estimate_parts(record, parameters)
    return None if parts is None else parts["seconds"]
