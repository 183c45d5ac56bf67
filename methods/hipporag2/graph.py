"""The HippoRAG 2 graph: entity and passage nodes, built from OpenIE triples and embeddings.

Nodes are numbered entities first (``0 .. E-1``, sorted normalised strings), then passages
(``E .. E+P-1``, in source order). Entities are the subjects and objects of the extracted triples,
as in the official package (NER output only conditions the triple extraction).

Edge weights follow the official package's bookkeeping, which keys weights by *ordered* node pairs
and then loads them into an undirected graph, where the two directions of a pair add up:

- every triple adds 1 to (subject, object) and to (object, subject), so an entity-entity edge weighs
  twice the number of triple occurrences (per passage) that link the two entities;
- a passage links each entity of its triples with weight 1 (one direction);
- synonym links go from each entity with more than two alphanumeric characters to its nearest
  entities with embedding cosine >= 0.8 (at most 100 each), weight = the cosine; a link found from
  both ends counts twice, and a synonym link replaces the co-occurrence count of the same ordered
  pair (the official package overwrites it);
- self-loops are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sourcebench.harness.data import Element
from sourcebench.harness.embeddings import Embedder

from .openie import PassageExtraction, Triple

SYNONYM_THRESHOLD = 0.8
SYNONYM_MAX_NEIGHBOURS = 100
SYNONYM_MIN_ALNUM = 3  # entities need more than two alphanumeric characters to seek synonyms
_SIM_BUDGET = 20_000_000  # similarity-matrix cells held at once in the synonym search


@dataclass
class GraphData:
    """Everything the query side needs; saved as the artifact and reloaded without model calls."""

    passage_ids: list[str]
    passage_fingerprints: list[str]
    entities: list[str]
    facts: list[Triple]
    edges: np.ndarray  # (m, 2) int64 undirected node pairs, first < second, sorted
    weights: np.ndarray  # (m,) float64
    passage_emb: np.ndarray  # (P, d) float32, L2-normalised
    entity_emb: np.ndarray  # (E, d)
    fact_emb: np.ndarray  # (F, d)
    embedder: str
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def n_entities(self) -> int:
        return len(self.entities)

    @property
    def n_nodes(self) -> int:
        return len(self.entities) + len(self.passage_ids)

    def entity_passage_counts(self) -> np.ndarray:
        """How many passages mention each entity (passage edges are the pairs whose second node is a passage)."""
        e = self.n_entities
        ends = self.edges[self.edges[:, 1] >= e, 0] if len(self.edges) else np.zeros(0, dtype=np.int64)
        return np.bincount(ends, minlength=e).astype(np.int64)


def fact_text(fact: Triple) -> str:
    """The text a fact is embedded as."""
    return " ".join(fact)


def passage_embed_text(element: Element) -> str:
    """A passage is embedded as ``title + "\\n" + text``, its full text (the prompts see a capped excerpt).

    The official package embeds each document string as given, and its experiment script
    (``main.py``) gives ``f"{title}\\n{text}"`` per corpus passage: the title is part of the content."""
    return f"{element.title}\n{element.text}"


def synonym_eligible(entities: Sequence[str], min_alnum: int = SYNONYM_MIN_ALNUM) -> np.ndarray:
    return np.array([sum(ch.isalnum() for ch in e) >= min_alnum for e in entities], dtype=bool)


def synonym_links(emb: np.ndarray, eligible: np.ndarray, threshold: float = SYNONYM_THRESHOLD,
                  max_neighbours: int = SYNONYM_MAX_NEIGHBOURS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ordered links (src, dst, cosine): for each eligible src, the entities at cosine >= ``threshold``,
    the ``max_neighbours`` most similar if more qualify (ties: lower index first). Blocked matrix
    products, so memory stays bounded for large entity sets."""
    n = emb.shape[0]
    rows_all = np.flatnonzero(eligible)
    src, dst, score = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float64)]
    if n < 2 or not len(rows_all) or max_neighbours <= 0:
        return src[0], dst[0], score[0]
    block = max(1, _SIM_BUDGET // n)
    for start in range(0, len(rows_all), block):
        rows = rows_all[start:start + block]
        sims = emb[rows] @ emb.T
        sims[np.arange(len(rows)), rows] = -np.inf
        hit = sims >= threshold
        for i in np.flatnonzero(hit.sum(axis=1) > max_neighbours):
            keep = np.argsort(-sims[i], kind="stable")[:max_neighbours]
            hit[i] = False
            hit[i, keep] = True
        r, c = np.nonzero(hit)
        src.append(rows[r].astype(np.int64))
        dst.append(c.astype(np.int64))
        score.append(sims[r, c].astype(np.float64))
    return np.concatenate(src), np.concatenate(dst), np.concatenate(score)


def combine_edges(n_nodes: int, fact_pairs: np.ndarray, syn_src: np.ndarray, syn_dst: np.ndarray,
                  syn_score: np.ndarray, passage_pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge ordered weighted links into undirected edges (module docstring has the accounting)."""
    n = np.int64(n_nodes)
    fs, fd = fact_pairs[:, 0], fact_pairs[:, 1]
    keep = fs != fd
    f_keys = np.concatenate([fs[keep] * n + fd[keep], fd[keep] * n + fs[keep]])
    f_keys, f_counts = np.unique(f_keys, return_counts=True)
    s_keys = syn_src * n + syn_dst
    replaced = np.isin(f_keys, s_keys)
    src = np.concatenate([f_keys[~replaced] // n, syn_src, passage_pairs[:, 0]])
    dst = np.concatenate([f_keys[~replaced] % n, syn_dst, passage_pairs[:, 1]])
    w = np.concatenate([f_counts[~replaced].astype(np.float64), syn_score, np.ones(len(passage_pairs))])
    nonloop = src != dst
    src, dst, w = src[nonloop], dst[nonloop], w[nonloop]
    u_keys, inverse = np.unique(np.minimum(src, dst) * n + np.maximum(src, dst), return_inverse=True)
    weights = np.bincount(inverse, weights=w, minlength=len(u_keys)).astype(np.float64)
    edges = np.stack([u_keys // n, u_keys % n], axis=1).astype(np.int64) if len(u_keys) else np.zeros((0, 2), np.int64)
    return edges, weights


def _undirected_count(src: np.ndarray, dst: np.ndarray) -> int:
    return len(np.unique(np.stack([np.minimum(src, dst), np.maximum(src, dst)], axis=1), axis=0)) if len(src) else 0


def build_graph(extractions: list[PassageExtraction], elements: list[Element], embedder: Embedder,
                threshold: float = SYNONYM_THRESHOLD, max_neighbours: int = SYNONYM_MAX_NEIGHBOURS) -> GraphData:
    """Nodes, edges and the three embedding matrices (one ``embed`` call per node kind)."""
    assert [x.element_id for x in extractions] == [e.id for e in elements], "extractions must follow element order"
    entities = sorted({x for ex in extractions for s, _, o in ex.triples for x in (s, o)})
    facts = sorted({t for ex in extractions for t in ex.triples})
    index = {e: i for i, e in enumerate(entities)}
    n_ent = len(entities)

    fact_pairs = np.array([(index[s], index[o]) for ex in extractions for s, _, o in ex.triples],
                          dtype=np.int64).reshape(-1, 2)
    passage_pairs = np.array(
        [(n_ent + p, index[x]) for p, ex in enumerate(extractions)
         for x in sorted({y for s, _, o in ex.triples for y in (s, o)})], dtype=np.int64).reshape(-1, 2)

    passage_emb = embedder.embed([passage_embed_text(e) for e in elements])
    entity_emb = embedder.embed(entities)
    fact_emb = embedder.embed([fact_text(f) for f in facts])

    syn_src, syn_dst, syn_score = synonym_links(entity_emb, synonym_eligible(entities), threshold, max_neighbours)
    edges, weights = combine_edges(n_ent + len(elements), fact_pairs, syn_src, syn_dst, syn_score, passage_pairs)
    fp = fact_pairs[fact_pairs[:, 0] != fact_pairs[:, 1]]
    stats = {
        "n_passages": len(elements),
        "n_entities": n_ent,
        "n_facts": len(facts),
        "n_triples": int(sum(len(ex.triples) for ex in extractions)),
        "n_edges": len(edges),
        "n_fact_edges": _undirected_count(fp[:, 0], fp[:, 1]),
        "n_synonym_edges": _undirected_count(syn_src, syn_dst),
        "n_passage_edges": len(passage_pairs),
        "ner_failures": int(sum(ex.ner_failed for ex in extractions)),  # passages with a failed NER chunk
        "triple_failures": int(sum(ex.triples_failed for ex in extractions)),  # ... with a failed triple chunk
        "openie_chunks": int(sum(ex.chunks for ex in extractions)),
        "ner_chunk_failures": int(sum(ex.ner_failed_chunks for ex in extractions)),
        "triple_chunk_failures": int(sum(ex.triple_failed_chunks for ex in extractions)),
    }
    return GraphData(
        passage_ids=[e.id for e in elements], passage_fingerprints=[e.fingerprint for e in elements],
        entities=entities, facts=facts, edges=edges, weights=weights, passage_emb=passage_emb,
        entity_emb=entity_emb, fact_emb=fact_emb, embedder=embedder.name, stats=stats,
    )


def to_igraph(data: GraphData):
    """The undirected weighted igraph Graph PPR runs on."""
    import igraph as ig

    g = ig.Graph(n=data.n_nodes, edges=data.edges.tolist(), directed=False)
    g.es["weight"] = data.weights.tolist()
    return g
