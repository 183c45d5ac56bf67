"""Atomisation: split each extracted claim into self-contained, independent atomic claims.

Admitting or rejecting a compound claim as a whole would let an unsupported part in or throw a
supported part away, so evidence is kept per atom. One call per claim, conditioned on its type.
Each atom must be grounded by feedback relevant to its own content: a first-order atom keeps only
the quoted spans that are real feedback, and only the trajectories those spans come from; an atom
of a claim that was not split inherits the claim's grounding; a second-order atom is grounded
through its parents. If the atomiser call fails, the claim (already grounded) goes on whole and the
failure is counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from sourcebench.harness.data import normalise_ws
from sourcebench.harness.llm import BoundLLM
from sourcebench.harness.schema_limits import bounded_list

from .calls import bounded_map
from .claims import PARENT_TYPE, KnowledgeType, Route
from .experience import Trajectory, grounded_spans
from .extract import ExtractedClaim, Spans, Text


class AtomItem(BaseModel):
    claim: Text
    evidence_spans: Spans


class AtomReply(BaseModel):
    atoms: bounded_list(AtomItem, 8)


@dataclass(frozen=True)
class Atom:
    """The unit of routing, relation judgment and evidence. ``origin`` is the local id of the extracted
    claim it came from; ``parent_origins`` the local ids of the first-order claims it rests on."""

    type: KnowledgeType
    text: str
    scope: str
    trajectories: tuple[str, ...]
    spans: tuple[str, ...]
    grounding: Literal["direct", "indirect"]
    explanation: str
    origin: str
    parent_origins: tuple[str, ...] = ()
    route: Route = "deferred"
    route_reason: str = ""


SYSTEM = "You split knowledge claims into atomic claims without changing what they say."

INSTRUCTIONS = """Task: split one {kind} claim into atomic claims.
- Split only where the parts are self-contained and independent: each atom must make sense, and be true or false, on its own.
- Keep the claim whole when its parts depend on each other: the ordered steps of one procedure stay together, and a condition or exception stays with what it qualifies.
- Each atom keeps the entities, scope and qualifications it needs; add no information.
- For each atom, copy from the feedback spans listed below the ones that ground its own content.
- A claim that is already atomic is returned as a single atom."""


def atomise_messages(claim: ExtractedClaim) -> list[dict[str, str]]:
    spans = "\n".join(f'- "{s}"' for s in claim.spans) or "- (none quoted; grounded through its parent claims)"
    body = "\n\n".join([
        INSTRUCTIONS.format(kind=claim.type),
        (f"Claim ({claim.type}): {claim.text}\nScope: {claim.scope or 'unstated'}\nFeedback spans:\n{spans}\n"
         f"Grounding: {claim.explanation}"),
        'Reply with a JSON object {"atoms": [{"claim": ..., "evidence_spans": [...]}, ...]}.',
    ])
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": body}]


def atoms_of(claim: ExtractedClaim, items: list[AtomItem] | None, by_task: dict[str, Trajectory],
             excerpt_chars: int) -> tuple[list[Atom], Counter]:
    """Turn the atomiser's reply for one claim into grounded atoms (``items`` None: keep it whole)."""
    counts: Counter = Counter()
    whole = Atom(claim.type, claim.text, claim.scope, claim.trajectories, claim.spans, claim.grounding,
                 claim.explanation, claim.local_id, claim.parents)
    texts = [i for i in (items or []) if normalise_ws(i.claim)]
    if items is None or not texts:
        counts["kept_whole_failed" if items is None else "kept_whole_empty"] += 1
        return [whole], counts
    out: list[Atom] = []
    for item in texts:
        text = normalise_ws(item.claim)
        if claim.type in PARENT_TYPE:  # grounded through its parents, like its claim
            spans = [s for t in claim.trajectories
                     for s in grounded_spans(item.evidence_spans, by_task[t].feedback(excerpt_chars))]
            out.append(Atom(claim.type, text, claim.scope, claim.trajectories, tuple(dict.fromkeys(spans)),
                            claim.grounding, claim.explanation, claim.local_id, claim.parents))
            continue
        sources, spans = [], []
        for t in claim.trajectories:
            ok = grounded_spans(item.evidence_spans, by_task[t].feedback(excerpt_chars))
            if ok:
                sources.append(t)
                spans += [s for s in ok if s not in spans]
        if not sources:
            if len(texts) == 1:  # not split: the claim's own grounding applies
                sources, spans = list(claim.trajectories), list(claim.spans)
            else:
                counts["ungrounded_atom"] += 1
                continue
        out.append(Atom(claim.type, text, claim.scope, tuple(sources), tuple(spans), claim.grounding,
                        claim.explanation, claim.local_id, claim.parents))
    counts["split" if len(texts) > 1 else "atomic"] += 1
    return out, counts


async def atomise_claims(claims: list[ExtractedClaim], trajectories: list[Trajectory], llm: BoundLLM, *,
                         excerpt_chars: int, max_tokens: int, concurrency: int | None) -> tuple[list[Atom], Counter]:
    by_task = {t.task_id: t for t in trajectories}

    async def one(claim: ExtractedClaim):
        res = await llm.structured(atomise_messages(claim), AtomReply, stage="atomise", max_tokens=max_tokens)
        return atoms_of(claim, res.value.atoms if res.value is not None else None, by_task, excerpt_chars)

    atoms: list[Atom] = []
    counts: Counter = Counter()
    for got, c in await bounded_map(one, claims, concurrency):
        atoms += got
        counts.update(c)
    return atoms, counts
