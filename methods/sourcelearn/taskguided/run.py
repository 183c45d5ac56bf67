"""Task-Guided Source Learning (paper Sec. 4.4): M -> M_local -> MT over one split's guidance tasks.

One pass over the tasks, in their given order. Each task is diagnosed (the only use of its
reference), answered with the normal task-time interface and judged; a failed task drives local
refinement of the model (``local``); every task may yield one lesson (``cross``). Tasks are
handled in waves of ``cfg.concurrency``: a wave is answered against the same model state, then its
failures refine the model one after another (with concurrency 1 this is exactly the sequential
pass). Finally the lessons are aggregated into Pi1 and the model is recalibrated under it.

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
from .lessons import Lesson, domain_vocabulary, lesson_for
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
    wave_size = max(1, cfg.concurrency)
    pairs = list(zip(guidance, needs))
    for start in range(0, len(pairs), wave_size):
        wave = pairs[start:start + wave_size]
        current = model

        async def use(task: Task, nd: TaskNeeds, m: SourceModel = current) -> tuple[Outcome, Lesson | None, str]:
            outcome = await attempt(m, source, task, ctx, cfg, index)
            if not cross:
                return outcome, None, ""
            if nd.failed:
                return outcome, None, "no diagnosis"
            lesson, why = await lesson_for(ctx.llm, nd, relevant_units(m, source, nd), source, outcome.solved, common)
            return outcome, lesson, why

        results = await asyncio.gather(*(use(t, nd) for t, nd in wave))
        for (task, nd), (outcome, lesson, why) in zip(wave, results):
            outcomes.append(outcome)
            if why:
                lesson_reasons[why] += 1
            if lesson is not None:
                lessons.append(lesson)
            if local and not outcome.solved and not nd.failed and nd.claims:
                model = await refine(ctx.llm, model, source, nd, cfg, gate_stats, rstats)
        ctx.progress(f"task learning: {len(outcomes)}/{len(pairs)} tasks, {sum(o.solved for o in outcomes)} solved")

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
                     policy=pstats.as_dict(), recalibration=recal)
    stats["gate"] = gate_summary(gate_stats)
    model.record_stage(stage_name(local, cross), **stats)
    return model
