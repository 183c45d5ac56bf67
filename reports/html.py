"""One self-contained HTML report of a reproduce root: every table with its statistics, the figures
(PNG, inlined as data URIs), the status of every cell, per-cell cost, run provenance, and links to
the inspect-ai log of every cell.

Self-contained means one file that needs nothing else to display (no script, no external style or
image); the log links open each cell's log in inspect-ai's log viewer (``inspect view``) serving the
output root.
"""

from __future__ import annotations

import html
import os
import time
from pathlib import Path

import yaml

from .board import VIEWER_URL, provenance_tables
from .config import ExperimentConfig
from .grid import ReportTable, stats_table
from .layout import Figure, Fragment, Item, Link, Page, Section, Table, html_table, render_html, safe
from .render import to_html, to_markdown
from .results import Results
from .rundata import PHASES, cell_logs, usage_cost

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:90rem;color:#1a1a1a;
line-height:1.4;padding:0 1rem}
h1{font-size:1.6rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.5rem}
table{border-collapse:collapse;margin:.6rem 0 .4rem;font-size:.88rem}
caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid #d0d0d0;padding:.22rem .5rem;vertical-align:top}
thead th{background:#f2f2f2;text-align:center}tbody th{text-align:left;font-weight:normal;background:#fafafa}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.nr{color:#999;font-style:italic;text-align:center}tr.rule td,tr.rule th{border-top:2px solid #888}
sub.up{color:#00a64f}sub.down{color:#e8967a}sub.zero{color:#777}span.ci{color:#777;font-size:.8em}
.caption p{margin:.15rem 0;color:#444;font-size:.85rem}ul.notes{color:#8a5a00;font-size:.82rem}
figure{margin:1rem 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85rem;color:#444}
nav a{margin-right:.8rem}pre{background:#f7f7f7;padding:.6rem;overflow:auto;font-size:.8rem}
td.ok{color:#1a7f37}td.bad{color:#b42318}
"""

SECTION_TITLES = {
    "table1": "Table 1: main results", "table2": "Table 2: matched context budgets",
    "table3": "Table 3: grounding audit", "table4": "Table 4: preservation audit",
    "table5": "Table 5: seen and unseen regions", "table6": "Table 6: self-directed learning cycles",
    "figure3": "Figure 3: ablations", "figure4": "Figure 4: beyond compression",
    "figure5": "Figure 5: incomplete retrieval",
}


def _status_section(res: Results) -> str:
    cells = (res.status.get("cells") or {})
    rows = [[k.split("/")[0], k.split("/")[1], "/".join(k.split("/")[2:]), v.get("status", ""),
             str(v.get("rows", "")), safe(v.get("reason", ""))] for k, v in cells.items()]
    derived = (res.status.get("derived") or {})
    drows = [[k.split("/")[0], k.split("/")[1], "/".join(k.split("/")[2:]), v.get("status", ""),
              safe(v.get("reason", ""))] for k, v in derived.items()]
    out = html_table(Table("Cells (backend x benchmark x method variant)",
                           ["backend", "benchmark", "method (variant)", "status", "result rows", "reason"], rows))
    if drows:
        out += html_table(Table("Derived data and audits", ["backend", "benchmark", "step", "status", "reason"],
                                drows))
    return out


def _cost_section(res: Results) -> str:
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
    return html_table(Table(
        "Model calls and tokens per cell and phase (logical = live + cached, each call once: a resumed build's "
        "replay of a call it made live is not counted again; shared sub-artifacts such as SourceLearn's M0/MS "
        "are counted under the variant that built them first; 'harness' is the endpoint probe, 'audit' the "
        "judge calls of the audits)", header + ["failed calls"], rows))


def log_links(res: Results) -> str:
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
    note = ("Each link opens the cell's log in inspect-ai's log viewer; start it first with <code>inspect view "
            f"--recursive --log-dir {html.escape(safe(Path(res.root).resolve()))}</code> (it serves "
            f"{VIEWER_URL}).")
    return f"<p>{note}</p>" + html_table(Table(
        "inspect-ai logs of the test phase",
        ["backend", "benchmark", "method", "source", "seed", "status", "samples", "log (in the viewer)"], rows))


def _provenance_section(res: Results, cfg_text: str) -> str:
    out = []
    for b in res.cfg.backends:
        for bn in res.cfg.benchmarks:
            d = res.data(b.id, bn.id)
            if d is None:
                continue
            tables = provenance_tables(d, res.cfg.statistics.seed, res.cfg.statistics.bootstrap_resamples)
            out.append(f"<h3>{html.escape(b.name)} / {html.escape(bn.name)} "
                       f"(<code>{html.escape(str(res.folder(b.id, bn.id)))}</code>)</h3>")
            out += [html_table(t) for t in tables if t.title in ("Run", "Methods", "Sources")]
    out.append("<h3>Experiment config</h3><pre>" + html.escape(safe(cfg_text)) + "</pre>")
    return "\n".join(out)


def render_report(cfg: ExperimentConfig, res: Results, built: dict[str, list[ReportTable]],
                  figures: dict[str, bytes], report_dir: Path) -> str:
    """The page, laid out by ``reports.layout`` like every report page; the paper tables are rendered
    by ``reports.render`` (their cells carry marks and deltas) and placed as fragments."""
    cfg_text = yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True), sort_keys=False)
    sections = []
    for tid, tables in built.items():
        items: list[Item] = [Figure(name, name, png) for name, png in figures.items() if name.startswith(tid + "_")]
        for t in tables:
            items.append(Fragment(to_html(t), to_markdown(t)))
            st = stats_table(t)
            if st is not None:
                items.append(Fragment("<details><summary>Paired comparisons</summary>" + to_html(st) + "</details>",
                                      to_markdown(st)))
        sections.append(Section(SECTION_TITLES[tid], items, id=tid, nav=SECTION_TITLES[tid].split(":")[0]))
    sections += [
        Section("Status of every cell", [Fragment(_status_section(res))], id="status", nav="Status"),
        Section("Cost per cell", [Fragment(_cost_section(res))], id="cost", nav="Cost"),
        Section("Logs", [Fragment(log_links(res))], id="logs", nav="Logs"),
        Section("Provenance", [Fragment(_provenance_section(res, cfg_text))], id="provenance", nav="Provenance"),
    ]
    intro = [cfg.description] if cfg.description else []
    intro.append(f"Output root {res.root}; written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Every "
                 "number is recomputed from the run folders; re-running the same config reuses every finished cell.")
    return render_html(Page(f"SourceBench reproduction: {cfg.name}", sections, intro=intro, nav=True, style=CSS))
