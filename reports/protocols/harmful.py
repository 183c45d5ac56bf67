"""Harmful-entry leave-one-out (seed 001, Section 3.1, Appendix A.2-A.3) for entry-based artifacts.

For every frozen artifact of a method whose state is made of entries (``entries.py``):

1. answer every test task of the split with the full artifact, recording the prompts; an entry
   is *exposed* to a task when the answer reports it in ``metadata["entries_used"]`` (agent
   methods that reach entries through tools, e.g. kb-curator), else when its text occurs in one of
   that task's prompts (the paper's eligible instances I(a): what the method's own retrieval or
   activation would show; a method that supplies its whole artifact exposes every entry to every
   task);
2. for each exposed entry, answer its exposed tasks again with the same state minus that entry
   and score both. The method runs unchanged on the reduced state, so where its retrieval or
   activation depends on the whole artifact (SourceLearn's budgeted region loading) the rest of
   the context can shift too; the paper instead keeps the retrieved context fixed and deletes only
   the entry, which needs a hook inside each method's prompt assembly;
3. flag the entry as harmful when removing it improves the paired score significantly: mean
   (without - with) > 0 and the leaderboard's task-level paired test gives p < alpha (0.05). This is
   the paper's "95% interval of the paired difference entirely on the harmful side" read as a test,
   chosen over a seed-to-seed noise floor because a run can have a single split seed. The unit is
   the task: with ``repeats`` > 1 (repeat r uses model seed base + r for both conditions; the paper
   uses five paired evaluation seeds) a task's difference is averaged over its repeats, which enter
   the paired test as the seeds of one task, so repeats tighten each task's difference but never
   count as more tasks (p depends on the number of exposed tasks, not on repeats).

Detectability: the exact sign-flip test on n tasks cannot give p below 2 / 2**n (every task's
difference on the harmful side), so an entry exposed to fewer than ``min_detectable_tasks(alpha)``
tasks (6 at alpha 0.05: 2/32 = 0.0625, 2/64 = 0.031) can never be flagged. Such entries are marked
*undetectable* and are not evaluated (no calls); the harmful-entry rate of an artifact is harmful /
evaluated detectable entries, reported with their number, and never-exposed entries are left out
of both, as in the paper. A method's rate is the unweighted mean over its artifacts that have a
detectable entry. Without a multiple-comparison correction, an entry with no effect is flagged with
probability at most alpha / 2, which is the floor of the rate. ``max_entries`` evaluates a seeded
sample of the detectable entries per artifact to bound the cost (|I(a)| x repeats answers per
entry); the sample size is reported.

Entries are the method's own units (``Method.entries``: RIKA's admitted claims, which its atomiser
already split; SourceLearn's units; AWM's workflows; kb-curator's store entries). Unlike seed 001
(Appendix A.2), which first decomposes every artifact into atomic claims, they are not re-split
here, so rates compare each method's own units rather than one common granularity
(``ENTRY_DEFINITION``, shown in the report). All calls go through the run's cache and are counted
under phase ``protocol``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from sourcebench.harness.data import Task, stable_hash
from sourcebench.harness.method import Context, Method
from sourcebench.harness.planner import Plan
from sourcebench.harness.protocols.entries import Entry, EntryAccess, entry_access
from sourcebench.harness.protocols.session import RunSession, answer_and_score, gather_limited

from ..stats import paired_test

NAME = "harmful"
CRITERION = ("harmful: removing the entry raises the mean score on its exposed tasks and the task-level paired test "
             "(each task's difference averaged over its repeats; McNemar / sign-flip) gives p < alpha; an entry shown "
             "to fewer tasks than the exact test needs to reach p < alpha (2 / 2^n < alpha) is undetectable and not "
             "evaluated; rate = harmful / evaluated detectable entries per artifact, averaged over artifacts")
ENTRY_DEFINITION = ("entries are each method's own units as its entries hook lists them (RIKA: admitted atomic claims; "
                    "SourceLearn: units; AWM: workflows; kb-curator: store entries), not re-split into atomic claims "
                    "as seed 001 does for every artifact, so rates compare each method's own units")


def min_detectable_tasks(alpha: float) -> int:
    """The fewest exposed tasks at which the exact two-sided sign-flip test can give p < alpha: with n tasks
    its smallest p is 2 / 2**n (every difference on one side), so n is the least with 2 / 2**n < alpha."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    n = 1
    while 2.0 / 2 ** n >= alpha:
        n += 1
    return n


class HarmfulSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_entries: int = 30  # evaluated entries per artifact (seeded sample of the detectable); 0: all
    repeats: int = 3  # paired evaluation repeats (model seeds); one repeat cannot tell an entry from noise
    alpha: float = 0.05
    seed: int = 0  # sampling seed of max_entries
    concurrency: int = 8


Pair = tuple[str, int]  # (task id, repeat)


@dataclass(frozen=True)
class Attempt:
    """One answered (task, repeat): its score, the prompts it sent, and the entries it reports using."""

    score: float
    prompts: str = ""
    used: frozenset[str] | None = None  # from Answer.metadata["entries_used"], when the method reports it

    def exposed_to(self, entry: Entry) -> bool:
        return entry.id in self.used if self.used is not None else entry.shown_in(self.prompts)


