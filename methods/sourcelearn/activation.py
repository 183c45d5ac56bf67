"""Activation: which part of the source model a task sees (paper Eq. 6; official ``MRetriever``).

Only live units count (a unit whose anchor text changed is stale and hidden). The budget B is
measured as the official ``m_tokens`` measures a model: a quarter of the characters of each unit's
statement and of its conditions, map units excluded (``m_tokens``), not the rendered text. If the
whole live model is within B it is shown in full. Otherwise one router call over per-region routing
cards (title, description, entity names, attribute names, headings), with the official mechanical
hints (entities the question names, heading-word overlaps), ranks at most 4 regions, required or
optional; a region whose entity the question names is always a candidate. Regions are loaded
whole, required first, each costing its statements (a quarter of their characters, maps
included, as the official block loader counts) and loaded only if it fits in what is left of B; a
region that does not fit is skipped, never cut. The exception is the first routed region: when it
alone exceeds what is left of B, its map units and then its units nearest the question are loaded
while they fit. What the solver sees is the model alone: no reading brief and no representation
policy (the official answerer shows neither).

Deviation for small context windows: the rendered notes must also fit what the window leaves after
evidence, reply and prompt reserve, checked in the solver's own tokens when its provider counts them
exactly (local models), else chars / 4; B shrinks until they do.

A model with a single region over B is not routed: its map units and the units nearest the question
are shown while their m_tokens fit (the official lexical mode).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from sourcebench.harness.data import Source, Task, estimate_tokens
from sourcebench.harness.schema_limits import bounded_list

from .config import SourceLearnConfig
from .model import Region, SourceModel, Unit
from .regions import routing_card

if TYPE_CHECKING:
    from sourcebench.harness.llm import ModelSpec
    from sourcebench.harness.method import Context

PROMPT_RESERVE = 400  # tokens for the answer prompt's own wording and the question
ROUTER_MAX_TOKENS = 300
GLOBAL_BLOCK = "(whole source)"


MAX_BLOCKS = 4  # regions one question may load (the official router's maxItems)


class Route(BaseModel):
    required: bounded_list(str, MAX_BLOCKS) = Field(description="ids of regions the question cannot be answered without")
    optional: bounded_list(str, MAX_BLOCKS) = Field(default_factory=list, description="ids of regions that may help")


ROUTER_SYSTEM = (
    "You decide which parts of a source model a question needs. The model is split into regions; each is "
    "described by a routing card (id in brackets, title, description, its entities, attribute names and "
    "section headings). First work out which entities the question names or implies and what it asks about. "
    "Then return, at most 4 in all, as required the regions without which the question cannot be answered and "
    "as optional the ones that may help. The mechanical hints are certain: an exact entity match says which "
    "region holds that entity. Before returning a single region, check that no second one is needed for "
    "another entity, a procedure or a shared rule the question involves. Use the bracketed ids; do not answer."
)


def effective_budget(cfg: SourceLearnConfig, spec: ModelSpec, evidence_tokens: int = 0, question: str = "",
                     reply_tokens: int | None = None) -> int:
    """Estimated tokens a declared context window leaves for the notes after evidence, reply and
    prompt, at most B (B itself without a window)."""
    window = spec.effective_context_window()
    if not window:
        return cfg.budget_tokens
    reply = reply_tokens or spec.max_tokens
    room = window - evidence_tokens - reply - PROMPT_RESERVE - estimate_tokens(question)
    return max(0, min(cfg.budget_tokens, room))


def statement_text(u: Unit) -> str:
    """A unit's statement as the official model stores it: a card is its attribute rows, a prototype
    names its exceptions."""
    if u.role == "card":
        return "; ".join(f"{a.name}: {a.value}" for a in u.attributes)
    return u.statement + (f" (exceptions: {', '.join(u.exceptions)})" if u.exceptions else "")


def m_tokens(units: list[Unit]) -> int:
    """The size of a model against B (official ``m_tokens``): statement and conditions, a quarter of
    their characters each, map units not counted."""
    return sum(len(statement_text(u)) // 4 + sum(len(c) for c in u.conditions) // 4 for u in units if u.role != "map")


def load_cost(units: list[Unit]) -> int:
    """What loading a routed region costs (the official block loader): its statements, maps included."""
    return sum(len(statement_text(u)) // 4 for u in units)


class _Fit:
    """The window check of the rendered notes: in the solver's own tokens when its provider counts
    them exactly, else chars / 4; no check without a declared window."""

    def __init__(self, room: int | None = None, count=None, exact: bool = False):
        self.room, self._count, self.exact = room, count, exact
        self._counted: dict[str, int] = {}  # text -> tokens: each text is tokenised once

    async def count(self, text: str) -> int:
        if text not in self._counted:
            self._counted[text] = (await self._count(text) or 0) if self.exact else estimate_tokens(text)
        return self._counted[text]

    @classmethod
    async def make(cls, cfg: SourceLearnConfig, ctx: Context, full: str, question: str, evidence_tokens: int,
                   evidence_text: str | None, reply: int | None) -> _Fit:
        window = ctx.llm.spec.effective_context_window()
        if not window:
            return cls()
        count = getattr(ctx.llm, "count_tokens", None)
        exact = count is not None and bool(full) and await count(full) is not None
        if not exact:
            return cls(effective_budget(cfg, ctx.llm.spec, evidence_tokens, question, reply))
        ev = await count(evidence_text) if evidence_text else evidence_tokens
        room = window - (ev or 0) - (await count(question) or 0) - (reply or ctx.llm.spec.max_tokens) - PROMPT_RESERVE
        return cls(max(0, room), count, exact=True)

    async def over(self, text: str) -> int:
        """Tokens by which ``text`` overflows the room (0 if it fits or there is no window)."""
        if self.room is None:
            return 0
        return max(0, await self.count(text) - self.room)


def without_header(sm: SourceModel) -> SourceModel:
    """The model as the solver sees it: units only (the brief and the policy serve learning)."""
    return sm.model_copy(update={"brief": "", "policy": []}) if sm.brief or sm.policy else sm


def region_block(region: Region, units: list[Unit]) -> str:
    head = f"## Region {region.title}" + (f" — {region.description}" if region.description else "")
    return head + "\n" + "\n".join("- " + u.render() for u in units)


def routing_cards(sm: SourceModel, source: Source, live: list[Unit], max_items: int = 12) -> list[tuple[Region, str]]:
    out = []
    by_region = sm.units_by_region(live)
    entities = sm.layout().entities_by_region
    for r in sm.regions:
        units = by_region.get(r.id, [])
        if not units:
            continue
        names = [e.name for e in entities.get(r.id, [])]
        attrs = [a.name for u in units if u.role == "card" for a in u.attributes]
        heads = [el.title for el in (source.element(i) for i in r.element_ids[:200]) if el is not None]
        out.append((r, routing_card(r, names, attrs, heads, max_items)))
    return out


def _match(raw: str, regions: dict[str, Region]) -> str | None:
    key = raw.strip().strip("[]").strip()
    if key in regions:
        return key
    low = {r.title.lower(): rid for rid, r in regions.items()}
    return low.get(key.lower())


_STOP = {"the", "and", "for", "are", "was", "were", "does", "did", "have", "has", "had", "what", "who", "whom",
         "which", "where", "when", "how", "why", "with", "that", "this", "from", "into", "of", "is", "can", "not"}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]{3,}", text.lower()) if w not in _STOP}


def lexical_order(question: str, cards: list[tuple[Region, str]], texts: dict[str, str]) -> list[str]:
    """Fallback routing when the router call fails: regions whose card or units share words with the
    question, most shared first (ties in model order)."""
    q = _words(question)
    scored = [(len(q & _words(card + "\n" + texts.get(r.id, ""))), i, r.id) for i, (r, card) in enumerate(cards)]
    return [rid for s, _, rid in sorted(scored, key=lambda x: (-x[0], x[1])) if s > 0]


def mechanical_hints(sm: SourceModel, source: Source, question: str,
                     region_ids: list[str]) -> tuple[str, list[str]]:
    """The official routing hints (``_mech_hints``): entities whose name (6 characters or more) the
    question contains, with their region, and regions with headings sharing >= 2 words with the
    question. Returns (hint lines, regions of the named entities, in model order)."""
    q = question.lower().replace("_", " ")
    qt = _words(question)
    wanted = set(region_ids)
    hits: list[tuple[str, str]] = []
    for e in sm.entities:
        name = e.name.lower().replace("_", " ").strip()
        if e.region in wanted and len(name) >= 6 and name in q:
            hits.append((e.name, e.region))
    topics: list[tuple[str, int]] = []
    regions = {r.id: r for r in sm.regions}
    for rid in region_ids:
        heads = {el.title for el in (source.element(i) for i in regions[rid].element_ids[:400]) if el is not None}
        score = sum(1 for h in heads if len(_words(h) & qt) >= 2)
        if score:
            topics.append((rid, score))
    lines = []
    if hits:
        lines.append("Exact entity matches: " + "; ".join(f"{n} -> [{r}]" for n, r in hits[:8]))
    if topics:
        topics.sort(key=lambda x: -x[1])
        lines.append("Heading-word overlaps: " + ", ".join(f"[{r}] ({k})" for r, k in topics[:4]))
    named = [rid for rid in region_ids if rid in {r for _, r in hits}]
    return ("\n".join(lines) or "(none)"), named


async def route(sm: SourceModel, source: Source, task: Task, live: list[Unit], ctx: Context,
                budget_chars: int) -> tuple[list[str], list[str], bool]:
    """(required, optional, router_failed): one router call, ids validated, at most ``MAX_BLOCKS``
    regions; regions of entities the question names are always candidates; lexical fallback."""
    cards = routing_cards(sm, source, live)
    listing = "\n".join(c for _, c in cards)
    if len(listing) > budget_chars:
        cards = routing_cards(sm, source, live, max_items=4)
        listing = "\n".join(c for _, c in cards)[:budget_chars]
    ids = [r.id for r, _ in cards]
    hints, named = mechanical_hints(sm, source, task.question, ids)
    user = f"Question: {task.question.strip()}\n\nMechanical hints:\n{hints}\n\nRegions:\n{listing}"
    res = await ctx.llm.structured([{"role": "system", "content": ROUTER_SYSTEM}, {"role": "user", "content": user}],
                                   Route, stage="route", max_tokens=ROUTER_MAX_TOKENS,
                                   choices={"required": ids, "optional": ids})  # only ids that exist
    by_id = {r.id: r for r, _ in cards}
    by_region = sm.units_by_region(live)
    texts = {r.id: "\n".join(u.statement for u in by_region.get(r.id, [])) for r, _ in cards}
    if res.failed or res.value is None:
        order = list(dict.fromkeys(named + lexical_order(task.question, cards, texts)))
        return [], order, True
    required = [m for m in (_match(x, by_id) for x in res.value.required) if m]  # type: ignore[union-attr]
    optional = [m for m in (_match(x, by_id) for x in res.value.optional) if m]  # type: ignore[union-attr]
    ranked = [(r, True) for r in dict.fromkeys(required)]
    ranked += [(o, False) for o in dict.fromkeys(optional) if o not in dict(ranked)]
    ranked += [(n, True) for n in named if n not in dict(ranked)]  # named entities: always candidates
    ranked = ranked[:MAX_BLOCKS]
    if not ranked:
        return [], lexical_order(task.question, cards, texts), False
    return [r for r, req in ranked if req], [r for r, req in ranked if not req], False


def nearest_units(units: list[Unit], question: str, room: int) -> list[Unit]:
    """The region's map units, then those sharing most words with the question, while their
    statements fit in ``room``; shown in model order."""
    q = _words(question)
    ranked = sorted(range(len(units)), key=lambda i: (units[i].role != "map", -len(q & _words(units[i].render())), i))
    chosen, used = set(), 0
    for i in ranked:
        cost = load_cost([units[i]])
        if used + cost <= room:
            chosen.add(i)
            used += cost
    return [u for i, u in enumerate(units) if i in chosen]


def load_regions(sm: SourceModel, live: list[Unit], order: list[str], budget: int,
                 question: str = "") -> tuple[str, list[str], list[str], list[Unit]]:
    """Whole regions in ``order`` while their statements fit ``budget`` (``load_cost``); a unit shared
    by two regions is shown once. The first routed region, when it alone does not fit, is cut to its
    units nearest the question (``nearest_units``). Returns (text, loaded, skipped, units shown)."""
    regions = {r.id: r for r in sm.regions}
    parts: list[str] = []
    used = 0
    placed: set[str] = set()
    shown: list[Unit] = []
    loaded, skipped = [], []
    glob = [u for u in live if not sm.unit_regions(u)]
    blocks: list[tuple[str, list[Unit]]] = [(GLOBAL_BLOCK, glob)] if glob else []
    by_region = sm.units_by_region(live)
    blocks += [(rid, by_region.get(rid, [])) for rid in order if rid in regions]
    for rid, units in blocks:
        units = [u for u in units if u.id not in placed]
        if not units:
            continue
        cost = load_cost(units)
        if used + cost > budget and rid != GLOBAL_BLOCK and not any(r != GLOBAL_BLOCK for r in loaded):
            units = nearest_units(units, question, budget - used)
            cost = load_cost(units)
            if not units:
                skipped.append(rid)
                continue
        elif used + cost > budget:
            skipped.append(rid)
            continue
        parts.append("## Whole source\n" + "\n".join("- " + u.render() for u in units) if rid == GLOBAL_BLOCK
                     else region_block(regions[rid], units))
        used += cost
        placed.update(u.id for u in units)
        shown += units
        loaded.append(rid)
    return "\n\n".join(parts), loaded, skipped, shown


async def activate(sm: SourceModel, source: Source, task: Task, ctx: Context, cfg: SourceLearnConfig, *,
                   evidence_tokens: int = 0, evidence_text: str | None = None) -> tuple[str, dict[str, Any]]:
    """The notes for one task and what was activated (m_tokens, regions, whether the router ran).

    ``evidence_text``: the rendered evidence, counted exactly when the solver's tokenizer is known."""
    live = sm.live_units(source)
    view = without_header(sm)
    reply = getattr(ctx.benchmark, "answer_max_tokens", None)  # the benchmark may cap the answer's length
    full = view.render(live)
    fit = await _Fit.make(cfg, ctx, full, task.question, evidence_tokens, evidence_text, reply)
    budget = cfg.budget_tokens
    stats: dict[str, Any] = {"budget": budget, "n_units": len(sm.units), "n_live": len(live),
                             "n_stale": len(sm.units) - len(live), "router_used": False, "router_failed": False}
    if fit.room is not None:
        stats["room_tokens"] = fit.room  # what the window leaves for the rendered notes
    if m_tokens(live) <= budget and not await fit.over(full):
        by_region = sm.units_by_region(live)
        stats.update(mode="all", tokens=m_tokens(live), text_tokens=estimate_tokens(full),
                     regions_loaded=[r.id for r in sm.regions if by_region.get(r.id)])
        return full, stats
    if fit.room is not None:
        budget = min(budget, fit.room)  # statements cost less than their rendering: a start, checked below
    by_region = sm.units_by_region(live)
    occupied = [r.id for r in sm.regions if by_region.get(r.id)]
    if len(occupied) <= 1:  # one region: no routing, its units nearest the question (official "lexical")
        text, shown = lexical_units(view, live, budget, task.question)
        for _ in range(6):
            excess = await fit.over(text)
            if not excess:
                break
            n = await fit.count(text)
            budget = max(0, int(m_tokens(shown) * (n - excess) / max(1, n)) - 16)
            text, shown = lexical_units(view, live, budget, task.question)
        stats.update(mode="lexical", regions_loaded=occupied, tokens=m_tokens(shown),
                     text_tokens=estimate_tokens(text), budget=budget)
        return text, stats
    required, optional, failed = await route(sm, source, task, live, ctx, max(2000, budget * 4))
    text, loaded, skipped, shown = load_regions(view, live, required + optional, budget, task.question)
    for _ in range(6):  # the rendered notes must also fit the window: shrink B until they do
        excess = await fit.over(text)
        if not excess:
            break
        n = await fit.count(text)
        budget = max(0, int(load_cost(shown) * (n - excess) / max(1, n)) - 16)
        text, loaded, skipped, shown = load_regions(view, live, required + optional, budget, task.question)
    stats.update(mode="routed", router_used=True, router_failed=failed, required=required, optional=optional,
                 regions_loaded=loaded, regions_skipped=skipped, tokens=m_tokens(shown),
                 text_tokens=estimate_tokens(text), budget=budget)
    return text, stats


def lexical_units(sm: SourceModel, live: list[Unit], budget: int, question: str) -> tuple[str, list[Unit]]:
    """A model of one region over B (official lexical Retrieve_M): its map units, then the units
    sharing most words with the question, then the rest in model order, each taken while its
    m_tokens fit (a unit that does not fit is passed over); shown in model order."""
    q = _words(question)
    maps = [u for u in live if u.role == "map"]
    rest = [u for u in live if u.role != "map"]
    ranked = sorted(range(len(rest)), key=lambda i: (-len(q & _words(statement_text(rest[i]))), i))
    chosen, spent = set(), 0
    for i in ranked:
        cost = m_tokens([rest[i]])
        if spent + cost <= budget:
            chosen.add(rest[i].id)
            spent += cost
    shown = maps + [u for u in rest if u.id in chosen]
    keep = {u.id for u in shown}
    return sm.render([u for u in live if u.id in keep]), shown
