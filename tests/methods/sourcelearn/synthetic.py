"""A synthetic SourceLearn model at the scale of a whole repository (sphinx has 12,758
elements, 2,318 entities and 236 folder regions), for the scale tests and for profiling.

``synthetic_model(n_entities, n_regions, seed)`` is deterministic: the same arguments give the same
source, entities, regions and units. Statements are drawn from a Zipf-like vocabulary, and about one
in six copies an earlier statement of its role (same region mostly) with a small edit, so that
deduplication and mechanism merging have near-duplicates to find, above and below their thresholds.
Units cover every scope kind, including the odd ones the region lookups must handle (a pair across
two regions, a region unit naming two regions, an entity or pair key that is no entity).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sourcebench.harness.data import Element, Source
from sourcebench.methods.sourcelearn.model import Attribute, Entity, Region, Scope, SourceModel, Unit

STOP = ("the", "a", "of", "to", "is", "in", "and", "when", "if", "for", "with", "by", "on", "as", "it", "be")
ATTRIBUTES = {"kind": ("class", "function", "module"), "returns": ("none", "str", "bool", "list", "dict"),
              "thread_safe": ("yes", "no"), "since": ("1.0", "2.0", "3.1", "4.2")}


@dataclass
class Synthetic:
    source: Source
    model: SourceModel  # regions and entities; ``units`` holds the units below
    units: list[Unit]  # construction order: maps, then per entity its card and statements


class _Words:
    def __init__(self, rng: random.Random, size: int = 4000):
        self.rng = rng
        self.vocab = [f"{a}{b}" for a, b in ((rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou"),
                                               rng.randrange(10_000)) for _ in range(size))]
        weights = [1 / (i + 1) ** 0.9 for i in range(size)]
        total, acc, self.cum = sum(weights), 0.0, []
        for w in weights:
            acc += w / total
            self.cum.append(acc)

    def statement(self) -> str:
        n = self.rng.randint(8, 18)
        words = [self.rng.choice(STOP) if self.rng.random() < 0.35 else
                 self.rng.choices(self.vocab, cum_weights=self.cum)[0] for _ in range(n)]
        return " ".join(words).capitalize()

    def edit(self, text: str) -> str:
        """A near-duplicate: identical, a trailing period, one word replaced, added or dropped, or a
        looser paraphrase (three words replaced: below the dedup threshold, often above 0.5)."""
        words = text.split()
        op = self.rng.randrange(6)
        if op == 5:
            for i in self.rng.sample(range(len(words)), min(3, len(words))):
                words[i] = self.rng.choices(self.vocab, cum_weights=self.cum)[0]
            return " ".join(words)
        if op == 0:
            return text
        if op == 1:
            return text + "."
        i = self.rng.randrange(len(words))
        if op == 2:
            words[i] = self.rng.choices(self.vocab, cum_weights=self.cum)[0]
        elif op == 3:
            words.insert(i, self.rng.choice(STOP))
        elif len(words) > 3:
            del words[i]
        return " ".join(words)


def synthetic_model(n_entities: int = 2318, n_regions: int = 236, seed: int = 0,
                    elements_per_entity: tuple[int, int] = (4, 7)) -> Synthetic:
    rng = random.Random(seed)
    words = _Words(rng)
    regions = [Region(id=f"pkg{r:03d}", title=f"pkg{r:03d}") for r in range(n_regions)]
    elements: list[Element] = []
    entities: list[Entity] = []
    for i in range(n_entities):
        reg = regions[i * n_regions // n_entities]
        path = f"{reg.id}/mod{i}.py"
        ids = [f"{path}#Sym{i}"] + [f"{path}#Sym{i}.m{j}" for j in range(rng.randint(*elements_per_entity) - 1)]
        for eid in ids:
            elements.append(Element(id=eid, title=eid.split("#", 1)[1], text=words.statement(), path=path,
                                    kind="symbol"))
        ent = Entity(key=ids[0], name=f"Sym{i}", region=reg.id, element_ids=ids)
        entities.append(ent)
        reg.entity_keys.append(ent.key)
        reg.element_ids.extend(ids)
    source = Source(id="synthetic", kind="code", elements=elements, description="a synthetic repository")
    sm = SourceModel(source_id=source.id, source_fingerprint=source.fingerprint, regions=regions, entities=entities)

    past: dict[tuple[str, str], list[str]] = {}  # (role, region) -> statements so far

    def text(role: str, region: str) -> str:
        mine = past.setdefault((role, region), [])
        if rng.random() < 0.17:
            pool = mine if mine and rng.random() < 0.7 else [s for (r, _), xs in past.items() if r == role for s in xs[-3:]]
            if pool:
                out = words.edit(rng.choice(pool))
                mine.append(out)
                return out
        out = words.statement()
        mine.append(out)
        return out

    def unit(statement: str, role: str, scope: Scope, element_ids: list[str], **extra) -> Unit:
        return Unit(id=SourceModel.unit_id(statement, role, scope), statement=statement, role=role,  # type: ignore[arg-type]
                    scope=scope, anchors=SourceModel.stamp(element_ids, source), **extra)

    units: list[Unit] = []
    for reg in regions:
        scope = Scope(kind="region", keys=[reg.id])
        for _ in range(2):
            units.append(unit(text("map", reg.id), "map", scope, reg.element_ids[:rng.randint(1, 12)]))
        units.append(unit(text("pattern", reg.id), "pattern", scope, reg.element_ids[:rng.randint(1, 4)]))
    for k, ent in enumerate(entities):
        scope = Scope(kind="entity", keys=[ent.key])
        attrs = [Attribute(name=name, value=rng.choice(values), anchor=SourceModel.stamp([ent.element_ids[0]], source)[0])
                 for name, values in ATTRIBUTES.items() if rng.random() < 0.7]
        if attrs:
            units.append(Unit(id=SourceModel.unit_id(ent.name, "card", scope), statement=ent.name, role="card",
                              scope=scope, attributes=attrs))
        for role, n in (("mechanism", 2), ("distinction", rng.random() < 0.6), ("detail", rng.random() < 0.7)):
            for _ in range(int(n)):
                cited = rng.sample(ent.element_ids, rng.randint(1, min(3, len(ent.element_ids))))
                units.append(unit(text(role, ent.region), role, scope, cited))
        if rng.random() < 0.12:  # a relation, mostly within the region, sometimes across regions
            other = entities[min(len(entities) - 1, k + 1)] if rng.random() < 0.8 else rng.choice(entities)
            if other.key != ent.key:
                pair = Scope(kind="pair", keys=sorted([ent.key, other.key]))
                units.append(unit(text("relation", ent.region), "relation", pair,
                                  [ent.element_ids[0], other.element_ids[0]]))
    # the odd scopes the lookups must still place as before
    a, b = regions[0], regions[-1]
    e0 = entities[0]
    odd = [(Scope(kind="region", keys=[a.id, b.id]), [a.element_ids[0]]),
           (Scope(kind="region", keys=["no-such-region"]), [a.element_ids[0]]),
           (Scope(kind="entity", keys=["no-such-entity"]), [e0.element_ids[0]]),
           (Scope(kind="pair", keys=[e0.key, "no-such-entity"]), [e0.element_ids[0]]),
           (Scope(kind="pair", keys=["ghost-a", "ghost-b"]), [e0.element_ids[0]]),
           (Scope(kind="source", keys=[]), [e0.element_ids[0]])]
    for scope, cited in odd:
        units.append(unit(words.statement(), "pattern", scope, cited))
    sm.units = list(units)
    return Synthetic(source, sm, units)


# -- recorded behaviour -------------------------------------------------------------------------
def digest(obj) -> str:
    """A short fingerprint of a JSON-able result (what the scale tests compare with recorded values)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def unit_rows(units: list[Unit]) -> list:
    return [[u.id, u.role, u.statement, u.absorbed, [[a.name, a.value] for a in u.attributes], u.exceptions,
             [a.element_id for a in u.anchors]] for u in units]


