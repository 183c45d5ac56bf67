"""The SourceLearn source model: units anchored to source elements, entities, regions, policy.

The model is a versioned, human-readable JSON file. Anchors and their fingerprints are stamped by
code from the source (never written by the model), so a unit whose anchor text has since changed
is *stale* and ignored at use time instead of being trusted blindly.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field

from sourcebench.harness.data import Source, estimate_tokens, stable_hash
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import atomic_write_text, read_json
from sourcebench.harness.schema_limits import bounded_list, bounded_text

FORMAT_VERSION = 1

# Reply field types of the stages' structured calls: a unit is one atomic statement, so a bound of a
# few hundred characters never binds a sensible reply but stops a decoder that loops inside a string.
Statement = bounded_text(300)
Phrase = bounded_text(120)
Few = 3  # conditions of one statement
Ids = bounded_list(str, 6)  # ids a statement cites
# ids a statement must cite, where code drops one that cites none (a unit or a note without evidence):
# SmolLM2 left 129 of 458 construction claims without an id when the schema allowed it
Cited = Annotated[list[str], Field(json_schema_extra={"minItems": 1, "maxItems": 6})]

Role = Literal["map", "pattern", "mechanism", "distinction", "procedure", "exception", "relation", "detail", "card"]
ROLES: tuple[str, ...] = Role.__args__  # type: ignore[attr-defined]
Origin = Literal["constructed", "self-study", "task-refine", "recalibrated"]

# The unit kinds of the paper's Figure 4, by role.
KIND_OF_ROLE = {
    "map": "overview",
    "card": "facts and attributes",
    "detail": "facts and attributes",
    "pattern": "rules",
    "mechanism": "rules",
    "exception": "rules",
    "relation": "relations and constraints",
    "distinction": "relations and constraints",
    "procedure": "procedures",
}


class Anchor(BaseModel):
    element_id: str
    fingerprint: str


class Scope(BaseModel):
    """What a unit is about: one entity, one region, a pair (of entities or regions), or the source."""

    kind: Literal["entity", "region", "pair", "source"]
    keys: list[str] = Field(default_factory=list)


class Attribute(BaseModel):
    name: str
    value: str
    anchor: Anchor


class Unit(BaseModel):
    id: str
    statement: str
    role: Role
    scope: Scope
    conditions: list[str] = Field(default_factory=list)
    anchors: list[Anchor] = Field(default_factory=list)
    origin: Origin = "constructed"
    absorbed: list[str] = Field(default_factory=list)  # ids of older units this one replaced
    attributes: list[Attribute] = Field(default_factory=list)  # cards only
    protected: bool = False  # learned from a task: recalibration must keep its meaning
    exceptions: list[str] = Field(default_factory=list)  # prototypes: entity keys that deviate

    @property
    def kind(self) -> str:
        return KIND_OF_ROLE[self.role]

    def element_ids(self) -> list[str]:
        ids = [a.element_id for a in self.anchors] + [a.anchor.element_id for a in self.attributes]
        return list(dict.fromkeys(ids))

    def render(self) -> str:
        if self.role == "card":
            attrs = "; ".join(f"{a.name}: {a.value}" for a in self.attributes)
            head = f"[card] {self.statement}".rstrip()
            return f"{head} — {attrs}" if attrs else head
        cond = f" (when: {'; '.join(self.conditions)})" if self.conditions else ""
        exc = f" (exceptions: {', '.join(self.exceptions)})" if self.exceptions else ""
        return f"[{self.role}] {self.statement}{cond}{exc}"


_layout_generation = [0]  # bumped when a field a Layout is built from is assigned in place


class _LayoutField:
    """Assigning ``key``/``region`` of an entity or ``id`` of a region in place invalidates every
    cached Layout (a new or resized entity or region list does so by itself)."""

    _layout_fields: ClassVar[tuple[str, ...]] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in self._layout_fields:
            _layout_generation[0] += 1


class Entity(_LayoutField, BaseModel):
    """A document family or public code symbol the model is organised around."""

    _layout_fields: ClassVar[tuple[str, ...]] = ("key", "region")
    key: str
    name: str
    region: str
    element_ids: list[str]


class Region(_LayoutField, BaseModel):
    """A folder, or an LLM-proposed block of a large source, with a routing description."""

    _layout_fields: ClassVar[tuple[str, ...]] = ("id",)
    id: str
    title: str
    description: str = ""
    element_ids: list[str] = Field(default_factory=list)
    entity_keys: list[str] = Field(default_factory=list)


class Layout:
    """Where entities sit, built once per entity and region lists instead of once per lookup.

    A lookup that rebuilt ``{entity: region}`` and scanned the regions for every unit made placing
    all units in all regions cost regions x units x entities (about ten minutes of a
    sphinx build without a model call). ``SourceModel.layout`` caches one per lists it is built from.
    """

    def __init__(self, entities: list[Entity], regions: list[Region]):
        self.region_of = {e.key: e.region for e in entities}  # last entity of a key wins, as a dict does
        self.region_ids = frozenset(r.id for r in regions)
        self.region_by_id: dict[str, Region] = {}
        for r in regions:
            self.region_by_id.setdefault(r.id, r)  # the first region of an id, as a scan finds it
        self.entities_by_region: dict[str, list[Entity]] = defaultdict(list)
        self.keys_by_lower: dict[str, list[str]] = defaultdict(list)
        for e in entities:
            self.entities_by_region[e.region].append(e)
            self.keys_by_lower[e.key.lower()].append(e.key)
        self.keys = frozenset(e.key for e in entities)


_LAYOUTS: dict[tuple[int, int], tuple[list[Entity], list[Region], tuple[int, int, int], Layout]] = {}
_LAYOUTS_KEPT = 8  # the layouts of the few models in use at once (the lists are held, so ids stay unique)


class StageRecord(BaseModel):
    stage: str  # M0, MS, MT, ...
    n_units: int
    stats: dict[str, Any] = Field(default_factory=dict)


class SourceModel(BaseModel):
    format_version: int = FORMAT_VERSION
    source_id: str
    source_fingerprint: str
    stage: str = "M0"
    brief: str = ""
    regions: list[Region] = Field(default_factory=list)
    entities: list[Entity] = Field(default_factory=list)
    units: list[Unit] = Field(default_factory=list)
    policy: list[str] = Field(default_factory=list)  # representation policy Pi_1 (task-derived)
    history: list[StageRecord] = Field(default_factory=list)

    # -- construction helpers ------------------------------------------------------------------
    @staticmethod
    def unit_id(statement: str, role: str, scope: Scope, salt: str = "") -> str:
        return "u" + stable_hash(statement.strip().lower(), role, scope.kind, scope.keys, salt)[:10]

    @staticmethod
    def stamp(element_ids: Iterable[str], source: Source) -> list[Anchor]:
        """Anchors for ids that exist in the source; unknown ids are dropped (the model invented them)."""
        out, seen = [], set()
        for eid in element_ids:
            el = source.element(str(eid).strip())
            if el is not None and el.id not in seen:
                seen.add(el.id)
                out.append(Anchor(element_id=el.id, fingerprint=el.fingerprint))
        return out

    def add(self, unit: Unit) -> Unit:
        """Add a unit; the same statement in the same scope is kept once (deterministic ids)."""
        if any(u.id == unit.id for u in self.units):
            return unit
        self.units.append(unit)
        return unit

    def add_all(self, units: Iterable[Unit]) -> None:
        """``add`` each unit in turn, with one id set instead of a scan of the model per unit."""
        seen = {u.id for u in self.units}
        for u in units:
            if u.id not in seen:
                seen.add(u.id)
                self.units.append(u)

    # -- use-time views -------------------------------------------------------------------------
    @staticmethod
    def is_stale(unit: Unit, source: Source) -> bool:
        anchors = list(unit.anchors) + [a.anchor for a in unit.attributes]
        for a in anchors:
            el = source.element(a.element_id)
            if el is None or el.fingerprint != a.fingerprint:
                return True
        return False

    def live_units(self, source: Source) -> list[Unit]:
        return [u for u in self.units if not self.is_stale(u, source)]

    def layout(self) -> Layout:
        """The entity and region index of this model, rebuilt only when ``entities`` or ``regions``
        is replaced, resized, or one of its keys, regions or ids is assigned in place."""
        key = (id(self.entities), id(self.regions))
        state = (len(self.entities), len(self.regions), _layout_generation[0])
        hit = _LAYOUTS.get(key)
        if hit is not None and hit[0] is self.entities and hit[1] is self.regions and hit[2] == state:
            return hit[3]
        layout = Layout(self.entities, self.regions)
        _LAYOUTS.pop(key, None)
        while len(_LAYOUTS) >= _LAYOUTS_KEPT:
            _LAYOUTS.pop(next(iter(_LAYOUTS)), None)
        _LAYOUTS[key] = (self.entities, self.regions, state, layout)
        return layout

    def region_of_entity(self) -> dict[str, str]:
        return dict(self.layout().region_of)

    def unit_regions(self, unit: Unit) -> list[str]:
        if unit.scope.kind == "region":
            return list(unit.scope.keys)
        if unit.scope.kind in ("entity", "pair"):
            lay = self.layout()
            keys = [lay.region_of.get(k, k) for k in unit.scope.keys]
            return list(dict.fromkeys(k for k in keys if k in lay.region_ids)) or keys
        return []

    def units_in_region(self, region_id: str, units: list[Unit] | None = None) -> list[Unit]:
        """One region's units; to place units in every region, ``units_by_region`` does it in one pass."""
        return [u for u in (units if units is not None else self.units) if region_id in self.unit_regions(u)]

    def units_by_region(self, units: list[Unit] | None = None) -> dict[str, list[Unit]]:
        """``units_in_region`` of every region at once (each unit placed once, order kept)."""
        out: dict[str, list[Unit]] = defaultdict(list)
        for u in units if units is not None else self.units:
            for r in dict.fromkeys(self.unit_regions(u)):
                out[r].append(u)
        return out

    def render(self, units: list[Unit] | None = None, regions: list[str] | None = None) -> str:
        """Plain-text view for prompts: brief, then regions in order, each with its units."""
        units = self.units if units is None else units
        parts = [f"Source overview: {self.brief}"] if self.brief else []
        if self.policy:
            parts.append("Representation policy: " + " ".join(f"({i}) {p}" for i, p in enumerate(self.policy, 1)))
        placed: set[str] = set()
        by_region = self.units_by_region(units)
        wanted = None if regions is None else set(regions)
        for r in self.regions:
            if wanted is not None and r.id not in wanted:
                continue
            rs = by_region.get(r.id, [])
            placed.update(u.id for u in rs)
            if rs:
                head = f"## Region {r.title}" + (f" — {r.description}" if r.description else "")
                parts.append(head + "\n" + "\n".join("- " + u.render() for u in rs))
        if regions is None:
            rest = [u for u in units if u.id not in placed]
            if rest:
                parts.append("## Whole source\n" + "\n".join("- " + u.render() for u in rest))
        return "\n\n".join(parts)

    def tokens(self, units: list[Unit] | None = None) -> int:
        return estimate_tokens(self.render(units))

    def record_stage(self, stage: str, **stats: Any) -> None:
        self.stage = stage
        self.history.append(StageRecord(stage=stage, n_units=len(self.units), stats=stats))

    def copy_deep(self) -> SourceModel:
        return SourceModel.model_validate(json.loads(self.model_dump_json()))

    # -- persistence ----------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        atomic_write_text(Path(path), self.model_dump_json(indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> SourceModel:
        data = read_json(Path(path))
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            raise DataError(f"{path}: not a SourceLearn source model of format version {FORMAT_VERSION}")
        try:
            return cls.model_validate(data)
        except Exception as e:
            raise DataError(f"{path}: invalid source model ({str(e).splitlines()[0]})") from None
