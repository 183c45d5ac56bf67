"""The paper's tables and figures of a ``sourcebench reproduce`` output root (``write_reports``).

Rendering only reads the root (``reports.results``): the run folders, the status of every cell and
the derived files. Running the cells and deriving those files is the application tier's
(``harness/cli/reproduce/``), so a report can be rewritten at any time (``--render-only``) without a
model.
"""

from __future__ import annotations

import re
from pathlib import Path

from sourcebench.harness.io import atomic_write_text

from .config import ExperimentConfig
from .grid import ReportTable, stats_table
from .results import Results, report_dir

STALE_SUFFIXES = {".md", ".csv", ".tex", ".html", ".png"}  # report outputs a re-render may remove
STALE_NAME = re.compile(r"(table|figure)\d")


def write_reports(cfg: ExperimentConfig, root: Path) -> dict[str, Path]:
    """Every table as .md/.csv/.tex/.html, figures as PNG, report.md and the self-contained index.html."""
    from .figures import render_figures
    from .html import render_report
    from .render import to_csv, to_html, to_latex, to_markdown
    from .tables import build_all

    out = report_dir(root, cfg.name)
    res = Results(cfg, root)
    built = build_all(res)
    figures = render_figures(built)
    paths: dict[str, Path] = {}
    md_parts = [f"# SourceBench reproduction: {cfg.name}", ""]
    for tid, tables in built.items():
        for t in tables:
            extra = [st for st in [stats_table(t)] if st is not None]
            for tab in [t] + extra:
                for ext, fn in (("md", to_markdown), ("csv", to_csv), ("tex", to_latex), ("html", to_html)):
                    p = out / f"{tab.id}.{ext}"
                    atomic_write_text(p, fn(tab))
                    paths[f"{tab.id}.{ext}"] = p
                md_parts.append(to_markdown(tab))
        md_parts += [f"![{n}]({n})" for n in figures if n.startswith(tid + "_")] + [""]
    for name, png in figures.items():
        p = out / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(png)
        paths[name] = p
    atomic_write_text(out / "report.md", "\n".join(md_parts))
    paths["report.md"] = out / "report.md"
    atomic_write_text(out / "index.html", render_report(cfg, res, built, figures, out))
    paths["index.html"] = out / "index.html"
    # a table or figure this config no longer produces (a table disabled, Figure 5b without gold-removal
    # benchmarks) must not stay beside the new ones looking current; other files are left alone
    for p in out.iterdir():
        if p.name not in paths and p.suffix in STALE_SUFFIXES and STALE_NAME.match(p.name):
            p.unlink()
    return paths


__all__ = ["ReportTable", "write_reports"]
