"""Representation lessons (paper Eq. 13, C.5): at most one per guidance task, about HOW the source
should be represented, never a fact or an answer.

Two mechanical checks keep a lesson at the level of a class of content (official ``lesson.py``):

* identifiers: a lesson may not repeat an identifier-shaped token of its own task's question, needed
  claims or evidence excerpts (``identifiers``: snake_case, CamelCase, dotted names and paths, file
  names, tokens with digits, quoted or backticked labels of two or more words). Ordinary words
  ("eligibility", "application", "online") are never banned, wherever the source uses them;
* restatement: a lesson restates its task when more than ``LESSON_MAX_OVERLAP`` (0.35) of its
  distinctive content words also occur in the task's question or needed claims; the domain
  vocabulary (content words of at least ``DOMAIN_MIN_QUESTIONS`` (3) of the guidance questions) is
  exempt on both sides, since any class-level lesson about the source has to use it.

A lesson that fails either check gets one retry whose prompt says why; a second failure drops it.
The policy (``policy.py``) bans the identifiers of every task that gave a lesson.

The lesson prompt says, for each needed claim, whether the model holds it (official ``claim_status``):
*represented* (a unit the solver was shown entails it), *in the model* (some unit does, none shown),
or *missing*; one entailment call per task over the candidate units (those about the claims' files
and entities, plus the nearest by content). A task with no needed claim yields no lesson
(``no_needed_evidence``): without them there is nothing the task needed to learn from.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from sourcebench.harness.data import Source, normalise_ws
from sourcebench.harness.schema_limits import bounded_list

from ..learn_retrieval import EXCERPT_CHARS
from ..model import Ids, SourceModel, Statement, Unit
from ..rewrite import element_entity, excerpt_blocks, fit, material_chars, unit_line
from ..words import content_words
from .diagnose import TaskNeeds

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

LESSON_MAX_TOKENS = 300
LESSON_MAX_OVERLAP = 0.35  # share of a lesson's distinctive content words that may repeat its task
DOMAIN_MIN_QUESTIONS = 3  # a content word in this many guidance questions is domain vocabulary
LESSON_TRIES = 2  # the lesson, then one retry that says why it was refused
CANDIDATE_UNITS = 40  # units the claim-status check sees per task (official CANDIDATE_UNITS)
NEAREST_UNITS = 8  # of which the nearest by content, whatever they are about (official)
STATUS_MAX_TOKENS = 600
LESSON_EXCERPT_CHARS = 1_500  # characters of each needed claim's excerpt the lesson prompt shows (official)
LessonKind = Literal["preserve", "granularity", "distinguish", "relate", "condition"]

# -- identifiers ---------------------------------------------------------------------------------
# a backticked or quoted span (a quote opens only after a non-word character, so "Bob's" opens
# nothing), a file name, or a word with dotted parts
_SPAN = re.compile(
    r"`[^`]+`"
    r"|(?<![\w])\"[^\"]+\""
    r"|(?<![\w])'[^']+'"
    r"|[\w./-]+\.(?:py|md|rst|txt|json|ya?ml|toml|cfg|ini)\b"
    r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
)
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2,}[a-z]")
_QUOTES = "`\"'"


def is_identifier(token: str) -> bool:
    """Whether a token of ``_SPAN`` names something specific to the source rather than a kind of thing."""
    bare = token.strip(_QUOTES)
    if len(bare) <= 2:
        return False
    if "." in bare and "/" not in bare and any(len(p) < 2 for p in bare.split(".")):
        return False  # an abbreviation such as "e.g", not a dotted name
    if any(c in bare for c in "_./") or any(c.isdigit() for c in bare) or _CAMEL.search(bare):
        return True
    # a quoted span is a label when it has several words; one quoted word is ordinary vocabulary
    return token[:1] in _QUOTES and len(bare.split()) >= 2


def identifiers(texts: Iterable[str]) -> frozenset[str]:
    """The identifier-shaped tokens of ``texts``, lowercased."""
    return frozenset(t.strip(_QUOTES).lower() for text in texts for t in _SPAN.findall(text or "")
                     if is_identifier(t))


def repeated_identifiers(text: str, banned: frozenset[str] | set[str]) -> list[str]:
    """The banned identifiers ``text`` repeats (whole tokens, case-insensitive)."""
    return sorted({t.strip(_QUOTES).lower() for t in _SPAN.findall(text or "")} & set(banned))


# -- restatement ---------------------------------------------------------------------------------
def domain_vocabulary(questions: Iterable[str], min_questions: int = DOMAIN_MIN_QUESTIONS) -> frozenset[str]:
    """Content words in at least ``min_questions`` of the questions: the domain's own vocabulary."""
    df: Counter[str] = Counter(w for q in questions for w in content_words(q))
    return frozenset(w for w, n in df.items() if n >= min_questions)


