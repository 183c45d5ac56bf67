"""The statistics tables of a run folder's leaderboard: the numbers of every method on every benchmark
(``summarize``, plain dicts computed once) laid out as neutral tables and figures (``build_sections``),
with the definitions of every number (``definitions``), the declared deviations and the provenance.
Rendering them as Markdown, HTML and CSV is ``reports.layout``'s and ``reports.leaderboard``'s.

Only the run.json fields named in the format doc are read, model settings are reduced to a
whitelist, and every free text is passed through ``safe``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from sourcebench.harness.health import run_health
from sourcebench.harness.method import learn_notes

from .layout import Figure, Section, pct
from .provenance_marks import by_source, mark
from .rundata import (
    EMBEDDER_SETTINGS,
    MODEL_SETTINGS,
    PHASES,
    RunData,
    benchmarks,
    cell_logs,
    describe_settings,
    deviations,
    deviations_by_text,
    failure_kind,
    methods_of,
    split_manifests,
    unavailable_sources,
    usage_cost,
    with_failures,
)
from .stats import (
    AGGREGATION_RULE,
    CI_METHOD,
    DELTA_METHOD,
    HOLM_FAMILY,
    MIN_PAIRS,
    N_PERMUTATIONS,
    accuracy_ci,
    format_delta_interval,
    format_p,
    holm_by_family,
    learning_sd,
    macro_accuracy,
    min_detectable_effect,
    paired_test,
    paired_test_caption,
    per_seed_accuracy,
    sort_key,
    stars,
    within_task_sd,
)
from .table import NA, Link, Table
from .text import safe

NOT_RUN = "not run"
SMALL_RUN_PP = 5.0  # a run that cannot resolve differences this large says so above its tables
UNAVAILABLE = "unavailable"
TEST_NAMES = {
    "mcnemar_exact": "exact McNemar on the paired tasks (each task one binary pair, sources of equal size)",
    "paired_permutation": "sign-flip test of the per-task mean differences (seeds averaged within a task)",
}



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
                e.update(method_numbers(rows, base_rows, method == baseline, seed, n_boot))
            entries.append(e)
        # one Holm family per benchmark: the methods compared with the baseline on it (HOLM_FAMILY)
        adjusted, sizes = holm_by_family([e.get("p_value") for e in entries], [bench] * len(entries))
        base_degraded = any(e["is_baseline"] and e.get("degraded") for e in entries)
        for e, p, m in zip(entries, adjusted, sizes):
            e["p_holm"], e["holm_m"] = p, m
            e["base_degraded"] = base_degraded and not e["is_baseline"]
            if e.get("null_se") is not None:
                mde = min_detectable_effect(e["null_se"], max(1, m))
                e["mde_pp"] = None if mde is None else 100.0 * mde
                e["resolvable"] = None if mde is None or e.get("delta_pp") is None else abs(e["mean_diff"]) >= mde
            if e.get("n_pairs") is not None:
                e["floor_pp"], e["min_groups"] = resolution(e["n_pairs"], e.get("n_groups") or 0, max(1, m))
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
                "substitutes": by_source(data.run, sources),  # source -> footnote: not its pinned tree
            }
        )
    return out


def method_numbers(rows, base_rows, is_baseline, seed, n_boot) -> dict[str, Any]:
    lo, hi = accuracy_ci(rows)
    seeds = per_seed_accuracy(rows)
    vals = list(seeds.values())
    lsd, n_common = learning_sd(rows)
    e: dict[str, Any] = {
        "learning_sd": lsd,
        "n_common_tasks": n_common,
        "accuracy": macro_accuracy(rows),
        "ci_lo": lo,
        "ci_hi": hi,
        "n_tasks": len({(r["source"], r["task_id"]) for r in rows}),
        "n_rows": len(rows),
        "failed_rows": sum(1 for r in rows if r.get("failed")),
        "failure_reasons": Counter(failure_kind(r.get("failure_reason")) for r in rows if r.get("failed")),
        "seed_acc": seeds,
        "seed_mean": float(np.mean(vals)),
        "seed_sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else None,
        "per_source": {
            s: macro_accuracy([r for r in rows if r["source"] == s])
            for s in sorted({r["source"] for r in rows}, key=sort_key)
        },
    }
    e["failed_share"] = e["failed_rows"] / e["n_rows"] if e["n_rows"] else 0.0
    e.update(_epoch_numbers(rows))
    if base_rows and not is_baseline:
        t = paired_test(rows, base_rows, seed=seed, n_resamples=N_PERMUTATIONS, n_boot=n_boot)
        e.update(test=t["test"], n_pairs=t["n_pairs"], n_paired_rows=t["n_paired_rows"], p_value=t["p_value"],
                 p_exact=t["exact"], p_mc_se=t["p_mc_se"], n_groups=t["n_groups"], mean_diff=t["mean_diff"],
                 null_se=t["null_se"], untested=t.get("reason"), a_missing=t["a_missing"],
                 b_missing=t["b_missing"], n_tasks_base=t["n_tasks_b"],
                 delta_pp=None if t["mean_diff"] is None else 100.0 * t["mean_diff"],
                 delta_lo=None if t["ci_lo"] is None else 100.0 * t["ci_lo"],
                 delta_hi=None if t["ci_hi"] is None else 100.0 * t["ci_hi"])
        e["incomplete"] = bool(t["a_missing"] or t["b_missing"])
    return e


def _epoch_numbers(rows: list[dict]) -> dict[str, Any]:
    """Answers per task (``--epochs``) and the mean within-task sd of their scores (None with one answer)."""
    sd, n, epochs = within_task_sd(rows)
    return {"epochs": epochs, "within_task_sd": sd, "n_epoch_tasks": n}


def resolution(n_pairs: int, n_groups: int, m: int = 1) -> tuple[float | None, int]:
    """(the smallest Δ in points the run could detect, the fewest differing groups any detection needs).

    The sign-flip test resolves Δ = Σ c_g (c_g: a group's contribution) with 80% power at level
    0.05 / m when |Δ| >= z·sqrt(Σ c_g²) (``min_detectable_effect``), z = z_{1-α/2m} + z_{0.8}. Since
    |Σ c_g| <= sqrt(k)·sqrt(Σ c_g²) over the k groups that differ, no Δ is detectable unless
    k >= z², whatever the answers: with fewer paired groups the first value is None. Otherwise, for
    tasks scored 0 or 1 (a differing task moves Δ by 1 / n), the best case, every differing task
    favouring one side, needs z² of the n paired tasks: Δ >= 100·z² / n points."""
    z2 = (min_detectable_effect(1.0, m) or 0.0) ** 2
    need = math.ceil(z2)
    if n_groups < need or not n_pairs:
        return None, need
    return 100.0 * z2 / n_pairs, need


def resolution_text(e: dict) -> str:
    """What one comparison can show at this size, as a clause after the method's name ("" when it resolves
    differences under 5 points)."""
    if e.get("n_pairs") is None or "min_groups" not in e:
        return ""
    size = f"{e['n_pairs']} paired tasks in {e.get('n_groups') or 0} groups"
    if e.get("floor_pp") is None:
        return (f"with {size}, this run cannot detect any difference from the baseline "
                f"(80% power at the Holm threshold needs at least {e['min_groups']} groups that differ, "
                "whatever the answers): its numbers show that the pipeline ran, not which method is better")
    if e["floor_pp"] < SMALL_RUN_PP:
        return ""
    return (f"with {size}, this run cannot detect a difference from the baseline below "
            f"{e['floor_pp']:.0f} points (80% power at the Holm threshold, in the best case of every differing "
            "task favouring one side); a smaller Δ is not a result")


def resolution_lines(methods: list[dict]) -> list[str]:
    """The methods whose comparisons share one size limit named together, one clause per limit."""
    by_text: dict[str, list[str]] = {}
    for e in methods:
        text = resolution_text(e)
        if text:
            by_text.setdefault(text, []).append(safe(e["method"]))
    return [f"{', '.join(names)}: {text}" for text, names in by_text.items()]


def comparable(e: dict) -> bool:
    """Whether an entry's comparison may carry stars or a "best" mark: neither degraded nor incomplete."""
    return not e.get("degraded") and not e.get("incomplete") and not e.get("base_degraded")


