"""The arithmetic on the cells of the paper tables (``reports.table``'s one model).

Numbers are computed once into ``Cell``s (accuracy as a fraction, its interval, the change relative
to the baseline, the best/second mark); ``reports.layout`` (Markdown, HTML) and ``reports.export``
(CSV, LaTeX) only lay them out, so the four files cannot disagree.

Display rules (stated in every caption that uses them):

- accuracy is shown in % with one decimal;
- Δ is the statistic the paired test tests (``stats.paired_test``): the source-stratified mean of per-task
  differences on the tasks both cells scored, rounded to one decimal (``stats.format_delta``); it is
  the shown accuracy difference only when both cells cover the same tasks in the same seeds; a cell
  missing tasks its baseline has (or the reverse) is INCOMPLETE;
- best and second best compare displayed values of healthy, complete cells: every such cell with the
  highest shown value is best, with the next lower shown value second; a degraded or incomplete cell is
  never marked; nothing is marked with fewer than two values.
"""

from __future__ import annotations

import math
from typing import Any

from .stats import (
    MIN_PAIRS,
    accuracy_ci,
    format_delta_interval,
    format_p,
    holm_by_family,
    macro_accuracy,
    min_detectable_effect,
    paired_delta,
    paired_test,
)
from .table import NA, NOT_RUN, Cell, Row, Table


def paper_table(id: str, title: str, caption: list[str], stub_header: list[str], columns: list[str],
                rows: list[Row] | None = None, groups: list[tuple[str, int]] | None = None, show_ci: bool = False,
                notes: list[str] | None = None, stats: list[dict[str, Any]] | None = None) -> Table:
    """A paper table: ``stub_header`` label columns, then one data column per ``columns`` entry."""
    return Table(title, [*stub_header, *columns], list(rows or []), id=id, stub=len(stub_header),
                 caption=list(caption), groups=list(groups or []), notes=list(notes or []), stats=list(stats or []),
                 show_ci=show_ci)


def not_run(reason: str) -> Cell:
    return Cell(status=NOT_RUN, reason=reason)


def text_cell(text: str) -> Cell:
    return Cell(text=text)


def accuracy_cell(rows: list[dict[str, Any]], n_boot: int, seed: int, why_not: str = "") -> Cell:
    """Macro accuracy (sources, then seeds) with its design-effect Wilson interval (``stats.CI_METHOD``)."""
    if not rows:
        return not_run(why_not or "no results")
    lo, hi = accuracy_ci(rows)
    return Cell(value=macro_accuracy(rows), ci=(lo, hi), n=len({(r["source"], r["task_id"]) for r in rows}),
                rows=rows)


def set_delta(cell: Cell, base: Cell) -> None:
    """Δ of ``cell`` against ``base``: the paired statistic where both have rows (the one tested), else
    (a mean over benchmarks, which has no rows) the difference of the displayed values."""
    if cell.shown is None or base.shown is None:
        return
    if cell.rows and base.rows:
        d = paired_delta(cell.rows, base.rows)
        if d["mean_diff"] is None:
            cell.incomplete = "no task in common with its baseline"
            return
        cell.delta_exact = 100.0 * d["mean_diff"]
        cell.delta = round(cell.delta_exact, 1)
        if d["a_missing"] or d["b_missing"]:
            cell.incomplete = (f"{d['a_missing']} of the baseline's {d['n_tasks_b']} tasks missing, the baseline "
                               f"lacks {d['b_missing']} of its {d['n_tasks_a']}; Δ on {d['n_pairs']} paired tasks")
        return
    cell.delta = round(cell.shown - base.shown, 1)
    cell.delta_exact = 100.0 * (cell.value - base.value)  # type: ignore[operator]


def comparable(c: Cell) -> bool:
    """A cell that may be marked best: neither degraded nor incomplete."""
    return not c.degraded and not c.incomplete


def mark_best(cells: list[Cell]) -> None:
    """Bold the highest displayed value(s), underline the next distinct one(s); degraded or incomplete
    cells are neither marked nor counted."""
    ok = [c for c in cells if c.shown is not None and comparable(c)]
    shown = sorted({c.shown for c in ok}, reverse=True)
    if len(ok) < 2:
        return
    for c in ok:
        if c.shown == shown[0]:
            c.mark = "best"
        elif len(shown) > 1 and c.shown == shown[1]:
            c.mark = "second"


