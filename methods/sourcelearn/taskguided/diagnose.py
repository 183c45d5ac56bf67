"""Diagnose (paper Eq. 11): what source evidence supports a guidance task's reference outcome, and
what source knowledge the task needs. The ONLY step of source learning that reads the reference.

Retrieval uses question + reference (its first ``reference_query_chars``): the learning-time tiered
search (``learn_retrieval``) of ``task_evidence_k`` elements, first from the files the task's gold labels
(or the file paths its reference names) point to; one structured call picks the supporting excerpts E*
and the claims C (statements about the source, each citing excerpts), at most ``needed_max``. What leaves this module is sanitised
so the reference cannot travel on: ids are checked against the retrieved excerpts, and a claim is
dropped if it carries reference text the source does not state (a reference-only token anywhere, or
a reference string its cited excerpts do not contain). The reference itself is never returned.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from sourcebench.harness.data import Source, Task, normalise_ws
from sourcebench.harness.retrieval import HybridIndex
from sourcebench.harness.schema_limits import bounded_list

from ..learn_retrieval import hint_files, tiered_search
from ..model import Ids, Statement
from ..rewrite import fit, material_chars

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

    from ..config import SourceLearnConfig

DIAGNOSE_MAX_TOKENS = 1_200
_WORD = re.compile(r"[a-z0-9]{3,}")


@dataclass(frozen=True)
class Claim:
    text: str
    evidence_ids: tuple[str, ...]


@dataclass(frozen=True)
class TaskNeeds:
    """The sanitised diagnosis of one guidance task (no reference inside)."""

    task_id: str
    question: str
    support_ids: tuple[str, ...]
    claims: tuple[Claim, ...]
    failed: bool = False
    leaks_dropped: int = 0


class Requirement(BaseModel):
    claim: Statement = Field(description="one statement about the source, as the excerpts state it")
    evidence_ids: Ids = Field(default_factory=list)


class Diagnosis(BaseModel):
    support_ids: Ids = Field(default_factory=list, description="excerpts that directly support the reference")
    claims: bounded_list(Requirement, 12) = Field(default_factory=list)


DIAGNOSE_SYSTEM = (
    "You work out what a question requires from a knowledge source. You get a question, its reference "
    "answer and retrieved source excerpts. Return (1) support_ids: the [bracketed] ids of the excerpts that "
    "directly support the reference answer; (2) claims: the pieces of source knowledge a reader must have to "
    "reach that answer from the source, each one statement about the source as the excerpts establish it, "
    "with the ids of the excerpts that establish it. Claims describe the source, not the task: do not mention "
    "the question, do not write 'the answer is', and do not state anything the excerpts do not establish. "
    "At most {n} claims."
)


def reference_strings(ref: Any) -> list[str]:
    """Every textual leaf of a reference (strings, numbers; lists and dict values flattened)."""
    if ref is None:
        return []
    if isinstance(ref, dict):
        return [s for v in ref.values() for s in reference_strings(v)]
    if isinstance(ref, (list, tuple, set)):
        return [s for v in ref for s in reference_strings(v)]
    s = normalise_ws(str(ref))
    return [s] if s else []


def reference_text(ref: Any) -> str:
    if isinstance(ref, (dict, list)):
        return json.dumps(ref, ensure_ascii=False, default=str)
    return "" if ref is None else str(ref)


def source_words(source: Source) -> set[str]:
    return {w for e in source.elements for w in _WORD.findall((e.title + " " + e.text).lower())}


def leaks_reference(text: str, ref_strings: list[str], cited_text: str, vocabulary: set[str]) -> bool:
    """Does ``text`` carry reference content the source does not state?"""
    low = text.lower()
    words = set(_WORD.findall(low))
    cited = cited_text.lower()
    for s in ref_strings:
        sl = s.lower()
        if any(w in words and w not in vocabulary for w in _WORD.findall(sl)):
            return True  # a token of the reference that the source never uses
        if len(sl) >= 3 and sl in low and sl not in cited:
            return True  # a reference string the cited excerpts do not state
    return False


def diagnose_messages(task: Task, blocks: list[str], max_claims: int) -> list[dict[str, str]]:
    user = (f"Question: {task.question.strip()}\n\nReference answer: {reference_text(task.reference)}\n\n"
            "Source excerpts:\n" + "\n\n".join(blocks) + "\n\nReply in JSON.")
    return [{"role": "system", "content": DIAGNOSE_SYSTEM.format(n=max_claims)}, {"role": "user", "content": user}]


async def diagnose(llm: BoundLLM, index: HybridIndex, source: Source, task: Task, cfg: SourceLearnConfig, *,
                   vocabulary: set[str], stage: str = "mt_diagnose") -> TaskNeeds:
    ref_strings = reference_strings(task.reference)
    max_claims = cfg.needed_max
    query = f"{task.question}\n{reference_text(task.reference)[:cfg.reference_query_chars]}"
    found = tiered_search(index, source, query, cfg.task_evidence_k, cfg, hint=hint_files(task, source))
    budget = material_chars(llm, DIAGNOSE_MAX_TOKENS) - len(reference_text(task.reference))
    blocks = fit([f"[{s.element_id}] {source.element(s.element_id).title}\n{s.text}"  # type: ignore[union-attr]
                  for s in found.items], max(2_000, budget))
    shown = [s.element_id for s in found.items][: len(blocks)]
    res = await llm.structured(diagnose_messages(task, blocks, max_claims), Diagnosis, stage=stage,
                               max_tokens=DIAGNOSE_MAX_TOKENS, choices={"support_ids": shown, "evidence_ids": shown})
    if res.failed or res.value is None:
        return TaskNeeds(task.id, task.question, (), (), failed=True)
    d: Diagnosis = res.value  # type: ignore[assignment]
    support = tuple(dict.fromkeys(i.strip() for i in d.support_ids if i.strip() in shown))
    claims: list[Claim] = []
    dropped = 0
    for r in d.claims:
        text = normalise_ws(r.claim)
        ids = tuple(dict.fromkeys(i.strip() for i in r.evidence_ids if i.strip() in shown)) or support
        if not text or not ids:
            continue
        cited = " ".join(source.element(i).text for i in ids)  # type: ignore[union-attr]
        if leaks_reference(text, ref_strings, cited, vocabulary):
            dropped += 1
            continue
        claims.append(Claim(text, ids))
        if len(claims) >= max_claims:
            break
    return TaskNeeds(task.id, task.question, support, tuple(claims), leaks_dropped=dropped)
