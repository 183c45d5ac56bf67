"""``sourcebench estimate``: the calls, tokens and price of a run or a reproduce config, before it runs.

No model is called: sources and splits are loaded as ``run`` would, each cell's work is counted in
elements, guidance tasks and test tasks, and multiplied by measured rates (``harness/estimate.py``).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from ..estimate import (
    DEFAULT_DISCORDANCE,
    CellUnits,
    Estimate,
    cost,
    estimate_cells,
    load_rates,
    measure,
    planned_mde,
    totals,
    within,
)
from ..options import csv_list, guidance_limit, key_values, positive_int, resolve_guidance_limit, seed_list


def add_parser(sub: Any) -> argparse.ArgumentParser:
    e = sub.add_parser("estimate", help="expected calls, tokens and price of a run or reproduce config, per cell",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("--config", type=Path, help="a reproduce config (YAML/TOML): estimate every folder it would run")
    e.add_argument("--benchmark", help="as for `run`")
    e.add_argument("--methods", type=csv_list, help="as for `run`")
    e.add_argument("--sources", type=csv_list)
    e.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    e.add_argument("--limit", type=positive_int)
    e.add_argument("--guidance-limit", type=guidance_limit)
    e.add_argument("--data-dir", type=Path)
    e.add_argument("--opt", action="append", metavar="KEY=VALUE")
    e.add_argument("--calibration", type=Path, action="append", metavar="RUN_DIR", help="finished run folder(s) "
                   "to measure rates from (repeatable; default: the shipped rates, measured on the API-like test "
                   "backend at medium reasoning effort)")
    e.add_argument("--price-input", type=float, metavar="USD", help="price per million input tokens")
    e.add_argument("--price-output", type=float, metavar="USD", help="price per million output tokens "
                   "(reasoning tokens are billed as output)")
    e.add_argument("--compare", type=Path, metavar="RUN_DIR", help="a finished run with the same arguments: "
                   "print its measured calls and tokens next to the estimate")
    e.add_argument("--discordance", type=float, default=DEFAULT_DISCORDANCE, metavar="SHARE",
                   help="expected share of test tasks on which two compared methods disagree, for the smallest "
                   f"detectable effect (default {DEFAULT_DISCORDANCE})")
    e.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    e.add_argument("--latency", type=float, metavar="S", help="seconds a model call takes, for the expected wall "
                   "time (default: by --reasoning-effort, 12 s at medium; see docs/performance.md)")
    e.add_argument("--reasoning-effort", help="the solver's reasoning effort, for the default --latency")
    e.add_argument("--max-connections", type=csv_list, metavar="C[,C...]", help="the run's connection budget(s) "
                   "for the expected wall time (default 32, as `run` for a served model)")
    return e


def _cells(benchmark: str, methods: list[tuple[str, str]], sources: list[str] | None, seeds: list[int],
           limit: int | None, guidance_limit: int | None, data_dir: Path | None, options: dict[str, str]
           ) -> tuple[list[CellUnits], list[str]]:
    """The cells ``run`` would make, with their units; (alias, registered method) pairs."""
    from ..errors import BenchmarkUnavailable
    from ..registry import get_benchmark_class, get_method_class
    from ..runner import limit_tasks

    bench = get_benchmark_class(benchmark)(data_dir=data_dir, options=options)
    cells, notes = [], []
    for sid in sources or bench.source_ids():
        source = bench.load_source(sid)
        try:
            tasks = bench.load_tasks(sid)
        except BenchmarkUnavailable as err:
            notes.append(f"{benchmark}/{sid}: unavailable ({err}); not estimated")
            continue
        by_id = {t.id: t for t in tasks}
        size = sum(len(e.text) for e in source.elements) / max(1, len(source.elements)) / 4
        for split in bench.make_splits(source, tasks, seeds):
            guidance = limit_tasks([by_id[i] for i in split.guidance_ids], guidance_limit, split.seed)
            tests = limit_tasks(bench.select_test([by_id[i] for i in split.test_ids]), limit, split.seed)
            for alias, name in methods:
                cells.append(CellUnits(alias, sid, split.seed, len(source.elements), size, len(guidance), len(tests),
                                       bool(get_method_class(name).uses_guidance), source.kind,
                                       tuple(str(t.id) for t in tests)))
    return cells, notes


def _from_config(path: Path) -> tuple[list[tuple[str, list[CellUnits]]], list[str], dict[str, str]]:
    from sourcebench.reports.config import load_config
    from sourcebench.reports.plan import plan

    cfg = load_config(path)
    groups, notes, method_of = [], [], {}
    for fp in plan(cfg):
        bench = cfg.benchmark(fp.benchmark)
        pairs = [(v.alias, v.method) for v in fp.variants]
        method_of.update(dict(pairs))
        limit = bench.limit or cfg.limit
        try:
            cells, n = _cells(bench.registered, pairs, bench.sources, list(cfg.seeds), limit,
                              bench.guidance_limit or cfg.guidance_limit,
                              Path(cfg.data_dir) if cfg.data_dir else None, dict(bench.options))
        except (DataError, ConfigError) as err:
            notes.append(f"{fp.backend} / {fp.benchmark}: not estimated ({err})")
            continue
        groups.append((f"{fp.backend} / {fp.benchmark}", cells))
        notes += n
    return groups, notes, method_of


def run(a: argparse.Namespace) -> int:
    if not a.config and not (a.benchmark and a.methods):
        raise ConfigError("estimate: give --config CONFIG, or --benchmark and --methods as for `run`")
    rates = measure(a.calibration) if a.calibration else load_rates()
    basis = (f"rates measured on {', '.join(str(p) for p in a.calibration)}" if a.calibration
             else "shipped rates (harness/cost_rates.json, measured on the API-like test backend)")
    if a.config:
        groups, notes, method_of = _from_config(a.config)
    else:
        pairs = [(m, m) for m in a.methods]
        cells, notes = _cells(a.benchmark, pairs, a.sources, a.seeds, a.limit,
                              resolve_guidance_limit(a.limit, a.guidance_limit), a.data_dir, key_values(a.opt, "--opt"))
        groups, method_of = [(a.benchmark, cells)], {m: m for m in a.methods}
    report: dict[str, Any] = {"basis": basis, "groups": [], "notes": notes}
    all_est: list[Estimate] = []
    for label, cells in groups:
        # rates are per registered method: a variant (alias) is estimated with its method's rate
        est, missing = estimate_cells(cells, rates, method_of)
        all_est += est
        n_methods = len({c.method for c in cells})
        report["groups"].append({"folder": label, "cells": len(cells), "estimates": [vars(x) for x in est],
                                 "no_rate": sorted(set(missing)), "totals": totals(est),
                                 "mde": planned_mde(cells, n_methods - 1, a.discordance)})
    t = totals(all_est)
    report["totals"] = t
    report["price_usd"] = cost(t["input_tokens"], t["output_tokens"] + t["reasoning_tokens"], a.price_input,
                               a.price_output)
    if a.compare:
        report["compare"] = _compare(a.compare, all_est)
    report["wall_time"] = _wall(a, groups, all_est)
    if a.json:
        print(json.dumps(report, indent=1, default=str))
        return 0
    _print(report, a)
    return 0


def _compare(run_dir: Path, est: list[Estimate]) -> dict[str, Any]:
    """Measured calls and tokens of a finished run, per method and phase, against the estimate."""
    from ..io import read_jsonl

    path = Path(run_dir) / "usage.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: file not found (not a finished run folder?)")
    measured: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for u in read_jsonl(path, tolerate_torn_tail=True):
        if u.get("status") in ("live", "cached") and u.get("phase") != "probe":
            m = measured[(str(u.get("method")), str(u.get("phase")))]
            for k in ("calls", "input_tokens", "output_tokens", "reasoning_tokens"):
                m[k] += float(u.get(k) or 0)
    expected: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in est:
        for k in ("calls", "input_tokens", "output_tokens", "reasoning_tokens"):
            expected[(e.method, e.phase)][k] += getattr(e, k)
    rows = []
    for key in sorted(set(measured) | set(expected)):
        m, x = measured.get(key, {}), expected.get(key, {})
        rows.append({"method": key[0], "phase": key[1],
                     **{f"{k}_estimated": x.get(k, 0.0) for k in ("calls", "input_tokens", "output_tokens",
                                                                   "reasoning_tokens")},
                     **{f"{k}_measured": m.get(k, 0.0) for k in ("calls", "input_tokens", "output_tokens",
                                                                  "reasoning_tokens")}})
    tot = {k: (sum(r[f"{k}_estimated"] for r in rows), sum(r[f"{k}_measured"] for r in rows))
           for k in ("calls", "input_tokens", "output_tokens", "reasoning_tokens")}
    return {"run": str(run_dir), "rows": rows, "totals": tot}


def _wall(a: argparse.Namespace, groups: list, est: list[Estimate]) -> dict[str, Any]:
    """Expected wall time at ``--latency`` and ``--max-connections`` (``harness/walltime.py``), and, with
    ``--compare``, the run's measured learning wall time against the prediction at its connections."""
    from .. import walltime

    latency = a.latency or walltime.DEFAULT_LATENCY_S.get(a.reasoning_effort, walltime.DEFAULT_LATENCY_S["medium"])
    try:
        conns = [int(c) for c in (a.max_connections or [walltime.DEFAULT_CONNECTIONS])]
    except ValueError:
        raise ConfigError(f"--max-connections {','.join(a.max_connections)}: expected integers") from None
    cells = [(label, walltime.cells_of(cs, est)) for label, cs in groups]
    out: dict[str, Any] = {"latency_s": latency, "connections": conns,
                           "lines": walltime.wall_lines(cells, latency, conns)}
    if a.compare:
        run = json.loads((Path(a.compare) / "run.json").read_text()) if (Path(a.compare) / "run.json").is_file() else {}
        c = int((run.get("execution") or {}).get("connections") or conns[0])
        out["predicted_learn_s"] = sum(walltime.predict(x, latency, c).learn_s for _, x in cells)
        out["measured_learn_s"] = walltime.measured_learn_wall(a.compare)
    return out


