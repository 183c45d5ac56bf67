"""Construct M0: the provisional source model, read once per source and backend.

Steps (paper section 4.2, Appendix C.1; the official compiler's write-once design):
1. partition the source into entities and regions (``regions.py``); a document source of at least
   ``large_source_chars`` gives each region a soft token budget (``block_budgets``);
2. for a document source, a reading brief (user requests, purpose, main objects, reading
   questions, what to ignore), given to every reading and abstraction call; a code source has none;
3. per region a map (what it is about, how its entities relate): the routing description;
4. per entity one entity-centred reading that fills slots (attributes with one element id each,
   mechanisms, distinctions, decisive details; at most ``read_budget`` of the last three together,
   attributes unbounded). A document family is shown as 900-character section excerpts, a code
   entity as its 16k closure window (``code_window``). Element ids must be copied verbatim from the
   material: code keeps only ids that were shown and exist;
5. one batched grounding check per entity drops claims the cited excerpts do not support;
6. mechanical folding, no LLM: an attribute value shared by >= 3 entities and >= 60% of a
   region's entities becomes a regional prototype listing the deviating entities as exceptions
   (matching cells leave the cards); near-duplicate mechanisms of several entities merge into one
   regional mechanism;
7. an abstraction pass per region over its entities' cards, distinctions and details (shared rules
   over >= 2 entities, distinctions, exceptions), admitted mechanically (``admissible``);
8. deduplication of near-identical statements of the same role.

LLM calls: (documents: 1 brief) + regions (maps, plus one block proposal for large flat sources) + per
entity 1 reading + ceil(claims/8) grounding + per region (>= 4 entity cards, distinctions, details) 1 abstraction.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, create_model

from sourcebench.harness.data import Element, Source
from sourcebench.harness.llm import Message
from sourcebench.harness.schema_limits import bounded_list
from sourcebench.harness.token_budget import fit_to_window

from .code_window import WINDOW_CHARS, Piece, closure_window
from .config import SourceLearnConfig
from .grounding import gate_batch
from .model import Anchor, Attribute, Cited, Entity, Few, Phrase, Region, Scope, SourceModel, Statement, Unit
from .regions import EXCERPT_CHARS, GROUP_CHARS, Partition, block_budgets, partition
from .similarity import NearDuplicates, token_order, tokens_of

if TYPE_CHECKING:
    from sourcebench.harness.method import Context

READ_MAX_TOKENS = 1500
MATERIAL_CHARS = 24_000  # material of the other construction prompts when the model declares no window
ATTRIBUTES_MAX = 40  # attributes of one reading: unbounded officially; a decoder's stop only
MIN_EXCERPT = 300
MERGE_OVERLAP = 0.6  # mechanisms of different entities this similar merge into one regional mechanism
DEDUP_OVERLAP = 0.8  # statements of one role this similar are duplicates
ABSTRACT_MIN_UNITS = 4
ABSTRACT_ROLES = ("card", "distinction", "detail")  # the official pass lists the local level: cards, distinctions, details
ABSTRACT_MAX_ITEMS = 12
ABSTRACT_MAX_ANCHORS = 12
STATEMENT_CHARS = 400

MODELING_INSTRUCTION = (
    "Keep the source's major entities and their roles, the important relations between them, procedures, "
    "governing conditions and representative details; leave out redundant low-level content."
)


# -- small utilities ---------------------------------------------------------------------------
def norm_name(name: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9]+", "_", str(name).lower())).strip("_")


def norm_value(value: str) -> str:
    return re.sub(r"[\s,$]", "", str(value).lower()).rstrip(".")


def clip(text: str, n: int = STATEMENT_CHARS) -> str:
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def material_chars(ctx: Context, reserve_tokens: int, cap: int = MATERIAL_CHARS) -> int:
    """Characters of source material (at most ``cap``) that fit the model's window after the prompt
    and the reply (at the source's measured characters per token, see harness.token_budget)."""
    window = ctx.llm.spec.effective_context_window()
    if not window:
        return cap
    return max(800, min(cap, int((window - reserve_tokens) * ctx.llm.chars_per_token * 0.85)))


def render_material(elements: list[Element], max_chars: int, excerpt: int | None = None) -> tuple[str, list[str]]:
    """Bracketed-id material, each element cut to ``excerpt`` characters when given (a document
    reading's 900), then truncated deterministically to ``max_chars``: equal shares, then drop the tail."""
    def text(e: Element) -> str:
        return e.text if excerpt is None else e.text[:excerpt]

    total = sum(len(text(e)) for e in elements)
    share = None if total <= max_chars else max(MIN_EXCERPT, max_chars // max(1, len(elements)))
    parts, shown, size = [], [], 0
    for e in elements:
        body = text(e) if share is None else text(e)[:share]
        block = f"[{e.id}] {e.title}\n{body}"
        if shown and size + len(block) > max_chars:
            break
        parts.append(block)
        shown.append(e.id)
        size += len(block) + 2
    return "\n\n".join(parts), shown


def reading_elements(ent: Entity, source: Source) -> list[Element]:
    """What is read for an entity without a closure window: its elements, minus those whose text
    another shown one contains (a module file contains its symbols; a class contains its methods)."""
    els = [el for el in (source.element(i) for i in ent.element_ids) if el is not None]
    whole = [e for e in els if e.kind == "file"]
    if whole:
        return whole[:1]
    if els and els[0].kind == "symbol":
        return els[:1]
    return els


def entity_window(ent: Entity, region: Region, source: Source) -> list[Piece]:
    """A code entity's closure window (``code_window.closure_window``, 16k characters) over its region's
    other files; [] when the entity is not a top-level symbol of a parsable module (it is then read from
    its own elements, cut to fit)."""
    first = source.element(ent.element_ids[0]) if ent.element_ids else None
    if first is None:
        return []
    files = sorted({i.split("#", 1)[0] for i in region.element_ids})
    return closure_window(source, first, files, WINDOW_CHARS)


def render_window(pieces: list[Piece], max_chars: int) -> tuple[str, list[str]]:
    """A closure window as material: each piece whole, in window order, while it fits ``max_chars``
    (the entity itself is cut to fit when it alone does not)."""
    parts, shown, size = [], [], 0
    for i, (eid, label, text) in enumerate(pieces):
        block = f"[{eid}]  # {label}\n{text}"
        if size + len(block) > max_chars:
            if i:
                break
            block = block[:max(MIN_EXCERPT, max_chars)]
        parts.append(block)
        shown.append(eid)
        size += len(block) + 2
    return "\n\n".join(parts), list(dict.fromkeys(shown))


# -- structured replies ------------------------------------------------------------------------
class ReadingBrief(BaseModel):
    scenarios: bounded_list(Phrase, 8) = Field(description="5-8 typical requests a user of the source would bring, "
                                                            "phrased as they would ask them")
    purpose: Statement = Field(description="what the source is and what it is used for, concretely")
    main_objects: bounded_list(Phrase, 8) = Field(description="what the knowledge is organised around and how it is grouped")
    reading_questions: bounded_list(Phrase, 8) = Field(description="5-8 concrete questions to answer while reading each "
                                                                   "part, each naming the scenario it serves")
    ignore: bounded_list(Phrase, 5) = Field(description="3-5 kinds of content that should usually stay out of the model")


class RegionMap(BaseModel):
    about: Statement = Field(description="one line: what this region is about (used to route questions)")
    relations: bounded_list(Statement, 8) = Field(description="how entities of the region relate to or depend on each other")


class AttributeItem(BaseModel):
    name: Phrase
    value: Statement
    element_id: str


class StatementItem(BaseModel):
    statement: Statement
    conditions: bounded_list(Phrase, Few) = Field(default_factory=list, description="when the statement holds, if it depends on it")
    element_ids: Cited


class DetailItem(BaseModel):
    statement: Statement
    element_id: str


class EntityReading(BaseModel):
    attributes: list[AttributeItem] = Field(default_factory=list)
    mechanisms: list[StatementItem] = Field(default_factory=list)
    distinctions: list[StatementItem] = Field(default_factory=list)
    decisive_details: list[DetailItem] = Field(default_factory=list)


@functools.lru_cache(maxsize=16)
def reading_schema(budget: int) -> type[EntityReading]:
    """The reading reply with list bounds in its schema, so a constrained decoder stops a list instead
    of repeating an item: no statement slot can hold more than the whole ``budget`` (which the prompt
    sets for the three together), attributes at most ``ATTRIBUTES_MAX``."""
    bounded = {name: (bounded_list(info.annotation.__args__[0], ATTRIBUTES_MAX if name == "attributes" else budget),  # type: ignore[union-attr]
                      Field(default_factory=list))
               for name, info in EntityReading.model_fields.items()}
    return create_model(f"EntityReading{budget}", __base__=EntityReading, **bounded)  # type: ignore[call-overload]


class AbstractItem(BaseModel):
    kind: Literal["shared_rule", "distinction", "exception"]
    statement: Statement
    conditions: bounded_list(Phrase, Few) = Field(default_factory=list)
    units: bounded_list(int, 16) = Field(description="numbers of the listed units this item rests on")
    replaces: bounded_list(int, 16) = Field(default_factory=list, description="numbers of cited units a shared rule fully subsumes")


class Abstraction(BaseModel):
    items: bounded_list(AbstractItem, 12)


# -- prompts (own wording; facts from the paper's Appendix C.1) ----------------------------------
BRIEF_SYSTEM = (
    "A knowledge source is about to be compiled into a compact source model that an assistant keeps in context "
    "while using the source. Before reading it entity by entity, skim the material below and write a reading "
    "instruction for that compilation: how to read it, not a summary and not a plan. First imagine who uses the "
    "source and list 5-8 typical requests they bring to it (requests only, no answers); everything else follows "
    "from them. Then say what the source is and what it is used for; what the knowledge should be organised "
    "around and how those objects are grouped; 5-8 concrete reading questions the compiler can answer directly "
    "while reading each part (such as 'which inputs does X reject' or 'which entities share rule Y, and which "
    "are exceptions'), each naming the request it serves; and 3-5 kinds of content that usually should not "
    "enter the model. Every line specific enough to act on; no vague phrases such as 'important details'."
)

MAP_SYSTEM = (
    "You are drawing the structural map of one region of a knowledge source. Say in one line what the region "
    "is about (this line is used to decide whether a question needs the region), then list how its entities "
    "relate to or depend on each other. Structure only: no rules, no attribute values."
)

READ_SYSTEM = (
    "You are building the profile of ONE entity of a knowledge source (a document family, a code symbol or an "
    "API record) from all the material the source has about it. Do not summarise the material; fill slots:\n"
    "- attributes: properties that matter for decisions, as name/value pairs with short snake_case names that "
    "other entities of the same kind would also have; cite exactly one element id each. Skip properties that "
    "decide nothing.\n"
    "- mechanisms: how something works or the logic of a procedure, worth understanding, with the conditions "
    "under which it holds; cite one or more element ids.\n"
    "- distinctions: things a reader could confuse and must keep apart; cite element ids.\n"
    "- decisive_details: the few remaining facts that would change an answer, a boundary, an exception or a "
    "decision; rarity alone does not qualify. One element id each.\n"
    "Fewer, structural entries are better. Copy element ids exactly as they appear in [brackets] in the material "
    "and never make one up. The raw source stays available when questions are answered, so skip facts a reader "
    "can simply look up, and keep constraints, mechanisms, shared rules, exceptions and distinctions.\n"
    "Modeling instruction: " + MODELING_INSTRUCTION
)

BUDGET_NOTE = ("\nBudget: mechanisms, distinctions and decisive_details together hold at most {n} entries for this "
               "entity (attributes are not counted); keep the ones a reader would otherwise get wrong.")
SOFT_BUDGET_NOTE = ("\nSize target (soft; you judge what earns a place): the model of this whole block should stay "
                    "near {block:,} tokens over its {n} entities, about {per} tokens for this entity: its attributes "
                    "and some {k} short statements. Spend them on reusable structure (rules, conditions, exceptions, "
                    "distinctions, procedures) and leave look-up values to the raw source.")


def budget_note(read_budget: int, block_tokens: int = 0, entities: int = 0) -> str:
    """The reading prompt's budget lines (official ``budget_note``): the entry budget, plus the
    block's soft token target when the source was partitioned with budgets."""
    hard = BUDGET_NOTE.format(n=read_budget) if read_budget else ""
    if not (block_tokens and entities):
        return hard
    per = max(120, block_tokens // entities)
    k = max(2, min(read_budget or 8, per // 45))
    return hard + SOFT_BUDGET_NOTE.format(block=block_tokens, n=entities, per=per, k=k)


ABSTRACT_SYSTEM = (
    "Below are the numbered units of ONE region of a source model, each with the entity it is about. Find what "
    "holds across entities: SHARED RULES (a behaviour, contract or rule several entities follow), DISTINCTIONS "
    "(two entities or operations that behave differently where a reader would expect the same) and EXCEPTIONS "
    "(an entity that departs from a shared rule). Each item cites the unit numbers it rests on, from at least two "
    "entities; a distinction cites both sides, an exception cites the rule side and the deviating unit. When a "
    "shared rule fully covers some cited units, list them under replaces. State every item so that a unit could "
    "contradict it: no 'varies' or 'differs' without saying in which direction. Return an empty list when nothing "
    "holds across entities."
)

_VAGUE = re.compile(r"\b(vary|varies|variation|differ|differs|different|various)\b", re.IGNORECASE)
_DIRECTION = re.compile(r"\b(higher|lower|more|less|larger|smaller|only|if|when|unless|except|whereas|while|"
                        r"above|below|before|after|instead|rather|requires?|must)\b", re.IGNORECASE)


# -- per-entity reading ------------------------------------------------------------------------
@dataclass
class Claim:
    slot: Literal["attribute", "mechanism", "distinction", "detail"]
    text: str
    ids: list[str]
    name: str = ""
    value: str = ""
    conditions: list[str] = field(default_factory=list)


@dataclass
class EntityResult:
    entity: Entity
    claims: list[Claim] = field(default_factory=list)
    proposed: int = 0
    bad_ids: int = 0
    ungrounded: int = 0
    failed: str = ""


def claims_from_reading(reading: EntityReading, shown: list[str]) -> tuple[list[Claim], int, int]:
    """Claims whose ids were shown verbatim; returns (claims, proposed, dropped for invalid ids).

    Nothing is cut by count: the entry budget is the prompt's (and the schema's, for a decoder), as
    in the official reader, whose budget is an instruction and attributes are unbounded."""
    ok = set(shown)

    def keep(ids: list[str]) -> list[str]:
        return list(dict.fromkeys(i.strip() for i in ids if i.strip() in ok))

    claims: list[Claim] = []
    proposed = bad = 0
    for a in reading.attributes:
        proposed += 1
        ids, name, value = keep([a.element_id]), norm_name(a.name), clip(a.value, 200)
        if ids and name and value:
            claims.append(Claim("attribute", f"{name}: {value}", ids, name=name, value=value))
        else:
            bad += 1
    for slot, items in (("mechanism", reading.mechanisms), ("distinction", reading.distinctions)):
        for m in items:
            proposed += 1
            ids = keep(m.element_ids)
            if ids and m.statement.strip():
                conds = [clip(c, 200) for c in m.conditions if c.strip()]
                claims.append(Claim(slot, clip(m.statement), ids, conditions=conds))  # type: ignore[arg-type]
            else:
                bad += 1
    for d in reading.decisive_details:
        proposed += 1
        ids = keep([d.element_id])
        if ids and d.statement.strip():
            claims.append(Claim("detail", clip(d.statement), ids))
        else:
            bad += 1
    return claims, proposed, bad


async def read_entity(ent: Entity, region: Region, brief: str, source: Source, ctx: Context,
                      cfg: SourceLearnConfig, *, code: bool = False, block_tokens: int = 0,
                      block_entities: int = 0) -> EntityResult:
    """One reading call, then one batched grounding check over everything it claimed.

    A code entity (``code``) is read through its closure window (``entity_window``), a document family as
    900-character section excerpts; the prompt carries the entry budget, the block's soft token
    target when it has one, and the reading brief when the source has one."""
    system = (READ_SYSTEM + budget_note(cfg.read_budget, block_tokens, block_entities)
              + (f"\n\nReading brief for this source (follow it when deciding what to keep and what to skip):\n{brief}"
                 if brief else ""))
    reserve = READ_MAX_TOKENS + (len(system) + 200) // 4
    pieces = entity_window(ent, region, source) if code else []
    elements = [] if pieces else reading_elements(ent, source)
    documents = source.kind != "code"

    def build(budget: int) -> tuple[tuple[list[Message], list[str]], list[Message]]:
        if pieces:
            text, shown = render_window(pieces, budget)
        else:
            text, shown = render_material(elements, budget, EXCERPT_CHARS if documents else None)
        user = f"Entity: {ent.name}\nRegion: {region.title}\n\nMaterial:\n{text}"
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return (msgs, shown), msgs

    cap = WINDOW_CHARS + 2_000 if pieces else (GROUP_CHARS if documents else MATERIAL_CHARS)
    msgs, shown = await fit_to_window(ctx.llm, build, material_chars(ctx, reserve, cap), READ_MAX_TOKENS)
    out = EntityResult(ent)
    if not shown:
        out.failed = "no material"
        return out
    res = await ctx.llm.structured(msgs, reading_schema(cfg.read_budget), stage="construct_read", max_tokens=READ_MAX_TOKENS,
                                   choices={"element_id": shown, "element_ids": shown})  # ids copied verbatim
    if res.failed or res.value is None:
        out.failed = res.error[:200] or "reading failed"
        return out
    claims, out.proposed, out.bad_ids = claims_from_reading(res.value, shown)  # type: ignore[arg-type]
    if claims:
        subject = f"{ent.name} — "
        verdicts = await gate_batch(ctx.llm, [(subject + c.text if c.slot == "attribute" else c.text, c.ids)
                                              for c in claims], source, stage="construct_ground")
        out.ungrounded = sum(1 for ok in verdicts if not ok)
        out.claims = [c for c, ok in zip(claims, verdicts) if ok]
    return out


def entity_units(res: EntityResult, source: Source) -> list[Unit]:
    """The card (attributes, first value per name) and the statement units of one entity."""
    scope = Scope(kind="entity", keys=[res.entity.key])
    units: list[Unit] = []
    attrs: list[Attribute] = []
    for c in res.claims:
        if c.slot != "attribute":
            continue
        if any(a.name == c.name and norm_value(a.value) == norm_value(c.value) for a in attrs):
            continue
        anchors = SourceModel.stamp(c.ids, source)
        if anchors:
            attrs.append(Attribute(name=c.name, value=c.value, anchor=anchors[0]))
    if attrs:
        units.append(Unit(id=SourceModel.unit_id(res.entity.name, "card", scope), statement=res.entity.name,
                          role="card", scope=scope, attributes=attrs))
    role_of = {"mechanism": "mechanism", "distinction": "distinction", "detail": "detail"}
    for c in res.claims:
        if c.slot == "attribute":
            continue
        anchors = SourceModel.stamp(c.ids, source)
        if anchors:
            role = role_of[c.slot]
            units.append(Unit(id=SourceModel.unit_id(c.text, role, scope), statement=c.text, role=role,  # type: ignore[arg-type]
                              scope=scope, conditions=c.conditions, anchors=anchors))
    return units


# -- mechanical folding ------------------------------------------------------------------------
def _anchor_union(anchor_lists: list[list[Anchor]]) -> list[Anchor]:
    out: dict[str, Anchor] = {}
    for lst in anchor_lists:
        for a in lst:
            out.setdefault(a.element_id, a)
    return list(out.values())


def fold_prototypes(region: Region, units: list[Unit], min_entities: int, min_share: float) -> tuple[list[Unit], dict]:
    """Attribute values shared widely in a region become prototype units; matching cells leave the cards.

    A value qualifies when >= ``min_entities`` entities have it and they are >= ``min_share`` of the
    region's entities that state the attribute (official ``FOLD_SHARE``: a column a few entities lack
    still folds). Entities with a different value for that attribute are its exceptions (their cells
    stay on their cards). Cards left without attributes are removed.
    """
    keys = set(region.entity_keys)
    at = [i for i, u in enumerate(units) if u.role == "card" and u.scope.keys and u.scope.keys[0] in keys]
    left, protos, stats = _fold_cards(region, [units[i] for i in at], min_entities, min_share)
    now = dict(zip(at, left))
    out = [now.get(i, u) for i, u in enumerate(units)]
    return [u for u in out if u is not None] + protos, stats


def _fold_cards(region: Region, cards: list[Unit], min_entities: int,
                min_share: float) -> tuple[list[Unit | None], list[Unit], dict]:
    """``fold_prototypes`` on a region's own cards: each card as it stays (None: it leaves), the prototypes."""
    by_name: dict[str, list[tuple[Unit, Attribute]]] = defaultdict(list)
    for card in cards:
        for a in card.attributes:
            by_name[a.name].append((card, a))
    protos: list[Unit] = []
    folded: dict[str, str] = {}
    absorbed_cells = 0
    for name in sorted(by_name):
        owners = by_name[name]
        counts = Counter(norm_value(a.value) for _, a in owners)
        top, top_n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        n_have = len({c.scope.keys[0] for c, _ in owners})  # the entities that state this attribute
        if top_n < min_entities or top_n / max(1, n_have) < min_share:
            continue
        keep = [(c, a) for c, a in owners if norm_value(a.value) == top]
        deviating = list(dict.fromkeys(c.scope.keys[0] for c, a in owners if norm_value(a.value) != top))
        value = keep[0][1].value
        statement = f"In {region.title}, {name} is {value} for {top_n} of the {n_have} entities that state it"
        scope = Scope(kind="region", keys=[region.id])
        protos.append(Unit(id=SourceModel.unit_id(statement, "pattern", scope), statement=statement, role="pattern",
                           scope=scope, anchors=_anchor_union([[a.anchor] for _, a in keep]), exceptions=deviating))
        folded[name] = top
        absorbed_cells += top_n
    out: list[Unit | None] = []
    for u in cards:
        if folded:
            left = [a for a in u.attributes if folded.get(a.name) != norm_value(a.value)]
            out.append(u.model_copy(update={"attributes": left}) if left else None)
        else:
            out.append(u)
    return out, protos, {"prototypes": len(protos), "cells_folded": absorbed_cells}


def merge_mechanisms(region: Region, units: list[Unit], threshold: float = MERGE_OVERLAP) -> tuple[list[Unit], int]:
    """Near-duplicate mechanisms of two or more entities collapse into one regional mechanism."""
    keys = set(region.entity_keys)
    pool = [u for u in units if _is_entity_mechanism(u) and u.scope.keys[0] in keys]
    drop, merged = _merge_pool(region, pool, threshold)
    return [u for u in units if u.id not in drop] + merged, sum(len(m.absorbed) - 1 for m in merged)


def _is_entity_mechanism(u: Unit) -> bool:
    return u.role == "mechanism" and u.scope.kind == "entity" and bool(u.scope.keys)


def _merge_pool(region: Region, pool: list[Unit], threshold: float) -> tuple[set[str], list[Unit]]:
    """``merge_mechanisms`` on a region's own entity mechanisms: the ids that merge, the merged units.

    A mechanism joins the first cluster whose first member is similar enough (candidates pruned by
    ``NearDuplicates``, which finds the same first cluster a scan of all clusters does)."""
    clusters: list[list[Unit]] = []
    tokens = [tokens_of(u.statement) for u in pool]
    reps: NearDuplicates[int] = NearDuplicates(threshold, token_order(tokens))
    for u, toks in zip(pool, tokens):
        home = reps.first(toks)
        if home is not None:
            clusters[home].append(u)
        else:
            reps.add(len(clusters), toks)
            clusters.append([u])
    drop: set[str] = set()
    merged: list[Unit] = []
    for c in clusters:
        if len({u.scope.keys[0] for u in c}) < 2:
            continue
        rep = min(c, key=lambda u: -len(u.anchors))  # first of the best anchored
        scope = Scope(kind="region", keys=[region.id])
        conds = list(dict.fromkeys(x for u in c for x in u.conditions))
        merged.append(Unit(id=SourceModel.unit_id(rep.statement, "mechanism", scope), statement=rep.statement,
                           role="mechanism", scope=scope, conditions=conds,
                           anchors=_anchor_union([u.anchors for u in c]), absorbed=[u.id for u in c]))
        drop.update(u.id for u in c)
    return drop, merged


def fold_regions(regions: list[Region], units: list[Unit], min_entities: int,
                 min_share: float) -> tuple[list[Unit], Counter]:
    """``fold_prototypes`` then ``merge_mechanisms`` for each region in turn, as that loop over the
    whole list does, but each region visits only its own cards and entity mechanisms (found once by
    entity key) instead of every unit: regions x units became units."""
    slots: list[Unit | None] = list(units)
    at: dict[str, list[int]] = defaultdict(list)
    for i, u in enumerate(units):
        if u.scope.keys and (u.role == "card" or _is_entity_mechanism(u)):
            at[u.scope.keys[0]].append(i)
    added: list[Unit] = []
    fold: Counter = Counter()
    for r in regions:
        mine = sorted({i for k in r.entity_keys for i in at.get(k, ())})
        cards = [i for i in mine if slots[i] is not None and slots[i].role == "card"]  # type: ignore[union-attr]
        left, protos, fs = _fold_cards(r, [slots[i] for i in cards], min_entities, min_share)  # type: ignore[misc]
        for i, u in zip(cards, left):
            slots[i] = u
        pool = [i for i in mine if slots[i] is not None and _is_entity_mechanism(slots[i])]  # type: ignore[arg-type]
        drop, merged = _merge_pool(r, [slots[i] for i in pool], MERGE_OVERLAP)  # type: ignore[misc]
        for i in pool:
            if slots[i].id in drop:  # type: ignore[union-attr]
                slots[i] = None
        added += protos + merged
        fold.update(fs)
        fold["mechanisms_merged"] += sum(len(m.absorbed) - 1 for m in merged)
    return [u for u in slots if u is not None] + added, fold


def dedup(units: list[Unit], threshold: float = DEDUP_OVERLAP,
          place: Callable[[Unit], tuple[str, ...]] = lambda u: ()) -> tuple[list[Unit], int]:
    """Drop statements of the same role nearly identical to a better-anchored one (cards, maps exempt).

    Only units in the same ``place`` (their regions) are compared, so a rule two regions both hold
    stays in each: activation loads regions whole and must find it in either. ``place`` is called
    once per unit; the twin is the first kept unit of that role and place that is similar enough,
    found among pruned candidates (``similarity.NearDuplicates``) instead of all kept units.
    """
    ranked = sorted(range(len(units)), key=lambda i: (-len(units[i].anchors), i))
    exempt = [u.role in ("card", "map") for u in units]
    tokens = [set() if ex else tokens_of(u.statement) for u, ex in zip(units, exempt)]
    order = token_order(tokens)
    groups: dict[tuple, NearDuplicates[int]] = {}  # (role, place): the kept units a unit is compared with
    kept: dict[int, Unit] = {}
    dropped = 0
    for i in ranked:
        u = units[i]
        if exempt[i]:
            kept[i] = u
            continue
        key = (u.role, place(u))
        group = groups.get(key)
        if group is None:
            group = groups[key] = NearDuplicates(threshold, order)
        twin = group.first(tokens[i])
        if twin is None:
            kept[i] = u
            group.add(i, tokens[i])
        else:
            kept[twin] = kept[twin].model_copy(update={"absorbed": kept[twin].absorbed + [u.id] + u.absorbed})
            dropped += 1
    return [kept[i] for i in sorted(kept)], dropped


# -- abstraction pass --------------------------------------------------------------------------
def _subject(u: Unit, names: dict[str, str]) -> str:
    if u.scope.kind == "entity":
        return names.get(u.scope.keys[0], u.scope.keys[0])
    return "region-wide"


def is_vague(statement: str) -> bool:
    return bool(_VAGUE.search(statement)) and not _DIRECTION.search(statement)


def admissible(kind: str, cited: list[Unit], statement: str, region_id: str) -> bool:
    """Mechanical admission of an abstraction item (official ``abstraction_pass``): a statement that
    is not vague, resting on listed units; a shared rule on units of >= 2 entities, a distinction on
    >= 2 units, an exception on >= 1."""
    if not statement or not cited or is_vague(statement):
        return False
    if kind == "shared_rule":
        return len({u.scope.keys[0] if u.scope.kind == "entity" else f"region:{region_id}" for u in cited}) >= 2
    return len(cited) >= (2 if kind == "distinction" else 1)


async def abstract_region(region: Region, units: list[Unit], names: dict[str, str], brief: str,
                          ctx: Context) -> tuple[list[Unit], set[str], dict]:
    """Shared rules, distinctions and exceptions over a region's entity-level units (cards,
    distinctions, details: the official local level; entity mechanisms are regional there), admitted
    mechanically (``admissible``; no LLM gate: their anchors are the union of the cited units')."""
    local = [u for u in units if u.scope.kind == "entity" and u.role in ABSTRACT_ROLES]
    st = {"proposed": 0, "rejected": 0, "accepted": 0, "replaced": 0}
    if len(local) < ABSTRACT_MIN_UNITS:
        return [], set(), st
    listing, budget = [], material_chars(ctx, 1200 + len(ABSTRACT_SYSTEM) // 4)
    for i, u in enumerate(local, 1):
        line = f"{i}. ({_subject(u, names)}) {clip(u.render(), 300)}"
        if sum(len(x) + 1 for x in listing) + len(line) > budget:
            break
        listing.append(line)
    local = local[: len(listing)]
    system = ABSTRACT_SYSTEM + (f"\n\nReading brief for this source:\n{brief[:3000]}" if brief else "")
    user = f"Region: {region.title}\n\nUnits:\n" + "\n".join(listing)
    res = await ctx.llm.structured([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                   Abstraction, stage="construct_abstract", max_tokens=1200)
    if res.failed or res.value is None:
        st["failed"] = 1
        return [], set(), st
    new: list[Unit] = []
    replaced: set[str] = set()
    scope = Scope(kind="region", keys=[region.id])
    for item in res.value.items[:ABSTRACT_MAX_ITEMS]:  # type: ignore[union-attr]
        st["proposed"] += 1
        cited = [local[n - 1] for n in dict.fromkeys(item.units) if 1 <= n <= len(local)]
        stmt = clip(item.statement)
        if not admissible(item.kind, cited, stmt, region.id):
            st["rejected"] += 1
            continue
        role = {"shared_rule": "pattern", "distinction": "distinction", "exception": "exception"}[item.kind]
        anchors = _anchor_union([u.anchors + [a.anchor for a in u.attributes] for u in cited])[:ABSTRACT_MAX_ANCHORS]
        unit = Unit(id=SourceModel.unit_id(stmt, role, scope), statement=stmt, role=role, scope=scope,  # type: ignore[arg-type]
                    conditions=[clip(c, 200) for c in item.conditions if c.strip()], anchors=anchors)
        if item.kind == "shared_rule":
            cited_ids = {u.id for u in cited}
            gone = [local[n - 1].id for n in item.replaces if 1 <= n <= len(local)
                    and local[n - 1].id in cited_ids and local[n - 1].role not in ("card", "map")]
            replaced.update(gone)
            unit = unit.model_copy(update={"absorbed": list(dict.fromkeys(gone))})
            st["replaced"] += len(gone)
        new.append(unit)
        st["accepted"] += 1
    return new, replaced, st


def apply_abstractions(units: list[Unit], results: list[tuple[list[Unit], set[str]]]) -> list[Unit]:
    """What ``units = [u for u in units if u.id not in replaced] + new`` for each region's
    (new, replaced) in turn leaves, in one pass: a unit stays unless a region replaced its id, and
    a new unit also unless a LATER region did (an earlier region's replacement came before it)."""
    last: dict[str, int] = {}
    for j, (_, replaced) in enumerate(results):
        for uid in replaced:
            last[uid] = j
    return ([u for u in units if u.id not in last]
            + [u for j, (new, _) in enumerate(results) for u in new if last.get(u.id, -1) <= j])


# -- brief and maps ----------------------------------------------------------------------------
def render_brief(b: ReadingBrief) -> str:
    parts = [clip(b.purpose, 400)]
    for label, xs, n in (("User requests", b.scenarios, 8), ("Main objects", b.main_objects, 8),
                         ("Reading questions", b.reading_questions, 8), ("Usually ignore", b.ignore, 5)):
        xs = [clip(x, 160) for x in xs if x.strip()][:n]
        if xs:
            parts.append(f"{label}: " + "; ".join(xs) + ".")
    return "\n".join(p for p in parts if p)


def source_digest(source: Source, part: Partition, max_chars: int) -> str:
    """Regions with sample entity names, then evenly spaced excerpts, within ``max_chars``."""
    intro = (f"Source: {source.id} ({source.kind}, {len(source.elements)} elements, {source.n_chars} characters). "
             f"{source.description}")
    head = [intro, "Regions:"]
    for r in part.regions[:40]:
        names = [e.name for e in part.entities if e.region == r.id][:8]
        head.append(f"- {r.title}: {len(r.entity_keys)} entities (e.g. {', '.join(names)})")
    text = "\n".join(head) + "\n\nSample excerpts:\n"
    els = source.elements
    n = min(len(els), 24)
    step = max(1, len(els) // max(1, n))
    for el in els[::step][:n]:
        block = f"[{el.id}] {el.title}\n{el.excerpt(400)}\n\n"
        if len(text) + len(block) > max_chars:
            break
        text += block
    return text[:max_chars]


async def write_brief(source: Source, part: Partition, ctx: Context) -> str:
    """The reading brief of a document source; a code source gets none (the official pipeline writes
    the brief for documents only: code entities are its public symbols, found without one)."""
    if source.kind == "code":
        return ""
    digest = source_digest(source, part, material_chars(ctx, 600))
    res = await ctx.llm.structured([{"role": "system", "content": BRIEF_SYSTEM}, {"role": "user", "content": digest}],
                                   ReadingBrief, stage="construct_brief", max_tokens=500)
    return render_brief(res.value) if res.value is not None else ""  # type: ignore[arg-type]


def region_listing(region: Region, entities: list[Entity], source: Source, max_chars: int) -> str:
    lines = []
    for ent in entities:
        heads = [el.title for el in (source.element(i) for i in ent.element_ids[:12]) if el is not None]
        line = f"- {ent.name}: " + "; ".join(dict.fromkeys(heads))
        if sum(len(x) + 1 for x in lines) + len(line) > max_chars:
            lines.append(f"- ... and {len(entities) - len(lines)} more entities")
            break
        lines.append(clip(line, 300))
    return "\n".join(lines)


async def map_region(region: Region, entities: list[Entity], source: Source,
                     ctx: Context) -> tuple[list[Unit], str]:
    """Map units of a region (about + relations) and its routing description (structure only: the
    official map prompt does not see the reading brief)."""
    user = (f"Region: {region.title}\n"
            + f"\nEntities and their sections:\n{region_listing(region, entities, source, material_chars(ctx, 800))}")
    res = await ctx.llm.structured([{"role": "system", "content": MAP_SYSTEM}, {"role": "user", "content": user}],
                                   RegionMap, stage="construct_regions", max_tokens=500)
    if res.value is None:
        return [], region.description
    rmap: RegionMap = res.value  # type: ignore[assignment]
    scope = Scope(kind="region", keys=[region.id])
    everything = SourceModel.stamp(region.element_ids, source)
    units = []
    about = clip(rmap.about, 300)
    if about:
        units.append(Unit(id=SourceModel.unit_id(about, "map", scope), statement=about, role="map", scope=scope,
                          anchors=everything))
    for rel in rmap.relations[:8]:
        rel = clip(rel, 300)
        if len(rel.split()) < 4:
            continue  # an echoed name, not a relation
        named = [i for e in entities if e.name.lower() in rel.lower() for i in e.element_ids]
        units.append(Unit(id=SourceModel.unit_id(rel, "map", scope), statement=rel, role="map", scope=scope,
                          anchors=SourceModel.stamp(named, source) or everything))
    description = region.description or clip(re.split(r"(?<=[.!?])\s", about)[0], 200)
    return units, description


# -- orchestration -----------------------------------------------------------------------------
async def _bounded(sem: asyncio.Semaphore, coro):
    async with sem:
        return await coro


async def construct(source: Source, ctx: Context, cfg: SourceLearnConfig) -> SourceModel:
    """Build M0 (see module docstring); ``record_stage("M0", ...)`` is done here."""
    sem = asyncio.Semaphore(max(1, cfg.concurrency))
    part = await partition(source, ctx, cfg)
    ctx.progress(f"sourcelearn M0: {len(part.entities)} entities in {len(part.regions)} regions ({part.mode})")
    sm = SourceModel(source_id=source.id, source_fingerprint=source.fingerprint, regions=part.regions,
                     entities=part.entities)
    sm.brief = await write_brief(source, part, ctx)
    by_region: dict[str, list[Entity]] = defaultdict(list)
    for e in part.entities:
        by_region[e.region].append(e)
    regions = {r.id: r for r in sm.regions}
    budgets = block_budgets(source, sm.regions, cfg)
    code = source.kind == "code"

    maps = await asyncio.gather(*[_bounded(sem, map_region(r, by_region[r.id], source, ctx)) for r in sm.regions])
    for r, (_, desc) in zip(sm.regions, maps):
        r.description = desc
    reads = await asyncio.gather(*[_bounded(sem, read_entity(e, regions[e.region], sm.brief, source, ctx, cfg, code=code,
                                                             block_tokens=budgets.get(e.region, 0),
                                                             block_entities=len(by_region[e.region])))
                                   for e in part.entities])
    stats: dict[str, Any] = {"partition": part.stats, "entities": len(part.entities), "regions": len(sm.regions),
                             "block_budgets": budgets,
                             "read_failed": sum(1 for r in reads if r.failed),
                             "claims_proposed": sum(r.proposed for r in reads),
                             "claims_bad_ids": sum(r.bad_ids for r in reads),
                             "claims_ungrounded": sum(r.ungrounded for r in reads),
                             "claims_kept": sum(len(r.claims) for r in reads)}
    units: list[Unit] = [u for m, _ in maps for u in m]
    for res in reads:
        units.extend(entity_units(res, source))

    units, fold = fold_regions(sm.regions, units, cfg.prototype_min_entities, cfg.prototype_min_share)
    stats["folding"] = dict(fold)

    names = {e.key: e.name for e in part.entities}
    by_unit_region = sm.units_by_region(units)
    abstracted = await asyncio.gather(*[
        _bounded(sem, abstract_region(r, by_unit_region.get(r.id, []), names, sm.brief, ctx)) for r in sm.regions])
    units = apply_abstractions(units, [(new, replaced) for new, replaced, _ in abstracted])
    abst: Counter = Counter()
    for _, _, st in abstracted:
        abst.update(st)
    stats["abstraction"] = dict(abst)

    units, stats["dedup_dropped"] = dedup(units, place=lambda u: tuple(sm.unit_regions(u)))
    sm.add_all(units)
    stats["units_by_role"] = dict(Counter(u.role for u in sm.units))
    sm.record_stage("M0", **stats)
    return sm
