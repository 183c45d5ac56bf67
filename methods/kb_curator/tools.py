"""The agents' tools: one action per step, chosen through a schema-constrained call.

Each agent step is a ``Step`` whose ``action`` is a discriminated union of tool calls (pydantic
validates by the ``tool`` tag). The JSON schema sent to the model writes the union as ``anyOf``
with a one-value ``enum`` per tag, because that form survives every provider's schema conversion
(inspect drops ``oneOf``/``const``) and llama.cpp grammars, so even a small local model can only
emit a well-formed action.

``ToolBox`` executes actions on a ``KnowledgeStore``: search/read for both agents, and the
curator's edits (add, link_many with at most 40 targets, edit, delete, unlink) behind two guards,
the paper's near-duplicate veto and our rule that a document never recites the gold answer.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sourcebench.harness.data import Evidence, normalise_ws
from sourcebench.harness.method import Context
from sourcebench.harness.schema_limits import bounded_list

from .store import Document, Edit, KnowledgeStore, StoreIndex

LINK_MAX = 40  # paper: link_many attaches up to forty targets; larger batches are rejected


# -- schema helpers (shared with the navigator) -------------------------------------------------------


def _tag_as_enum(schema: dict[str, Any]) -> None:
    tool = schema.get("properties", {}).get("tool", {})
    if "const" in tool:
        tool["enum"] = [tool.pop("const")]


def _union_as_any_of(schema: dict[str, Any]) -> None:
    action = schema.get("properties", {}).get("action", {})
    if "oneOf" in action:
        action["anyOf"] = action.pop("oneOf")
        action.pop("discriminator", None)


class ToolAction(BaseModel):
    """Base of every tool call: a literal ``tool`` tag plus the tool's arguments."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_tag_as_enum)


class ActionStep(BaseModel):
    """Base of an agent step: exactly one ``action`` (a discriminated union of ``ToolAction``s)."""

    model_config = ConfigDict(json_schema_extra=_union_as_any_of)


def describe_action(action: ToolAction) -> str:
    """A one-line rendering of a call, for histories and traces."""
    args = {k: v for k, v in action.model_dump().items() if k != "tool"}
    if not args:
        return action.tool  # type: ignore[attr-defined]
    parts = []
    for k, v in args.items():
        if isinstance(v, (int, float)):
            parts.append(f"{k}={v}")
            continue
        if isinstance(v, list):
            parts.append(f"{k}=[{len(v)} ids]" if len(v) > 3 else f"{k}=[{', '.join(map(str, v))}]")
            continue
        v = normalise_ws(str(v))
        parts.append(f'{k}="{v[:80]}{"..." if len(v) > 80 else ""}"')
    return f"{action.tool}({', '.join(parts)})"  # type: ignore[attr-defined]


# -- the actions ----------------------------------------------------------------------------------------


# Length caps keep a rambling small model from filling its whole output budget inside one string
# (grammar-constrained decoding honours maxLength); real arguments are far shorter.
ID_CHARS, QUERY_CHARS, TITLE_CHARS, TEXT_CHARS = 200, 200, 120, 600
DocId = Annotated[str, Field(max_length=ID_CHARS)]


class Search(ToolAction):
    tool: Literal["search"]
    query: str = Field(max_length=QUERY_CHARS, description="words to look for")


class Read(ToolAction):
    tool: Literal["read"]
    doc_id: str = Field(max_length=ID_CHARS, description="id of a document seen in a result")


class Finish(ToolAction):
    """The reader's ``answer`` action: stop; the answer is written from the documents seen."""

    tool: Literal["answer"]


class Add(ToolAction):
    tool: Literal["add"]
    title: str = Field(max_length=TITLE_CHARS, description="short name of the key the document is about")
    text: str = Field(max_length=TEXT_CHARS, description="what the document is about; members go in links, not here")


class LinkMany(ToolAction):
    tool: Literal["link_many"]
    from_id: DocId
    # the bound is for the decoder; a reply with more (from a server that ignores it) is still refused
    to_ids: bounded_list(DocId, LINK_MAX) = Field(description=f"at most {LINK_MAX} document ids")


