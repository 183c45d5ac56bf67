"""Answer a guidance task exactly as a test task would be answered (paper Eq. 7), and judge it.

Evidence is the Hybrid RAG top ``learn_answer_k`` (official ``RAW_TOP_K`` 8: learning never reads the
task-time ``top_k``, so one learned MT serves every k of Figure 5a); the model reaches the shared answer prompt through activation
(``activation.activate``). The verdict comes from the run's judge; the answer text is not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sourcebench.harness.data import Source, Task, estimate_tokens
from sourcebench.harness.retrieval import HybridIndex
from sourcebench.methods.evidence import retrieve

from ..model import SourceModel

if TYPE_CHECKING:
    from sourcebench.harness.method import Context

    from ..config import SourceLearnConfig


@dataclass(frozen=True)
class Outcome:
    task_id: str
    solved: bool
    judged: bool
    value: float = 0.0
    answer_failed: bool = False
    loaded: frozenset[str] = frozenset()  # ids of the units the solver was shown (E^M)


async def model_notes(sm: SourceModel, source: Source, task: Task, ctx: Context, cfg: SourceLearnConfig,
                      evidence_text: str) -> tuple[str, dict[str, Any]]:
    from ..activation import activate

    return await activate(sm, source, task, ctx, cfg, evidence_tokens=estimate_tokens(evidence_text),
                          evidence_text=evidence_text)


async def attempt(sm: SourceModel, source: Source, task: Task, ctx: Context, cfg: SourceLearnConfig,
                  index: HybridIndex) -> Outcome:
    evidence = retrieve(index, source, task.question, k=cfg.learn_answer_k)
    ev_text = ctx.benchmark.render_evidence(evidence) if evidence else ""
    notes, _ = await model_notes(sm, source, task, ctx, cfg, ev_text)
    lines = {ln[2:] for ln in notes.splitlines() if ln.startswith("- ")}  # activation shows "- <unit>" lines
    loaded = frozenset(u.id for u in sm.units if u.render() in lines)
    answer = await ctx.solve(task, evidence, notes, stage="mt_answer")
    if ctx.judge is None:
        return Outcome(task.id, False, False, answer_failed=answer.failed, loaded=loaded)
    score = await ctx.judge(task, answer)
    return Outcome(task.id, bool(score.correct) and not score.failed, not score.failed, float(score.value),
                   answer.failed, loaded)
