"""Hierarchical extraction: factual and procedural claims from a batch of trajectories, then
conceptual claims from the factual ones and metacognitive claims from the procedural ones.

Four schema-constrained calls per batch (a second-order call is skipped when no first-order claim
of its parent type survived). Every candidate passes a grounding gate in code before it goes on:
a first-order claim needs at least one quoted span that occurs verbatim in the feedback (excerpts
or verdict) of a trajectory it cites, and it keeps as sources only those trajectories; a
second-order claim needs at least one valid parent and inherits its parents' trajectories
(indirect grounding, traceable to the original feedback).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from sourcebench.harness.data import normalise_ws
from sourcebench.harness.llm import BoundLLM
from sourcebench.harness.schema_limits import bounded_list, bounded_text

from .claims import PARENT_TYPE, KnowledgeType
from .experience import Trajectory, grounded_spans

# -- schemas ---------------------------------------------------------------------------------------


# decoder bounds only (see harness.llm.bounded_text): one claim is a sentence, quoted spans are short
Text = bounded_text(300)
Spans = bounded_list(Text, 4)
PER_BATCH = 12


class FirstOrderItem(BaseModel):
    claim: Text
    scope: Text
    source_trajectories: bounded_list(Text, 16)  # labels of the batch's trajectories
    evidence_spans: Spans
    grounding_type: Literal["direct", "indirect"]
    grounding_explanation: Text


class FirstOrderReply(BaseModel):
    claims: bounded_list(FirstOrderItem, PER_BATCH)


class SecondOrderItem(FirstOrderItem):
    parent_ids: bounded_list(Text, 12)


class SecondOrderReply(BaseModel):
    claims: bounded_list(SecondOrderItem, PER_BATCH)


@dataclass(frozen=True)
class ExtractedClaim:
    """A claim that passed the grounding gate. ``local_id`` (F1, P2, C1, M3) names it within the batch;
    ``trajectories`` are guidance task ids; ``parents`` are local ids of first-order claims."""

    local_id: str
    type: KnowledgeType
    text: str
    scope: str
    trajectories: tuple[str, ...]
    spans: tuple[str, ...]
    grounding: Literal["direct", "indirect"]
    explanation: str
    parents: tuple[str, ...] = ()


# -- prompts ---------------------------------------------------------------------------------------

SYSTEM = ("You distil reusable knowledge from records of questions answered from one source; the knowledge "
          "is shown as guidance when later questions about the same source are answered.")

SHARED = """Each record below (a trajectory, labelled T1, T2, ...) shows a question, the source excerpts retrieved for it (the observations), the answer that was given, and the grader's verdict on that answer.