class EditDoc(ToolAction):
    tool: Literal["edit"]
    doc_id: DocId
    text: str = Field(max_length=TEXT_CHARS)


class Delete(ToolAction):
    tool: Literal["delete"]
    doc_id: DocId


class Unlink(ToolAction):
    tool: Literal["unlink"]
    from_id: DocId
    to_id: DocId


class Done(ToolAction):
    tool: Literal["done"]


ReaderAction = Annotated[Search | Read | Finish, Field(discriminator="tool")]
CuratorAction = Annotated[Search | Read | Add | LinkMany | EditDoc | Delete | Unlink | Done,
                          Field(discriminator="tool")]


class ReaderStep(ActionStep):
    action: ReaderAction


class CuratorStep(ActionStep):
    action: CuratorAction


class KeyAnalysis(BaseModel):
    """The curator's first backward call: the keys the question names, and which lack an index
    (short texts rather than lists, whose length no schema converter can bound)."""

    keys: str = Field(max_length=300, description="entities, relations or attribute values the question names, "
                      "separated by semicolons")
    missing_indexes: str = Field(max_length=300, description="the keys for which an index document would have "
                                 "saved actions, separated by semicolons")


class DuplicateVerdict(BaseModel):
    duplicate: bool


# -- the gold guard -----------------------------------------------------------------------------------

ANSWER_KEYS = ("answer", "answers", "api_call")


def gold_values(reference: Any) -> list[str]:
    """The answer strings of a reference: list items, the string itself, or a record's answer fields
    (all of its string leaves when it has none of ``ANSWER_KEYS``)."""
    if reference is None:
        return []
    if isinstance(reference, dict):
        keys = [k for k in ANSWER_KEYS if k in reference]
        vals = [reference[k] for k in keys] if keys else list(reference.values())
        return [s for v in vals for s in gold_values(v)]
    if isinstance(reference, (list, tuple, set)):
        return [s for v in reference for s in gold_values(v)]
    s = normalise_ws(str(reference))
    return [s] if s else []


def render_reference(reference: Any) -> str:
    if isinstance(reference, (list, tuple)):
        return "; ".join(normalise_ws(str(r)) for r in reference)
    if isinstance(reference, dict):
        vals = gold_values(reference)
        return "; ".join(vals)
    return normalise_ws(str(reference))


class GoldGuard:
    """Refuses writes that recite the gold answer (the paper counts such 'materialised answers' as
    failures of curation; we prevent them). Values the question itself names are keys, not answers."""

    def __init__(self, reference: Any, question: str):
        q = normalise_ws(question).lower()
        self.patterns = [re.compile(r"(?<!\w)" + re.escape(v.lower()) + r"(?!\w)")
                         for v in dict.fromkeys(gold_values(reference)) if v.lower() not in q]

    def violates(self, text: str) -> bool:
        t = normalise_ws(text).lower()
        return any(p.search(t) for p in self.patterns)


# -- observations -------------------------------------------------------------------------------------


@dataclass
class Observation:
    """What a tool returned: the text the agent sees, plus what the harness keeps from it."""

    text: str
    ok: bool = True
    kind: str = ""  # search | read | edit | reject | answer | done
    read: Evidence | None = None  # a read document, as evidence
    hits: list[Evidence] = field(default_factory=list)  # search hits, as shown
    entries: list[str] = field(default_factory=list)  # learned entries the agent saw


def snippet(text: str, chars: int) -> str:
    t = normalise_ws(text)
    return t if len(t) <= chars else t[:chars].rstrip() + " ..."


