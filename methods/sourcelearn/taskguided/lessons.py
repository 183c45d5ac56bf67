"""Representation lessons (paper Eq. 13, C.5): at most one per guidance task, about HOW the source
should be represented, never a fact or an answer.

A lesson (or a policy preference) is rejected in code when it names anything specific to the
source. The check is deterministic: the source's identifiers (entity keys and names, element ids,
path components, symbol and API names, card attribute values) are collected once; a text is
rejected when one of its tokens (length >= 3, case-insensitive; identifiers such as
``snake_case``, ``CamelCase`` or ``dotted.names`` also whole and by parts) is one of them, when it
contains a multi-word name or value, or when it contains a code-shaped identifier at all. Common
words that happen to be folder or value names (``docs``, ``api``, ``true``) do not count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from harness.data import Source, normalise_ws

from ..model import SourceModel, Statement, Unit
from ..rewrite import excerpt_blocks, fit, material_chars, unit_line
from .diagnose import TaskNeeds

if TYPE_CHECKING:
    from harness.llm import BoundLLM

LESSON_MAX_TOKENS = 300
LessonKind = Literal["preserve", "granularity", "distinguish", "relate", "condition"]

GENERIC = frozenset((
    "about", "after", "all", "and", "any", "api", "apis", "app", "apps", "argument", "arguments",
    "attribute", "attributes", "base", "before", "build", "class", "classes", "common", "config",
    "configuration", "content", "contents", "core", "data", "default", "defaults", "doc", "docs",
    "documentation", "entities", "entity", "error", "errors", "example", "examples", "exception",
    "exceptions", "false", "family", "field", "fields", "file", "files", "for", "friends", "from",
    "function", "functions", "general", "guide", "guides", "help", "home", "index", "info", "init",
    "install", "installation", "intro", "introduction", "item", "items", "lib", "libs", "main", "method",
    "methods", "misc", "model", "models", "module", "modules", "name", "names", "none", "note", "notes",
    "null", "option", "options", "other", "overview", "package", "packages", "page", "pages", "parameter",
    "parameters", "people", "person", "procedure", "procedures", "readme", "reference", "references",
    "relation", "relations", "return", "returns", "rule", "rules", "section", "sections", "setting",
    "settings", "setup", "source", "sources", "src", "step", "steps", "test", "tests", "the", "tool",
    "tools", "top", "true", "tutorial", "tutorials", "type", "types", "usage", "util", "utils", "value",
    "values", "with", "yes",
))

_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*[A-Za-z0-9_]|[A-Za-z0-9_]")
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_CODE_SHAPED = re.compile(
    r"\b[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+\b"  # snake_case
    r"|\b[a-z]+[A-Z][A-Za-z0-9]*\b"  # camelCase
    r"|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b"  # CamelCase
    r"|\b[A-Za-z_][A-Za-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]+)+\b"  # dotted.name (parts of >= 2 chars)
    r"|\b\w+\(\)"  # call()
)


def _parts(token: str) -> list[str]:
    pieces = re.split(r"[._\-/#]+", token)
    return [p.lower() for piece in pieces for p in (_PART.findall(piece) or [piece])]


@dataclass(frozen=True)
class IdentifierVocab:
    words: frozenset[str]
    phrases: frozenset[str]

    @classmethod
    def build(cls, sm: SourceModel, source: Source) -> IdentifierVocab:
        names: list[str] = []
        for e in sm.entities:
            names += [e.key, e.name]
        for el in source.elements:
            names.append(el.id)
            head, _, tail = el.id.partition("#")
            names += [c for c in re.split(r"[/\\]", head) if c]
            names += [c for c in re.split(r"[/\\]", el.path) if c]
            if tail and (source.kind == "code" or _CODE_SHAPED.search(tail)):
                names += [tail] + tail.split(".")
            for k, v in el.metadata.items():
                if isinstance(v, str) and any(t in k.lower() for t in ("name", "entity", "symbol", "api")):
                    names.append(v)
        for u in sm.units:
            names += [a.value for a in u.attributes]
        words: set[str] = set()
        phrases: set[str] = set()
        for raw in names:
            s = normalise_ws(str(raw)).lower()
            if not s:
                continue
            if " " in s:
                phrases.add(s)
                continue
            for w in {s, s.rsplit(".", 1)[0] if "." in s else s}:
                if len(w) >= 3 and w not in GENERIC:
                    words.add(w)
        # single words of entity names are proper names too ("Aida Wang" -> aida, wang)
        for e in sm.entities:
            for w in re.findall(r"[a-z0-9]{3,}", e.name.lower()):
                if w not in GENERIC:
                    words.add(w)
        return cls(frozenset(words), frozenset(phrases))

    def offending(self, text: str) -> str | None:
        """The first source-specific identifier in ``text`` (None if there is none)."""
        m = _CODE_SHAPED.search(text)
        if m:
            return m.group(0)
        low = " " + " ".join(re.findall(r"[a-z0-9]+", text.lower())) + " "
        for p in sorted(self.phrases):
            norm = " ".join(re.findall(r"[a-z0-9]+", p))
            if norm and f" {norm} " in low:
                return p
        for tok in _TOKEN.findall(text):
            cands = [tok.lower()] + _parts(tok)
            for c in cands:
                if len(c) >= 3 and c in self.words:
                    return c
        return None


@dataclass(frozen=True)
class Lesson:
    task_id: str
    kind: str
    text: str
    solved: bool


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


def lesson_messages(needs: TaskNeeds, units: list[Unit], source: Source, solved: bool,
                    budget: int) -> list[dict[str, str]]:
    claims = "\n".join(f"- {c.text} (evidence: {', '.join(c.evidence_ids)})" for c in needs.claims) or "(none)"
    ev = fit(excerpt_blocks(source, needs.support_ids, max_chars=600), budget // 2)
    ul = fit((unit_line(u) for u in units), budget // 3)
    user = (f"Task: {needs.question.strip()}\n\nWhat it needed from the source:\n{claims}\n\nSupporting excerpts:\n"
            + ("\n\n".join(ev) or "(none)") + "\n\nModel units available about it:\n" + ("\n".join(ul) or "(none)")
            + f"\n\nOutcome: {'solved' if solved else 'failed'}\n\nReply in JSON.")
    return [{"role": "system", "content": LESSON_SYSTEM}, {"role": "user", "content": user}]


async def lesson_for(llm: BoundLLM, needs: TaskNeeds, units: list[Unit], source: Source, solved: bool,
                     vocab: IdentifierVocab, stage: str = "mt_lesson") -> tuple[Lesson | None, str]:
    """The task's lesson, or None with the reason (none / failed / identifier: <token>)."""
    budget = material_chars(llm, LESSON_MAX_TOKENS)
    res = await llm.structured(lesson_messages(needs, units, source, solved, budget), LessonOut, stage=stage,
                               max_tokens=LESSON_MAX_TOKENS)
    if res.failed or res.value is None:
        return None, "failed"
    out: LessonOut = res.value  # type: ignore[assignment]
    text = normalise_ws(out.lesson)
    if out.kind == "none" or not text:
        return None, "none"
    bad = vocab.offending(text)
    if bad is not None:
        return None, "identifier"
    return Lesson(needs.task_id, out.kind, text, solved), "kept"
