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
from .grid import stats_table
from .results import Results, report_dir

STALE_SUFFIXES = {".md", ".csv", ".tex", ".html", ".png"}  # report outputs a re-render may remove
STALE_NAME = re.compile(r"(table|figure)\d")


def write_reports(cfg: ExperimentConfig, root: Path) -> dict[str, Path]:
    """Every table as .md/.csv/.tex/.html, figures as PNG, and the page of them all as report.md and as the
    self-contained index.html (one page model, one renderer: ``reports.layout``)."""
    from .export import to_csv, to_latex
    from .figures import render_figures
    from .layout import html_table, md_table, render_html, render_markdown
    from .paper_page import report_page
    from .tables import build_all

    out = report_dir(root, cfg.name)
    res = Results(cfg, root)
    built = build_all(res)
    figures = render_figures(built)
    paths: dict[str, Path] = {}
    for tables in built.values():
        for t in tables:
            for tab in [t] + [st for st in [stats_table(t)] if st is not None]:
                for ext, fn in (("md", md_table), ("csv", to_csv), ("tex", to_latex), ("html", html_table)):
                    p = out / f"{tab.id}.{ext}"
                    atomic_write_text(p, fn(tab))
                    paths[f"{tab.id}.{ext}"] = p
    for name, png in figures.items():
        p = out / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(png)
        paths[name] = p
    page = report_page(cfg, res, built, figures)
    atomic_write_text(out / "report.md", render_markdown(page))
    paths["report.md"] = out / "report.md"
    atomic_write_text(out / "index.html", render_html(page))
    paths["index.html"] = out / "index.html"
    # a table or figure this config no longer produces (a table disabled, Figure 5b without gold-removal
    # benchmarks) must not stay beside the new ones looking current; other files are left alone
    for p in out.iterdir():
        if p.name not in paths and p.suffix in STALE_SUFFIXES and STALE_NAME.match(p.name):
            p.unlink()
    return paths


__all__ = ["write_reports"]
