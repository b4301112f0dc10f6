"""The book's catalog: the build's records and the book's own index, what the findings and teaching pages read.

``book/build.py`` executes every chapter and writes a **record** beside it
(``<out>/chapters/<name>.json``): its cache key, its parameters, the seconds it took and, for a
chapter with a claims table, the rows that :func:`fedbook.page.claims_report` glued under
:data:`fedbook.page.CLAIMS_RECORDS`. The book's **index** is its table of contents (``book/_toc.yml``:
:func:`toc_chapters`) and the chapters' jupytext sources (their titles, :func:`chapter_title`, and
their exercises, :func:`exercises`).

Two pages read them and train nothing of their own (bar the teaching page's small demonstration):

- the findings page: what each paper's chapter found, in a few sentences (:func:`paper_summaries`),
  and every claim of every chapter (:func:`read_findings`), counted per paper
  (:func:`findings_counts`), as one filterable table (:func:`findings_html`, quotations shortened
  by :func:`short_quote`);
- the findings page's confirmatory runs (``book/build.py --confirm``, :mod:`fedbook.confirm`): per
  planned claim the pilot's verdict, the confirmatory one and which stands (:func:`read_confirmations`,
  :func:`confirmations_html`; the table of every claim marks the rows where a confirmatory verdict
  stands: :func:`with_confirmations`, :func:`confirm_note`), or the plan a build's records give
  (:func:`plan_summary`, :func:`confirm_numbers`);
- the teaching page: each chapter's execution time at the smoke and book profiles
  (:func:`record_seconds`, :func:`chapter_times`) and every chapter's exercises
  (:func:`exercise_index`).

This module sits above :mod:`fedbook.page` (whose claims report glues the records' rows) and
reads only files: nothing here executes a chapter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import nbformat
import pandas as pd
import yaml

from fedbook.claims import (DOES_NOT_HOLD, EFFECT_SHARE, HOLDS, INCONCLUSIVE, OPPOSITE, RESOLUTION_SHARE, SMALLER,
                            UNTESTABLE, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING, VERDICT_COLOURS, VERDICTS,
                            summary_html, table_anchor, verdict_colour)
from fedbook import confirm as confirmatory
from fedbook.page import show_table
from fedbook.tables import Html
from fedlib.io import atomic_write_bytes
from fedlib.validation import is_int

EXERCISE_KINDS = ("parameters only", "code")
"""What an exercise asks of a student, marked ``*(parameters only)*`` or ``*(code)*`` in its statement:
re-running the chapter with other ``-p`` values, or changing code."""

_EXERCISE = re.compile(r"^(?:### Exercise (\d+)[:.]?\s*|(\d+)\.\s+)(.*)$")
_EXERCISE_TITLE = re.compile(r"\*\*(.+?)\*\*")
_EXERCISE_KIND = re.compile(r"\*\((" + "|".join(map(re.escape, EXERCISE_KINDS)) + r")\)\*")


def _markdown_lines(source: str) -> list[str | None]:
    """The markdown text of a jupytext percent file, line by line (``None`` where code stands)."""
    lines, markdown = [], False
    for line in source.splitlines():
        if line.startswith("# %%"):
            markdown = "[markdown]" in line
            lines.append(None)
        elif markdown:
            lines.append(line[2:] if line.startswith("# ") else line[1:] if line.startswith("#") else line)
        else:
            lines.append(None)
    return lines


def chapter_title(path: str | os.PathLike) -> str:
    r"""The first heading of a chapter's jupytext source (``# Title``), without the ``#``.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "c.py"
    >>> _ = f.write_text("# %% [markdown]\n# (label)=\n# # A chapter\n")
    >>> chapter_title(f)
    'A chapter'
    """
    for line in _markdown_lines(open(path, encoding="utf-8").read()):
        if line is not None and line.startswith("# "):
            return line[2:].strip()
    raise ValueError(f"{path} has no '# Title' heading in a markdown cell")


def exercises(path: str | os.PathLike) -> pd.DataFrame:
    r"""The exercises of a chapter's jupytext source: the ``### Exercise N: title`` headings (or
    the numbered items ``N. **title**``) of its ``## Exercises`` section, with their title and kind
    (:data:`EXERCISE_KINDS`, marked in the statement; ``None`` where unmarked).

    Returns
    -------
    DataFrame
        Columns ``exercise`` (its number), ``title``, ``kind``; no row for a chapter without exercises.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "c.py"
    >>> _ = f.write_text("# %% [markdown]\n# ## Exercises\n#\n# 1. **More seeds.** *(parameters only)* Re-run.\n"
    ...                  "#\n# :::{dropdown} Hint\n# 2. not an exercise\n# :::\n# 2. **A new head** *(code)* Write.\n")
    >>> exercises(f).values.tolist()
    [[1, 'More seeds.', 'parameters only'], [2, 'A new head', 'code']]
    """
    rows, inside, fence = [], False, 0
    for line in _markdown_lines(open(path, encoding="utf-8").read()):
        if line is None:
            continue
        if line.startswith("## "):
            inside = line[3:].strip().lower() == "exercises"
            continue
        if not inside:
            continue
        stripped = line.strip()
        if stripped.startswith(":::"):  # a dropdown (hint, solution) opens (":::{...}") or closes (":::")
            fence = fence + 1 if stripped.lstrip(":").startswith("{") else max(fence - 1, 0)
            continue
        match = _EXERCISE.match(line) if fence == 0 else None
        if match:
            number, text = int(match.group(1) or match.group(2)), match.group(3)
            title, kind = _EXERCISE_TITLE.search(text), _EXERCISE_KIND.search(text)
            heading = match.group(1) is not None
            rows.append({"exercise": number, "title": text.strip() if heading else title.group(1) if title else text,
                         "kind": kind.group(1) if kind else None})
        elif rows and fence == 0 and stripped and rows[-1]["kind"] is None:
            kind = _EXERCISE_KIND.search(line)
            rows[-1]["kind"] = kind.group(1) if kind else None
    table = pd.DataFrame(rows, columns=["exercise", "title", "kind"], dtype=object)  # None stays None
    return table.astype({"exercise": int})


def toc_chapters(toc: str | os.PathLike) -> list[tuple[str, list[str]]]:
    r"""The executed chapters of each part of the book's table of contents (``book/_toc.yml``): per
    part, its caption and the names of its entries under ``chapters/``, in the book's order (a
    part without one has an empty list).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "_toc.yml"
    >>> _ = f.write_text("parts:\n  - caption: Basics\n    chapters:\n      - file: intro\n"
    ...                  "      - file: chapters/setting\n  - caption: End\n    chapters:\n      - file: api\n")
    >>> toc_chapters(f)
    [('Basics', ['setting']), ('End', [])]
    """
    parts = yaml.safe_load(Path(toc).read_text(encoding="utf-8"))["parts"]
    return [(part["caption"], [c["file"].split("/", 1)[1] for c in part["chapters"] if c["file"].startswith("chapters/")])
            for part in parts]


def record_seconds(folder: str | os.PathLike | None, name: str) -> float | None:
    r"""The execution seconds that a build's record gives for a chapter (``<folder>/<name>.json``,
    written by ``book/build.py``); ``None`` where the folder (``None``: that profile was not
    built) or the record does not exist.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "setting.json").write_text('{"key": "abc", "params": {}, "seconds": 12.5}')
    >>> record_seconds(folder, "setting"), record_seconds(folder, "flower"), record_seconds(None, "setting")
    (12.5, None, None)
    """
    path = Path(folder) / f"{name}.json" if folder is not None else None
    return json.loads(path.read_text())["seconds"] if path is not None and path.exists() else None


def chapter_times(notebooks: str | os.PathLike, parts: Sequence[tuple[str, Sequence[str]]],
                  records: Mapping[str, str | os.PathLike], *, leave_out: Iterable[str] = ()) -> pd.DataFrame:
    """How long each chapter took to execute in the build's records: one row per chapter of
    ``parts`` (:func:`toc_chapters`) but those in ``leave_out``, with its part, its title (from
    ``<notebooks>/<name>.py``), its seconds at the smoke profile and its minutes at the book
    profile (:func:`record_seconds` in ``records[profile]``; missing where that build has no
    record).

    Returns
    -------
    DataFrame
        Columns ``part``, ``chapter``, ``smoke (s)``, ``book (min)``.
    """
    leave_out = set(leave_out)
    rows = [{"part": part, "chapter": chapter_title(Path(notebooks) / f"{name}.py"),
             "smoke (s)": record_seconds(records.get("smoke"), name),
             "book (min)": (record_seconds(records.get("book"), name) or float("nan")) / 60}
            for part, names in parts for name in names if name not in leave_out]
    return pd.DataFrame(rows, columns=["part", "chapter", "smoke (s)", "book (min)"])


def exercise_index(notebooks: str | os.PathLike, parts: Sequence[tuple[str, Sequence[str]]]) -> pd.DataFrame:
    """The exercises of every chapter of ``parts`` (:func:`toc_chapters`), in the book's order:
    :func:`exercises` of ``<notebooks>/<name>.py`` under the chapter's title, an unmarked
    exercise's kind as ``"not marked"``.

    Returns
    -------
    DataFrame
        Columns ``chapter``, ``exercise``, ``title``, ``needs`` (one of :data:`EXERCISE_KINDS`
        or ``"not marked"``).
    """
    rows = [{"chapter": chapter_title(Path(notebooks) / f"{name}.py"), "exercise": row.exercise, "title": row.title,
             "needs": row.kind or "not marked"}
            for _, names in parts for name in names
            for row in exercises(Path(notebooks) / f"{name}.py").itertuples(index=False)]
    return pd.DataFrame(rows, columns=["chapter", "exercise", "title", "needs"])


FINDINGS_COLUMNS = ("paper", "chapter", "key", "kind", "headline", "quote", "source", "quantity", "verdict",
                    "shortfall", "verdict text", "interval", "n", "unit", "seeds to decide", "anchor", "about")
"""The columns of :func:`read_findings`: the part of the table of contents (the paper), the
chapter, and the fields of each claim's record (:func:`fedbook.claims.claims_records`), ``interval``
being the table's ``ours`` without its trailing count of seeds, ``shortfall`` the kind of a "does
not hold" ("" otherwise), ``verdict text`` the verdict as the chapter's table shows it and ``about``
what the claim is about (:data:`fedbook.claims.ABOUTS`; "method" in a record that predates it)."""

SHORTFALL_COLUMNS = {SMALLER: "of which smaller", OPPOSITE: "of which opposite"}
"""The columns of :func:`findings_counts` that split "does not hold" by its kind."""


def short_quote(text: str, words: int = 12) -> str:
    """A quotation's short form for a list: its first sentence if that has at most ``words`` words,
    else its first ``words`` words and an ellipsis (the whole quotation stays in the chapter's table).

    Examples
    --------
    >>> short_quote("X beats Y. It also beats Z on every split.")
    'X beats Y.'
    >>> short_quote("one two three four five", words=3)
    'one two three …'
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"short_quote takes a non-empty text, got {text!r}")
    if not is_int(words) or words < 1:
        raise ValueError(f"words must be a positive integer, got {words!r}")
    first = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)[0]
    if len(first.split()) <= words:
        return first
    return " ".join(text.split()[:words]).rstrip(",;:") + " \N{HORIZONTAL ELLIPSIS}"


