"""Consolidate: read many, write once. Notes are grouped by the region they concern and each
affected region is rewritten once through the grounded reconstruction of ``rewrite.py``.

A note belongs to the region of its first entity (a CONNECT note across two regions is written
with the first one, where a pair-scoped unit can express it). Regions are rewritten concurrently
against the same snapshot of the model (their editable sets are disjoint: every unit has one
primary region) and committed in region order, so the result does not depend on timing.

The official structure gate then decides whether a committed rewrite is applied: only when it
incorporates notes (a proposed unit cites one) or improves the region's structure (fewer
near-duplicate pairs, fewer isolated details, more relational units, or fewer tokens); otherwise it
is a no-op and the region stays as it was. Consolidation serves self-study and recalibration (the
official "observe, then rewrite" path); failure-guided refinement writes without this gate, as there.
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
    RegionViews,
    RewriteResult,
    RewriteSpec,
    RewriteStats,
    apply_rewrite,
    entity_region,
    rewrite_region,
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


def notes_by_region(sm: SourceModel, notes: list[Note]) -> dict[str, list[Note]]:
    order = [r.id for r in sm.regions]
    groups: dict[str, list[Note]] = {}
    for n in notes:
        reg = next((r for r in (entity_region(sm, k) for k in n.entities) if r is not None), None)
        if reg is not None:
            groups.setdefault(reg, []).append(n)
    return {r: groups[r] for r in order if r in groups}


async def consolidate(llm: BoundLLM, sm: SourceModel, source: Source, notes: list[Note], spec: RewriteSpec,
                      gate_stats: GateStats, stats: RewriteStats,
                      extra_evidence: dict[str, list[str]] | None = None) -> tuple[SourceModel, list[RewriteResult]]:
    """A new model with every affected region rewritten (regions whose rewrite failed, or that the structure
    gate refused, stay as they were)."""
    groups = notes_by_region(sm, notes)
    sem = asyncio.Semaphore(max(1, spec.concurrency))
    views = RegionViews.of(sm, source)  # every region is rewritten against this one snapshot

    async def one(region_id: str, group: list[Note]) -> RewriteResult:
        async with sem:
            extra = (extra_evidence or {}).get(region_id, [])
            return await rewrite_region(llm, sm, source, region_id, group, spec, gate_stats, extra, views)

    by_id = {u.id: u for u in sm.units}
    results = [structure_gate(sm, r, by_id) for r in await asyncio.gather(*(one(r, g) for r, g in groups.items()))]
    out = sm.copy_deep()
    for res in results:
        stats.add(res.stats)
        apply_rewrite(out, res)
    return out, list(results)