def tokens_text(x: float | None) -> str:
    """Token counts as in the paper's Table 2: 16.5k (thousands, one decimal), small counts as is."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return NA
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def compare(items: list[tuple[dict[str, Any], Cell, Cell]], seed: int, n_resamples: int,
            n_boot: int = 2000) -> list[dict[str, Any]]:
    """Paired tests (group as unit within sources, ``stats.paired_test``) of each cell against its baseline
    cell, in list order, Holm-adjusted within each family of ``stats.HOLM_FAMILY``: the labels' (backend,
    benchmark); each comparison also gets its Δ interval and its minimum detectable effect after Holm.

    ``items`` are (labels, cell, baseline cell), the labels naming at least the backend and benchmark;
    pairs missing either side are listed untested and do not count in their family.
    """
    out: list[dict[str, Any]] = []
    for labels, cell, base in items:
        rec: dict[str, Any] = {**labels, "delta_pp": None, "test": None, "n_pairs": 0, "p_value": None,
                               "degraded": bool(cell.degraded or base.degraded), "incomplete": ""}
        if cell.rows and base.rows:
            t = paired_test(cell.rows, base.rows, seed=seed, n_resamples=n_resamples, n_boot=n_boot)
            pp = (lambda x: None if x is None else 100.0 * x)
            rec.update(test=t["test"], n_pairs=t["n_pairs"], n_groups=t["n_groups"],
                       n_paired_rows=t["n_paired_rows"], p_value=t["p_value"], p_exact=t["exact"],
                       p_mc_se=t["p_mc_se"], delta_pp=pp(t["mean_diff"]), ci_lo_pp=pp(t["ci_lo"]),
                       ci_hi_pp=pp(t["ci_hi"]), null_se=t["null_se"], reason=t.get("reason", ""),
                       mean_diff_pp=pp(t["mean_diff"]))
            if t["a_missing"] or t["b_missing"]:
                rec["incomplete"] = f"{t['a_missing']} / {t['b_missing']} tasks missing"
            if t["ci_lo"] is not None:
                cell.delta_ci = (100.0 * t["ci_lo"], 100.0 * t["ci_hi"])
        out.append(rec)
    families = [(r["backend"], r["benchmark"]) for r in out]
    adjusted, sizes = holm_by_family([r["p_value"] for r in out], families)
    for r, p, m in zip(out, adjusted, sizes):
        r["p_holm"], r["holm_m"] = p, m
        mde = min_detectable_effect(r.get("null_se"), max(1, m))
        r["mde_pp"] = None if mde is None else 100.0 * mde
        r["resolvable"] = None if mde is None or r["delta_pp"] is None else abs(r["delta_pp"]) >= r["mde_pp"]
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


def p_text(p: float | None, mc_se: float | None = None) -> str:
    return NA if p is None else format_p(p, mc_se)


def _delta_cell(s: dict[str, Any]) -> str:
    if s.get("delta_pp") is None:
        return NA
    if s.get("n_pairs", 0) < MIN_PAIRS:
        return f"{NA} ({s.get('n_pairs', 0)} pairs)"
    return format_delta_interval(s["delta_pp"], s.get("ci_lo_pp"), s.get("ci_hi_pp"), s.get("reason"))


def _flag(s: dict[str, Any]) -> str:
    marks = (["DEGRADED"] if s.get("degraded") else []) + ([f"INCOMPLETE ({s['incomplete']})"]
                                                            if s.get("incomplete") else [])
    return "; ".join(marks) or "ok"


def _mde_cell(s: dict[str, Any]) -> str:
    if s.get("mde_pp") is None:
        return NA
    return f"{s['mde_pp']:.1f}" + (" (not resolvable by this run)" if s.get("resolvable") is False else "")


def stats_table(t: Table) -> Table | None:
    """The paired comparisons behind a table, as a table of their own (None when there are none)."""
    if not t.stats:
        return None
    rows = []
    for s in t.stats:
        pairs = f"{s.get('n_pairs', 0)} ({s['n_groups']} groups)" if s.get("n_groups") is not None else \
            str(s.get("n_pairs", 0))
        rows.append(Row([s.get("backend", ""), s.get("column", "")], [
            text_cell(str(s.get("method", ""))), text_cell(str(s.get("baseline", ""))),
            text_cell(_delta_cell(s)), text_cell(describe_test(s)), text_cell(pairs),
            text_cell(p_text(s.get("p_value"), s.get("p_mc_se"))), text_cell(p_text(s.get("p_holm"))),
            text_cell(str(s["holm_m"]) if s.get("p_value") is not None else NA), text_cell(_mde_cell(s)),
            text_cell(_flag(s))]))
    return paper_table(f"{t.id}_stats", f"{t.title.split(':')[0]}: paired comparisons", [
        ("Δ: the tested statistic, the mean over sources of the mean per-task difference (method minus "
         "baseline, seeds averaged within a task) on the paired tasks, in points, with its 95% interval, the "
         "paired test inverted (the shifts its sign-flip test of the differences minus the shift does not reject at "
         "5%, so it excludes 0 exactly when p < 0.05; \"—\" with too few groups; conditional on the fixed "
         "sources and the learned artifacts). Paired tasks: the tasks both sides scored on at least one split "
         "seed, in "
         "that many groups, the unit of the test (a group's tasks flip sign together; sampled: seeded random "
         "sign patterns, the p's Monte Carlo standard error in parentheses). p (Holm): adjusted within the "
         "family named in the table's caption (one per backend and benchmark); m: the tested comparisons of "
         "that family. MDE: the smallest |Δ| detected with 80% power at the Holm threshold 0.05 / m, from the "
         f"observed discordance; with fewer than {MIN_PAIRS} paired tasks or identical answers nothing is tested "
         "(—). Health: DEGRADED (a side lost more than the allowed share of its work) or INCOMPLETE (a side "
         "lacks tasks the other scored): such a comparison is not a result to report as is.")],
        ["Backend", "Column"],
        ["Method", "Baseline", "Δ (pp) [95% CI]", "Test", "Paired tasks (groups)", "p", "p (Holm)", "m",
         "MDE 80% (pp)", "Health"], rows)