def _interval_only(ours: str, n: int, unit: str) -> str:
    """``"+1.20 [+0.30, +2.10], 5 seeds"`` -> ``"+1.20 [+0.30, +2.10]"`` (the seeds have their own column)."""
    tail = f", {n} "
    return ours[: ours.rindex(tail)] if tail in ours else ours


def read_findings(folder: str | os.PathLike, parts: Sequence[tuple[str, Sequence[str]]]) -> tuple[pd.DataFrame, list[str]]:
    """Every claim of every chapter, from the build's records: one row per row of each chapter's
    claims table (the ``"claims"`` that ``book/build.py`` copies from the chapter's glued
    :data:`fedbook.page.CLAIMS_RECORDS` into ``<folder>/<name>.json``), in the book's order, the paper being the
    chapter's part of ``parts`` (:func:`toc_chapters`); and the chapters that have no record in
    ``folder`` (not built).

    Returns
    -------
    (DataFrame, list of str)
        The rows (columns :data:`FINDINGS_COLUMNS`) and the chapters without a record.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from fedbook.claims import Claim, claims_records, evaluate
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    >>> rows = claims_records([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])])
    >>> _ = (folder / "x_experiments.json").write_text(json.dumps({"seconds": 1.0, "claims": rows}))
    >>> frame, missing = read_findings(folder, [("X", ["x_experiments", "x_derivations"])])
    >>> frame.loc[0, ["paper", "quote", "verdict", "interval"]].tolist(), int(frame.loc[0, "n"]), missing
    (['X', 'X beats Y.', 'holds', '+2.00 [+1.34, +2.66]'], 3, ['x_derivations'])
    """
    rows, missing = [], []
    for part, names in parts:
        for name in names:
            path = Path(folder) / f"{name}.json"
            if not path.exists():
                missing.append(name)
                continue
            for r in json.loads(path.read_text(encoding="utf-8")).get("claims", ()):
                if "m" not in r:  # a record of the rule before the smallest effect of interest: not comparable
                    raise ValueError(f"the record {path} predates the book's smallest-effect rule (its claims carry no "
                                     f"'m'): rebuild the chapter {name!r} (book/build.py --only {name})")
                rows.append({"paper": part, "chapter": name, "key": r["key"], "kind": r["kind"], "headline": r["headline"],
                             "quote": r["quote"], "source": r["source"], "quantity": r["quantity"], "verdict": r["verdict"],
                             "shortfall": r.get("shortfall") or "", "verdict text": r.get("verdict_text", r["verdict"]),
                             "interval": _interval_only(r["ours"], r["n"], r["unit"]), "n": r["n"], "unit": r["unit"],
                             "seeds to decide": r["seeds_to_decide"], "anchor": r["anchor"],
                             "about": r.get("about", "method")})
    return pd.DataFrame(rows, columns=list(FINDINGS_COLUMNS)), missing


