"""Break-even (seed 002, "amortization"): after how many tasks a method's learning pays for itself.

break-even tasks = extra build cost per artifact / per-task answering saving, in calls and tokens,
against a *reference*: the method's own zero-learning variant (``Method.zero_learning_variant``,
the registered method whose artifact is this one's learned from no task, answered by the same
reader; seed 002's number, about 3,400 questions, is against the untrained store with the same
reader) when it declares one and the run has it, else the run's baseline (Hybrid RAG), labelled as
such (with the variant the run lacks, if any). Against Hybrid RAG a method that answers with more
context can never break even.

* build cost per artifact: the method's ``learn``-phase calls (tokens) plus the judge calls it made
  while learning (phase ``learn_judge``), divided by the number of artifacts it learned (distinct
  (source, seed) keys of its learn rows; seed is null for artifacts shared by all seeds); stages of
  sub-artifacts that the method and its reference both declare (``Method.shared_stages``, e.g.
  SourceLearn's M0 and MS) are left out of both sides, since both artifacts contain them whichever
  method the run charged them to; extra = the method's minus the reference's, floored at 0;
* per-task answering cost: ``answer``-phase calls (tokens) of each task, from its result row's
  ``usage`` (the calls made while answering that task, divided by its epochs), on the tasks both sides
  answered with no failure on either side (a failed pair is left out of both sides); saving = the
  reference's cost - the method's, paired and aggregated as the leaderboard's Δ (the mean over sources
  of the mean per-task difference, a task's seeds averaged), with a 95% BCa cluster-bootstrap interval
  (within each source, whole groups of tasks resampled; the build cost is not resampled, so the interval
  of the break-even point, the build divided by each end of the saving's interval, is conditional on
  it). Runs whose rows carry no ``usage`` (written before it was recorded) fall back to usage.jsonl,
  which counts per (source, seed) cell: answer calls per row over the cells with no failed row on
  either side, with no interval.

Costs are logical (live + cached calls; a cached call is still a call the method needs); failed
calls are left out, as in the leaderboard's cost table. A task costing more than the reference's
(saving < 0), or the same with a build to repay, gives "never"; no extra build and no extra
per-task cost gives 0. Test-time judge calls are scoring and are not counted; runs made before the
``learn_judge`` phase existed record learn-time judge calls under ``judge`` with test scoring,
where they cannot be told apart (then not counted).
"""

from __future__ import annotations

import math
from typing import Any

from sourcebench.harness.resultrows import epochs_of

from ..rundata import RunData, benchmarks, methods_of
from ..stats import paired_delta, paired_test, paired_value_difference

DEFINITION = (
    "break-even tasks = (method's build cost per artifact - reference's) / (reference's answer cost per task - "
    "method's), in calls and in tokens (input + visible output + reasoning, all billed; reasoning also shown apart), "
    "live + cached calls from usage.jsonl; reference = the method's zero-learning variant (its artifact learned "
    "from no task, same reader) where it declares one, else the baseline; build = learn calls + judge calls made "
    "while learning, without the shared sub-artifacts both contain; answer cost per task from each result row's "
    "usage, on the tasks neither side failed, paired and aggregated as Δ (mean over sources of the mean per-task "
    "difference) with a 95% BCa cluster-bootstrap interval (groups resampled within sources; the build cost is "
    "not resampled); never = a task costs more than the reference's (or the same, with a build to repay)"
)
NEVER = "never"
LEARN_PHASES = ("learn", "learn_judge")
BASELINE_NOTE = "baseline: no zero-learning variant declared (more context than the baseline can never pay off)"


def _method_class(name: str) -> Any:
    from sourcebench.harness.registry import get_method_class

    try:
        return get_method_class(name)
    except Exception:  # noqa: BLE001 - a method not installed here: no declared variant or shared stages
        return None


def zero_learning_variant(method: str) -> str | None:
    cls = _method_class(method)
    v = getattr(cls, "zero_learning_variant", None) if cls is not None else None
    return str(v) if v else None


def shared_between(a: str, b: str) -> tuple[str, ...]:
    """Stage prefixes of sub-artifacts both methods declare (``Method.shared_stages``)."""
    ca, cb = _method_class(a), _method_class(b)
    if ca is None or cb is None:
        return ()
    return tuple(p for p in (ca.shared_stages or ()) if p in set(cb.shared_stages or ()))


