"""The paper's tables (and the data behind its figures) from a reproduce output root.

Each builder reads scored rows and derived files through ``Results`` and returns ``Table``s
(``reports.grid``); nothing here calls a model or writes a file. The statistics are the leaderboard's
(``reports.stats``): macro accuracy over sources then seeds, seeded source-stratified bootstrap
intervals, paired tests with the task as unit, Holm's correction within one family per backend and
benchmark (the leaderboard's family).

Cells of a method or benchmark that did not run show "not run", and the table's notes say why.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .audit_labels import coverage_bins, ground_labels, kinds, preserve_labels
from .config import BenchmarkEntry, ExperimentConfig
from .grid import (
    accuracy_cell,
    column_groups,
    compare,
    mark_best,
    not_run,
    paper_table,
    set_delta,
    text_cell,
    tokens_text,
)
from .plan import STAGE_METHODS, cycles_variant, gold_removed, k_variant, matched
from .provenance_marks import notes_for_rows
from .results import INCOMPLETE, Results
from .stats import AGGREGATION_RULE, CI_METHOD, DELTA_METHOD, holm_caption, paired_test_caption
from .table import NA, NOT_RUN, Cell, Row, Table, pct_text

STAGE_LABELS = {"M0": "M0", "MS": "MS", "MT": "MT", "MT_wo_self": "MT w/o self-directed",
                "M_local": "M_local", "MS+Pi1": "MS + Π1"}
STEP_LABELS = {"M0->MS": "Self-Directed (M0→MS)", "MS->MT": "Task-Guided (MS→MT)"}
AUDIT_PARENT = {"MS": "M0", "MT": "MS", "MT_wo_self": "M0", "M_local": "MS", "MS+Pi1": "MS"}


# ------------------------------------------------------------------------------------ captions

def _agg(cfg: ExperimentConfig) -> str:
    seeds = ", ".join(str(s) for s in cfg.seeds)
    lim = f"; at most {cfg.limit} test tasks per source and seed (seeded subset)" if cfg.limit else ""
    return f"Accuracy (%): {AGGREGATION_RULE} (split seeds {seeds}{lim})."


def _ci(cfg: ExperimentConfig) -> str:
    s = cfg.statistics
    return (f"95% intervals of the accuracy (CSV, HTML): {CI_METHOD}. Intervals of Δ: {DELTA_METHOD} "
            f"(seed {s.seed}).")


def _tests(cfg: ExperimentConfig, baseline: str) -> str:
    s = cfg.statistics
    return f"Paired tests against {baseline}: {paired_test_caption(s.permutation_resamples, s.seed)}."


def _holm(table: Table, family: str) -> None:
    """State the Holm family (which comparisons it spans, and their number) once the tests are known."""
    table.caption.append(holm_caption(family, [x.get("holm_m", 0) for x in table.stats]))


DELTA = ("Subscripts: Δ relative to {base}, the tested statistic: the mean over sources of the mean per-task "
         "difference on the tasks both cells scored (seeds averaged within a task), in points, one decimal; its "
         "95% interval (the paired test inverted) is in the paired-comparisons table and the CSV.")
MARKS = ("Bold: best, underlined: second best {scope}, by displayed value among healthy, complete cells (ties "
         "share a mark; nothing is marked with fewer than two values; a DEGRADED or INCOMPLETE cell is never "
         "marked).")


def _stat_args(cfg: ExperimentConfig) -> tuple[int, int]:
    return cfg.statistics.bootstrap_resamples, cfg.statistics.seed


def _acc(res: Results, backend: str, bench: str, alias: str, sources: list[str] | None = None) -> Cell:
    n_boot, seed = _stat_args(res.cfg)
    cell = accuracy_cell(res.rows(backend, bench, alias, sources), n_boot, seed, res.why_not(backend, bench, alias))
    if cell.value is not None:
        cell.degraded = res.degraded(backend, bench, alias)
        data = res.data(backend, bench)
        cell.substitute = notes_for_rows(data.run if data else None, cell.rows)
        st = res.cell_status(backend, bench, alias)
        if st.get("status") == INCOMPLETE:
            cell.incomplete = f"{backend} / {bench} / {alias}: {st.get('reason') or 'incomplete'}"
    return cell


def _compare(res: Results, items: list[tuple[dict[str, Any], Cell, Cell]]) -> list[dict[str, Any]]:
    s = res.cfg.statistics
    return compare(items, s.seed, s.permutation_resamples, s.bootstrap_resamples)


def not_run_notes(table: Table) -> list[str]:
    """One line per distinct reason, naming the cells it applies to."""
    by_reason: dict[str, list[str]] = {}
    last: list[str] = []
    groups = [g for g, span in table.groups for _ in range(span)]
    cols = [f"{g} {c}".strip() if g else c for g, c in zip(groups + [""] * len(table.columns), table.columns)]
    for row in table.rows:
        stub = [s or (last[i] if i < len(last) else "") for i, s in enumerate(row.stub)]
        last = stub
        for col, cell in zip(cols, row.cells):
            if cell.status == NOT_RUN:
                where = " / ".join(x for x in stub if x) + f" × {col}"
                by_reason.setdefault(cell.reason or "no results", []).append(where)
    out = []
    for reason, where in by_reason.items():
        shown = "; ".join(where[:6]) + (f"; and {len(where) - 6} more" if len(where) > 6 else "")
        out.append(f"Not run ({reason}): {shown}.")
    return out


def _finish(table: Table) -> Table:
    table.notes = not_run_notes(table) + table.notes
    return table


def _sources(res: Results, backend: str, bench: BenchmarkEntry, only: list[str] | None) -> list[str]:
    """The benchmark's sources: as configured, else those with results; filtered by a table's list."""
    found = list(bench.sources or [])
    if not found:
        d = res.data(backend, bench.id)
        found = sorted({r["source"] for r in d.results}) if d else []
    return [s for s in found if only is None or s in only]


# --------------------------------------------------------------------------------------- Table 1

def table1(res: Results) -> Table:
    """Rows backend x method, columns benchmarks; Δ relative to the baseline; best/second per backend."""
    cfg = res.cfg
    t = cfg.tables.table1
    backends, benches = cfg.scope("table1")
    base = cfg.baseline
    table = paper_table(
        "table1", "Table 1: main results (accuracy %)",
        [_agg(cfg), DELTA.format(base=cfg.label(base)),
         MARKS.format(scope="per backend and benchmark"), _ci(cfg), _tests(cfg, cfg.label(base))],
        ["Backend", "Method"], [b.name for b in benches],
        groups=column_groups([b.group for b in benches]), show_ci=t.show_ci)
    for b in backends:
        bases = {bn.id: _acc(res, b.id, bn.id, base) for bn in benches}
        grid = [(m, [bases[bn.id] if m == base else _acc(res, b.id, bn.id, m) for bn in benches]) for m in t.methods]
        family = []
        for j, bn in enumerate(benches):
            for m, cells in grid:
                if m != base:
                    set_delta(cells[j], bases[bn.id])
                    family.append(({"backend": b.name, "benchmark": bn.name, "column": bn.name,
                                    "method": cfg.label(m), "baseline": cfg.label(base)},
                                   cells[j], bases[bn.id]))
            mark_best([cells[j] for _, cells in grid])
        table.stats += _compare(res, family)
        for i, (m, cells) in enumerate(grid):
            table.rows.append(Row([b.name if i == 0 else "", cfg.label(m)], cells, rule=i == 0 and bool(table.rows)))
    _holm(table, f"the methods compared with {cfg.label(base)} on one benchmark")
    return _finish(table)


# --------------------------------------------------------------------------------------- Table 2

def _mean_tokens(rows: list[dict[str, Any]]) -> float | None:
    """Mean prompt tokens per question: over tasks within a seed, then over seeds."""
    by_seed: dict[Any, list[int]] = {}
    for r in rows:
        by_seed.setdefault(r["seed"], []).append(int(r.get("context_tokens") or 0))
    return float(np.mean([np.mean(v) for v in by_seed.values()])) if by_seed else None


def table2(res: Results) -> list[Table]:
    """Counterparts reading down their own ranking to the reference's per-question context size."""
    cfg = res.cfg
    t = cfg.tables.table2
    backends, benches = cfg.scope("table2")
    cols: list[tuple[BenchmarkEntry, str]] = []
    for bn in benches:
        srcs = list(dict.fromkeys(s for b in backends for s in _sources(res, b.id, bn, t.sources)))
        cols += [(bn, s) for s in srcs] or [(bn, "")]  # no source known: one "not run" column
    ref = t.reference
    variants = [matched(cfg, m, ref) for m in t.counterparts]
    caption = [
        _agg(cfg),
        (f"Each counterpart answers every test question with the same prompt size (tokens = characters / 4) as "
         f"{cfg.label(ref)} used on it, by reading further down its own ranking (whole items in rank order: "
         "elements, tree nodes or passages; never fewer than it natively retrieves); ranking and index are "
         "unchanged."),
        (f"Evidence tokens: mean {cfg.label(ref)} prompt tokens per question (over tasks, then seeds). The second "
         "table gives every method's own mean, so the match can be checked."),
        MARKS.format(scope="per backend and column"), _ci(cfg),
        _tests(cfg, f"each budget-matched counterpart ({cfg.label(ref)} minus counterpart)"),
    ]
    labels = [f"{bn.name} / {s}" if s else bn.name for bn, s in cols]
    main = paper_table("table2", "Table 2: retrieval counterparts at matched context budgets (accuracy %)", caption,
                       ["Backend", "Method"], [s or NA for bn, s in cols],
                       groups=column_groups([bn.name for bn, _ in cols]))
    tokens = paper_table("table2_tokens", "Table 2 (check): mean prompt tokens per question", [
        ("Mean prompt tokens per question (over tasks, then seeds) of every method of Table 2; counterparts should "
        f"come close to {cfg.label(ref)} from below (a whole element that would overshoot is not added).")],
        ["Backend", "Method"], labels)
    for b in backends:
        grid: list[tuple[str, list[Cell]]] = []
        tok_rows: list[tuple[str, list[Cell]]] = []
        for v in variants + [None]:
            alias = v.alias if v else ref
            cells, toks = [], []
            for bn, s in cols:
                src = [s] if s else None
                cells.append(_acc(res, b.id, bn.id, alias, src))
                rows = res.rows(b.id, bn.id, alias, src)
                toks.append(text_cell(tokens_text(_mean_tokens(rows))) if rows else not_run(cells[-1].reason))
            label = cfg.label(v.method) if v else cfg.label(ref)
            grid.append((label, cells))
            tok_rows.append((label + (" (matched)" if v else ""), toks))
        family = []
        for j, (bn, s) in enumerate(cols):
            mark_best([cells[j] for _, cells in grid])
            refc = grid[-1][1][j]
            for (label, cells), v in zip(grid[:-1], variants):
                family.append(({"backend": b.name, "benchmark": bn.name, "column": labels[j],
                                "method": cfg.label(ref), "baseline": f"{label} (matched)"}, refc, cells[j]))
        main.stats += _compare(res, family)
        for i, (label, cells) in enumerate(grid):
            main.rows.append(Row([b.name if i == 0 else "", label], cells, rule=i == 0 and bool(main.rows)))
        ev = []
        for bn, s in cols:
            rows = res.rows(b.id, bn.id, ref, [s] if s else None)
            ev.append(text_cell(tokens_text(_mean_tokens(rows))) if rows else not_run(res.why_not(b.id, bn.id, ref)))
        main.rows.append(Row(["", "Evidence tokens"], ev))
        for i, (label, cells) in enumerate(tok_rows):
            tokens.rows.append(Row([b.name if i == 0 else "", label], cells, rule=i == 0 and bool(tokens.rows)))
    _holm(main, f"the comparisons of {cfg.label(ref)} with its budget-matched counterparts on one benchmark "
                "(all its source columns)")
    return [_finish(main), _finish(tokens)]