def paper_summaries(folder: str | os.PathLike, parts: Sequence[tuple[str, Sequence[str]]]) -> Html:
    """The findings page's opening: for each paper (a part of ``parts`` with a chapter that has
    claims records in ``folder``), what its chapter found in a few sentences
    (:func:`fedbook.claims.summary_html`, the sentences that open the chapter itself), with a
    link to the chapter's claims table. Its text form is the sentences, one paper a line.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from fedbook.claims import Claim, claims_records, effect, evaluate
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> c = Claim("gain", "X beats Y.", "Abstract", "accuracy, X − Y, points", "greater", effect("points"),
    ...           resolution=0.1, headline=True)
    >>> rows = claims_records([evaluate(c, [2.1, 1.8, 2.4], [0.0, 0.1, 0.2])])
    >>> _ = (folder / "x_experiments.json").write_text(json.dumps({"claims": rows}))
    >>> h = paper_summaries(folder, [("X", ["x_experiments"]), ("Y", ["y_experiments"])])
    >>> print(repr(h))
    X’s 1 headline claim about its method (those of its abstract or conclusion): gain holds. No other claim is tested.
    >>> 'href="x_experiments.html#claim-gain"' in h._repr_html_(), 'href="x_experiments.html#claims-' in h._repr_html_()
    (True, True)
    """
    from html import escape

    html, text = [], []
    for part, names in parts:
        for name in names:
            path = Path(folder) / f"{name}.json"
            records = json.loads(path.read_text(encoding="utf-8")).get("claims") if path.exists() else None
            if not records:
                continue
            said = summary_html(records, part, f"{name}.html")
            table = table_anchor([r["key"] for r in records])
            html.append(f'<div class="paper-summary" data-paper="{escape(part)}"><p class="paper-summary-title">'
                        f'<strong>{escape(part)}</strong> · <a href="{escape(name)}.html#{table}">its claims table'
                        f"</a></p>{said.html}</div>")
            text.append(said.text)
    if not html:
        return Html("<p>No chapter of this build has claims records.</p>", "no chapter has claims records")
    return Html(f'<div class="paper-summaries">{"".join(html)}</div>', "\n".join(text))


def findings_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """The verdicts per paper (controls not counted, as in each chapter's report): one row per
    paper of ``frame`` (:func:`read_findings`) in its order and a last row ``"all papers"``;
    columns ``claims``, one per verdict (:data:`fedbook.claims.VERDICTS`), with "does not hold"
    split by its kind after it (:data:`SHORTFALL_COLUMNS`), ``headline claims`` and
    ``headline decided`` (holds or does not hold).

    Examples
    --------
    >>> f = pd.DataFrame({"paper": ["A", "A", "B", "B"], "kind": ["claim", "claim", "claim", "control"],
    ...                   "verdict": ["holds", "inconclusive at this scale", "does not hold", "holds"],
    ...                   "headline": [True, True, False, False]})
    >>> findings_counts(f).loc[:, ["claims", "holds", "headline decided"]].to_dict("index")
    {'A': {'claims': 2, 'holds': 1, 'headline decided': 1}, 'B': {'claims': 1, 'holds': 0, 'headline decided': 0}, 'all papers': {'claims': 3, 'holds': 1, 'headline decided': 1}}
    """
    claims = frame[frame["kind"] == "claim"]
    papers = list(dict.fromkeys(frame["paper"]))

    shortfall = frame["shortfall"] if "shortfall" in frame.columns else pd.Series("", index=frame.index)

    def row(part: pd.DataFrame) -> dict:
        head = part[part["headline"].astype(bool)]
        counts = {v: int((part["verdict"] == v).sum()) for v in VERDICTS}
        kinds = {name: int((shortfall[part.index] == kind).sum()) for kind, name in SHORTFALL_COLUMNS.items()}
        ordered = {HOLDS: counts[HOLDS], DOES_NOT_HOLD: counts[DOES_NOT_HOLD], **kinds,
                   **{v: counts[v] for v in VERDICTS[2:]}}
        return {"claims": len(part), **ordered, "headline claims": len(head),
                "headline decided": int(head["verdict"].isin([HOLDS, DOES_NOT_HOLD]).sum())}

    table = pd.DataFrame([row(claims[claims["paper"] == p]) for p in papers] + [row(claims)],
                         index=pd.Index([*papers, "all papers"], name="paper"))
    return table


def findings_html(frame: pd.DataFrame) -> Html:
    """The findings as one table for a page, filterable by paper and by verdict in the reader's
    browser (the book's ``findings.js``: two menus above the table, shown only where scripts run;
    every row is shown without them): per row the paper, the quotation's short form
    (:func:`short_quote`) linking to its row in the chapter's claims table, its source, the
    verdict (shaded), the interval, the seeds and the seeds to decide. Its text form lists the
    rows as plain text.

    Examples
    --------
    >>> f = pd.DataFrame([{"paper": "A", "chapter": "a_experiments", "key": "k", "kind": "claim", "headline": True,
    ...     "quote": "X beats Y.", "source": "Table 2", "quantity": "accuracy, points", "verdict": "holds",
    ...     "shortfall": "", "verdict text": "holds",
    ...     "interval": "+2.0 [+1.3, +2.7]", "n": 3, "unit": "seeds", "seeds to decide": "decided", "anchor": "claim-k",
    ...     "about": "method"}])
    >>> h = findings_html(f)
    >>> 'href="a_experiments.html#claim-k"' in h._repr_html_(), 'data-verdict="holds"' in h._repr_html_()
    (True, True)
    >>> repr(h)
    'A | “X beats Y.” (Table 2; headline) | holds | +2.0 [+1.3, +2.7] | 3 seeds | decided'
    """
    from html import escape

    missing = [c for c in FINDINGS_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"findings_html needs the columns of read_findings, missing {missing}")
    papers = list(dict.fromkeys(frame["paper"]))
    verdicts = [v for v in VERDICTS if v in set(frame["verdict"])]

    def options(values: list[str], every: str) -> str:
        return f'<option value="">{every}</option>' + "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)

    def claim_cell(r: dict) -> tuple[str, str]:
        where = f"{r['source']}; headline" if r["headline"] else r["source"]
        quote = short_quote(r["quote"])
        text = f"Control: {quote}" if r["kind"] == "control" else f"\N{LEFT DOUBLE QUOTATION MARK}{quote}\N{RIGHT DOUBLE QUOTATION MARK}"
        link = f'<a href="{escape(r["chapter"])}.html#{escape(r["anchor"])}">{escape(text)}</a>'
        about = " · about the problem, not the method" if r.get("about") == "problem" else ""
        return (f"{link} ({escape(where)})<br><small>{escape(r['quantity'])}{about}</small>",
                f"{text} ({where})")

    body, lines = [], []
    for r in frame.to_dict("records"):
        cell, plain = claim_cell(r)
        n, unit = int(r["n"]), r["unit"]
        seeds = f"{n} {unit[:-1] if n == 1 and unit.endswith('s') else unit}"
        colour = verdict_colour(r["verdict"])
        said = r.get("verdict text") or r["verdict"]
        confirmed = r.get("confirmatory") or ""  # with_confirmations: the confirmatory verdict that stands
        body.append(
            f'<tr data-paper="{escape(r["paper"])}" data-verdict="{escape(r["verdict"])}" data-kind="{escape(r["kind"])}"'
            f' class="findings-{escape(r["kind"])}">'
            f"<td>{escape(r['paper'])}</td><td>{cell}</td>"
            f'<td style="background-color: {colour}">{escape(said)}'
            + (f'<br><small><a href="#findings-confirmatory">{escape(confirmed)}</a></small>' if confirmed else "")
            + "</td>"
            f"<td>{escape(r['interval'])}</td><td>{escape(seeds)}</td><td>{escape(r['seeds to decide'])}</td></tr>"
        )
        lines.append(" | ".join([r["paper"], plain, said + (f" ({confirmed})" if confirmed else ""), r["interval"], seeds,
                                 r["seeds to decide"]]))
    head = "".join(f'<th style="text-align: left">{h}</th>' for h in
                   ("paper", "claim (the link opens its row in the chapter)", "verdict", "ours [95 % interval]", "seeds",
                    "seeds to decide"))
    html = (
        '<div class="findings">'
        '<form class="findings-filter" hidden>'
        f'<label>Paper <select data-column="paper">{options(papers, "every paper")}</select></label> '
        f'<label>Verdict <select data-column="verdict">{options(verdicts, "every verdict")}</select></label> '
        '<output class="findings-shown" aria-live="polite"></output></form>'
        f'<table class="findings-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
    )
    return Html(html, "\n".join(lines))



