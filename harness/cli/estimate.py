"""``sourcebench estimate``: the calls, tokens and price of a run or a reproduce config, before it runs.

No model is called: sources and splits are loaded as ``run`` would, each cell's work is counted in
elements, guidance tasks and test tasks, and multiplied by measured rates (``harness/estimate.py``).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sourcebench.reports.protocols import NEEDS_MODEL, parse_protocols

from .. import walltime
from ..errors import ConfigError, DataError
from ..estimate import (
    DEFAULT_DISCORDANCE,
    KINDS,
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
from ..options import (
    add_run_arguments,
    key_values,
    method_configs,
    non_negative_float,
    resolve_guidance_limit,
)
from .run import add_protocol_arguments


def add_parser(sub: Any) -> argparse.ArgumentParser:
    e = sub.add_parser("estimate", help="expected calls, tokens and price of a run or reproduce config, per cell",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # `run`'s command line, whole: `sourcebench estimate` prices the same command (options that only
    # change how a run is carried out are accepted and do not change the count)
    add_run_arguments(e, required=False, several_connections=True)
    add_protocol_arguments(e)
    e.add_argument("--config", type=Path, help="a reproduce config (YAML/TOML): estimate every folder it would run")
    e.add_argument("--calibration", type=Path, action="append", metavar="RUN_DIR", help="finished run folder(s) "
                   "to measure rates from (repeatable; default: the shipped rates, measured on the API-like test "
                   "backend at medium reasoning effort); a run of a local/ model also gives its calls per minute")
    e.add_argument("--compare", type=Path, metavar="RUN_DIR", help="a finished run with the same arguments: "
                   "print its live calls and tokens (of the estimated methods) and its wall time next to the "
                   "estimate")
    e.add_argument("--discordance", type=float, default=DEFAULT_DISCORDANCE, metavar="SHARE",
                   help="expected share of test tasks on which two compared methods disagree, for the smallest "
                   f"detectable effect (default {DEFAULT_DISCORDANCE})")
    e.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    e.add_argument("--latency", type=positive_float, metavar="S", help="seconds a model call takes, for the "
                   "expected wall time of a served model (default: by --reasoning-effort, 12 s at medium; see "
                   "docs/performance.md)")
    e.add_argument("--calls-per-minute", type=positive_float, metavar="N", help="calls a minute a local/ model "
                   "makes on this machine, for its wall time (default: measured on a --calibration run of it)")
    return e


def positive_float(s: str) -> float:
    x = non_negative_float(s)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s!r}")
    return x


@dataclass
class Folder:
    """One run folder to price: its cells, the model that runs it, and whether all of it could be."""

    label: str
    cells: list[CellUnits] = field(default_factory=list)
    model: str | None = None
    reasoning_effort: str | None = None
    method_of: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # what of it could not be estimated, and why
    failed: str = ""  # why none of it could be


def _cells(benchmark: str, methods: list[tuple[str, str]], sources: list[str] | None, seeds: list[int],
           limit: int | None, guidance_limit: int | None, data_dir: Path | None, options: dict[str, str],
           epochs: int = 1) -> tuple[list[CellUnits], list[str]]:
    """The cells ``run`` would make, with their units; (alias, registered method) pairs."""
    from ..errors import BenchmarkUnavailable
    from ..registry import get_benchmark_class, get_method_class
    from ..runner import limit_tasks

    cls = get_benchmark_class(benchmark)
    bench = cls(data_dir=data_dir, options=options)
    judged = bool(getattr(cls, "needs_judge_model", False))
    cells, notes = [], []
    for sid in sources or bench.source_ids():
        try:
            source = bench.load_source(sid)
            tasks = bench.load_tasks(sid)
        except (BenchmarkUnavailable, DataError) as err:
            notes.append(f"{benchmark}/{sid}: {err}")
            continue
        by_id = {t.id: t for t in tasks}
        size = sum(len(e.text) for e in source.elements) / max(1, len(source.elements)) / 4
        for split in bench.make_splits(source, tasks, seeds):
            guidance = limit_tasks([by_id[i] for i in split.guidance_ids], guidance_limit, split.seed)
            tests = limit_tasks(bench.select_test([by_id[i] for i in split.test_ids]), limit, split.seed)
            for alias, name in methods:
                cells.append(CellUnits(alias, sid, split.seed, len(source.elements), size, len(guidance), len(tests),
                                       bool(get_method_class(name).uses_guidance), source.kind,
                                       tuple(str(t.id) for t in tests), judged, epochs))
    return cells, notes


def _from_config(path: Path) -> list[Folder]:
    """One ``Folder`` per (backend, benchmark) the config would run, each with its backend's model."""
    from sourcebench.reports.config import load_config
    from sourcebench.reports.plan import plan

    cfg = load_config(path)
    folders = []
    for fp in plan(cfg):
        bench, backend = cfg.benchmark(fp.benchmark), cfg.backend(fp.backend)
        pairs = [(v.alias, v.method) for v in fp.variants]
        f = Folder(f"{fp.backend} / {fp.benchmark}", model=backend.model, reasoning_effort=backend.reasoning_effort,
                   method_of=dict(pairs))
        try:
            f.cells, f.missing = _cells(bench.registered, pairs, bench.sources, list(cfg.seeds),
                                        bench.limit or cfg.limit, bench.guidance_limit or cfg.guidance_limit,
                                        Path(cfg.data_dir) if cfg.data_dir else None, dict(bench.options))
        except (DataError, ConfigError) as err:
            f.failed = str(err)
        if not f.cells and not f.failed:
            f.failed = "; ".join(f.missing) or "no source could be loaded"
        folders.append(f)
    return folders


