"""Saving and loading the HippoRAG 2 graph artifact (plain JSON + npy, no pickles).

Files: ``graph.json`` (format, embedder, stats), ``passages.json`` (element ids and fingerprints),
``entities.json``, ``facts.json``, ``edges.npy`` / ``edge_weights.npy``, the three embedding
matrices, and ``openie.jsonl`` (the per-passage extraction, for inspection only).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sourcebench.harness.errors import DataError
from sourcebench.harness.io import atomic_write_json, atomic_write_text

from .graph import GraphData
from .openie import PassageExtraction

GRAPH_FORMAT = 1
_ARRAYS = ("edges", "edge_weights", "passage_embeddings", "entity_embeddings", "fact_embeddings")


def save_graph(data: GraphData, folder: Path, extractions: list[PassageExtraction] | None = None) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "graph.json", {"format": GRAPH_FORMAT, "embedder": data.embedder, "stats": data.stats})
    atomic_write_json(folder / "passages.json", {"ids": data.passage_ids, "fingerprints": data.passage_fingerprints})
    atomic_write_json(folder / "entities.json", data.entities)
    atomic_write_json(folder / "facts.json", [list(f) for f in data.facts])
    arrays = (data.edges, data.weights, data.passage_emb, data.entity_emb, data.fact_emb)
    for name, arr in zip(_ARRAYS, arrays):
        with open(folder / f"{name}.npy", "wb") as f:
            np.save(f, arr, allow_pickle=False)
    if extractions is not None:
        atomic_write_text(folder / "openie.jsonl",
                          "".join(json.dumps(x.to_json(), ensure_ascii=False) + "\n" for x in extractions))


def load_graph(folder: Path) -> GraphData:
    folder = Path(folder)
    try:
        meta = json.loads((folder / "graph.json").read_text(encoding="utf-8"))
        passages = json.loads((folder / "passages.json").read_text(encoding="utf-8"))
        entities = json.loads((folder / "entities.json").read_text(encoding="utf-8"))
        facts = [tuple(f) for f in json.loads((folder / "facts.json").read_text(encoding="utf-8"))]
        arrays = [np.load(folder / f"{name}.npy", allow_pickle=False) for name in _ARRAYS]
    except (OSError, ValueError) as e:
        raise DataError(f"hipporag2 artifact {folder}: unreadable ({type(e).__name__}: {e})") from None
    if meta.get("format") != GRAPH_FORMAT:
        raise DataError(f"hipporag2 artifact {folder}: format {meta.get('format')!r}, expected {GRAPH_FORMAT}")
    edges, weights, passage_emb, entity_emb, fact_emb = arrays
    n_nodes = len(entities) + len(passages["ids"])
    checks = [
        (len(passage_emb) == len(passages["ids"]), "passage embeddings"),
        (len(entity_emb) == len(entities), "entity embeddings"),
        (len(fact_emb) == len(facts), "fact embeddings"),
        (edges.ndim == 2 and edges.shape[1] == 2 and len(weights) == len(edges), "edges"),
        (not len(edges) or int(edges.max()) < n_nodes, "edge node ids"),
    ]
    for ok, what in checks:
        if not ok:
            raise DataError(f"hipporag2 artifact {folder}: {what} do not match the node lists")
    return GraphData(
        passage_ids=list(passages["ids"]), passage_fingerprints=list(passages["fingerprints"]), entities=entities,
        facts=facts, edges=edges.astype(np.int64), weights=weights.astype(np.float64), passage_emb=passage_emb,
        entity_emb=entity_emb, fact_emb=fact_emb, embedder=meta.get("embedder", ""), stats=meta.get("stats", {}),
    )