def findings_numbers(findings: pd.DataFrame, counts: pd.DataFrame, not_built: Sequence[str], profile: str
                     ) -> dict[str, Any]:
    """The findings page's numbers, by their glued keys: the claims tested (controls apart) and
    their verdicts, the papers, the rows and controls, the headline claims decided, the share
    decided either way, the chapters with claims that this build has no record of
    (``not_built``), the headline claims about the papers' methods (and how many hold, do not
    hold, remain open) and about their problems (:data:`fedbook.claims.ABOUTS`), and the ``profile``.
    ``findings``: :func:`read_findings`; ``counts``: :func:`findings_counts` of it.

    Examples
    --------
    >>> f = pd.DataFrame({"paper": ["A", "A", "B"], "kind": ["claim", "control", "claim"],
    ...                   "verdict": ["holds", "holds", "does not hold"], "headline": [True, False, False]})
    >>> R = findings_numbers(f, findings_counts(f), [], "book")
    >>> R["n_claims"], R["n_holds"], R["n_controls"], R["decided_percent"], R["not_built_text"]
    (2, 1, 1, 100.0, 'every chapter with claims was built for it')
    >>> R["n_headline_method"], R["headline_method_holds"], R["n_headline_problem"]
    (1, 1, 0)
    """
    total = counts.loc["all papers"]
    papers = [p for p in counts.index if p != "all papers"]
    about = findings["about"] if "about" in findings.columns else pd.Series("method", index=findings.index)
    head = findings[(findings["kind"] == "claim") & findings["headline"].astype(bool)]
    method, problem = head[about[head.index] == "method"], head[about[head.index] == "problem"]
    return {"n_claims": int(total["claims"]), "n_holds": int(total[HOLDS]), "n_not": int(total[DOES_NOT_HOLD]),
            "n_inconclusive": int(total[INCONCLUSIVE]), "n_papers": len(papers),
            "n_not_smaller": int(total[SHORTFALL_COLUMNS[SMALLER]]), "n_not_opposite": int(total[SHORTFALL_COLUMNS[OPPOSITE]]),
            "n_untestable": int(sum(total[v] for v in UNTESTABLE)),
            "n_untestable_resolution": int(total[UNTESTABLE_RESOLUTION]),
            "n_untestable_setting": int(total[UNTESTABLE_SETTING]),
            "effect_share": f"{100 * EFFECT_SHARE:g} %", "resolution_share": f"{100 * RESOLUTION_SHARE:g} %",
            "n_controls": int((findings["kind"] == "control").sum()), "n_rows": len(findings),
            "n_headline": int(total["headline claims"]), "headline_decided": int(total["headline decided"]),
            "decided_percent": float(100 * (total[HOLDS] + total[DOES_NOT_HOLD]) / max(int(total["claims"]), 1)),
            "not_built_text": "every chapter with claims was built for it" if not not_built else
            f"the chapters with claims {', '.join(not_built)} have no record in this build, so their claims are missing",
            "n_headline_method": len(method), "headline_method_holds": int((method["verdict"] == HOLDS).sum()),
            "headline_method_not": int((method["verdict"] == DOES_NOT_HOLD).sum()),
            "headline_method_open": int((~method["verdict"].isin([HOLDS, DOES_NOT_HOLD])).sum()),
            "n_headline_problem": len(problem), "headline_problem_holds": int((problem["verdict"] == HOLDS).sum()),
            "profile": profile}


BAR_SEGMENTS = (
    (HOLDS, HOLDS, VERDICT_COLOURS[HOLDS], None),
    ("does not hold: smaller than claimed", SHORTFALL_COLUMNS[SMALLER], VERDICT_COLOURS[DOES_NOT_HOLD], None),
    ("does not hold: the opposite direction", SHORTFALL_COLUMNS[OPPOSITE], "#e29a9a", None),
    (INCONCLUSIVE, INCONCLUSIVE, VERDICT_COLOURS[INCONCLUSIVE], None),
    (UNTESTABLE_RESOLUTION, UNTESTABLE_RESOLUTION, VERDICT_COLOURS[UNTESTABLE_RESOLUTION], "//"),
    (UNTESTABLE_SETTING, UNTESTABLE_SETTING, VERDICT_COLOURS[UNTESTABLE_SETTING], None),
)
"""The segments of :func:`plot_verdicts`' bars: (label, column of :func:`findings_counts`, colour, hatch)."""


def plot_verdicts(counts: pd.DataFrame):
    """The verdicts of each paper's claims as horizontal stacked bars (holds; does not hold,
    smaller than claimed and the opposite direction; inconclusive; untestable at this resolution
    and in this setting; each count written on its bar). ``counts``: :func:`findings_counts`
    (its ``"all papers"`` row is left out)."""
    papers = [p for p in counts.index if p != "all papers"]
    fig, ax = plt.subplots(figsize=(8, 0.55 * max(len(papers), 1) + 1.8))
    left = pd.Series(0, index=papers, dtype=float)
    for label, column, colour, hatch in BAR_SEGMENTS:
        values = counts.loc[papers, column].astype(float)
        ax.barh(papers, values, left=left, color=colour, edgecolor="#555555", hatch=hatch, label=label)
        for y, (x0, v) in enumerate(zip(left, values)):
            if v:
                ax.text(x0 + v / 2, y, f"{int(v)}", ha="center", va="center", fontsize=9)
        left += values
    ax.invert_yaxis()
    ax.set_xlabel("claims")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


ZONES_FIGURE = Path(__file__).resolve().parents[1] / "figures" / "rule-zones.svg"
"""The reading page's figure of the rule (:func:`plot_rule_zones`), written by
:func:`write_rule_zones` and kept in the repository (a test checks it is current)."""