Rules for every claim:
- Ground it in environment feedback: the retrieved excerpts or the grader's verdict. The question and the given answer are context; on their own they justify nothing. Leave out what the feedback does not bear on.
- In evidence_spans, copy word for word the shortest passages of the excerpts or verdict lines that establish or suggest the claim.
- In source_trajectories, list the labels of the trajectories those passages come from.
- Make the claim self-contained: name entities in full; never mention trajectory labels, "the question" or "the answer" inside it.
- In scope, say under which conditions the claim was observed: the entities, the kind of question, the part of the source.
- grounding_type is direct when the quoted feedback states the claim itself, indirect when the claim is inferred or abstracted from it; grounding_explanation says in one sentence how the quoted feedback leads to the claim, naming any extension beyond what was seen.
- An empty list is the right reply when the records hold nothing reusable of this kind."""

OBJECTIVES: dict[KnowledgeType, str] = {
    "factual": (
        "Task: extract FACTUAL knowledge. Record concrete properties of the source's entities and contents and "
        "observed outcomes: what an excerpt states about an entity, where in the source a kind of information is "
        "found, which answers the grader accepted or rejected. Keep each fact tied to the entities and conditions "
        "actually observed; do not widen it to other entities."),
    "procedural": (
        "Task: extract PROCEDURAL knowledge. Record executable methods for answering a kind of question from this "
        "source: the ordered steps (what to look up, which sections or relations to follow, how to combine what is "
        "found), what they need and what they produce, and any recovery seen after a failure. Tie the steps to the "
        "excerpts they relied on and to the verdict that followed. A sequence of actions alone does not qualify, "
        "and one correct answer does not show that a procedure works in general: state the conditions under which "
        "it was seen to work."),
    "conceptual": (
        "Task: extract CONCEPTUAL knowledge from the records and the FACTUAL claims listed below (ids F1, F2, ...). "
        "Record relations or regularities that organise several facts: shared structure, how kinds of entities or "
        "sections relate, patterns that recur. List in parent_ids the factual claims each one rests on; do not "
        "restate a single fact; the grounding_explanation names the abstraction that links those facts to it."),
    "metacognitive": (
        "Task: extract METACOGNITIVE knowledge from the records and the PROCEDURAL claims listed below (ids P1, "
        "P2, ...). Record guidance about when to choose, avoid, check or revise one of these procedures, backed "
        "by the successes, failures or recoveries observed. List in parent_ids the procedural claims each one rests "
        "on; the grounding_explanation says how what was observed motivates the guidance."),
}
LOCAL_PREFIX: dict[KnowledgeType, str] = {"factual": "F", "procedural": "P", "conceptual": "C", "metacognitive": "M"}


def render_items(items: list[ExtractedClaim], labels: dict[str, str]) -> str:
    lines = []
    for c in items:
        src = ", ".join(labels.get(t, t) for t in c.trajectories)
        spans = "; ".join(f'"{s}"' for s in c.spans)
        lines.append(f"- {c.local_id} (from {src}): {c.text} | scope: {c.scope or 'unstated'} | feedback: {spans} "
                     f"| grounding: {c.explanation}")
    return "\n".join(lines)


def extraction_messages(kind: KnowledgeType, trajectories: list[Trajectory], excerpt_chars: int,
                        parents: list[ExtractedClaim] | None = None) -> list[dict[str, str]]:
    parts = [SHARED, OBJECTIVES[kind], "## Trajectories", *(t.render(excerpt_chars) for t in trajectories)]
    if kind in PARENT_TYPE:
        labels = {t.task_id: t.label for t in trajectories}
        parts += [f"## {PARENT_TYPE[kind].capitalize()} claims", render_items(parents or [], labels)]
    parts.append(f'Reply with a JSON object {{"claims": [...]}} holding the {kind} claims.')
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


# -- the grounding gate ----------------------------------------------------------------------------


def _label(s: str) -> str:
    return normalise_ws(s).upper().removeprefix("TRAJECTORY ").strip()


def gate_first_order(kind: KnowledgeType, items: list[FirstOrderItem], trajectories: list[Trajectory],
                     excerpt_chars: int) -> tuple[list[ExtractedClaim], Counter]:
    by_label = {t.label: t for t in trajectories}
    feedback = {t.label: t.feedback(excerpt_chars) for t in trajectories}
    kept: list[ExtractedClaim] = []
    dropped: Counter = Counter()
    for item in items:
        text = normalise_ws(item.claim)
        cited = list(dict.fromkeys(_label(x) for x in item.source_trajectories if _label(x) in by_label))
        if not text:
            dropped["empty"] += 1
            continue
        if not cited:
            dropped["no_trajectory"] += 1
            continue
        spans: list[str] = []
        sources: list[str] = []
        for lab in cited:
            ok = grounded_spans(item.evidence_spans, feedback[lab])
            if ok:
                sources.append(by_label[lab].task_id)
                spans += [s for s in ok if s not in spans]
        if not sources:
            dropped["ungrounded"] += 1
            continue
        kept.append(ExtractedClaim(f"{LOCAL_PREFIX[kind]}{len(kept) + 1}", kind, text, normalise_ws(item.scope),
                                   tuple(sources), tuple(spans), item.grounding_type,
                                   normalise_ws(item.grounding_explanation)))
    return kept, dropped


def gate_second_order(kind: KnowledgeType, items: list[SecondOrderItem], trajectories: list[Trajectory],
                      parents: list[ExtractedClaim], excerpt_chars: int) -> tuple[list[ExtractedClaim], Counter]:
    by_id = {p.local_id: p for p in parents}
    by_task = {t.task_id: t for t in trajectories}
    kept: list[ExtractedClaim] = []
    dropped: Counter = Counter()
    for item in items:
        text = normalise_ws(item.claim)
        pids = list(dict.fromkeys(normalise_ws(p).upper() for p in item.parent_ids if normalise_ws(p).upper() in by_id))
        if not text:
            dropped["empty"] += 1
            continue
        if not pids:
            dropped["no_parent"] += 1
            continue
        sources = list(dict.fromkeys(t for p in pids for t in by_id[p].trajectories))
        spans: list[str] = []
        for tid in sources:  # its own quotes are kept only where they are real feedback
            spans += [s for s in grounded_spans(item.evidence_spans, by_task[tid].feedback(excerpt_chars))
                      if s not in spans]
        kept.append(ExtractedClaim(f"{LOCAL_PREFIX[kind]}{len(kept) + 1}", kind, text, normalise_ws(item.scope),
                                   tuple(sources), tuple(spans), "indirect",
                                   normalise_ws(item.grounding_explanation), tuple(pids)))
    return kept, dropped


# -- the extractor ---------------------------------------------------------------------------------


@dataclass
class Extraction:
    claims: dict[KnowledgeType, list[ExtractedClaim]]
    proposed: Counter
    dropped: Counter  # "<type>/<reason>"
    failed: list[str]  # "<type>: <error>"

    def all(self) -> list[ExtractedClaim]:
        return [c for k in ("factual", "procedural", "conceptual", "metacognitive") for c in self.claims.get(k, [])]


async def _call(kind: KnowledgeType, trajectories: list[Trajectory], llm: BoundLLM, excerpt_chars: int,
                max_tokens: int, parents: list[ExtractedClaim] | None = None):
    schema = SecondOrderReply if kind in PARENT_TYPE else FirstOrderReply
    return await llm.structured(extraction_messages(kind, trajectories, excerpt_chars, parents), schema,
                                stage=f"extract_{kind}", max_tokens=max_tokens)


async def extract_batch(trajectories: list[Trajectory], llm: BoundLLM, *, excerpt_chars: int,
                        max_tokens: int, kinds: tuple[KnowledgeType, ...]) -> Extraction:
    """Run the two-stage extractor over one batch; ``kinds`` lists the types to extract."""
    out = Extraction(claims={}, proposed=Counter(), dropped=Counter(), failed=[])

    def take(kind: KnowledgeType, res, parents: list[ExtractedClaim] | None = None) -> None:
        if res.value is None:
            out.failed.append(f"{kind}: {res.error}")
            out.claims[kind] = []
            return
        items = res.value.claims
        out.proposed[kind] += len(items)
        if parents is None:
            kept, dropped = gate_first_order(kind, items, trajectories, excerpt_chars)
        else:
            kept, dropped = gate_second_order(kind, items, trajectories, parents, excerpt_chars)
        out.claims[kind] = kept
        for reason, n in dropped.items():
            out.dropped[f"{kind}/{reason}"] += n

    first = [k for k in ("factual", "procedural") if k in kinds]
    for kind, res in zip(first, await asyncio.gather(
            *(_call(k, trajectories, llm, excerpt_chars, max_tokens) for k in first))):
        take(kind, res)
    second = [k for k in ("conceptual", "metacognitive") if k in kinds and out.claims.get(PARENT_TYPE[k])]
    for kind, res in zip(second, await asyncio.gather(
            *(_call(k, trajectories, llm, excerpt_chars, max_tokens, out.claims[PARENT_TYPE[k]]) for k in second))):
        take(kind, res, out.claims[PARENT_TYPE[kind]])
    return out