def fold_loop(syn: Synthetic, min_entities: int = 3, min_share: float = 0.6) -> tuple[list[Unit], dict]:
    """Construction's folding as a loop over the regions of the public per-region functions."""
    from collections import Counter

    from sourcebench.methods.sourcelearn.construct import fold_prototypes, merge_mechanisms

    units, fold = list(syn.units), Counter()
    for r in syn.model.regions:
        units, fs = fold_prototypes(r, units, min_entities, min_share)
        units, merged = merge_mechanisms(r, units)
        fold.update(fs)
        fold["mechanisms_merged"] += merged
    return units, dict(fold)


def public_outputs(syn: Synthetic) -> dict[str, object]:
    """What the region lookups, folding, dedup, activation and rewrite views return on ``syn``,
    through functions whose signatures predate the scale work (so old and new code can both be recorded)."""
    from sourcebench.methods.sourcelearn import activation
    from sourcebench.methods.sourcelearn.construct import dedup
    from sourcebench.methods.sourcelearn.rewrite import (
        Note,
        element_entity,
        entity_region,
        entity_units,
        primary_region,
        region_cards,
        resolve_entity,
        select_old_units,
    )
    from sourcebench.methods.sourcelearn.selfstudy.consolidate import notes_by_region
    from sourcebench.methods.sourcelearn.taskguided.diagnose import Claim, TaskNeeds
    from sourcebench.methods.sourcelearn.taskguided.refine import claim_entities, relevant_units

    sm, source, units = syn.model, syn.source, syn.units
    out: dict[str, object] = {}
    out["unit_regions"] = [sm.unit_regions(u) for u in units]
    out["units_in_region"] = {r.id: [u.id for u in sm.units_in_region(r.id, units)] for r in sm.regions}
    out["render"] = sm.render(units)
    out["render_some"] = sm.render(units, regions=[r.id for r in sm.regions[::3]])
    folded, stats = fold_loop(syn)
    out["fold_loop"] = [unit_rows(folded), stats]
    place = lambda u: tuple(sm.unit_regions(u))
    for t in (0.8, 0.6, 1.0, 0.0):
        kept, dropped = dedup(folded, t, place=place)
        out[f"dedup_{t}"] = [unit_rows(kept), dropped]
    kept, dropped = dedup(folded)  # one place for all: the most candidates
    out["dedup_one_place"] = [unit_rows(kept), dropped]
    m = sm.model_copy(update={"units": []})
    for u in units + units[::7]:
        m.add(u)
    out["add"] = [u.id for u in m.units]
    live = sm.live_units(source)
    out["routing_cards"] = [[r.id, card] for r, card in activation.routing_cards(sm, source, live)]
    order = [r.id for r in sm.regions[::-2]] + ["no-such-region"]
    for budget in (10 ** 9, 3000):
        text, loaded, skipped, shown = activation.load_regions(sm, live, order, budget)
        out[f"load_regions_{budget}"] = [text, loaded, skipped, [u.id for u in shown]]
    ents = sm.entities
    notes = [Note(text=f"note {i}", evidence_ids=(e.element_ids[0],), entities=(e.key,),
                  unit_ids=tuple(u.id for u in units[i::97][:2])) for i, e in enumerate(ents[::5])]
    out["notes_by_region"] = {r: [n.text for n in ns] for r, ns in notes_by_region(sm, notes).items()}
    some = sm.regions[::4]  # each call is a pass over the model, so a sample of the regions
    out["rewrite_views"] = {r.id: [[u.id for u in select_old_units(sm, source, r.id, notes, chars)]
                                   for chars in (10 ** 9, 800)]
                            + [[u.id for u in region_cards(sm, source, r.id, notes)]] for r in some}
    out["rewrite_views_no_notes"] = {r.id: [u.id for u in select_old_units(sm, source, r.id, [], 10 ** 9)]
                                     for r in some}
    out["primary_region"] = [primary_region(sm, u) for u in units]
    out["entity_region"] = [entity_region(sm, k) for k in [e.key for e in ents] + ["no-such-entity"]]
    names = [e.key for e in ents[::11]] + [e.key.upper() for e in ents[::13]] + ["  " + ents[0].key + " ", "nope"]
    out["resolve_entity"] = [resolve_entity(sm, n) for n in names]
    out["entity_units"] = {e.key: [u.id for u in entity_units(sm, e.key, source)] for e in ents[::3]}
    owner = element_entity(sm)
    tasks = [TaskNeeds("t", "q", (e.element_ids[0],), (Claim("c", (e.element_ids[-1], ents[-1].element_ids[0])),))
             for e in ents[::max(1, len(ents) // 15)]]
    out["relevant_units"] = [[u.id for u in relevant_units(sm, source, t)] for t in tasks]
    out["claim_entities"] = [claim_entities(sm, c) for t in tasks for c in t.claims]
    out["element_entity"] = len(owner)
    return out