# ---------------------------------------------------------------------------------- Tables 3-4

def _audit_rows(res: Results, backend: str, bench: str, name: str) -> tuple[list[dict[str, Any]] | None, str]:
    data = res.audit(backend, bench, name)
    if data is None:
        st = res.step_status(backend, bench, f"audit-{name}")
        if st.get("reason"):
            return None, f"{st['status']}: {st['reason']}" if st.get("status") != NOT_RUN else st["reason"]
        if res.data(backend, bench) is None:  # nothing ran in this folder: say why
            return None, res.why_not(backend, bench, STAGE_METHODS["M0"])
        return None, "the audit has not run in this folder"
    return list(data.get("rows") or []), ""


def _audit_table(res: Results, tid: str, name: str, labels: tuple[str, ...], title: str, caption: list[str],
                 steps: bool) -> Table:
    cfg = res.cfg
    t = getattr(cfg.tables, tid)
    backends, benches = cfg.scope(tid)
    cols = [lab.capitalize() for lab in labels] + ["Units judged", "Judge failures"]
    table = paper_table(tid, title, caption, ["Backend", "Source", "Dropped by" if steps else "Model"], cols)
    want = [f"{AUDIT_PARENT[s]}->{s}" for s in t.stages if s in AUDIT_PARENT] if steps else list(t.stages)
    for b in backends:
        first = True
        for bn in benches:
            rows, why = _audit_rows(res, b.id, bn.id, name)
            if rows is None:
                table.rows.append(Row([b.name if first else "", bn.name, NA], [not_run(why) for _ in cols],
                                      rule=first and bool(table.rows)))
                first = False
                continue
            srcs = [s for s in dict.fromkeys(r["source"] for r in rows) if t.sources is None or s in t.sources]
            if not any(r["stage"] in want for r in rows if r["source"] in srcs):
                table.rows.append(Row([b.name if first else "", bn.name, NA], [text_cell(NA) for _ in cols],
                                      rule=first and bool(table.rows)))
                table.notes.append(f"{b.name} / {bn.name}: the audit found nothing to judge for "
                                   f"{', '.join(STEP_LABELS.get(w, w) for w in want)}"
                                   + (" (no stage dropped a unit)" if steps else "") + ".")
                first = False
                continue
            for s in srcs:
                for stage in want:
                    r = next((x for x in rows if x["source"] == s and x["stage"] == stage), None)
                    if r is None:
                        continue
                    cells = [text_cell(pct_text(r.get(f"{lab}_pct"))) for lab in labels]
                    cells += [text_cell(str(r.get("n", 0))), text_cell(str(r.get("failed", 0)))]
                    label = STEP_LABELS.get(stage, stage.replace("->", "→")) if steps else STAGE_LABELS.get(stage, stage)
                    table.rows.append(Row([b.name if first else "", f"{bn.name} ({s})", label], cells,
                                          rule=first and bool(table.rows)))
                    first = False
    return _finish(table)


