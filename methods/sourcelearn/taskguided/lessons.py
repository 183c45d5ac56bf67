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
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from sourcebench.harness.data import Source, normalise_ws

from ..learn_retrieval import EXCERPT_CHARS
from ..model import Statement, Unit
from ..rewrite import excerpt_blocks, fit, material_chars, unit_line
from ..words import content_words
from .diagnose import TaskNeeds

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

LESSON_MAX_TOKENS = 300
LESSON_MAX_OVERLAP = 0.35  # share of a lesson's distinctive content words that may repeat its task
DOMAIN_MIN_QUESTIONS = 3  # a content word in this many guidance questions is domain vocabulary
LESSON_TRIES = 2  # the lesson, then one retry that says why it was refused
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
    """The task's evidence: the elements its needed claims cite, then the other supporting ones."""
    return list(dict.fromkeys([i for c in needs.claims for i in c.evidence_ids] + list(needs.support_ids)))


def task_identifiers(needs: TaskNeeds, source: Source) -> frozenset[str]:
    """The identifiers a lesson of this task may not repeat: those of its question, its needed claims
    and its evidence excerpts (each element's first 1,200 characters, the excerpt the official code reads)."""
    texts = [needs.question] + [c.text for c in needs.claims]
    texts += [el.excerpt(EXCERPT_CHARS) for el in (source.element(i) for i in evidence_ids(needs)) if el is not None]
    return identifiers(texts)


def lesson_messages(needs: TaskNeeds, units: list[Unit], source: Source, solved: bool, budget: int,
                    retry: str = "") -> list[dict[str, str]]:
    claims = "\n".join(f"- {c.text} (evidence: {', '.join(c.evidence_ids)})" for c in needs.claims) or "(none)"
    ev = fit(excerpt_blocks(source, evidence_ids(needs), max_chars=EXCERPT_CHARS), budget // 2)
    ul = fit((unit_line(u) for u in units), budget // 3)
    user = (f"Task: {needs.question.strip()}\n\nWhat it needed from the source:\n{claims}\n\nSupporting excerpts:\n"
            + ("\n\n".join(ev) or "(none)") + "\n\nModel units available about it:\n" + ("\n".join(ul) or "(none)")
            + f"\n\nOutcome: {'solved' if solved else 'failed'}\n\nReply in JSON.")
    return [{"role": "system", "content": LESSON_SYSTEM + retry}, {"role": "user", "content": user}]


async def lesson_for(llm: BoundLLM, needs: TaskNeeds, units: list[Unit], source: Source, solved: bool,
                     common: frozenset[str] | set[str] = frozenset(),
                     stage: str = "mt_lesson") -> tuple[Lesson | None, str]:
    """The task's lesson, or None, with the outcome: kept, kept after retry, none, failed, too specific.

    ``common``: the domain vocabulary (``domain_vocabulary`` of the guidance questions)."""
    budget = material_chars(llm, LESSON_MAX_TOKENS)
    banned = task_identifiers(needs, source)
    task_texts = [needs.question] + [c.text for c in needs.claims]
    retry = ""
    for attempt in range(LESSON_TRIES):
        res = await llm.structured(lesson_messages(needs, units, source, solved, budget, retry), LessonOut,
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
