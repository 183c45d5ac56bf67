"""Artifacts made of entries: list them, and rebuild a loaded state without one of them.

The harmful-entry protocol needs two things from a method's loaded state: its entries (claims,
units, workflows, links), each with the text that appears in a prompt when the entry is shown,
and the same state with one entry removed and everything else unchanged. A method provides them
by defining ``entries(state)`` and ``without(state, entry_id)`` on its class; AWM workflows and
SourceLearn units get small adapters here so those methods need no change.

``entries`` may return ``Entry`` objects, ``(id, text)`` pairs, dicts with ``id`` and ``text``, or
objects with those attributes. An entry whose text is empty is treated as shown to every task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.data import normalise_ws
from harness.method import Method


@dataclass(frozen=True)
class Entry:
    """One removable piece of an artifact; ``text`` is what a prompt contains when it is shown."""

    id: str
    text: str

    def shown_in(self, prompt: str) -> bool:
        """Whether the (whitespace-normalised) entry text occurs in a prompt; empty text: always."""
        text = normalise_ws(self.text)
        return not text or text in normalise_ws(prompt)


@dataclass(frozen=True)
class EntryAccess:
    """How to enumerate and remove the entries of one method's loaded state."""

    kind: str  # what an entry is, for reports: "workflow", "unit", "claim", ...
    entries: Callable[[Any], list[Entry]]
    without: Callable[[Any, str], Any]


def as_entry(item: Any) -> Entry:
    if isinstance(item, Entry):
        return item
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return Entry(str(item[0]), str(item[1] or ""))
    if isinstance(item, dict):
        return Entry(str(item["id"]), str(item.get("text") or ""))
    return Entry(str(item.id), str(getattr(item, "text", "") or ""))


# -- AWM: one entry per induced workflow ------------------------------------------------------------


def _awm_access() -> EntryAccess:
    from methods.awm import AWMState, render_workflows

    def block(w: Any) -> str:
        # the workflow's own block as render_workflows lays it out (after the shared header)
        return render_workflows([w]).split("\n\n", 1)[1]

    def entries(state: AWMState) -> list[Entry]:
        return [Entry(f"workflow-{i}:{w.name}", block(w)) for i, w in enumerate(state.workflows)]

    def without(state: AWMState, entry_id: str) -> AWMState:
        keep = [w for i, w in enumerate(state.workflows) if f"workflow-{i}:{w.name}" != entry_id]
        return AWMState(workflows=keep, notes=render_workflows(keep))

    return EntryAccess("workflow", entries, without)


# -- SourceLearn: one entry per unit of the source model ---------------------------------------------


def _sourcelearn_access() -> EntryAccess:
    from methods.sourcelearn.model import SourceModel

    def entries(state: SourceModel) -> list[Entry]:
        return [Entry(u.id, u.render()) for u in state.units]

    def without(state: SourceModel, entry_id: str) -> SourceModel:
        return state.model_copy(update={"units": [u for u in state.units if u.id != entry_id]})

    return EntryAccess("unit", entries, without)


def _hooks_access(method: Method) -> EntryAccess:
    def entries(state: Any) -> list[Entry]:
        return [as_entry(x) for x in method.entries(state)]  # type: ignore[attr-defined]

    def without(state: Any, entry_id: str) -> Any:
        return method.without(state, entry_id)  # type: ignore[attr-defined]

    return EntryAccess(str(getattr(method, "entry_kind", "entry")), entries, without)


def entry_access(method: Method) -> EntryAccess | None:
    """The entry access of a method, or None when its artifact is not made of entries."""
    if callable(getattr(method, "entries", None)) and callable(getattr(method, "without", None)):
        return _hooks_access(method)
    from methods.awm import AWM

    if isinstance(method, AWM):
        return _awm_access()
    from methods.sourcelearn.method import SourceLearnBase

    if isinstance(method, SourceLearnBase):
        return _sourcelearn_access()
    return None