def score_text(e: dict) -> str:
    """Accuracy with its interval, the failed share beside it when not zero, and the DEGRADED mark."""
    acc = f"{pct(e['accuracy'])} [{pct(e['ci_lo'])}, {pct(e['ci_hi'])}]"
    if e.get("failed_share"):
        acc += f" ({100.0 * e['failed_share']:.1f}% failed)"
    return f"DEGRADED ({acc})" if e.get("degraded") else acc


def delta_text(e: dict) -> str:
    """Δ (the tested statistic) with its paired interval; INCOMPLETE when a side is missing tasks."""
    if e.get("delta_pp") is None:
        return NA
    if e.get("untested") and e.get("n_pairs", 0) < MIN_PAIRS:
        return f"{NA} ({e['n_pairs']} pairs)"
    out = format_delta_interval(e["delta_pp"], e.get("delta_lo"), e.get("delta_hi"), e.get("untested"))
    if e.get("incomplete"):
        out += " INCOMPLETE"
    return out


def p_cell(e: dict) -> str:
    """Holm-adjusted p with stars, stars withheld from degraded or incomplete comparisons."""
    if e.get("p_holm") is None:
        return NA
    return f"{format_p(e['p_holm'], e.get('p_mc_se'))} {stars(e['p_holm'], comparable(e))}".strip()


