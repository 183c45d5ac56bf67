"""Several run folders, one leaderboard: runs made apart (another backend, machine or day) merged where
they are comparable.

A cell (benchmark, source, seed) is compared only when every folder holds it with the same split
(``split_id`` of its rows), the same data (the source's fingerprint in ``run.json``) and the same
evaluator (the benchmark's version and scorer, and the judge model); every other cell is left out and
listed with the reason. When no cell is left the merge is refused with the reasons. Each folder's
methods keep their rows under ``method [label]``, the label being the folder's model when the models
differ and the folder's name otherwise, so one method on two backends is two rows of the leaderboard,
paired on the same tasks.

The merged rows are written as a run folder of their own (``OUT/data``: run.json, results, usage,
failures), from which the ordinary leaderboard is written into ``OUT``; ``OUT/merge.json`` records the
folders and what was left out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import ConfigError
from sourcebench.harness.io import atomic_write_json, atomic_write_text

from .rundata import RunData, load_run


@dataclass
class Merge:
    labels: dict[str, str]  # folder -> label
    cells: list[tuple] = field(default_factory=list)  # (benchmark, source, seed) compared
    left_out: list[str] = field(default_factory=list)  # one line per cell not compared, with why
    renamed: dict[tuple[str, str], str] = field(default_factory=dict)  # (folder, method) -> merged name


def _evaluator(run: dict[str, Any]) -> tuple:
    b = run.get("benchmark") or {}
    judge = (run.get("judge_model") or {}).get("name") if isinstance(run.get("judge_model"), dict) else None
    return (b.get("version"), b.get("scorer"), judge)


def _options(run: dict[str, Any]) -> str:
    import json

    return json.dumps((run.get("benchmark") or {}).get("options") or {}, sort_keys=True)


def _cells(data: RunData) -> dict[tuple, set[str]]:
    """(benchmark, source, seed) -> the split ids its rows name."""
    out: dict[tuple, set[str]] = defaultdict(set)
    for r in data.results:
        out[(r["benchmark"], r["source"], int(r["seed"]))].add(str(r.get("split_id")))
    return out


def _labels(runs: list[RunData]) -> dict[str, str]:
    models = [str((d.run.get("model") or {}).get("name") or "?") for d in runs]
    names = models if len(set(models)) == len(models) else [d.run_dir.resolve().name for d in runs]
    if len(set(names)) < len(names):
        names = [f"{n} #{i + 1}" for i, n in enumerate(names)]
    return {str(d.run_dir): n for d, n in zip(runs, names, strict=True)}


def plan_merge(runs: list[RunData]) -> Merge:
    """Which cells all folders share comparably, and why the others are left out."""
    if len(runs) < 2:
        raise ConfigError("report: merging needs at least two run folders")
    m = Merge(_labels(runs))
    cells = [_cells(d) for d in runs]
    fingerprints = [{s.get("id"): s.get("fingerprint") for s in d.run.get("sources") or []} for d in runs]
    evaluators = [_evaluator(d.run) for d in runs]
    options = {_options(d.run) for d in runs}
    names = [str(d.run_dir) for d in runs]
    for key in sorted(set().union(*cells), key=str):
        bench, source, seed = key
        where = f"{bench}/{source} seed {seed}"
        missing = [n for n, c in zip(names, cells, strict=True) if key not in c]
        splits = {frozenset(c[key]) for c in cells if key in c}
        data = {f.get(source) for f in fingerprints}
        if missing:
            m.left_out.append(f"{where}: not in {', '.join(missing)}")
        elif len(splits) > 1:
            m.left_out.append(f"{where}: different splits (split ids "
                              + " vs ".join(",".join(sorted(s)) for s in splits) + ")")
        elif len(data) > 1:
            m.left_out.append(f"{where}: different data (source fingerprints {' vs '.join(map(str, data))})")
        elif len(options) > 1:
            m.left_out.append(f"{where}: different benchmark options ({' vs '.join(sorted(options))})")
        elif len(set(evaluators)) > 1:
            m.left_out.append(f"{where}: different evaluators (benchmark version, scorer, judge: "
                              + " vs ".join(map(str, dict.fromkeys(evaluators))) + ")")
        else:
            m.cells.append(key)
    if not m.cells:
        raise ConfigError("report: the run folders have no comparable cell: " + "; ".join(m.left_out[:5])
                          + (f"; and {len(m.left_out) - 5} more" if len(m.left_out) > 5 else ""))
    for d in runs:
        label = m.labels[str(d.run_dir)]
        for meth in sorted({str(r["method"]) for r in d.results}):
            m.renamed[(str(d.run_dir), meth)] = f"{meth} [{label}]"
    return m


def merge_runs(run_dirs: list[Path], out: Path) -> tuple[Merge, Path]:
    """Write the merged run folder ``out/data``; return the plan and that folder."""
    runs = [load_run(p) for p in run_dirs]
    m = plan_merge(runs)
    keep = set(m.cells)
    # within a compared cell, the tasks every folder scored (another --limit scores other tasks)
    tasks = [{(r["benchmark"], r["source"], int(r["seed"]), str(r["task_id"])) for r in d.results} for d in runs]
    common = set.intersection(*tasks)
    dropped = {t for ts in tasks for t in ts if t[:3] in keep} - common
    for cell in sorted({t[:3] for t in dropped}, key=str):
        n = sum(1 for t in dropped if t[:3] == cell)
        m.left_out.append(f"{cell[0]}/{cell[1]} seed {cell[2]}: {n} task(s) not scored in every folder")
    results, usage, failures, methods = [], [], [], []
    for d in runs:
        folder = str(d.run_dir)

        def rename(rows: list[dict[str, Any]], cell_only: bool) -> list[dict[str, Any]]:
            out_rows = []
            for r in rows:
                if cell_only and (r.get("benchmark"), r.get("source"), int(r.get("seed") or 0),
                                  str(r.get("task_id"))) not in common:
                    continue
                name = m.renamed.get((folder, str(r.get("method"))))  # noqa: B023 - used at once
                out_rows.append({**r, "method": name} if name else r)
            return out_rows

        results += rename(d.results, True)
        # cost of each method as it was paid; the invocation numbers are the folder's own (the merged file
        # keeps each folder's probe rows, from which the reader counts them again)
        usage += rename([{k: v for k, v in u.items() if k != "invocation"} for u in d.usage if u.get("method")],
                        False)
        failures += rename([f for f in d.failures if f.get("method")], False)
        methods += [{**e, "name": m.renamed.get((folder, e.get("name")), e.get("name"))}
                    for e in d.run.get("methods") or [] if (folder, e.get("name")) in m.renamed]
    first = runs[0].run
    models = list(dict.fromkeys(str((d.run.get("model") or {}).get("name")) for d in runs))
    run = {**{k: first.get(k) for k in ("benchmark", "judge_model", "embedder", "seeds", "sources", "limit")},
           "run_id": "merged-" + "+".join(str(d.run.get("run_id")) for d in runs),
           "model": {**(first.get("model") or {}), "name": " | ".join(models)},
           "methods": methods,
           "merged_from": [{"folder": str(d.run_dir), "label": m.labels[str(d.run_dir)], "run_id": d.run.get("run_id"),
                            "model": (d.run.get("model") or {}).get("name")} for d in runs],
           "merge_left_out": m.left_out}
    data_dir = out / "data"
    atomic_write_json(data_dir / "run.json", run)
    for name, rows in (("results", results), ("usage", usage), ("failures", failures)):
        atomic_write_text(data_dir / f"{name}.jsonl", "".join(_line(r) for r in rows))
    atomic_write_json(out / "merge.json", {"folders": run["merged_from"], "compared_cells": [list(c) for c in m.cells],
                                           "left_out": m.left_out})
    return m, data_dir


def _line(r: dict[str, Any]) -> str:
    import json

    return json.dumps(r, ensure_ascii=False, default=str) + "\n"


def merged_baseline(m: Merge, baseline: str) -> str:
    """``--baseline`` in merged names: the first folder's method of that name (a merged name is kept)."""
    if baseline in m.renamed.values():
        return baseline
    for (_, meth), name in m.renamed.items():
        if meth == baseline:
            return name
    return baseline
