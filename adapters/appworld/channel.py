"""The documentation channel: the agent's API-documentation lookups, answered by the method itself.

In the original agent prompt the model reads documentation by calling the built-in ``api_docs``
app. Here that app is gone and every lookup becomes a query put to the method under test: the
method's ``answer`` runs on a lookup task whose question is the query, and whatever evidence and
notes it hands to the shared answer prompt are captured (no model call is made for that prompt)
and shown to the agent instead. Hybrid RAG thus returns its top 8 API specifications for the query,
a closed-book method returns nothing, SourceLearn adds its activated source model: methods differ
only in how the documentation is represented and accessed.

The test phase hands the benchmark the method's lookup (``harness.method.answering``). Outside it (a
method attempting guidance tasks while learning) there is none; lookups are then answered from the
evidence and notes the method passed for the task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sourcebench.harness.data import Evidence, Task
from sourcebench.harness.method import ContextLookup

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


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


class DocumentationChannel:
    """Answers lookup queries for one task from the method's own source context."""

    def __init__(self, task: Task, lookup: ContextLookup | None, evidence: list[Evidence], notes: str,
                 k: int = TOP_K, method: str = "the method"):
        self.task = task
        self.method_lookup = lookup
        self.method = method
        self.evidence = evidence
        self.notes = notes
        self.k = k
        self.lookups: list[dict[str, Any]] = []

    async def lookup(self, query: str) -> ChannelReply:
        if self.method_lookup is not None:
            reply = await self._ask_method(query)
        else:
            reply = self._from_task_context(query)
        self.lookups.append({"query": query, "evidence_ids": [e.element_id for e in reply.evidence],
                             "notes_chars": len(reply.notes)})
        return reply

    async def _ask_method(self, query: str) -> ChannelReply:
        assert self.method_lookup is not None
        probe = Task(id=f"{self.task.id}/docs/{len(self.lookups) + 1}", source_id=self.task.source_id,
                     question=query, group=self.task.group,
                     metadata={"documentation_lookup": True, "task_id": self.task.id})
        got = await self.method_lookup(probe)
        if got is None:
            return ChannelReply(query, note=f"{self.method} returned no documentation context")
        evidence, notes = got
        return ChannelReply(query, evidence, notes)

    def _from_task_context(self, query: str) -> ChannelReply:
        q = _words(query)
        ranked = sorted(enumerate(self.evidence), key=lambda ie: (-len(q & _words(ie[1].title + " " + ie[1].text)), ie[0]))
        return ChannelReply(query, [e for _, e in ranked[: self.k]], self.notes)
