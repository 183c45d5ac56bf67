"""Consolidate: read many, write once, per entity (official ``self_learning/run.py`` ``reorganize`` and
``consolidate_connect``).

Notes are placed as the official consolidation places them: a DEEPEN note belongs to its entity; an
inspection note belongs to the one entity its entity, its evidence and the units it concerns name, and
joins its region's cross-entity pass when they name several (or none); a CONNECT note belongs to its pair.
Then, through the grounded rewrite of ``rewrite.py``:

1. every entity with notes is rewritten from its OWN units (the region's cross-entity units and its
   card are shown as context, never absorbed into an entity);
2. one cross-entity pass per region with such notes rewrites the region's regional and pair units,
   the units the notes concern joining the evidence;
3. one relation-only pass per CONNECT pair writes relation units from the pair's notes, both entities'
   units joining the evidence; nothing of theirs is rewritten.

Entity rewrites run concurrently against one snapshot (their editable sets are disjoint), then the
cross-entity passes against the result, then the pairs one after another; every step commits in a
fixed order (regions, then entity keys), so the result does not depend on timing. The official
structure gate then decides whether a committed rewrite is applied: only when it incorporates notes
(a proposed unit cites one) or improves structure (fewer near-duplicate pairs, fewer isolated details,
more relational units, or fewer tokens). Recalibration uses the entity passes alone
(``rewrite_entities``); failure-guided refinement writes without the structure gate, as officially.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sourcebench.harness.data import Source

from ..grounding import GateStats
from ..model import SourceModel, Unit
from ..rewrite import (
    Note,
    RewriteJob,
    RewriteResult,
    RewriteSpec,
    RewriteStats,
    apply_rewrite,
    element_entity,
    entity_region,
    primary_region,
    rewrite_job,
)
from ..words import content_words

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM


DUP_OVERLAP = 0.6  # content overlap (shared / smaller set) at which two units count as duplicates (official)
RELATIONAL = frozenset(("pattern", "mechanism", "distinction", "exception", "procedure", "relation"))
ISOLATED = frozenset(("detail",))  # look-up facts standing alone (official: detail and attribute)


@dataclass(frozen=True)
class Structure:
    """What the structure gate compares before and after a rewrite (official ``structure_stats``),
    over the statement units (maps and cards aside)."""

    tokens: int
    relational: int
    isolated: int
    dup_pairs: int

    @classmethod
    def of(cls, units: list[Unit]) -> Structure:
        sent = [u for u in units if u.role not in ("map", "card")]
        toks = [content_words(u.statement) for u in sent]
        dups = sum(1 for i in range(len(toks)) for j in range(i + 1, len(toks))
                   if toks[i] and toks[j] and len(toks[i] & toks[j]) / min(len(toks[i]), len(toks[j])) >= DUP_OVERLAP)
        tokens = sum(len(u.statement) // 4 + sum(len(c) for c in u.conditions) // 4 for u in sent)
        return cls(tokens, sum(u.role in RELATIONAL for u in sent), sum(u.role in ISOLATED for u in sent), dups)


def improvements(before: Structure, after: Structure, notes_used: int) -> list[str]:
    """Why a rewrite is worth applying ([] = it is not)."""
    checks = (("dup_pairs_down", after.dup_pairs < before.dup_pairs),
              ("isolated_down", after.isolated < before.isolated),
              ("relational_up", after.relational > before.relational),
              ("tokens_down", after.tokens < before.tokens),
              ("notes_incorporated", notes_used > 0))
    return [name for name, ok in checks if ok]


def structure_gate(sm: SourceModel, res: RewriteResult, by_id: dict[str, Unit] | None = None) -> RewriteResult:
    """The rewrite as it is applied: unchanged if it improves the region, else not committed.
    ``by_id``: ``{u.id: u for u in sm.units}``, built once when many regions' rewrites are gated."""
    if not res.committed:
        return res
    by_id = {u.id: u for u in sm.units} if by_id is None else by_id
    before = Structure.of([by_id[i] for i in res.old_ids if i in by_id])
    if improvements(before, Structure.of(res.units), res.notes_used):
        return res
    res.stats.committed -= 1
    res.stats.unimproved += 1
    return dataclasses.replace(res, committed=False, reason="neither improves structure nor incorporates notes")


REGIONAL_CONTEXT = 20  # regional units anchored in an entity shown beside its rewrite (official)