def table3(res: Results) -> Table:
    t = res.cfg.tables.table3
    return _audit_table(res, "table3", "grounding", ground_labels(), "Table 3: grounding audit of source-model units (%)", [
        (f"Up to {t.sample or 'all'} units per model (seeded sample, seed {t.seed}) are judged against the source "
         "elements they cite by the run's judge model: supported (every claim entailed), partial (main claim "
         "supported, a detail not), unsupported (the cited evidence does not establish it), contradicted."),
        ("Percentages exclude items whose judge call failed (counted under judge failures); split models of a stage "
        "are pooled.")], steps=False)


def table4(res: Results) -> Table:
    t = res.cfg.tables.table4
    return _audit_table(res, "table4", "preservation", preserve_labels(), "Table 4: preservation of dropped units (%)", [
        (f"Up to {t.sample or 'all'} units dropped by each learning stage (seeded sample, seed {t.seed}) are compared "
         "by the judge with the later model's units on the same subject: preserved (still represented after "
         "rewording, merging or condensation), lost, or contradicted."),
        "Percentages exclude items whose judge call failed."], steps=True)


# --------------------------------------------------------------------------------------- Table 5

def _seen_map(regions: dict[str, Any] | None) -> dict[tuple[str, int, str], bool]:
    out: dict[tuple[str, int, str], bool] = {}
    for sid, seeds in ((regions or {}).get("sources") or {}).items():
        for seed, info in seeds.items():
            for tid, rec in (info.get("tests") or {}).items():
                out[(sid, int(seed), str(tid))] = bool(rec["seen"])
    return out


