"""The persistent state of RIKA: canonical claims with provenance, evidence and relation edges.

This is the artifact (``claims.json``). Every claim carries a stable id so that one claim can be
addressed (rendered, removed for a leave-one-out test) on its own. Evidence is kept as the sets of
trajectories (guidance task ids) that supported or opposed the claim: each trajectory is one
source-level evidence unit, so re-deriving a claim twice from the same trajectory counts once.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from sourcebench.harness.data import normalise_ws, stable_hash

KnowledgeType = Literal["factual", "conceptual", "procedural", "metacognitive"]
TYPE_ORDER: tuple[KnowledgeType, ...] = ("factual", "conceptual", "procedural", "metacognitive")
FIRST_ORDER: tuple[KnowledgeType, ...] = ("factual", "procedural")
# second-order type -> the first-order type it is derived from
PARENT_TYPE: dict[KnowledgeType, KnowledgeType] = {"conceptual": "factual", "metacognitive": "procedural"}

Route = Literal["immediate", "deferred"]
Relation = Literal["equivalent", "specialise", "generalise", "contradict", "overlap", "independent"]
EdgeKind = Literal["entails", "contradicts", "overlaps", "equivalent"]


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9 ]+", "", normalise_ws(s).lower()).strip()


def claim_key(kind: str, text: str, scope: str) -> str:
    """Identity of a claim's content: type + normalised text + normalised scope."""
    return stable_hash("rika-claim", kind, _norm(text), _norm(scope))


def claim_id(kind: str, text: str, scope: str) -> str:
    """A stable, content-derived id, e.g. ``fact-3f9a0c21b7``: the same claim gets the same id in every run."""
    return f"{kind[:4]}-{claim_key(kind, text, scope)[:10]}"


class BatchEvidence(BaseModel):
    """What one batch added to a claim's evidence: the trajectories that supported or opposed it."""

    batch: int
    support: list[str] = Field(default_factory=list)
    oppose: list[str] = Field(default_factory=list)


class Claim(BaseModel):
    """A canonical claim with its scope, provenance, evidence and admission status."""

    id: str
    type: KnowledgeType
    text: str
    scope: str = ""
    aliases: list[str] = Field(default_factory=list)  # texts of equivalent claims merged into it
    route: Route
    route_reason: str = ""
    grounding: Literal["direct", "indirect"] = "direct"
    grounding_explanation: str = ""
    evidence_spans: list[str] = Field(default_factory=list)  # verbatim feedback spans
    source_trajectories: list[str] = Field(default_factory=list)  # guidance task ids it was derived from
    batches: list[int] = Field(default_factory=list)  # batches in which it was (re-)derived
    parents: list[str] = Field(default_factory=list)  # first-order claim ids a second-order claim rests on
    created_batch: int
    last_evidence_batch: int = 0
    seq: int = 0  # creation order: the rendering order within a type
    supporters: list[str] = Field(default_factory=list)
    opposers: list[str] = Field(default_factory=list)
    history: list[BatchEvidence] = Field(default_factory=list)
    below: int = 0  # consecutive completed batches below threshold (the creation batch does not count)
    admitted: bool = False

    @property
    def evidence(self) -> int:
        """Cumulative net evidence e(v): supporting minus opposing trajectories."""
        return len(self.supporters) - len(self.opposers)

    def threshold(self, k: int) -> int:
        return 1 if self.route == "immediate" else k


class Edge(BaseModel):
    """A judged relation between two stored claims. ``entails`` points from the more specific claim
    (``src``) to the more general one (``dst``); the other kinds are symmetric."""

    kind: EdgeKind
    src: str
    dst: str
    batch: int
    trajectories: list[str] = Field(default_factory=list)  # the trajectories of the claim that was judged


class ForgottenClaim(BaseModel):
    """A claim dropped after m batches below threshold (kept only as a record, never rendered)."""

    id: str
    type: KnowledgeType
    text: str
    scope: str = ""
    route: Route
    evidence: int
    created_batch: int
    forgotten_batch: int


class ClaimStore(BaseModel):
    """All active claims (insertion order), their relation edges, and the forgotten record."""

    claims: dict[str, Claim] = Field(default_factory=dict)
    edges: list[Edge] = Field(default_factory=list)
    forgotten: list[ForgottenClaim] = Field(default_factory=list)
    batch: int = 0  # the last completed batch
    next_seq: int = 0

    def admitted(self) -> list[Claim]:
        return [c for c in self.claims.values() if c.admitted]

    def by_key(self) -> dict[str, str]:
        return {claim_key(c.type, c.text, c.scope): c.id for c in self.claims.values()}

    # -- graph -----------------------------------------------------------------------------------
    def generalisations(self, cid: str) -> set[str]:
        """Claims reachable from ``cid`` along entailment edges (excluding ``cid`` itself)."""
        out: dict[str, list[str]] = {}
        for e in self.edges:
            if e.kind == "entails":
                out.setdefault(e.src, []).append(e.dst)
        seen: set[str] = set()
        stack = list(out.get(cid, []))
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(out.get(n, []))
        seen.discard(cid)
        return seen

    def contradicting(self, cid: str) -> set[str]:
        return ({e.dst for e in self.edges if e.kind == "contradicts" and e.src == cid}
                | {e.src for e in self.edges if e.kind == "contradicts" and e.dst == cid})

    def has_edge(self, kind: str, a: str, b: str) -> bool:
        symmetric = kind != "entails"
        return any(e.kind == kind and ((e.src, e.dst) == (a, b) or (symmetric and (e.src, e.dst) == (b, a)))
                   for e in self.edges)

    def add_edge(self, kind: EdgeKind, a: str, b: str, batch: int, trajectories: list[str]) -> bool:
        """Add an edge unless it is a self-loop, a duplicate, or (for entailment) would close a cycle."""
        if a == b or a not in self.claims or b not in self.claims or self.has_edge(kind, a, b):
            return False
        if kind == "entails" and (a in self.generalisations(b)):
            return False  # the entailment graph stays acyclic
        self.edges.append(Edge(kind=kind, src=a, dst=b, batch=batch, trajectories=sorted(set(trajectories))))
        return True

    def remove(self, cid: str, batch: int) -> None:
        """Forget a claim. Entailment through it is kept (a -> cid -> b becomes a -> b), since
        entailment is transitive and the support path between the remaining claims still holds."""
        ins = [e for e in self.edges if e.kind == "entails" and e.dst == cid]
        outs = [e for e in self.edges if e.kind == "entails" and e.src == cid]
        self.edges = [e for e in self.edges if cid not in (e.src, e.dst)]
        for i in ins:
            for o in outs:
                self.add_edge("entails", i.src, o.dst, batch, i.trajectories + o.trajectories)
        c = self.claims.pop(cid)
        self.forgotten.append(ForgottenClaim(id=c.id, type=c.type, text=c.text, scope=c.scope, route=c.route,
                                             evidence=c.evidence, created_batch=c.created_batch,
                                             forgotten_batch=batch))
