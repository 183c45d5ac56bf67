"""Failure-guided local refinement (paper Eq. 12; official ``task_learning/refine.py``).

For a failed guidance task, one check lists the needed claims the model does not make available
(C-). Claims already represented trigger no writing: the failure then lies elsewhere. Otherwise one
writer call sees the task's question, the missing claims as TARGETS, the units it may touch (those
that already state a needed claim plus the 12 nearest to the claims by content) and the task's
evidence (the needed claims' elements first), and proposes known / add / replace through
``rewrite.py``: every new unit grounded against all that evidence, at most ``max_refine_units`` new
units and MAX_REPLACE replaced ones, a proposal the model already states dropped, each replaced unit
superseded only when the new units carry its meaning or it is wrong. Targets are notes for the
writer, never stored; units written here are marked protected (learned from a task).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from sourcebench.harness.data import Source
from sourcebench.harness.schema_limits import bounded_list

from ..grounding import GateStats
from ..model import Scope, SourceModel, Unit
from ..rewrite import (
    Note,
    RewriteJob,
    RewriteSpec,
    RewriteStats,
    apply_rewrite,
    element_entity,
    entity_region,
    fit,
    known_unit,
    material_chars,
    primary_region,
    rewrite_job,
    unit_line,
)
from ..words import content_words
from .diagnose import Claim, TaskNeeds

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

    from ..config import SourceLearnConfig

COVERAGE_MAX_TOKENS = 300
SHOWN_UNITS = 12  # nearest units a refinement may touch besides those stating a needed claim (official)


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


def nearest_units(text: str, units: list[Unit], k: int) -> list[Unit]:
    """The ``k`` units sharing the largest share of ``text``'s content words (official ``nearest_units``);
    ties keep model order."""
    st = content_words(text)
    scored = [(len(st & content_words(u.statement)) / max(1, len(st)), i, u) for i, u in enumerate(units)]
    return [u for o, _, u in sorted(scored, key=lambda x: (-x[0], x[1]))[:k] if o > 0]


def shown_units(sm: SourceModel, source: Source, needs: TaskNeeds, k: int = SHOWN_UNITS) -> list[Unit]:
    """Units the refinement may touch (official ``region_units``): those that already state a needed
    claim, then the ``k`` nearest to the needed claims; maps and cards are never among them."""
    live = [u for u in sm.units if u.role not in ("map", "card") and not sm.is_stale(u, source)]
    must = list({u.id: u for u in (known_unit(c.text, Scope(kind="region", keys=[]), live) for c in needs.claims)
                 if u is not None}.values())
    seen = {u.id for u in must}
    return must + [u for u in nearest_units(" ".join(c.text for c in needs.claims), live, k) if u.id not in seen]


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
    shown = shown_units(sm, source, needs)
    keys = list(dict.fromkeys([k for n in targets for k in n.entities]
                              + [k for u in shown if u.scope.kind in ("entity", "pair") for k in u.scope.keys]))
    region = next((r for r in (entity_region(sm, k) for k in keys) if r is not None), None)
    region = region or next((r for r in (primary_region(sm, u) for u in shown) if r is not None), "")
    keys = keys or [e.key for e in sm.layout().entities_by_region.get(region, [])]
    evidence = list(dict.fromkeys([i for c in needs.claims for i in c.evidence_ids] + list(needs.support_ids)))
    job = RewriteJob(name=f"task {needs.task_id}", region_id=region, old=shown, notes=targets, evidence_ids=evidence,
                     allowed=keys, kind="refine", question=needs.question)
    spec = RewriteSpec(mode="refine", origin="task-refine", stage="mt_refine", ground_stage="mt_ground",
                       preserve_stage="mt_preserve", max_changed=cfg.max_refine_units, protect_new=True, delta=True,
                       concurrency=cfg.concurrency)
    res = await rewrite_job(llm, sm, source, job, spec, gate_stats)
    stats.rewrite.add(res.stats)
    out = sm.copy_deep()
    apply_rewrite(out, res)
    old = set(res.old_ids)
    stats.units_written += sum(1 for u in res.units if u.origin == "task-refine" and u.id not in old) if res.committed \
        else 0
    stats.refined_tasks += 1
    return out
