"""The test phase of one cell as an inspect-ai Task.

The solver asks the method for an answer from its frozen artifact; the scorer applies the
benchmark's judge and appends the result row (and the call counts of that task) to the run folder
immediately, which is what makes runs resumable at task granularity.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

from inspect_ai import Task as InspectTask
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Score as InspectScore
from inspect_ai.scorer import Target, mean, scorer
from inspect_ai.solver import Generate, TaskState, solver

from .data import Answer, Task
from .errors import ModelUnavailableError
from .io import append_jsonl
from .method import Context

if TYPE_CHECKING:
    from .runner import Cell, Runner


def cell_task(runner: "Runner", cell: "Cell", todo: list[Task]) -> InspectTask:
    by_id = {t.id: t for t in todo}
    ctx = runner.context(Context, cell.method, cell.source, cell.split, cell.ledger, "answer")
    state_holder: dict[str, object] = {}

    def loaded() -> object:
        if "state" not in state_holder:
            runner.store.verify(cell.artifact)
            state_holder["state"] = cell.method.load(cell.artifact, ctx)
        return state_holder["state"]

    @solver(name="sourcebench_method")
    def method_solver():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            task = by_id[str(state.sample_id)]
            try:
                answer = await cell.method.answer(task, loaded(), ctx)
            except ModelUnavailableError:
                raise
            except Exception as e:  # a method bug must not stop the other tasks: scored failure
                tb = traceback.format_exc(limit=3)
                answer = Answer(text="", failed=True, failure_reason=f"method error: {type(e).__name__}: {e}",
                                metadata={"traceback": tb[-2000:]})
            state.output = ModelOutput.from_content(model=runner.spec.name, content=answer.text)
            state.metadata["sourcebench_answer"] = answer.model_dump()
            return state

        return solve

    @scorer(metrics=[mean()], name="sourcebench_score")
    def cell_scorer():
        async def score(state: TaskState, target: Target) -> InspectScore:
            task = by_id[str(state.sample_id)]
            answer = Answer.model_validate(state.metadata["sourcebench_answer"])
            s = await ctx.judge(task, answer)  # type: ignore[misc]
            row = runner.result_row(cell, task, answer, s)
            append_jsonl(runner.results_path, [row])
            runner._flush_usage(cell.ledger, cell.source.id, cell.split.seed)
            return InspectScore(value=row["score"], answer=answer.text,
                                explanation=row["failure_reason"] or str(s.details.get("reasoning", "")),
                                metadata={"correct": row["correct"], "failed": row["failed"], "judge": s.judge})

        return score

    samples = [Sample(id=t.id, input=t.question, target=_target(t), metadata={"group": t.group}) for t in todo]
    name = f"{runner.bench.name}-{cell.source.id}-{cell.method.name}-seed{cell.split.seed}"
    return InspectTask(dataset=MemoryDataset(samples, name=name), solver=method_solver(), scorer=cell_scorer(),
                       name=name, version=1,
                       metadata={"method": cell.method.describe(), "source": cell.source.id, "seed": cell.split.seed,
                                 "artifact": cell.artifact.name})


def _target(t: Task) -> str:
    r = t.reference
    if isinstance(r, list):
        return ", ".join(str(x) for x in r)[:2000]
    if isinstance(r, dict):
        return str(r.get("api_call", ""))[:2000]
    return str(r or "")[:2000]
