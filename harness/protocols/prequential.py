"""Prequential (online) evaluation (seed 002, Discussion: "online evaluation"), for every method.

Each (source, seed) cell's test tasks form a stream in a seeded order. Every task is answered by
the method's current state *before* the method may learn from it; then it joins what the method
learns from (its reference reaches the method only through the run's judge, as guidance tasks
do). The online score is the cumulative mean along the stream; the stateless run answers the
same stream with the method's artifact learned from no tasks at all, and the gain is online minus
stateless (paired on the same tasks).

The stateless reference is defined per method in one place, ``Method.zero_learning_variant``
(``reference_of``): what the method learns from no task is that variant's artifact where it
declares one (SourceLearn: MS, the self-studied model; RIKA and AWM: no notes, i.e. Hybrid RAG's
prompt), else the method's own artifact learned from no task (kb-curator: the link-free store), and
for a method that does not learn from tasks its run artifact. "Gain" therefore means "over this
reference", which differs between methods, and the reference is not free: its learning cost (calls
and tokens per cell) is reported next to the online learning's. It is the calls the protocol made
while learning from no task, plus the shared sub-artifacts it reuses from the run's store
(``Method.shared_stages``, priced at what the run spent building them on that source, all methods
together since the run charges a sub-artifact to the method that built it first), plus, for a
method that does not learn from tasks, its run artifact's learning.

How the state moves along the stream:

* a method with ``async learn_more(state, tasks, ctx) -> state`` learns truly incrementally, one
  block at a time, from the state it has (the returned state replaces it; None keeps the mutated
  one);
* any other method that learns from tasks (``uses_guidance``) is re-learned from scratch, with
  ``learn(source, prefix, ctx)``, on the growing prefix at every block boundary. This is the
  approximation: within a block the state is frozen, so tasks learned late in a block only help
  from the next block on. Blocks default to ``blocks`` = 4 per stream (``block_size`` overrides),
  so a stream costs 4 learning runs, and the call cache makes the repeated part of each re-learn
  free of live calls (it still counts as calls);
* a method that does not learn from tasks is stateless: online = stateless by construction.

Re-learned artifacts are frozen under ``<run>/protocols/artifacts``; shared sub-artifacts (the
Hybrid RAG index, SourceLearn's M0/MS) come from the run's store. Every call is counted under
phase ``protocol`` with stages ``prequential.<stage>``.

This module makes the model calls and returns raw results (per-task scores and costs); the macro
accuracies, the gain's paired test and the mean curve are computed from them in
``reports/protocols/prequential.py``, which reads no model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from sourcebench.harness.data import Task, stable_hash
from sourcebench.harness.io import read_jsonl
from sourcebench.harness.method import Context, LearnContext, Method
from sourcebench.harness.planner import Plan

from .session import RunSession, answer_and_score, gather_limited

NAME = "prequential"


class PrequentialSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    blocks: int = 4  # learning points per stream (when block_size is not set)
    block_size: int | None = None  # tasks per block; overrides blocks
    seed: int = 0  # stream order
    concurrency: int = 8


def stream_order(tasks: list[Task], seed: int, split_seed: int) -> list[Task]:
    """A seeded, process-independent order of the stream."""
    return sorted(tasks, key=lambda t: stable_hash(NAME, seed, split_seed, t.id))


def block_bounds(n: int, settings: PrequentialSettings) -> list[tuple[int, int]]:
    size = settings.block_size or max(1, math.ceil(n / max(1, settings.blocks)))
    return [(s, min(n, s + size)) for s in range(0, n, size)]


def reference_of(method: Method) -> str:
    """The stateless reference of a method, in words (the prequential table states it)."""
    if not method.uses_guidance:
        return f"{method.name}'s run artifact (it learns from no task: online = stateless)"
    variant = getattr(method, "zero_learning_variant", None)
    if variant:
        return f"{method.name} learned from no task = {variant}'s artifact"
    return f"{method.name} learned from no task (no zero-learning variant registered)"


Cost = dict[str, float]


def _zero() -> Cost:
    return {"calls": 0.0, "tokens": 0.0}


def _add(a: Cost, b: Cost) -> Cost:
    return {k: a[k] + b[k] for k in a}


def _row_cost(u: dict[str, Any]) -> Cost:
    return {"calls": float(u.get("calls") or 0), "tokens": float(int(u.get("input_tokens") or 0)
            + int(u.get("output_tokens") or 0) + int(u.get("reasoning_tokens") or 0))}


def ledger_costs(snapshot: list[dict[str, Any]], method: str) -> dict[str, Cost]:
    """stage -> calls and tokens (live + cached) of one method in a ledger snapshot."""
    out: dict[str, Cost] = {}
    for r in snapshot:
        if r.get("method") == method and r.get("status") in ("live", "cached"):
            out[str(r.get("stage") or "")] = _add(out.get(str(r.get("stage") or ""), _zero()), _row_cost(r))
    return out


def _delta(after: dict[str, Cost], before: dict[str, Cost]) -> dict[str, Cost]:
    return {st: {k: c[k] - before.get(st, _zero())[k] for k in c} for st, c in after.items()}


def run_learn_costs(usage: list[dict[str, Any]], source: str) -> list[tuple[str, str, Cost]]:
    """(method, stage, cost) of the run's learning (learn and learn_judge phases) on one source."""
    return [(str(u.get("method")), str(u.get("stage") or ""), _row_cost(u)) for u in usage
            if u.get("source") == source and u.get("phase") in ("learn", "learn_judge")
            and u.get("status") in ("live", "cached")]


