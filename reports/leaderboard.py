"""The leaderboard report of a run folder: ``leaderboard.md``, ``leaderboard.csv``, ``leaderboard.html``.

Everything is recomputed from the files of the run folder (docs/results-format.md) with a seed, so a
report can be regenerated at any time and gives the same numbers. The numbers are computed once
(``board.summarize``) into plain dicts, laid out once as neutral tables (``board.build_sections``),
and only then written as Markdown and HTML (``layout``) and CSV (here), so the three files cannot
disagree. The pages put the result first: banners saying what the numbers are not (a scripted-model
run, a run too small to resolve a difference), each benchmark's table and figure, and below them,
folded, the other tables, the definitions, the deviations and the provenance.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from sourcebench.harness.io import atomic_write_text

from .board import banners, build_sections, definitions, deviation_lines, provenance_tables, summarize
from .layout import Figure, Page, render_html, render_markdown
from .rundata import PHASES, load_run
from .stats import sort_key
from .text import safe


def _num(x: Any, fmt: str = "{:.4f}") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return fmt.format(x)


def _pct_num(x: float | None) -> str:
    return _num(None if x is None else 100.0 * x)


def render_csv(summary: list[dict], seeds: list[Any]) -> str:
    """One row per benchmark x method; percentages in %, empty cells where a number does not exist."""
    phases = [*PHASES, *sorted({p for b in summary for e in b["methods"] for p in e["cost"]} - set(PHASES))]
    header = [
        "benchmark",
        "method",
        "status",
        "is_baseline",
        "accuracy_pct",
        "ci_lo_pct",
        "ci_hi_pct",
        "delta_pp",
        "delta_ci_lo_pp",
        "delta_ci_hi_pp",
        "mde_pp",
        "resolvable",
        "incomplete",
        "a_missing_tasks",
        "baseline_missing_tasks",
        "test",
        "n_pairs",
        "n_groups",
        "untested_reason",
        "n_paired_rows",
        "p_exact",
        "p_value",
        "p_mc_se",
        "p_holm",
        "holm_family_size",
        "n_tasks",
        "n_rows",
        "failed_rows",
        "failed_share_pct",
        "seed_mean_pct",
        "seed_sd_pct",
        "learning_sd_pct",
        "n_common_tasks",
        *[f"acc_seed{s}_pct" for s in seeds],
    ]
    header += [f"{p}_{w}" for p in phases for w in ("calls", "calls_live", "tokens", "tokens_live", "failed")]
    header += ["failed_calls"] + [f"{p}_reasoning_tokens" for p in phases] + ["degraded", "substitute_sources"]
    header += ["epochs", "within_task_sd_pct", "n_epoch_tasks"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for b in summary:
        for e in b["methods"]:
            row = [
                safe(b["benchmark"]),
                safe(e["method"]),
                e["status"],
                int(e["is_baseline"]),
                _pct_num(e.get("accuracy")),
                _pct_num(e.get("ci_lo")),
                _pct_num(e.get("ci_hi")),
                _num(e.get("delta_pp")),
                _num(e.get("delta_lo")),
                _num(e.get("delta_hi")),
                _num(e.get("mde_pp")),
                "" if e.get("resolvable") is None else int(e["resolvable"]),
                "" if e.get("incomplete") is None else int(e["incomplete"]),
                _num(e.get("a_missing"), "{}"),
                _num(e.get("b_missing"), "{}"),
                e.get("test") or "",
                _num(e.get("n_pairs"), "{}"),
                _num(e.get("n_groups"), "{}"),
                safe(e.get("untested") or ""),
                _num(e.get("n_paired_rows"), "{}"),
                "" if e.get("p_exact") is None else int(e["p_exact"]),
                _num(e.get("p_value"), "{:.6g}"),
                _num(e.get("p_mc_se"), "{:.2g}"),
                _num(e.get("p_holm"), "{:.6g}"),
                _num(e.get("holm_m") if e.get("p_value") is not None else None, "{}"),
                e.get("n_tasks", 0),
                e.get("n_rows", 0),
                e.get("failed_rows", 0),
                _pct_num(e.get("failed_share")),
                _pct_num(e.get("seed_mean")),
                _pct_num(e.get("seed_sd")),
                _pct_num(e.get("learning_sd")),
                _num(e.get("n_common_tasks"), "{}"),
                *[_pct_num(e.get("seed_acc", {}).get(s)) for s in seeds],
            ]
            for p in phases:
                c = e["cost"].get(p, {})
                row += [c.get(k, 0) for k in ("calls", "calls_live", "tokens", "tokens_live", "failed")]
            w.writerow(row + [e["failed_calls"]] + [e["cost"].get(p, {}).get("reasoning", 0) for p in phases]
                       + ["; ".join(safe(x) for x in e.get("degraded") or [])]
                       + [" ".join(b.get("substitutes", {}).values())]  # footnotes: sources not at their pin
                       + [_num(e.get("epochs"), "{}"), _pct_num(e.get("within_task_sd")),
                          _num(e.get("n_epoch_tasks") if e.get("within_task_sd") is not None else None, "{}")])
    return buf.getvalue()


def write_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    baseline: str = "hybrid_rag",
    seed: int = 0,
    n_boot: int = 2000,
    protocols: list[str] | None = None,
    data_dir: str | Path | None = None,
) -> dict[str, Path]:
    """Write leaderboard.md/.csv/.html into ``out_dir`` (default ``<run_dir>/report``), and a task-by-task
    page per method (``compare``) that the leaderboard links; return the leaderboard's paths.

    ``protocols`` (names from ``reports.protocols.PROTOCOLS``) appends their sections to the Markdown
    and HTML; ``None`` means the run's defaults (``default_protocols``), ``[]`` none. ``data_dir`` is
    where the key-overlap protocol finds the benchmark data.
    """
    from .compare import write_task_pages
    from .protocols import default_protocols, parse_protocols

    data = load_run(run_dir)
    out = Path(out_dir) if out_dir is not None else data.run_dir / "report"
    summary = summarize(data, baseline=baseline, seed=seed, n_boot=n_boot)
    sections: list[Any] = build_sections(data, summary, write_task_pages(data, summary, out, baseline))
    names = default_protocols(data) if protocols is None else parse_protocols(protocols)
    if names:
        from .protocols.render import protocol_sections

        sections += protocol_sections(data, names, baseline=baseline, data_dir=Path(data_dir) if data_dir else None,
                                      seed=seed)
    page = Page(
        title=f"SourceBench leaderboard: run {safe(data.run.get('run_id') or data.run_dir.name)}",
        sections=sections,
        banners=banners(data, summary),
        notes=[("Definitions and statistics", definitions(data, baseline, seed, n_boot)),
               ("Deviations from the official methods and benchmark", deviation_lines(data.run))],
        provenance=provenance_tables(data, seed, n_boot),
    )
    seeds = sorted({s for b in summary for e in b["methods"] for s in e.get("seed_acc", {})}, key=sort_key)
    paths = {"md": out / "leaderboard.md", "csv": out / "leaderboard.csv", "html": out / "leaderboard.html"}
    atomic_write_text(paths["md"], render_markdown(page))
    atomic_write_text(paths["csv"], render_csv(summary, seeds))
    atomic_write_text(paths["html"], render_html(page))
    for f in (t for s in page.parts() for t in [*s.items, *s.folded] if isinstance(t, Figure)):
        paths[f.filename] = out / f.filename
        paths[f.filename].write_bytes(f.png)
    return paths
