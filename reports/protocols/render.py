"""Protocol results as leaderboard tables (``reports.leaderboard.Table``), one section per protocol.

Key-overlap and break-even are recomputed from the run folder each time (no model calls);
prequential and harmful-entry results are read from ``<run>/protocols/<name>.json``, written by
``sourcebench protocol NAME RUN_DIR`` (they need model calls), and a section says so when that
file is missing rather than showing nothing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import SourceBenchError
from sourcebench.harness.io import read_json

from ..layout import Figure, fmt_p, pct
from ..provenance_marks import mark, notes_for
from ..rundata import RunData, missing_rows
from ..stats import format_delta, wilson_interval
from ..table import NA, Table
from ..text import safe
from . import breakeven, keyoverlap
from .keyoverlap import GROUPS, NO_KEYS

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 24) -> str:
    """Values in [0, 1] as block characters (absolute scale), resampled to at most ``width``."""
    if not values:
        return ""
    if len(values) > width:
        idx = [round(i * (len(values) - 1) / (width - 1)) for i in range(width)]
        values = [values[i] for i in idx]
    return "".join(SPARK[min(len(SPARK) - 1, max(0, int(v * len(SPARK))))] for v in values)


def _num(x: float | None, fmt: str = "{:,.1f}") -> str:
    return NA if x is None else fmt.format(x)


def _unavailable(title: str, b: dict[str, Any]) -> Table:
    return Table(title, ["status"], [[safe(b.get("status", "unavailable"))]], safe(b.get("reason", "")))


# -- key-overlap ------------------------------------------------------------------------------------


def key_overlap_tables(result: dict[str, Any]) -> list[Table]:
    tables = []
    low = result.get("min_group_tasks", keyoverlap.MIN_GROUP_TASKS)
    for b in result["benchmarks"]:
        title = f"{safe(b['benchmark'])}: key-overlap groups"
        if b["status"] != "ok":
            tables.append(_unavailable(title, b))
            continue
        rows = []
        for m in b["methods"]:
            for g in (*GROUPS, NO_KEYS):
                c = m["groups"].get(g)
                if c is None:
                    continue
                n = f"{c.get('n_tasks', NA)} ({c['n']})"
                if c.get("too_small"):
                    rows.append([safe(m["method"]), g, n, f"{pct(c['accuracy'])} (too small)", NA, "too small",
                                 NA, "too small", _num(c.get("actions"))])
                    continue
                acc = pct(c["accuracy"]) + (f" [{pct(c['ci_lo'])}, {pct(c['ci_hi'])}]" if "ci_lo" in c else "")
                delta = format_delta(c.get("delta_pp"))
                if c.get("delta_lo") is not None:
                    delta += f" [{format_delta(c['delta_lo'])}, {format_delta(c['delta_hi'])}]"
                elif c.get("untested") and c.get("delta_pp") is not None:  # tested: Δ stays, the interval is —
                    delta = f"{delta if c.get('p_value') is not None else NA} ({c['untested']})"
                ref = safe(m.get("reference") or NA) + (" (baseline)" if m.get("reference_kind") == "baseline"
                                                        and m.get("reference") else "")
                pairs = f"{c['n_pairs']} ({c.get('n_groups', c['n_pairs'])} groups)" if c.get("n_pairs") else NA
                rows.append([safe(m["method"]), g, n, acc, ref, delta, pairs,
                             fmt_p(c.get("p_value"), mc_se=c.get("p_mc_se")), _num(c.get("actions"))])
        sizes = ", ".join(f"{g}: {b['tasks_by_group'].get(g, 0)}" for g in (*GROUPS, NO_KEYS)
                          if b["tasks_by_group"].get(g) or g in GROUPS)
        lead = " ".join(x for x in (f"Test tasks per group ({sizes}).", safe(b.get("note", ""))) if x)
        note = (f"{lead} {result['definition']}. Accuracy with its 95% interval (groups as clusters); Δ: the "
                "paired statistic vs the reference on the group's items, each task once (seeds averaged), with its "
                "95% interval (the paired test inverted) and the number of paired tasks (groups); reference: the method's "
                f"own zero-learning variant when the run has it, else {safe(result['baseline'])} (baseline); p: "
                "the leaderboard's paired test, uncorrected; a group with fewer than "
                f"{low} distinct tasks is too small to compare (no interval, Δ or p); n: distinct tasks (task x "
                "seed rows; a task can fall in different groups under different seeds); actions: mean per task "
                "where the method reports them (agent methods).")
        tables.append(Table(title, ["method", "group", "n tasks (rows)", "accuracy % [95% CI]", "reference",
                                    "Δ vs reference (pp) [95% CI]", "paired tasks (groups)", "p (uncorrected)",
                                    "actions"], rows, note))
    return tables


# -- break-even -------------------------------------------------------------------------------------


def break_even_tables(result: dict[str, Any]) -> list[Table]:
    tables = []
    for b in result["benchmarks"]:
        title = f"{safe(b['benchmark'])}: break-even vs each method's zero-learning variant (else the baseline)"
        if b["status"] != "ok":
            tables.append(_unavailable(title, b))
            continue
        rows = []
        for m in b["methods"]:
            ref = safe(m.get("reference", NA))
            if m.get("reference_kind") == "baseline":
                ref += f" (baseline; {safe(m['missing_variant'])})" if m.get("missing_variant") else " (baseline)"
            if m["status"] != "ok":
                rows.append([safe(m["method"]), ref if m.get("reference") else NA,
                             safe(m.get("reason") or m["status"])] + [NA] * 12)
                continue
            r = m["reference_costs"]
            rows.append([
                safe(m["method"]), ref, str(m["n_artifacts"]), _num(m["build_calls"]),
                _num(m.get("build_judge_calls")), _num(m["build_tokens"], "{:,.0f}"),
                _num(m.get("build_reasoning_tokens"), "{:,.0f}"),
                f"{_num(m['answer_calls_per_task'], '{:,.2f}')} / {_num(r['answer_calls_per_task'], '{:,.2f}')}",
                f"{_num(m['answer_tokens_per_task'], '{:,.0f}')} / {_num(r['answer_tokens_per_task'], '{:,.0f}')}",
                _num(m.get("answer_reasoning_tokens_per_task"), "{:,.0f}"),
                _saving(m, "calls", "{:+,.2f}"), _saving(m, "tokens", "{:+,.0f}"),
                _compared(m),
                breakeven.fmt_tasks(m["break_even_calls"]) + " / " + breakeven.fmt_tasks(m["break_even_tokens"])
                + _tasks_interval(m),
                _accuracy_change(m),
            ])
        note = (f"{breakeven.DEFINITION}. Reference: the method's declared zero-learning variant, else "
                f"{safe(result['baseline'])} ({breakeven.BASELINE_NOTE}). Build columns are the method's own "
                "learning per artifact (sub-artifacts it shares with its reference left out of both); answer "
                "columns: method / reference per task; compared: the paired (source, seed, task) answers with no "
                "failure on either side, of all paired answers, and the groups resampled. Savings and the "
                "break-even point (tokens) with their 95% interval: [—] where there is none (fewer than 5 paired "
                "tasks, the same saving on every task, or a run whose rows carry no per-task usage, where answer "
                "costs are per (source, seed) cell with no failed row, marked 'cells'); a break-even interval "
                "whose ends are the point itself (0: nothing to repay; never: no saving at either end) is not "
                "repeated.")
        tables.append(Table(title, ["method", "reference", "artifacts", "build calls / artifact",
                                    "of which judge calls", "build tokens / artifact", "of which reasoning",
                                    "answer calls / task (method / ref.)", "answer tokens / task (method / ref.)",
                                    "of which reasoning", "saving calls / task", "saving tokens / task",
                                    "compared", "break-even tasks (calls / tokens) [95% CI, tokens]",
                                    "Δ accuracy vs ref. (pp) [95% CI]"], rows,
                            note + " Break-even: — where the per-task saving is of round-off size (below a "
                            "millionth of the reference's per-task cost). Δ accuracy: the paired statistic (method "
                            "minus reference) on the compared cells' tasks, so a saving bought with accuracy shows."))
    return tables


def _saving(m: dict[str, Any], unit: str, fmt: str) -> str:
    """The per-task saving with its interval ([—]: none, see the note)."""
    out = _num(m[f"saving_{unit}_per_task"], fmt)
    if not m.get("per_task"):
        return out
    lo, hi = m.get(f"saving_{unit}_lo"), m.get(f"saving_{unit}_hi")
    return out + (f" [{fmt.format(lo)}, {fmt.format(hi)}]" if lo is not None else f" [{NA}]")


def _compared(m: dict[str, Any]) -> str:
    if not m.get("per_task"):
        return f"{m['cells_compared']} of {m['cells']} cells"
    groups = f", {m['accuracy_groups']} groups" if m.get("accuracy_groups") else ""
    return f"{m['pairs_compared']} of {m['pairs']} tasks{groups}"


def _tasks_interval(m: dict[str, Any]) -> str:
    if not m.get("per_task"):
        return ""
    lo, hi = m.get("break_even_tokens_lo"), m.get("break_even_tokens_hi")
    if lo is None or hi is None:
        return f" [{NA}]"
    lo_text, hi_text = breakeven.fmt_tasks(lo), breakeven.fmt_tasks(hi)
    # both ends the same (no build to repay: 0; a saving below 0 at both ends: never): the point says it all
    return "" if lo_text == hi_text == breakeven.fmt_tasks(m["break_even_tokens"]) else f" [{lo_text}, {hi_text}]"


def _accuracy_change(m: dict[str, Any]) -> str:
    """Δ accuracy on the same pairs as the saving, with its interval, so a saving bought with accuracy shows."""
    out = format_delta(m.get("accuracy_delta_pp"))
    if m.get("accuracy_lo_pp") is not None:
        out += f" [{format_delta(m['accuracy_lo_pp'])}, {format_delta(m['accuracy_hi_pp'])}]"
    elif m.get("per_task") and m.get("accuracy_delta_pp") is not None:
        out += f" [{NA}]" + (f" ({safe(m['accuracy_reason'])})" if m.get("accuracy_reason") else "")
    return out + (f" ({m['accuracy_pairs']} tasks)" if m.get("accuracy_pairs") else "")


# -- prequential ------------------------------------------------------------------------------------


def _checkpoints(n: int, starts: list[int], most: int = 12) -> list[int]:
    """Positions (1-based) shown in the curve table: block ends, the end, and evenly spaced fill."""
    marks = {s for s in starts if 0 < s <= n} | {n}
    if len(marks) < most:
        marks |= {max(1, round(n * k / most)) for k in range(1, most + 1)}
    return sorted(m for m in marks if 1 <= m <= n)[-most * 2:]


def prequential_tables(result: dict[str, Any]) -> list[Table | Figure]:
    ms = [m for m in result["methods"] if m.get("online") is not None]

    def cost(c: dict[str, float] | None) -> str:
        return NA if c is None else f"{_num(c['calls'])} / {_num(c['tokens'], '{:,.0f}')}"

    summary = [[safe(m["method"]), safe(m["mode"]), safe(m.get("reference", NA)), cost(m.get("reference_cost")),
                cost(m.get("online_learning_cost")), pct(m["online"]), pct(m["stateless"]),
                f"{m['gain_pp']:+.1f}", fmt_p(m.get("p_value")),
                sparkline([c["online"] for c in m["curve"]]) + " / " + sparkline([c["stateless"] for c in m["curve"]])]
               for m in ms]
    s = result.get("settings", {})
    blocks = f"blocks of {s['block_size']} tasks" if s.get("block_size") else f"{s.get('blocks')} blocks per stream"
    tables = [Table(
        "Prequential (online) evaluation", ["method", "learning", "stateless reference",
                                            "reference learning (calls / tokens per cell)",
                                            "online learning (calls / tokens per stream)", "online %", "stateless %",
                                            "gain (pp)", "p", "curve online / stateless"], summary,
        f"Each test task is answered before the method learns from it ({blocks}, stream order seed "
        f"{s.get('seed')}); stateless = the method's artifact learned from no task, named per method by its "
        "zero-learning variant (so gain is over a different reference per method: MS for SourceLearn, Hybrid "
        "RAG's prompt for RIKA and AWM). Gain: online - stateless (leaderboard aggregation), paired test on the "
        "same tasks. Reference learning: what the reference already cost to learn (shared sub-artifacts priced at "
        "the run's build of them on the source); online learning: the calls made learning along the stream (live + "
        "cached). Curves: cumulative mean score along the stream.")]
    if ms:
        n = min(len(m["curve"]) for m in ms)
        starts = sorted({x for m in ms for x in m.get("block_starts", [])})
        header = ["after n tasks"] + [f"{safe(m['method'])} online / stateless %" for m in ms]
        rows = [[str(k)] + [f"{pct(m['curve'][k - 1]['online'])} / {pct(m['curve'][k - 1]['stateless'])}"
                            for m in ms] for k in _checkpoints(n, starts)]
        note = ("Mean over (source, seed) streams of the cumulative mean score after n tasks; learning "
                f"points (tasks learned from) at {', '.join(str(x) for x in starts) or NA}.")
        tables.append(Table("Prequential curve: cumulative accuracy %", header, rows, note))
        from .curve import FILENAME, prequential_png  # matplotlib only when there is a curve to draw

        tables.append(Figure("Prequential curve", FILENAME, prequential_png(ms, starts),
                             note + " Solid: online; dashed: stateless; dotted: learning points."))
    return tables


# -- harmful entries --------------------------------------------------------------------------------


def harmful_tables(result: dict[str, Any]) -> list[Table]:
    rows, flagged = [], []
    for m in result["methods"]:
        if m["status"] in ("no entries", "not learned"):
            rows.append([safe(m["method"]), m["status"]] + [NA] * 9)
            continue
        n_art = sum(1 for a in m["artifacts"] if a.get("status") == "ok")
        rate = pct(m["rate"]) if m.get("rate") is not None else f"{NA} ({safe(m['status'])})"
        pooled = NA
        if m.get("n_evaluated"):
            lo, hi = wilson_interval(m["n_harmful"] / m["n_evaluated"], m["n_evaluated"])
            pooled = f"{pct(m['n_harmful'] / m['n_evaluated'])} [{pct(lo)}, {pct(hi)}]"
        rows.append([safe(m["method"]), safe(m.get("entry_kind")), str(n_art), str(m["n_entries"]),
                     str(m["n_exposed"]), str(m.get("n_undetectable", NA)), str(m.get("n_detectable", NA)),
                     str(m["n_evaluated"]), str(m["n_harmful"]), rate, pooled])
        for a in m["artifacts"]:
            for e in a.get("entries", []):
                if e["harmful"]:
                    flagged.append([safe(m["method"]), safe(a["source"]), str(a["seed"]), safe(e["text"][:160]),
                                    str(e["n_tasks"]), pct(e["with_mean"]), pct(e["without_mean"]),
                                    fmt_p(e["p_value"])])
    s = result.get("settings", {})
    need = result.get("min_detectable_tasks")
    detect = (f"Undetectable: exposed to fewer than {need} tasks, the fewest at which the exact sign-flip test can "
              f"give p < {s.get('alpha')} (its smallest p on n tasks is 2 / 2^n); not evaluated, and outside the "
              "rate's denominator. " if need else "")
    tables = [Table("Harmful entries (leave-one-out)", ["method", "entry", "artifacts", "entries", "exposed",
                                                        "undetectable", "detectable", "evaluated", "harmful",
                                                        "harmful rate % (of evaluated detectable)",
                                                        "pooled harmful / evaluated % [95% Wilson]"], rows,
                    f"{result['criterion']} (alpha {s.get('alpha')}, each entry's p uncorrected for the number of "
                    f"entries tested, {s.get('repeats')} repeat(s) per task, at most "
                    f"{s.get('max_entries') or 'all'} evaluated entries per artifact, seeded). Exposed: shown in "
                    f"the prompt of at least one test task. {detect}Entries: "
                    f"{result.get('entries', 'the method’s own units, not re-split into atomic claims')}. Harmful rate: mean "
                    "over artifacts of each artifact's rate; pooled: harmful over evaluated entries of all artifacts "
                    "with its Wilson 95% interval (entries taken as independent).")]
    if flagged:
        tables.append(Table("Harmful entries flagged", ["method", "source", "seed", "entry", "tasks",
                                                        "with %", "without %", "p (uncorrected)"], flagged,
                            "p: the entry's own paired test, not corrected for the many entries tested: some "
                            "flags are expected by chance (about alpha x evaluated entries)."))
    return tables


# -- dispatch ---------------------------------------------------------------------------------------

TITLES = {"key-overlap": "Protocol: key-overlap groups", "break-even": "Protocol: break-even",
          "prequential": "Protocol: prequential evaluation", "harmful": "Protocol: harmful entries"}


def stored(run_dir: Path, name: str) -> dict[str, Any] | None:
    path = Path(run_dir) / "protocols" / f"{name}.json"
    return read_json(path) if path.exists() else None


def _missing(name: str, run_dir: Path) -> list[Table]:
    return [Table(f"{name}: status", ["status"], [["not computed"]],
                  f"This protocol needs model calls: run `sourcebench protocol {name} {safe(run_dir)}` first.")]


def tables_for(name: str, data: RunData, baseline: str, data_dir: Path | None, seed: int = 0
               ) -> list[Table | Figure]:
    if name == "key-overlap":
        try:
            return key_overlap_tables(keyoverlap.compute(data, baseline=baseline, data_dir=data_dir, seed=seed))
        except SourceBenchError as e:
            return [_unavailable(TITLES[name], {"reason": str(e)})]
    if name == "break-even":
        return break_even_tables(breakeven.compute(data, baseline=baseline))
    result = stored(data.run_dir, name)
    if result is None:
        return _missing(name, data.run_dir)
    return prequential_tables(result) if name == "prequential" else harmful_tables(result)


_STARS = re.compile(r"\s\*{1,3}$")


def unhealthy_methods(data: RunData) -> dict[str, str]:
    """method -> 'DEGRADED' or 'INCOMPLETE' for the methods whose cells no protocol may present as a result."""
    from sourcebench.harness.health import run_health

    out: dict[str, str] = {}
    for c in run_health(data.run_dir, data.results, data.failures, run=data.run, usage=data.usage):
        if c.degraded:
            out[c.method] = "DEGRADED"
    for bench in {r["benchmark"] for r in data.results}:
        for m in {r["method"] for r in data.results if r["benchmark"] == bench}:
            if m not in out and missing_rows(data.results, bench, m)[0]:
                out[m] = "INCOMPLETE"
    return out


def mark_health(tables: list[Table | Figure], bad: dict[str, str]) -> list[Table | Figure]:
    """The health mark travels into protocol tables: a row whose method (first column) is degraded or
    incomplete is labelled so, and its p loses its stars."""
    for t in tables:
        if not isinstance(t, Table) or not bad:
            continue
        hit = set()
        for row in t.rows:
            name = row[0] if row else ""
            mark = bad.get(name)
            if mark:
                row[0] = f"{name} ({mark})"
                row[1:] = [_STARS.sub("", c) for c in row[1:]]
                hit.add(f"{name}: {mark}")
        if hit:
            t.note = (t.note + " " if t.note else "") + (
                "Not comparable with healthy cells (DEGRADED: lost more than the allowed share of its work; "
                "INCOMPLETE: fewer result rows than the folder's other methods), no stars: " + "; ".join(sorted(hit))
                + ".")
    return tables


def protocol_sections(data: RunData, names: list[str], baseline: str = "hybrid_rag",
                      data_dir: Path | None = None, seed: int = 0) -> list[tuple[str, list[Table | Figure]]]:
    """(section title, tables) for each requested protocol, in the order given, with health marks; ``seed``
    seeds the recomputed protocols' resampling (the report's --seed)."""
    bad = unhealthy_methods(data)
    notes = notes_for(data.run)
    return [(TITLES[n], mark_substitutes(mark_health(tables_for(n, data, baseline, data_dir, seed), bad), notes))
            for n in names]


def mark_substitutes(tables: list[Table | Figure], notes: list[str]) -> list[Table | Figure]:
    """A run whose numbers include a source that is not the paper's (``reports.provenance_marks``): every
    protocol table computed on it carries the mark in its title and the footnotes naming the trees."""
    if not notes:
        return tables
    for t in tables:
        t.title = mark(t.title, notes)
        if isinstance(t, Table):
            t.note = " ".join(x for x in (t.note, *notes) if x)
    return tables