def plot_rule_zones():
    """The decision rule as a figure: the axis of the paired difference (ours − baseline, in the
    claimed direction), the smallest effect of interest :math:`m` and 0 marked, and five example
    95 % intervals with the verdict each gets. Beyond :math:`m` (green) an interval holds; short
    of it (red) it does not hold, *smaller than claimed* while it reaches above 0 and *the
    opposite direction* below it; an interval across :math:`m` is inconclusive. No measured
    number is drawn: the figure explains the rule, in units of :math:`m`."""
    m = 1.0
    examples = [  # (low, high, verdict)
        (1.25, 2.6, HOLDS),
        (0.35, 1.9, INCONCLUSIVE),
        (0.15, 0.8, "does not hold: smaller than claimed"),
        (-0.7, 0.65, "does not hold: smaller than claimed (a tie)"),
        (-1.9, -0.3, "does not hold: the opposite direction"),
    ]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    ax.axvspan(m, 3.0, color=VERDICT_COLOURS[HOLDS], zorder=0)
    ax.axvspan(-2.4, m, color=VERDICT_COLOURS[DOES_NOT_HOLD], alpha=0.55, zorder=0)
    for x, label in ((0.0, "0"), (m, "m")):
        ax.axvline(x, color="#333333", lw=1.2, ls="-" if x else ":", zorder=1)
    for i, (lo, hi, verdict) in enumerate(examples):
        y = len(examples) - i
        ax.plot([lo, hi], [y, y], color="#222222", lw=2.2, solid_capstyle="butt", zorder=2)
        ax.plot([(lo + hi) / 2], [y], "o", color="#222222", ms=4, zorder=3)
        ax.text(3.05, y, verdict, va="center", ha="left", fontsize=8.5)
    ax.text(2.1, len(examples) + 0.75, "holds if the whole\ninterval lies here", ha="center", va="center", fontsize=8)
    ax.text(-0.9, len(examples) + 0.75, "does not hold if the whole\ninterval lies here", ha="center", va="center",
            fontsize=8)
    ax.set_xlim(-2.4, 3.0)
    ax.set_ylim(0.4, len(examples) + 1.3)
    ax.set_yticks([])
    ax.set_xticks([-m, 0.0, m, 2 * m], ["−m", "0", "m", "2m"])
    ax.set_xlabel("ours − baseline, in the claimed direction\n(each bar: a 95 % interval over seeds)")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    fig.subplots_adjust(left=0.02, right=0.6, bottom=0.22, top=0.97)
    return fig


def write_rule_zones(path: str | os.PathLike = ZONES_FIGURE) -> bytes:
    """:func:`plot_rule_zones` as SVG (text kept as text, no date, a fixed id salt: the same bytes
    on every machine), written to ``path`` atomically; returns the bytes."""
    import io

    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "fedbook-rule-zones"}):
        fig = plot_rule_zones()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    data = buffer.getvalue()
    atomic_write_bytes(Path(path), data)
    return data


def verdict_changes(findings: pd.DataFrame, records: Mapping[str, str | os.PathLike], profile: str,
                    parts: Sequence[tuple[str, Sequence[str]]]) -> dict[str, Any]:
    """The findings page's Exercise 1: the rows whose verdict differs between this build
    (``findings``, at ``profile``) and the other profile's build (smoke against book), joined on
    the chapter and the claim's key; the other build's records are ``records[other]`` when they
    exist. Returns ``ex1_text`` and ``ex1_table`` (a table, :func:`fedbook.page.show_table`)."""
    other = "smoke" if profile != "smoke" else "book"
    folder = (records or {}).get(other)
    try:
        theirs = read_findings(folder, parts)[0] if folder and Path(folder).exists() else None
    except ValueError as stale:  # that build predates the rule: say so, do not compare across rules
        return {"ex1_text": f"The {other}-profile build on this machine is older than this page's rule ({stale}); "
                f"rebuild it and re-run this page to compare.",
                "ex1_table": show_table(pd.DataFrame({"note": [f"the {other} build is stale"]}), index=False)}
    if theirs is None or theirs.empty:
        return {"ex1_text": f"This machine has no {other}-profile build to compare with: build it and re-run this page.",
                "ex1_table": show_table(pd.DataFrame({"note": [f"no {other} build"]}), index=False)}
    joined = findings.merge(theirs, on=["chapter", "key"], suffixes=("", f" ({other})"))
    moved = joined[joined["verdict"] != joined[f"verdict ({other})"]]
    shown = moved[["paper", "key", "verdict", f"verdict ({other})", "n", f"n ({other})"]].rename(
        columns={"verdict": f"verdict ({profile})", "n": f"seeds ({profile})", f"n ({other})": f"seeds ({other})"})
    return {"ex1_text": f"Of the {len(joined)} rows both builds have, {len(moved)} change verdict between the "
            f"{profile} profile and the {other} profile; the table lists them (the same rows, read from the two "
            "builds' records).",
            "ex1_table": show_table(shown if len(shown) else pd.DataFrame({"note": ["no verdict changes"]}), index=False)}


def nearest_decisions(findings: pd.DataFrame) -> dict[str, Any]:
    """The findings page's Exercise 2: the open claims (inconclusive, controls apart) whose seeds
    to decide is a number, fewest first, and those that twice their seeds would settle, per paper.
    Returns ``ex2_text`` and ``ex2_table`` (a table, :func:`fedbook.page.show_table`)."""
    open_ = findings[(findings["kind"] == "claim") & (findings["verdict"] == INCONCLUSIVE)]
    needed = open_["seeds to decide"].str.extract(r"n = ([\d,]+)")[0].str.replace(",", "").astype(float)
    near = open_.assign(needed=needed).dropna(subset=["needed"]).sort_values("needed", kind="stable")
    within = near[near["needed"] <= 2 * near["n"]]
    text = (f"{len(open_)} claim{' is' if len(open_) == 1 else 's are'} open; for {len(near)} of them a number of seeds would decide at the observed "
            f"spread, and {len(within)} would need at most twice the seeds they rest on now"
            + (f" ({', '.join(f'{p}: {k}' for p, k in within.groupby('paper', sort=False).size().items())})."
               if len(within) else ".")
            + " The others need more seeds than a chapter can afford, or no number of seeds would decide them at the "
            "observed mean (a mean on the smallest effect of interest itself).")
    table = (near[["paper", "key", "n", "needed"]].rename(columns={"n": "seeds now", "needed": "seeds to decide"})
             if len(near) else pd.DataFrame({"note": ["no open claim has a number"]}))
    return {"ex2_text": text, "ex2_table": show_table(table, digits=0, index=False)}


def timing_numbers(timing: pd.DataFrame) -> dict[str, Any]:
    """The teaching page's times, by their glued keys, from :func:`chapter_times`: the chapters,
    the total at the book profile (minutes) and at the smoke profile, and the slowest chapter at
    the book profile ("not measured yet" where that profile has no record).

    Examples
    --------
    >>> t = pd.DataFrame({"part": "A", "chapter": ["One", "Two"], "smoke (s)": [30.0, 60.0], "book (min)": [2.0, 5.5]})
    >>> timing_numbers(t)
    {'n_chapters': 2, 'book_total_time': '8 minutes', 'smoke_total_time': '1.5 minutes', 'slowest_time': 'Two (5.5 minutes)'}
    """
    book_total = timing["book (min)"].sum(min_count=1)
    smoke_total = timing["smoke (s)"].astype(float).sum(min_count=1)
    slowest = timing.loc[timing["book (min)"].idxmax()] if timing["book (min)"].notna().any() else None
    return {"n_chapters": len(timing),
            "book_total_time": "not measured yet" if pd.isna(book_total) else f"{book_total:.0f} minutes",
            "smoke_total_time": "not measured yet" if pd.isna(smoke_total) else f"{smoke_total / 60:.1f} minutes",
            "slowest_time": "none measured yet" if slowest is None else
            f"{slowest['chapter']} ({slowest['book (min)']:.1f} minutes)"}


def exercise_numbers(table: pd.DataFrame) -> dict[str, int]:
    """The teaching page's counts of exercises, by their glued keys, from :func:`exercise_index`:
    all of them, those that need parameters only and those that need code.

    Examples
    --------
    >>> exercise_numbers(pd.DataFrame({"needs": ["code", "parameters only", "code", "not marked"]}))
    {'n_exercises': 4, 'n_parameters_only': 1, 'n_code': 2}
    """
    counts = table["needs"].value_counts()
    return {"n_exercises": len(table), "n_parameters_only": int(counts.get(EXERCISE_KINDS[0], 0)),
            "n_code": int(counts.get(EXERCISE_KINDS[1], 0))}


