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
(``reports.protocols.harmful.ENTRY_DEFINITION``, shown in the report). All calls go through the
run's cache and are counted under phase ``protocol``.

This module makes the model calls (steps 1 and 2, the exposure and detectability rule, the entry
sample) and returns raw results: per evaluated entry its exposed pairs and paired score lists. The
paired test, verdicts and rates (step 3) are ``reports/protocols/harmful.py``, which reads no model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from sourcebench.harness.data import Task, stable_hash
from sourcebench.harness.method import Context, Method
from sourcebench.harness.planner import Plan

from .entries import Entry, EntryAccess, entry_access
from .session import RunSession, answer_and_score, gather_limited

NAME = "harmful"
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


async def evaluate_artifact(session: RunSession, method: Method, access: EntryAccess, plan: Plan,
                            state: Any, settings: HarmfulSettings) -> dict[str, Any]:
    """One artifact's raw leave-one-out: each evaluated entry's exposed (task, repeat) pairs with the scores
    with and without it, and the undetectable entries with their number of exposed tasks (no verdict)."""
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
    records: list[dict[str, Any]] = []
    for e in chosen:
        reduced = await _answer_all(session, method, plan, access.without(state, e.id), exposure[e.id], by_id,
                                    settings, record=False)
        records.append({"id": e.id, "text": e.text[:300], "pairs": [list(p) for p in exposure[e.id]],
                        "with_scores": [full[p].score for p in exposure[e.id]],
                        "without_scores": [reduced[p].score for p in exposure[e.id]]})
    records += [{"id": e.id, "text": e.text[:300], "n_tasks": n_tasks[e.id], "undetectable": True}
                for e in exposed if n_tasks[e.id] < need]
    return {"source": plan.source.id, "seed": plan.seed, "status": "ok", "n_entries": len(entries),
            "n_exposed": len(exposed), "n_detectable": len(detectable), "n_undetectable": len(exposed) - len(detectable),
            "n_evaluated": len(chosen),
            "full_score": float(np.mean([full[p].score for p in pairs])) if pairs else None, "entries": records}


async def run(session: RunSession, settings: HarmfulSettings, progress: Any = print) -> dict[str, Any]:
    """Every entry-based method's artifacts of the run, evaluated entry by entry (``evaluate_artifact``): raw
    paired scores; ``reports.protocols.harmful.summarize`` adds the verdicts, rates and statuses."""
    out: dict[str, Any] = {"protocol": NAME, "min_detectable_tasks": min_detectable_tasks(settings.alpha),
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
        out["methods"].append({"method": method.name, "entry_kind": access.kind, "artifacts": artifacts})
    return out
