"""Policy aggregation (paper Eq. 13): lessons -> representation policy Pi1.

One call merges the lessons into general preferences, each citing the lesson numbers it
consolidates. Code then keeps what the paper requires and a prompt cannot guarantee: a preference
needs support from at least ``min_policy_support`` DIFFERENT tasks, repeats no identifier of the
tasks that gave lessons (``lessons.identifiers`` of their questions, needed claims and evidence), and
at most ``max_policy_items`` survive, the most broadly supported first. Pi1 is these task-derived items;
the generic Pi0 is shown with them wherever the policy is used (``rewrite.policy_note``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from sourcebench.harness.data import normalise_ws
from sourcebench.harness.schema_limits import bounded_list

from ..model import Statement
from ..rewrite import fit, material_chars
from .lessons import Lesson, repeated_identifiers

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

POLICY_MAX_TOKENS = 1_200


class Preference(BaseModel):
    text: Statement
    lessons: bounded_list(int, 16) = Field(default_factory=list, description="numbers of the lessons it consolidates")
    keeps_item: int = Field(default=0, description="number of the existing item it restates or refines; 0 if none")


class PolicyDraft(BaseModel):
    preferences: bounded_list(Preference, 8) = Field(default_factory=list)  # the policy keeps at most 8


POLICY_SYSTEM = (
    "You keep the REPRESENTATION POLICY of a source model: a short numbered list of preferences saying which "
    "kinds of information, at what level of detail, and which distinctions, relations and conditions deserve "
    "explicit representation when this knowledge source is modelled for later use. You get the current "
    "task-derived items (if any) and new lessons, one per task, each marked solved or failed. Turn the "
    "lessons into general preferences: merge lessons that say the same thing, keep every preference usable "
    "by a writer (what to keep, separate or connect, at what level of detail, under which condition), and cite "
    "for each the numbers of the lessons it consolidates. A preference may restate or refine an existing "
    "item (give its number in keeps_item). No identifiers from the source and no single feature of it: when "
    "several lessons concern one feature, state the preference for the CLASS of content it belongs to. At "
    "most {n} preferences, the most broadly supported first. Do not invent preferences that no lesson supports."
)


@dataclass
class PolicyStats:
    proposed: int = 0
    weak_support: int = 0
    identifier: int = 0
    kept: int = 0
    failed: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def select_preferences(draft: list[Preference], lessons: list[Lesson], min_support: int, max_items: int,
                       stats: PolicyStats) -> list[str]:
    """Code-side filter: distinct supporting tasks >= min_support, no identifiers, best supported first."""
    banned = frozenset().union(*(lesson.banned for lesson in lessons))
    scored: list[tuple[int, int, str]] = []
    seen: set[str] = set()
    for order, p in enumerate(draft):
        stats.proposed += 1
        text = normalise_ws(p.text)
        tasks = {lessons[n - 1].task_id for n in p.lessons if 1 <= n <= len(lessons)}
        if not text or len(tasks) < min_support:
            stats.weak_support += 1
            continue
        if repeated_identifiers(text, banned):
            stats.identifier += 1
            continue
        if text.lower() in seen:
            continue
        seen.add(text.lower())
        scored.append((-len(tasks), order, text))
    kept = [t for _, _, t in sorted(scored)[:max_items]]
    stats.kept = len(kept)
    return kept


async def aggregate(llm: BoundLLM, lessons: list[Lesson], existing: list[str], *, min_support: int,
                    max_items: int, stage: str = "mt_policy") -> tuple[list[str], PolicyStats]:
    stats = PolicyStats()
    if not lessons:
        return list(existing), stats
    budget = material_chars(llm, POLICY_MAX_TOKENS)
    lines = fit((f"{i}. [{l.kind}; {'solved' if l.solved else 'failed'}] {l.text}" for i, l in enumerate(lessons, 1)),
                budget)
    items = "\n".join(f"{i}. {p}" for i, p in enumerate(existing, 1)) or "(none)"
    msgs = [{"role": "system", "content": POLICY_SYSTEM.format(n=max_items)},
            {"role": "user", "content": f"Current items:\n{items}\n\nLessons:\n" + "\n".join(lines)
             + "\n\nReply in JSON."}]
    res = await llm.structured(msgs, PolicyDraft, stage=stage, max_tokens=POLICY_MAX_TOKENS)
    if res.failed or res.value is None:
        stats.failed = True
        return list(existing), stats
    shown = lessons[: len(lines)]
    draft: list[Preference] = res.value.preferences  # type: ignore[union-attr]
    kept = select_preferences(draft, shown, min_support, max_items, stats)
    restated = {p.keeps_item for p in draft if normalise_ws(p.text) in kept}
    carried = [e for i, e in enumerate(existing, 1) if i not in restated and e not in kept]
    return (kept + carried)[:max_items], stats
