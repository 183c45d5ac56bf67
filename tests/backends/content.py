"""Plausible replies for the test backend: schema-valid instances and plain answers drawn from the prompt.

A reply must let every stage of every method build a non-empty artifact, so values are not the
minimal ones the scripted model gives: enums are picked by a hash of the request (not always the
first value), strings come from the prompt (a verbatim sentence for quote/span/evidence fields,
capitalised names for name/entity fields, bracketed ids for id fields, the extractive answer for
answer fields), verdict booleans (``correct``, ``supported``, ...) are true about 80 % of the time,
arrays get 1-3 items within their bounds, integers are small or one of the numbers the prompt lists.
Everything is a function of the request, so the same request always gets the same reply.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from sourcebench.harness.providers.scripted import extractive_reply

_WORD = re.compile(r"[A-Za-z0-9]{2,}")
_STOP = {"the", "of", "is", "are", "was", "were", "what", "who", "which", "and", "to", "in", "a", "an", "for",
         "that", "this", "with", "how", "does", "do", "on", "be", "by", "it", "as", "or", "from", "answer",
         "question", "whom", "whose", "when", "where", "why"}
_NAME = re.compile(r"\b[A-Z][\w'-]*(?:\s+(?:of\s+|de\s+|von\s+)?[A-Z][\w'-]*)*")
_NOT_NAMES = {"The", "A", "An", "What", "Who", "Which", "Whom", "Whose", "When", "Where", "Why", "How", "Is", "Are",
              "Do", "Does", "Question", "Answer", "Context", "Reply", "Return", "Give", "Use", "If", "In", "It", "This",
              "That", "These", "Those", "You", "Your", "For", "Each", "Only", "JSON", "Write", "List", "Read", "Task",
              "Instruction", "Note", "Notes", "Output", "Input", "Example", "Be", "Keep", "Say", "Otherwise", "Then",
              "He", "She", "They", "We", "I", "His", "Her", "Their", "Its", "There", "Here", "Yes", "No"}
_ID = re.compile(r"\[([^\[\]\s][^\[\]\n]{0,119})\]|\(([A-Za-z0-9_.:/#-]*[0-9_:/#][A-Za-z0-9_.:/#-]*)\)")
# "Trajectory T1", "Document d3": a labelled item, whose label a field named after the kind wants
_TAG = re.compile(r"^(?:[-*]\s+)?\[[^\[\]\n]{1,120}\]\s*")
_LABELLED = re.compile(r"\b([A-Z][a-z]{2,15})\s+([A-Z]{0,3}\d{1,5})\b")
_NUMBERED = re.compile(r"(?m)^\s*(?:\[(\d{1,4})\]|(\d{1,4})[.)])\s")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_AT_MOST_CHARS = re.compile(r"at most (\d+) characters")
_AT_MOST_ITEMS = re.compile(r"at most (\d+) items")
_AT_LEAST_ITEMS = re.compile(r"at least (\d+) items")

# field-name families (matched against the property name, lower case)
_ANSWER = re.compile(r"^(answer|final_answer|response|output|prediction)s?$")
_SPAN = re.compile(r"(quote|span|evidence(?!_id)|excerpt|citation|passage|support|oppose|snippet)")
_ID_FIELD = re.compile(r"(^|_)(ids?|keys?|targets?|candidate|absorbs?|keep|required|optional|trajector(y|ies))$")
_NAME_FIELD = re.compile(r"(name|entit|subject|object|head|tail|person|title|main_objects|scenarios|node)")
_QUERY = re.compile(r"(query|keywords|question|search)")
_RELATION = re.compile(r"^(relation|predicate|relationship)$")
_VERDICT = re.compile(r"(correct|support|ground|keep|valid|relevant|represent|faithful|consistent|answerable|success|"
                      r"pass|accept|preserv|learned|admit|useful|sufficient|complete|match|ok$|^is_)")
_RARELY = re.compile(r"(duplicate|contradict|stale|truncated|failed|protected|edited|abstain)")
_SEQUENCE = re.compile(r"(steps|actions|instructions|procedure|plan)$")
_LABEL = re.compile(r"(label|verdict|judg|grade|decision|status)")
_INDEX = re.compile(r"(^|_)(number|index|units?|lost|missing|notes?|observation|keeps_item|replaces|lessons?|items?|"
                    r"entities|batch|page|choice|option|rank)$")


def _words(s: str) -> set[str]:
    return {w for w in (x.lower() for x in _WORD.findall(s)) if w not in _STOP}


@dataclass
class PromptView:
    """What a reply can draw from: the prompt's sentences (verbatim), names, ids and numbered items."""

    text: str
    question: str
    sentences: list[str] = field(default_factory=list)  # most relevant to the question first
    names: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    labels: dict[str, list[str]] = field(default_factory=dict)  # "trajectory" -> ["T1", "T2"]
    sections: dict[str, list[str]] = field(default_factory=dict)  # "T1" -> the sentences of its record

    @classmethod
    def of(cls, messages: list[dict[str, str]]) -> PromptView:
        text = "\n".join(m["content"] for m in messages)
        # sentences come from what the model is shown to work on, not its instructions (the system
        # message), unless there is nothing else
        body = "\n".join(m["content"] for m in messages if m["role"] != "system") or text
        last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), text)
        lines = [ln.strip() for ln in last_user.splitlines() if ln.strip()]
        question = next((ln for ln in reversed(lines) if ln.lower().startswith(("question:", "task:", "query:"))),
                        lines[-1] if lines else "")
        asks = question.lower().startswith(("question:", "task:", "query:")) or question.endswith("?")
        found: list[str] = []
        sections: dict[str, list[str]] = {}  # label -> sentences from its record ("Trajectory T1" ... next label)
        current: str | None = None
        for ln in body.splitlines():
            ln = ln.strip()
            if (m := _LABELLED.search(ln)) and ln.startswith(("#", m.group(1))):
                current = m.group(2)
            ln = _TAG.sub("", ln)  # "[e1] Alice: Alice is ..." -> "Alice: Alice is ..." (still verbatim)
            if not ln or (asks and ln == question) or ln.startswith(("{", "#")) or len(ln) > 4000:
                continue
            here = [s for s in _SENTENCE_END.split(ln) if 3 <= len(s.split()) and len(s) <= 400]
            found += here
            if current is not None:
                sections.setdefault(current, []).extend(here)
        q = _words(question)
        order = sorted(range(len(found)), key=lambda i: (-len(q & _words(found[i])), i))
        sentences = list(dict.fromkeys(found[i] for i in order))
        names: dict[str, int] = {}
        for s in sentences[:50] or [text[:2000]]:
            for m in _NAME.finditer(s):
                name = m.group(0).strip()
                first = name.split()[0]
                if first in _NOT_NAMES:
                    name = " ".join(name.split()[1:])
                if len(name) >= 2 and name not in _NOT_NAMES:
                    names[name] = names.get(name, 0) + 1
        ids = list(dict.fromkeys(x for a, b in _ID.findall(text) if len((x := a or b).split()) <= 8))
        numbers = sorted({int(a or b) for a, b in _NUMBERED.findall(text)})
        labels: dict[str, list[str]] = {}
        for kind, label in _LABELLED.findall(text):
            if label not in labels.setdefault(kind.lower(), []):
                labels[kind.lower()].append(label)
        return cls(text, question, sentences, list(names), ids, numbers, labels, sections)

    def extractive(self) -> str:
        """The scripted model's extractive answer, over one sentence a line (so it answers with a sentence's
        value part, not a paragraph's)."""
        lines = [s for ln in self.text.splitlines() for s in (_SENTENCE_END.split(ln) if ln != self.question else [ln])]
        return extractive_reply("\n".join(lines))


