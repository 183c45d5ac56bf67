"""Harmful-entry leave-one-out: the verdicts and rates from the raw paired scores (seed 001, Section 3.1,
Appendix A.2-A.3).

The core, ``harness/protocols/harmful.py``, answers the tasks with and without each entry (model calls)
and states the protocol; here each evaluated entry gets its task-level paired test and verdict
(``judge_entry``), each artifact its harmful-entry rate (harmful / evaluated detectable entries) and
each method its rate (mean over its artifacts with a detectable entry) and status, i.e. the
``protocols/harmful.json`` the report renders. ``CRITERION`` and ``ENTRY_DEFINITION`` are the
report's words for the rule and for what an entry is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..stats import paired_test

NAME = "harmful"
CRITERION = ("harmful: removing the entry raises the mean score on its exposed tasks and the task-level paired test "
             "(each task's difference averaged over its repeats; McNemar / sign-flip) gives p < alpha; an entry shown "
             "to fewer tasks than the exact test needs to reach p < alpha (2 / 2^n < alpha) is undetectable and not "
             "evaluated; rate = harmful / evaluated detectable entries per artifact, averaged over artifacts")
ENTRY_DEFINITION = ("entries are each method's own units as its entries hook lists them (RIKA: admitted atomic claims; "
                    "SourceLearn: units; AWM: workflows; kb-curator: store entries), not re-split into atomic claims "
                    "as seed 001 does for every artifact, so rates compare each method's own units")

Pair = tuple[str, int]  # (task id, repeat)


def judge_entry(with_scores: list[float], without_scores: list[float], alpha: float,
                pairs: list[Pair] | None = None) -> dict[str, Any]:
    """The paired comparison of one entry's exposed (task, repeat) pairs, and the harmful verdict.

    The task is the unit: repeats of a task enter the paired test as seeds of that task, so its difference
    is their mean and they never count as more tasks. ``pairs`` default: each score its own task.
    """
    pairs = pairs if pairs is not None else [(str(i), 0) for i in range(len(with_scores))]
    if not len(pairs) == len(with_scores) == len(without_scores):
        raise ValueError("judge_entry: pairs, with_scores and without_scores differ in length")
    rows_with = [{"source": "", "seed": r, "task_id": t, "score": s} for (t, r), s in zip(pairs, with_scores)]
    rows_without = [{"source": "", "seed": r, "task_id": t, "score": s} for (t, r), s in zip(pairs, without_scores)]
    t = paired_test(rows_without, rows_with, min_pairs=1)  # small n: the protocol's detectability rule
    per_task: dict[str, list[float]] = {}
    for (task, _), w, wo in zip(pairs, with_scores, without_scores):
        per_task.setdefault(task, []).append(wo - w)
    diff = float(np.mean([np.mean(d) for d in per_task.values()])) if per_task else 0.0  # = t["mean_diff"]
    harmful = bool(diff > 0 and t["p_value"] is not None and t["p_value"] < alpha)
    return {"n_pairs": len(with_scores), "n_tasks": len({p[0] for p in pairs}),
            "with_mean": float(np.mean(with_scores)) if with_scores else None,
            "without_mean": float(np.mean(without_scores)) if without_scores else None,
            "mean_diff": diff, "test": t["test"], "p_value": t["p_value"], "harmful": harmful,
            "verdict": "harmful" if harmful else "not harmful"}


def summarize_artifact(raw: dict[str, Any], alpha: float) -> dict[str, Any]:
    """One artifact's verdicts (``judge_entry`` per evaluated entry), number of harmful entries and rate."""
    if raw.get("status") != "ok":
        return raw
    records = []  # in the core's order: the evaluated entries, then the undetectable ones
    for e in raw["entries"]:
        if e.get("undetectable"):
            records.append({"id": e["id"], "text": e["text"], "n_tasks": e["n_tasks"], "harmful": False,
                            "verdict": "undetectable"})
            continue
        pairs = [(str(t), int(r)) for t, r in e["pairs"]]
        records.append({"id": e["id"], "text": e["text"],
                        **judge_entry(e["with_scores"], e["without_scores"], alpha, pairs=pairs),
                        "pairs": e["pairs"], "with_scores": e["with_scores"], "without_scores": e["without_scores"]})
    n_evaluated = raw["n_evaluated"]
    n_harmful = sum(1 for r in records if r["harmful"])
    head = {k: raw[k] for k in ("artifact", "source", "seed", "status", "n_entries", "n_exposed", "n_detectable",
                                "n_undetectable") if k in raw}
    return {**head, "n_evaluated": n_evaluated, "n_harmful": n_harmful,
            "rate": n_harmful / n_evaluated if n_evaluated else None, "full_score": raw["full_score"],
            "entries": records}


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """The protocol's result from the core's raw leave-one-out: verdicts, per-artifact and per-method rates and
    each method's status, keys in the order the report file has always had."""
    alpha = float((raw.get("settings") or {}).get("alpha", 0.05))
    methods: list[dict[str, Any]] = []
    for m in raw["methods"]:
        if "artifacts" not in m:  # no entries: nothing to judge
            methods.append(m)
            continue
        artifacts = [summarize_artifact(a, alpha) for a in m["artifacts"]]
        rates = [a["rate"] for a in artifacts if a.get("rate") is not None]
        learned = [a for a in artifacts if a.get("status") == "ok"]
        exposed = sum(a.get("n_exposed", 0) for a in artifacts)
        status = ("ok" if rates else "no detectable entries" if exposed else "no exposed entries" if learned
                  else "not learned")
        methods.append({
            "method": m["method"], "status": status, "entry_kind": m["entry_kind"],
            "rate": float(np.mean(rates)) if rates else None,
            **{k: sum(a.get(k, 0) for a in artifacts) for k in ("n_entries", "n_exposed", "n_detectable",
                                                                 "n_undetectable", "n_evaluated", "n_harmful")},
            "artifacts": artifacts,
        })
    out: dict[str, Any] = {"protocol": raw["protocol"], "criterion": CRITERION, "entries": ENTRY_DEFINITION,
                           "min_detectable_tasks": raw["min_detectable_tasks"], "settings": raw["settings"],
                           "benchmark": raw["benchmark"], "methods": methods}
    if "live_calls" in raw:
        out["live_calls"] = raw["live_calls"]
    return out
