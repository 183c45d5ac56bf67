"""Deterministic rendering of the admitted claims into the knowledge document given to the solver.

Programmatic, no model call: the admitted claims grouped under the four knowledge-type headings
(fixed order, empty headings omitted), each canonical claim once, in creation order, with its
scope. Ids, evidence counts, provenance, routes and relation labels are internal and never
rendered. An empty admitted set renders as an empty string.
"""

from __future__ import annotations

from collections.abc import Iterable

from .claims import TYPE_ORDER, Claim

HEADINGS = {"factual": "Factual knowledge", "conceptual": "Conceptual knowledge",
            "procedural": "Procedural knowledge", "metacognitive": "Metacognitive knowledge"}


def render_claim(c: Claim) -> str:
    return f"{c.text} (scope: {c.scope})" if c.scope else c.text


def render(claims: Iterable[Claim]) -> str:
    ordered = sorted(claims, key=lambda c: (c.seq, c.id))
    parts = []
    for kind in TYPE_ORDER:
        lines = [f"- {render_claim(c)}" for c in ordered if c.type == kind]
        if lines:
            parts.append(f"## {HEADINGS[kind]}\n" + "\n".join(lines))
    return "\n\n".join(parts)