def handout_cell(build: str | os.PathLike, chapter: str = "setting", seed: int = 7) -> tuple[str, int]:
    """What a handout carries: ``book/build.py --handout`` (``build``: its path) run for
    ``chapter`` at the smoke profile with ``-p seed=<seed>`` into a temporary folder; the source
    of the student's notebook's cell of injected parameters, and how many of its code cells have
    an output (none: it is handed out unexecuted)."""
    with tempfile.TemporaryDirectory() as folder:
        cmd = [sys.executable, str(build), "--handout", folder, "--profile", "smoke", "--only", chapter, "-p",
               f"seed={seed}"]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        handed = nbformat.read(Path(folder) / "student" / f"{chapter}.ipynb", as_version=4)
    injected = next(c for c in handed.cells if "injected-parameters" in c.metadata.get("tags", ()))
    return injected.source, sum(1 for c in handed.cells if c.cell_type == "code" and c.get("outputs"))


CONFIRM_COLUMNS = ("paper", "chapter", "key", "anchor", "headline", "pilot verdict", "pilot interval", "pilot n",
                   "confirmatory verdict", "confirmatory interval", "confirmatory n", "fresh seeds", "stands",
                   "standing verdict")
"""The columns of :func:`read_confirmations`."""


def _seed_range(seeds: Sequence[int]) -> str:
    seeds = list(seeds)
    if not seeds:
        return ""
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}\N{EN DASH}{seeds[-1]}"


_STALE = "planned from an earlier build"
"""A confirmatory verdict of a run planned from another build of the pilot chapter than the one
the page reads (the records' keys differ): it does not stand."""


def read_confirmations(pilot: str | os.PathLike, confirm: str | os.PathLike,
                       parts: Sequence[tuple[str, Sequence[str]]]) -> pd.DataFrame:
    """The claims a confirmatory run (``book/build.py --confirm``, :mod:`fedbook.confirm`) was planned
    for, each with the pilot's verdict (the build's records in ``pilot``) and the confirmatory one
    (the records in ``confirm``: ``"claims"`` decided on the fresh seeds alone, ``"confirmatory"``
    the plan's rows and seeds), in the book's order; which one stands: the confirmatory verdict,
    planned before its seeds ran, for every claim it was planned for (``"pilot"`` where the
    confirmatory chapter did not read the claim, and where the run was planned from another build
    of the pilot chapter than the one in ``pilot``: its record's ``"confirmatory"`` names the pilot
    record's ``"key"`` it was planned from, and a record that names another one, or none, is
    marked "planned from an earlier build" and does not stand).

    Returns
    -------
    DataFrame
        Columns :data:`CONFIRM_COLUMNS`; empty when ``confirm`` holds no confirmatory record.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from fedbook.claims import Claim, claims_records, evaluate
    >>> a, b = pathlib.Path(tempfile.mkdtemp()), pathlib.Path(tempfile.mkdtemp())
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 1.0, resolution=0.1)
    >>> pilot = {"key": "k1", "claims": claims_records([evaluate(c, [0.0, 2.0, 1.0])])}
    >>> _ = (a / "x_experiments.json").write_text(json.dumps(pilot))
    >>> fresh = claims_records([evaluate(c, [1.9, 2.3, 2.1, 2.0, 2.2, 1.8, 2.4, 2.1, 2.0, 2.2])])
    >>> rows = [{"chapter": "x_experiments", "key": "gain", "planned_n": 10}]
    >>> def run(planned_from):
    ...     _ = (b / "x_experiments.json").write_text(json.dumps({"claims": fresh, "confirmatory": {
    ...         "pilot_key": planned_from, "seeds": list(range(10000, 10010)), "rows": rows}}))
    ...     f = read_confirmations(a, b, [("X", ["x_experiments"])])
    ...     return f.loc[0, ["pilot verdict", "confirmatory verdict", "fresh seeds", "stands", "standing verdict"]].tolist()
    >>> run("k1")
    ['inconclusive at this scale', 'holds', '10000–10009', 'confirmatory', 'holds']
    >>> run("k0")  # planned from another build of the pilot chapter
    ['inconclusive at this scale', 'planned from an earlier build', '10000–10009', 'pilot', 'inconclusive at this scale']
    """
    rows = []
    for part, names in parts:
        for name in names:
            path = Path(confirm) / f"{name}.json"
            if not path.exists():
                continue
            record = json.loads(path.read_text(encoding="utf-8"))
            planned = (record.get("confirmatory") or {}).get("rows") or ()
            seeds = (record.get("confirmatory") or {}).get("seeds") or ()
            fresh = {r["key"]: r for r in record.get("claims") or ()}
            pilot_path = Path(pilot) / f"{name}.json"
            pilot_record = json.loads(pilot_path.read_text(encoding="utf-8")) if pilot_path.exists() else {}
            before = {r["key"]: r for r in pilot_record.get("claims") or ()}
            planned_from = (record.get("confirmatory") or {}).get("pilot_key")
            stale = planned_from is None or planned_from != pilot_record.get("key")
            for p in planned:
                key, old, new = p["key"], before.get(p["key"]), fresh.get(p["key"])
                read = "" if new is None else (_STALE if stale else new["verdict"])
                new = None if stale else new
                rows.append({
                    "paper": part, "chapter": name, "key": key,
                    "anchor": (new or old or {}).get("anchor", ""), "headline": bool(p.get("headline")),
                    "pilot verdict": old["verdict"] if old else "not in the pilot's records",
                    "pilot interval": _interval_only(old["ours"], old["n"], old["unit"]) if old else "",
                    "pilot n": int(old["n"]) if old else 0,
                    "confirmatory verdict": read or "not read by the confirmatory run",
                    "confirmatory interval": _interval_only(new["ours"], new["n"], new["unit"]) if new else "",
                    "confirmatory n": int(new["n"]) if new else 0, "fresh seeds": _seed_range(seeds),
                    "stands": "confirmatory" if new else "pilot",
                    "standing verdict": new["verdict"] if new else (old["verdict"] if old else "")})
    return pd.DataFrame(rows, columns=list(CONFIRM_COLUMNS))