def table5(res: Results) -> Table:
    """Accuracy on test tasks whose region overlaps a guidance task's (seen) or not (unseen)."""
    cfg = res.cfg
    t = cfg.tables.table5
    backends, benches = cfg.scope("table5")
    base = cfg.baseline if cfg.baseline in t.methods else t.methods[0]
    strata = ("Seen", "Unseen")
    caption = [
        _agg(cfg),
        ("Region of a task: the SourceLearn regions (of the source's M0 model) holding its anchor elements; the "
         "anchors are its gold evidence elements when the benchmark labels them, else its top-"
         f"{t.anchor_k} Hybrid RAG element(s) for the question alone; without an M0 model, the anchors themselves. "
         "Seen: the test task's region overlaps the region of at least one guidance task of the same split (those "
         "the methods learned from); unseen: it overlaps none. Strata are per (task, split)."),
        DELTA.format(base=cfg.label(base)).rstrip(".") + ", within each stratum.",
        MARKS.format(scope="per row and stratum"), _ci(cfg),
        ("All: mean of the benchmark rows over the benchmarks where every method has a value in that stratum "
        "(no interval)."),
        _tests(cfg, cfg.label(base)),
    ]
    columns = [s for _ in t.methods for s in strata] + ["n seen", "n unseen"]
    table = paper_table("table5", "Table 5: accuracy (%) on seen and unseen source regions", caption,
                        ["Backend", "Benchmark"], columns,
                        groups=[(cfg.label(m), 2) for m in t.methods] + [("tasks x splits", 2)])
    for b in backends:
        per_bench: list[tuple[str, list[Cell]]] = []
        family = []
        first = True
        for bn in benches:
            regions = res.derived(b.id, bn.id, "regions.json")
            seen = _seen_map(regions)
            if regions is None:
                st = res.step_status(b.id, bn.id, "regions")
                why = (f"{st['status']}: {st['reason']}" if st.get("reason") else res.why_not(b.id, bn.id, base)
                       if not res.rows(b.id, bn.id, base) else "regions not derived for this folder")
                cells = [not_run(why) for _ in columns]
                table.rows.append(Row([b.name if first else "", bn.name], cells, rule=first and bool(table.rows)))
                first = False
                continue
            n_boot, sd = _stat_args(cfg)
            grid: dict[str, list[Cell]] = {}
            for m in t.methods:
                rows = res.rows(b.id, bn.id, m)
                why = res.why_not(b.id, bn.id, m)
                grid[m] = [accuracy_cell([r for r in rows if seen.get((r["source"], int(r["seed"]), str(r["task_id"])))
                                          is want], n_boot, sd, why if not rows else f"no {s.lower()} test task")
                           for s, want in zip(strata, (True, False))]
            for k, s in enumerate(strata):
                for m in t.methods:
                    if m != base:
                        set_delta(grid[m][k], grid[base][k])
                        family.append(({"backend": b.name, "benchmark": bn.name, "column": f"{bn.name} {s}",
                                        "method": cfg.label(m), "baseline": cfg.label(base)},
                                       grid[m][k], grid[base][k]))
                mark_best([grid[m][k] for m in t.methods])
            counts = [sum(1 for v in seen.values() if v is want) for want in (True, False)]
            cells = [c for m in t.methods for c in grid[m]] + [text_cell(str(n)) for n in counts]
            per_bench.append((bn.id, cells))
            table.rows.append(Row([b.name if first else "", bn.name], cells, rule=first and bool(table.rows)))
            first = False
        table.stats += _compare(res, family)
        if len(per_bench) > 1:
            table.rows.append(Row(["", "All"], _all_row(per_bench, t.methods, base, len(strata))))
    _holm(table, f"the methods compared with {cfg.label(base)} on one benchmark (both strata)")
    return _finish(table)