def _n(x: float) -> str:
    return f"{x:,.0f}"


def _print(report: dict[str, Any], a: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    console.print(f"estimate from {report['basis']}; tokens: input / visible output / reasoning")
    for g in report["groups"]:
        t = Table(title=f"{g['folder']}: {g['cells']} cell(s)")
        for col in ("method", "phase", "calls", "input", "output", "reasoning", "basis"):
            t.add_column(col, justify="left" if col in ("method", "phase", "basis") else "right")
        agg: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        basis: dict[tuple[str, str], str] = {}
        for e in g["estimates"]:
            k = (e["method"], e["phase"])
            for i, f in enumerate(("calls", "input_tokens", "output_tokens", "reasoning_tokens")):
                agg[k][i] += e[f]
            basis[k] = e["basis"]
        for (m, ph), v in sorted(agg.items()):
            t.add_row(m, ph, *(_n(x) for x in v), basis[(m, ph)])
        console.print(t)
        mde = g.get("mde") or {}
        if mde.get("mde_pp") is not None:
            console.print(f"smallest detectable Δ: {mde['mde_pp']:.1f} accuracy points (80% power, two-sided 0.05 "
                          f"Holm-corrected over {mde['comparisons']} comparison(s) with the baseline, "
                          f"{mde['tasks']} distinct test tasks in {mde['sources']} source(s), "
                          f"{100 * mde['discordance']:.0f}% discordant tasks assumed, tasks independent: larger "
                          "where the benchmark groups them); a smaller true difference will likely not be resolved")
        if g["no_rate"]:
            console.print(f"[yellow]no measured rate for {', '.join(g['no_rate'])}: not estimated "
                          f"(pass --calibration RUN_DIR with a run of it)[/]")
    tot = report["totals"]
    line = (f"total: {_n(tot['calls'])} calls, {_n(tot['input_tokens'])} input, {_n(tot['output_tokens'])} output, "
            f"{_n(tot['reasoning_tokens'])} reasoning tokens")
    if report["price_usd"] is not None:
        line += f"; about ${report['price_usd']:,.2f} at ${a.price_input}/M input, ${a.price_output}/M output"
    console.print(line)
    for n in report["notes"]:
        console.print(f"[yellow]{n}[/]")
    for line in report["wall_time"]["lines"]:
        console.print(line)
    if "compare" in report:
        c = report["compare"]
        console.print(f"against the finished run {c['run']}:")
        for k, (x, m) in c["totals"].items():
            console.print(f"  {k}: estimated {_n(x)}, measured {_n(m)} ({within(x, m)})")
        w = report["wall_time"].get("measured_learn_s")
        if w is not None:
            x = report["wall_time"]["predicted_learn_s"]
            console.print(f"  learning wall time: predicted {x:,.0f} s, measured {w:,.0f} s ({within(x, w)})")


__all__ = ["add_parser", "run"]
