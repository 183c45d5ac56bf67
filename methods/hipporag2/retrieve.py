"""Query side of HippoRAG 2: fact retrieval, recognition memory, seeded personalised PageRank.

1. Embed the question once; score every fact (min-max normalised cosine) and take the top 5.
2. Recognition memory: one structured call keeps the relevant candidates (at most 5, the official
   ``len_after_rerank = link_top_k``); a kept fact the model rewrote is mapped back to the closest
   candidate string, as the official package does.
3. No fact kept (or no facts at all) -> dense passage retrieval.
4. Otherwise seed PPR: each entity of a kept fact gets the fact's score divided by the number of
   passages mentioning the entity (averaged over its occurrences), only the 5 best entities are kept;
   every passage gets 0.05 x its min-max normalised dense score. PPR with damping 0.5 over the
   undirected weighted graph; passages ranked by their PageRank.

Ties anywhere are broken by index (facts and entities in sorted order, passages in source order).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

from sourcebench.harness.embeddings import Embedder
from sourcebench.harness.schema_limits import bounded_list

from .graph import GraphData, to_igraph
from .openie import Triple, TripleItem, normalise
from .prompts import filter_messages

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

FILTER_MAX_TOKENS = 512  # the official filter call's output budget


class FactFilter(BaseModel):
    facts: bounded_list(TripleItem, 8)  # a selection from fact_top_k (5) candidates


@dataclass(frozen=True)
class QuerySettings:
    fact_top_k: int = 5  # facts retrieved before recognition memory (official linking_top_k)
    max_kept_facts: int = 5  # facts recognition memory may keep (official len_after_rerank = link_top_k)
    link_top_k: int = 5  # entity seeds kept for PPR
    passage_node_weight: float = 0.05
    damping: float = 0.5


@dataclass
class Ranking:
    """Passage indices best first (all passages), their scores, and what led there."""

    passages: list[int]
    scores: list[float]
    mode: str  # "ppr" or "dense" (fallback)
    candidate_facts: list[Triple] = field(default_factory=list)
    kept_facts: list[Triple] = field(default_factory=list)
    seeds: dict[str, float] = field(default_factory=dict)  # entity -> reset weight

    def without(self, drop: set[int]) -> Ranking:
        """The same ranking with the passages in ``drop`` removed (order and scores of the rest kept)."""
        kept = [(p, s) for p, s in zip(self.passages, self.scores) if p not in drop]
        return replace(self, passages=[p for p, _ in kept], scores=[s for _, s in kept])


def min_max(x: np.ndarray) -> np.ndarray:
    """Scale to [0, 1]; a constant vector becomes all ones (the official code would divide by zero)."""
    x = np.asarray(x, dtype=np.float64)
    if not x.size:
        return x
    lo, hi = float(x.min()), float(x.max())
    return np.ones_like(x) if hi - lo <= 0 else (x - lo) / (hi - lo)


def best_first(scores: np.ndarray, k: int | None = None) -> np.ndarray:
    """Indices by descending score, ties by index."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return order if k is None else order[:k]


def match_fact(fact: Triple, candidates: list[Triple]) -> int:
    """Position of ``fact`` among the candidates: exact match, else the closest string (never fails)."""
    if fact in candidates:
        return candidates.index(fact)
    keys = [" | ".join(c) for c in candidates]
    best = difflib.get_close_matches(" | ".join(fact), keys, n=1, cutoff=0.0)
    return keys.index(best[0]) if best else 0


async def recognise(llm: BoundLLM, question: str, candidates: list[Triple], max_keep: int) -> list[int]:
    """Recognition memory: positions of the candidates the model keeps (order kept, no repeats)."""
    if not candidates:
        return []
    res = await llm.structured(filter_messages(question, candidates, max_keep), FactFilter,
                               stage="recognition_filter", max_tokens=FILTER_MAX_TOKENS)
    if res.failed or res.value is None:
        return []
    kept: list[int] = []
    for item in res.value.facts:
        fact = (normalise(item.subject), normalise(item.relation), normalise(item.object))
        if not any(fact):
            continue
        pos = match_fact(fact, candidates)
        if pos not in kept:
            kept.append(pos)
    return kept[:max_keep]


