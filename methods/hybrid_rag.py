"""Hybrid RAG: the reference baseline every table is relative to.

BM25 top 30 + dense top 30 over source elements, reciprocal rank fusion (constant 60), top 8 to the
solver (at most 3 per file for code), no query rewriting. The artifact is the shared index.

Two task-time options serve the paper's appendix studies (both off by default):

- ``match_context_file`` (Table 2, matched context budgets): a JSON file mapping each test task,
  keyed ``"<source>\\t<seed>\\t<task_id>"``, to the prompt tokens another method (SourceLearn) used
  on it. The method then reads further down its own ranking, whole elements in rank order, until
  one more element would exceed that size (never fewer than ``top_k``). The ranking beyond the
  native fused top 30 + 30 continues with the fused ranking over every element, so the first
  elements are exactly the native ones; the per-file cap still applies to code.
- ``exclude_gold`` (Figure 5b, "gold document removed"): every element of the task's gold documents
  (``task.metadata["gold_doc_ids"]`` matched to ``Element.metadata["doc_id"]``) and its labelled gold
  elements (``task.metadata["gold_element_ids"]``) are removed from retrieval; a task without gold
  labels is a scored failure, not a silent rerun.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.data import Answer, Evidence, Source, Task, estimate_tokens
from harness.method import Context, LearnContext, Method, MethodConfig
from harness.retrieval import HybridIndex

from .evidence import CODE_PER_FILE_CAP, TOP_K, ensure_index, load_index

GOLD_KEY = "gold_element_ids"
GOLD_DOCS_KEY = "gold_doc_ids"


class HybridRAGConfig(MethodConfig):
    top_k: int = TOP_K
    code_per_file_cap: int = CODE_PER_FILE_CAP
    match_context_file: str | None = None  # per-task prompt tokens to read up to (Table 2)
    exclude_gold: bool = False  # remove the task's gold elements from retrieval (Figure 5b)


def gold_element_ids(task: Task) -> set[str]:
    """The elements a benchmark labels as the gold evidence of a task (empty when it has none)."""
    return {str(x) for x in task.metadata.get(GOLD_KEY) or []}


def gold_document_elements(task: Task, source: Source) -> set[str]:
    """The labelled gold elements plus every element of the task's gold documents."""
    docs = {str(x) for x in task.metadata.get(GOLD_DOCS_KEY) or []}
    in_docs = {e.id for e in source.elements if docs and str(e.metadata.get("doc_id", "")) in docs}
    return gold_element_ids(task) | in_docs


def context_key(source_id: str, seed: int, task_id: str) -> str:
    return f"{source_id}\t{seed}\t{task_id}"


def read_further(index: HybridIndex, source: Source, task: Task, ctx: Context, target_tokens: int, top_k: int,
                 cap: int | None, restrict_to: set[str] | None = None) -> list[Evidence]:
    """The longest prefix of the extended ranking whose prompt stays within ``target_tokens``."""
    native = index.rank(task.question, per_file_cap=cap, restrict_to=restrict_to)
    seen = {e.element_id for e in native}
    per_file: dict[str, int] = {}
    for e in native:
        el = source.element(e.element_id)
        g = (el.path if el else "") or e.element_id
        per_file[g] = per_file.get(g, 0) + 1
    ranking = list(native)
    for e in index.rank(task.question, candidates=max(1, len(index)), restrict_to=restrict_to):
        if e.element_id in seen:
            continue
        el = source.element(e.element_id)
        g = (el.path if el else "") or e.element_id
        if cap is not None and per_file.get(g, 0) >= cap:
            continue
        per_file[g] = per_file.get(g, 0) + 1
        ranking.append(e)

    def tokens(n: int) -> int:
        return estimate_tokens("".join(m["content"] for m in ctx.benchmark.build_prompt(task, ranking[:n])))

    lo, hi = min(top_k, len(ranking)), len(ranking)  # prompt size grows with n: binary search the last fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tokens(mid) <= target_tokens:
            lo = mid
        else:
            hi = mid - 1
    return ranking[:lo]


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
        path = self.config.match_context_file
        return json.loads(Path(path).read_text(encoding="utf-8"))["targets"] if path else None

    async def answer(self, task: Task, state: Any, ctx: Context) -> Answer:
        index = await load_index(ctx)
        cap = self.config.code_per_file_cap if ctx.source.kind == "code" else None
        restrict = None
        if self.config.exclude_gold:
            gold = gold_document_elements(task, ctx.source)
            if not gold:
                return Answer(text="", failed=True, failure_reason="exclude_gold: the task has no gold element labels")
            restrict = {e.id for e in ctx.source.elements} - gold
        if state is None:
            evidence = index.search(task.question, k=self.config.top_k, per_file_cap=cap, restrict_to=restrict)
            return await ctx.solve(task, evidence)
        target = state.get(context_key(task.source_id, ctx.seed, task.id))
        if target is None:
            return Answer(text="", failed=True, failure_reason="match_context: no reference context size for this task")
        evidence = read_further(index, ctx.source, task, ctx, int(target), self.config.top_k, cap, restrict)
        answer = await ctx.solve(task, evidence)
        answer.metadata["matched_target_tokens"] = int(target)
        return answer