def mde_text(e: dict) -> str:
    """The comparison's MDE; without one (too few pairs, no discordance), the best case at this size."""
    if "min_groups" in e and e.get("floor_pp") is None:  # too few groups for any detection, whatever p says
        return f"none possible (< {e['min_groups']} groups)"
    if e.get("mde_pp") is None:
        return f"≥ {e['floor_pp']:.1f} (best case)" if e.get("floor_pp") is not None else NA
    out = f"{e['mde_pp']:.1f}"
    return out + " (not resolvable by this run)" if e.get("resolvable") is False else out


# ------------------------------------------------------------------------------------ tables


def _count(total: int, live: int) -> str:
    return f"{total:,} ({live:,} live)"


def _phases(bench: dict) -> list[str]:
    seen = {p for e in bench["methods"] for p in e["cost"]}
    return [*PHASES, *sorted(seen - set(PHASES))]


def main_table(b: dict, task_pages: dict[str, str] | None = None) -> Table:
    """The leaderboard of one benchmark; a method's name links to its task-by-task page when given."""
    rows = []
    for e in b["methods"]:
        name = safe(e["method"]) + (" (baseline)" if e["is_baseline"] else "")
        page = (task_pages or {}).get(e["method"])
        tasks = [Link("task by task", page) if page else NA] if task_pages is not None else []
        if e["status"] != "ok":
            rows.append([name, e["status"], NA, NA, NA, NA, "0", NA, NA, NA, str(e["failed_calls"]), *tasks])
            continue
        sd = f" ± {pct(e['seed_sd'])}" if e["seed_sd"] is not None else " (1 seed)"
        pairs = (f"{e['n_pairs']} of {max(e['n_tasks'], e.get('n_tasks_base', 0))} ({e['n_groups']} groups)"
                 if e.get("n_pairs") is not None else NA)
        rows.append(
            [
                name,
                mark(score_text(e), bool(b.get("substitutes"))),
                delta_text(e),
                p_cell(e),
                pairs,
                mde_text(e),
                str(e["n_tasks"]),
                f"{e['failed_rows']}/{e['n_rows']}",
                pct(e["seed_mean"]) + sd,
                NA if e.get("learning_sd") is None else f"{pct(e['learning_sd'])} ({e['n_common_tasks']} tasks)",
                str(e["failed_calls"]),
                *tasks,
            ]
        )
    notes = [_test_note(b), *b.get("substitutes", {}).values()]
    for u in b.get("unavailable") or []:
        notes.append(f"Unavailable ({safe(u.get('source'))}): {safe(u.get('reason'))}; no score is reported.")
    degraded = [line for e in b["methods"] for line in e.get("degraded") or []]
    if degraded:
        notes.append("DEGRADED cells lost more than the allowed share of their work, so their accuracy is not "
                     "comparable with healthy cells (no stars): " + " | ".join(safe(x) for x in degraded) + ".")
    incomplete = [e for e in b["methods"] if e.get("incomplete")]
    if incomplete:
        notes.append("INCOMPLETE: a side is missing tasks the other scored, so the accuracies are over different "
                     "task sets; Δ and p are on the shared tasks only and get no stars: " + "; ".join(
                         f"{safe(e['method'])} lacks {e['a_missing']} of the baseline's tasks, the baseline lacks "
                         f"{e['b_missing']} of its tasks" for e in incomplete) + ".")
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
            "Δ vs baseline (pp) [95% CI]",
            "p (Holm)",
            "paired tasks (groups)",
            "MDE 80% (pp)",
            "n tasks",
            "failed tasks / rows",
            "seeds: mean ± sd %",
            "learning sd (pp)",
            "failed calls",
            *(["wins, losses, ties"] if task_pages is not None else []),
        ],
        rows,
        " ".join(n for n in notes if n),
    )