class ToolBox:
    """Executes tool calls against one store. Search/read never change it; edits go through ``apply``
    after validation, are appended to ``trace`` and counted in ``counts``."""

    def __init__(self, store: KnowledgeStore, index: StoreIndex, *, search_k: int = 5, snippet_chars: int = 160,
                 read_chars: int = 4000, links_shown: int = 60, link_max: int = LINK_MAX):
        self.store = store
        self.index = index
        self.search_k = search_k
        self.snippet_chars = snippet_chars
        self.read_chars = read_chars
        self.links_shown = links_shown
        self.link_max = link_max
        self.trace: list[Edit] = []
        self.counts: Counter[str] = Counter()

    # -- reading ---------------------------------------------------------------------------------
    def search(self, query: str) -> Observation:
        self.counts["search"] += 1
        if not normalise_ws(query):
            return Observation("search needs a non-empty query", ok=False, kind="reject")
        hits = self.index.search(query, k=self.search_k)
        shown: list[Evidence] = []
        lines = [f'search "{snippet(query, 80)}": {len(hits)} result(s)']
        entries: list[str] = []
        for h in hits:
            doc = self.store.docs[h.element_id]
            text = snippet(doc.text, self.snippet_chars)
            shown.append(Evidence(element_id=doc.id, title=doc.title, text=text, score=h.score))
            lines.append(f"- [{doc.id}] {doc.title}: {text} ({len(doc.links)} links)")
            entries.extend(_entry_ids_of(doc))
        return Observation("\n".join(lines), kind="search", hits=shown, entries=entries)

    def read(self, doc_id: str) -> Observation:
        self.counts["read"] += 1
        doc = self.store.get(doc_id.strip())
        if doc is None:
            return Observation(f"no document with id [{doc_id}]; use an id from a search or a link", ok=False,
                               kind="reject")
        body = doc.text if len(doc.text) <= self.read_chars else doc.text[: self.read_chars] + " ..."
        link_lines = []
        for t in doc.links[: self.links_shown]:
            target = self.store.docs[t]
            link_lines.append(f"- [{t}] {target.title}: {snippet(target.text, self.snippet_chars)}")
        if len(doc.links) > self.links_shown:
            link_lines.append(f"- ... {len(doc.links) - self.links_shown} more links")
        head = f"read [{doc.id}] {doc.title} ({len(doc.links)} links)"
        shown = body + ("\nLinked documents:\n" + "\n".join(link_lines) if link_lines else "")
        entries = _entry_ids_of(doc) + [f"link:{doc.id}->{t}" for t in doc.links]
        return Observation(head + "\n" + shown, kind="read", entries=entries,
                           read=Evidence(element_id=doc.id, title=doc.title, text=shown))

    # -- editing ---------------------------------------------------------------------------------
    def _reject(self, reason: str, message: str) -> Observation:
        self.counts[f"rejected_{reason}"] += 1
        return Observation(f"rejected: {message}", ok=False, kind="reject")

    def _commit(self, edit: Edit, message: str) -> Observation:
        self.store.apply(edit)
        self.trace.append(edit)
        self.counts[edit.op] += 1
        return Observation(message, kind="edit")

    async def add(self, action: Add, task_id: str, gold: GoldGuard, dedup: DedupGuard) -> Observation:
        title, text = normalise_ws(action.title), action.text.strip()
        if not title or not text:
            return self._reject("empty", "a document needs a title and a text")
        if gold.violates(title + "\n" + text):
            return self._reject("gold", "the document would state the answer itself. Write what it is about "
                                "(its key) and link the documents that hold the members instead.")
        dup = await dedup.check(title, text, exclude="")
        if dup:
            return self._reject("duplicate", dup)
        new_id = self.store.new_id()
        return self._commit(Edit(op="add", doc_id=new_id, title=title, text=text, task_id=task_id),
                            f"added [{new_id}] {title}; attach its members with link_many")

    def link_many(self, action: LinkMany, task_id: str) -> Observation:
        targets = list(dict.fromkeys(t.strip() for t in action.to_ids if t.strip()))
        if len(targets) > self.link_max:
            return self._reject("link_limit", f"link_many takes at most {self.link_max} targets, got "
                                f"{len(targets)}; nothing was linked. A larger batch is a search result, not a "
                                "key's member set.")
        src = self.store.get(action.from_id.strip())
        if src is None:
            return self._reject("unknown_id", f"no document with id [{action.from_id}]")
        unknown = [t for t in targets if t not in self.store]
        known = [t for t in targets if t in self.store and t != src.id and t not in src.links]
        if not known:
            why = f"unknown ids: {', '.join(unknown[:10])}" if unknown else "all targets were already linked"
            return self._reject("unknown_id" if unknown else "no_change", f"nothing to link ({why})")
        note = f"; ignored unknown ids: {', '.join(unknown[:10])}" if unknown else ""
        return self._commit(Edit(op="link", doc_id=src.id, targets=known, task_id=task_id),
                            f"linked [{src.id}] to {len(known)} document(s){note}")

    async def edit(self, action: EditDoc, task_id: str, gold: GoldGuard, dedup: DedupGuard) -> Observation:
        doc = self.store.get(action.doc_id.strip())
        text = action.text.strip()
        if doc is None:
            return self._reject("unknown_id", f"no document with id [{action.doc_id}]")
        if not text:
            return self._reject("empty", "an edit needs the new text (use delete to remove a document)")
        if gold.violates(text):
            return self._reject("gold", "the new text would state the answer itself; link the documents that "
                                "hold it instead.")
        dup = await dedup.check(doc.title, text, exclude=doc.id)
        if dup:
            return self._reject("duplicate", dup)
        return self._commit(Edit(op="edit", doc_id=doc.id, text=text, task_id=task_id), f"edited [{doc.id}]")

    def delete(self, action: Delete, task_id: str) -> Observation:
        doc = self.store.get(action.doc_id.strip())
        if doc is None:
            return self._reject("unknown_id", f"no document with id [{action.doc_id}]")
        return self._commit(Edit(op="delete", doc_id=doc.id, task_id=task_id),
                            f"deleted [{doc.id}] and every link to it")

    def unlink(self, action: Unlink, task_id: str) -> Observation:
        doc = self.store.get(action.from_id.strip())
        to = action.to_id.strip()
        if doc is None or to not in doc.links:
            return self._reject("unknown_id", f"there is no link from [{action.from_id}] to [{action.to_id}]")
        return self._commit(Edit(op="unlink", doc_id=doc.id, targets=[to], task_id=task_id),
                            f"removed the link [{doc.id}] -> [{to}]")


