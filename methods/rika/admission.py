"""Evidence-based knowledge admission (EKA) state updates, in plain code: no model calls here.

After a batch's atoms are routed and judged:

1. ``integrate``: an atom equivalent to a stored claim (same type) is merged into it, keeping its
   provenance; if their routes disagree the merged claim falls back to deferred. Otherwise the atom
   becomes a new claim. Specialise / generalise judgments add entailment edges from the more
   specific to the more general claim (kept acyclic); contradictions add a symmetric edge; overlap
   is recorded and transfers nothing.
2. ``accumulate``: every trajectory of the batch is one evidence unit. It supports each claim it
   grounds and every generalisation reachable from those along entailment edges (never the
   reverse), and opposes every claim contradicting one it grounds. A trajectory counts at most
   once per claim. Net evidence e(v) = supporters - opposers.
3. ``reassess``: every active claim, including ones admitted earlier, is admitted iff
   e(v) >= theta(v) (1 for immediate, k for deferred). A completed batch after the creation batch
   that leaves a claim below threshold increments its counter; reaching the threshold resets it; a
   claim is forgotten when the counter reaches m. The creation batch does not count: the paper's
   worked example (Appendix C.2) keeps a claim created in batch 1, re-derived in batch 2 and
   opposed in batch 3 pending after batch 3 with m = 3.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .atomise import Atom
from .claims import BatchEvidence, Claim, ClaimStore, claim_id
from .relations import Judgement, Target


@dataclass
class Integration:
    """Which claims each trajectory grounded in this batch, and what happened to each atom."""

    grounded: dict[str, set[str]] = field(default_factory=dict)
    canonical: dict[int, str] = field(default_factory=dict)  # atom index -> claim id
    counts: Counter = field(default_factory=Counter)


def _union(a: list, b) -> list:
    return a + [x for x in b if x not in a]


def _merge(v: Claim, atom: Atom, parents: list[str], batch: int) -> None:
    if atom.text != v.text and atom.text not in v.aliases:
        v.aliases.append(atom.text)
    v.source_trajectories = _union(v.source_trajectories, atom.trajectories)
    v.evidence_spans = _union(v.evidence_spans, atom.spans)
    v.parents = _union(v.parents, parents)
    if batch not in v.batches:
        v.batches.append(batch)
    if v.route != atom.route:
        v.route = "deferred"
        v.route_reason = (v.route_reason + "; " if v.route_reason else "") + (
            f"merged in batch {batch} with an equivalent claim routed {atom.route}: routes disagree, so deferred")


def _create(store: ClaimStore, atom: Atom, parents: list[str], batch: int) -> Claim:
    cid = base = claim_id(atom.type, atom.text, atom.scope)
    n = 1
    while cid in store.claims:  # a hash-prefix clash with a different claim
        n += 1
        cid = f"{base}-{n}"
    c = Claim(id=cid, type=atom.type, text=atom.text, scope=atom.scope, route=atom.route,
              route_reason=atom.route_reason, grounding=atom.grounding, grounding_explanation=atom.explanation,
              evidence_spans=list(atom.spans), source_trajectories=list(atom.trajectories), batches=[batch],
              parents=parents, created_batch=batch, seq=store.next_seq)
    store.next_seq += 1
    store.claims[cid] = c
    return c


def integrate(store: ClaimStore, atoms: list[Atom], judgements: list[list[Judgement] | None],
              batch: int) -> Integration:
    """Apply one batch's atoms to the store in atom order (first-order types come first, so the parents
    of second-order atoms are resolved when they arrive)."""
    out = Integration()
    by_origin: dict[str, list[str]] = {}

    def resolve(t: Target) -> str | None:
        cid = t[1] if t[0] == "claim" else out.canonical.get(int(t[1]))
        return cid if isinstance(cid, str) and cid in store.claims else None

    for i, (atom, js) in enumerate(zip(atoms, judgements)):
        if js is None:
            out.counts["withheld"] += 1
            continue
        parents = list(dict.fromkeys(c for p in atom.parent_origins for c in by_origin.get(p, []) if c in store.claims))
        target = None
        for j in js:
            t = resolve(j.target)
            if j.relation == "equivalent" and t is not None and store.claims[t].type == atom.type:
                target = t
                break
        if target is not None:
            _merge(store.claims[target], atom, parents, batch)
            cid = target
            out.counts["merged"] += 1
        else:
            cid = _create(store, atom, parents, batch).id
            out.counts["created"] += 1
        out.canonical[i] = cid
        by_origin.setdefault(atom.origin, []).append(cid)
        for j in js:
            t = resolve(j.target)
            if t is None or t == cid:
                continue
            traj = list(atom.trajectories)
            if j.relation == "specialise":
                added = store.add_edge("entails", cid, t, batch, traj)
            elif j.relation == "generalise":
                added = store.add_edge("entails", t, cid, batch, traj)
            elif j.relation == "contradict":
                added = store.add_edge("contradicts", cid, t, batch, traj)
            elif j.relation == "overlap":
                added = store.add_edge("overlaps", cid, t, batch, traj)
            elif j.relation == "equivalent":  # equivalent across types, or a second equivalent: recorded only
                added = store.add_edge("equivalent", cid, t, batch, traj)
            else:
                continue
            out.counts[f"edge_{j.relation}" if added else "edge_skipped"] += 1
        for tid in atom.trajectories:
            out.grounded.setdefault(tid, set()).add(cid)
    return out


def accumulate(store: ClaimStore, grounded: dict[str, set[str]], batch: int) -> dict[str, BatchEvidence]:
    """Add this batch's support and opposition; returns the per-claim record of what was added."""
    added: dict[str, BatchEvidence] = {}

    def rec(cid: str) -> BatchEvidence:
        return added.setdefault(cid, BatchEvidence(batch=batch))

    for tid in sorted(grounded):
        direct = sorted(c for c in grounded[tid] if c in store.claims)
        reach = set(direct)
        for c in direct:
            reach |= store.generalisations(c)
        for cid in sorted(reach):
            claim = store.claims[cid]
            if tid not in claim.supporters:
                claim.supporters.append(tid)
                rec(cid).support.append(tid)
        opposed = sorted({v for c in direct for v in store.contradicting(c)})
        for cid in opposed:
            claim = store.claims[cid]
            if tid not in claim.opposers:
                claim.opposers.append(tid)
                rec(cid).oppose.append(tid)
    for cid, ev in added.items():
        store.claims[cid].history.append(ev)
        store.claims[cid].last_evidence_batch = batch
    return added


