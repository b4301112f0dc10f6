r"""The page *What deciding every open claim would cost* (``notebooks/deciding_cost.py``): a reader
of the build's own chapter records, with no measurement of its own.

- :func:`confirm_costs`: per experiments chapter, the open claims, what a confirmatory plan
  (:func:`fedbook.confirm.plan`) decides of them and its fresh seeds, priced by the one cost model
  of the confirmatory runs (:func:`fedbook.confirm.estimate_parts`: a fixed part plus each study's
  seconds per seed times its tier's planned seeds), in CPU-hours and in wall time on 2, 16 and 64
  cores (:func:`wall_seconds`, an estimate; low for a run spread over processes or Ray, which
  loses what the pilot's one process shared: MPT's table cells reuse its figure's runs, COSMOS's
  pre-trained weights are memoised);
- :func:`decided_cost`: the build's CPU per decided claim, each chapter counted as if every study
  cell were computed (:func:`fedbook.confirm.chapter_seconds`), so a warm study cache does not
  make the build look cheap;
- :func:`spent_by_chapter`: where those seconds went, chapter by chapter, and which chapters
  decided claims (:func:`spent_numbers`: the split the page quotes);
- :func:`cost_numbers`: the numbers the page's prose reads.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedbook.claims import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE
from fedbook.confirm import chapter_seconds, estimate_parts

CORES = (2, 16, 64)
"""The machines the cost table sizes a confirmatory run for: a laptop, a workstation, a small cluster."""


def wall_seconds(fixed: float, cells: float, cell_seconds: float, cores: int) -> float:
    r"""An estimate of the wall time of a run on ``cores`` cores: its fixed part on one core, then
    its ``cells`` independent study cells spread over the cores in waves, each at the mean
    ``cell_seconds`` (a Ray instance's start-up left out). An estimate, not a bound: a wave lasts
    as long as its slowest cell, which may take longer than the mean. No cell: the fixed part.

    .. math:: \text{wall} \approx \text{fixed} + \left\lceil \frac{\text{cells}}{\text{cores}} \right\rceil
              \times \text{cell seconds}

    >>> wall_seconds(100.0, 30, 20.0, cores=16)  # 30 cells of 20 s: two waves
    140.0
    >>> wall_seconds(100.0, 0, 0.0, cores=16)
    100.0
    """
    return float(fixed + math.ceil(round(cells, 6) / cores) * cell_seconds)


def _records(records: str | os.PathLike) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(records).glob("*.json"))}


def confirm_costs(records: str | os.PathLike, planned_claims: pd.DataFrame, planned_chapters: pd.DataFrame,
                  cores: Sequence[int] = CORES) -> tuple[pd.DataFrame, list[str]]:
    """What deciding every open claim would cost, per chapter with an open claim: its open claims,
    how many a confirmatory plan can decide (a planned number of seeds), the fresh seeds it plans,
    the seconds one seed of every study adds and the fixed seconds (:func:`fedbook.confirm.estimate_parts`
    on the chapter's record in ``records`` at the plan's parameters), the CPU-hours of the planned
    run and its wall minutes on each number of ``cores`` (:func:`wall_seconds`); a last row,
    *all*, sums them (its walls: the chapters one after another, each on every core).

    ``planned_claims`` and ``planned_chapters``: a :class:`fedbook.confirm.ConfirmPlan`'s ``claims``
    (``chapter``, ``pilot_verdict``, ``planned_n``) and ``chapters`` (``chapter``, ``seeds``,
    ``parameters``). A chapter with no seeds planned costs nothing.

    Returns
    -------
    (DataFrame, list of str)
        The table, and the chapters with planned seeds whose record cannot price them (no
        ``"studies"``: recorded before the build kept them), left out of the table.

    Examples
    --------
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> record = {"cpu_seconds": 100.0, "seeds": {"seed": 0, "n_seeds": 5}, "studies": [
    ...     {"study": "main", "cells": 10, "cached": 10, "cached_seconds": 600.0, "computed_seconds": 0.0,
    ...      "seeds": [0, 1, 2, 3, 4]}]}  # 100 s fixed, 120 s a seed in 2 cells of 60 s
    >>> _ = (root / "x.json").write_text(json.dumps(record))
    >>> claims = pd.DataFrame({"chapter": ["x", "x"], "pilot_verdict": [INCONCLUSIVE] * 2,
    ...                        "planned_n": pd.array([20, None], dtype="Int64")})
    >>> chapters = pd.DataFrame({"chapter": ["x"], "seeds": [20], "parameters": [{"seed": 1000, "n_seeds": 20}]})
    >>> table, left_out = confirm_costs(root, claims, chapters, cores=(2, 16))
    >>> table[["chapter", "open claims", "planned", "fresh seeds"]].to_dict("records")[0], left_out
    ({'chapter': 'x', 'open claims': 2, 'planned': 1, 'fresh seeds': 20}, [])
    >>> # 100 + 120 * 20 = 2500 s; on 16 cores: 100 s, then 40 cells of 60 s in ceil(40 / 16) = 3 waves
    >>> round(float(table.loc[0, "CPU-hours"]) * 3600, 6), round(float(table.loc[0, "wall, 16 cores (min)"]) * 60, 6)
    (2500.0, 280.0)
    >>> table["chapter"].tolist()
    ['x', 'all']
    """
    recs = _records(records)
    if "pilot_verdict" in planned_claims:  # the open claims: inconclusive at the pilot's scale
        planned_claims = planned_claims[planned_claims["pilot_verdict"] == INCONCLUSIVE]
    rows, left_out = [], []
    for chapter in dict.fromkeys(planned_claims["chapter"]):
        mine = planned_claims[planned_claims["chapter"] == chapter]
        plan = planned_chapters[planned_chapters["chapter"] == chapter]
        seeds = int(plan["seeds"].sum()) if len(plan) else 0
        row = {"chapter": chapter, "open claims": len(mine), "planned": int(mine["planned_n"].notna().sum()),
               "fresh seeds": seeds, "per seed (s)": float("nan"), "fixed (s)": float("nan"), "CPU-hours": 0.0,
               **{f"wall, {n} cores (min)": 0.0 for n in cores}}
        if seeds:
            parts = estimate_parts(recs.get(chapter, {}), plan["parameters"].iloc[0])
            if parts is None:
                left_out.append(chapter)
                continue
            row.update({"per seed (s)": parts["per_seed"], "fixed (s)": parts["fixed"],
                        "CPU-hours": parts["seconds"] / 3600})
            for n in cores:
                row[f"wall, {n} cores (min)"] = wall_seconds(parts["fixed"], parts["cells"], parts["cell_seconds"], n) / 60
        rows.append(row)
    columns = ["chapter", "open claims", "planned", "fresh seeds", "per seed (s)", "fixed (s)", "CPU-hours",
               *(f"wall, {n} cores (min)" for n in cores)]
    table = pd.DataFrame(rows, columns=columns)
    if len(table):
        total = {col: table[col].sum() for col in table.columns if col not in ("chapter", "per seed (s)", "fixed (s)")}
        table = pd.concat([table, pd.DataFrame([{"chapter": "all", **total}])], ignore_index=True)
    return table, left_out


def _some(n: int, one: str, many: str) -> str:
    """``n`` and the word in the number it takes: ``_some(1, "record", "records") == "1 record"``."""
    return f"{n} {one if n == 1 else many}"


def _claims(record: Mapping[str, Any]) -> tuple[int, int]:
    """A chapter record's claims (kind ``"claim"``, not the controls) and how many it decided
    (holds or does not hold)."""
    claims = [c for c in record.get("claims") or () if c.get("kind") == "claim"]
    return len(claims), sum(1 for c in claims if c.get("verdict") in (HOLDS, DOES_NOT_HOLD))


def _counted(records: str | os.PathLike, exclude: Sequence[str]):
    """Each chapter record in ``records`` but ``exclude`` that has a cost, with that cost in seconds
    (:func:`fedbook.confirm.chapter_seconds`) and whether it is wall time (the record has no CPU
    seconds, or its CPU escapes the count): ``(name, record, seconds, wall)``."""
    for name, record in _records(records).items():
        seconds = chapter_seconds(record)
        if name not in exclude and seconds is not None:
            yield name, record, seconds, "cpu_seconds" not in record or bool(record.get("cpu_escapes"))


def decided_cost(records: str | os.PathLike, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """The CPU of a build's chapter execution per decided claim: every chapter record in
    ``records`` but ``exclude``, each at its cost as if every study cell were computed
    (:func:`fedbook.confirm.chapter_seconds`: its CPU seconds plus its cached cells' seconds), over
    the claims decided (kind ``"claim"``, verdict holds or does not hold). Also counted: the
    records without CPU seconds or whose CPU escapes the count (their wall ``seconds`` used,
    ``wall``), those without studies
    (their cached cells unknown, ``no_studies``: every chapter that runs no study has none), and the
    study cells the cache served of all the records' cells.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> claims = [{"kind": "claim", "verdict": "holds"}, {"kind": "claim", "verdict": "does not hold"},
    ...           {"kind": "control", "verdict": "holds"}, {"kind": "claim", "verdict": "inconclusive at this scale"}]
    >>> studies = [{"study": "main", "cells": 4, "cached": 3, "cached_seconds": 90.0, "computed_seconds": 20.0}]
    >>> _ = (root / "a.json").write_text(json.dumps({"seconds": 70.0, "cpu_seconds": 60.0, "claims": claims,
    ...                                               "studies": studies}))
    >>> _ = (root / "b.json").write_text(json.dumps({"seconds": 90.0}))
    >>> _ = (root / "me.json").write_text(json.dumps({"seconds": 5.0}))
    >>> decided_cost(root, exclude=["me"])  # (60 + 90 + 90) s / 60 / 2 claims
    {'seconds': 240.0, 'decided': 2, 'chapters': 2, 'wall': 1, 'no_studies': 1, 'cached': 3, 'cells': 4, 'minutes_per_claim': 2.0}
    """
    out = {"seconds": 0.0, "decided": 0, "chapters": 0, "wall": 0, "no_studies": 0, "cached": 0, "cells": 0}
    for _, record, seconds, wall in _counted(records, exclude):
        out["seconds"] += seconds
        out["chapters"] += 1
        out["wall"] += wall
        out["no_studies"] += "studies" not in record
        for s in record.get("studies") or ():
            out["cached"] += int(s.get("cached", 0))
            out["cells"] += int(s.get("cells", 0))
        out["decided"] += _claims(record)[1]
    out["minutes_per_claim"] = out["seconds"] / 60 / out["decided"] if out["decided"] else float("nan")
    return out


def spent_by_chapter(records: str | os.PathLike, exclude: Sequence[str] = ()) -> pd.DataFrame:
    """Where :func:`decided_cost`'s seconds went: per chapter record in ``records`` but ``exclude``,
    its minutes as :func:`decided_cost` counts them (:func:`fedbook.confirm.chapter_seconds`),
    whether they are CPU or wall (a record whose CPU escapes the count, or from before the build
    kept it), its share of the total, its claims (not its controls), the claims it decided and its
    minutes per decided claim (empty when it decided none); the most expensive first, a last row
    *all*.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> decided = [{"kind": "claim", "verdict": "holds"}, {"kind": "claim", "verdict": "does not hold"}]
    >>> _ = (root / "a.json").write_text(json.dumps({"seconds": 70.0, "cpu_seconds": 60.0, "claims": decided}))
    >>> _ = (root / "b.json").write_text(json.dumps({"seconds": 180.0}))
    >>> table = spent_by_chapter(root)
    >>> table[["chapter", "minutes", "counted", "share (%)", "claims", "decided"]].to_dict("records")
    ... # doctest: +NORMALIZE_WHITESPACE
    [{'chapter': 'b', 'minutes': 3.0, 'counted': 'wall', 'share (%)': 75.0, 'claims': 0, 'decided': 0},
     {'chapter': 'a', 'minutes': 1.0, 'counted': 'CPU', 'share (%)': 25.0, 'claims': 2, 'decided': 2},
     {'chapter': 'all', 'minutes': 4.0, 'counted': '', 'share (%)': 100.0, 'claims': 2, 'decided': 2}]
    >>> table["minutes per decided claim"].tolist()[1:]  # b decided none: no number
    [0.5, 2.0]
    """
    rows = [{"chapter": name, "minutes": seconds / 60, "counted": "wall" if wall else "CPU",
             **dict(zip(("claims", "decided"), _claims(record)))}
            for name, record, seconds, wall in _counted(records, exclude)]
    columns = ["chapter", "minutes", "counted", "share (%)", "claims", "decided", "minutes per decided claim"]
    table = pd.DataFrame(rows, columns=["chapter", "minutes", "counted", "claims", "decided"])
    total = {"chapter": "all", "minutes": table["minutes"].sum(), "counted": "", "claims": int(table["claims"].sum()),
             "decided": int(table["decided"].sum())}
    table = table.sort_values("minutes", ascending=False, kind="stable")
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    table["share (%)"] = 100 * table["minutes"] / total["minutes"] if total["minutes"] else float("nan")
    table["minutes per decided claim"] = [m / d if d else float("nan") for m, d in zip(table["minutes"], table["decided"])]
    return table[columns]


def spent_numbers(table: pd.DataFrame) -> dict[str, Any]:
    """The numbers the page reads from :func:`spent_by_chapter`'s ``table``, its chapters in three
    groups: those that decided a claim (their count, minutes and minutes per decided claim), those
    with claims but none decided (all open or untestable: a sentence with their count, names and
    minutes, ``cost_undecided``) and those without claims (count, names, minutes).

    >>> table = pd.DataFrame({"chapter": ["b", "c", "a", "all"], "minutes": [3.0, 0.5, 1.0, 4.5],
    ...                       "claims": [0, 4, 2, 6], "decided": [0, 0, 2, 2]})
    >>> R = spent_numbers(table)
    >>> R["cost_deciding_chapters"], R["cost_deciding_minutes_measured"], R["cost_deciding_per_claim_measured"]
    (1, 1.0, 0.5)
    >>> R["cost_undecided"]
    '; the 1 chapter with claims of which it decided none (c) spent 0.5 minutes'
    >>> R["cost_other_chapters"], R["cost_other_names"], R["cost_other_minutes_measured"]
    (1, 'b', 3.0)
    """
    rows = table[table["chapter"] != "all"]
    deciding = rows[rows["decided"] > 0]
    undecided, other = rows[(rows["decided"] == 0) & (rows["claims"] > 0)], rows[rows["claims"] == 0]
    claims = int(deciding["decided"].sum())
    return {"cost_deciding_chapters": len(deciding), "cost_deciding_minutes_measured": float(deciding["minutes"].sum()),
            "cost_deciding_per_claim_measured": float(deciding["minutes"].sum()) / claims if claims else float("nan"),
            "cost_undecided": "" if not len(undecided) else
            f"; the {_some(len(undecided), 'chapter with claims of which it', 'chapters with claims of which they')} "
            f"decided none ({', '.join(undecided['chapter'])}) spent {undecided['minutes'].sum():.1f} minutes",
            "cost_other_chapters": len(other), "cost_other_names": ", ".join(other["chapter"]) or "none",
            "cost_other_minutes_measured": float(other["minutes"].sum())}


def _duration(seconds: float) -> str:
    """A wall or CPU time as the page says it: minutes below two hours, else hours.

    >>> _duration(95.0), _duration(4 * 3600.0)
    ('1.6 minutes', '4.0 hours')
    """
    return f"{seconds / 60:.1f} minutes" if seconds < 7200 else f"{seconds / 3600:.1f} hours"


def cost_numbers(table: pd.DataFrame, planned_claims: pd.DataFrame, decided: Mapping[str, Any],
                 left_out: Sequence[str], *, power: float, cap: int, cores: Sequence[int] = CORES,
                 no_plan: str = "") -> dict[str, Any]:
    """The numbers the page reads (``cost_`` keys; a measurement's key says ``measured``): the totals
    of :func:`confirm_costs`' ``table`` (its row *all*), why the plan leaves open claims out (the
    ``reason`` of ``planned_claims``' open rows without ``planned_n``, each with its count, in the
    table's chapters), the plan's ``power`` and ``cap``, the chapters ``left_out`` (their records
    cannot price them: not in the table), the
    build's CPU per decided claim (:func:`decided_cost`), and ``no_plan``: why no plan could be
    made (``""`` when one was).

    >>> table = pd.DataFrame([{"chapter": "x", "open claims": 2, "planned": 1, "fresh seeds": 20, "CPU-hours": 0.5,
    ...                        "wall, 2 cores (min)": 15.0}, {"chapter": "all", "open claims": 2, "planned": 1,
    ...                        "fresh seeds": 20, "CPU-hours": 0.5, "wall, 2 cores (min)": 15.0}])
    >>> claims = pd.DataFrame({"chapter": ["x", "x"], "planned_n": pd.array([20, None], dtype="Int64"),
    ...                        "reason": ["", "more than the cap of 40 seeds"]})
    >>> decided = {"seconds": 600.0, "decided": 4, "chapters": 3, "wall": 0, "no_studies": 1, "cached": 5, "cells": 8,
    ...            "minutes_per_claim": 2.5}
    >>> R = cost_numbers(table, claims, decided, [], power=0.8, cap=40, cores=(2,))
    >>> R["cost_unplanned"], R["cost_reasons"], R["cost_wall_2_measured"], R["cost_cached"]
    (1, '1: more than the cap of 40 seeds', '15.0 minutes', 'the study cache served 5 of their 8 study cells')
    """
    claims = planned_claims[~planned_claims["chapter"].isin(left_out)]  # the claims of the table's chapters
    if "pilot_verdict" in claims:
        claims = claims[claims["pilot_verdict"] == INCONCLUSIVE]
    counts = claims.loc[claims["planned_n"].isna(), "reason"].value_counts() if len(claims) else pd.Series(dtype=int)
    total = table.set_index("chapter").loc["all"] if len(table) else pd.Series(dtype=float)
    get = lambda col: float(total.get(col, 0.0))  # noqa: E731  (an empty table: nothing planned)
    out = {"cost_open": int(get("open claims")), "cost_planned": int(get("planned")),
           "cost_unplanned": int(get("open claims") - get("planned")), "cost_seeds": int(get("fresh seeds")),
           "cost_reasons": "; ".join(f"{n}: {reason}" for reason, n in counts.iloc[:4].items())
           + (f"; and {int(counts.iloc[4:].sum())} for {len(counts) - 4} other reasons" if len(counts) > 4 else "")
           or "none",
           "cost_power": f"{power * 100:.0f} %", "cost_cap": int(cap),
           "cost_cpu_hours_measured": get("CPU-hours"),
           "cost_cores": ", ".join(str(n) for n in cores[:-1]) + (" and " if len(cores) > 1 else "") + str(cores[-1]),
           "cost_left_out": "" if not left_out else
           f" ({', '.join(left_out)} left out: a record from before the build kept its studies, so nothing prices its seeds)",
           "cost_no_plan": "" if not no_plan else f" No plan could be made from this build's records: {no_plan}.",
           "cost_decided": int(decided["decided"]), "cost_chapters": int(decided["chapters"]),
           "cost_cpu_minutes_measured": decided["seconds"] / 60,
           "cost_cached": f"the study cache served {decided['cached']} of their {decided['cells']} study cells",
           "cost_no_studies": _some(int(decided["no_studies"]), "record keeps", "records keep"),
           "cost_wall": "" if not decided.get("wall") else
           f"; {_some(int(decided['wall']), 'record', 'records')} without a whole CPU count (from before the build "
           f"kept CPU time, or the Flower appendix, whose ClientApp processes no process waits for) "
           f"{'counts its' if decided['wall'] == 1 else 'count their'} wall seconds instead",
           "cost_minutes_measured": decided["minutes_per_claim"]}
    for n in cores:
        out[f"cost_wall_{n}_measured"] = _duration(get(f"wall, {n} cores (min)") * 60)
    return out


__all__ = ["CORES", "confirm_costs", "cost_numbers", "decided_cost", "spent_by_chapter", "spent_numbers", "wall_seconds"]