def confirmations_html(frame: pd.DataFrame) -> Html:
    """The confirmatory verdicts as a table for a page (a claims table's card per row on a phone,
    the standing verdict first): the claim (linked to its row in the chapter), the pilot's verdict
    with its interval and seeds, the confirmatory verdict with its interval and fresh seeds, and
    which one stands (shaded by its verdict). Its text form lists the rows.

    Examples
    --------
    >>> f = pd.DataFrame([{"paper": "X", "chapter": "x_experiments", "key": "gain", "anchor": "claim-gain",
    ...     "headline": True, "pilot verdict": "inconclusive at this scale", "pilot interval": "+1.0 [-1.5, +3.5]",
    ...     "pilot n": 3, "confirmatory verdict": "holds", "confirmatory interval": "+2.1 [+1.9, +2.3]",
    ...     "confirmatory n": 10, "fresh seeds": "1000–1009", "stands": "confirmatory", "standing verdict": "holds"}])
    >>> h = confirmations_html(f)
    >>> 'href="x_experiments.html#claim-gain"' in h._repr_html_(), 'class="claims-table' in h._repr_html_()
    (True, True)
    >>> repr(h)
    'X gain (headline) | pilot: inconclusive at this scale, +1.0 [-1.5, +3.5], 3 seeds | confirmatory: holds, +2.1 [+1.9, +2.3], 10 fresh seeds 1000–1009 | stands: the confirmatory verdict, holds'
    """
    from html import escape

    missing = [c for c in CONFIRM_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"confirmations_html needs the columns of read_confirmations, missing {missing}")
    body, lines = [], []
    for r in frame.to_dict("records"):
        head = " (headline)" if r["headline"] else ""
        claim = (f'{escape(r["paper"])}: <a href="{escape(r["chapter"])}.html#{escape(r["anchor"])}">'
                 f'<code>{escape(r["key"])}</code></a>{escape(head)}')
        pilot = f"{r['pilot verdict']}, {r['pilot interval']}, {r['pilot n']} seeds"
        fresh = (f"{r['confirmatory verdict']}, {r['confirmatory interval']}, {r['confirmatory n']} fresh seeds "
                 f"{r['fresh seeds']}" if r["stands"] == "confirmatory" else r["confirmatory verdict"])
        stands = f"the {r['stands']} verdict, {r['standing verdict']}"
        body.append(
            f'<tr><td class="claims-text">{claim}</td>'
            f'<td style="background-color: {verdict_colour(r["pilot verdict"])}">{escape(pilot)}</td>'
            f'<td style="background-color: {verdict_colour(r["confirmatory verdict"])}">{escape(fresh)}</td>'
            f'<td class="claims-verdict" style="background-color: {verdict_colour(r["standing verdict"])}">'
            f"{escape(stands)}</td></tr>")
        lines.append(f"{r['paper']} {r['key']}{head} | pilot: {pilot} | confirmatory: {fresh} | stands: {stands}")
    heads = ("claim", "pilot (the book's seeds)", "confirmatory (fresh seeds)", "stands")
    thead = "".join(f'<th style="text-align: left">{h}</th>' for h in heads)
    return Html(f'<table class="claims-table confirm-table"><thead><tr>{thead}</tr></thead>'
                f'<tbody>{"".join(body)}</tbody></table>', "\n".join(lines))


def with_confirmations(findings: pd.DataFrame, confirmed: pd.DataFrame | None) -> pd.DataFrame:
    """The findings (:func:`read_findings`) with a column ``"confirmatory"``: for each row whose
    confirmatory verdict stands (``confirmed``: :func:`read_confirmations`), that verdict and its
    fresh seeds (``"confirmatory: holds, 22 fresh seeds"``); ``""`` for the others (the pilot's
    verdict stands). :func:`findings_html` shows it under the row's verdict.

    Examples
    --------
    >>> f = pd.DataFrame({"chapter": ["x", "x"], "key": ["a", "b"]})
    >>> c = pd.DataFrame({"chapter": ["x", "x"], "key": ["a", "b"], "stands": ["confirmatory", "pilot"],
    ...                   "confirmatory verdict": ["holds", "planned from an earlier build"], "confirmatory n": [22, 0]})
    >>> with_confirmations(f, c)["confirmatory"].tolist()
    ['confirmatory: holds, 22 fresh seeds', '']
    """
    out = findings.copy()
    notes: dict[tuple[str, str], str] = {}
    if confirmed is not None and len(confirmed):
        for r in confirmed[confirmed["stands"] == "confirmatory"].to_dict("records"):
            notes[(r["chapter"], r["key"])] = f"confirmatory: {r['confirmatory verdict']}, {int(r['confirmatory n'])} fresh seeds"
    out["confirmatory"] = [notes.get((c, k), "") for c, k in zip(out["chapter"], out["key"])]
    return out


def confirm_note(findings: pd.DataFrame) -> str:
    """A sentence for the findings page's counts: for how many claims a confirmatory verdict stands
    (the ``"confirmatory"`` column of :func:`with_confirmations`), and that the counts are the
    pilot's.

    Examples
    --------
    >>> print(confirm_note(pd.DataFrame({"confirmatory": ["confirmatory: holds, 22 fresh seeds", ""]})))
    For 1 of these claims the verdict that stands is a confirmatory run's, on fresh seeds (marked in the table of every claim below; see the section on confirmatory runs); the counts here are those of this build's own seeds.
    >>> print(confirm_note(pd.DataFrame({"confirmatory": ["", ""]})))
    No verdict here is yet a confirmatory run's: every one is that of this build's own seeds.
    """
    n = int((findings.get("confirmatory", pd.Series(dtype=object)).fillna("") != "").sum())
    if not n:
        return ("No verdict here is yet a confirmatory run's: every one is that "
                "of this build's own seeds.")
    return (f"For {n} of these claims the verdict that stands is a confirmatory run's, on fresh seeds "
            "(marked in the table of every claim below; see the section on confirmatory runs); the counts here are "
            "those of this build's own seeds.")


def plan_summary(plan, parts: Sequence[tuple[str, Sequence[str]]]) -> pd.DataFrame:
    """A confirmatory plan (:class:`fedbook.confirm.ConfirmPlan`) per paper, for a page: the open
    claims, how many are planned, the fresh seeds and the estimated CPU minutes of the run (the
    plan's ``estimated_seconds``: :func:`fedbook.confirm.estimate_seconds`), in the book's order,
    and a last row of the totals.

    Examples
    --------
    >>> from fedbook.confirm import ConfirmPlan
    >>> claims = pd.DataFrame({"chapter": ["x_experiments"] * 2, "key": ["a", "b"], "planned_n": pd.array([7, None], "Int64")})
    >>> chapters = pd.DataFrame({"chapter": ["x_experiments"], "seeds": [7], "estimated_seconds": [120.0]})
    >>> plan_summary(ConfirmPlan(claims, chapters), [("X", ["x_experiments"])]).to_dict("records")
    [{'paper': 'X', 'open claims': 2, 'planned': 1, 'fresh seeds': 7, 'CPU minutes': 2.0}, {'paper': 'all papers', 'open claims': 2, 'planned': 1, 'fresh seeds': 7, 'CPU minutes': 2.0}]
    """
    rows = []
    for part, names in parts:
        for name in names:
            claims = plan.claims[plan.claims["chapter"] == name]
            if claims.empty:
                continue
            chapter = plan.chapters[plan.chapters["chapter"] == name]
            seeds = int(chapter["seeds"].iloc[0]) if len(chapter) else 0
            seconds = chapter["estimated_seconds"].iloc[0] if len(chapter) else 0.0
            rows.append({"paper": part, "open claims": len(claims), "planned": int(claims["planned_n"].notna().sum()),
                         "fresh seeds": seeds, "CPU minutes": round(float(seconds) / 60, 1) if pd.notna(seconds) else float("nan")})
    frame = pd.DataFrame(rows, columns=["paper", "open claims", "planned", "fresh seeds", "CPU minutes"])
    total = {"paper": "all papers", "open claims": int(frame["open claims"].sum()), "planned": int(frame["planned"].sum()),
             "fresh seeds": int(frame["fresh seeds"].sum()), "CPU minutes": round(float(frame["CPU minutes"].sum(skipna=False)), 1)}
    return pd.concat([frame, pd.DataFrame([total])], ignore_index=True)


