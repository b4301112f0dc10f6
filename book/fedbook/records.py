"""The build's records and the book's own index: what the findings and teaching pages read.

``book/build.py`` executes every chapter and writes a **record** beside it
(``<out>/chapters/<name>.json``): its cache key, its parameters, the seconds it took and, for a
chapter with a claims table, the rows that :func:`fedbook.page.claims_report` glued under
:data:`CLAIMS_RECORDS`. The book's **index** is its table of contents (``book/_toc.yml``:
:func:`toc_chapters`) and the chapters' jupytext sources (their titles, :func:`chapter_title`, and
their exercises, :func:`exercises`).

Two pages read them and train nothing of their own (bar the teaching page's small demonstration):

- the findings page: every claim of every chapter (:func:`read_findings`), counted per paper
  (:func:`findings_counts`), as one filterable table (:func:`findings_html`, quotations shortened
  by :func:`short_quote`);
- the teaching page: each chapter's execution time at the smoke and book profiles
  (:func:`record_seconds`, :func:`chapter_times`) and every chapter's exercises
  (:func:`exercise_index`).

This module sits below :mod:`fedbook.page` (which glues :data:`CLAIMS_RECORDS`) and reads only
files: nothing here executes a chapter.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd
import yaml

from fedbook.claims import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, VERDICT_COLOURS
from fedbook.tables import Html
from fedlib.validation import is_int

CLAIMS_RECORDS = "claims_records"
"""The key (after the chapter's prefix) under which :func:`fedbook.page.claims_report` glues its
rows as JSON (:func:`fedbook.claims.claims_records`); ``book/build.py`` copies them into the
chapter's build record, which the findings page reads (:func:`read_findings`)."""


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
                    "interval", "n", "unit", "seeds to decide", "anchor")
"""The columns of :func:`read_findings`: the part of the table of contents (the paper), the
chapter, and the fields of each claim's record (:func:`fedbook.claims.claims_records`), ``interval``
being the table's ``ours`` without its trailing count of seeds."""


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
    :data:`CLAIMS_RECORDS` into ``<folder>/<name>.json``), in the book's order, the paper being the
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
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", 0.5, resolution=0.1)
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
                rows.append({"paper": part, "chapter": name, "key": r["key"], "kind": r["kind"], "headline": r["headline"],
                             "quote": r["quote"], "source": r["source"], "quantity": r["quantity"], "verdict": r["verdict"],
                             "interval": _interval_only(r["ours"], r["n"], r["unit"]), "n": r["n"], "unit": r["unit"],
                             "seeds to decide": r["seeds_to_decide"], "anchor": r["anchor"]})
    return pd.DataFrame(rows, columns=list(FINDINGS_COLUMNS)), missing


def findings_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """The verdicts per paper (controls not counted, as in each chapter's report): one row per
    paper of ``frame`` (:func:`read_findings`) in its order and a last row ``"all papers"``;
    columns ``claims``, one per verdict, ``headline claims`` and ``headline decided``.

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

    def row(part: pd.DataFrame) -> dict:
        head = part[part["headline"].astype(bool)]
        return {"claims": len(part), **{v: int((part["verdict"] == v).sum()) for v in (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE)},
                "headline claims": len(head), "headline decided": int((head["verdict"] != INCONCLUSIVE).sum())}

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
    ...     "interval": "+2.0 [+1.3, +2.7]", "n": 3, "unit": "seeds", "seeds to decide": "decided", "anchor": "T_c_row0_col0"}])
    >>> h = findings_html(f)
    >>> 'href="a_experiments.html#T_c_row0_col0"' in h._repr_html_(), 'data-verdict="holds"' in h._repr_html_()
    (True, True)
    >>> repr(h)
    'A | “X beats Y.” (Table 2; headline) | holds | +2.0 [+1.3, +2.7] | 3 seeds | decided'
    """
    from html import escape

    missing = [c for c in FINDINGS_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"findings_html needs the columns of read_findings, missing {missing}")
    papers = list(dict.fromkeys(frame["paper"]))
    verdicts = [v for v in (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE) if v in set(frame["verdict"])]

    def options(values: list[str], every: str) -> str:
        return f'<option value="">{every}</option>' + "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)

    def claim_cell(r: dict) -> tuple[str, str]:
        where = f"{r['source']}; headline" if r["headline"] else r["source"]
        quote = short_quote(r["quote"])
        text = f"Control: {quote}" if r["kind"] == "control" else f"\N{LEFT DOUBLE QUOTATION MARK}{quote}\N{RIGHT DOUBLE QUOTATION MARK}"
        link = f'<a href="{escape(r["chapter"])}.html#{escape(r["anchor"])}">{escape(text)}</a>'
        return f"{link} ({escape(where)})<br><small>{escape(r['quantity'])}</small>", f"{text} ({where})"

    body, lines = [], []
    for r in frame.to_dict("records"):
        cell, plain = claim_cell(r)
        n, unit = int(r["n"]), r["unit"]
        seeds = f"{n} {unit[:-1] if n == 1 and unit.endswith('s') else unit}"
        colour = VERDICT_COLOURS.get(r["verdict"], "transparent")
        body.append(
            f'<tr data-paper="{escape(r["paper"])}" data-verdict="{escape(r["verdict"])}" data-kind="{escape(r["kind"])}">'
            f"<td>{escape(r['paper'])}</td><td>{cell}</td>"
            f'<td style="background-color: {colour}">{escape(r["verdict"])}</td>'
            f"<td>{escape(r['interval'])}</td><td>{escape(seeds)}</td><td>{escape(r['seeds to decide'])}</td></tr>"
        )
        lines.append(" | ".join([r["paper"], plain, r["verdict"], r["interval"], seeds, r["seeds to decide"]]))
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



__all__ = ["CLAIMS_RECORDS", "EXERCISE_KINDS", "FINDINGS_COLUMNS", "chapter_times", "chapter_title", "exercise_index",
           "exercises", "findings_counts", "findings_html", "read_findings", "record_seconds", "short_quote",
           "toc_chapters"]