def _entry_ids_of(doc: Document) -> list[str]:
    if doc.origin == "authored":
        return [f"doc:{doc.id}"]
    return [f"edit:{doc.id}"] if doc.edited else []


# -- the near-duplicate guard -------------------------------------------------------------------------

_DEDUP_SYSTEM = ("You check a knowledge base for redundant documents. Say whether the new document carries "
                 "the same information as one of the existing documents shown, so that keeping both adds "
                 "nothing. Documents about different keys, or with different links in mind, are not duplicates.")


class DedupGuard:
    """The paper's near-duplicate veto: a new or edited text is compared with its nearest documents;
    if one is at cosine >= ``threshold`` an LLM judge decides, and a duplicate write is refused."""

    def __init__(self, index: StoreIndex, ctx: Context, *, threshold: float = 0.90, neighbours: int = 3,
                 max_tokens: int = 500):
        self.index = index
        self.ctx = ctx
        self.threshold = threshold
        self.neighbours = neighbours
        self.max_tokens = max_tokens
        self.counts: Counter[str] = Counter()

    async def check(self, title: str, text: str, exclude: str) -> str:
        """'' when the write may go ahead, else the refusal message for the agent."""
        vec = self.index.vector_of_text(title, text)
        close = [(i, s) for i, s in self.index.nearest(vec, self.neighbours, exclude=exclude) if s >= self.threshold]
        if not close:
            return ""
        self.counts["judged"] += 1
        store = self.index.store
        shown = "\n".join(f"[{i}] {store.docs[i].title}: {snippet(store.docs[i].text, 400)}" for i, _ in close)
        user = (f"New document:\n{title}: {snippet(text, 400)}\n\nExisting documents:\n{shown}\n\n"
                'Reply {"duplicate": true} if the new document repeats one of them, else {"duplicate": false}.')
        res = await self.ctx.llm.structured([{"role": "system", "content": _DEDUP_SYSTEM},
                                             {"role": "user", "content": user}], DuplicateVerdict,
                                            stage="dedup_judge", max_tokens=self.max_tokens)
        if res.value is None:
            self.counts["judge_failed"] += 1
            return f"the duplicate check failed ({res.error[:120]}); the write was not made"
        if res.value.duplicate:
            self.counts["vetoed"] += 1
            first = close[0][0]
            return (f"too close to the existing document [{first}] {store.docs[first].title}; extend that one "
                    "(link_many or edit) instead of writing a near copy")
        return ""