def _from_arguments(a: argparse.Namespace) -> list[Folder]:
    from ..llm import parse_model_spec
    from ..registry import parse_variant

    for name in (a.model, a.judge_model):  # as `run` checks them
        if name is not None:
            parse_model_spec(name)
    method_configs(a.method_config)
    pairs = [(m, parse_variant(m)[0] if "@" in m else m) for m in a.methods]
    f = Folder(a.benchmark, model=a.model, reasoning_effort=a.reasoning_effort, method_of=dict(pairs))
    f.cells, f.missing = _cells(a.benchmark, pairs, a.sources, a.seeds, a.limit,
                                resolve_guidance_limit(a.limit, a.guidance_limit), a.data_dir,
                                key_values(a.opt, "--opt"), getattr(a, "epochs", 1))
    if not f.cells:
        f.failed = "; ".join(f.missing) or "no source could be loaded"
    return [f]


def run(a: argparse.Namespace) -> int:
    if not a.config and not (a.benchmark and a.methods):
        raise ConfigError("estimate: give --config CONFIG, or --benchmark and --methods as for `run`")
    if a.config and (a.benchmark or a.methods):
        raise ConfigError("estimate: give --config CONFIG or --benchmark and --methods, not both (the config "
                          "names its benchmarks and methods)")
    rates = measure(a.calibration) if a.calibration else load_rates()
    basis = (f"rates measured on {', '.join(str(p) for p in a.calibration)}" if a.calibration
             else "shipped rates (harness/cost_rates.json, measured on the API-like test backend)")
    folders = _from_config(a.config) if a.config else _from_arguments(a)
    report: dict[str, Any] = {"basis": basis, "groups": [], "notes": [], "not_estimated": []}
    all_est: list[Estimate] = []
    priced: list[tuple[Folder, list[Estimate]]] = []
    for f in folders:
        if f.failed:
            report["not_estimated"].append({"folder": f.label, "reason": f.failed})
            continue
        # rates are per registered method: a variant (alias) is estimated with its method's rate
        est, no_rate = estimate_cells(f.cells, rates, f.method_of)
        all_est += est
        priced.append((f, est))
        n_methods = len({c.method for c in f.cells})
        report["groups"].append({"folder": f.label, "cells": len(f.cells), "estimates": [vars(x) for x in est],
                                 "no_rate": sorted(set(no_rate)), "partial": f.missing, "totals": totals(est),
                                 "mde": planned_mde(f.cells, n_methods - 1, a.discordance)})
        report["notes"] += [f"{f.label}: {m}; not estimated" for m in f.missing]
    no_rate = sorted({m for g in report["groups"] for m in g["no_rate"]})
    report["coverage"] = {"folders": len(folders), "estimated": len(priced),
                          "partial": sum(1 for g in report["groups"] if g["partial"]),
                          "methods_without_rate": no_rate}
    if not priced:
        reasons = "; ".join(f"{x['folder']}: {x['reason']}" for x in report["not_estimated"])
        raise DataError(f"estimate: no folder could be estimated ({reasons})")
    t = totals(all_est)
    report["totals"] = t
    report["price_usd"] = cost(t["input_tokens"], t["output_tokens"] + t["reasoning_tokens"], a.price_input,
                               a.price_output)
    unpriced = [p for p in (parse_protocols(a.protocols) if a.protocols else []) if p in NEEDS_MODEL]
    if unpriced:
        report["notes"].append(f"--protocols {', '.join(unpriced)}: their model calls are not estimated")
    if a.compare:
        report["compare"] = _compare(a.compare, all_est)
    report["wall_time"] = _wall(a, priced)
    if a.json:
        print(json.dumps(report, indent=1, default=str))
        return 0
    _print(report, a)
    return 0


