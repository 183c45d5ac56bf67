"""Task-Guided Source Learning (paper Sec. 4.4): M -> M_local -> MT over one split's guidance tasks.

Every task is diagnosed first (the only use of its reference; concurrently, as the official E*
cache is built). Then one pass over the tasks in their given order, a chain: each task is answered
with the normal task-time interface against the model its predecessors left, judged, its needed
claims checked against that model (``claim_status``, with ``cross``), it may yield one lesson, and
a failure refines the model (``local``) before the next task starts. No two tasks are ever in
flight (``cfg.concurrency`` applies within a stage's calls, such as diagnosis and the refinement's
grounding). Finally the lessons are aggregated into Pi1 and the model is recalibrated under it.

An empty Pi1 (no preference reached ``min_policy_support``): the official pipeline builds no MT for
the seed and evaluates nothing. Here the model task learning reached (M_local; MS without local
refinement) is kept and evaluated, marked ``mt_built: false`` with the reason in its stage record,
the artifact's stats and ``artifact_stats`` (declared in the method's deviations).

Variants: ``local=False`` skips refinement (w/o failure-guided: recalibrate under Pi1 only);
``cross=False`` skips lessons, policy and recalibration (M_local, w/o cross-task).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

from sourcebench.harness.data import Source, Task
from sourcebench.methods.evidence import load_index

from ..grounding import GateStats
from ..model import SourceModel
from ..rewrite import gate_summary
from .attempt import Outcome, attempt
from .diagnose import TaskNeeds, diagnose, source_words
from .lessons import Lesson, claim_status, domain_vocabulary, lesson_for
from .policy import aggregate
from .recalibrate import recalibrate
from .refine import RefineStats, refine, relevant_units

if TYPE_CHECKING:
    from sourcebench.harness.method import Context

    from ..config import SourceLearnConfig


def stage_name(local: bool, cross: bool) -> str:
    if not cross:
        return "M_local"
    return "MT" if local else "MS+Pi1"


def mt_built(policy: list[str]) -> dict[str, Any]:
    """Whether an MT was built: not with an empty Pi1 (the official pipeline then builds and evaluates none)."""
    if policy:
        return {"mt_built": True}
    return {"mt_built": False, "mt_not_built": "empty Pi1: no representation preference reached the support "
                                              "threshold; the model is the one task learning reached, not recalibrated"}


async def diagnose_all(guidance: list[Task], source: Source, ctx: Context, cfg: SourceLearnConfig,
                       index) -> list[TaskNeeds]:
    vocabulary = source_words(source)
    sem = asyncio.Semaphore(max(1, cfg.concurrency))

    async def one(t: Task) -> TaskNeeds:
        async with sem:
            return await diagnose(ctx.llm, index, source, t, cfg, vocabulary=vocabulary)

    return list(await asyncio.gather(*(one(t) for t in guidance)))


async def task_learn(sm: SourceModel, source: Source, guidance: list[Task], ctx: Context, cfg: SourceLearnConfig,
                     *, local: bool = True, cross: bool = True) -> SourceModel:
    """A new model learned from the guidance tasks; ``sm`` is left untouched."""
    model = sm.copy_deep()
    index = await load_index(ctx)
    common = domain_vocabulary(t.question for t in guidance)  # questions only: no reference reaches lessons
    ctx.progress(f"task learning: diagnosing {len(guidance)} guidance tasks")
    needs = await diagnose_all(guidance, source, ctx, cfg, index)

    gate_stats = GateStats()
    rstats = RefineStats()
    outcomes: list[Outcome] = []
    lessons: list[Lesson] = []
    lesson_reasons: Counter[str] = Counter()
    status_counts: Counter[str] = Counter()
    for task, nd in zip(guidance, needs):  # a chain: each task sees the model its predecessors left
        outcome = await attempt(model, source, task, ctx, cfg, index)
        outcomes.append(outcome)
        if cross:
            if nd.failed:
                lesson_reasons["no diagnosis"] += 1
            else:
                statuses = await claim_status(ctx.llm, model, source, nd, outcome.loaded)
                status_counts.update(statuses if statuses is not None else ["check failed"])
                lesson, why = await lesson_for(ctx.llm, nd, relevant_units(model, source, nd), source, outcome.solved,
                                               common, statuses=statuses)
                lesson_reasons[why] += 1
                if lesson is not None:
                    lessons.append(lesson)
        if local and not outcome.solved and not nd.failed and nd.claims:
            model = await refine(ctx.llm, model, source, nd, cfg, gate_stats, rstats)
        ctx.progress(f"task learning: {len(outcomes)}/{len(guidance)} tasks, {sum(o.solved for o in outcomes)} solved")

    stats: dict[str, Any] = {
        "tasks": len(guidance), "local": local, "cross": cross,
        "diagnosis_failed": sum(n.failed for n in needs), "claims": sum(len(n.claims) for n in needs),
        "claims_dropped_as_leaks": sum(n.leaks_dropped for n in needs),
        "solved": sum(o.solved for o in outcomes), "unjudged": sum(not o.judged for o in outcomes),
    }
    if local:
        stats["refine"] = rstats.as_dict()
    if cross:
        policy, pstats = await aggregate(ctx.llm, lessons, list(model.policy), min_support=cfg.min_policy_support,
                                         max_items=cfg.max_policy_items)
        model.policy = policy
        ctx.progress(f"task learning: {len(lessons)} lessons -> {len(policy)} policy items; recalibrating")
        model, recal = await recalibrate(ctx.llm, model, source, policy, cfg, gate_stats)
        stats.update(lessons=len(lessons), lesson_outcomes=dict(sorted(lesson_reasons.items())), domain_words=len(common),
                     claim_status=dict(sorted(status_counts.items())), policy=pstats.as_dict(), recalibration=recal,
                     **mt_built(policy))
    stats["gate"] = gate_summary(gate_stats)
    model.record_stage(stage_name(local, cross), **stats)
    return model
