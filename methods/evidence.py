"""Task-time evidence shared by several methods: the Hybrid RAG index of a source, and the two
task-time options of the paper's appendix studies that several methods accept.

The index depends only on the source and the embedding model, so it is one shared artifact that
Hybrid RAG, SourceLearn, AWM and RIKA all reuse (built once, loaded read-only). It holds the
retrievable elements (``harness.retrieval.retrievable``: no whole-file element of a file with symbols)
and indexes each by its name and first 1,200 characters, as the official SourceLearn retriever does.

The options (both off by default; each method's docstring says how it applies them):

- ``match_context_file`` (Table 2, matched context budgets): a JSON file ``{"targets": {key: tokens}}``
  with ``key = context_key(source, seed, task_id)`` and the prompt tokens (characters / 4) the
  reference method used on that task. A method reads further down its own ranking, whole items in
  rank order, while the prompt stays within the target, never fewer items than it natively returns
  (``longest_within``). A task without a target is a scored failure (``MISSING_TARGET``).
- ``exclude_gold`` (Figure 5b, gold document removed): the task's gold elements
  (``gold_document_elements``) are kept out of retrieval. A task without gold labels is a scored
  failure (``NO_GOLD``): silently answering it with full retrieval would inflate the "removed" cell.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import model_serializer

from sourcebench.harness.conventions import (  # noqa: F401 - re-exported: methods import them from here
    GOLD_DOCS_KEY,
    GOLD_KEY,
    HYBRID_INDEX_KIND,
    context_key,
    gold_document_elements,
    gold_element_ids,
    index_inputs,
)
from sourcebench.harness.data import Answer, Evidence, Source, Task, estimate_tokens
from sourcebench.harness.method import Context, MethodConfig
from sourcebench.harness.retrieval import HybridIndex

TOP_K = 8
CODE_PER_FILE_CAP = 3

# Where the shared index (and the harness's elements it holds) departs from the official SourceLearn
# retriever and element model. Every method that retrieves through it lists these among its own
# deviations (``shared_index_deviations``), so a number shows what its evidence could reach.
SHARED_INDEX_DEVIATIONS: list[str] = [
    ("documents are split at their own format's headings: Markdown ATX headings, reST titles (over- and "
     "underlined), HTML <h1>-<h6>, and any other text file (.txt among them) into paragraph-aligned parts of at "
     "most 4,000 characters; the official SourceLearn splits .md, .rst and .txt files only at Markdown '#' "
     "headings (a reST or plain-text page is then one section, of which its first 1,200 characters are indexed) "
     "and reads no .html. Kept because the element model is shared by every method and benchmark, and "
     "following the official rule would leave all but the first 1,200 characters of each reST documentation "
     "page unreachable by retrieval; evidence on documentation questions is therefore stronger than the "
     "official index's in the repositories whose docs are reST (5 of SWE-QA's 6)"),
    ("a whole-file element whose file has no symbol elements (a Python file without classes or functions or "
     "that does not parse, a non-Python code or config file) is retrievable by its path and first 1,200 "
     "characters; the official code retrieves section and symbol elements only (and reads only .py, .md, "
     ".rst and .txt files), so such text could not be retrieved there"),
    ("code symbols are top-level classes and functions and the methods of top-level classes (the harness's "
     "Python splitter); the official also makes elements of nested classes' members, which here are read "
     "inside their class"),
    ("an element's name is its harness title: a section's heading path ('Guide > Install') where the "
     "official takes the heading alone, 'path (part N)' for a plain-text part"),
    ("tokens are runs of Unicode letters and digits (official: [a-z0-9], the same on ASCII text); ties are "
     "broken by element id (official: list order); the dense model is the run's embedder (official: "
     "text-embedding-3-large)"),
]


def shared_index_deviations() -> list[str]:
    """``SHARED_INDEX_DEVIATIONS`` as another method lists them (each marked as the shared index's)."""
    return [f"shared Hybrid RAG index: {d}" for d in SHARED_INDEX_DEVIATIONS]

MISSING_TARGET = "match_context: no reference context size for this task"
NO_GOLD = "exclude_gold: the task has no gold element labels"

T = TypeVar("T")


async def ensure_index(ctx: Context) -> Path:
    async def build(folder: Path) -> dict:
        ctx.progress(f"indexing the retrievable elements of {ctx.source.id} ({len(ctx.source.elements)} elements)")
        idx = HybridIndex(ctx.source.elements, ctx.embedder)
        idx.save(folder)
        return {"n_elements": len(ctx.source.elements), "n_indexed": len(idx)}

    return await ctx.store.get_or_build(HYBRID_INDEX_KIND, index_inputs(ctx.source, ctx.embedder.name), build)


_CACHE: dict[str, HybridIndex] = {}


async def load_index(ctx: Context) -> HybridIndex:
    folder = await ensure_index(ctx)
    key = str(folder)
    if key not in _CACHE:
        _CACHE[key] = HybridIndex.load(folder, ctx.source.elements, ctx.embedder)
    return _CACHE[key]


def retrieve(index: HybridIndex, source: Source, query: str, k: int = TOP_K,
             exclude: set[str] | None = None) -> list[Evidence]:
    """Hybrid RAG's top ``k`` (per-file cap for code), without the elements in ``exclude``."""
    cap = CODE_PER_FILE_CAP if source.kind == "code" else None
    restrict = {e.id for e in source.elements} - exclude if exclude else None
    return index.search(query, k=k, per_file_cap=cap, restrict_to=restrict)


# -- task-time options -------------------------------------------------------------------------------


class TaskTimeConfig(MethodConfig):
    """A method config with task-time options that were added after runs existed.

    The runner keys a method's artifact on its dumped config, and reproduce compares dumped configs
    with those recorded in a run folder. An option named in ``TASK_TIME_OPTIONS`` is therefore left
    out of ``model_dump()`` while it is at its default: adding the option keeps the keys and recorded
    settings of earlier runs valid, and a run that sets it still records (and is keyed on) it.
    """

    TASK_TIME_OPTIONS: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_default_options(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        fields = type(self).model_fields
        for name in self.TASK_TIME_OPTIONS:
            if name in data and data[name] == fields[name].default:
                del data[name]
        return data


def load_targets(path: str | None) -> dict[str, int] | None:
    """The per-task prompt-token targets of a ``match_context_file`` (None when the option is off)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))["targets"] if path else None


def task_target(targets: dict[str, int], task: Task, ctx: Context) -> int | None:
    t = targets.get(context_key(task.source_id, ctx.seed, task.id))
    return None if t is None else int(t)


def failure(reason: str) -> Answer:
    """A scored failure decided before any model call (no target, no gold labels)."""
    return Answer(text="", failed=True, failure_reason=reason)


def prompt_tokens(ctx: Context, task: Task, evidence: list[Evidence], notes: str = "") -> int:
    """The size of the shared answer prompt as the runner records it (``Answer.context_tokens``)."""
    return estimate_tokens("".join(m["content"] for m in ctx.benchmark.build_prompt(task, evidence, notes)))


def longest_within(items: Sequence[T], target: int, floor: int, size: Callable[[Sequence[T]], int]) -> list[T]:
    """The longest prefix of ``items`` with ``size(prefix) <= target``, but at least ``floor`` items.

    ``size`` must grow with the prefix (a prompt does as evidence is added), so a binary search finds
    the last prefix that fits; the floor keeps the method's native retrieval when the target is small.
    """
    lo, hi = min(floor, len(items)), len(items)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(items[:mid]) <= target:
            lo = mid
        else:
            hi = mid - 1
    return list(items[:lo])


def read_further(index: HybridIndex, source: Source, task: Task, ctx: Context, target_tokens: int, top_k: int,
                 cap: int | None, restrict_to: set[str] | None = None) -> list[Evidence]:
    """Hybrid RAG's ranking read whole elements at a time up to ``target_tokens`` of prompt.

    The native fused ranking (top 30 + 30 candidates) comes first, so the first ``top_k`` are exactly
    what Hybrid RAG natively returns; the fused ranking over every element continues it. The per-file
    cap still applies to code.
    """
    native = index.rank(task.question, per_file_cap=cap, restrict_to=restrict_to)
    seen = {e.element_id for e in native}
    per_file: dict[str, int] = {}

    def group(e: Evidence) -> str:
        el = source.element(e.element_id)
        return (el.path if el else "") or e.element_id

    for e in native:
        per_file[group(e)] = per_file.get(group(e), 0) + 1
    ranking = list(native)
    for e in index.rank(task.question, candidates=max(1, len(index)), restrict_to=restrict_to):
        if e.element_id in seen:
            continue
        g = group(e)
        if cap is not None and per_file.get(g, 0) >= cap:
            continue
        per_file[g] = per_file.get(g, 0) + 1
        ranking.append(e)
    return longest_within(ranking, target_tokens, top_k, lambda ev: prompt_tokens(ctx, task, list(ev)))