async def _answer_all(session: RunSession, method: Method, plan: Plan, state: Any, pairs: list[Pair],
                      by_id: dict[str, Task], settings: HarmfulSettings, *, record: bool) -> dict[Pair, Attempt]:
    base_seed = session.runner.spec.seed

    async def one(pair: Pair) -> Attempt:
        recorder: list[str] | None = [] if record else None
        ctx = session.context(Context, method, plan, NAME, recorder=recorder,
                              model_seed=None if pair[1] == 0 else base_seed + pair[1])
        answer, score = await answer_and_score(method, by_id[pair[0]], state, ctx)
        used = answer.metadata.get("entries_used")
        return Attempt(score, "\n\n".join(recorder or []),
                       frozenset(str(u) for u in used) if isinstance(used, (list, tuple, set)) else None)

    results = await gather_limited([one(p) for p in pairs], settings.concurrency)
    return dict(zip(pairs, results))


def sample_entries(exposed: list[Entry], settings: HarmfulSettings, plan: Plan) -> list[Entry]:
    if not settings.max_entries or len(exposed) <= settings.max_entries:
        return exposed
    order = sorted(exposed, key=lambda e: stable_hash("harmful", settings.seed, plan.source.id, plan.seed, e.id))
    keep = {e.id for e in order[: settings.max_entries]}
    return [e for e in exposed if e.id in keep]


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


async def evaluate_artifact(session: RunSession, method: Method, access: EntryAccess, plan: Plan,
                            state: Any, settings: HarmfulSettings) -> dict[str, Any]:
    by_id = {t.id: t for t in plan.tests}
    pairs: list[Pair] = [(t.id, r) for r in range(max(1, settings.repeats)) for t in plan.tests]
    full = await _answer_all(session, method, plan, state, pairs, by_id, settings, record=True)
    entries = access.entries(state)
    exposure = {e.id: [p for p in pairs if full[p].exposed_to(e)] for e in entries}
    exposed = [e for e in entries if exposure[e.id]]
    need = min_detectable_tasks(settings.alpha)
    n_tasks = {e.id: len({p[0] for p in exposure[e.id]}) for e in exposed}
    detectable = [e for e in exposed if n_tasks[e.id] >= need]
    chosen = sample_entries(detectable, settings, plan)
    records = []
    for e in chosen:
        reduced = await _answer_all(session, method, plan, access.without(state, e.id), exposure[e.id], by_id,
                                    settings, record=False)
        verdict = judge_entry([full[p].score for p in exposure[e.id]], [reduced[p].score for p in exposure[e.id]],
                              settings.alpha, pairs=exposure[e.id])
        records.append({"id": e.id, "text": e.text[:300], **verdict})
    records += [{"id": e.id, "text": e.text[:300], "n_tasks": n_tasks[e.id], "harmful": False,
                 "verdict": "undetectable"} for e in exposed if n_tasks[e.id] < need]
    n_evaluated = len(chosen)
    n_harmful = sum(1 for r in records if r["harmful"])
    return {"source": plan.source.id, "seed": plan.seed, "status": "ok", "n_entries": len(entries),
            "n_exposed": len(exposed), "n_detectable": len(detectable), "n_undetectable": len(exposed) - len(detectable),
            "n_evaluated": n_evaluated, "n_harmful": n_harmful,
            "rate": n_harmful / n_evaluated if n_evaluated else None,
            "full_score": float(np.mean([full[p].score for p in pairs])) if pairs else None, "entries": records}


async def run(session: RunSession, settings: HarmfulSettings, progress: Any = print) -> dict[str, Any]:
    out: dict[str, Any] = {"protocol": NAME, "criterion": CRITERION, "entries": ENTRY_DEFINITION,
                           "min_detectable_tasks": min_detectable_tasks(settings.alpha),
                           "settings": settings.model_dump(), "benchmark": session.bench.name, "methods": []}
    for method in session.methods:
        access = entry_access(method)
        if access is None:
            out["methods"].append({"method": method.name, "status": "no entries",
                                   "reason": "its artifact is not made of removable entries"})
            continue
        artifacts = []
        for plan in session.plans():
            folder = session.run_artifact(method, plan)
            if folder is None:
                artifacts.append({"source": plan.source.id, "seed": plan.seed, "status": "not learned"})
                continue
            progress(f"harmful: {method.name} on {plan.source.id} seed {plan.seed}")
            state = session.load_state(method, folder, plan)
            try:
                artifacts.append({"artifact": folder.name, **await evaluate_artifact(
                    session, method, access, plan, state, settings)})
            finally:
                session.flush(plan)
        rates = [a["rate"] for a in artifacts if a.get("rate") is not None]
        learned = [a for a in artifacts if a.get("status") == "ok"]
        exposed = sum(a.get("n_exposed", 0) for a in artifacts)
        status = ("ok" if rates else "no detectable entries" if exposed else "no exposed entries" if learned
                  else "not learned")
        out["methods"].append({
            "method": method.name, "status": status, "entry_kind": access.kind,
            "rate": float(np.mean(rates)) if rates else None,
            **{k: sum(a.get(k, 0) for a in artifacts) for k in ("n_entries", "n_exposed", "n_detectable",
                                                                 "n_undetectable", "n_evaluated", "n_harmful")},
            "artifacts": artifacts,
        })
    return out