def _cost(usage: list[dict[str, Any]], phases: tuple[str, ...], skip: tuple[str, ...] = ()
          ) -> tuple[int, int, int]:
    """Calls, tokens (input + visible output + reasoning: all billed) and reasoning tokens of live and cached
    calls in ``phases``, leaving out stages starting with a prefix in ``skip``."""
    calls = tokens = reasoning = 0
    for u in usage:
        if u.get("phase") not in phases or u.get("status") not in ("live", "cached"):
            continue
        if skip and str(u.get("stage") or "").startswith(skip):
            continue
        calls += int(u.get("calls") or 0)
        r = int(u.get("reasoning_tokens") or 0)
        tokens += int(u.get("input_tokens") or 0) + int(u.get("output_tokens") or 0) + r
        reasoning += r
    return calls, tokens, reasoning


def _cell(r: dict[str, Any]) -> tuple:
    return (r.get("source"), r.get("seed"))


def method_costs(data: RunData, benchmark: str, method: str, skip: tuple[str, ...] = (),
                 cells: set[tuple] | None = None) -> dict[str, Any]:
    """Build cost per artifact (without stages in ``skip``) and answer cost per task over ``cells``
    (default: every cell of the method)."""
    usage = [u for u in data.usage if u.get("benchmark") == benchmark and u.get("method") == method]
    rows = [r for r in data.results if r["benchmark"] == benchmark and r["method"] == method]
    learn = [u for u in usage if u.get("phase") in LEARN_PHASES and u.get("status") in ("live", "cached")]
    n_art = len({_cell(u) for u in learn})
    lc, lt, lr = _cost(learn, LEARN_PHASES, skip)
    jc, _, _ = _cost(learn, ("learn_judge",), skip)
    if cells is not None:
        rows = [r for r in rows if _cell(r) in cells]
        usage = [u for u in usage if _cell(u) in cells]
    ac, at, ar = _cost(usage, ("answer",))
    n_rows = len(rows)
    return {
        "n_rows": n_rows, "n_artifacts": n_art,
        "build_calls": lc / n_art if n_art else 0.0, "build_tokens": lt / n_art if n_art else 0.0,
        "build_reasoning_tokens": lr / n_art if n_art else 0.0,
        "build_judge_calls": jc / n_art if n_art else 0.0,
        "answer_calls_per_task": ac / n_rows if n_rows else None,
        "answer_tokens_per_task": at / n_rows if n_rows else None,
        "answer_reasoning_tokens_per_task": ar / n_rows if n_rows else None,
    }


NEGLIGIBLE = 1e-6  # a per-task saving below this share of the reference's per-task cost is round-off


def break_even(extra_build: float, saving: float | None, per_task: float = 0.0) -> float | str | None:
    """Tasks until the method has cost no more than the reference in total.

    ``never`` when each task costs more than the reference's, or the same with a build to repay;
    0 when nothing extra was built and a task costs no more; None ("—") when the saving is of
    round-off size (below ``NEGLIGIBLE`` of the reference's per-task cost ``per_task``), where the
    quotient would be a meaningless astronomic number.
    """
    if saving is None or 0 < abs(saving) < NEGLIGIBLE * max(1.0, per_task):
        return None
    if saving < 0 or (saving == 0 and extra_build > 0):
        return NEVER
    if extra_build <= 0:
        return 0.0
    return extra_build / saving


def bound(extra_build: float, saving: float | None, per_task: float = 0.0) -> float | str | None:
    """One end of the break-even interval from one end of the saving's: like ``break_even`` (decreasing in
    the saving), except that a saving of round-off size or less is ``never`` rather than "—" (tasks without
    bound), so the interval [bound(hi), bound(lo)] always reads."""
    if saving is None:
        return None
    tiny = NEGLIGIBLE * max(1.0, per_task)
    if extra_build <= 0:
        return 0.0 if saving >= -tiny else NEVER
    return NEVER if saving <= tiny else extra_build / saving


def _answer_cost(unit: str):
    """A row's answer-phase calls or tokens (input + visible output + reasoning) per answer."""
    def cost(r: dict[str, Any]) -> float:
        u = (r.get("usage") or {}).get("answer") or {}
        n = float(u.get("calls") or 0) if unit == "calls" else float(
            (u.get("input_tokens") or 0) + (u.get("output_tokens") or 0) + (u.get("reasoning_tokens") or 0))
        return n / epochs_of(r)
    return cost