def reference_cost(method: Method, protocol_delta: dict[str, Cost], run_rows: list[tuple[str, str, Cost]]) -> Cost:
    """The learning the stateless reference of one cell contains (see the module docstring)."""
    shared = tuple(method.shared_stages or ())
    own = f"{NAME}."
    total = _zero()
    for stage, c in protocol_delta.items():
        if not (shared and stage.removeprefix(own).startswith(shared)):
            total = _add(total, c)
    for p in shared:
        pooled = _zero()
        for _, stage, c in run_rows:
            if stage.startswith(p):
                pooled = _add(pooled, c)
        if not pooled["calls"]:  # the run never built it: the protocol's own build of it, if any
            for stage, c in protocol_delta.items():
                if stage.removeprefix(own).startswith(p):
                    pooled = _add(pooled, c)
        total = _add(total, pooled)
    if not method.uses_guidance:  # its run artifact is the reference: the run's learning of it
        for m, stage, c in run_rows:
            if m == method.name and not (shared and stage.startswith(shared)):
                total = _add(total, c)
    return total


def cumulative(scores: list[float]) -> list[float]:
    return (np.cumsum(scores) / np.arange(1, len(scores) + 1)).tolist() if scores else []


class Stream:
    """One cell's stream: builds the state for each block and answers the block with it."""

    def __init__(self, session: RunSession, method: Method, plan: Plan, settings: PrequentialSettings):
        self.session, self.method, self.plan, self.settings = session, method, plan, settings

    async def learned_state(self, prefix: list[Task]) -> Any:
        """The method's artifact learned from ``prefix`` (the run's own artifact for a stateless method)."""
        s, m, p = self.session, self.method, self.plan

        async def build(folder: Path) -> dict[str, Any]:
            ctx = s.context(LearnContext, m, p, NAME, workdir=folder)
            return await m.learn(p.source, prefix, ctx) or {}

        if m.uses_guidance:
            inputs = {**s.artifact_inputs(m, p, guidance=prefix), "protocol": NAME}
            folder = await s.protocol_store.get_or_build(f"{NAME}/{m.name}", inputs, build)
        else:
            folder = await s.runner.store.get_or_build(f"method/{m.name}", s.artifact_inputs(m, p), build)
        return s.load_state(m, folder, p)

    async def answer(self, tasks: list[Task], state: Any) -> list[float]:
        ctx = self.session.context(Context, self.method, self.plan, NAME)
        scored = await gather_limited([answer_and_score(self.method, t, state, ctx) for t in tasks],
                                      self.settings.concurrency)
        return [score for _, score in scored]

    async def learn_more(self, state: Any, block: list[Task], index: int) -> Any:
        s, p = self.session, self.plan
        work = s.run_dir / "protocols" / "work" / NAME / self.method.name / p.source.id.replace("/", "_") \
            / f"seed{p.seed}" / f"block{index}"
        work.mkdir(parents=True, exist_ok=True)
        ctx = s.context(LearnContext, self.method, p, NAME, workdir=work)
        new = await self.method.learn_more(state, block, ctx)  # type: ignore[attr-defined]
        return state if new is None else new

    def _run_usage(self) -> list[dict[str, Any]]:
        path = self.session.run_dir / "usage.jsonl"
        return read_jsonl(path, tolerate_torn_tail=True) if path.exists() else []

    def _costs(self) -> dict[str, Cost]:
        return ledger_costs(self.session.ledger.snapshot(), self.method.name)

    async def run(self) -> dict[str, Any]:
        stream = stream_order(self.plan.tests, self.settings.seed, self.plan.seed)
        bounds = block_bounds(len(stream), self.settings)
        incremental = callable(getattr(self.method, "learn_more", None))
        mode = "incremental" if incremental else "re-learn on prefix" if self.method.uses_guidance else "stateless"
        before = self._costs()
        state0 = await self.learned_state([])
        ref_cost = reference_cost(self.method, _delta(self._costs(), before),
                                  run_learn_costs(self._run_usage(), self.plan.source.id))
        stateless = await self.answer(stream, state0)
        learning = _zero()
        online = list(stateless[: bounds[0][1]]) if bounds else []  # block 0 is answered by the empty state
        state = state0
        for j, (start, end) in enumerate(bounds[1:], start=1):
            if mode == "stateless":
                online += stateless[start:end]
                continue
            before = self._costs()
            if incremental:
                state = await self.learn_more(state, stream[bounds[j - 1][0]:start], j)
            else:
                state = await self.learned_state(stream[:start])
            for c in _delta(self._costs(), before).values():
                learning = _add(learning, c)
            online += await self.answer(stream[start:end], state)
        block_of = {i: j for j, (a, b) in enumerate(bounds) for i in range(a, b)}
        return {
            "source": self.plan.source.id, "seed": self.plan.seed, "mode": mode, "n": len(stream),
            "reference_cost": ref_cost, "online_learning_cost": learning,
            "block_size": bounds[0][1] - bounds[0][0] if bounds else 0,
            "tasks": [{"position": i + 1, "task_id": t.id, "block": block_of[i], "learned_from": bounds[block_of[i]][0],
                       "online": online[i], "stateless": stateless[i]} for i, t in enumerate(stream)],
            "online_curve": cumulative(online), "stateless_curve": cumulative(stateless),
        }


