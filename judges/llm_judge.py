"""The QA LLM judge: correct iff the answer makes the reference's key claims without contradicting it.

The judge is its own model role. Its full prompt and reply are kept with every verdict so that a
score can always be traced back to the text that produced it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from sourcebench.harness.data import Answer, Score, Task
from sourcebench.harness.errors import DataError

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

JUDGE_NAME = "llm_judge"


class Verdict(BaseModel):
    reasoning: str = Field(description="one or two sentences comparing the key claims")
    correct: bool


def judge_messages(question: str, references: list[str], answer: str) -> list[dict[str, str]]:
    refs = "\n".join(f"- {r}" for r in references)
    system = (
        "You grade answers against reference answers. A candidate is CORRECT when it states the same "
        "key claims as a reference answer and contradicts none of them; extra detail that does not "
        "contradict is fine, wording does not matter. Otherwise it is INCORRECT. Reply in JSON with "
        '"reasoning" (brief) and "correct" (true or false).'
    )
    user = f"Question:\n{question.strip()}\n\nReference answer(s):\n{refs}\n\nCandidate answer:\n{answer.strip()}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


async def llm_judge(task: Task, answer: Answer, judge: BoundLLM) -> Score:
    refs = task.reference if isinstance(task.reference, list) else [str(task.reference)]
    messages = judge_messages(task.question, [str(r) for r in refs], answer.text)
    res = await judge.structured(messages, Verdict, stage="judge", max_tokens=256)
    details: dict[str, Any] = {"prompt": messages, "reply": res.text}
    if res.failed or res.value is None:
        return Score(value=0.0, correct=False, details=details, judge=JUDGE_NAME, failed=True,
                     failure_reason=f"judge failed: {res.error}")
    v: Verdict = res.value  # type: ignore[assignment]
    details["reasoning"] = v.reasoning
    return Score(value=1.0 if v.correct else 0.0, correct=v.correct, details=details, judge=JUDGE_NAME)


async def judged_score(benchmark: str, scorer_name: str, task: Task, answer: Answer,
                       judge: BoundLLM | None) -> Score:
    """A judged benchmark's score: a failed answer scores 0 with its reason and costs no judge call; a
    run without a judge model is a one-line error naming the benchmark."""
    if answer.failed:
        return Score(value=0.0, correct=False, judge=scorer_name, failed=True, failure_reason=answer.failure_reason)
    if judge is None:
        raise DataError(f"{benchmark} needs a judge model (--judge-model)")
    return await llm_judge(task, answer, judge)
