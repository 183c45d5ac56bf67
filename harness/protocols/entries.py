"""Artifacts made of entries, read through the Method interface: list them, remove one.

The harmful-entry protocol needs two things from a method's loaded state: its entries (claims,
units, workflows, links), each with the text that appears in a prompt when the entry is shown,
and the same state with one entry removed and everything else unchanged. A method provides them
by overriding ``Method.entries(state)`` and ``Method.without(state, entry_id)``
(``harness.method``); built-in and third-party methods take the same path.

``entries`` may return ``Entry`` objects, ``(id, text)`` pairs, dicts with ``id`` and ``text``, or
objects with those attributes. An entry whose text is empty is treated as shown to every task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sourcebench.harness.method import Entry, Method

__all__ = ["Entry", "EntryAccess", "as_entry", "entry_access"]


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


def entry_access(method: Method) -> EntryAccess | None:
    """The entry access of a method, or None when its artifact is not made of entries."""
    if not method.has_entries():
        return None

    def entries(state: Any) -> list[Entry]:
        return [as_entry(x) for x in method.entries(state)]

    return EntryAccess(str(method.entry_kind or "entry"), entries, method.without)