def reassess(store: ClaimStore, batch: int, k: int, m: int) -> tuple[list[str], list[str]]:
    """Batch-wise admission and forgetting; returns (admitted ids, forgotten ids)."""
    forget: list[str] = []
    for c in store.claims.values():
        if c.evidence >= c.threshold(k):
            c.admitted, c.below = True, 0
        else:
            c.admitted = False
            if c.created_batch < batch:
                c.below += 1
            if c.below >= m:
                forget.append(c.id)
    for cid in forget:
        store.remove(cid, batch)
    store.batch = batch
    return [c.id for c in store.claims.values() if c.admitted], forget


def update(store: ClaimStore, atoms: list[Atom], judgements: list[list[Judgement] | None], batch: int,
           k: int, m: int) -> dict:
    """One batch of EKA state updates (evidence updates precede admission and forgetting)."""
    integ = integrate(store, atoms, judgements, batch)
    added = accumulate(store, integ.grounded, batch)
    admitted, forgotten = reassess(store, batch, k, m)
    return {"integration": dict(integ.counts),
            "support_units": sum(len(e.support) for e in added.values()),
            "opposition_units": sum(len(e.oppose) for e in added.values()),
            "n_active": len(store.claims), "n_admitted": len(admitted), "forgotten": forgotten}
