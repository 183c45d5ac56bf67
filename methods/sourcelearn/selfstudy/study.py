"""Study: carry out one planned action by tiered retrieval and a focused reread.

Evidence for the action's question comes from the learning-time retrieval (``learn_retrieval``):
``deepen_k`` elements for a DEEPEN, ``connect_k`` for a CONNECT, taken from the files of the entities
it names when they hold at least ``inspect_min_hits`` of the candidates (for a CONNECT also the files
its two entities' units are anchored in), else from the whole source; code hits are read as their
windows. The task-time ``top_k`` plays no part. A DEEPEN's question comes with the observations
already recorded about its entity (at most ``PRIOR_NOTES``), to be resolved or sharpened rather than
restated, as in the official study. The question is a learning instrument: it is never stored in the
model.

The units shown with a question are the official ones: for a DEEPEN the entity's first
``DEEPEN_UNITS`` (12) units plus the ``NEAREST`` (4) units nearest the question anywhere in the model;
for a CONNECT the first ``CONNECT_UNITS`` (8) of each entity. Study retrieval caps every source at
``PER_FILE_CAP`` (3) hits per file, documents included, as the official self-study retriever does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sourcebench.harness.data import Source
from sourcebench.harness.retrieval import HybridIndex

from ..learn_retrieval import PER_FILE_CAP, Found, file_of, tiered_search
from ..model import SourceModel, Unit
from ..rewrite import Note, entity_units
from ..words import content_words
from .observe import observe
from .plan import Action

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

    from ..config import SourceLearnConfig

CONNECT_UNITS = 8  # units of each entity a CONNECT shows, and whose anchor files widen its scope (official)
DEEPEN_UNITS = 12  # units of its entity a DEEPEN shows (official)
NEAREST = 4  # units nearest a DEEPEN's question (or an inspected entity's name) shown as well (official k=4)
PRIOR_NOTES = 6  # observations about a DEEPEN's entity shown with its question (official)


class NearestIndex:
    """Content words -> units, built once per model snapshot, so the nearest units of many queries cost
    the postings of the query's words, not a pass over the model each (2,318 entities x 10,935 units
    took 128 s as passes)."""

    def __init__(self, sm: SourceModel):
        self.units = [u for u in sm.units if u.role != "map"]
        self.postings: dict[str, list[int]] = {}
        for i, u in enumerate(self.units):
            for w in content_words(u.statement):
                self.postings.setdefault(w, []).append(i)

    def nearest(self, text: str, k: int, exclude: set[str] | frozenset[str] = frozenset()) -> list[Unit]:
        """The ``k`` units sharing most of ``text``'s content words (none sharing nothing; model order on ties)."""
        if k <= 0:
            return []
        shared: Counter[int] = Counter()
        for w in content_words(text):
            shared.update(self.postings.get(w, ()))
        ranked = sorted(shared.items(), key=lambda x: (-x[1], x[0]))
        return [u for u in (self.units[i] for i, _ in ranked) if u.id not in exclude][:k]


def nearest_units(sm: SourceModel, text: str, k: int, exclude: set[str] | frozenset[str] = frozenset(),
                  index: NearestIndex | None = None) -> list[Unit]:
    """The ``k`` units whose statements share most of ``text``'s content words (official ``nearest_units``:
    maps aside, none sharing nothing); ``index``: a ``NearestIndex`` of ``sm``, built once for many queries."""
    return (index or NearestIndex(sm)).nearest(text, k, exclude)


def shown_units(sm: SourceModel, source: Source, action: Action, index: NearestIndex | None = None) -> list[Unit]:
    """The units a study action's reread shows (official): DEEPEN, the entity's first ``DEEPEN_UNITS`` and
    the ``NEAREST`` to its question; CONNECT, the first ``CONNECT_UNITS`` of each of its two entities."""
    if action.kind == "DEEPEN":
        own = [u for u in entity_units(sm, action.entities[0], source) if u.role != "card"][:DEEPEN_UNITS]
        ids = {u.id for u in own}
        return own + nearest_units(sm, action.question, NEAREST, ids, index)
    out: dict[str, Unit] = {}
    for key in action.entities:
        for u in [u for u in entity_units(sm, key, source) if u.role != "card"][:CONNECT_UNITS]:
            out.setdefault(u.id, u)
    return list(out.values())


def action_scope(sm: SourceModel, source: Source, action: Action, units: list[Unit]) -> set[str]:
    """The files a study action's retrieval is scoped to: its entities' files, and for a CONNECT the
    files the first units of each entity are anchored in."""
    ents = {e.key: e for e in sm.entities}
    files: set[str] = set()
    for key in action.entities:
        for i in ents[key].element_ids if key in ents else []:
            el = source.element(i)
            if el is not None:
                files.add(file_of(el))
    if action.kind == "CONNECT":
        for key in action.entities:
            for u in [u for u in units if key in u.scope.keys][:CONNECT_UNITS]:
                for i in u.element_ids():
                    el = source.element(i)
                    if el is not None:
                        files.add(file_of(el))
    return files


def study_evidence(index: HybridIndex, sm: SourceModel, source: Source, action: Action, units: list[Unit],
                   cfg: SourceLearnConfig) -> Found:
    k = cfg.deepen_k if action.kind == "DEEPEN" else cfg.connect_k
    return tiered_search(index, source, action.question, k, cfg, scoped=action_scope(sm, source, action, units),
                         per_file_cap=PER_FILE_CAP)


def prior_observations(action: Action, notes: list[Note]) -> list[str]:
    """What is already noted about a DEEPEN's entity (notes about that entity alone, in order)."""
    if action.kind != "DEEPEN":
        return []
    return [n.text for n in notes if n.entities == action.entities][:PRIOR_NOTES]


def study_question(action: Action, prior: list[str]) -> str:
    if not prior:
        return action.question
    return (action.question + "\nObservations already recorded about this entity (resolve or sharpen them; do not "
            "restate them):\n" + "\n".join(f"- {p}" for p in prior))


async def study(llm: BoundLLM, index: HybridIndex, sm: SourceModel, source: Source, action: Action,
                cfg: SourceLearnConfig, *, stage: str, notes: Sequence[Note] = (),
                nearest: NearestIndex | None = None) -> list[Note] | None:
    """New observations that answer the action's question (None if the reread call failed); ``notes``:
    the cycle's observations so far; ``nearest``: the model's ``NearestIndex`` (built here when None)."""
    units = shown_units(sm, source, action, nearest)
    found = study_evidence(index, sm, source, action, units, cfg)
    question = study_question(action, prior_observations(action, list(notes)))
    return await observe(llm, source, units, [s.element_id for s in found.items], action.entities, mode="study",
                         stage=stage, max_notes=cfg.observations_per_question, target=action.render(),
                         question=question, origin="study", shown_text={s.element_id: s.text for s in found.items})
