"""The leaderboard report of a run folder: ``leaderboard.md``, ``leaderboard.csv``, ``leaderboard.html``.

Everything is recomputed from the files of the run folder (docs/results-format.md) with a seed, so a
report can be regenerated at any time and gives the same numbers. The numbers are computed once
(``summarize``) into plain dicts, laid out once as neutral tables (``build_tables``), and only then
written as Markdown, HTML and CSV, so the three files cannot disagree.

Only the run.json fields named in the format doc are read, model settings are reduced to a
whitelist, and every free text is passed through ``safe``, which masks anything shaped like a
credential: a report is meant to be shared, and error messages or commands can echo keys.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from sourcebench.harness.health import run_health
from sourcebench.harness.io import atomic_write_text

from .layout import NA, Figure, Table, fmt_p, pct, render_html, render_markdown, safe, safe_url
from .rundata import (
    PHASES,
    RunData,
    benchmarks,
    load_run,
    methods_of,
    unavailable_sources,
    usage_cost,
    with_failures,
)
from .stats import (
    AGGREGATION_RULE,
    CI_METHOD,
    HOLM_FAMILY,
    N_PERMUTATIONS,
    bootstrap_ci,
    holm_by_family,
    macro_accuracy,
    paired_test,
    paired_test_caption,
    per_seed_accuracy,
    sort_key,
)

NOT_RUN = "not run"
UNAVAILABLE = "unavailable"
TEST_NAMES = {
    "mcnemar_exact": "exact McNemar on the paired tasks (each task one binary pair, sources of equal size)",
    "paired_permutation": "sign-flip test of the per-task mean differences (seeds averaged within a task)",
}



_MODEL_SETTINGS = ("base_url", "temperature", "max_tokens", "seed", "context_window", "reasoning_effort",
                   "reasoning_tokens")
_EMBEDDER_SETTINGS = ("model", "revision", "dim", "dimensions", "base_url")


def _describe(settings: Any, keys: tuple[str, ...]) -> str:
    """'name (k=v, ...)' from a whitelist of keys; never the whole dict (it could hold a key)."""
    if settings is None or settings == {}:
        return "none"
    if not isinstance(settings, dict):
        return safe(settings)
    parts = [
        f"{k}={safe_url(settings[k]) if k == 'base_url' else safe(settings[k])}"
        for k in keys
        if settings.get(k) is not None
    ]
    name = safe(settings.get("name") or settings.get("model") or "unnamed")
    return f"{name} ({', '.join(parts)})" if parts else name


def _deviations(run: dict[str, Any]) -> list[tuple[str, str]]:
    """(method or benchmark, deviation) pairs declared in run.json's methods and benchmark, whatever shape each
    entry has."""
    out = []
    bench = run.get("benchmark")
    for m in [*(run.get("methods") or []), *([bench] if isinstance(bench, dict) else [])]:
        if not isinstance(m, dict):
            continue
        dev = m.get("deviations")
        if isinstance(dev, dict):
            items = [f"{k}: {v}" for k, v in dev.items()]
        elif isinstance(dev, list):
            items = dev
        else:
            items = [dev] if dev else []
        out += [(safe(m.get("name")), safe(d)) for d in items if d not in (None, "")]
    return out


def _by_text(devs: list[tuple[str, str]]) -> dict[str, list[str]]:
    """deviation -> the methods declaring it, in first-seen order (variants of one method share most)."""
    out: dict[str, list[str]] = {}
    for m, d in devs:
        if m not in out.setdefault(d, []):
            out[d].append(m)
    return out


# ------------------------------------------------------------------------------------ numbers


def summarize(data: RunData, baseline: str = "hybrid_rag", seed: int = 0, n_boot: int = 2000) -> list[dict]:
    """One dict per benchmark with one dict per method holding every number the report shows."""
    out = []
    health = run_health(data.run_dir, data.results, data.failures, run=data.run, usage=data.usage)
    for bench in benchmarks(data):
        rows_by = defaultdict(list)
        for r in data.results:
            if r["benchmark"] == bench:
                rows_by[r["method"]].append(r)
        base_rows = rows_by.get(baseline, [])
        base_acc = macro_accuracy(base_rows) if base_rows else None
        entries = []
        unavailable = unavailable_sources(data, bench)
        for method in methods_of(data, bench):
            rows = rows_by.get(method, [])
            e: dict[str, Any] = {
                "method": method,
                "is_baseline": method == baseline,
                "status": "ok" if rows else UNAVAILABLE if unavailable else NOT_RUN,
            }
            usage = [u for u in data.usage if u.get("benchmark") == bench and u.get("method") == method]
            fails = [f for f in data.failures if f.get("benchmark") == bench and f.get("method") == method]
            e["cost"] = with_failures(usage_cost(usage), fails)
            e["stages"] = with_failures(usage_cost([u for u in usage if u.get("phase") == "learn"], by="stage"),
                                         [f for f in fails if f.get("phase") == "learn"], by="stage")
            e["failed_calls"] = sum(c["failed"] for c in e["cost"].values())
            e["degraded"] = [c.line() for c in health if c.benchmark == bench and c.method == method and c.degraded]
            if rows:
                e.update(_method_numbers(rows, base_rows, method == baseline, seed, n_boot))
                if base_acc is not None and method != baseline:
                    e["delta_pp"] = 100.0 * (e["accuracy"] - base_acc)
            entries.append(e)
        # one Holm family per benchmark: the methods compared with the baseline on it (HOLM_FAMILY)
        adjusted, sizes = holm_by_family([e.get("p_value") for e in entries], [bench] * len(entries))
        for e, p, m in zip(entries, adjusted, sizes):
            e["p_holm"], e["holm_m"] = p, m
        ran = sorted(
            (e for e in entries if e["status"] == "ok" and not e["is_baseline"]),
            key=lambda e: (-e["accuracy"], str(e["method"])),
        )
        first = [e for e in entries if e["status"] == "ok" and e["is_baseline"]]
        rest = sorted((e for e in entries if e["status"] != "ok"), key=lambda e: str(e["method"]))
        sources = sorted({r["source"] for r in data.results if r["benchmark"] == bench}, key=sort_key)
        out.append(
            {
                "benchmark": bench,
                "baseline": baseline,
                "baseline_present": bool(base_rows),
                "methods": first + ran + rest,
                "sources": sources,
                "unavailable": unavailable,
                "holm_m": max(sizes, default=0),
            }
        )
    return out


def _method_numbers(rows, base_rows, is_baseline, seed, n_boot) -> dict[str, Any]:
    lo, hi = bootstrap_ci(rows, n_boot=n_boot, seed=seed)
    seeds = per_seed_accuracy(rows)
    vals = list(seeds.values())
    e: dict[str, Any] = {
        "accuracy": macro_accuracy(rows),
        "ci_lo": lo,
        "ci_hi": hi,
        "n_tasks": len({(r["source"], r["task_id"]) for r in rows}),
        "n_rows": len(rows),
        "failed_rows": sum(1 for r in rows if r.get("failed")),
        "failure_reasons": Counter(_kind(r.get("failure_reason")) for r in rows if r.get("failed")),
        "seed_acc": seeds,
        "seed_mean": float(np.mean(vals)),
        "seed_sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else None,
        "per_source": {
            s: macro_accuracy([r for r in rows if r["source"] == s])
            for s in sorted({r["source"] for r in rows}, key=sort_key)
        },
    }
    if base_rows and not is_baseline:
        t = paired_test(rows, base_rows, seed=seed, n_resamples=N_PERMUTATIONS)
        e.update(test=t["test"], n_pairs=t["n_pairs"], n_paired_rows=t["n_paired_rows"], p_value=t["p_value"],
                 p_exact=t["exact"])
    return e


def _kind(reason: Any) -> str:
    """The part of a failure message before its first ':' (e.g. 'context_overflow'), masked."""
    text = safe(reason).split(":", 1)[0].strip() or "unspecified"
    return text[:60]


# ------------------------------------------------------------------------------------ tables


def _count(total: int, live: int) -> str:
    return f"{total:,} ({live:,} live)"


def _phases(bench: dict) -> list[str]:
    seen = {p for e in bench["methods"] for p in e["cost"]}
    return [*PHASES, *sorted(seen - set(PHASES))]


def _main_table(b: dict) -> Table:
    rows = []
    for e in b["methods"]:
        name = safe(e["method"]) + (" (baseline)" if e["is_baseline"] else "")
        if e["status"] != "ok":
            rows.append([name, e["status"], NA, NA, "0", NA, NA, str(e["failed_calls"])])
            continue
        sd = f" ± {pct(e['seed_sd'])}" if e["seed_sd"] is not None else " (1 seed)"
        delta = f"{e['delta_pp']:+.1f}" if e.get("delta_pp") is not None else NA
        acc = f"{pct(e['accuracy'])} [{pct(e['ci_lo'])}, {pct(e['ci_hi'])}]"
        rows.append(
            [
                name,
                f"DEGRADED ({acc})" if e.get("degraded") else acc,
                delta,
                fmt_p(e.get("p_holm")),
                str(e["n_tasks"]),
                f"{e['failed_rows']}/{e['n_rows']}",
                pct(e["seed_mean"]) + sd,
                str(e["failed_calls"]),
            ]
        )
    notes = [_test_note(b)]
    for u in b.get("unavailable") or []:
        notes.append(f"Unavailable ({safe(u.get('source'))}): {safe(u.get('reason'))}; no score is reported.")
    degraded = [line for e in b["methods"] for line in e.get("degraded") or []]
    if degraded:
        notes.append("DEGRADED cells lost more than the allowed share of their work, so their accuracy is not "
                     "comparable with healthy cells: " + " | ".join(safe(x) for x in degraded) + ".")
    if not b["baseline_present"] and not b.get("unavailable"):
        notes.append(
            f"Baseline {safe(b['baseline'])} has no results for this benchmark: "
            f"Δ and p are not computed ({NA})."
        )
    return Table(
        f"{b['benchmark']}: leaderboard",
        [
            "method",
            "accuracy % [95% CI]",
            "Δ vs baseline (pp)",
            "p (Holm)",
            "n tasks",
            "failed tasks / rows",
            "seeds: mean ± sd %",
            "failed calls",
        ],
        rows,
        " ".join(n for n in notes if n),
    )


def _test_note(b: dict) -> str:
    """Which test each p is, on how many tasks, and the Holm family it is corrected in."""
    tested = [e for e in b["methods"] if e.get("test")]
    if not tested:
        return ""
    base = safe(b["baseline"])
    per = "; ".join(
        f"{safe(e['method'])}: {TEST_NAMES[e['test']]}, {e['n_pairs']} paired tasks ({e['n_paired_rows']} "
        f"task x seed rows), " + ("exact" if e.get("p_exact") else f"{N_PERMUTATIONS} seeded sign patterns")
        for e in tested
    )
    m = b.get("holm_m", 0)
    return (f"p vs {base}, with the task as unit: {per}. p (Holm): Holm-Bonferroni over the {m} method"
            f"{'' if m == 1 else 's'} compared with {base} on this benchmark.")


def _cost_table(b: dict) -> Table:
    phases = _phases(b)
    reasons = any(c.get("reasoning") for e in b["methods"] for c in e["cost"].values())
    what = ("calls", "tokens", "reasoning") if reasons else ("calls", "tokens")
    header = ["method"] + [f"{p} {w}" for p in phases for w in what] + ["failed calls"]
    rows = []
    for e in b["methods"]:
        cells = [safe(e["method"]) + (" (DEGRADED)" if e.get("degraded") else "")]
        for p in phases:
            c = e["cost"].get(p, {"calls": 0, "calls_live": 0, "tokens": 0, "tokens_live": 0})
            cells += [_count(c["calls"], c["calls_live"]), _count(c["tokens"], c["tokens_live"])]
            if reasons:
                cells.append(f"{c.get('reasoning', 0):,}")
        rows.append(cells + [str(e["failed_calls"])])
    return Table(
        f"{b['benchmark']}: cost",
        header,
        rows,
        "Logical calls = live + cached (live in parentheses); tokens = input + visible output; reasoning = "
        "reasoning tokens (billed as output, counted apart; shown when the backend reported any). A build that was "
        "interrupted and then resumed replays its earlier calls from the cache: they count once as live and "
        "again as cached. Failed calls: calls that left the method without a usable reply (an error, a prompt "
        "over the context window, a reply still invalid after the structured-output retry), as under Failures.",
    )


def _stage_table(b: dict) -> Table | None:
    """Learning cost per stage (SourceLearn's construct_*, ms_*, mt_*; RAPTOR's summaries; ...)."""
    rows = []
    for e in b["methods"]:
        for stage, c in sorted(e.get("stages", {}).items()):
            rows.append([safe(e["method"]), safe(stage), _count(c["calls"], c["calls_live"]),
                         _count(c["tokens"], c["tokens_live"]), f"{c['seconds']:,.0f}", str(c["failed"])])
    if not rows:
        return None
    return Table(
        f"{b['benchmark']}: learning cost by stage",
        ["method", "stage", "calls", "tokens", "model seconds (live)", "failed calls"],
        rows,
        "Summed over sources and seeds. A stage whose artifact several methods share (SourceLearn's M0 "
        "and MS, shared by its variants) is billed once, to the method that built it; the others reuse "
        "it with no calls. Model seconds add up the duration of every live call, so concurrent calls "
        "count more than wall time.",
    )


def _seed_table(b: dict) -> Table:
    seeds = sorted({s for e in b["methods"] for s in e.get("seed_acc", {})}, key=sort_key)
    rows = [
        [safe(e["method"])]
        + ([pct(e["seed_acc"].get(s)) for s in seeds] if e["status"] == "ok" else [e["status"]] * len(seeds))
        for e in b["methods"]
    ]
    return Table(
        f"{b['benchmark']}: accuracy % per split seed",
        ["method"] + [f"seed {s}" for s in seeds],
        rows,
        "Each seed: mean over sources of the source's mean score.",
    )


def _source_table(b: dict) -> Table:
    ms = b["methods"]
    rows = [
        [safe(s)] + [pct(e["per_source"].get(s)) if e["status"] == "ok" else e["status"] for e in ms]
        for s in b["sources"]
    ]
    return Table(
        f"{b['benchmark']}: accuracy % per source",
        ["source"] + [safe(e["method"]) for e in ms],
        rows,
        "Each source: mean over seeds of the source's mean score.",
    )


def _failure_table(data: RunData, summary: list[dict]) -> Table:
    calls = Counter(
        (f.get("benchmark"), f.get("method"), f.get("phase"), _kind(f.get("error"))) for f in data.failures
    )
    rows = [
        [safe(b), safe(m), "failed call", safe(p), k, str(n)]
        for (b, m, p, k), n in sorted(calls.items(), key=lambda kv: tuple(str(x) for x in kv[0]))
    ]
    for b in summary:
        for e in b["methods"]:
            for k, n in sorted(e.get("failure_reasons", {}).items()):
                rows.append([safe(b["benchmark"]), safe(e["method"]), "scored failure (0)", NA, k, str(n)])
    return Table(
        "Failures",
        ["benchmark", "method", "what", "phase", "kind", "count"],
        rows,
        "Failed calls from failures.jsonl; scored failures from results.jsonl, counted as 0.",
    )


def _provenance(data: RunData, seed: int, n_boot: int) -> list[Table]:
    run = data.run
    info = [
        ("run id", safe(run.get("run_id"))),
        ("created", safe(run.get("created"))),
        ("command", safe(run.get("command"))),
        ("git commit", safe(run.get("git_commit") or "unknown")),
        ("model", _describe(run.get("model"), _MODEL_SETTINGS)),
        ("judge model", _describe(run.get("judge_model"), _MODEL_SETTINGS)),
        ("embedder", _describe(run.get("embedder"), _EMBEDDER_SETTINGS)),
        ("split seeds", ", ".join(safe(s) for s in run.get("seeds") or []) or NA),
        ("task limit", safe(run.get("limit")) if run.get("limit") is not None else "none"),
        ("report bootstrap", f"{n_boot} resamples, seed {seed}"),
    ]
    methods = [
        [
            safe(m.get("name")),
            safe(m.get("version")),
            "; ".join(d for n, d in _deviations({"methods": [m]})) or "none",
        ]
        for m in run.get("methods") or []
        if isinstance(m, dict)
    ]
    sources = [
        [safe(s.get(k)) for k in ("id", "origin", "fingerprint", "n_elements")]
        for s in run.get("sources") or []
        if isinstance(s, dict)
    ]
    versions = run.get("versions") or {}
    flat = {}
    if isinstance(versions, dict):
        for k, v in versions.items():
            flat.update({f"{k}/{kk}": vv for kk, vv in v.items()} if isinstance(v, dict) else {k: v})
    return [
        Table("Run", ["field", "value"], [list(kv) for kv in info]),
        Table("Methods", ["method", "version", "deviations"], methods),
        Table("Sources", ["id", "origin", "fingerprint", "n elements"], sources),
        Table("Versions", ["component", "version"], [[safe(k), safe(v)] for k, v in sorted(flat.items())]),
    ]


def caption(data: RunData, baseline: str, seed: int, n_boot: int) -> list[str]:
    """The sentences every rendering starts with: how each number was computed and on what."""
    run = data.run
    devs = _deviations(run)
    seeds = ", ".join(safe(s) for s in run.get("seeds") or []) or NA
    return [
        f"Macro accuracy (%): {AGGREGATION_RULE}.",
        f"95% CI: {CI_METHOD} ({n_boot} resamples, seed {seed}).",
        f"Δ: accuracy minus the baseline's ({safe(baseline)}), in percentage points.",
        (
            f"p: {paired_test_caption(N_PERMUTATIONS, seed)}. p (Holm): Holm-Bonferroni over the methods "
            f"compared with {safe(baseline)} on the same benchmark, {HOLM_FAMILY} as in the reproduce tables "
            "(a run folder is one backend); * p<0.05, ** p<0.01, *** p<0.001."
        ),
        "n tasks: distinct test tasks; failed tasks / rows: scored failures over task x seed rows.",
        (
            f"Model: {_describe(run.get('model'), _MODEL_SETTINGS)}; judge: "
            f"{_describe(run.get('judge_model'), _MODEL_SETTINGS)}; embedder: "
            f"{_describe(run.get('embedder'), _EMBEDDER_SETTINGS)}; seeds: {seeds}; git commit: "
            f"{safe(run.get('git_commit') or 'unknown')}."
        ),
        "Deviations: " + ("; ".join(f"{', '.join(ms)}: {d}" for d, ms in _by_text(devs).items())
                          if devs else "none declared") + ".",
    ]


def _forest(b: dict) -> Figure | None:
    """The benchmark's leaderboard as a forest plot (``figures.forest_png``); None when no method ran."""
    if not any(e["status"] == "ok" for e in b["methods"]):
        return None
    from .figures import _slug, forest_png  # matplotlib only when there is something to draw

    return Figure(f"{b['benchmark']}: accuracy and difference from the baseline", f"forest_{_slug(b['benchmark'])}.png",
                  forest_png(b), "Left: macro accuracy with its 95% bootstrap interval (task as unit), the baseline's "
                  "as a dotted line; right: Δ vs the baseline in pp with the Holm-adjusted task-level paired p, as "
                  "in the table. Red hollow markers and a red name: DEGRADED cells (not comparable, see the note).")