def _all_row(per_bench: list[tuple[str, list[Cell]]], methods: list[str], base: str, n_strata: int) -> list[Cell]:
    cells: list[Cell] = []
    for k in range(n_strata):
        idx = {m: i * n_strata + k for i, m in enumerate(methods)}
        ok = [cs for _, cs in per_bench if all(cs[idx[m]].value is not None for m in methods)]
        for m in methods:
            vals = [cs[idx[m]].value for cs in ok]
            cells.append(Cell(value=float(np.mean(vals))) if vals else not_run("no benchmark with every method"))
    ordered = [cells[k * len(methods) + i] for i in range(len(methods)) for k in range(n_strata)]
    for k in range(n_strata):
        col = [ordered[i * n_strata + k] for i in range(len(methods))]
        b = col[methods.index(base)]
        for m, c in zip(methods, col):
            if m != base:
                set_delta(c, b)
        mark_best(col)
    totals = [text_cell(str(sum(int(cs[-2 + j].text) for _, cs in per_bench))) for j in range(2)]
    return ordered + totals


# --------------------------------------------------------------------------------------- Table 6

def table6(res: Results) -> Table:
    cfg = res.cfg
    t = cfg.tables.table6
    backends, benches = cfg.scope("table6")
    table = paper_table("table6", "Table 6: self-directed source learning over several cycles", [
        _agg(cfg).replace("Accuracy (%)", "Accuracy (%) per source"),
        (f"Cycle 0 is M0 (method {t.m0_method}); cycle c is the model after c Inspect-Study-Consolidate "
         f"cycles (method {t.method} with cycles = c), answering with the same task-time interface. Units: "
         "units of the saved model; observations: notes recorded in the last cycle (inspection and study)."),
    ], ["Backend", "Source", "Cycle"], ["Units", "Observations", "Accuracy (%)"])
    for b in backends:
        first = True
        for bn in benches:
            cyc = res.derived(b.id, bn.id, "cycles.json") or {}
            srcs = _sources(res, b.id, bn, t.sources)
            if not srcs:
                table.rows.append(Row([b.name if first else "", bn.name, NA],
                                      [not_run(res.why_not(b.id, bn.id, t.m0_method))] * 3,
                                      rule=first and bool(table.rows)))
                first = False
                continue
            for s in srcs:
                for c in t.cycles:
                    v = cycles_variant(cfg, t.method, t.m0_method, c)
                    info = ((cyc.get("sources") or {}).get(s) or {}).get(str(c))
                    acc = _acc(res, b.id, bn.id, v.alias, [s])
                    why = acc.reason or res.why_not(b.id, bn.id, v.alias)
                    units = text_cell(f"{info['units']:,}") if info else not_run(why)
                    obs = text_cell(NA if info and info.get("observations") is None else f"{info['observations']:,}") \
                        if info else not_run(why)
                    label = f"{c} (M0)" if c == 0 else f"{c} (MS)" if c == 1 else str(c)
                    table.rows.append(Row([b.name if first else "", f"{bn.name} ({s})", label], [units, obs, acc],
                                          rule=first and bool(table.rows)))
                    first = False
    return _finish(table)