def notes_by_region(sm: SourceModel, notes: list[Note]) -> dict[str, list[Note]]:
    """Notes grouped by the region of their first entity, in region order (the planner's and the
    synthetic fixtures' view of where notes fall)."""
    order = [r.id for r in sm.regions]
    groups: dict[str, list[Note]] = {}
    for n in notes:
        reg = next((r for r in (entity_region(sm, k) for k in n.entities) if r is not None), None)
        if reg is not None:
            groups.setdefault(reg, []).append(n)
    return {r: groups[r] for r in order if r in groups}


@dataclass
class Placement:
    """Where each note is consolidated: an entity, a region's cross-entity pass, or a CONNECT pair."""

    entity: dict[str, list[Note]]
    cross: dict[str, list[Note]]
    pair: dict[tuple[str, str], list[Note]]
    unplaced: int = 0


def place_notes(sm: SourceModel, notes: list[Note]) -> Placement:
    """Official ``reorganize`` placement: a DEEPEN note (a study note about one entity) belongs to its
    entity; a CONNECT note (a study note about two) to its pair; an inspection note to the one entity that
    its own entity, its evidence's entities and the units it concerns name, else to the cross-entity pass
    of its region (the region of its first entity, or of its evidence)."""
    owner = element_entity(sm)
    unit_entity = {u.id: u.scope.keys[0] for u in sm.units if u.scope.kind == "entity" and u.scope.keys}
    out = Placement({}, {}, {})
    for n in notes:
        if n.origin == "study" and len(n.entities) == 2:
            out.pair.setdefault((n.entities[0], n.entities[1]), []).append(n)
            continue
        if n.origin == "study" and len(n.entities) == 1:
            ents = [n.entities[0]]
        else:
            ents = list(dict.fromkeys([*n.entities, *(owner[i] for i in n.evidence_ids if i in owner),
                                       *(unit_entity[u] for u in n.unit_ids if u in unit_entity)]))
        if len(ents) == 1 and entity_region(sm, ents[0]) is not None:
            out.entity.setdefault(ents[0], []).append(n)
            continue
        reg = next((r for r in (entity_region(sm, k) for k in ents) if r is not None), None)
        if reg is None:
            out.unplaced += 1
        else:
            out.cross.setdefault(reg, []).append(n)
    return out


def _live(sm: SourceModel, source: Source) -> list[Unit]:
    return [u for u in sm.units if not sm.is_stale(u, source)]


def _evidence(notes: list[Note], units: list[Unit], extra: list[str] = ()) -> list[str]:
    """What the notes rest on first, then what the units rest on (official ``_rewrite_evidence``)."""
    return list(dict.fromkeys([i for n in notes for i in n.evidence_ids] + [i for u in units for i in u.element_ids()]
                              + list(extra)))


def entity_job(sm: SourceModel, live: list[Unit], key: str, notes: list[Note], extra: list[str] = (),
               protect: bool = False) -> RewriteJob:
    """One entity's rewrite: its own units editable; its card, and the regional units anchored in its
    elements (up to 20), as context; ``protect``: its protected units are context too (recalibration)."""
    region = entity_region(sm, key) or ""
    ent = next((e for e in sm.entities if e.key == key), None)
    files = set(ent.element_ids) if ent else set()
    own = [u for u in live if u.scope.kind == "entity" and u.scope.keys == [key]]
    old = [u for u in own if u.role != "card" and not (protect and u.protected)]
    context = [u for u in own if u not in old]
    context += [u for u in live if u.scope.kind in ("region", "pair") and u.role != "map"
                and primary_region(sm, u) == region and set(u.element_ids()) & files][:REGIONAL_CONTEXT]
    return RewriteJob(name=key, region_id=region, old=old, notes=notes, evidence_ids=_evidence(notes, old, extra),
                      allowed=[key], context=context, default_keys=[key], kind="entity")


def cross_job(sm: SourceModel, live: list[Unit], region: str, notes: list[Note]) -> RewriteJob:
    """A region's cross-entity pass: its regional and pair units editable (its map, construction's
    scaffold, never); the units the notes concern join the evidence."""
    old = [u for u in live if u.scope.kind in ("region", "pair") and u.role not in ("card", "map")
           and primary_region(sm, u) == region]
    concerned = {i for n in notes for i in n.unit_ids}
    by_id = {u.id: u for u in live}
    ev_units = old + [by_id[i] for i in sorted(concerned) if i in by_id and by_id[i] not in old]
    keys = [e.key for e in sm.layout().entities_by_region.get(region, [])]
    keys += [k for n in notes for k in n.entities if k not in keys]
    return RewriteJob(name=f"{region}:relations", region_id=region, old=old, notes=notes,
                      evidence_ids=_evidence(notes, ev_units), allowed=keys, kind="relations")


