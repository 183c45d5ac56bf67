"""HippoRAG 2 (Gutiérrez et al., 2025), reimplemented on the shared backend.

Learning (once per source and backend, no guidance tasks): open information extraction on every
passage, read whole (NER, then triples conditioned on the entities; a passage over one call's budget
is read in chunks whose triples are merged), a graph of entity and passage
nodes with co-occurrence, passage and synonym edges, and embeddings of passages, entities and
facts. Answering: fact retrieval, a recognition-memory LLM filter, personalised PageRank seeded by
the kept facts' entities and by dense passage scores, and the top 8 passages to the shared answer
prompt (the paper's Appendix A.2 matches Hybrid RAG's evidence budget). See ``graph`` and
``retrieve`` for the exact weighting.

Passages are the source's text with each line once (``harness.elements.disjoint_pieces``): on code
sources the elements overlap (a file holds its classes and functions, a class its methods), so a file
is cut into its non-overlapping pieces; a method or function is its own passage, the lines a class or
file keeps outside its children are one passage under the class's or file's id.

The official package cannot be installed offline (it imports vllm and pins a non-existent openai),
so this is a reimplementation with igraph, checked against the package's source.

Two task-time options (off by default; see ``methods.evidence``) serve the paper's appendix studies:

- ``match_context_file`` (Table 2): the method reads further down its passage ranking (PPR, or the
  dense fallback), whole passages in rank order, while the answer prompt stays within the
  reference method's tokens on that task; never fewer than ``top_k`` passages. A task without a
  target is a scored failure.
- ``exclude_gold`` (Figure 5b): the task's gold passages are dropped from the passage ranking,
  whichever mode produced it (PPR or dense fallback), before the top passages are taken. The graph,
  its facts and the recognition filter are the learned artifact and stay as learned (as SourceLearn
  keeps its source model): they only steer the ranking, and no gold passage reaches the solver.
  A task without gold labels is a scored failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from sourcebench.harness.data import Answer, Element, Evidence, Source, Task
from sourcebench.harness.elements import disjoint_pieces
from sourcebench.harness.errors import DataError
from sourcebench.harness.method import Context, LearnContext, Method
from sourcebench.harness.retrieval import EXCERPT_CHARS

from ..evidence import (
    MISSING_TARGET,
    NO_GOLD,
    TaskTimeConfig,
    failure,
    gold_document_elements,
    load_targets,
    longest_within,
    prompt_tokens,
    task_target,
)
from .artifact import load_graph, save_graph
from .graph import SYNONYM_MAX_NEIGHBOURS, SYNONYM_THRESHOLD, build_graph
from .openie import CHUNK_TOKENS, extract_all
from .retrieve import HippoRetriever, QuerySettings, Ranking

__all__ = ["HippoRAG2", "HippoRAG2Config"]


class HippoRAG2Config(TaskTimeConfig):
    TASK_TIME_OPTIONS = ("match_context_file", "exclude_gold")
    top_k: int = 8  # passages to the solver (Appendix A.2: Hybrid RAG's budget)
    openie_chunk_tokens: int = Field(CHUNK_TOKENS, ge=1)  # passage text per extraction call (characters / 4)
    synonym_threshold: float = SYNONYM_THRESHOLD
    synonym_max_neighbours: int = SYNONYM_MAX_NEIGHBOURS
    fact_top_k: int = 5
    max_kept_facts: int = 5  # official len_after_rerank = link_top_k
    link_top_k: int = 5
    passage_node_weight: float = 0.05
    damping: float = 0.5
    match_context_file: str | None = None  # per-task prompt tokens to read up to (Table 2)
    exclude_gold: bool = False  # drop the task's gold passages from the ranking (Figure 5b)


@dataclass
class HippoState:
    retriever: HippoRetriever
    elements: list[Element]  # in passage-node order
    targets: dict[str, int] | None = None  # match_context_file: prompt tokens per task


class HippoRAG2(Method):
    """Graph-based associative retrieval over OpenIE triples; the graph is the artifact.

    Deviations from the official package (also in ``deviations``, shown in reports): passages are
    the source's elements (code files cut into non-overlapping pieces), long ones read in chunks; own
    prompts with schema-constrained JSON replies; the run's embedder without query instructions;
    Unicode-aware entity normalisation; deterministic tie-breaking and a divide-by-zero-free min-max
    normalisation.

    Parallel stages and chains (learning): OpenIE runs on every passage at once, bounded only by the
    run's connection budget, and so do the chunks of a long passage; each chunk is a chain of
    named-entity recognition then triple extraction (the triples prompt lists the entities found), so
    the critical path is two calls (three with a structured reply's corrective retry). Graph building and synonym edges use
    embeddings, no model calls.
    """

    name = "hipporag2"
    version = "3"  # 2: passages read whole (chunked), code files as non-overlapping pieces; 3: 5 kept facts
    Config = HippoRAG2Config
    uses_guidance = False
    description = "OpenIE knowledge graph + recognition-memory fact filter + personalised PageRank; top 8 passages"
    deviations: ClassVar[list[str]] = [
        ("passages are the source's elements (no fixed-size chunking), on code sources cut into non-overlapping "
         "pieces so each line is one passage's (a method or function whole; a class's or file's lines outside "
         "its children under the class's or file's id); the solver sees each passage's first 1,200 characters"),
        ("a passage over openie_chunk_tokens (1,000 tokens, characters / 4) is read in consecutive line-aligned "
         "chunks, one NER and one triple call per chunk, entities and triples merged for the passage (official: "
         "one call pair per passage whatever its length, which with its 2,048-token reply cap, and the 40-triple "
         "reply bound here, would leave most of a long passage's facts unextracted)"),
        ("prompts written for this project with one worked example each; replies are schema-constrained JSON "
         "(triples as subject/relation/object objects) instead of free text parsed by regex; no DSPy-tuned "
         "filter demonstrations"),
        ("the run's embedding model without query instructions (the official default NV-Embed-v2 uses them; "
         "the paper's text-embedding-3-large has none); facts are embedded as 'subject relation object'"),
        "entity normalisation keeps Unicode letters and digits and collapses whitespace (official: ASCII only)",
        ("reply schemas bound what a constrained decoder may write (phrases 120 characters, 40 entities or "
         "triples per passage, 8 kept facts) so a small model cannot loop to max_tokens; the official has none"),
        ("deterministic tie-breaking (sorted entities and facts, passages in source order); a constant score "
         "vector min-max normalises to ones instead of dividing by zero"),
    ]

    def _settings(self) -> QuerySettings:
        c = self.config
        return QuerySettings(fact_top_k=c.fact_top_k, max_kept_facts=c.max_kept_facts, link_top_k=c.link_top_k,
                             passage_node_weight=c.passage_node_weight, damping=c.damping)

    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        elements = disjoint_pieces(source.elements)  # each line of the source in one passage
        t0 = time.perf_counter()
        ctx.progress(f"hipporag2: OpenIE on {len(elements)} passages of {source.id}")
        extractions = await extract_all(ctx.llm, elements, self._chunk_chars(), ctx.progress)
        t1 = time.perf_counter()
        data = build_graph(extractions, elements, ctx.embedder, self.config.synonym_threshold,
                           self.config.synonym_max_neighbours)
        save_graph(data, ctx.workdir, extractions)
        t2 = time.perf_counter()
        n = data.stats["openie_chunks"]
        health = {"lost": {"HippoRAG 2 passage chunks with named entities":
                           {"done": n - data.stats["ner_chunk_failures"], "attempted": n},
                           "HippoRAG 2 passage chunks with triples":
                           {"done": n - data.stats["triple_chunk_failures"], "attempted": n}}}
        return {**data.stats, "openie_seconds": round(t1 - t0, 3), "graph_seconds": round(t2 - t1, 3),
                "health": health}

    def _chunk_chars(self) -> int:
        return 4 * self.config.openie_chunk_tokens  # the harness's token estimate: characters / 4

    def load(self, artifact_dir: Path, ctx: Context) -> HippoState:
        data = load_graph(artifact_dir)
        if data.embedder != ctx.embedder.name:
            raise DataError(f"hipporag2 artifact {artifact_dir}: built with embedder {data.embedder!r}, "
                            f"loading with {ctx.embedder.name!r}")
        passages = {p.id: p for p in disjoint_pieces(ctx.source.elements)}
        elements = []
        for pid, fp in zip(data.passage_ids, data.passage_fingerprints):
            e = passages.get(pid)
            if e is None or e.fingerprint != fp:
                raise DataError(f"hipporag2 artifact {artifact_dir}: element {pid!r} changed or vanished; rebuild it")
            elements.append(e)
        return HippoState(HippoRetriever(data, ctx.embedder, self._settings()), elements,
                          load_targets(self.config.match_context_file))

    def evidence(self, ranking: Ranking, state: HippoState, n: int | None = None) -> list[Evidence]:
        """The first ``n`` passages of the ranking (``top_k`` by default) as evidence."""
        out = []
        for i, score in zip(ranking.passages[: self.config.top_k if n is None else n], ranking.scores):
            e = state.elements[i]
            out.append(Evidence(element_id=e.id, title=e.title, text=e.excerpt(EXCERPT_CHARS), score=score))
        return out

    async def answer(self, task: Task, state: HippoState, ctx: Context) -> Answer:
        gold: set[str] = set()
        if self.config.exclude_gold:
            gold = gold_document_elements(task, ctx.source)
            if not gold:
                return failure(NO_GOLD)
        target = None
        if state.targets is not None:
            target = task_target(state.targets, task, ctx)
            if target is None:
                return failure(MISSING_TARGET)
        ranking = await state.retriever.rank(task.question, ctx.llm)
        if gold:
            ranking = ranking.without({i for i, e in enumerate(state.elements) if e.id in gold})
        if target is None:
            evidence = self.evidence(ranking, state)
        else:
            full = self.evidence(ranking, state, len(ranking.passages))
            evidence = longest_within(full, target, self.config.top_k, lambda ev: prompt_tokens(ctx, task, list(ev)))
        answer = await ctx.solve(task, evidence)
        if target is not None:
            answer.metadata["matched_target_tokens"] = target
        answer.metadata["hipporag2"] = {
            "mode": ranking.mode,
            "candidate_facts": [list(f) for f in ranking.candidate_facts],
            "kept_facts": [list(f) for f in ranking.kept_facts],
            "seeds": ranking.seeds,
        }
        return answer