# -------------------------------------------------------------------------------------- Figure 3

def figure3(res: Results) -> Table:
    cfg = res.cfg
    t = cfg.tables.figure3
    backends, benches = cfg.scope("figure3")
    full = "sourcelearn"
    methods = t.stages + t.pathways
    table = paper_table("figure3", "Figure 3 (data): ablations of SourceLearn (accuracy %)", [
        _agg(cfg),
        ("Left: the learning stages (M0; task-guided learning on M0 without self-directed learning; MS = without "
        "task-guided learning; the full model MT). Right: the two task-guided pathways (MS = neither; without "
        "failure-guided local refinement; without cross-task representation learning; MT)."), _ci(cfg),
        _tests(cfg, f"the full model ({cfg.label(full)}), each ablation"),
    ], ["Backend", "Benchmark"], [cfg.label(m) for m in methods],
        groups=[("Learning stages", len(t.stages)), ("Task-guided pathways", len(t.pathways))])
    for b in backends:
        family = []
        for i, bn in enumerate(benches):
            cache: dict[str, Cell] = {}
            cells = []
            for m in methods:
                cache.setdefault(m, _acc(res, b.id, bn.id, m))
                cells.append(cache[m])
            fullc = cache.get(full) or _acc(res, b.id, bn.id, full)
            for m in dict.fromkeys(methods):
                if m != full:
                    family.append(({"backend": b.name, "benchmark": bn.name, "column": bn.name,
                                    "method": cfg.label(m), "baseline": cfg.label(full)}, cache[m], fullc))
            table.rows.append(Row([b.name if i == 0 else "", bn.name], cells, rule=i == 0 and bool(table.rows)))
        table.stats += _compare(res, family)
    _holm(table, f"the ablations compared with {cfg.label(full)} on one benchmark")
    return _finish(table)


