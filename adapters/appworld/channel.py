"""The documentation channel: the agent's API-documentation lookups, answered by the method itself.

In the original agent prompt the model reads documentation by calling the built-in ``api_docs``
app. Here that app is gone and every lookup becomes a query put to the method under test: the
method's ``answer`` runs on a lookup task whose question is the query, and whatever evidence and
notes it hands to the shared answer prompt are captured (no model call is made for that prompt)
and shown to the agent instead. Hybrid RAG thus returns its top 8 API specifications for the query,
a closed-book method returns nothing, SourceLearn adds its activated source model: methods differ
only in how the documentation is represented and accessed.

Outside the test phase (a method attempting guidance tasks while learning) no method state is
active; lookups are then answered from the evidence and notes the method passed for the task.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from sourcebench.harness.data import Answer, Evidence, Task
from sourcebench.harness.method import ActiveAnswer

TOP_K = 8
MAX_REPLY_CHARS = 20_000  # the official scaffold cuts observations at 20,000 characters
_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class ChannelReply:
    """What the method returned for one lookup query."""

    query: str
    evidence: list[Evidence] = field(default_factory=list)
    notes: str = ""
    note: str = ""  # set when the method gave no context at all

    def render(self, max_chars: int = MAX_REPLY_CHARS) -> str:
        parts = []
        if self.notes.strip():
            parts.append("Notes on the API documentation:\n" + self.notes.strip())
        for e in self.evidence:
            parts.append(f"# {e.title}\n{e.text}")
        if not parts:
            return f"No documentation found for {self.query!r}." + (f" ({self.note})" if self.note else "")
        text = "\n\n".join(parts)
        return text if len(text) <= max_chars else text[:max_chars] + "\n[REST NOT SHOWN FOR BREVITY]"


class _Capture:
    """Stands in for the benchmark while the method builds its context for a lookup.

    ``solve`` records the evidence and notes instead of prompting the model; every other attribute
    is the real benchmark's, so a method that inspects its benchmark sees no difference.
    """

    def __init__(self, benchmark: Any):
        self._benchmark = benchmark
        self.calls: list[tuple[list[Evidence], str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._benchmark, name)

    async def solve(self, task: Task, evidence: list[Evidence], notes: str, llm: Any, stage: str = "answer") -> Answer:
        self.calls.append((list(evidence), notes or ""))
        return Answer(text="", evidence_ids=[e.element_id for e in evidence])


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


class DocumentationChannel:
    """Answers lookup queries for one task from the method's own source context."""

    def __init__(self, task: Task, active: ActiveAnswer | None, evidence: list[Evidence], notes: str,
                 k: int = TOP_K):
        self.task = task
        self.active = active
        self.evidence = evidence
        self.notes = notes
        self.k = k
        self.lookups: list[dict[str, Any]] = []

    async def lookup(self, query: str) -> ChannelReply:
        if self.active is not None:
            reply = await self._ask_method(query)
        else:
            reply = self._from_task_context(query)
        self.lookups.append({"query": query, "evidence_ids": [e.element_id for e in reply.evidence],
                             "notes_chars": len(reply.notes)})
        return reply

    async def _ask_method(self, query: str) -> ChannelReply:
        assert self.active is not None
        capture = _Capture(self.active.ctx.benchmark)
        ctx = dataclasses.replace(self.active.ctx, benchmark=capture)
        probe = Task(id=f"{self.task.id}/docs/{len(self.lookups) + 1}", source_id=self.task.source_id,
                     question=query, group=self.task.group,
                     metadata={"documentation_lookup": True, "task_id": self.task.id})
        await self.active.method.answer(probe, self.active.state, ctx)
        if not capture.calls:
            return ChannelReply(query, note=f"{self.active.method.name} returned no documentation context")
        evidence, notes = capture.calls[-1]
        return ChannelReply(query, evidence, notes)

    def _from_task_context(self, query: str) -> ChannelReply:
        q = _words(query)
        ranked = sorted(enumerate(self.evidence), key=lambda ie: (-len(q & _words(ie[1].title + " " + ie[1].text)), ie[0]))
        return ChannelReply(query, [e for _, e in ranked[: self.k]], self.notes)
