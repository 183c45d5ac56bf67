"""Study: carry out one planned action by scoped retrieval and a focused reread.

Evidence for the action's question comes first from the elements of the entities it names (a
restricted Hybrid RAG search), then from the whole source to fill up to ``k``, so a question about
an entity reads that entity's text before anything that merely shares its words. The question is
a learning instrument: it is never stored in the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.data import Evidence, Source
from harness.retrieval import HybridIndex, per_file_cap_for

from ..model import SourceModel
from ..rewrite import Note, entity_units
from .observe import observe
from .plan import Action

if TYPE_CHECKING:
    from harness.llm import BoundLLM


def scoped_evidence(index: HybridIndex, source: Source, query: str, scope_ids: list[str], k: int) -> list[Evidence]:
    """Top ``k`` hits within ``scope_ids`` first, then unrestricted hits not already taken."""
    cap = per_file_cap_for(source.kind)
    first = index.search(query, k=k, per_file_cap=cap, restrict_to=set(scope_ids)) if scope_ids else []
    taken = {e.element_id for e in first}
    rest = [e for e in index.search(query, k=2 * k, per_file_cap=cap) if e.element_id not in taken]
    return (first + rest)[:k]


async def study(llm: BoundLLM, index: HybridIndex, sm: SourceModel, source: Source, action: Action, *,
                k: int, max_notes: int, stage: str) -> list[Note] | None:
    """New observations that answer the action's question (None if the reread call failed)."""
    ents = {e.key: e for e in sm.entities}
    scope_ids = list(dict.fromkeys(i for key in action.entities if key in ents for i in ents[key].element_ids))
    hits = scoped_evidence(index, source, action.question, scope_ids, k)
    units = list({u.id: u for key in action.entities for u in entity_units(sm, key, source)}.values())
    target = f"{action.render()}"
    return await observe(llm, source, units, [h.element_id for h in hits], action.entities, mode="study",
                         stage=stage, max_notes=max_notes, target=target, question=action.question,
                         origin="study")