# -------------------------------------------------------------------------------------- Figure 4

def _pick_rows(rows: list[dict[str, Any]], only: list[str] | None) -> list[dict[str, Any]]:
    """Per-source rows (filtered), plus the pooled ALL rows when the audit wrote them."""
    return [r for r in rows if r.get("source") == "ALL" or only is None or r.get("source") in only]


def figure4(res: Results) -> list[Table]:
    cfg = res.cfg
    t = cfg.tables.figure4
    backends, benches = cfg.scope("figure4")
    stages = list(t.stages)
    kinds_t = paper_table("figure4a", "Figure 4a (data): unit kinds per stage (% of units)", [
        ("Share of each unit kind among all units of a stage's model; per-split models averaged; ALL = mean over "
        "the sources of a benchmark.")], ["Backend", "Source", "Model"], [k.capitalize() for k in kinds()] + ["Units"])
    cond = paper_table("figure4b", "Figure 4b (data): units with explicit conditions (%)", [
        "Share of units that state explicit applicability conditions."], ["Backend", "Source"],
        [STAGE_LABELS.get(s, s) for s in stages])
    cov = paper_table("figure4c", "Figure 4c (data): required claims represented (%)", [
        ("Claims each test task needs are listed by the judge from its question and reference answer (an audit "
         "after the test phase; no method sees them); share of those claims the stage's model represents, pooled "
         f"over claims (at most {t.coverage_max_tasks or 'all'} test tasks per source and split, seed {t.seed}).")],
        ["Backend", "Source"], [STAGE_LABELS.get(s, s) for s in stages])
    acc = paper_table("figure4d", "Figure 4d (data): accuracy (%) by coverage of the required claims", [
        ("Accuracy of each stage's own variant on the test tasks whose required claims its model represents none, "
        "part or all of; r: point-biserial correlation of coverage with correctness.")],
        ["Backend", "Benchmark", "Model"], [f"{b} covered" for b in coverage_bins()] + ["n", "r"])
    for b in backends:
        for bn in benches:
            for name, tab in (("kinds", kinds_t), ("conditions", cond), ("coverage", cov)):
                rows, why = _audit_rows(res, b.id, bn.id, name)
                first = not tab.rows or tab.rows[-1].stub[0] != b.name
                if rows is None:
                    n = len(tab.columns)
                    stub = [b.name, bn.name] + ([NA] if name == "kinds" else [])
                    tab.rows.append(Row(stub, [not_run(why) for _ in range(n)], rule=first and bool(tab.rows)))
                    continue
                rows = _pick_rows(rows, t.sources)
                if name == "kinds":
                    for s in dict.fromkeys(r["source"] for r in rows):
                        for st in stages:
                            r = next((x for x in rows if x["source"] == s and x["stage"] == st), None)
                            if r:
                                cells = [text_cell(pct_text(100 * r.get(f"shares:{k}", 0.0))) for k in kinds()]
                                kinds_t.rows.append(Row([b.name, f"{bn.name} ({s})", STAGE_LABELS.get(st, st)],
                                                      cells + [text_cell(f"{r.get('n_units', 0):.0f}")]))
                    continue
                key = "share" if name == "conditions" else "claim_share"
                for s in dict.fromkeys(r["source"] for r in rows):
                    cells = []
                    for st in stages:
                        r = next((x for x in rows if x["source"] == s and x["stage"] == st), None)
                        v = r.get(key) if r else None
                        cells.append(text_cell(pct_text(None if v is None else 100 * v)) if r else
                                     not_run(f"no {STAGE_LABELS.get(st, st)} model"))
                    tab.rows.append(Row([b.name, f"{bn.name} ({s})"], cells))
            data = res.audit(b.id, bn.id, "coverage")
            if data is None:
                continue
            for st, v in (data.get("accuracy_by_coverage") or {}).items():
                bins = v.get("bins") or {}
                cells = [text_cell(pct_text(None if (bins.get(x) or {}).get("accuracy") is None
                                            else 100 * bins[x]["accuracy"])) for x in coverage_bins()]
                r = v.get("point_biserial_r")
                cells += [text_cell(str(v.get("n", 0))), text_cell(NA if r is None else f"{r:.2f}")]
                acc.rows.append(Row([b.name, bn.name, STAGE_LABELS.get(st, "all stages" if st == "ALL" else st)],
                                    cells))
    return [_finish(x) for x in (kinds_t, cond, cov, acc)]


