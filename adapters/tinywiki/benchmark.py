"""TinyWiki: six short articles and twelve questions in memory, the benchmark of the conformance checks.

Small enough that a method learns and answers it in seconds with the scripted model, and shipped
in the package so ``sourcebench check-method`` needs no data. Each reference carries a canary
string that appears nowhere in the source, so a method that stores reference answers in its
artifact is caught. Questions carry a PhantomWiki-style ``gold_path`` (the people the question
goes through) and name their keys (``task_keys``: the person and the attribute or relation), so the
key-overlap protocol has keys to group by.
"""

from __future__ import annotations

from sourcebench.harness.benchmark import Benchmark, DataStatus
from sourcebench.harness.data import Answer, Element, Score, Source, Task

NAME = "tinywiki"
CANARY = "canary-"

PEOPLE = {
    "Ada": ("engineer", "chess", "Ben"), "Ben": ("teacher", "rowing", "Ada"), "Cy": ("baker", "chess", "Dee"),
    "Dee": ("pilot", "golf", "Cy"), "Eve": ("nurse", "chess", "Fay"), "Fay": ("judge", "golf", "Eve"),
}


class TinyWiki(Benchmark):
    """Six short articles and questions about them, in memory."""

    name = NAME
    scorer_name = "exact_f1"
    answer_instructions = "Reply with the answer only."

    def data_status(self) -> DataStatus:
        return DataStatus(self.name, True, "memory", "1 source (people)", "")

    def source_ids(self) -> list[str]:
        return ["people"]

    def load_source(self, source_id: str) -> Source:
        els = []
        for n, (job, hobby, friend) in PEOPLE.items():
            els.append(Element(id=f"{n}#attributes", title=f"{n} > Attributes", path=n,
                               text=f"## Attributes\nThe occupation of {n} is {job}.\nThe hobby of {n} is {hobby}.",
                               metadata={"entity": n}))
            els.append(Element(id=f"{n}#friends", title=f"{n} > Friends", path=n,
                               text=f"## Friends\nThe friend of {n} is {friend}.", metadata={"entity": n}))
        return Source(id=source_id, kind="documents", elements=els, origin="memory")

    def load_tasks(self, source_id: str) -> list[Task]:
        tasks = []
        for n, (job, hobby, friend) in PEOPLE.items():
            tasks.append(Task(id=f"job-{n}", source_id=source_id, question=f"What is the occupation of {n}?",
                              reference=[job, f"{CANARY}job-{n.lower()}"], group=f"job-{n}",
                              metadata={"gold_path": [[n]]}))
            tasks.append(Task(id=f"friend-{n}", source_id=source_id, question=f"Who is the friend of {n}?",
                              reference=[friend, f"{CANARY}friend-{n.lower()}"], group=f"friend-{n}",
                              metadata={"gold_path": [[n], [friend]]}))
        return tasks

    def task_keys(self, task: Task) -> list[str]:
        """What the question names: its person and the attribute or relation asked for (never the answer)."""
        kind, person = task.id.split("-", 1)
        return [f"person: {person}", "attribute: occupation" if kind == "job" else "relation: friend"]

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        from sourcebench.judges.exact_f1 import exact_f1

        if answer.failed:
            return Score(value=0.0, correct=False, failed=True, failure_reason=answer.failure_reason, judge="exact_f1")
        m = exact_f1(answer.text, task.reference)
        return Score(value=m["f1"], correct=bool(m["em"]), details=m, judge="exact_f1")
