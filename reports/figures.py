"""Figures 3-5 as PNG (matplotlib, Agg backend), drawn from the data tables in ``reports.tables``.

A figure never computes a number of its own: it plots the cells of its data table, so the PNG, the
CSV and the HTML always agree. One PNG per backend; a panel without data says "not run".
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .provenance_marks import annotate_figure, table_notes
from .stats import format_delta, format_p
from .table import NA, NOT_RUN, Cell, Table

COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def value(c: Cell) -> float | None:
    """A cell as a number in %: accuracy cells by their shown value, text cells parsed."""
    if c.status == NOT_RUN:
        return None
    if c.value is not None:
        return c.shown
    try:
        v = float(c.text.replace(",", ""))
    except ValueError:
        return None
    return None if math.isnan(v) else v


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _empty(ax, title: str, why: str = NOT_RUN) -> None:
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="#888")
    ax.set_xticks([])
    ax.set_yticks([])


def _bars(ax, groups: list[str], series: list[tuple[str, list[float | None]]], title: str, ylabel: str) -> None:
    """Grouped bars; a missing value leaves a gap marked 'n/r' (not run)."""
    if not groups or not any(v is not None for _, vals in series for v in vals):
        _empty(ax, title)
        return
    width = 0.8 / max(1, len(series))
    for i, (label, vals) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        for x, v in zip(xs, vals):
            if v is None:
                ax.text(x, 1, "n/r", ha="center", va="bottom", fontsize=6, color="#888", rotation=90)
        if any(v is not None for v in vals):
            bars = ax.bar([x for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None], width,
                          label=label, color=COLORS[i % len(COLORS)])
            ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)  # a 0.0 bar stays visible as a number
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)


def _backends(t: Table) -> list[str]:
    out: list[str] = []
    for r in t.rows:
        if r.stub[0] and r.stub[0] not in out:
            out.append(r.stub[0])
    return out


def _rows_of(t: Table, backend: str) -> list:
    """Rows of one backend (continuation rows carry an empty backend label)."""
    out, cur = [], ""
    for r in t.rows:
        cur = r.stub[0] or cur
        if cur == backend:
            out.append(r)
    return out


# ------------------------------------------------------------------------------------ Figure 3

def figure3_png(t: Table, backend: str) -> bytes:
    rows = _rows_of(t, backend)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    n_stage = t.groups[0][1] if t.groups else len(t.columns)
    panels = [("(a) learning stages", 0, n_stage), ("(b) task-guided pathways", n_stage, len(t.columns))]
    for ax, (title, a, b) in zip(axes, panels):
        groups = [r.stub[1] for r in rows]
        series = [(t.columns[j], [value(r.cells[j]) for r in rows]) for j in range(a, b)]
        _bars(ax, groups, series, title, "accuracy (%)")
    annotate_figure(fig, f"Figure 3: ablations of SourceLearn ({backend})", table_notes(c for r in rows for c in r.cells))
    fig.tight_layout()
    return png_bytes(fig)


# ------------------------------------------------------------------------------------ Figure 4

def figure4_png(kinds: Table, cond: Table, cov: Table, acc: Table, backend: str) -> bytes:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (a, b), (c, d) = axes
    # (a) unit kinds: stacked shares per stage, averaged over the rows shown (pooled ALL rows when present)
    krows = [r for r in _rows_of(kinds, backend) if r.stub[2] != NA]
    pooled = [r for r in krows if r.stub[1].endswith("(ALL)")] or krows
    stages = list(dict.fromkeys(r.stub[2] for r in pooled))
    if stages:
        bottom = [0.0] * len(stages)
        for i, kind in enumerate(kinds.columns[:-1]):
            vals = []
            for st in stages:
                xs = [value(r.cells[i]) for r in pooled if r.stub[2] == st]
                xs = [x for x in xs if x is not None]
                vals.append(sum(xs) / len(xs) if xs else 0.0)
            a.bar(stages, vals, bottom=bottom, label=kind, color=COLORS[i % len(COLORS)])
            bottom = [x + y for x, y in zip(bottom, vals)]
        a.set_ylim(0, 100)
        a.set_ylabel("% of units", fontsize=8)
        a.set_title("(a) unit kinds", fontsize=10)
        a.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        _empty(a, "(a) unit kinds")
    # (b) explicit conditions: one line per source
    crows = [r for r in _rows_of(cond, backend) if any(value(x) is not None for x in r.cells)]
    if crows:
        for i, r in enumerate(crows):
            b.plot(cond.columns, [value(x) for x in r.cells], marker="o", label=r.stub[1],
                   color=COLORS[i % len(COLORS)])
        b.set_ylim(0, 100)
        b.set_ylabel("% of units with conditions", fontsize=8)
        b.set_title("(b) explicit conditions", fontsize=10)
        b.legend(fontsize=7)
        b.grid(alpha=0.3)
    else:
        _empty(b, "(b) explicit conditions")
    # (c) coverage of required claims: bars per stage, one series per source
    vrows = _rows_of(cov, backend)
    _bars(c, cov.columns, [(r.stub[1], [value(x) for x in r.cells]) for r in vrows], "(c) required claims represented",
          "% of claims")
    # (d) accuracy by coverage bin: pooled stages of every benchmark
    arows = _rows_of(acc, backend)
    pooled_acc = [r for r in arows if r.stub[2] == "all stages"] or arows
    _bars(d, [x.replace(" covered", "") for x in acc.columns[:3]],
          [(f"{r.stub[1]} ({r.stub[2]})", [value(x) for x in r.cells[:3]]) for r in pooled_acc],
          "(d) accuracy by coverage", "accuracy (%)")
    annotate_figure(fig, f"Figure 4: source learning beyond compression ({backend})",
                    table_notes(c for t in (kinds, cond, cov, acc) for r in _rows_of(t, backend) for c in r.cells))
    fig.tight_layout()
    return png_bytes(fig)


# ------------------------------------------------------------------------------------ Figure 5

def figure5_png(curve: Table, gold: Table | None, backend: str) -> bytes:
    """Panel (a) k = 8 -> 0 and, when the config names gold-removal benchmarks, panel (b)."""
    if gold is None:
        fig, a = plt.subplots(1, 1, figsize=(5.5, 3.8))
    else:
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    ks = [int(c.split("=")[1]) for c in curve.columns]
    rows = [r for r in _rows_of(curve, backend) if any(value(x) is not None for x in r.cells)]
    if rows:
        for i, r in enumerate(rows):
            pts = [(k, value(x)) for k, x in zip(ks, r.cells) if value(x) is not None]
            a.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{r.stub[1]}: {r.stub[2]}",
                   color=COLORS[i % len(COLORS)])
        a.set_xlim(max(ks) + 0.5, min(ks) - 0.5)  # k decreases left to right, as in the paper
        a.set_xticks(sorted(ks))
        a.set_ylim(0, 100)
        a.set_xlabel("retrieved elements k", fontsize=8)
        a.set_ylabel("accuracy (%)", fontsize=8)
        a.set_title("(a) fewer retrieved elements", fontsize=10)
        a.legend(fontsize=7)
        a.grid(alpha=0.3)
    else:
        _empty(a, "(a) fewer retrieved elements")
    if gold is not None:
        grows = _rows_of(gold, backend)
        _bars(b, [f"{r.stub[1]}\n{r.stub[2]}" for r in grows],
              [(gold.columns[j], [value(r.cells[j]) for r in grows]) for j in range(len(gold.columns))],
              "(b) gold document removed", "accuracy (%)")
    annotate_figure(fig, f"Figure 5: robustness to incomplete retrieval ({backend})",
                    table_notes(c for t in (curve, gold) if t is not None for r in _rows_of(t, backend) for c in r.cells))
    fig.tight_layout()
    return png_bytes(fig)


def render_figures(built: dict[str, list[Table]]) -> dict[str, bytes]:
    """``{file name: PNG bytes}`` for every figure present in ``built`` and every backend in it."""
    out: dict[str, bytes] = {}
    if "figure3" in built:
        t = built["figure3"][0]
        for b in _backends(t):
            out[f"figure3_{slug(b)}.png"] = figure3_png(t, b)
    if "figure4" in built:
        ts = built["figure4"]
        for b in dict.fromkeys(x for t in ts for x in _backends(t)):
            out[f"figure4_{slug(b)}.png"] = figure4_png(*ts, b)
    if "figure5" in built:
        curve, *rest = built["figure5"]
        gold = rest[0] if rest else None
        for b in dict.fromkeys(_backends(curve) + (_backends(gold) if gold else [])):
            out[f"figure5_{slug(b)}.png"] = figure5_png(curve, gold, b)
    return out


def slug(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in s)


# ------------------------------------------------------------------------------------ leaderboard forest plot

DEGRADED_COLOR = "#C44E52"


def forest_png(bench: dict) -> bytes:
    """One benchmark of the leaderboard as a forest plot, from the numbers its table shows.

    Left: each method's macro accuracy with its 95% bootstrap interval, the baseline's as a dashed line.
    Right: its difference from the baseline (pp, the paired Δ that is tested) with its interval (the
    paired test inverted) and the Holm-adjusted paired p written next to it. A DEGRADED or INCOMPLETE cell is drawn
    hollow in red and labelled, a method that did not run is named with 'not run'.
    """
    entries = bench["methods"]
    n = max(1, len(entries))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 1.2 + 0.45 * n), sharey=True,
                                      gridspec_kw={"width_ratios": [3, 2]})
    ys = list(range(n))[::-1]  # first entry (the baseline) on top
    labels = []
    base = next((e for e in entries if e.get("is_baseline") and e.get("status") == "ok"), None)
    for y, e in zip(ys, entries):
        degraded = bool(e.get("degraded")) or bool(e.get("incomplete"))
        label = (str(e["method"]) + (" (baseline)" if e.get("is_baseline") else "")
                 + (" DEGRADED" if e.get("degraded") else "") + (" INCOMPLETE" if e.get("incomplete") else ""))
        labels.append(label)
        if e.get("status") != "ok" or e.get("accuracy") is None or math.isnan(e["accuracy"]):
            left.text(0.5, y, str(e.get("status") or NOT_RUN), transform=left.get_yaxis_transform(), ha="center",
                      va="center", color="#888", fontsize=8)
            continue
        acc, lo, hi = (100 * e[k] if e.get(k) is not None else math.nan for k in ("accuracy", "ci_lo", "ci_hi"))
        color = DEGRADED_COLOR if degraded else ("#222" if e.get("is_baseline") else COLORS[0])
        face = "none" if degraded else color
        err = [[max(0.0, acc - lo)], [max(0.0, hi - acc)]] if not (math.isnan(lo) or math.isnan(hi)) else None
        left.errorbar([acc], [y], xerr=err, fmt="s" if e.get("is_baseline") else "o", color=color, mfc=face,
                      ecolor=color, capsize=3, markersize=6)
        left.text(acc, y + 0.18, f"{acc:.1f}", fontsize=7, color=color, ha="center", va="bottom")
        delta = e.get("delta_pp")
        if delta is not None:
            dlo, dhi = e.get("delta_lo"), e.get("delta_hi")
            derr = [[max(0.0, delta - dlo)], [max(0.0, dhi - delta)]] if dlo is not None and dhi is not None else None
            right.errorbar([delta], [y], xerr=derr, fmt="D", color=color, mfc=face, ecolor=color, capsize=3,
                           markersize=6)
            p = e.get("p_holm")
            ptext = "p n/a" if p is None else "p " + format_p(p)
            right.annotate(f"{format_delta(delta)} ({ptext})", (delta, y), xytext=(6, 4),
                           textcoords="offset points", fontsize=7, color=color)
        elif e.get("is_baseline"):
            right.text(0, y, " baseline", fontsize=7, color="#222", va="center")
    if base is not None:
        left.axvline(100 * base["accuracy"], color="#222", linestyle=":", linewidth=1)
    right.axvline(0, color="#222", linestyle=":", linewidth=1)
    left.set_yticks(ys)
    left.set_yticklabels(labels, fontsize=8)
    for tick, e in zip(left.get_yticklabels(), entries):
        if e.get("degraded") or e.get("incomplete"):
            tick.set_color(DEGRADED_COLOR)
    left.set_xlim(0, 100)
    left.set_ylim(-0.7, n - 0.3)
    left.set_xlabel("accuracy (%) with 95% CI", fontsize=8)
    deltas = [abs(e[k]) for e in entries for k in ("delta_pp", "delta_lo", "delta_hi") if e.get(k) is not None]
    span = max(deltas + [5.0]) * 1.6
    right.set_xlim(-span, span)
    right.set_xlabel(f"Δ vs {bench.get('baseline')} (pp, paired) with 95% CI, p (Holm)", fontsize=8)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
    annotate_figure(fig, f"{bench['benchmark']}: accuracy and difference from the baseline",
                    list(bench.get("substitutes", {}).values()))
    fig.tight_layout()
    return png_bytes(fig)