def _test_note(b: dict) -> str:
    """Which test each p is, on how many tasks, and the Holm family it is corrected in."""
    tested = [e for e in b["methods"] if e.get("test")]
    untested = "".join(f" {safe(e['method'])}: not tested ({e['untested']}), {NA}." for e in b["methods"]
                       if e.get("untested") and not e.get("test"))
    if not tested:
        return untested.strip()
    base = safe(b["baseline"])
    per = "; ".join(
        f"{safe(e['method'])}: {TEST_NAMES[e['test']]}, {e['n_pairs']} paired tasks in {e['n_groups']} groups "
        f"({e['n_paired_rows']} task x seed rows), " + ("exact" if e.get("p_exact") else
                                                        f"{N_PERMUTATIONS} seeded sign patterns")
        for e in tested
    )
    m = b.get("holm_m", 0)
    return (f"p vs {base}, with the group as unit: {per}. p (Holm): Holm-Bonferroni over the {m} method"
            f"{'' if m == 1 else 's'} compared with {base} on this benchmark.{untested}")


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
        "interrupted and then resumed replays its earlier calls from the cache: each is counted once, as the live "
        "call it replays, not again as cached. Failed calls: calls that left the method without a usable reply (an error, a prompt "
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
        + ([mark(pct(e["seed_acc"].get(s)), bool(b.get("substitutes"))) for s in seeds] if e["status"] == "ok"
           else [e["status"]] * len(seeds))
        for e in b["methods"]
    ]
    return Table(
        f"{b['benchmark']}: accuracy % per split seed",
        ["method"] + [f"seed {s}" for s in seeds],
        rows,
        " ".join(["Each seed: mean over sources of the source's mean score.", *b.get("substitutes", {}).values()]),
    )


