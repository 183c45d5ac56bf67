"""Hybrid RAG: the reference baseline every table is relative to.

BM25 top 30 + dense top 30 over source elements, reciprocal rank fusion (constant 60), top 8 to the
solver (at most 3 per file for code), no query rewriting. The artifact is the shared index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.data import Answer, Source, Task
from harness.method import Context, LearnContext, Method, MethodConfig

from .evidence import CODE_PER_FILE_CAP, TOP_K, ensure_index, load_index


class HybridRAGConfig(MethodConfig):
    top_k: int = TOP_K
    code_per_file_cap: int = CODE_PER_FILE_CAP


class HybridRAG(Method):
    name = "hybrid_rag"
    version = "1"
    Config = HybridRAGConfig
    uses_guidance = False
    description = "BM25 + dense retrieval fused by RRF; top 8 source elements per task"

    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        folder = await ensure_index(ctx)
        (ctx.workdir / "index.txt").write_text(folder.name + "\n")
        return {"index": folder.name, "n_elements": len(source.elements)}

    def load(self, artifact_dir: Path, ctx: Context) -> Any:
        return None  # the index is loaded lazily (and shared) in answer()

    async def answer(self, task: Task, state: Any, ctx: Context) -> Answer:
        index = await load_index(ctx)
        cap = self.config.code_per_file_cap if ctx.source.kind == "code" else None
        evidence = index.search(task.question, k=self.config.top_k, per_file_cap=cap)
        return await ctx.solve(task, evidence)
