"""Entities and regions: how a source is carved up before it is read.

Entities are what the model is organised around: document families (the elements of one article
or file), public top-level code symbols (plus whole modules that define none), or API records.
Regions group entities so that activation can load coherent parts whole: the source's own
top-level folders when it has them; otherwise, for a large flat source (>= ``large_source_chars``),
blocks proposed by the LLM with a one-line routing description; for a small flat source,
deterministic blocks (by APIBench ``domain`` when present, then alphabetical, ~10 entities each).
A folder with more than 30 entities is split the same way (LLM blocks in a large source, blocks of
whole files otherwise), so that a relevant region can always be loaded whole at task time.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from sourcebench.harness.data import Element, Source

from .model import Entity, Region

if TYPE_CHECKING:
    from sourcebench.harness.method import Context

    from .config import SourceLearnConfig

FAMILY_CHARS = 16_000  # a code module without public symbols longer than this is read as consecutive parts
EXCERPT_CHARS = 900  # EXCERPT_CHARS: what a document reading shows of each section
GROUP_CHARS = 60_000  # GROUP_CHARS: one document reading's excerpts (whole files, each section + 80 for its id)
BLOCK_SIZE = 10  # target entities per deterministic block
MAX_REGION_ENTITIES = 30  # a folder with more entities is split into blocks
ROOT_REGION = "(top level)"
CATCH_ALL = "other"
_TEST_FILE = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$|(^|/)conftest\.py$")


@dataclass
class Partition:
    """The result of carving a source: entities (with their region set) and the regions."""

    entities: list[Entity]
    regions: list[Region]
    mode: str  # folders | blocks | llm-blocks
    stats: dict[str, Any] = field(default_factory=dict)


# -- entities ----------------------------------------------------------------------------------
def family_key(el: Element) -> str:
    """The document family an element belongs to: its entity, else its path, else its id stem."""
    ent = el.metadata.get("entity")
    if isinstance(ent, str) and ent.strip():
        return ent.strip()
    return el.path or el.id.split("#", 1)[0]


def _stem(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name else name


def _split_long(key: str, name: str, els: list[Element]) -> list[tuple[str, str, list[Element]]]:
    """Split an over-long code module into consecutive parts so each part can be read whole."""
    if sum(len(e.text) for e in els) <= FAMILY_CHARS or len(els) == 1:
        return [(key, name, els)]
    parts: list[list[Element]] = [[]]
    size = 0
    for e in els:
        if parts[-1] and size + len(e.text) > FAMILY_CHARS:
            parts.append([])
            size = 0
        parts[-1].append(e)
        size += len(e.text)
    return [(f"{key}@{i}", f"{name} (part {i})", p) for i, p in enumerate(parts, 1)]


def excerpt_size(el: Element) -> int:
    """What a section costs in a document reading: its excerpt and its id line."""
    return min(len(el.text), EXCERPT_CHARS) + 80


def _document_batches(key: str, name: str, els: list[Element]) -> list[tuple[str, str, list[Element]]]:
    """A document family as the readings that show it: whole files of 900-character section excerpts,
    a new reading when the next file would take one past GROUP_CHARS (the official ``_batches``)."""
    by_file: dict[str, list[Element]] = defaultdict(list)
    for e in els:
        by_file[e.path or e.id.split("#", 1)[0]].append(e)
    parts: list[list[Element]] = []
    size = 0
    for group in by_file.values():
        n = sum(excerpt_size(e) for e in group)
        if not parts or (parts[-1] and size + n > GROUP_CHARS):
            parts.append([])
            size = 0
        parts[-1].extend(group)
        size += n
    if len(parts) == 1:
        return [(key, name, parts[0])]
    return [(f"{key}@{i}", f"{name} (part {i})", p) for i, p in enumerate(parts, 1)]


def _document_entities(source: Source) -> list[Entity]:
    fams: dict[str, list[Element]] = defaultdict(list)
    names: dict[str, str] = {}
    for el in source.elements:
        k = family_key(el)
        fams[k].append(el)
        ent = el.metadata.get("entity")
        names.setdefault(k, ent if isinstance(ent, str) and ent.strip() else _stem(k))
    out = []
    for k, els in fams.items():
        for key, name, part in _document_batches(k, names[k], els):
            out.append(Entity(key=key, name=name, region="", element_ids=[e.id for e in part]))
    return out


def is_test_file(path: str) -> bool:
    return bool(_TEST_FILE.search(path))


def _code_entities(source: Source) -> list[Entity]:
    """Public top-level symbols (a class with its methods); a module without any is one entity.

    Test files are not read (they stay retrievable by Hybrid RAG), as in the official compiler.
    """
    by_path: dict[str, list[Element]] = defaultdict(list)
    for el in source.elements:
        by_path[el.path or el.id.split("#", 1)[0]].append(el)
    out: list[Entity] = []
    for path, els in by_path.items():
        if is_test_file(path):
            continue
        public = [e for e in els if e.kind == "symbol" and "." not in e.title and not e.title.startswith("_")]
        if public:
            for sym in public:
                members = [sym.id] + [e.id for e in els if e.kind == "symbol" and e.title.startswith(sym.title + ".")]
                out.append(Entity(key=sym.id, name=sym.title, region="", element_ids=members))
            continue
        for key, name, part in _split_long(path, path, els):
            out.append(Entity(key=key, name=name, region="", element_ids=[e.id for e in part]))
    return out


def _api_entities(source: Source) -> list[Entity]:
    return [Entity(key=el.id, name=el.title, region="", element_ids=[el.id]) for el in source.elements]


def find_entities(source: Source) -> list[Entity]:
    """Entities in source order, each with its element ids; ``region`` is filled by ``partition``."""
    if source.kind == "code":
        return _code_entities(source)
    if source.kind == "api_docs":
        return _api_entities(source)
    return _document_entities(source)


# -- folder regions ----------------------------------------------------------------------------
def folder_of(path: str, depth: int) -> str:
    parts = path.split("/")
    return parts[depth] if len(parts) > depth + 1 else ROOT_REGION


def folder_depth(paths: list[str]) -> int:
    """Skip leading folders every path shares (a repo wrapped in ``pkg/``) so regions are useful."""
    split = [p.split("/") for p in paths]
    depth = 0
    while split and all(len(s) > depth + 1 for s in split) and len({s[depth] for s in split}) == 1:
        depth += 1
    return depth


def has_folders(source: Source) -> bool:
    return any("/" in (e.path or "") for e in source.elements)


def folder_partition(source: Source, entities: list[Entity]) -> Partition:
    paths = [e.path or e.id.split("#", 1)[0] for e in source.elements]
    depth = folder_depth(paths)
    reg_of_el = {e.id: folder_of(p, depth) for e, p in zip(source.elements, paths)}
    order = list(dict.fromkeys(reg_of_el.values()))
    regions = {r: Region(id=r, title=r) for r in order}
    for el in source.elements:
        regions[reg_of_el[el.id]].element_ids.append(el.id)
    ents = []
    for ent in entities:
        r = reg_of_el[ent.element_ids[0]]
        regions[r].entity_keys.append(ent.key)
        ents.append(ent.model_copy(update={"region": r}))
    return Partition(ents, list(regions.values()), "folders", {"folder_depth": depth})


# -- deterministic blocks ----------------------------------------------------------------------
def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "block"


def _chunks(items: list[Entity], size: int) -> list[list[Entity]]:
    """Balanced consecutive chunks of at most ``size`` (51 -> 9, 9, 9, 8, 8, 8)."""
    n = max(1, math.ceil(len(items) / size))
    base, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + base + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def _group_label(source: Source, ent: Entity) -> str:
    el = source.element(ent.element_ids[0])
    dom = el.metadata.get("domain") if el is not None else None
    return str(dom).strip() if dom else ""


def _make_region(rid: str, title: str, ents: list[Entity], description: str = "") -> Region:
    return Region(id=rid, title=title, description=description,
                  element_ids=[i for e in ents for i in e.element_ids], entity_keys=[e.key for e in ents])


def block_partition(source: Source, entities: list[Entity], size: int = BLOCK_SIZE, prefix: str = "") -> Partition:
    """Flat, small sources: group by domain (APIBench) when present, then alphabetical blocks."""
    groups: dict[str, list[Entity]] = defaultdict(list)
    for ent in entities:
        groups[_group_label(source, ent)].append(ent)
    regions, assigned = [], {}
    for label in sorted(groups):
        members = sorted(groups[label], key=lambda e: (e.name.lower(), e.key))
        chunks = _chunks(members, size)
        for i, chunk in enumerate(chunks, 1):
            span = f"{chunk[0].name} – {chunk[-1].name}" if len(chunk) > 1 else chunk[0].name
            title = f"{label}: {span}" if label else span
            rid = prefix + (f"{_slug(label)}-{i:02d}" if label else f"block-{len(regions) + 1:02d}")
            regions.append(_make_region(rid, (prefix + title) if prefix else title, chunk))
            assigned.update({e.key: rid for e in chunk})
    ents = [e.model_copy(update={"region": assigned[e.key]}) for e in entities]
    return Partition(ents, regions, "blocks", {})


def path_blocks(entities: list[Entity], prefix: str, size: int = BLOCK_SIZE) -> list[Region]:
    """Split an oversized folder deterministically: files stay together, packed in path order."""
    by_path: dict[str, list[Entity]] = defaultdict(list)
    for e in entities:
        by_path[e.element_ids[0].split("#", 1)[0]].append(e)
    blocks: list[list[Entity]] = [[]]
    for path in sorted(by_path):
        group = by_path[path]
        if blocks[-1] and len(blocks[-1]) + len(group) > size:
            blocks.append([])
        blocks[-1].extend(group)
    return [_make_region(f"{prefix}block-{i:02d}", f"{prefix}{b[0].name} – {b[-1].name}", b)
            for i, b in enumerate(blocks, 1) if b]


# -- LLM-proposed blocks (large flat sources) --------------------------------------------------
class ProposedBlock(BaseModel):
    title: str = Field(description="a short name for the block")
    description: str = Field(description="one line saying which questions this block answers (for routing)")
    entities: list[int] = Field(description="numbers of the entities in this block")


class ProposedBlocks(BaseModel):
    blocks: list[ProposedBlock]


BLOCKS_SYSTEM = (
    "You organise a large knowledge source into coherent blocks so that a reader can later load only the "
    "blocks a question needs. Put entities that are about the same kind of thing, or that are often needed "
    "together, in one block. Every entity belongs to exactly one block. Give each block a short title and a "
    "one-line routing description that says what a question must be about for this block to help."
)


def entity_hint(source: Source, ent: Entity, chars: int = 90) -> str:
    el = source.element(ent.element_ids[0])
    text = re.sub(r"\s+", " ", el.text).strip() if el is not None else ""
    return text[:chars]


def blocks_prompt(source: Source, entities: list[Entity], max_chars: int) -> str | None:
    """The numbered entity list, hints shortened until it fits; None if even bare names do not."""
    target = max(4, round(len(entities) / BLOCK_SIZE))
    head = (f"Source: {source.id} ({source.kind}). {source.description}\n"
            f"Propose about {target} blocks of roughly {BLOCK_SIZE} entities each.\n\nEntities:\n")
    for hint_chars in (90, 40, 0):
        lines = []
        for i, ent in enumerate(entities, 1):
            hint = entity_hint(source, ent, hint_chars) if hint_chars else ""
            lines.append(f"{i}. {ent.name}" + (f" — {hint}" if hint else ""))
        text = head + "\n".join(lines)
        if len(text) <= max_chars:
            return text
    return None


def validate_blocks(proposed: list[ProposedBlock], entities: list[Entity],
                    prefix: str = "") -> tuple[list[Region], dict[str, int]]:
    """Each entity exactly once (first block wins, unknown numbers dropped); the rest -> catch-all block(s)."""
    seen: set[int] = set()
    regions: list[Region] = []
    dup = unknown = 0
    for b in proposed:
        members = []
        for n in b.entities:
            if not 1 <= n <= len(entities):
                unknown += 1
            elif n in seen:
                dup += 1
            else:
                seen.add(n)
                members.append(entities[n - 1])
        if members:
            rid = f"{prefix}block-{len(regions) + 1:02d}"
            regions.append(_make_region(rid, prefix + (b.title.strip() or rid), members, b.description.strip()))
    rest = sorted((e for i, e in enumerate(entities, 1) if i not in seen), key=lambda e: (e.name.lower(), e.key))
    chunks = _chunks(rest, BLOCK_SIZE) if rest else []
    for i, chunk in enumerate(chunks, 1):  # a big remainder is still split, so it can be routed to
        rid = prefix + (CATCH_ALL if len(chunks) == 1 else f"{CATCH_ALL}-{i:02d}")
        regions.append(_make_region(rid, f"{prefix}Other entities ({chunk[0].name} – {chunk[-1].name})", chunk,
                                    "entities not placed in any proposed block"))
    return regions, {"duplicate_assignments": dup, "unknown_numbers": unknown, "unassigned": len(rest)}


async def llm_block_partition(source: Source, entities: list[Entity], ctx: Context, prefix: str = "") -> Partition:
    """One LLM call proposing blocks; deterministic blocks if the list does not fit or the call fails."""
    window = ctx.llm.spec.effective_context_window()
    max_tokens = min(4000, 40 + 12 * len(entities) + 60 * math.ceil(len(entities) / BLOCK_SIZE))
    max_chars = int((window - max_tokens - 400) * ctx.llm.chars_per_token) if window else 400_000
    prompt = blocks_prompt(source, entities, max_chars)
    if prompt is None:
        part = block_partition(source, entities, prefix=prefix)
        part.stats["llm_blocks"] = "entity list does not fit the context window; deterministic blocks"
        return part
    res = await ctx.llm.structured([{"role": "system", "content": BLOCKS_SYSTEM}, {"role": "user", "content": prompt}],
                                   ProposedBlocks, stage="construct_regions", max_tokens=max_tokens)
    if res.failed or res.value is None:
        part = block_partition(source, entities, prefix=prefix)
        part.stats["llm_blocks"] = f"block proposal failed ({res.error[:120]}); deterministic blocks"
        return part
    regions, vstats = validate_blocks(res.value.blocks, entities, prefix)  # type: ignore[union-attr]
    region_of = {k: r.id for r in regions for k in r.entity_keys}
    ents = [e.model_copy(update={"region": region_of[e.key]}) for e in entities]
    return Partition(ents, regions, "llm-blocks", vstats)


async def split_large_folders(source: Source, part: Partition, ctx: Context, cfg: SourceLearnConfig) -> Partition:
    """Folders with more than MAX_REGION_ENTITIES entities are split into blocks so that activation can
    still load something whole: LLM-proposed blocks in a large source, file-packed blocks otherwise."""
    regions: list[Region] = []
    region_of: dict[str, str] = {}
    n_split = 0
    by_region: dict[str, list[Entity]] = defaultdict(list)  # one pass, not one per folder
    for e in part.entities:
        by_region[e.region].append(e)
    for r in part.regions:
        members = by_region.get(r.id, [])
        if len(members) <= MAX_REGION_ENTITIES:
            regions.append(r)
            continue
        n_split += 1
        prefix = f"{r.id}/"
        if source.n_chars >= cfg.large_source_chars:
            subs = (await llm_block_partition(source, members, ctx, prefix)).regions
        else:
            subs = path_blocks(members, prefix)
        regions.extend(subs)
        region_of.update({k: s.id for s in subs for k in s.entity_keys})
    if not n_split:
        return part
    ents = [e.model_copy(update={"region": region_of.get(e.key, e.region)}) for e in part.entities]
    return Partition(ents, regions, part.mode, {**part.stats, "folders_split": n_split})


async def partition(source: Source, ctx: Context, cfg: SourceLearnConfig) -> Partition:
    """Entities and regions of a source (LLM calls only for large sources without usable folders, or
    for oversized folders of a large source).

    Folders count only when they yield at least two regions (``api/0000`` paths are not folders).
    """
    entities = find_entities(source)
    if not entities:
        return Partition([], [], "empty", {})
    part = folder_partition(source, entities) if has_folders(source) else None
    if part is not None and len(part.regions) >= 2:
        part = await split_large_folders(source, part, ctx, cfg)
    elif source.n_chars >= cfg.large_source_chars:
        part = await llm_block_partition(source, entities, ctx)
    else:
        part = block_partition(source, entities)
    part.stats.update({"mode": part.mode, "n_entities": len(part.entities), "n_regions": len(part.regions)})
    return part


def block_budgets(source: Source, regions: list[Region], cfg: SourceLearnConfig) -> dict[str, int]:
    """The soft token budget of each region's model (official ``assign_budgets``): its share of
    ``block_total_tokens`` by source characters, within [``block_min_tokens``, ``block_cap_tokens``].
    Only a document source partitioned into blocks (>= ``large_source_chars``) has budgets: code and
    small sources are read without one, as the official pipeline does."""
    if source.kind == "code" or source.n_chars < cfg.large_source_chars or not regions:
        return {}
    lengths = {e.id: len(e.text) for e in source.elements}
    chars = {r.id: sum(lengths.get(i, 0) for i in r.element_ids) for r in regions}
    total = max(1, sum(chars.values()))
    return {rid: int(max(cfg.block_min_tokens, min(cfg.block_cap_tokens, round(cfg.block_total_tokens * c / total))))
            for rid, c in chars.items()}


def routing_card(region: Region, entity_names: list[str], attribute_names: list[str], headings: list[str],
                 max_items: int = 12) -> str:
    """What the router sees of a region: title, description, entities, attribute names, headings."""
    def lst(xs: list[str]) -> str:
        xs = list(dict.fromkeys(x for x in xs if x))
        more = f" (+{len(xs) - max_items} more)" if len(xs) > max_items else ""
        return ", ".join(xs[:max_items]) + more

    lines = [f"[{region.id}] {region.title}" + (f" — {region.description}" if region.description else "")]
    if entity_names:
        lines.append("  entities: " + lst(entity_names))
    if attribute_names:
        lines.append("  attributes: " + lst(attribute_names))
    if headings:
        lines.append("  headings: " + lst(headings))
    return "\n".join(lines)