def _reasoning_cost(r: dict[str, Any]) -> float:
    return float(((r.get("usage") or {}).get("answer") or {}).get("reasoning_tokens") or 0) / epochs_of(r)


def compare_per_task(data: RunData, benchmark: str, method: str, reference: str, kind: str, seed: int = 0,
                     n_boot: int = 2000) -> dict[str, Any] | None:
    """``compare`` from the rows' own usage, with intervals; None when a row of either side lacks it."""
    sides = {m: [r for r in data.results if r["benchmark"] == benchmark and r["method"] == m]
             for m in (method, reference)}
    if any("usage" not in r for rows in sides.values() for r in rows):
        return None
    key = lambda r: (r["source"], r["seed"], str(r["task_id"]))
    by = {m: {key(r): r for r in rows} for m, rows in sides.items()}
    both = set(by[method]) & set(by[reference])
    clean = {k for k in both if not by[method][k].get("failed") and not by[reference][k].get("failed")}
    row: dict[str, Any] = {"method": method, "reference": reference, "reference_kind": kind, "per_task": True,
                           "pairs": len(both), "pairs_compared": len(clean),
                           "failed_rows": sum(1 for r in sides[method] if r.get("failed")),
                           "reference_failed_rows": sum(1 for r in sides[reference] if r.get("failed")),
                           "cells": len({k[:2] for k in both}), "cells_compared": len({k[:2] for k in clean})}
    if not clean:
        why = (f"every task it shares with {reference} failed on a side" if both
               else f"no task in common with {reference}")
        return {**row, "status": "unavailable", "reason": why}
    m_rows = [by[method][k] for k in sorted(clean)]
    r_rows = [by[reference][k] for k in sorted(clean)]
    skip = shared_between(method, reference)
    c = method_costs(data, benchmark, method, skip)
    ref = method_costs(data, benchmark, reference, skip)
    row.update(status="ok", shared_stages_left_out=list(skip), reference_costs=ref, **c)
    for unit in ("calls", "tokens"):
        d = paired_value_difference(r_rows, m_rows, _answer_cost(unit), seed=seed, n_boot=n_boot)
        extra = max(0.0, c[f"build_{unit}"] - ref[f"build_{unit}"])
        per_ref = d["mean_a"] or 0.0
        row[f"answer_{unit}_per_task"] = d["mean_b"]
        ref[f"answer_{unit}_per_task"] = d["mean_a"]
        row[f"extra_build_{unit}"] = extra
        row[f"saving_{unit}_per_task"] = d["mean_diff"]
        row[f"saving_{unit}_lo"], row[f"saving_{unit}_hi"] = d["ci_lo"], d["ci_hi"]
        row[f"saving_{unit}_untested"] = d["reason"]
        row[f"break_even_{unit}"] = break_even(extra, d["mean_diff"], per_ref)
        row[f"break_even_{unit}_lo"] = None if d["ci_hi"] is None else bound(extra, d["ci_hi"], per_ref)
        row[f"break_even_{unit}_hi"] = None if d["ci_lo"] is None else bound(extra, d["ci_lo"], per_ref)
    rsn = paired_value_difference(m_rows, r_rows, _reasoning_cost, min_pairs=1 << 30)  # the means only
    row["answer_reasoning_tokens_per_task"] = rsn["mean_a"]
    ref["answer_reasoning_tokens_per_task"] = rsn["mean_b"]
    row["n_rows"] = ref["n_rows"] = len(m_rows)
    t = paired_test(m_rows, r_rows, seed=seed, n_boot=n_boot)
    row["accuracy_delta_pp"] = None if t["mean_diff"] is None else 100.0 * t["mean_diff"]
    row["accuracy_lo_pp"] = None if t["ci_lo"] is None else 100.0 * t["ci_lo"]
    row["accuracy_hi_pp"] = None if t["ci_hi"] is None else 100.0 * t["ci_hi"]
    row["accuracy_reason"] = t.get("reason")  # why there is no interval ("—"), when there is none
    row["accuracy_pairs"], row["accuracy_groups"] = t["n_pairs"], t["n_groups"]
    row["accuracy_p"], row["accuracy_p_mc_se"] = t["p_value"], t["p_mc_se"]
    return row


