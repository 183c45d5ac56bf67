"""The test phase of one cell as an inspect-ai Task.

The solver asks the method for an answer from its frozen artifact; the scorer applies the
benchmark's judge and appends the result row (and the call counts of that task) to the run folder
immediately, which is what makes runs resumable at task granularity.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from inspect_ai import Task as InspectTask
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Score as InspectScore
from inspect_ai.scorer import Target, mean, scorer
from inspect_ai.solver import Generate, TaskState, solver

from .data import Answer, Task
from .errors import ModelUnavailableError
from .io import append_jsonl, redact_secrets
from .method import ACTIVE_ANSWER, ActiveAnswer, Context

if TYPE_CHECKING:
    from .runner import Cell, Runner


def cell_task(runner: "Runner", cell: "Cell", todo: list[Task]) -> InspectTask:
    by_id = {t.id: t for t in todo}
    ctx = runner.context(Context, cell.method, cell.source, cell.split, cell.ledger, "answer")
    state_holder: dict[str, object] = {}

    def loaded() -> object:
        if "state" not in state_holder:  # verified by the runner just before the test phase
            state_holder["state"] = cell.method.load(cell.artifact, ctx)
        return state_holder["state"]

    @solver(name="sourcebench_method")
    def method_solver():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            task = by_id[str(state.sample_id)]
            try:
                token = ACTIVE_ANSWER.set(ActiveAnswer(cell.method, loaded(), ctx))
                try:
                    answer = await cell.method.answer(task, loaded(), ctx)
                finally:
                    ACTIVE_ANSWER.reset(token)
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


def scrub_logs(paths: Iterable[str | Path]) -> int:
    """Rewrite the inspect logs among ``paths`` that contain a credential, with it masked.

    inspect records a failed model call's error, traceback and raw reply in the transcript, so a
    server that echoes the request's ``Authorization`` header (or a base URL with credentials in
    it) would put a key into the log; the harness's own files are masked when written, inspect's
    are checked here after each test phase. A log that cannot be read (cut off by a crash) is left
    as it is. Returns the number of logs rewritten.
    """
    from inspect_ai.log import EvalLog, read_eval_log, write_eval_log

    n = 0
    for path in paths:
        try:
            text = read_eval_log(str(path)).model_dump_json()
        except Exception:  # a truncated log of a killed run: inspect cannot read it either
            continue
        masked = redact_secrets(text, bearer=True)
        if masked != text:
            write_eval_log(EvalLog.model_validate_json(masked), str(path))
            n += 1
    return n


def unfinished_logs(log_dir: Path) -> list[Path]:
    """Logs left in state "started" by a run that was killed (checked again on resume)."""
    from inspect_ai.log import read_eval_log

    out = []
    for p in sorted(Path(log_dir).glob("*.eval")):
        try:
            if read_eval_log(str(p), header_only=True).status == "started":
                out.append(p)
        except Exception:
            out.append(p)
    return out
