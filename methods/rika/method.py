"""RIKA (Reliable Knowledge Acquisition, seed paper 001) as a SourceBench method.

The guidance tasks of a split form the task stream, in a seeded order, processed in batches of
n = 5. Every task is solved with the normal task-time interface (Hybrid RAG top-8 and the shared
answer prompt, plus the knowledge document admitted after the previous batch, as the paper injects
M_j into the tasks of batch j+1) and judged by the run's judge; the resulting trajectories feed
hierarchical extraction (factual and procedural, then conceptual from factual and metacognitive
from procedural), atomisation, immediate/deferred routing, relation judgment against the stored
claims, and evidence-based admission (thresholds 1 and k = 3, forgetting window m = 3). The claim
store after the last batch is the artifact; at test time its admitted claims, rendered
deterministically, reach the shared answer prompt as notes next to the Hybrid RAG top-8.

The method never reads a task's reference: the judge's verdict is the only outcome feedback.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from sourcebench.harness.data import Answer, Source, Task
from sourcebench.harness.errors import ConfigError
from sourcebench.harness.method import Context, LearnContext, Method, MethodConfig

from ..evidence import TOP_K, load_index, retrieve, shared_index_deviations
from .admission import update
from .atomise import atomise_claims
from .calls import bounded_map
from .claims import TYPE_ORDER, Claim, ClaimStore, KnowledgeType
from .experience import Trajectory, stream_order
from .extract import extract_batch
from .relations import judge_relations
from .render import render, render_claim
from .route import RoutingMode, route_atoms

CLAIMS_FILE = "claims.json"
KNOWLEDGE_FILE = "knowledge.md"
TRAJECTORIES_FILE = "trajectories.json"


class RIKAConfig(MethodConfig):
    top_k: int = TOP_K  # Hybrid RAG evidence per task, as in the reference baseline
    batch_size: int = Field(5, ge=1)  # n: trajectories per state update
    deferred_threshold: int = Field(3, ge=1)  # k: net evidence a deferred claim needs
    forget_window: int = Field(3, ge=1)  # m: batches below threshold before a claim is forgotten
    routing: RoutingMode = "model"  # "immediate" / "deferred": the paper's routing ablations
    knowledge_types: list[KnowledgeType] = Field(default_factory=lambda: list(TYPE_ORDER))
    inject_knowledge: bool = True  # guidance tasks of batch j+1 see the document admitted after batch j
    relation_candidates: int = Field(8, ge=1)  # stored claims shown to the relation judge per atom
    excerpt_chars: int = Field(400, ge=50)  # per retrieved excerpt inside a trajectory
    extract_max_tokens: int = 2048
    step_max_tokens: int = 512  # atomise / route / relate calls
    concurrency: int | None = Field(None, ge=1)  # per-task and per-claim calls at once; None: all (--max-connections)

    @field_validator("knowledge_types")
    @classmethod
    def _known_order(cls, v: list[KnowledgeType]) -> list[KnowledgeType]:
        if not v:
            raise ValueError("at least one knowledge type")
        return [k for k in TYPE_ORDER if k in v]


@dataclass(frozen=True)
class RIKAState:
    """The admitted claims (the entries the solver sees) and their rendered document; ``store`` (the
    whole claim store, deferred claims included) lets ``learn_more`` continue the stream."""

    claims: tuple[Claim, ...]
    notes: str
    store: ClaimStore | None = field(default=None, compare=False, repr=False)


class RIKA(Method):
    """Evidence-based knowledge admission over judged guidance-task experience.

    Entry protocol (for the harmful-entry leave-one-out analysis): the artifact is made of
    individually addressable entries, the admitted claims, each with a stable content-derived id.
    ``entries(state)`` lists ``(entry_id, rendered text)`` in rendering order;
    ``without(state, entry_id)`` returns a new state whose notes omit exactly that claim (every
    other claim rendered unchanged). Unknown ids raise ``KeyError``.

    Parallel stages and chains (learning): the batches are a chain (batch j+1's tasks see the document
    admitted after batch j, and its claims are judged against the store batch j left). Within a batch,
    every task is answered and judged at once; extraction runs per trajectory at once (conceptual and
    metacognitive after the factual and procedural claims they build on), then atomisation, routing and
    relation judgement each per claim at once, each stage waiting for the previous one. ``concurrency``
    None (the default) leaves the bound to the run's connection budget.
    """

    name = "rika"
    version = "3"  # 2: extraction reply lists bounded for the decoder; 3: the shared index is name + excerpt
    Config = RIKAConfig
    uses_guidance = True
    zero_learning_variant = "hybrid_rag"  # no admitted claim renders no notes: Hybrid RAG's prompt
    description = ("claims extracted hierarchically from judged guidance experience, admitted by accumulated "
                   "evidence (thresholds 1 / k = 3, forgetting m = 3), rendered next to the Hybrid RAG top-8")
    deviations: ClassVar[list[str]] = [
        ("QA sources: a trajectory is question + Hybrid RAG top-8 excerpts (observations) + answer (action) + "
         "the run judge's verdict (task outcome); the guidance tasks, in a seeded order, are the task stream; "
         "excerpts inside a trajectory are capped at 400 characters (excerpt_chars) to fit small context windows."),
        ("Feedback grounding is also checked in code: a first-order claim keeps only quoted spans found verbatim "
         "in a cited trajectory's excerpts or verdict, and only those trajectories as its sources; a second-order "
         "claim inherits its parents' trajectories."),
        ("Batch evidence counts are computed in code from the judged relations and provenance (one unit per "
         "trajectory and claim), not produced by the model."),
        ("Relation candidates are the stored claims and earlier atoms of the batch most similar by embedding "
         "(at most 8); identical type + text + scope is equivalent without a call."),
        ("The below-threshold counter starts after a claim's creation batch (as in the paper's worked example); "
         "forgetting a claim keeps entailment through it (a -> v -> b becomes a -> b)."),
        ("A failed routing call routes the atom to deferred; a failed atomisation keeps the grounded claim whole; "
         "a failed relation judgment withholds the atom for that batch; all are counted in the artifact stats."),
        "Claims reach the shared answer prompt as notes (no agent loop or system-prompt injection).",
        ("Reply schemas bound what a constrained decoder may write (claims and spans 300 characters, 12 claims "
         "per extraction, 4 spans, 8 atoms) so a small model cannot loop to max_tokens; the paper sets none."),
        *shared_index_deviations(),  # its observations are the shared index's top 8
    ]

    # -- learn ----------------------------------------------------------------------------------
    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        by_id = {t.id: t for t in guidance}
        stream = [by_id[i] for i in stream_order(list(by_id), ctx.seed)]
        _, stats = await self._learn_stream(ClaimStore(), stream, ctx)
        return stats

    async def learn_more(self, state: RIKAState, tasks: list[Task], ctx: LearnContext) -> RIKAState:
        """Continue the stream with ``tasks`` (in the order given) from the state's claim store.

        RIKA is an online method: its batches already update one store in order, so learning on
        more tasks is more batches, numbered after the store's last one (the forgetting window
        counts across them). The state is not changed; the new one is saved to ``ctx.workdir``."""
        store = state.store.model_copy(deep=True) if state.store is not None else ClaimStore()
        store, _ = await self._learn_stream(store, list(tasks), ctx)
        return self._state(store)

    async def _learn_stream(self, store: ClaimStore, stream: list[Task], ctx: LearnContext
                            ) -> tuple[ClaimStore, dict[str, Any]]:
        """Batches of ``stream`` into ``store`` (numbered after its last batch); saves the artifact."""
        if ctx.judge is None:
            raise ConfigError("rika: learning needs the run's judge for the guidance tasks' feedback")
        cfg = self.config
        logs: list[dict[str, Any]] = []
        records: list[dict[str, Any]] = []
        totals: Counter = Counter()
        for b, start in enumerate(range(0, len(stream), cfg.batch_size), store.batch + 1):
            batch = stream[start:start + cfg.batch_size]
            ctx.progress(f"rika: batch {b} ({len(batch)} guidance task(s)), {len(store.admitted())} admitted claim(s)")
            notes = render(store.admitted()) if cfg.inject_knowledge else ""
            trajectories = await self._trajectories(batch, notes, ctx)
            records += [t.record(b) for t in trajectories]
            log = await self.update_batch(store, trajectories, b, ctx)
            logs.append(log)
            for key in ("proposed", "kept", "dropped", "atoms", "routes", "relations"):
                totals.update({f"{key}/{k}": v for k, v in log[key].items()})
            totals.update({f"integration/{k}": v for k, v in log["state"]["integration"].items()})
            totals["extract_failed"] += len(log["extract_failed"])
            totals["forgotten"] += len(log["state"]["forgotten"])
        stats: dict[str, Any] = {
            "n_guidance": len(stream), "n_batches": len(logs),
            "n_guidance_correct": sum(1 for r in records if r["correct"]),
            "n_active": len(store.claims), "n_admitted": len(store.admitted()), "n_forgotten": len(store.forgotten),
            "admitted_by_type": {k: sum(1 for c in store.admitted() if c.type == k) for k in TYPE_ORDER},
            **dict(sorted(totals.items())),
        }
        self._save(ctx.workdir, store, logs, records, stats)
        return store, stats

    async def _trajectories(self, tasks: list[Task], notes: str, ctx: LearnContext) -> list[Trajectory]:
        """Solve and judge one batch exactly as test tasks are solved (plus the current knowledge)."""
        index = await load_index(ctx)

        async def one(item: tuple[int, Task]) -> Trajectory:
            i, task = item
            evidence = retrieve(index, ctx.source, task.question, k=self.config.top_k)
            ans = await ctx.solve(task, evidence, notes=notes, stage="guidance_answer")
            score = await ctx.judge(task, ans)  # type: ignore[misc]
            judged = not score.failed
            return Trajectory(label=f"T{i}", task_id=task.id, question=task.question, evidence=tuple(evidence),
                              answer=ans.text, correct=judged and bool(score.correct) and not ans.failed,
                              value=float(score.value) if judged else 0.0, failed=ans.failed, judged=judged)

        return await bounded_map(one, list(enumerate(tasks, 1)), self.config.concurrency)

    async def update_batch(self, store: ClaimStore, trajectories: list[Trajectory], batch: int,
                           ctx: Context) -> dict[str, Any]:
        """One EKA update of ``store`` from a batch of trajectories; returns the batch log."""
        cfg = self.config
        ext = await extract_batch(trajectories, ctx.llm, excerpt_chars=cfg.excerpt_chars,
                                  max_tokens=cfg.extract_max_tokens, kinds=tuple(cfg.knowledge_types))
        atoms, atom_counts = await atomise_claims(ext.all(), trajectories, ctx.llm, excerpt_chars=cfg.excerpt_chars,
                                                  max_tokens=cfg.step_max_tokens, concurrency=cfg.concurrency)
        atoms, route_counts = await route_atoms(atoms, ctx.llm, mode=cfg.routing, max_tokens=cfg.step_max_tokens,
                                                concurrency=cfg.concurrency)
        judgements, rel_counts = await judge_relations(store, atoms, ctx.llm, ctx.embedder,
                                                       n_candidates=cfg.relation_candidates,
                                                       max_tokens=cfg.step_max_tokens, concurrency=cfg.concurrency)
        state = update(store, atoms, judgements, batch, cfg.deferred_threshold, cfg.forget_window)
        return {"batch": batch, "tasks": [t.task_id for t in trajectories],
                "proposed": dict(ext.proposed), "kept": {k: len(v) for k, v in ext.claims.items()},
                "dropped": dict(ext.dropped), "extract_failed": ext.failed, "atoms": dict(atom_counts),
                "routes": dict(route_counts), "relations": dict(rel_counts), "state": state}

    @staticmethod
    def _save(folder: Path, store: ClaimStore, logs: list[dict[str, Any]], records: list[dict[str, Any]],
              stats: dict[str, Any]) -> None:
        (folder / CLAIMS_FILE).write_text(json.dumps(
            {"stats": stats, "store": store.model_dump(), "batches": logs}, indent=1, ensure_ascii=False))
        (folder / KNOWLEDGE_FILE).write_text((render(store.admitted()) or "(no admitted claims)") + "\n")
        (folder / TRAJECTORIES_FILE).write_text(json.dumps(records, indent=1, ensure_ascii=False))

    # -- test time ------------------------------------------------------------------------------
    def load(self, artifact_dir: Path, ctx: Context) -> RIKAState:
        return self._state(ClaimStore.model_validate(json.loads((artifact_dir / CLAIMS_FILE).read_text())["store"]))

    @staticmethod
    def _state(store: ClaimStore) -> RIKAState:
        admitted = tuple(sorted(store.admitted(), key=lambda c: (c.seq, c.id)))
        return RIKAState(claims=admitted, notes=render(admitted), store=store)

    async def answer(self, task: Task, state: RIKAState, ctx: Context) -> Answer:
        index = await load_index(ctx)
        evidence = retrieve(index, ctx.source, task.question, k=self.config.top_k)
        ans = await ctx.solve(task, evidence, notes=state.notes)
        ans.metadata["n_claims"] = len(state.claims)
        return ans

    # -- entry protocol (leave-one-out) ---------------------------------------------------------
    def entries(self, state: RIKAState) -> list[tuple[str, str]]:
        return [(c.id, render_claim(c)) for c in state.claims]

    def without(self, state: RIKAState, entry_id: str) -> RIKAState:
        if all(c.id != entry_id for c in state.claims):
            raise KeyError(f"rika: no admitted claim {entry_id!r}")
        kept = tuple(c for c in state.claims if c.id != entry_id)
        return replace(state, claims=kept, notes=render(kept))
