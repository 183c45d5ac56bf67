"""The format-neutral table every paper table is built into, and the arithmetic on its cells.

Numbers are computed once into ``Cell``s (accuracy as a fraction, its interval, the change relative
to the baseline, the best/second mark); ``reports.render`` only lays them out as Markdown, CSV,
LaTeX or HTML, so the four files cannot disagree.

Display rules (stated in every caption that uses them):

- accuracy is shown in % with one decimal;
- Δ is computed from the *displayed* values (shown accuracy minus shown baseline accuracy), so the
  printed arithmetic always checks out; the CSV also holds the unrounded difference;
- best and second best compare displayed values: every cell with the highest shown value is best,
  every cell with the next lower shown value is second; nothing is marked with fewer than two values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .stats import bootstrap_ci, holm_by_family, macro_accuracy, paired_test

NA = "—"
NOT_RUN = "not run"


@dataclass
class Cell:
    """One table cell: an accuracy (``value``, fraction) with its statistics, or a preformatted text."""

    value: float | None = None
    text: str = ""  # preformatted content for non-accuracy cells (counts, tokens, percentages)
    delta: float | None = None  # pp, from displayed values
    delta_exact: float | None = None  # pp, unrounded
    mark: str = ""  # "best" | "second" | ""
    ci: tuple[float, float] | None = None
    n: int | None = None  # distinct test tasks behind the value
    status: str = "ok"  # "ok" | "not run"
    reason: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list, repr=False)  # result rows, for paired tests
    # why the cells behind this value are degraded (harness/health.py); shown with a dagger and a note
    degraded: list[str] = field(default_factory=list)
    # footnotes of the sources behind this value that are not their pinned tree (reports/provenance_marks.py)
    substitute: list[str] = field(default_factory=list)

    @property
    def shown(self) -> float | None:
        """The value as printed (%, one decimal), the basis of deltas and marks."""
        return None if self.value is None or math.isnan(self.value) else float(f"{100.0 * self.value:.1f}")


@dataclass
class Row:
    stub: list[str]
    cells: list[Cell]
    rule: bool = False  # a separator before this row (LaTeX \midrule)


@dataclass
class ReportTable:
    id: str
    title: str
    caption: list[str]
    stub_header: list[str]
    columns: list[str]
    rows: list[Row] = field(default_factory=list)
    groups: list[tuple[str, int]] = field(default_factory=list)  # spanning headers over the data columns
    notes: list[str] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)  # paired comparisons against a baseline
    show_ci: bool = False


def not_run(reason: str) -> Cell:
    return Cell(status=NOT_RUN, reason=reason)


def text_cell(text: str) -> Cell:
    return Cell(text=text)


def accuracy_cell(rows: list[dict[str, Any]], n_boot: int, seed: int, why_not: str = "") -> Cell:
    """Macro accuracy (sources, then seeds) with its seeded source-stratified bootstrap interval."""
    if not rows:
        return not_run(why_not or "no results")
    lo, hi = bootstrap_ci(rows, n_boot=n_boot, seed=seed)
    return Cell(value=macro_accuracy(rows), ci=(lo, hi), n=len({(r["source"], r["task_id"]) for r in rows}),
                rows=rows)


def mean_cell(values: list[float]) -> Cell:
    """A plain mean of accuracies (e.g. over benchmarks); no interval."""
    return Cell(value=sum(values) / len(values)) if values else not_run("no values to average")


def set_delta(cell: Cell, base: Cell) -> None:
    if cell.shown is None or base.shown is None:
        return
    cell.delta = round(cell.shown - base.shown, 1)
    cell.delta_exact = 100.0 * (cell.value - base.value)  # type: ignore[operator]


def mark_best(cells: list[Cell]) -> None:
    """Bold the highest displayed value(s), underline the next distinct one(s)."""
    shown = sorted({c.shown for c in cells if c.shown is not None}, reverse=True)
    if sum(c.shown is not None for c in cells) < 2:
        return
    for c in cells:
        if c.shown is None:
            continue
        if c.shown == shown[0]:
            c.mark = "best"
        elif len(shown) > 1 and c.shown == shown[1]:
            c.mark = "second"


def pct_text(x: float | None, digits: int = 1) -> str:
    return NA if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def tokens_text(x: float | None) -> str:
    """Token counts as in the paper's Table 2: 16.5k (thousands, one decimal), small counts as is."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return NA
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def compare(items: list[tuple[dict[str, Any], Cell, Cell]], seed: int, n_resamples: int) -> list[dict[str, Any]]:
    """Paired tests (task as unit, ``stats.paired_test``) of each cell against its baseline cell, in list
    order, Holm-adjusted within each family of ``stats.HOLM_FAMILY``: the labels' (backend, benchmark).

    ``items`` are (labels, cell, baseline cell), the labels naming at least the backend and benchmark;
    pairs missing either side are listed untested and do not count in their family.
    """
    out: list[dict[str, Any]] = []
    for labels, cell, base in items:
        delta = None if cell.value is None or base.value is None else 100.0 * (cell.value - base.value)
        rec: dict[str, Any] = {**labels, "delta_pp": delta, "test": None, "n_pairs": 0, "p_value": None}
        if cell.rows and base.rows:
            t = paired_test(cell.rows, base.rows, seed=seed, n_resamples=n_resamples)
            rec.update(test=t["test"], n_pairs=t["n_pairs"], n_paired_rows=t["n_paired_rows"],
                       p_value=t["p_value"], p_exact=t["exact"],
                       mean_diff_pp=None if t["mean_diff"] is None else 100.0 * t["mean_diff"])
        out.append(rec)
    families = [(r["backend"], r["benchmark"]) for r in out]
    adjusted, sizes = holm_by_family([r["p_value"] for r in out], families)
    for r, p, m in zip(out, adjusted, sizes):
        r["p_holm"], r["holm_m"] = p, m
    return out