def build_tables(data: RunData, summary: list[dict]) -> list[tuple[str, list[Table | Figure]]]:
    """(section title, tables and the forest plot) in display order."""
    sections = [
        (safe(b["benchmark"]), [t for t in (_main_table(b), _forest(b), _cost_table(b), _stage_table(b),
                                             _seed_table(b), _source_table(b)) if t is not None])
        for b in summary
    ]
    if data.failures or any(e.get("failure_reasons") for b in summary for e in b["methods"]):
        sections.append(("Failures", [_failure_table(data, summary)]))
    return sections


# ------------------------------------------------------------------------------------ rendering


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
        "test",
        "n_pairs",
        "n_paired_rows",
        "p_exact",
        "p_value",
        "p_holm",
        "holm_family_size",
        "n_tasks",
        "n_rows",
        "failed_rows",
        "seed_mean_pct",
        "seed_sd_pct",
        *[f"acc_seed{s}_pct" for s in seeds],
    ]
    header += [f"{p}_{w}" for p in phases for w in ("calls", "calls_live", "tokens", "tokens_live", "failed")]
    header += ["failed_calls"] + [f"{p}_reasoning_tokens" for p in phases] + ["degraded"]
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
                e.get("test") or "",
                _num(e.get("n_pairs"), "{}"),
                _num(e.get("n_paired_rows"), "{}"),
                "" if e.get("p_exact") is None else int(e["p_exact"]),
                _num(e.get("p_value"), "{:.6g}"),
                _num(e.get("p_holm"), "{:.6g}"),
                _num(e.get("holm_m") if e.get("p_value") is not None else None, "{}"),
                e.get("n_tasks", 0),
                e.get("n_rows", 0),
                e.get("failed_rows", 0),
                _pct_num(e.get("seed_mean")),
                _pct_num(e.get("seed_sd")),
                *[_pct_num(e.get("seed_acc", {}).get(s)) for s in seeds],
            ]
            for p in phases:
                c = e["cost"].get(p, {})
                row += [c.get(k, 0) for k in ("calls", "calls_live", "tokens", "tokens_live", "failed")]
            w.writerow(row + [e["failed_calls"]] + [e["cost"].get(p, {}).get("reasoning", 0) for p in phases]
                       + ["; ".join(safe(x) for x in e.get("degraded") or [])])
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
    """Write leaderboard.md/.csv/.html into ``out_dir`` (default ``<run_dir>/report``); return their paths.

    ``protocols`` (names from ``reports.protocols.PROTOCOLS``) appends their sections to the Markdown
    and HTML; ``None`` means the run's defaults (``default_protocols``), ``[]`` none. ``data_dir`` is
    where the key-overlap protocol finds the benchmark data.
    """
    data = load_run(run_dir)
    out = Path(out_dir) if out_dir is not None else data.run_dir / "report"
    summary = summarize(data, baseline=baseline, seed=seed, n_boot=n_boot)
    cap = caption(data, baseline, seed, n_boot)
    sections = build_tables(data, summary)
    from .protocols import default_protocols, parse_protocols

    names = default_protocols(data) if protocols is None else parse_protocols(protocols)
    if names:
        from .protocols.render import protocol_sections

        sections += protocol_sections(data, names, baseline=baseline, data_dir=Path(data_dir) if data_dir else None)
    prov = _provenance(data, seed, n_boot)
    title = f"SourceBench leaderboard: run {safe(data.run.get('run_id') or data.run_dir.name)}"
    seeds = sorted({s for b in summary for e in b["methods"] for s in e.get("seed_acc", {})}, key=sort_key)
    paths = {"md": out / "leaderboard.md", "csv": out / "leaderboard.csv", "html": out / "leaderboard.html"}
    atomic_write_text(paths["md"], render_markdown(title, cap, sections, prov))
    atomic_write_text(paths["csv"], render_csv(summary, seeds))
    page = render_html(title, cap, sections, prov)
    # -- link hook: per-task pages (reports/compare.py) linked from each method's rows --
    from .compare import link_task_pages

    page = link_task_pages(data, summary, out, baseline, page)
    # -- end of link hook --
    atomic_write_text(paths["html"], page)
    for f in (t for _, tables in sections for t in tables if isinstance(t, Figure)):
        paths[f.filename] = out / f.filename
        paths[f.filename].write_bytes(f.png)
    return paths