class Filler:
    """Builds one schema instance for one request; ``key`` (a hex hash of the request) seeds every pick."""

    def __init__(self, view: PromptView, key: str):
        self.view = view
        self.key = key
        self.anchor: str | None = None  # the record (label) the object being built cites

    def h(self, *parts: object) -> int:
        return int(hashlib.sha256("\x1f".join([self.key, *map(str, parts)]).encode()).hexdigest()[:12], 16)

    def chance(self, p: float, *parts: object) -> bool:
        return self.h("chance", *parts) % 1000 < p * 1000

    def sentence(self, slot: int) -> str:
        top = self.view.sections.get(self.anchor or "", [])[:5] or self.view.sentences[:5]
        if not top:
            return self.view.question or "the source does not say"
        return top[slot % len(top)]

    # -- schema walk ----------------------------------------------------------------------------
    def value(self, s: dict[str, Any], name: str, path: str, defs: dict[str, Any], depth: int, slot: int) -> Any:
        if "$ref" in s:
            ref = s["$ref"]
            target = defs.get(ref.split("/")[-1]) if ref != "#" else defs.get("#")
            return self.value(target or {}, name, path, defs, depth + 1, slot)
        if "const" in s:
            return s["const"]
        if "enum" in s:
            return self.enum(s["enum"], name, path)
        if "anyOf" in s:
            branches = [b for b in s["anyOf"] if b.get("type") != "null"] or s["anyOf"]
            pick = branches[0] if len(branches) == 1 else branches[self.h("anyOf", path) % len(branches)]
            return self.value(pick, name, path, defs, depth, slot)
        t = s.get("type")
        if isinstance(t, list):
            t = next((x for x in t if x != "null"), "null")
        if t == "object" or "properties" in s:
            if depth > 8:
                return {k: self.value(v, k, f"{path}.{k}", defs, depth + 1, slot) for k, v in
                        s.get("properties", {}).items()} if s.get("required") else {}
            own = self.h("object", path, slot) % 5  # one sentence per object: its fields agree
            outer = self.anchor
            self.anchor = self.anchor_for(s.get("properties", {}), path, slot) or outer
            try:
                return {k: self.value(v, k, f"{path}.{k}", defs, depth + 1, own + slot)
                        for k, v in s.get("properties", {}).items()}
            finally:
                self.anchor = outer
        if t == "array":
            return self.array(s, name, path, defs, depth, slot)
        if t == "boolean":
            low = name.lower()
            p = 0.2 if _RARELY.search(low) else 0.8 if _VERDICT.search(low) else 0.5
            return self.chance(p, path, slot)
        if t in ("integer", "number"):
            return self.number(s, name, path, slot, t == "integer")
        if t == "null":
            return None
        return self.string(s, name, path, slot)

    def anchor_for(self, props: dict[str, Any], path: str, slot: int) -> str | None:
        """A claim that cites "Trajectory T2" quotes T2's record: pick the record when a field names a kind."""
        for prop in props:
            for kind, pool in self.view.labels.items():
                if kind[:6] in prop.lower() and pool:
                    return pool[self.h("anchor", path, slot) % len(pool)]
        return None

    def enum(self, values: list[Any], name: str, path: str) -> Any:
        if _LABEL.search(name.lower()) and self.chance(0.7, "label", path):
            return values[0]  # verdict labels list the positive one first: mostly positive
        return values[self.h("enum", path) % len(values)]

    def array(self, s: dict[str, Any], name: str, path: str, defs: dict[str, Any], depth: int, slot: int) -> list:
        desc = s.get("description", "")
        lo = int(s.get("minItems", 0))
        hi = s.get("maxItems")
        if hi is None and (m := _AT_MOST_ITEMS.search(desc)):
            hi = int(m.group(1))
        if (m := _AT_LEAST_ITEMS.search(desc)) and "minItems" not in s:
            lo = int(m.group(1))
        n = 0 if depth > 8 else 1 + self.h("len", path, slot) % 3
        if _SEQUENCE.search(name.lower()):
            n = max(n, 2)  # a workflow or plan of one step is no workflow (AWM drops them)
        n = max(lo, n if hi is None else min(n, int(hi)))
        items = s.get("items", {"type": "string"})
        if "enum" in items:  # distinct values, as a model picking several ids would
            vals = items["enum"]
            start = self.h("enum-items", path) % len(vals)
            return [vals[(start + i) % len(vals)] for i in range(min(n, len(vals)))] if n else []
        out: list[Any] = []
        for i in range(n + 5):  # a model rarely lists the same string twice: draw more until n are distinct
            if len(out) == n:
                break
            v = self.value(items, name, f"{path}[{i}]", defs, depth + 1, slot + i)
            if not (isinstance(v, str) and v in out):
                out.append(v)
        while len(out) < lo:
            out.append(f"{out[0]} {len(out)}" if out and isinstance(out[0], str) else out[-1])
        return out

    def number(self, s: dict[str, Any], name: str, path: str, slot: int, integer: bool) -> Any:
        lo, hi = s.get("minimum", s.get("exclusiveMinimum")), s.get("maximum", s.get("exclusiveMaximum"))
        nums = self.view.numbers
        if integer and _INDEX.search(name.lower()) and nums:
            v: float = nums[self.h("num", path, slot) % min(len(nums), 10)]
        elif integer:
            v = 1 + self.h("num", path, slot) % 3
        else:
            v = round(0.5 + (self.h("num", path, slot) % 50) / 100, 2)
        if lo is not None:
            v = max(v, lo + (1 if integer and "exclusiveMinimum" in s and "minimum" not in s else 0))
        if hi is not None:
            v = min(v, hi - (1 if integer and "exclusiveMaximum" in s and "maximum" not in s else 0))
        return int(v) if integer else float(v)

    def string(self, s: dict[str, Any], name: str, path: str, slot: int) -> str:
        low = name.lower()
        fmt = s.get("format")
        if fmt in _FORMATS:
            return _FORMATS[fmt]
        sent = self.sentence(slot)
        if _ANSWER.match(low):
            text = self.view.extractive()
        elif _ID_FIELD.search(low):
            kinds = [v for k, v in self.view.labels.items() if k[:6] in low]  # source_trajectories: "Trajectory T1"
            pool = (kinds[0] if kinds else None) or self.view.ids or self.view.names or ["1"]
            text = self.anchor if kinds and self.anchor in pool else pool[self.h("id", path, slot) % min(len(pool), 20)]
        elif _RELATION.match(low):
            text = _relation(sent)
        elif _QUERY.search(low):
            text = " ".join(list(dict.fromkeys(w for w in _WORD.findall(self.view.question)
                                               if w.lower() not in _STOP))[:8]) or sent
        elif _SPAN.search(low):
            text = sent
        elif _NAME_FIELD.search(low):
            own = sorted((n for n in self.view.names if n in sent), key=sent.find) or self.view.names or [sent]
            if low in ("subject", "head", "source"):  # a triple reads its sentence left to right
                text = own[0]
            elif low in ("object", "tail", "target"):
                text = own[min(1, len(own) - 1)]
            else:
                text = own[self.h("name", path) % min(len(own), 3)]
        else:
            text = sent
        limit = s.get("maxLength")
        if limit is None and (m := _AT_MOST_CHARS.search(s.get("description", ""))):
            limit = int(m.group(1))
        if limit is not None:
            text = text[: int(limit)]
        while len(text) < int(s.get("minLength", 0)):
            text += " " + sent
        return text