def _compare(run_dir: Path, est: list[Estimate]) -> dict[str, Any]:
    """Measured calls and tokens of a finished run, per method and phase, against the estimate: live
    calls only (a resumed run's cache hits cost nothing and are not work of this estimate), of the
    estimated methods only (the run's other methods are listed, not added)."""
    from ..io import read_jsonl

    path = Path(run_dir) / "usage.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: file not found (not a finished run folder?)")
    estimated = {e.method for e in est}
    measured: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    others: dict[str, float] = defaultdict(float)
    for u in read_jsonl(path, tolerate_torn_tail=True):
        if u.get("status") != "live" or u.get("phase") == "probe":
            continue
        if str(u.get("method")) not in estimated:
            others[str(u.get("method"))] += float(u.get("calls") or 0)
            continue
        m = measured[(str(u.get("method")), str(u.get("phase")))]
        for k in KINDS:
            m[k] += float(u.get(k) or 0)
    expected: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in est:
        for k in KINDS:
            expected[(e.method, e.phase)][k] += getattr(e, k)
    rows = []
    for key in sorted(set(measured) | set(expected)):
        m, x = measured.get(key, {}), expected.get(key, {})
        rows.append({"method": key[0], "phase": key[1], **{f"{k}_estimated": x.get(k, 0.0) for k in KINDS},
                     **{f"{k}_measured": m.get(k, 0.0) for k in KINDS}})
    tot = {k: (sum(r[f"{k}_estimated"] for r in rows), sum(r[f"{k}_measured"] for r in rows)) for k in KINDS}
    return {"run": str(run_dir), "rows": rows, "totals": tot, "not_compared": dict(sorted(others.items()))}


def _pace(a: argparse.Namespace, f: Folder) -> walltime.Pace:
    """A folder's pace: a local/ model's measured calls per minute, else a served model's latency."""
    model = f.model or ""
    if model.startswith("local/"):
        if a.calls_per_minute:
            return walltime.Pace(calls_per_minute=a.calls_per_minute, local=True, origin="--calls-per-minute")
        for run_dir in a.calibration or []:
            try:
                ran = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8")).get("model")
            except (OSError, ValueError):
                continue
            cpm = walltime.measured_calls_per_minute(run_dir) if ran == model else None
            if cpm:
                return walltime.Pace(calls_per_minute=cpm, local=True, origin=f"measured on {run_dir}")
        return walltime.Pace(local=True)
    effort = f.reasoning_effort if a.config else a.reasoning_effort
    latency = a.latency or walltime.DEFAULT_LATENCY_S.get(effort, walltime.DEFAULT_LATENCY_S["medium"])
    return walltime.Pace(latency_s=latency)