def compared_cells(data: RunData, benchmark: str, method: str, reference: str) -> tuple[set[tuple], dict[str, int]]:
    """The (source, seed) cells both answered with no failed row on either side, and the counts left out."""
    rows = [r for r in data.results if r["benchmark"] == benchmark and r["method"] in (method, reference)]
    cells: dict[str, set[tuple]] = {method: set(), reference: set()}
    failed: set[tuple] = set()
    n_failed = {method: 0, reference: 0}
    for r in rows:
        cells[r["method"]].add(_cell(r))
        if r.get("failed"):
            failed.add(_cell(r))
            n_failed[r["method"]] += 1
    both = cells[method] & cells[reference]
    clean = both - failed
    return clean, {"cells": len(both), "cells_compared": len(clean), "failed_rows": n_failed[method],
                   "reference_failed_rows": n_failed[reference]}


def compare(data: RunData, benchmark: str, method: str, reference: str, kind: str) -> dict[str, Any]:
    """One method against one reference: costs on both sides, savings and break-even in calls and tokens
    (per task with intervals where the rows carry their usage, else per cell without)."""
    per_task = compare_per_task(data, benchmark, method, reference, kind)
    if per_task is not None:
        return per_task
    row: dict[str, Any] = {"method": method, "reference": reference, "reference_kind": kind, "per_task": False}
    clean, counts = compared_cells(data, benchmark, method, reference)
    row.update(counts)
    if not clean:
        why = (f"every cell it shares with {reference} has a failed row" if counts["cells"]
               else f"no cell in common with {reference}")
        return {**row, "status": "unavailable", "reason": why}
    skip = shared_between(method, reference)
    c = method_costs(data, benchmark, method, skip, clean)
    ref = method_costs(data, benchmark, reference, skip, clean)
    row.update(status="ok", shared_stages_left_out=list(skip), reference_costs=ref, **c)
    for unit in ("calls", "tokens"):
        extra = max(0.0, c[f"build_{unit}"] - ref[f"build_{unit}"])
        saving = ref[f"answer_{unit}_per_task"] - c[f"answer_{unit}_per_task"]
        row[f"extra_build_{unit}"] = extra
        row[f"saving_{unit}_per_task"] = saving
        row[f"break_even_{unit}"] = break_even(extra, saving, ref[f"answer_{unit}_per_task"] or 0.0)
    m_rows = [r for r in data.results if r["benchmark"] == benchmark and r["method"] == method and _cell(r) in clean]
    r_rows = [r for r in data.results if r["benchmark"] == benchmark and r["method"] == reference
              and _cell(r) in clean]
    d = paired_delta(m_rows, r_rows)
    row["accuracy_delta_pp"] = None if d["mean_diff"] is None else 100.0 * d["mean_diff"]
    row["accuracy_pairs"] = d["n_pairs"]
    return row


def compute(data: RunData, baseline: str = "hybrid_rag") -> dict[str, Any]:
    out: dict[str, Any] = {"protocol": "break-even", "definition": DEFINITION, "baseline": baseline,
                           "benchmarks": []}
    for bench in benchmarks(data):
        ran = {r["method"] for r in data.results if r["benchmark"] == bench}
        methods = []
        for m in methods_of(data, bench):
            if m == baseline:
                continue
            if m not in ran:
                methods.append({"method": m, "status": "not run"})
                continue
            variant = zero_learning_variant(m)
            if variant is not None and variant in ran:
                methods.append(compare(data, bench, m, variant, "zero-learning variant"))
                continue
            # no variant, or one the run lacks: the baseline, said so in the reference column
            missing = (f"its zero-learning variant {variant} was not run (add it to --methods)"
                       if variant is not None else "")
            if baseline not in ran:
                methods.append({"method": m, "reference": baseline, "reference_kind": "baseline",
                                "status": "unavailable", "missing_variant": missing,
                                "reason": "; ".join(x for x in (missing, f"baseline {baseline} has no results") if x)})
                continue
            methods.append({**compare(data, bench, m, baseline, "baseline"), "missing_variant": missing})
        out["benchmarks"].append({"benchmark": bench, "status": "ok", "methods": methods})
    return out


def fmt_tasks(value: float | str | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return "0" if value == 0 else f"{math.ceil(value):,}"
