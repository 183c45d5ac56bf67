"""Relation judgment: how each new atom relates to the stored claims most similar to it.

Candidates are the active stored claims and the atoms earlier in the same batch, ranked by
embedding cosine (ties by position), at most ``n`` of them; the candidate set of every atom is
fixed before any judgment, so the calls run concurrently and the outcome does not depend on their
timing. An atom whose type, text and scope equal a stored claim's (or an earlier atom's) is
equivalent by construction and needs no call. A failed judgment leaves the atom unresolved; it is
withheld from the state for this batch rather than stored without its relations. Labels the model
invents are ignored and counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel

from sourcebench.harness.data import normalise_ws
from sourcebench.harness.embeddings import Embedder
from sourcebench.harness.llm import BoundLLM
from sourcebench.harness.schema_limits import bounded_list

from .atomise import Atom
from .calls import bounded_map
from .claims import Claim, ClaimStore, Relation, claim_key

Target = tuple[Literal["claim", "atom"], str | int]


@dataclass(frozen=True)
class Judgement:
    """``relation`` is read from the new atom's side: "specialise" means the atom entails the target."""

    target: Target
    relation: Relation


class RelationItem(BaseModel):
    candidate: str
    relation: Relation


class RelationReply(BaseModel):
    relations: bounded_list(RelationItem, 8)  # one per candidate (at most 8)


SYSTEM = "You judge logical relations between knowledge claims."

INSTRUCTIONS = """Task: judge how the NEW claim relates to each STORED claim (C1, C2, ...).
- equivalent: each entails the other, under the same scope.
- specialise: the new claim is narrower and entails the stored claim.
- generalise: the new claim is broader; the stored claim entails it.
- contradict: their scopes overlap and they cannot both hold.
- overlap: they share content, but neither entails nor contradicts the other.
- independent: no logical relation.
Claims about different scopes (other entities, other conditions) are not equivalent. List every stored claim that is not independent; the ones you leave out count as independent."""


def describe(kind: str, text: str, scope: str) -> str:
    return f"({kind}) {text}" + (f" [scope: {scope}]" if scope else "")


def relation_messages(atom: Atom, candidates: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    stored = "\n".join(f"C{i}: {describe(*c)}" for i, c in enumerate(candidates, 1))
    body = "\n\n".join([INSTRUCTIONS, f"NEW claim: {describe(atom.type, atom.text, atom.scope)}",
                        f"STORED claims:\n{stored}",
                        'Reply with a JSON object {"relations": [{"candidate": "C1", "relation": ...}, ...]}.'])
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": body}]


def _claim_fields(c: Claim) -> tuple[str, str, str]:
    return (c.type, c.text, c.scope)


def _atom_fields(a: Atom) -> tuple[str, str, str]:
    return (a.type, a.text, a.scope)


def exact_duplicates(store: ClaimStore, atoms: list[Atom]) -> list[Target | None]:
    """For each atom, the stored claim or earlier atom with identical type, text and scope, if any."""
    seen: dict[str, Target] = {claim_key(*_claim_fields(c)): ("claim", c.id) for c in store.claims.values()}
    out: list[Target | None] = []
    for i, a in enumerate(atoms):
        key = claim_key(*_atom_fields(a))
        out.append(seen.get(key))
        seen.setdefault(key, ("atom", i))
    return out


def candidate_lists(store: ClaimStore, atoms: list[Atom], embedder: Embedder, n: int) -> list[list[Target]]:
    """The ``n`` most similar stored claims / earlier atoms for every atom (cosine, ties by position)."""
    claims = list(store.claims.values())
    if not atoms:
        return []
    texts = [describe(*_claim_fields(c)) for c in claims] + [describe(*_atom_fields(a)) for a in atoms]
    vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
    cv, av = vecs[: len(claims)], vecs[len(claims):]
    pool: list[Target] = [("claim", c.id) for c in claims]
    out: list[list[Target]] = []
    for i in range(len(atoms)):
        sims = np.concatenate([cv @ av[i], av[:i] @ av[i]]) if (len(claims) + i) else np.zeros(0)
        order = sorted(range(len(sims)), key=lambda j: (-round(float(sims[j]), 6), j))[:n]
        out.append([pool[j] if j < len(claims) else ("atom", j - len(claims)) for j in order])
    return out


async def judge_relations(store: ClaimStore, atoms: list[Atom], llm: BoundLLM, embedder: Embedder, *,
                          n_candidates: int, max_tokens: int,
                          concurrency: int | None) -> tuple[list[list[Judgement] | None], Counter]:
    """Judgements per atom, in atom order; None marks an atom whose judgment failed (withheld)."""
    dups = exact_duplicates(store, atoms)
    cands = candidate_lists(store, atoms, embedder, n_candidates)
    counts: Counter = Counter()

    def fields(t: Target) -> tuple[str, str, str]:
        return _claim_fields(store.claims[t[1]]) if t[0] == "claim" else _atom_fields(atoms[int(t[1])])

    async def one(i: int) -> list[Judgement] | None:
        if dups[i] is not None:
            counts["exact_duplicate"] += 1
            return [Judgement(dups[i], "equivalent")]
        if not cands[i]:
            counts["no_candidates"] += 1
            return []
        res = await llm.structured(relation_messages(atoms[i], [fields(t) for t in cands[i]]), RelationReply,
                                   stage="relate", max_tokens=max_tokens)
        if res.value is None:
            counts["withheld"] += 1
            return None
        counts["judged"] += 1
        out: list[Judgement] = []
        for item in res.value.relations:
            label = normalise_ws(item.candidate).upper()
            idx = int(label[1:]) - 1 if label[:1] == "C" and label[1:].isdigit() else -1
            if not 0 <= idx < len(cands[i]):
                counts["unknown_label"] += 1
                continue
            if item.relation != "independent" and all(j.target != cands[i][idx] for j in out):
                out.append(Judgement(cands[i][idx], item.relation))
        rank = {t: r for r, t in enumerate(cands[i])}
        return sorted(out, key=lambda j: rank[j.target])  # the most similar equivalent wins a merge

    return await bounded_map(one, list(range(len(atoms))), concurrency), counts