def pair_job(sm: SourceModel, live: list[Unit], pair: tuple[str, str], notes: list[Note]) -> RewriteJob:
    """A CONNECT pair's relation-only pass: no unit editable; both entities' units join the evidence."""
    a, b = pair
    units = [u for u in live if u.scope.kind in ("entity", "pair") and set(u.scope.keys) & {a, b}]
    region = entity_region(sm, a) or entity_region(sm, b) or ""
    return RewriteJob(name=f"{a}<->{b}", region_id=region, old=[], notes=notes,
                      evidence_ids=_evidence(notes, units), allowed=sorted({a, b}), default_keys=sorted({a, b}),
                      kind="pair")


async def _run_jobs(llm: BoundLLM, sm: SourceModel, source: Source, jobs: list[RewriteJob], spec: RewriteSpec,
                    gate_stats: GateStats, stats: RewriteStats, out: SourceModel, gate: bool) -> list[RewriteResult]:
    """Jobs against one snapshot ``sm``, concurrently; gated and applied to ``out`` in job order."""
    sem = asyncio.Semaphore(max(1, spec.concurrency))
    ids = {u.id for u in sm.units}

    gates = [GateStats() for _ in jobs]  # each job gates apart; folded in job order below

    async def one(job: RewriteJob, gs: GateStats) -> RewriteResult:
        async with sem:
            return await rewrite_job(llm, sm, source, job, spec, gs, ids)

    by_id = {u.id: u for u in sm.units}
    results = await asyncio.gather(*(one(j, g) for j, g in zip(jobs, gates)))
    for g in gates:
        gate_stats.add(g)
    if gate:
        results = [structure_gate(sm, r, by_id) for r in results]
    for res in results:
        stats.add(res.stats)
        apply_rewrite(out, res)
    return list(results)


async def consolidate(llm: BoundLLM, sm: SourceModel, source: Source, notes: list[Note], spec: RewriteSpec,
                      gate_stats: GateStats, stats: RewriteStats) -> tuple[SourceModel, list[RewriteResult]]:
    """A new model: every entity with notes rewritten, then each region's cross-entity pass, then each
    CONNECT pair's relation pass (rewrites that fail, or that the structure gate refuses, change nothing)."""
    place = place_notes(sm, notes)
    order = {r.id: i for i, r in enumerate(sm.regions)}
    live = _live(sm, source)
    ent_keys = sorted(place.entity, key=lambda k: (order.get(entity_region(sm, k) or "", len(order)), k))
    out = sm.copy_deep()
    results = await _run_jobs(llm, sm, source, [entity_job(sm, live, k, place.entity[k]) for k in ent_keys],
                              spec, gate_stats, stats, out, gate=True)
    if place.cross:
        snap, live = out, _live(out, source)
        out = snap.copy_deep()
        regions = sorted(place.cross, key=lambda r: order.get(r, len(order)))
        results += await _run_jobs(llm, snap, source, [cross_job(snap, live, r, place.cross[r]) for r in regions],
                                   spec, gate_stats, stats, out, gate=True)
    for pair in place.pair:  # one after another: each pass sees the relations the previous ones wrote
        snap = out
        out = snap.copy_deep()
        results += await _run_jobs(llm, snap, source, [pair_job(snap, _live(snap, source), pair, place.pair[pair])],
                                   spec, gate_stats, stats, out, gate=True)
    return out, results


async def rewrite_entities(llm: BoundLLM, sm: SourceModel, source: Source, notes: dict[str, list[Note]],
                           extra: dict[str, list[str]], spec: RewriteSpec, gate_stats: GateStats,
                           stats: RewriteStats, protect: bool = False) -> tuple[SourceModel, list[RewriteResult]]:
    """Per-entity rewrites only (recalibration): ``notes`` and ``extra`` evidence by entity key; entities
    without units are left out; ``protect``: protected units are shown as context and never rewritten."""
    order = {r.id: i for i, r in enumerate(sm.regions)}
    live = _live(sm, source)
    jobs = [entity_job(sm, live, k, ns, extra.get(k, []), protect) for k, ns in notes.items()
            if ns and entity_region(sm, k) is not None]
    jobs = sorted((j for j in jobs if j.old or any(u.protected for u in j.context)),
                  key=lambda j: (order.get(j.region_id, len(order)), j.name))
    out = sm.copy_deep()
    return out, await _run_jobs(llm, sm, source, jobs, spec, gate_stats, stats, out, gate=True)