def _epoch_table(b: dict) -> Table | None:
    """Within-task variation of runs with repeated answers (``--epochs N``): none with one answer a task."""
    ran = [e for e in b["methods"] if e["status"] == "ok" and (e.get("epochs") or 1) > 1]
    if not ran:
        return None
    rows = [[safe(e["method"]), str(e["epochs"]),
             NA if e.get("within_task_sd") is None else f"{pct(e['within_task_sd'])} ({e['n_epoch_tasks']} tasks)"]
            for e in ran]
    return Table(f"{b['benchmark']}: within-task variation (repeated answers)",
                 ["method", "epochs", "within-task sd (pp)"], rows,
                 "Each task was answered once per epoch (the solver's seed changing with the epoch, at the run's "
                 "temperature) and scored per answer; its score is the mean over its epochs, so the task stays the "
                 "unit of every interval and test. Within-task sd: the mean over tasks of the sd (n - 1) of a "
                 "task's epoch scores, the answering noise a single answer per task would carry; failed tasks "
                 "left out.")


def _learning_notes(data: RunData, bench: str) -> Table | None:
    """What a method's learning noted about the artifact a cell was scored with (``REPORT_NOTES`` in the
    artifact's manifest, e.g. a stage not built and what is scored in its place), per source and seed."""
    cells = {(r["method"], r["source"], r["seed"], r["artifact"]) for r in data.results
             if r["benchmark"] == bench and r.get("artifact")}
    rows = [[safe(m), safe(s), str(seed), safe(note)]
            for m, s, seed, art in sorted(cells, key=lambda c: (str(c[0]), str(c[1]), sort_key(c[2])))
            for note in learn_notes(data.run_dir / "artifacts" / ("method_" + str(m).replace("/", "_")) / str(art))]
    if not rows:
        return None
    return Table(f"{safe(bench)}: notes recorded while learning, per seed", ["method", "source", "seed", "note"],
                 rows, "Each row: what the method recorded with the artifact that seed's scores come from.")


def _source_table(b: dict) -> Table:
    ms = b["methods"]
    rows = [
        [mark(safe(s), s in b.get("substitutes", {}))]
        + [pct(e["per_source"].get(s)) if e["status"] == "ok" else e["status"] for e in ms]
        for s in b["sources"]
    ]
    return Table(
        f"{b['benchmark']}: accuracy % per source",
        ["source"] + [safe(e["method"]) for e in ms],
        rows,
        " ".join(["Each source: mean over seeds of the source's mean score.", *b.get("substitutes", {}).values()]),
    )