def restated_words(text: str, task_texts: Iterable[str], common: frozenset[str] | set[str] = frozenset(),
                   max_overlap: float = LESSON_MAX_OVERLAP) -> list[str]:
    """The task's distinctive words a lesson repeats, when they are more than ``max_overlap`` of the
    lesson's own distinctive words ([] otherwise)."""
    mine = content_words(text) - set(common)
    task = set().union(*(content_words(t) for t in task_texts)) - set(common)
    shared = mine & task
    return sorted(shared) if mine and len(shared) / len(mine) > max_overlap else []


def retry_note(ids: list[str], words: list[str]) -> str:
    """Why the previous lesson was refused, for the one retry."""
    parts = []
    if ids:
        parts.append(f"source-specific identifiers ({', '.join(ids[:6])})")
    if words:
        parts.append(f"the task's own words ({', '.join(words[:8])})")
    return ("\n\nYour previous lesson was refused as too specific to this task: it repeated " + " and ".join(parts)
            + ". State it for the CLASS of source content instead (no identifier, not this task's topic), so that "
            "it applies to the other instances of that class in this source.")


# -- claim status ---------------------------------------------------------------------------------
def candidate_units(sm: SourceModel, source: Source, needs: TaskNeeds, cap: int = CANDIDATE_UNITS,
                    nearest: int = NEAREST_UNITS) -> list[Unit]:
    """Units that could hold a needed claim: those anchored in a cited element's file or about its entity,
    plus the ``nearest`` sharing most content words with the claims; most overlapping first, at most ``cap``."""
    cited = {i for c in needs.claims for i in c.evidence_ids}
    files = {el.path or el.id.split("#", 1)[0] for el in (source.element(i) for i in cited) if el is not None}
    owner = element_entity(sm)
    ents = {owner[i] for i in cited if i in owner}
    pool = [u for u in sm.units if u.role != "map" and not sm.is_stale(u, source)]
    want = content_words(" ".join(c.text for c in needs.claims))
    overlap = {u.id: len(want & content_words(u.statement)) for u in pool}
    picked: dict[str, Unit] = {}
    for u in pool:
        els = [source.element(i) for i in u.element_ids()]
        if set(u.scope.keys) & ents or any(e is not None and (e.path or e.id.split("#", 1)[0]) in files for e in els):
            picked[u.id] = u
    near = sorted((u for u in pool if overlap[u.id] > 0), key=lambda u: -overlap[u.id])[:nearest]
    for u in near:
        picked.setdefault(u.id, u)
    return sorted(picked.values(), key=lambda u: -overlap[u.id])[:cap]


class ClaimHolders(BaseModel):
    claim: int = Field(description="number of the needed claim")
    unit_ids: Ids = Field(default_factory=list, description="ids of the units that state or entail it; empty if none")


class StatusReply(BaseModel):
    claims: bounded_list(ClaimHolders, 12) = Field(default_factory=list)  # one per needed claim (at most 4)


STATUS_SYSTEM = (
    "You check whether a source model already holds what a task needed. You get numbered statements of "
    "source knowledge the task required and [bracketed] units of the model. For each statement, list the ids "
    "of the units that state it or entail it (possibly through a broader rule that covers it); list none when "
    "a value, condition, entity, relation or step of the statement is not stated by any unit."
)


async def claim_status(llm: BoundLLM, sm: SourceModel, source: Source, needs: TaskNeeds, loaded: Iterable[str],
                       stage: str = "mt_status") -> list[str] | None:
    """Per needed claim: "represented" (a unit the solver was shown entails it), "in the model" (a unit does,
    none shown) or "missing". ``loaded``: ids of the units the solver was shown. None if the check failed."""
    if not needs.claims:
        return []
    cands = candidate_units(sm, source, needs)
    if not cands:
        return ["missing"] * len(needs.claims)
    budget = material_chars(llm, STATUS_MAX_TOKENS)
    lines = fit((unit_line(u) for u in cands), budget)
    shown = [u.id for u in cands[: len(lines)]]
    claims = "\n".join(f"{i}. {c.text}" for i, c in enumerate(needs.claims, 1))
    msgs = [{"role": "system", "content": STATUS_SYSTEM},
            {"role": "user", "content": f"Required statements:\n{claims}\n\nModel units:\n" + "\n".join(lines)
             + "\n\nReply in JSON."}]
    res = await llm.structured(msgs, StatusReply, stage=stage, max_tokens=STATUS_MAX_TOKENS,
                               choices={"unit_ids": shown})
    if res.failed or res.value is None:
        return None
    holders: dict[int, set[str]] = {}
    for h in res.value.claims:  # type: ignore[union-attr]
        if 1 <= h.claim <= len(needs.claims):
            holders.setdefault(h.claim, set()).update(i.strip() for i in h.unit_ids if i.strip() in shown)
    shown_to_solver = set(loaded)
    return ["missing" if not holders.get(n) else "represented" if holders[n] & shown_to_solver else "in the model"
            for n in range(1, len(needs.claims) + 1)]


@dataclass(frozen=True)
class Lesson:
    task_id: str
    kind: str
    text: str
    solved: bool
    banned: frozenset[str] = field(default_factory=frozenset)  # its task's identifiers (for the policy)