# -------------------------------------------------------------------------------------- Figure 5

def figure5(res: Results) -> list[Table]:
    cfg = res.cfg
    t = cfg.tables.figure5
    backends, benches = cfg.scope("figure5")
    curve = paper_table("figure5a", "Figure 5a (data): accuracy (%) as the number of retrieved elements k decreases", [
        _agg(cfg),
        ("Each method answers with its top-k retrieved elements (task time only: the learned artifact is the one "
        "learned with the default k); at k = 0 Hybrid RAG answers closed-book and SourceLearn from its activated "
        "source model alone."), _ci(cfg)], ["Backend", "Benchmark", "Method"], [f"k={k}" for k in t.k])
    gold = paper_table("figure5b", "Figure 5b (data): accuracy (%) with the gold document removed from retrieval", [
        _agg(cfg),
        ("Gold removed: every element of the task's gold documents (task metadata gold_doc_ids) and its labelled "
        "gold elements (gold_element_ids) are excluded from the ranking before the top k are taken."),
        DELTA.format(base="the same method with gold evidence available"), _ci(cfg),
        _tests(cfg, "the same method with gold evidence available")],
        ["Backend", "Benchmark", "Method"], ["with gold", "gold removed"])
    for b in backends:
        for bn in benches:
            for m in t.methods:
                cells = [_acc(res, b.id, bn.id, k_variant(cfg, m, k).alias) for k in t.k]
                curve.rows.append(Row([b.name, bn.name, cfg.label(m)], cells))
        family = []
        for gid in t.gold_removal:
            bn = next((x for x in benches if x.id == gid), None)
            for m in t.methods:
                if bn is None:
                    why = f"benchmark {gid} is not in this config"
                    gold.rows.append(Row([b.name, gid, cfg.label(m)], [not_run(why), not_run(why)]))
                    continue
                with_gold = _acc(res, b.id, bn.id, m)
                removed = _acc(res, b.id, bn.id, gold_removed(cfg, m).alias)
                set_delta(removed, with_gold)
                family.append(({"backend": b.name, "benchmark": bn.name, "column": bn.name,
                                "method": f"{cfg.label(m)} (gold removed)", "baseline": cfg.label(m)},
                               removed, with_gold))
                gold.rows.append(Row([b.name, bn.name, cfg.label(m)], [with_gold, removed]))
        gold.stats += _compare(res, family)
    _holm(gold, "the methods with the gold document removed, each compared with itself with gold, on one "
                "benchmark")
    # no benchmark chosen for gold removal (``gold_removal: []``): panel (b) was not asked for, so it is
    # left out rather than shown as an empty "not run" table
    return [_finish(curve), _finish(gold)] if t.gold_removal else [_finish(curve)]


BUILDERS = {"table1": table1, "table2": table2, "table3": table3, "table4": table4, "table5": table5,
            "table6": table6, "figure3": figure3, "figure4": figure4, "figure5": figure5}


def build_all(res: Results, only: set[str] | None = None) -> dict[str, list[Table]]:
    """Every enabled table/figure of the config, as lists of tables keyed by the config's ids."""
    out: dict[str, list[Table]] = {}
    for tid in res.cfg.tables.enabled():
        if only and tid not in only:
            continue
        built = BUILDERS[tid](res)
        out[tid] = built if isinstance(built, list) else [built]
    return out


__all__ = ["BUILDERS", "build_all", "STAGE_METHODS"] + list(BUILDERS)