def column_groups(labels: list[str | None]) -> list[tuple[str, int]]:
    """Runs of equal group labels over consecutive columns; empty when no column has a group."""
    if not any(labels):
        return []
    out: list[tuple[str, int]] = []
    for lab in labels:
        lab = lab or ""
        if out and out[-1][0] == lab:
            out[-1] = (lab, out[-1][1] + 1)
        else:
            out.append((lab, 1))
    return out


TEST_LABELS = {"mcnemar_exact": "McNemar (exact)", "paired_permutation": "sign-flip", None: NA}


def describe_test(s: dict[str, Any]) -> str:
    """'McNemar (exact)', 'sign-flip, exact' or 'sign-flip, 9999 draws': the test and how p was found."""
    label = TEST_LABELS.get(s.get("test"), str(s.get("test")))
    if s.get("test") != "paired_permutation":
        return label
    return f"{label}, exact" if s.get("p_exact") else f"{label}, sampled"


def p_text(p: float | None) -> str:
    if p is None:
        return NA
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def stats_table(t: ReportTable) -> ReportTable | None:
    """The paired comparisons behind a table, as a table of their own (None when there are none)."""
    if not t.stats:
        return None
    rows = []
    for s in t.stats:
        rows.append(Row([s.get("backend", ""), s.get("column", "")], [
            text_cell(str(s.get("method", ""))), text_cell(str(s.get("baseline", ""))),
            text_cell(NA if s.get("delta_pp") is None else f"{s['delta_pp']:+.1f}"),
            text_cell(describe_test(s)), text_cell(str(s.get("n_pairs", 0))),
            text_cell(p_text(s.get("p_value"))), text_cell(p_text(s.get("p_holm"))),
            text_cell(str(s["holm_m"]) if s.get("p_value") is not None else NA)]))
    return ReportTable(f"{t.id}_stats", f"{t.title.split(':')[0]}: paired comparisons", [
        ("Δ: unrounded difference in accuracy points (method minus baseline) over all rows of the cell. "
         "Paired tasks: the unit of the test, tasks both sides scored on at least one split seed (a task's "
         "difference is averaged over those seeds; sampled: seeded random sign patterns, see the table's "
         "caption). p (Holm): adjusted within the family named in the table's caption (one per backend and benchmark); m: the "
         "tested comparisons of that family.")], ["Backend", "Column"],
        ["Method", "Baseline", "Δ (pp)", "Test", "Paired tasks", "p", "p (Holm)", "m"], rows)


DAGGER = "\u2020"


def degraded_notes(t: ReportTable) -> list[str]:
    """The table's notes plus one naming every degraded cell behind a marked value (a value built on
    cells that lost more than the allowed share of their work is not comparable with healthy ones)."""
    reasons = list(dict.fromkeys(x for r in t.rows for c in r.cells for x in c.degraded))
    if not reasons:
        return list(t.notes)
    return [*t.notes, f"{DAGGER} DEGRADED, not comparable with healthy cells: " + " | ".join(reasons)]
