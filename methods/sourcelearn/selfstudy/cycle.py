"""Self-Directed Source Learning (paper Sec. 4.3): M -> MS by Inspect-Study-Consolidate cycles.

Inspect rereads every entity's full text against its units (the official set: the units about it or
anchored in its text, up to ``REGIONAL_UNITS`` further regional units of its region, and the
``NEAREST`` units nearest its name); PlanStudy and Study alternate in rounds (plan a few actions,
study them, plan again with the new observations) until K actions were taken or
``empty_rounds_stop`` consecutive rounds produced no new action (a productive round resets the
count); Consolidate rewrites each entity with notes on its own, then runs one cross-entity pass per
region and one relation pass per CONNECT pair (``consolidate.py``). Under a policy (recalibration) an entity is
read against its own units only, and an entity without units is not read (coverage is
self-study's job, not recalibration's). Observations and study questions live only in memory during a cycle; the
model records counts of them, never their text.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sourcebench.harness.data import Source
from sourcebench.methods.evidence import load_index

from ..grounding import GateStats
from ..model import SourceModel, Unit
from ..rewrite import Note, RewriteSpec, RewriteStats, gate_summary, units_by_entity
from .consolidate import consolidate
from .observe import observe
from .plan import Action, entity_sizes, entity_unit_counts, plan_round
from .study import NEAREST, NearestIndex, study

REGIONAL_UNITS = 20  # regional units of an inspected entity's region shown besides its own (official)

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM
    from sourcebench.harness.method import Context
    from sourcebench.harness.retrieval import HybridIndex

    from ..config import SourceLearnConfig


@dataclass
class CycleStats:
    observations_inspect: int = 0
    observations_study: int = 0
    inspect_failed: int = 0
    rounds: int = 0
    empty_rounds: int = 0
    actions: int = 0
    deepen: int = 0
    connect: int = 0
    study_failed: int = 0
    units_before: int = 0
    units_after: int = 0
    rewrite: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def inspection_units(sm: SourceModel, source: Source, own: dict[str, list[Unit]]) -> dict[str, list[Unit]]:
    """The units each entity is inspected against (official ``family_units`` + ``relevant_units``): its own
    units and those anchored in its text, then up to ``REGIONAL_UNITS`` other regional units of its region,
    then the ``NEAREST`` units nearest its name."""
    by_element: dict[str, list[Unit]] = {}
    regional: dict[str, list[Unit]] = {}
    for u in sm.units:
        if u.role == "map" or sm.is_stale(u, source):
            continue
        for i in u.element_ids():
            by_element.setdefault(i, []).append(u)
        if u.scope.kind == "region":
            for r in dict.fromkeys(u.scope.keys):
                regional.setdefault(r, []).append(u)
    out: dict[str, list[Unit]] = {}
    index = NearestIndex(sm)
    for ent in sm.entities:
        picked: dict[str, Unit] = {u.id: u for u in own.get(ent.key, [])}
        for i in ent.element_ids:
            for u in by_element.get(i, []):
                picked.setdefault(u.id, u)
        extra = [u for u in regional.get(ent.region, []) if u.id not in picked][:REGIONAL_UNITS]
        for u in extra:
            picked[u.id] = u
        near = index.nearest(ent.name.replace("_", " "), NEAREST, set(picked))
        out[ent.key] = list(picked.values()) + near
    return out


async def inspect_entities(llm: BoundLLM, sm: SourceModel, source: Source, cfg: SourceLearnConfig,
                           stats: CycleStats, *, mode: str = "review", stage: str = "ms_inspect",
                           policy: list[str] | None = None) -> list[Note]:
    """One observation call per entity over its complete text; notes in entity order. Under a policy
    (``mode`` "policy") an entity is shown its own units only and one without units is skipped."""
    sem = asyncio.Semaphore(max(1, cfg.concurrency))
    by_entity = units_by_entity(sm, source)
    if mode == "policy":
        shown = {e.key: by_entity.get(e.key, []) for e in sm.entities}
    else:
        shown = inspection_units(sm, source, by_entity)

    async def one(ent) -> list[Note] | None:
        async with sem:
            return await observe(llm, source, shown.get(ent.key, []), ent.element_ids, (ent.key,),
                                 mode=mode, stage=stage, max_notes=cfg.observations_per_question,  # type: ignore[arg-type]
                                 target=f"entity {ent.key} ({ent.name})", policy=policy, full_text=True,
                                 origin="inspect" if mode == "review" else "policy")

    todo = [e for e in sm.entities if e.element_ids and (mode != "policy" or shown.get(e.key))]
    results = await asyncio.gather(*(one(e) for e in todo))
    stats.inspect_failed += sum(r is None for r in results)
    return [n for r in results if r for n in r]


async def study_rounds(llm: BoundLLM, index: HybridIndex, sm: SourceModel, source: Source,
                       notes: list[Note], cfg: SourceLearnConfig, stats: CycleStats) -> list[Action]:
    """Plan/study rounds; appends study observations to ``notes``; returns the actions taken."""
    taken: list[Action] = []
    empty = 0
    sem = asyncio.Semaphore(max(1, cfg.concurrency))

    nearest = NearestIndex(sm)  # the model does not change during the rounds
    counts, sizes = entity_unit_counts(sm), entity_sizes(sm, source)  # for the planner's digest

    async def run(a: Action, seen: list[Note]) -> list[Note] | None:
        async with sem:
            return await study(llm, index, sm, source, a, cfg, stage="ms_study", notes=seen, nearest=nearest)

    refused: list[str] = []
    while len(taken) < cfg.study_actions and empty < cfg.empty_rounds_stop:
        n = min(cfg.actions_per_round, cfg.study_actions - len(taken))
        stats.rounds += 1
        planned = await plan_round(llm, sm, notes, taken, n, stage="ms_plan", refused=refused, sizes=sizes,
                                   unit_counts=counts)
        actions = planned.actions
        if not actions:
            empty += 1  # consecutive idle rounds: a productive round below resets the count
            stats.empty_rounds += 1
            refused = planned.refused  # shown to the next round, so that a greedy planner can change its mind
            continue
        empty = 0
        refused = []
        taken.extend(actions)
        seen = list(notes)  # a round's actions see the observations made before it
        found = await asyncio.gather(*(run(a, seen) for a in actions))
        stats.study_failed += sum(f is None for f in found)
        new = [x for f in found if f for x in f]
        stats.observations_study += len(new)
        notes.extend(new)
    stats.actions = len(taken)
    stats.deepen = sum(a.kind == "DEEPEN" for a in taken)
    stats.connect = sum(a.kind == "CONNECT" for a in taken)
    return taken


async def one_cycle(sm: SourceModel, source: Source, ctx: Context, cfg: SourceLearnConfig,
                    index: HybridIndex, gate_stats: GateStats) -> tuple[SourceModel, CycleStats]:
    stats = CycleStats(units_before=len(sm.units))
    ctx.progress(f"self-study: inspecting {len(sm.entities)} entities")
    notes = await inspect_entities(ctx.llm, sm, source, cfg, stats)
    stats.observations_inspect = len(notes)
    await study_rounds(ctx.llm, index, sm, source, notes, cfg, stats)
    ctx.progress(f"self-study: {stats.actions} study actions, {len(notes)} observations; consolidating")
    spec = RewriteSpec(mode="consolidate", origin="self-study", stage="ms_consolidate", ground_stage="ms_ground",
                       preserve_stage="ms_preserve", concurrency=cfg.concurrency)
    rw = RewriteStats()
    new, _ = await consolidate(ctx.llm, sm, source, notes, spec, gate_stats, rw)
    stats.rewrite = rw.as_dict()
    stats.units_after = len(new.units)
    return new, stats


async def self_learn(sm: SourceModel, source: Source, ctx: Context, cfg: SourceLearnConfig) -> SourceModel:
    """MS: ``cfg.cycles`` Inspect-Study-Consolidate cycles on a copy of ``sm`` (0 cycles: a plain copy)."""
    out = sm.copy_deep()
    gate_stats = GateStats()
    cycles: list[dict[str, Any]] = []
    if cfg.cycles > 0:
        index = await load_index(ctx)
        for c in range(cfg.cycles):
            out, st = await one_cycle(out, source, ctx, cfg, index, gate_stats)
            cycles.append({"cycle": c + 1, **st.as_dict()})
    out.record_stage("MS", cycles=cycles, n_cycles=cfg.cycles,
                     observations=sum(c["observations_inspect"] + c["observations_study"] for c in cycles),
                     actions=sum(c["actions"] for c in cycles), gate=gate_summary(gate_stats))
    return out
