"""The RAPTOR tree: construction layer by layer, its on-disk form, and collapsed-tree retrieval.

Construction (official ``ClusterTreeBuilder``): layer 0 holds the embedded leaf chunks; while fewer
than ``num_layers`` summary layers exist and the current layer has more than
``reduction_dimension + 1`` nodes, cluster it (``clustering.cluster_nodes``), summarise each
cluster and embed the summaries as the next layer. A summary whose model call failed is not made
into a node (its error text is never embedded); the cluster is recorded in ``failed_summaries``
and its members simply have no parent.

On disk (the method's artifact): ``tree.json`` (nodes with id, layer, text, children, element_ids,
title, plus build metadata) and ``embeddings.npy`` (row ``i`` is node ``i``).
``python -m methods.raptor.tree ARTIFACT_DIR`` prints layer counts and the first summaries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sourcebench.harness.data import estimate_tokens
from sourcebench.harness.embeddings import Embedder
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import atomic_write_text

from .chunking import Chunk
from .clustering import ClusterParams, cluster_nodes, worker_pool

TREE_FILE = "tree.json"
EMBEDDINGS_FILE = "embeddings.npy"
TREE_FORMAT = 1



@dataclass(frozen=True)
class SummaryOutcome:
    """What a summariser returns: the summary, or an error (then no node is made from it)."""

    text: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.text.strip())


Summariser = Callable[[str], Awaitable[SummaryOutcome]]  # cluster text -> outcome


@dataclass
class Node:
    """One tree node. ``children`` are node indices; ``element_ids`` the source elements it covers."""

    index: int
    layer: int
    text: str
    children: list[int] = field(default_factory=list)
    element_ids: list[str] = field(default_factory=list)
    title: str = ""

    @property
    def key(self) -> str:
        """The id evidence cites, e.g. ``raptor:L1:N3`` (layer, node index)."""
        return f"raptor:L{self.layer}:N{self.index}"

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


@dataclass
class Tree:
    nodes: list[Node]
    embeddings: np.ndarray  # (len(nodes), dim), L2-normalised float32
    embedder: str = ""
    failed_summaries: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def layer(self, layer: int) -> list[Node]:
        return [n for n in self.nodes if n.layer == layer]

    @property
    def layer_counts(self) -> list[int]:
        """Node count per layer, leaves first."""
        if not self.nodes:
            return []
        counts = [0] * (max(n.layer for n in self.nodes) + 1)
        for n in self.nodes:
            counts[n.layer] += 1
        return counts

    # -- persistence --------------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / EMBEDDINGS_FILE, "wb") as f:
            np.save(f, np.ascontiguousarray(self.embeddings, dtype=np.float32))
        doc = {
            "format": TREE_FORMAT,
            "embedder": self.embedder,
            "layer_counts": self.layer_counts,
            "failed_summaries": self.failed_summaries,
            "metadata": self.metadata,
            "nodes": [asdict(n) for n in self.nodes],
        }
        atomic_write_text(folder / TREE_FILE, json.dumps(doc, ensure_ascii=False, indent=1))

    @classmethod
    def load(cls, folder: Path) -> Tree:
        folder = Path(folder)
        try:
            doc = json.loads((folder / TREE_FILE).read_text(encoding="utf-8"))
            emb = np.load(folder / EMBEDDINGS_FILE, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"RAPTOR tree {folder}: unreadable ({type(e).__name__}: {e})") from None
        if doc.get("format") != TREE_FORMAT:
            raise DataError(f"RAPTOR tree {folder}: format {doc.get('format')!r}, expected {TREE_FORMAT}")
        nodes = [Node(**n) for n in doc["nodes"]]
        if emb.shape[0] != len(nodes) or any(n.index != i for i, n in enumerate(nodes)):
            raise DataError(f"RAPTOR tree {folder}: {len(nodes)} nodes but embeddings of shape {emb.shape}")
        return cls(nodes, emb.astype(np.float32, copy=False), doc.get("embedder", ""),
                   doc.get("failed_summaries", []), doc.get("metadata", {}))


# -- construction -----------------------------------------------------------------------------------


def cluster_text(nodes: Sequence[Node]) -> str:
    """What a cluster's summary is written from: member texts, each on one line, blank-line separated."""
    return "\n\n".join(" ".join(n.text.split()) for n in nodes)


def _union(lists: Sequence[Sequence[str]]) -> list[str]:
    return list(dict.fromkeys(x for ids in lists for x in ids))