def _mean_cost(costs: list[Cost]) -> Cost | None:
    """Calls and tokens per (source, seed) cell, averaged over the cells."""
    return {k: float(np.mean([c[k] for c in costs])) for k in ("calls", "tokens")} if costs else None


async def run(session: RunSession, settings: PrequentialSettings, progress: Any = print) -> dict[str, Any]:
    """Every method's streams on every (source, seed) cell of the run: raw per-task online and stateless scores
    and the learning costs (``reports.protocols.prequential.summarize`` adds the accuracies and the test)."""
    out: dict[str, Any] = {"protocol": NAME, "settings": settings.model_dump(), "benchmark": session.bench.name,
                           "methods": []}
    for method in session.methods:
        cells = []
        for plan in session.plans():
            progress(f"prequential: {method.name} on {plan.source.id} seed {plan.seed}")
            try:
                cells.append(await Stream(session, method, plan, settings).run())
            finally:
                session.flush(plan)
        out["methods"].append({"method": method.name, "mode": cells[0]["mode"] if cells else None,
                               "reference": reference_of(method),
                               "reference_cost": _mean_cost([c["reference_cost"] for c in cells]),
                               "online_learning_cost": _mean_cost([c["online_learning_cost"] for c in cells]),
                               "cells": cells})
    return out
