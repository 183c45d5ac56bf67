"""Task-time evidence shared by several methods: the Hybrid RAG index of a source.

The index depends only on the source and the embedding model, so it is one shared artifact that
Hybrid RAG, SourceLearn and AWM all reuse (built once, loaded read-only).
"""

from __future__ import annotations

from pathlib import Path

from harness.data import Evidence, Source
from harness.method import Context
from harness.retrieval import HybridIndex

TOP_K = 8
CODE_PER_FILE_CAP = 3


def index_inputs(source: Source, embedder_name: str) -> dict:
    return {"source": source.id, "fingerprint": source.fingerprint, "embedder": embedder_name, "index_version": 1}


async def ensure_index(ctx: Context) -> Path:
    async def build(folder: Path) -> dict:
        ctx.progress(f"indexing {len(ctx.source.elements)} elements of {ctx.source.id}")
        idx = HybridIndex(ctx.source.elements, ctx.embedder)
        idx.save(folder)
        return {"n_elements": len(ctx.source.elements)}

    return await ctx.store.get_or_build("hybrid_index", index_inputs(ctx.source, ctx.embedder.name), build)


_CACHE: dict[str, HybridIndex] = {}


async def load_index(ctx: Context) -> HybridIndex:
    folder = await ensure_index(ctx)
    key = str(folder)
    if key not in _CACHE:
        _CACHE[key] = HybridIndex.load(folder, ctx.source.elements, ctx.embedder)
    return _CACHE[key]


def retrieve(index: HybridIndex, source: Source, query: str, k: int = TOP_K) -> list[Evidence]:
    cap = CODE_PER_FILE_CAP if source.kind == "code" else None
    return index.search(query, k=k, per_file_cap=cap)