async def build_tree(
    chunks: Sequence[Chunk],
    titles: dict[str, str],
    embedder: Embedder,
    summarise: Summariser,
    params: ClusterParams,
    num_layers: int = 5,
    progress: Callable[[str], None] = lambda msg: None,
) -> Tree:
    """Embed ``chunks`` as leaves and add up to ``num_layers`` summary layers (official stop rule)."""
    nodes = [
        Node(i, 0, c.text, [], list(c.element_ids), " | ".join(titles.get(e, e) for e in c.element_ids))
        for i, c in enumerate(chunks)
    ]
    blocks = [embedder.embed([n.text for n in nodes])]
    tree = Tree(nodes, blocks[0], embedder.name)
    current = list(range(len(nodes)))
    with worker_pool(params, len(nodes)) as mapper:  # one pool (or none) for all the layers
        for layer in range(1, num_layers + 1):
            if len(current) <= params.reduction_dimension + 1:
                break
            emb = blocks[-1]  # the current layer's nodes are the last block, in order (no copy of the tree)
            tokens = [nodes[i].tokens for i in current]
            progress(f"RAPTOR layer {layer}: clustering {len(current)} nodes")
            clusters = await asyncio.to_thread(cluster_nodes, emb, tokens, params, mapper)
            members = [[current[j] for j in c] for c in clusters]
            progress(f"RAPTOR layer {layer}: summarising {len(members)} clusters")
            summaries = await asyncio.gather(*(summarise(cluster_text([nodes[i] for i in m])) for m in members))
            new: list[Node] = []
            for m, outcome in zip(members, summaries):
                if not outcome.ok:
                    tree.failed_summaries.append({"layer": layer, "children": m, "error": outcome.error or "empty summary"})
                    continue
                new.append(Node(len(nodes) + len(new), layer, outcome.text.strip(), m,
                                _union([nodes[i].element_ids for i in m]), f"summary (layer {layer})"))
            if not new:
                break
            nodes.extend(new)
            blocks.append(embedder.embed([n.text for n in new]))
            current = [n.index for n in new]
    tree.embeddings = np.concatenate(blocks).astype(np.float32, copy=False)
    return tree


# -- retrieval --------------------------------------------------------------------------------------


def rank_nodes(tree: Tree, query: np.ndarray, skip: frozenset[int] | set[int] = frozenset()) -> list[tuple[Node, float]]:
    """Every node of every layer by cosine to ``query``, best first (ties: lower index), minus ``skip``."""
    if not tree.nodes:
        return []
    scores = tree.embeddings @ np.asarray(query, dtype=np.float32)
    order = np.lexsort((np.arange(len(scores)), -scores))
    return [(tree.nodes[i], float(scores[i])) for i in order.tolist() if i not in skip]


def take_within(ranked: list[tuple[Node, float]], max_tokens: int, top_k: int) -> list[tuple[Node, float]]:
    """The collapsed-tree cut: nodes in rank order until the next one would exceed ``max_tokens``
    (the official loop stops there) or ``top_k`` are taken."""
    picked: list[tuple[Node, float]] = []
    total = 0
    for node, score in ranked:
        if total + node.tokens > max_tokens or len(picked) >= top_k:
            break
        picked.append((node, score))
        total += node.tokens
    return picked


def collapsed_retrieve(tree: Tree, query: np.ndarray, max_tokens: int = 3500, top_k: int = 10,
                       skip: frozenset[int] | set[int] = frozenset()) -> list[tuple[Node, float]]:
    """Collapsed tree: all nodes of all layers by cosine (``rank_nodes``), cut by ``take_within``."""
    return take_within(rank_nodes(tree, query, skip), max_tokens, top_k)


def covering(tree: Tree, element_ids: set[str]) -> set[int]:
    """Indices of the nodes whose text draws on any of ``element_ids``: leaves holding such an
    element and every summary above such a leaf (a node's ``element_ids`` are its subtree's)."""
    return {n.index for n in tree.nodes if not element_ids.isdisjoint(n.element_ids)}


# -- inspection -------------------------------------------------------------------------------------


def format_tree(artifact_dir: Path | str, n_summaries: int = 3, width: int = 300) -> str:
    """A readable overview of a built tree: layer counts, failed summaries, the first summaries per layer."""
    tree = Tree.load(Path(artifact_dir))
    lines = [
        f"RAPTOR tree at {artifact_dir}",
        f"embedder: {tree.embedder}; nodes: {len(tree.nodes)}; failed summaries: {len(tree.failed_summaries)}",
    ]
    for layer, count in enumerate(tree.layer_counts):
        nodes = tree.layer(layer)
        avg = sum(n.tokens for n in nodes) / max(1, count)
        lines.append(f"layer {layer}: {count} nodes, {avg:.0f} tokens on average")
        if layer == 0:
            continue
        for n in nodes[:n_summaries]:
            text = " ".join(n.text.split())
            text = text if len(text) <= width else text[:width] + " ..."
            lines.append(f"  {n.key} ({len(n.children)} children, {len(n.element_ids)} elements): {text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m methods.raptor.tree", description=format_tree.__doc__)
    ap.add_argument("artifact_dir", type=Path)
    ap.add_argument("--summaries", type=int, default=3, help="summaries shown per layer")
    args = ap.parse_args(argv)
    print(format_tree(args.artifact_dir, args.summaries))


if __name__ == "__main__":
    main()
