"""Failure-guided local refinement (paper Eq. 12).

For a failed guidance task, one check lists the needed claims the model does not make available
(C-). Claims already represented trigger no writing: the failure then lies elsewhere. Missing
claims become learning TARGETS for the implicated region(s): the region's entities are reread from
the source and the region is reconstructed through ``rewrite.py`` (known / add / replace), at most
``max_refine_units`` changed units per task, every unit grounded. Targets are notes for the writer,
never stored; units written here are marked protected (learned from a task).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from sourcebench.harness.data import Source
from sourcebench.harness.schema_limits import bounded_list

from ..grounding import GateStats
from ..model import SourceModel, Unit
from ..rewrite import (
    Note,
    RewriteSpec,
    RewriteStats,
    apply_rewrite,
    element_entity,
    fit,
    material_chars,
    primary_region,
    rewrite_region,
    unit_line,
)
from ..selfstudy.consolidate import notes_by_region
from .diagnose import Claim, TaskNeeds

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

    from ..config import SourceLearnConfig

COVERAGE_MAX_TOKENS = 300


class Coverage(BaseModel):
    missing: bounded_list(int, 16) = Field(default_factory=list, description="numbers of required statements the model lacks")


COVERAGE_SYSTEM = (
    "You check a source model against what a task needed. You get numbered statements of source knowledge "
    "the task required and the units the model currently holds about that part of the source. List the "
    "numbers of the required statements the model does NOT make available. A statement is available when a "
    "unit states it or entails it, possibly through a broader rule; a missing value, condition, entity, "
    "relation or step makes it unavailable."
)


@dataclass
class RefineStats:
    checked: int = 0
    check_failed: int = 0
    already_known: int = 0
    missing_claims: int = 0
    refined_tasks: int = 0
    units_written: int = 0
    rewrite: RewriteStats = field(default_factory=RewriteStats)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "rewrite"}
        d["rewrite"] = self.rewrite.as_dict()
        return d


def claim_entities(sm: SourceModel, claim: Claim, owner: dict[str, str] | None = None) -> tuple[str, ...]:
    """The entities whose elements a claim cites; ``owner``: ``element_entity(sm)``, built once per claims."""
    owner = element_entity(sm) if owner is None else owner
    return tuple(dict.fromkeys(owner[i] for i in claim.evidence_ids if i in owner))


def relevant_units(sm: SourceModel, source: Source, needs: TaskNeeds) -> list[Unit]:
    """Units about the entities, elements and regions the task's evidence touches."""
    ids = set(needs.support_ids) | {i for c in needs.claims for i in c.evidence_ids}
    owner = element_entity(sm)
    ents = {owner[i] for i in ids if i in owner}
    region_of = sm.layout().region_of
    regions = {region_of.get(k) for k in ents}
    out = []
    for u in sm.units:  # the staleness check (element look-ups) last: only for the units that qualify
        if ((set(u.scope.keys) & ents or set(u.element_ids()) & ids
                or (u.scope.kind == "region" and primary_region(sm, u) in regions))
                and not sm.is_stale(u, source)):
            out.append(u)
    return out


async def missing_claims(llm: BoundLLM, sm: SourceModel, source: Source, needs: TaskNeeds,
                         stage: str = "mt_refine") -> list[Claim] | None:
    """C-: the needed claims the model does not make available (None if the check failed)."""
    if not needs.claims:
        return []
    budget = material_chars(llm, COVERAGE_MAX_TOKENS)
    lines = fit((unit_line(u) for u in relevant_units(sm, source, needs)), budget)
    claims = "\n".join(f"{i}. {c.text}" for i, c in enumerate(needs.claims, 1))
    msgs = [{"role": "system", "content": COVERAGE_SYSTEM},
            {"role": "user", "content": f"Required statements:\n{claims}\n\nModel units:\n"
             + ("\n".join(lines) or "(none)") + "\n\nReply in JSON."}]
    res = await llm.structured(msgs, Coverage, stage=stage, max_tokens=COVERAGE_MAX_TOKENS)
    if res.failed or res.value is None:
        return None
    nums = sorted({n for n in res.value.missing if 1 <= n <= len(needs.claims)})  # type: ignore[union-attr]
    return [needs.claims[n - 1] for n in nums]


async def refine(llm: BoundLLM, sm: SourceModel, source: Source, needs: TaskNeeds, cfg: SourceLearnConfig,
                 gate_stats: GateStats, stats: RefineStats) -> SourceModel:
    """Repair the model for one failed task; returns the (possibly) updated model, a new object."""
    stats.checked += 1
    missing = await missing_claims(llm, sm, source, needs)
    if missing is None:
        stats.check_failed += 1
        return sm
    if not missing:
        stats.already_known += 1
        return sm
    stats.missing_claims += len(missing)
    owner = element_entity(sm)
    targets = [Note(text=c.text, evidence_ids=c.evidence_ids, implication="needed in use; not available in the model",
                    entities=claim_entities(sm, c, owner), origin="target") for c in missing]
    spec = RewriteSpec(mode="refine", origin="task-refine", stage="mt_refine", ground_stage="mt_ground",
                       preserve_stage="mt_preserve", max_changed=cfg.max_refine_units, protect_new=True, delta=True,
                       concurrency=cfg.concurrency)
    ents = {e.key: e for e in sm.entities}
    out = sm.copy_deep()
    remaining = cfg.max_refine_units
    groups = notes_by_region(out, targets)
    for region_id, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):  # stable: region order on ties
        if remaining <= 0:
            break
        spec.max_changed = remaining
        reread = list(needs.support_ids) + [i for n in group for k in n.entities if k in ents
                                            for i in ents[k].element_ids]
        res = await rewrite_region(llm, out, source, region_id, group, spec, gate_stats, reread)
        stats.rewrite.add(res.stats)
        apply_rewrite(out, res)
        written = sum(1 for u in res.units if u.origin == "task-refine" and u.id not in set(res.old_ids))
        stats.units_written += written
        remaining -= written
    stats.refined_tasks += 1
    return out
