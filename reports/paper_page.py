"""The page of a reproduce root: every table with its paired comparisons, the figures, the status of
every cell, per-cell cost, run provenance, and links to the inspect-ai log of every cell; laid out by
``reports.layout`` like every report page, as ``report.md`` and as one self-contained ``index.html``.

Self-contained means one file that needs nothing else to display (no script, no external style or
image: figures are inlined as data URIs); the log links open each cell's log in inspect-ai's log viewer
(``inspect view``) serving the output root.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import yaml

from .board import VIEWER_URL, provenance_tables
from .config import ExperimentConfig
from .grid import stats_table
from .layout import Figure, Item, Page, Preformatted, Section
from .results import Results
from .rundata import PHASES, cell_logs, usage_cost
from .table import Link, Table
from .text import safe

SECTION_TITLES = {
    "table1": "Table 1: main results", "table2": "Table 2: matched context budgets",
    "table3": "Table 3: grounding audit", "table4": "Table 4: preservation audit",
    "table5": "Table 5: seen and unseen regions", "table6": "Table 6: self-directed learning cycles",
    "figure3": "Figure 3: ablations", "figure4": "Figure 4: beyond compression",
    "figure5": "Figure 5: incomplete retrieval",
}


def _status_tables(res: Results) -> list[Item]:
    cells = (res.status.get("cells") or {})
    rows = [[k.split("/")[0], k.split("/")[1], "/".join(k.split("/")[2:]), v.get("status", ""),
             str(v.get("rows", "")), safe(v.get("reason", ""))] for k, v in cells.items()]
    derived = (res.status.get("derived") or {})
    drows = [[k.split("/")[0], k.split("/")[1], "/".join(k.split("/")[2:]), v.get("status", ""),
              safe(v.get("reason", ""))] for k, v in derived.items()]
    out: list[Item] = [Table("Cells (backend x benchmark x method variant)",
                             ["backend", "benchmark", "method (variant)", "status", "result rows", "reason"], rows)]
    if drows:
        out.append(Table("Derived data and audits", ["backend", "benchmark", "step", "status", "reason"], drows))
    return out


def _cost_table(res: Results) -> Table:
    rows = []
    for b in res.cfg.backends:
        for bn in res.cfg.benchmarks:
            d = res.data(b.id, bn.id)
            if d is None:
                continue
            methods = list(dict.fromkeys(u.get("method") for u in d.usage if u.get("method")))
            for m in methods:
                cost = usage_cost([u for u in d.usage if u.get("method") == m])
                cells = [b.name, bn.name, safe(m)]
                for p in PHASES:
                    c = cost.get(p, {})
                    cells += [f"{c.get('calls', 0):,} ({c.get('calls_live', 0):,} live)",
                              f"{c.get('tokens', 0):,} ({c.get('tokens_live', 0):,} live)"]
                cells.append(str(sum(c.get("failed", 0) for c in cost.values())))
                rows.append(cells)
    header = ["backend", "benchmark", "method"] + [f"{p} {w}" for p in PHASES for w in ("calls", "tokens")]
    return Table(
        "Model calls and tokens per cell and phase (logical = live + cached, each call once: a resumed build's "
        "replay of a call it made live is not counted again; shared sub-artifacts such as SourceLearn's M0/MS "
        "are counted under the variant that built them first; 'harness' is the endpoint probe, 'audit' the "
        "judge calls of the audits)", header + ["failed calls"], rows)


def log_table(res: Results) -> Table:
    """Each cell's inspect-ai log, linked as a page of inspect-ai's log viewer serving the output root."""
    rows = []
    for b in res.cfg.backends:
        for bn in res.cfg.benchmarks:
            folder = res.folder(b.id, bn.id)
            data = res.data(b.id, bn.id)
            # the method version each cell's current rows come from: a log of an older version belongs to
            # rows the runner set aside (results.stale.jsonl), so it is marked rather than listed as current
            current = {r["method"]: str(r.get("method_version", "")) for r in (data.results if data else [])}
            for log in cell_logs(folder):
                status = log.status
                if log.version and current.get(log.method, log.version) != log.version:
                    status += f"; superseded (version {log.version}, rows now of version {current[log.method]})"
                rel = Path(os.path.relpath(log.path, res.root)).as_posix()
                rows.append([b.name, bn.name, safe(log.method), log.source, log.seed, status, str(log.samples),
                             Link(log.path.name, f"{VIEWER_URL}/#/logs/{rel}")])
    return Table("inspect-ai logs of the test phase",
                 ["backend", "benchmark", "method", "source", "seed", "status", "samples", "log (in the viewer)"],
                 rows, note=("Each link opens the cell's log in inspect-ai's log viewer; start it first with "
                             f"`inspect view --recursive --log-dir {safe(Path(res.root).resolve())}` (it serves "
                             f"{VIEWER_URL})."))


def _provenance_items(res: Results, cfg_text: str) -> list[Item]:
    out: list[Item] = []
    for b in res.cfg.backends:
        for bn in res.cfg.benchmarks:
            d = res.data(b.id, bn.id)
            if d is None:
                continue
            where = f"{b.name} / {bn.name} ({res.folder(b.id, bn.id)})"
            tables = provenance_tables(d, res.cfg.statistics.seed, res.cfg.statistics.bootstrap_resamples)
            out += [replace(t, title=f"{where}: {t.title}") for t in tables
                    if t.title in ("Run", "Methods", "Sources")]
    out.append(Preformatted("Experiment config", safe(cfg_text)))
    return out


def report_page(cfg: ExperimentConfig, res: Results, built: dict[str, list[Table]],
                figures: dict[str, bytes]) -> Page:
    """Each table's section shows its figures and tables, with their paired comparisons folded below."""
    cfg_text = yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True), sort_keys=False)
    sections = []
    for tid, tables in built.items():
        items: list[Item] = [Figure(name, name, png) for name, png in figures.items() if name.startswith(tid + "_")]
        items += tables
        compared: list[Item] = [st for st in map(stats_table, tables) if st is not None]
        sections.append(Section(SECTION_TITLES[tid], items, folded=compared, folded_title="Paired comparisons",
                                id=tid, nav=SECTION_TITLES[tid].split(":")[0]))
    sections += [
        Section("Status of every cell", _status_tables(res), id="status", nav="Status"),
        Section("Cost per cell", [_cost_table(res)], id="cost", nav="Cost"),
        Section("Logs", [log_table(res)], id="logs", nav="Logs"),
        Section("Provenance", _provenance_items(res, cfg_text), id="provenance", nav="Provenance"),
    ]
    intro = [cfg.description] if cfg.description else []
    intro.append(f"Output root {res.root}; written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Every "
                 "number is recomputed from the run folders; re-running the same config reuses every finished cell.")
    return Page(f"SourceBench reproduction: {cfg.name}", sections, intro=intro, nav=True)
