"""Admission routing: is an atom established by its own feedback (immediate, threshold 1) or does
it reach beyond what was observed (deferred, threshold k)?

One call per atom, seeing the claim, its quoted feedback and its grounding explanation. The
decision is about evidence and scope, not knowledge type. A failed routing call routes the atom
to deferred (the conservative route) and is counted. ``mode`` other than "model" forces one route
for every atom (the paper's immediate-only / deferred-only ablations) without any call.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel

from sourcebench.harness.data import normalise_ws
from sourcebench.harness.llm import BoundLLM
from sourcebench.harness.schema_limits import bounded_text

from .atomise import Atom
from .calls import bounded_map

RoutingMode = Literal["model", "immediate", "deferred"]


class RouteReply(BaseModel):
    route: Literal["immediate", "deferred"]
    reason: bounded_text(300)


SYSTEM = "You decide how much corroboration a knowledge claim needs before it may guide later answers."

INSTRUCTIONS = """Task: route one claim learned from question-answering records.
- immediate: the quoted feedback by itself establishes the claim exactly as stated, within its scope (an excerpt states the fact; the verdict shows that the described procedure worked under the stated conditions).
- deferred: the claim reaches beyond what the feedback shows (other entities or kinds of questions, a rule drawn from a few cases, guidance for situations not yet met) or rests on inference; it must wait for later records to corroborate it.
Decide by the evidence and the scope, not by the kind of knowledge."""


def route_messages(atom: Atom) -> list[dict[str, str]]:
    spans = "\n".join(f'- "{s}"' for s in atom.spans) or "- (none quoted directly; grounded through parent claims)"
    body = "\n\n".join([
        INSTRUCTIONS,
        (f"Claim ({atom.type}): {atom.text}\nScope: {atom.scope or 'unstated'}\nFeedback spans:\n{spans}\n"
         f"Grounding ({atom.grounding}): {atom.explanation}"),
        'Reply with a JSON object {"route": "immediate" or "deferred", "reason": ...}.',
    ])
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": body}]


async def route_atoms(atoms: list[Atom], llm: BoundLLM, *, mode: RoutingMode, max_tokens: int,
                      concurrency: int | None) -> tuple[list[Atom], Counter]:
    counts: Counter = Counter()
    if mode != "model":
        counts[mode] += len(atoms)
        return [replace(a, route=mode, route_reason=f"{mode}-only routing") for a in atoms], counts

    async def one(atom: Atom) -> Atom:
        res = await llm.structured(route_messages(atom), RouteReply, stage="route", max_tokens=max_tokens)
        if res.value is None:
            return replace(atom, route="deferred", route_reason=f"routing call failed ({res.error[:80]}); deferred")
        return replace(atom, route=res.value.route, route_reason=normalise_ws(res.value.reason))

    routed = await bounded_map(one, atoms, concurrency)
    for a in routed:
        counts["failed" if a.route_reason.startswith("routing call failed") else a.route] += 1
    return routed, counts