class HippoRetriever:
    """The loaded graph plus the arrays a query needs; read-only, safe to share across tasks."""

    def __init__(self, data: GraphData, embedder: Embedder, settings: QuerySettings = QuerySettings()):
        self.data = data
        self.embedder = embedder
        self.settings = settings
        self.graph = to_igraph(data)
        self.entity_index = {e: i for i, e in enumerate(data.entities)}
        self.passage_counts = data.entity_passage_counts()

    # -- scores ------------------------------------------------------------------------------------
    def embed_query(self, question: str) -> np.ndarray:
        return self.embedder.embed([question])[0].astype(np.float32, copy=False)

    def dense_scores(self, q: np.ndarray) -> np.ndarray:
        return (self.data.passage_emb @ q).astype(np.float64)

    def fact_scores(self, q: np.ndarray) -> np.ndarray:
        return min_max(self.data.fact_emb @ q) if len(self.data.facts) else np.zeros(0)

    def seed_weights(self, kept: list[int], fact_scores: np.ndarray, dense: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        """The PPR reset vector over all nodes (entities first, then passages) and the entity seeds."""
        n_ent = self.data.n_entities
        phrase = np.zeros(n_ent)
        occurs = np.zeros(n_ent)
        for f in kept:
            s, _, o = self.data.facts[f]
            for ent in (s, o):
                i = self.entity_index[ent]
                count = self.passage_counts[i]
                phrase[i] += fact_scores[f] / count if count > 0 else fact_scores[f]
                occurs[i] += 1
        phrase = np.divide(phrase, occurs, out=np.zeros_like(phrase), where=occurs > 0)
        top = [i for i in best_first(phrase, self.settings.link_top_k) if phrase[i] > 0]
        seeded = np.zeros(n_ent)
        seeded[top] = phrase[top]
        passages = min_max(dense) * self.settings.passage_node_weight
        seeds = {self.data.entities[i]: float(phrase[i]) for i in top}
        return np.concatenate([seeded, passages]), seeds

    def ppr(self, reset: np.ndarray) -> np.ndarray:
        """Personalised PageRank of every passage node for this reset vector."""
        reset = np.where(np.isfinite(reset) & (reset > 0), reset, 0.0)
        pr = self.graph.personalized_pagerank(damping=self.settings.damping, directed=False, weights="weight",
                                              reset=reset.tolist(), implementation="prpack")
        return np.asarray(pr, dtype=np.float64)[self.data.n_entities:]

    # -- the query ---------------------------------------------------------------------------------
    def dense_ranking(self, dense: np.ndarray, **trace) -> Ranking:
        order = best_first(dense)
        norm = min_max(dense)
        return Ranking([int(i) for i in order], [float(norm[i]) for i in order], "dense", **trace)

    async def rank(self, question: str, llm: BoundLLM) -> Ranking:
        if not self.data.passage_ids:
            return Ranking([], [], "dense")
        q = self.embed_query(question)
        dense = self.dense_scores(q)
        fscores = self.fact_scores(q)
        cand = [int(i) for i in best_first(fscores, self.settings.fact_top_k)]
        cand_facts = [self.data.facts[i] for i in cand]
        kept_pos = await recognise(llm, question, cand_facts, self.settings.max_kept_facts)
        kept = [cand[p] for p in kept_pos]
        trace = {"candidate_facts": cand_facts, "kept_facts": [self.data.facts[i] for i in kept]}
        if not kept:
            return self.dense_ranking(dense, **trace)
        reset, seeds = self.seed_weights(kept, fscores, dense)
        if reset.sum() <= 0:
            return self.dense_ranking(dense, **trace)
        scores = self.ppr(reset)
        order = best_first(scores)
        return Ranking([int(i) for i in order], [float(scores[i]) for i in order], "ppr", seeds=seeds, **trace)
