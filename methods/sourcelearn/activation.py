"""Activation: which part of the source model a task sees (paper Eq. 6).

Only live units count (a unit whose anchor text changed is stale and hidden). If the whole live
model renders within the budget B it is shown in full. Otherwise one router call over per-region
routing cards (title, description, entity names, attribute names, headings) picks required and
optional regions; they are loaded whole, required first, each only if it fits in what is left of
B; a region that does not fit is skipped, never cut, so its internal structure stays intact. The one
exception is the official rule for the first routed region: when it alone exceeds what is left of B,
its map units and then its units nearest the question (shared words; ties in model order) are loaded
while they fit, so a question routed to one oversized region still sees part of it, not nothing.

Deviation for small context windows: B becomes min(B, window - evidence - reply - prompt
reserve), so the notes never crowd out the Hybrid RAG evidence on an 8k local model. When the
solver's provider counts tokens exactly (local models) the fit is checked in its own tokens, not
chars / 4, which undercounts SmolLM2 on unit ids and names by up to ~40 % and overflowed its window.
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


class Route(BaseModel):
    required: bounded_list(str, 8) = Field(description="ids of regions the question cannot be answered without")
    optional: bounded_list(str, 8) = Field(default_factory=list, description="ids of regions that may help")


ROUTER_SYSTEM = (
    "You decide which parts of a source model a question needs. The model is split into regions; each is "
    "described by a routing card (id in brackets, title, description, its entities, attribute names and "
    "section headings). Return as required the regions without which the question cannot be answered, and as "
    "optional the ones that may help. Use the bracketed ids. Prefer few regions."
)


def effective_budget(cfg: SourceLearnConfig, spec: ModelSpec, evidence_tokens: int = 0, question: str = "",
                     reply_tokens: int | None = None) -> int:
    """B, shrunk to what a declared context window leaves after evidence, reply and prompt."""
    window = spec.effective_context_window()
    if not window:
        return cfg.budget_tokens
    reply = reply_tokens or spec.max_tokens
    room = window - evidence_tokens - reply - PROMPT_RESERVE - estimate_tokens(question)
    return max(0, min(cfg.budget_tokens, room))


class _Fit:
    """The window check in the solver's own tokens, when its provider counts them exactly.

    ``room`` is what the window leaves for the notes (in real tokens); ``budget`` converts it to
    the chars / 4 units regions are measured in, through the real/estimated ratio of the notes."""

    def __init__(self, budget: int, room: int | None = None, count=None, counted: dict[str, int] | None = None):
        self.budget, self.room, self._count = budget, room, count
        self._counted = dict(counted or {})  # text -> tokens: each text is tokenised once

    async def count(self, text: str) -> int:
        if text not in self._counted:
            self._counted[text] = await self._count(text) or 0
        return self._counted[text]

    @classmethod
    async def make(cls, cfg: SourceLearnConfig, ctx: Context, full: str, question: str, evidence_tokens: int,
                   evidence_text: str | None, reply: int | None) -> _Fit:
        budget = effective_budget(cfg, ctx.llm.spec, evidence_tokens, question, reply)
        window = ctx.llm.spec.effective_context_window()
        count = getattr(ctx.llm, "count_tokens", None)
        exact_full = await count(full) if window and count is not None and full else None
        if exact_full is None:
            return cls(budget)
        ev = await count(evidence_text) if evidence_text else evidence_tokens
        room = window - (ev or 0) - (await count(question) or 0) - (reply or ctx.llm.spec.max_tokens) - PROMPT_RESERVE
        ratio = exact_full / max(1, estimate_tokens(full))
        return cls(max(0, min(cfg.budget_tokens, int(room / ratio))), max(0, room), count, {full: exact_full})

    async def over(self, text: str) -> int:
        """Real tokens by which ``text`` overflows the room (0 if it fits or nothing is counted)."""
        if self.room is None or self._count is None:
            return 0
        return max(0, await self.count(text) - self.room)


def header(sm: SourceModel) -> str:
    """The part of the model shown whatever is routed: the brief and the representation policy."""
    return sm.render(units=[], regions=[])


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


async def route(sm: SourceModel, source: Source, task: Task, live: list[Unit], ctx: Context,
                budget_chars: int) -> tuple[list[str], list[str], bool]:
    """(required, optional, router_failed): one router call, ids validated, lexical fallback."""
    cards = routing_cards(sm, source, live)
    listing = "\n".join(c for _, c in cards)
    if len(listing) > budget_chars:
        cards = routing_cards(sm, source, live, max_items=4)
        listing = "\n".join(c for _, c in cards)[:budget_chars]
    user = f"Question: {task.question.strip()}\n\nRegions:\n{listing}"
    ids = [r.id for r, _ in cards]
    res = await ctx.llm.structured([{"role": "system", "content": ROUTER_SYSTEM}, {"role": "user", "content": user}],
                                   Route, stage="route", max_tokens=ROUTER_MAX_TOKENS,
                                   choices={"required": ids, "optional": ids})  # only ids that exist
    by_id = {r.id: r for r, _ in cards}
    by_region = sm.units_by_region(live)
    texts = {r.id: "\n".join(u.statement for u in by_region.get(r.id, [])) for r, _ in cards}
    if res.failed or res.value is None:
        return [], lexical_order(task.question, cards, texts), True
    required = [m for m in (_match(x, by_id) for x in res.value.required) if m]  # type: ignore[union-attr]
    optional = [m for m in (_match(x, by_id) for x in res.value.optional) if m]  # type: ignore[union-attr]
    required = list(dict.fromkeys(required))
    optional = [x for x in dict.fromkeys(optional) if x not in required]
    if not required and not optional:
        return [], lexical_order(task.question, cards, texts), False
    return required, optional, False


def nearest_units(units: list[Unit], question: str, room: int) -> list[Unit]:
    """The region's map units, then those sharing most words with the question, while they fit in ``room``
    tokens together (each unit costs its rendered line); shown in model order."""
    q = _words(question)
    ranked = sorted(range(len(units)), key=lambda i: (units[i].role != "map", -len(q & _words(units[i].render())), i))
    chosen, used = set(), 0
    for i in ranked:
        cost = estimate_tokens("\n- " + units[i].render())
        if used + cost <= room:
            chosen.add(i)
            used += cost
    return [u for i, u in enumerate(units) if i in chosen]


def load_regions(sm: SourceModel, live: list[Unit], order: list[str], budget: int,
                 question: str = "") -> tuple[str, list[str], list[str]]:
    """Whole regions in ``order`` while they fit; a unit shared by two regions is shown once. The first
    routed region, when it alone does not fit, is cut to its units nearest the question (``nearest_units``)."""
    regions = {r.id: r for r in sm.regions}
    parts = [header(sm)] if header(sm) else []
    used = estimate_tokens("\n\n".join(parts))
    placed: set[str] = set()
    loaded, skipped = [], []
    glob = [u for u in live if not sm.unit_regions(u)]
    blocks: list[tuple[str, list[Unit]]] = [(GLOBAL_BLOCK, glob)] if glob else []
    by_region = sm.units_by_region(live)
    blocks += [(rid, by_region.get(rid, [])) for rid in order if rid in regions]
    for rid, units in blocks:
        units = [u for u in units if u.id not in placed]
        if not units:
            continue
        block = ("## Whole source\n" + "\n".join("- " + u.render() for u in units) if rid == GLOBAL_BLOCK
                 else region_block(regions[rid], units))
        cost = estimate_tokens("\n\n" + block)
        if used + cost > budget and rid != GLOBAL_BLOCK and not any(r != GLOBAL_BLOCK for r in loaded):
            head = estimate_tokens("\n\n" + region_block(regions[rid], []))
            units = nearest_units(units, question, budget - used - head)
            block = region_block(regions[rid], units)
            cost = estimate_tokens("\n\n" + block)
            if not units or used + cost > budget:
                skipped.append(rid)
                continue
        elif used + cost > budget:
            skipped.append(rid)
            continue
        parts.append(block)
        used += cost
        placed.update(u.id for u in units)
        loaded.append(rid)
    return "\n\n".join(parts), loaded, skipped


async def activate(sm: SourceModel, source: Source, task: Task, ctx: Context, cfg: SourceLearnConfig, *,
                   evidence_tokens: int = 0, evidence_text: str | None = None) -> tuple[str, dict[str, Any]]:
    """The notes for one task and what was activated (tokens, regions, whether the router ran).

    ``evidence_text``: the rendered evidence, counted exactly when the solver's tokenizer is known."""
    live = sm.live_units(source)
    reply = getattr(ctx.benchmark, "answer_max_tokens", None)  # the benchmark may cap the answer's length
    full = sm.render(live)
    fit = await _Fit.make(cfg, ctx, full, task.question, evidence_tokens, evidence_text, reply)
    budget = fit.budget
    stats: dict[str, Any] = {"budget": budget, "n_units": len(sm.units), "n_live": len(live),
                             "n_stale": len(sm.units) - len(live), "router_used": False, "router_failed": False}
    if fit.room is not None:
        stats["room_tokens"] = fit.room  # exact tokens the window leaves for the notes
    if estimate_tokens(full) <= budget and not await fit.over(full):
        by_region = sm.units_by_region(live)
        stats.update(mode="all", tokens=estimate_tokens(full), regions_loaded=[r.id for r in sm.regions
                                                                                if by_region.get(r.id)])
        return full, stats
    router_chars = max(2000, (budget or cfg.budget_tokens) * 4)
    required, optional, failed = await route(sm, source, task, live, ctx, router_chars)
    text, loaded, skipped = load_regions(sm, live, required + optional, budget, task.question)
    for _ in range(4):  # the ratio of a subset can differ from the whole model's: shrink until it fits
        excess = await fit.over(text)
        if not excess:
            break
        budget = max(0, budget - int(excess * estimate_tokens(text) / max(1, await fit.count(text))) - 16)
        text, loaded, skipped = load_regions(sm, live, required + optional, budget, task.question)
    stats.update(mode="routed", router_used=True, router_failed=failed, required=required, optional=optional,
                 regions_loaded=loaded, regions_skipped=skipped, tokens=estimate_tokens(text), budget=budget)
    return text, stats
