"""Recalibration under Pi1 (paper Eq. 14): reread every entity with the learned policy in view and
rewrite the affected regions through the same gates.

The policy adds no knowledge; it says what structure deserves clearer representation, so
recalibration returns to the source: the same observation prompt in policy mode, then the region
writer with the policy appended. Units learned from tasks (origin ``task-refine``) are protected:
the rewrite restores any of them that no accepted unit absorbed, and an absorbing unit inherits
the protection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sourcebench.harness.data import Source

from ..grounding import GateStats
from ..model import SourceModel
from ..rewrite import RewriteSpec, RewriteStats
from ..selfstudy.consolidate import consolidate
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
    spec = RewriteSpec(mode="recalibrate", origin="recalibrated", stage="mt_recalibrate", ground_stage="mt_ground",
                       preserve_stage="mt_preserve", policy=list(policy), concurrency=cfg.concurrency)
    rw = RewriteStats()
    out, _ = await consolidate(llm, model, source, notes, spec, gate_stats, rw)
    return out, {"observations": len(notes), "inspect_failed": cs.inspect_failed, "rewrite": rw.as_dict(),
                 "protected": sum(u.protected for u in out.units)}
