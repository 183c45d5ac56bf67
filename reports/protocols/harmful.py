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
   (without - with) > 0 and the leaderboard's paired test (exact McNemar on binary scores, sign-flip
   permutation otherwise) gives p < alpha (0.05). This is the paper's "95% interval of the paired
   difference entirely on the harmful side" read as a test, chosen over a seed-to-seed noise floor
   because a run can have a single split seed. Pairs are (task, evaluation repeat); with
   ``repeats`` > 1 repeat r uses model seed base + r for both conditions (the paper uses five
   paired evaluation seeds; at temperature 0 with a deterministic model repeats add nothing).

The harmful-entry rate of an artifact is harmful / evaluated entries (never-exposed entries are
left out of both, as in the paper); a method's rate is the unweighted mean over its artifacts.
Without a multiple-comparison correction, an entry with no effect is flagged with probability at
most alpha / 2, which is the floor of the rate. ``max_entries`` evaluates a seeded sample of the
exposed entries per artifact to bound the cost (|I(a)| answers per entry); the sample size is
reported. All calls go through the run's cache and are counted under phase ``protocol``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from harness.data import Task, stable_hash
from harness.method import Context, Method

from ..stats import paired_test
from .entries import Entry, EntryAccess, entry_access
from .session import Plan, RunSession, answer_and_score, gather_limited

NAME = "harmful"
CRITERION = ("harmful: removing the entry raises the mean score on its exposed (task, repeat) pairs and the "
             "paired test (McNemar / sign-flip) gives p < alpha; rate = harmful / evaluated entries per artifact, "
             "averaged over artifacts")


class HarmfulSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_entries: int = 30  # evaluated entries per artifact (seeded sample); 0: every exposed entry
    repeats: int = 1  # paired evaluation repeats (model seeds)
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


def judge_entry(with_scores: list[float], without_scores: list[float], alpha: float) -> dict[str, Any]:
    """The paired comparison of one entry's exposed pairs, and the harmful verdict."""
    rows_with = [{"source": "", "seed": 0, "task_id": i, "score": s} for i, s in enumerate(with_scores)]
    rows_without = [{"source": "", "seed": 0, "task_id": i, "score": s} for i, s in enumerate(without_scores)]
    t = paired_test(rows_without, rows_with)
    diff = float(np.mean(np.array(without_scores) - np.array(with_scores))) if with_scores else 0.0
    harmful = bool(diff > 0 and t["p_value"] is not None and t["p_value"] < alpha)
    return {"n_pairs": len(with_scores), "with_mean": float(np.mean(with_scores)) if with_scores else None,
            "without_mean": float(np.mean(without_scores)) if without_scores else None,
            "mean_diff": diff, "test": t["test"], "p_value": t["p_value"], "harmful": harmful}


async def evaluate_artifact(session: RunSession, method: Method, access: EntryAccess, plan: Plan,
                            state: Any, settings: HarmfulSettings) -> dict[str, Any]:
    by_id = {t.id: t for t in plan.tests}
    pairs: list[Pair] = [(t.id, r) for r in range(max(1, settings.repeats)) for t in plan.tests]
    full = await _answer_all(session, method, plan, state, pairs, by_id, settings, record=True)
    entries = access.entries(state)
    exposure = {e.id: [p for p in pairs if full[p].exposed_to(e)] for e in entries}
    exposed = [e for e in entries if exposure[e.id]]
    chosen = sample_entries(exposed, settings, plan)
    records = []
    for e in chosen:
        reduced = await _answer_all(session, method, plan, access.without(state, e.id), exposure[e.id], by_id,
                                    settings, record=False)
        verdict = judge_entry([full[p].score for p in exposure[e.id]], [reduced[p].score for p in exposure[e.id]],
                              settings.alpha)
        records.append({"id": e.id, "text": e.text[:300], "n_tasks": len({p[0] for p in exposure[e.id]}), **verdict})
    n_harmful = sum(1 for r in records if r["harmful"])
    return {"source": plan.source.id, "seed": plan.seed, "status": "ok", "n_entries": len(entries),
            "n_exposed": len(exposed), "n_evaluated": len(records), "n_harmful": n_harmful,
            "rate": n_harmful / len(records) if records else None,
            "full_score": float(np.mean([full[p].score for p in pairs])) if pairs else None, "entries": records}


async def run(session: RunSession, settings: HarmfulSettings, progress: Any = print) -> dict[str, Any]:
    out: dict[str, Any] = {"protocol": NAME, "criterion": CRITERION, "settings": settings.model_dump(),
                           "benchmark": session.bench.name, "methods": []}
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
        status = "ok" if rates else "no exposed entries" if learned else "not learned"
        out["methods"].append({
            "method": method.name, "status": status, "entry_kind": access.kind,
            "rate": float(np.mean(rates)) if rates else None,
            "n_evaluated": sum(a.get("n_evaluated", 0) for a in artifacts),
            "n_harmful": sum(a.get("n_harmful", 0) for a in artifacts),
            "n_entries": sum(a.get("n_entries", 0) for a in artifacts),
            "n_exposed": sum(a.get("n_exposed", 0) for a in artifacts),
            "artifacts": artifacts,
        })
    return out