class LessonOut(BaseModel):
    kind: Literal["preserve", "granularity", "distinguish", "relate", "condition", "none"]
    lesson: Statement = Field(default="", description="one general preference; empty when kind is none")


LESSON_SYSTEM = (
    "A task about a knowledge source was answered using a SOURCE MODEL (a compact, persistent representation "
    "of the source) next to raw retrieval. You see what the task needed from the source (the excerpts it "
    "rests on and the statements they establish), the model units available about it, and whether the task "
    "was solved. State the ONE general preference about representation this experience suggests for a "
    "reusable model of this source: which kind of information, at what level of detail, which distinction, "
    "relation or condition deserves explicit representation, and when. A solved task shows what was used and "
    "should stay represented; a failed one also shows what the representation lacked or compressed away. "
    "Kinds: preserve (a type of information to keep), granularity (level of detail), distinguish (things "
    "not to conflate), relate (relations across entities), condition (conditions, defaults, exceptions). "
    "The lesson must not contain any identifier from the source (no class, function, field, option, file, "
    "product, person or value names) and must not restate this task's topic: name the CLASS of source "
    "content involved (for example 'the options of a configuration file', 'the steps of a lifecycle "
    "procedure', 'exceptions to a shared rule') and what about it to represent, so the preference applies to "
    "every instance of that class in the source. Reply kind 'none' with an empty lesson when the task "
    "needed nothing beyond ordinary reading of the source."
)


def evidence_ids(needs: TaskNeeds) -> list[str]:
    """The task's evidence as the lesson sees it: the elements its needed claims cite (official: the needed
    claims' excerpts only, not every excerpt that supports the reference)."""
    return list(dict.fromkeys(i for c in needs.claims for i in c.evidence_ids))


def task_identifiers(needs: TaskNeeds, source: Source) -> frozenset[str]:
    """The identifiers a lesson of this task may not repeat: those of its question, its needed claims
    and its evidence excerpts (each element's first 1,200 characters, the excerpt the official code reads)."""
    texts = [needs.question] + [c.text for c in needs.claims]
    texts += [el.excerpt(EXCERPT_CHARS) for el in (source.element(i) for i in evidence_ids(needs)) if el is not None]
    return identifiers(texts)


def lesson_messages(needs: TaskNeeds, units: list[Unit], source: Source, solved: bool, budget: int,
                    retry: str = "", statuses: list[str] | None = None) -> list[dict[str, str]]:
    status = list(statuses or [])
    status += ["not checked"] * (len(needs.claims) - len(status))
    claims = "\n".join(f"- {c.text} (evidence: {', '.join(c.evidence_ids)}; in the model: {st})"
                       for c, st in zip(needs.claims, status)) or "(none)"
    ev = fit(excerpt_blocks(source, evidence_ids(needs), max_chars=LESSON_EXCERPT_CHARS), budget // 2)
    ul = fit((unit_line(u) for u in units), budget // 3)
    user = (f"Task: {needs.question.strip()}\n\nWhat it needed from the source:\n{claims}\n\nSupporting excerpts:\n"
            + ("\n\n".join(ev) or "(none)") + "\n\nModel units available about it:\n" + ("\n".join(ul) or "(none)")
            + f"\n\nOutcome: {'solved' if solved else 'failed'}\n\nReply in JSON.")
    return [{"role": "system", "content": LESSON_SYSTEM + retry}, {"role": "user", "content": user}]


async def lesson_for(llm: BoundLLM, needs: TaskNeeds, units: list[Unit], source: Source, solved: bool,
                     common: frozenset[str] | set[str] = frozenset(),
                     stage: str = "mt_lesson", statuses: list[str] | None = None) -> tuple[Lesson | None, str]:
    """The task's lesson, or None, with the outcome: kept, kept after retry, none, failed, too specific,
    no needed evidence.

    ``common``: the domain vocabulary (``domain_vocabulary`` of the guidance questions); ``statuses``: each
    needed claim's status in the model (``claim_status``)."""
    if not needs.claims:
        return None, "no_needed_evidence"
    budget = material_chars(llm, LESSON_MAX_TOKENS)
    banned = task_identifiers(needs, source)
    task_texts = [needs.question] + [c.text for c in needs.claims]
    retry = ""
    for attempt in range(LESSON_TRIES):
        res = await llm.structured(lesson_messages(needs, units, source, solved, budget, retry, statuses), LessonOut,
                                   stage=stage, max_tokens=LESSON_MAX_TOKENS)
        if res.failed or res.value is None:
            return None, "failed"
        out: LessonOut = res.value  # type: ignore[assignment]
        text = normalise_ws(out.lesson)
        if out.kind == "none" or not text:
            return None, "none"
        ids = repeated_identifiers(text, banned)
        words = restated_words(text, task_texts, common)
        if not ids and not words:
            return Lesson(needs.task_id, out.kind, text, solved, banned), "kept" if attempt == 0 else "kept after retry"
        retry = retry_note(ids, words)
    return None, "too specific"