def confirm_settings(folder: str | os.PathLike, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a confirmatory run was planned with (``power``, ``cap``, ``first_seed``), read from
    its records in ``folder`` (``"confirmatory"``); ``defaults`` where none is there.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "x.json").write_text(json.dumps({"confirmatory": {"power": 0.9, "cap": 20, "first_seed": 500}}))
    >>> confirm_settings(folder, {"power": 0.8, "cap": 40, "first_seed": 10000})
    {'power': 0.9, 'cap': 20, 'first_seed': 500}
    >>> confirm_settings(folder / "none", {"power": 0.8})
    {'power': 0.8}
    """
    out = dict(defaults)
    for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else ():
        said = json.loads(path.read_text(encoding="utf-8")).get("confirmatory") or {}
        out.update({k: said[k] for k in defaults if k in said})
    return out


def confirm_numbers(pilot: str | os.PathLike, confirm: str | os.PathLike,
                    parts: Sequence[tuple[str, Sequence[str]]]) -> dict[str, Any]:
    """The findings page's section on confirmatory runs, by its glued keys: ``confirm_power``,
    ``confirm_cap`` and ``confirm_first_seed`` (the run's settings, else :mod:`fedbook.confirm`'s
    defaults), ``confirm_text`` and ``confirm_table``. Where ``confirm`` holds confirmatory
    records: what they decided and which verdict stands (:func:`read_confirmations`,
    :func:`confirmations_html`); else the plan the build's records in ``pilot`` give
    (:func:`fedbook.confirm.plan`, :func:`plan_summary`): the claims it would decide, the
    fresh seeds and the CPU time, and why the others are not planned.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from fedbook.claims import Claim, claims_records, evaluate
    >>> a = pathlib.Path(tempfile.mkdtemp())
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 1.0, resolution=0.1)
    >>> record = {"seconds": 60.0, "claims": claims_records([evaluate(c, [0.0, 2.0, 1.0])]), "seeds": {"seed": 0, "n_seeds": 3},
    ...           "cpu_seconds": 60.0, "studies": [{"study": "main", "cells": 3, "cached": 0, "cached_seconds": 0.0,
    ...                                             "computed_seconds": 45.0, "seeds": [0, 1, 2]}]}
    >>> _ = (a / "x_experiments.json").write_text(json.dumps(record))
    >>> R = confirm_numbers(a, a / "none", [("X", ["x_experiments"])])
    >>> R["confirm_power"], R["confirm_cap"], R["confirm_first_seed"]
    ('80 %', 40, 10000)
    >>> print(R["confirm_text"])
    No confirmatory run of this build exists yet. Its plan: of the 1 open claim, 1 would be decided with that power within the cap, on 10 fresh seeds in all (each chapter runs the most its claims need), about 3 CPU-minutes by this build's time per seed. The table gives the plan per paper; the command prints it claim by claim.
    """
    said = confirm_settings(confirm, {"power": confirmatory.POWER, "cap": confirmatory.CAP,
                                      "first_seed": confirmatory.FIRST_SEED})
    out = {"confirm_power": f"{100 * said['power']:g} %", "confirm_cap": said["cap"],
           "confirm_first_seed": said["first_seed"]}
    confirmed = read_confirmations(pilot, confirm, parts) if Path(confirm).is_dir() else None
    if confirmed is not None and len(confirmed):
        k, n = confirmed["chapter"].nunique(), len(confirmed)
        read = confirmed.loc[confirmed["stands"] == "confirmatory", "confirmatory verdict"]
        stale = int((confirmed["confirmatory verdict"] == _STALE).sum())
        unread = n - len(read) - stale
        other = ~read.isin([HOLDS, DOES_NOT_HOLD, INCONCLUSIVE])
        text = (f"A confirmatory run of this build ({k} chapter{'s' if k > 1 else ''}) was planned for {n} "
                f"claim{'s' if n > 1 else ''}. "
                + (f"It read {len(read)} of them on its fresh seeds alone, and those verdicts stand: "
                   f"{int((read == HOLDS).sum())} hold, {int((read == DOES_NOT_HOLD).sum())} do not hold, "
                   f"{int((read == INCONCLUSIVE).sum())} remain inconclusive"
                   + (f" and {int(other.sum())} are untestable there" if other.any() else "") + "."
                   if len(read) else "No verdict of its fresh seeds stands yet.")
                + (f" {stale} {'were' if stale > 1 else 'was'} planned from an earlier build of the pilot chapter "
                   "(rebuilt since), so the pilot's verdict stands until the run is planned and run again."
                   if stale else "")
                + (f" The run did not read {unread}, and the pilot's verdict stands there." if unread else "")
                + " The table gives each claim's verdict on the book's seeds and on the fresh seeds, and which one "
                "stands.")
        return {**out, "confirm_text": text, "confirm_table": confirmations_html(confirmed)}
    try:
        pending = confirmatory.plan(pilot)
    except ValueError as why:  # no records to plan from
        return {**out, "confirm_text": f"No confirmatory run of this build exists, and none can be planned yet: {why}.",
                "confirm_table": show_table(pd.DataFrame({"note": ["no plan"]}), index=False)}
    if pending.claims.empty:
        return {**out, "confirm_text": "This build leaves no claim open (inconclusive at this scale): there is nothing "
                "for a confirmatory run to decide.", "confirm_table": show_table(pd.DataFrame({"note": ["no open claim"]}),
                                                                                   index=False)}
    per_paper = plan_summary(pending, parts)
    total = per_paper.iloc[-1]
    minutes = float(total["CPU minutes"])
    cpu = ("its CPU time not estimated (a chapter's record keeps no studies to price it: rebuild the chapter)"
           if minutes != minutes else f"about {minutes:.0f} CPU-minutes by this build's time per seed" if minutes < 90
           else f"about {minutes / 60:.1f} CPU-hours by this build's time per seed")
    why = pending.claims.loc[pending.claims["planned_n"].isna(), "reason"].value_counts()
    n_open = int(total["open claims"])
    text = (f"No confirmatory run of this build exists yet. Its plan: of the {n_open} open claim{'s' if n_open != 1 else ''}, "
            f"{int(total['planned'])} would be decided with that power within the cap, on "
            f"{int(total['fresh seeds'])} fresh seeds in all (each chapter runs the most its claims need), "
            f"{cpu}"
            + (f"; the others are not planned ({'; '.join(f'{k}: {r}' for r, k in why.items())})" if len(why) else "")
            + ". The table gives the plan per paper; the command prints it claim by claim.")
    return {**out, "confirm_text": text, "confirm_table": show_table(per_paper, digits={"CPU minutes": 1}, index=False)}


__all__ = ["BAR_SEGMENTS", "CONFIRM_COLUMNS", "EXERCISE_KINDS", "FINDINGS_COLUMNS", "SHORTFALL_COLUMNS", "ZONES_FIGURE",
           "chapter_times", "chapter_title", "confirm_note", "confirm_numbers", "confirm_settings", "confirmations_html",
           "exercise_index", "exercise_numbers", "exercises", "findings_counts",
           "findings_html", "findings_numbers", "handout_cell", "paper_summaries", "nearest_decisions", "plan_summary",
           "plot_rule_zones", "plot_verdicts", "read_confirmations", "read_findings", "record_seconds", "short_quote",
           "timing_numbers", "toc_chapters", "verdict_changes", "with_confirmations", "write_rule_zones"]