def _failure_table(data: RunData, summary: list[dict]) -> Table:
    calls = Counter(
        (f.get("benchmark"), f.get("method"), f.get("phase"), failure_kind(f.get("error"))) for f in data.failures
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


def provenance_tables(data: RunData, seed: int, n_boot: int) -> list[Table]:
    run = data.run
    info = [
        ("run id", safe(run.get("run_id"))),
        ("created", safe(run.get("created"))),
        ("command", safe(run.get("command"))),
        ("git commit", safe(run.get("git_commit") or "unknown")),
        ("model", describe_settings(run.get("model"), MODEL_SETTINGS)),
        ("judge model", describe_settings(run.get("judge_model"), MODEL_SETTINGS)),
        ("embedder", describe_settings(run.get("embedder"), EMBEDDER_SETTINGS)),
        ("split seeds", ", ".join(safe(s) for s in run.get("seeds") or []) or NA),
        ("task limit", safe(run.get("limit")) if run.get("limit") is not None else "none"),
        ("report seed, bootstrap",
         f"seed {seed} (sign-flip draws); {n_boot} bootstrap resamples (break-even saving)"),
    ]
    methods = [
        [
            safe(m.get("name")),
            safe(m.get("version")),
            "; ".join(d for n, d in deviations({"methods": [m]})) or "none",
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
    split_rows, warnings = split_manifests(data)
    return [
        Table("Run", ["field", "value"], [list(kv) for kv in info]),
        *([Table("Splits", ["benchmark", "source", "seed", "guidance", "test", "guidance share %"], split_rows,
                 "Realised guidance share of each split (whole groups move, so it can miss the 30 % target). "
                 + (" WARNING: " + " | ".join(safe(w) for w in warnings) if warnings else ""))] if split_rows else []),
        Table("Methods", ["method", "version", "deviations"], methods),
        Table("Sources", ["id", "origin", "fingerprint", "n elements"], sources),
        Table("Versions", ["component", "version"], [[safe(k), safe(v)] for k, v in sorted(flat.items())]),
    ]


def definitions(data: RunData, baseline: str, seed: int, n_boot: int) -> list[str]:
    """How each number was computed and on what (shown folded below the tables)."""
    run = data.run
    seeds = ", ".join(safe(s) for s in run.get("seeds") or []) or NA
    return [
        f"Macro accuracy (%): {AGGREGATION_RULE}.",
        f"95% CI: {CI_METHOD}.",
        (f"Δ: {DELTA_METHOD} (seed {seed}); baseline {safe(baseline)}. Δ is not the difference "
         "of the accuracies when a side is missing tasks (INCOMPLETE) or seeds test different task sets; "
         f"with fewer than {MIN_PAIRS} paired tasks, or identical answers on every paired task, nothing is "
         f"tested ({NA})."),
        ("MDE 80%: the smallest |Δ| this comparison detects with 80% power at the Holm threshold of its "
         "family (two-sided 0.05 / m), from its paired groups and their observed discordance (the sign-flip "
         "null's standard deviation); a Δ below it is not resolvable by this run, whatever its p."),
        ("seeds: mean ± sd % mixes test-subset variation with learning variance over test sets that overlap "
         "(a task is tested under several split seeds); learning sd: the sd over seeds of the accuracy on the "
         "tasks every seed tested, the between-seed (learning) component."),
        (
            f"p: {paired_test_caption(N_PERMUTATIONS, seed)}. p (Holm): Holm-Bonferroni over the methods "
            f"compared with {safe(baseline)} on the same benchmark, {HOLM_FAMILY} as in the reproduce tables "
            "(a run folder is one backend); * p<0.05, ** p<0.01, *** p<0.001."
        ),
        ("n tasks: distinct test tasks; failed tasks / rows: scored failures over task x seed rows (scored 0; "
         "their share is shown next to the accuracy when not zero); paired tasks: tasks both sides scored, of "
         "the tasks either scored, in that many groups."),
        (
            f"Model: {describe_settings(run.get('model'), MODEL_SETTINGS)}; judge: "
            f"{describe_settings(run.get('judge_model'), MODEL_SETTINGS)}; embedder: "
            f"{describe_settings(run.get('embedder'), EMBEDDER_SETTINGS)}; seeds: {seeds}; git commit: "
            f"{safe(run.get('git_commit') or 'unknown')}."
        ),
        ("inspect log: each cell's inspect-ai log (method, source, split seed) opens in inspect-ai's log viewer: "
         f"start it with `inspect view --log-dir {safe(data.run_dir.resolve() / 'logs')}` (it serves "
         f"{VIEWER_URL}); the .eval files are in the run folder's logs/."),
    ]


def deviation_lines(run: dict[str, Any]) -> list[str]:
    """Every declared deviation once, with the methods (or the benchmark) declaring it."""
    devs = deviations(run)
    return ([f"{', '.join(ms)}: {d}" for d, ms in deviations_by_text(devs).items()] if devs
            else ["none declared"])


def scripted_models(run: dict[str, Any]) -> list[str]:
    """The run's model roles served by the scripted test model (``scripted/...``)."""
    out = []
    for role in ("model", "judge_model"):
        m = run.get(role)
        name = str(m.get("name") if isinstance(m, dict) else m or "")
        if name.startswith("scripted/"):
            out.append(f"{'solver' if role == 'model' else 'judge'} {safe(name)}")
    return out


def banners(data: RunData, summary: list[dict]) -> list[str]:
    """What the numbers of this run are not: a scripted-model run is a pipeline check; a run too small
    to resolve a difference says how small a difference it could resolve."""
    out = []
    scripted = scripted_models(data.run)
    if scripted:
        out.append(f"Pipeline check, not a result: this run's {' and '.join(scripted)} is the scripted test "
                   "model, which copies text from its prompt and does not read or reason; its scores check that "
                   "the harness ran end to end and say nothing about the methods.")
    for b in summary:
        lines = resolution_lines(b["methods"])
        if lines:
            out.append(f"Small run ({safe(b['benchmark'])}): " + "; ".join(lines) + ".")
    return out


VIEWER_URL = "http://127.0.0.1:7575"  # where ``inspect view`` serves its log viewer by default


def logs_table(data: RunData, bench: dict) -> Table | None:
    """Each cell's inspect-ai log, linked as a page of inspect-ai's log viewer (``inspect view``)."""
    current = {r["method"]: str(r.get("method_version", "")) for r in data.results
               if r.get("benchmark") == bench["benchmark"]}
    names = {e["method"] for e in bench["methods"]}
    rows = []
    for log in cell_logs(data.run_dir):
        if log.method not in names:
            continue
        status = log.status
        if log.version and current.get(log.method, log.version) != log.version:
            status += f"; superseded (version {log.version}, rows now of version {current[log.method]})"
        rows.append([safe(log.method), safe(log.source), safe(log.seed), safe(status), str(log.samples),
                     Link(log.path.name, f"{VIEWER_URL}/#/logs/{log.path.name}")])
    if not rows:
        return None
    return Table(f"{bench['benchmark']}: inspect logs of the test phase",
                 ["method", "source", "seed", "status", "samples", "log (in the viewer)"], rows,
                 "Each link opens the cell's log in inspect-ai's log viewer; start the viewer first with "
                 f"`inspect view --log-dir {safe(data.run_dir.resolve() / 'logs')}` (it serves {VIEWER_URL}).")


def forest_figure(b: dict) -> Figure | None:
    """The benchmark's leaderboard as a forest plot (``figures.forest_png``); None when no method ran."""
    if not any(e["status"] == "ok" for e in b["methods"]):
        return None
    from .figures import forest_png, slug  # matplotlib only when there is something to draw

    return Figure(mark(f"{b['benchmark']}: accuracy and difference from the baseline", bool(b.get("substitutes"))),
                  f"forest_{slug(b['benchmark'])}.png", forest_png(b), " ".join([
                      *b.get("substitutes", {}).values(),
                      ("Left: macro accuracy with its 95% interval (groups as clusters within sources), the "
                       "baseline's as a dotted line; right: Δ vs the baseline in pp on the paired tasks (the tested "
                       "statistic) with its 95% interval (the paired test inverted) and the Holm-adjusted p, as in the table. "
                       "Red hollow markers and a red name: DEGRADED or INCOMPLETE cells (not comparable, see the "
                       "note).")]))


def build_sections(data: RunData, summary: list[dict], task_pages: dict[str, str] | None = None) -> list[Section]:
    """Per benchmark: the leaderboard table and its forest plot shown, cost, per-seed, per-source tables
    and the logs folded; then the failures. ``task_pages``: method -> its task-by-task page, linked
    from the method's name."""
    sections = [
        Section(safe(b["benchmark"]), [t for t in (main_table(b, task_pages), forest_figure(b)) if t is not None],
                [t for t in (_cost_table(b), _stage_table(b), _seed_table(b), _epoch_table(b),
                             _learning_notes(data, b["benchmark"]), _source_table(b), logs_table(data, b))
                 if t is not None], "Cost, seeds, sources and inspect logs")
        for b in summary
    ]
    if data.failures or any(e.get("failure_reasons") for b in summary for e in b["methods"]):
        sections.append(Section("Failures", [_failure_table(data, summary)]))
    return sections