_FORMATS = {"date-time": "2024-01-01T00:00:00Z", "date": "2024-01-01", "time": "00:00:00", "duration": "P1D",
            "email": "someone@example.com", "hostname": "example.com", "ipv4": "127.0.0.1", "ipv6": "::1",
            "uuid": "00000000-0000-4000-8000-000000000000"}


def _relation(sentence: str) -> str:
    """The words between the first two names of a sentence ('X is the mother of Y' -> 'is the mother of')."""
    spans = [m.span() for m in _NAME.finditer(sentence) if m.group(0).split()[0] not in _NOT_NAMES]
    if len(spans) >= 2:
        between = sentence[spans[0][1]:spans[1][0]].strip(" ,;:")
        if 0 < len(between.split()) <= 6:
            return between
    words = [w for w in sentence.split() if w.islower()]
    return " ".join(words[:3]) or "related to"


def instance(schema: dict[str, Any], messages: list[dict[str, str]], key: str) -> Any:
    """A schema-valid, prompt-derived value for ``schema``."""
    defs = dict(schema.get("$defs", {}), **schema.get("definitions", {}))
    defs["#"] = schema
    return Filler(PromptView.of(messages), key).value(schema, "", "$", defs, 0, 0)


_REPLY_WITH = re.compile(r"reply with (?:only )?(?:the word )?['\"]?(\w+)", re.IGNORECASE)


def plain_reply(messages: list[dict[str, str]]) -> str:
    """An unstructured reply: a summary asks for the prompt's leading sentences, else the extractive answer."""
    view = PromptView.of(messages)
    if m := _REPLY_WITH.search(view.question):
        return m.group(1)
    instruction = " ".join(m["content"][:400] for m in messages)
    if re.search(r"summar|condense", instruction, re.IGNORECASE) and view.sentences:
        return " ".join(view.sentences[:3])
    return view.extractive()


def reply(messages: list[dict[str, str]], schema: dict[str, Any] | None, key: str, json_object: bool = False) -> str:
    if schema is not None:
        return json.dumps(instance(schema, messages, key), ensure_ascii=False)
    if json_object:
        return json.dumps({"answer": PromptView.of(messages).extractive()})
    return plain_reply(messages)