def _wall(a: argparse.Namespace, priced: list[tuple[Folder, list[Estimate]]]) -> dict[str, Any]:
    """Expected wall time at ``--latency`` (or a local model's calls per minute) and ``--max-connections``
    (``harness/walltime.py``), and, with ``--compare``, the run's measured wall time against the
    prediction at its own connections."""
    conns = a.max_connections or [walltime.DEFAULT_CONNECTIONS]
    groups = [(f.label, walltime.cells_of(f.cells, est), _pace(a, f)) for f, est in priced]
    out: dict[str, Any] = {"connections": conns, "lines": walltime.wall_lines(groups, conns), "folders": [
        {"folder": label, **vars(pace), "at": [{"connections": c, **(vars(w) if w else {})}
                                               for c in conns for w in [walltime.predict_at(cells, pace, c)]]}
        for label, cells, pace in groups]}
    lat = {p.latency_s for _, _, p in groups if not p.local}
    out["latency_s"] = lat.pop() if len(lat) == 1 else None
    if a.compare:
        run = json.loads((Path(a.compare) / "run.json").read_text()) if (Path(a.compare) / "run.json").is_file() else {}
        c = int((run.get("execution") or {}).get("connections") or conns[0])
        preds = [walltime.predict_at(cells, pace, c) for _, cells, pace in groups]
        if all(w is not None for w in preds):
            out["compare_connections"] = c
            out["predicted_learn_s"] = sum(w.learn_s for w in preds if w)
            out["predicted_s"] = sum(w.total_s for w in preds if w)
        out["measured_learn_s"] = walltime.measured_learn_wall(a.compare)
        out["measured_s"] = walltime.measured_wall(a.compare)
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
    tot, cov = report["totals"], report["coverage"]
    what = "total" if cov["estimated"] == cov["folders"] and not cov["partial"] else (
        f"total of the {cov['estimated']} of {cov['folders']} folder(s) estimated"
        + (f", {cov['partial']} of them in part" if cov["partial"] else ""))
    if cov["methods_without_rate"]:
        what += f", without {', '.join(cov['methods_without_rate'])} (no rate)"
    line = (f"{what}: {_n(tot['calls'])} calls, {_n(tot['input_tokens'])} input, {_n(tot['output_tokens'])} output, "
            f"{_n(tot['reasoning_tokens'])} reasoning tokens")
    if report["price_usd"] is not None:
        line += f"; about ${report['price_usd']:,.2f} at ${a.price_input}/M input, ${a.price_output}/M output"
    console.print(line)
    for x in report["not_estimated"]:
        console.print(f"[yellow]{x['folder']}: not estimated ({x['reason']})[/]")
    for n in report["notes"]:
        console.print(f"[yellow]{n}[/]")
    for line in report["wall_time"]["lines"]:
        console.print(line)
    if "compare" in report:
        c = report["compare"]
        console.print(f"against the finished run {c['run']} (its live calls of the estimated methods):")
        for k, (x, m) in c["totals"].items():
            console.print(f"  {k}: estimated {_n(x)}, measured {_n(m)} ({within(x, m)})")
        if c["not_compared"]:
            console.print("  not compared (not estimated): " + ", ".join(f"{m} ({_n(n)} live calls)"
                                                                         for m, n in c["not_compared"].items()))
        wall = report["wall_time"]
        at = f" at C = {wall['compare_connections']}" if "compare_connections" in wall else ""
        for what, key in (("learning wall time", "learn_s"), ("wall time of its model calls", "s")):
            w, x = wall.get(f"measured_{key}"), wall.get(f"predicted_{key}")
            if w is not None and x is not None:
                console.print(f"  {what}{at}: predicted {x:,.0f} s, measured {w:,.0f} s ({within(x, w)})")


__all__ = ["add_parser", "run"]
