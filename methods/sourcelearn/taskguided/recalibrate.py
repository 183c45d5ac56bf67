"""Recalibration under Pi1 (paper Eq. 14; official ``task_learning/recalibrate.py``): reread every
entity with the learned policy in view and rewrite each entity with notes on its own.

The policy adds no knowledge; it says what structure deserves clearer representation, so
recalibration returns to the source: the same observation prompt in policy mode, then one rewrite per
entity (``selfstudy.consolidate.rewrite_entities``) with the policy appended and, as evidence, what the
notes rest on, then what the entity's units rest on, then the rest of the entity's full text
(official ``prepare_job``). Units learned from tasks (protected) are shown as context and never
rewritten; entities without units are not rewritten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sourcebench.harness.data import Source

from ..grounding import GateStats
from ..model import SourceModel
from ..rewrite import Note, RewriteSpec, RewriteStats
from ..selfstudy.consolidate import rewrite_entities
from ..selfstudy.cycle import CycleStats, inspect_entities

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

    from ..config import SourceLearnConfig


def protect_task_units(sm: SourceModel) -> int:
    n = 0
    for u in sm.units:
        if u.origin == "task-refine" and not u.protected:
            u.protected = True
            n += 1
    return n


async def recalibrate(llm: BoundLLM, sm: SourceModel, source: Source, policy: list[str], cfg: SourceLearnConfig,
                      gate_stats: GateStats) -> tuple[SourceModel, dict[str, Any]]:
    model = sm.copy_deep()
    protect_task_units(model)
    if not policy:
        return model, {"skipped": "empty policy"}
    cs = CycleStats()
    notes = await inspect_entities(llm, model, source, cfg, cs, mode="policy", stage="mt_recalibrate", policy=policy)
    by_entity: dict[str, list[Note]] = {}
    for n in notes:  # an inspection note is about the entity it was taken on
        if n.entities:
            by_entity.setdefault(n.entities[0], []).append(n)
    full = {e.key: list(e.element_ids) for e in model.entities}
    spec = RewriteSpec(mode="recalibrate", origin="recalibrated", stage="mt_recalibrate", ground_stage="mt_ground",
                       preserve_stage="mt_preserve", policy=list(policy), concurrency=cfg.concurrency)
    rw = RewriteStats()
    out, _ = await rewrite_entities(llm, model, source, by_entity, full, spec, gate_stats, rw, protect=True)
    return out, {"observations": len(notes), "inspect_failed": cs.inspect_failed, "rewrite": rw.as_dict(),
                 "protected": sum(u.protected for u in out.units)}
