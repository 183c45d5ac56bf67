"""SourceLearn's region lookups and deduplication at the scale of a whole repository.

Two kinds of checks, on the synthetic models of ``synthetic.py``:

* the same results as before: every lookup, fold, dedup, activation view and rewrite view returns
  what the code before the scale work returned (digests recorded from that code, on the same synthetic
  model), and each one-pass function returns what the per-region loop it replaces returns;
* bounded work, counted and not timed: the number of similarity comparisons (calls of
  ``similarity.jaccard``) and of region lookups (index entries built plus unit placements) grows
  linearly with the model. Before that work a sphinx-sized build made regions x units x entities
  region lookups (each placement rebuilt a dictionary of all entities) and units^2 x entities in
  deduplication.
"""

from __future__ import annotations

from collections import Counter

import pytest
from synthetic import digest, fold_loop, public_outputs, synthetic_model, unit_rows

from sourcebench.methods.sourcelearn import activation, model, similarity
from sourcebench.methods.sourcelearn.construct import apply_abstractions, dedup, fold_regions
from sourcebench.methods.sourcelearn.model import Entity, Region, Scope, SourceModel, Unit
from sourcebench.methods.sourcelearn.rewrite import (
    Note,
    RegionViews,
    entity_units,
    region_cards,
    resolve_entity,
    select_old_units,
    units_by_entity,
)
from sourcebench.methods.sourcelearn.selfstudy.consolidate import notes_by_region

# public_outputs(synthetic_model(240, 24, seed=1)) through the code before the scale work (commit 058f7e6); folding
# and the deduplication after it re-recorded when the folding share counts the entities that state
# the attribute, not all of the region's (the one-pass/loop equality below is unchanged); load_regions
# re-recorded when its budget came to count the official statement cost instead of the rendered text, its
# text lost the brief and policy header, and it returned the units shown
RECORDED: dict[str, str] = {
    "unit_regions": "0078376e83994234",
    "units_in_region": "a99d0ccc76d1dc6c",
    "render": "36a3d81c15b59756",
    "render_some": "b905ec4565bd0a52",
    "fold_loop": "0b7faa188c2254ad",
    "dedup_0.8": "9a90d09d262845ca",
    "dedup_0.6": "bee3505e3e830f48",
    "dedup_1.0": "8aa02f465cb3b01a",
    "dedup_0.0": "0d3c75ce2e30f031",
    "dedup_one_place": "487f893fd34f9ddf",
    "add": "5844470cdc1968ff",
    "routing_cards": "812d666edf6a1666",
    "load_regions_1000000000": "12bbf1aeac99459f",
    "load_regions_3000": "44ce2259bf57797c",
    "notes_by_region": "4b728dd3cb4c9bf1",
    "rewrite_views": "71a960d96a98b123",
    "rewrite_views_no_notes": "d899b2893cad7e7a",
    "primary_region": "ca652f8139060462",
    "entity_region": "237bebff56104000",
    "resolve_entity": "b75dfda27f8f5ae6",
    "entity_units": "78c7f2997c62fadd",
    "relevant_units": "1c54263163558c4c",
    "claim_entities": "d0bf21dfe271f824",
    "element_entity": "8c144858bb5ea1a9",
}


@pytest.fixture(scope="module")
def syn():
    return synthetic_model(240, 24, seed=1)


def test_results_are_those_recorded_before_issue_24(syn):
    got = {k: digest(v) for k, v in public_outputs(syn).items()}
    assert got == RECORDED


def test_one_pass_functions_return_what_the_loops_they_replace_return(syn):
    sm, source, units = syn.model, syn.source, syn.units
    by_region = sm.units_by_region(units)
    assert all([u.id for u in by_region.get(r.id, [])] == [u.id for u in sm.units_in_region(r.id, units)]
               for r in sm.regions)
    folded, fold = fold_regions(sm.regions, units, 3, 0.6)
    ref, ref_stats = fold_loop(syn)
    assert unit_rows(folded) == unit_rows(ref) and list(fold.items()) == list(ref_stats.items())
    assert digest([unit_rows(folded), dict(fold)]) == RECORDED["fold_loop"]
    by_entity = units_by_entity(sm, source)
    assert all(by_entity.get(e.key, []) == entity_units(sm, e.key, source) for e in sm.entities)
    views = RegionViews.of(sm, source)
    notes = [Note(text="n", evidence_ids=(e.element_ids[0],), entities=(e.key,)) for e in sm.entities[::4]]
    for r in sm.regions:
        for ns in (notes, []):
            assert select_old_units(sm, source, r.id, ns, 2000, views) == select_old_units(sm, source, r.id, ns, 2000)
            assert region_cards(sm, source, r.id, ns, views) == region_cards(sm, source, r.id, ns)
    one_by_one = sm.model_copy(update={"units": []})
    at_once = sm.model_copy(update={"units": []})
    for u in units + units[::5]:
        one_by_one.add(u)
    at_once.add_all(units + units[::5])
    assert [u.id for u in at_once.units] == [u.id for u in one_by_one.units]


def _unit(uid: str, region: str) -> Unit:
    return Unit(id=uid, statement=uid, role="pattern", scope=Scope(kind="region", keys=[region]))


def test_abstractions_applied_at_once_equal_region_by_region():
    units = [_unit(f"u{i}", "a") for i in range(6)]
    results = [([_unit("n1", "a"), _unit("u5", "a")], {"u1", "u5"}),  # u5 replaced, and written anew
               ([_unit("n2", "b")], {"n1", "u2", "gone"}),  # a later region replaces an earlier new unit
               ([_unit("n1", "c")], {"u3"}),  # ... which comes back from a later region
               ([], set())]
    sequential = list(units)
    for new, replaced in results:
        sequential = [u for u in sequential if u.id not in replaced] + new
    assert [u.id for u in apply_abstractions(units, results)] == [u.id for u in sequential]
    assert [u.id for u in sequential] == ["u0", "u4", "u5", "n2", "n1"]


def test_near_duplicates_find_the_first_match_a_full_scan_finds(syn):
    texts = [u.statement for u in syn.units if u.role not in ("card", "map")][:500]
    sets = [similarity.tokens_of(t) for t in texts] + [set(), {"x"}, {"x", "y"}]
    order = similarity.token_order(sets)
    for t in (1.0, 0.9, 0.8, 0.5, 0.2, 0.0, -1.0, 1.5):
        index: similarity.NearDuplicates[int] = similarity.NearDuplicates(t, order)
        kept: list[int] = []
        for i, s in enumerate(sets):
            scan = next((j for j in kept if similarity.jaccard(sets[j], s) >= t), None)
            assert index.first(s) == scan, (t, i)
            if scan is None:
                index.add(i, s)
                kept.append(i)


def test_the_layout_follows_changes_to_entities_and_regions():
    ents = [Entity(key="e1", name="E1", region="a", element_ids=[]), Entity(key="E2", name="E2", region="b",
                                                                             element_ids=[])]
    sm = SourceModel(source_id="s", source_fingerprint="f", entities=ents,
                     regions=[Region(id="a", title="a"), Region(id="b", title="b")])
    u = Unit(id="u", statement="s", role="detail", scope=Scope(kind="pair", keys=["e1", "E2"]))
    assert sm.unit_regions(u) == ["a", "b"]
    ents[0].region = "b"  # in place
    assert sm.unit_regions(u) == ["b"]
    sm.regions.append(Region(id="c", title="c"))
    ents[1].region = "c"
    assert sm.unit_regions(u) == ["b", "c"] and sm.units_by_region([u]) == {"b": [u], "c": [u]}
    sm.entities = [Entity(key="e1", name="E1", region="a", element_ids=[])]
    assert sm.unit_regions(u) == ["a"] and resolve_entity(sm, "E1") == "e1" and resolve_entity(sm, "E2") is None
    sm.regions[0].id = "z"
    assert sm.unit_regions(u) == ["a", "E2"] and sm.region_of_entity() == {"e1": "a"}


# -- counted work ----------------------------------------------------------------------------------
class Work:
    """What the instrumented primitives did: similarity comparisons, and region-lookup work (entries
    of every Layout built, plus one per unit placement)."""

    def __init__(self, monkeypatch):
        self.n = Counter()
        jaccard, layout_init, unit_regions = similarity.jaccard, model.Layout.__init__, SourceModel.unit_regions

        def counted_jaccard(a, b):
            self.n["comparisons"] += 1
            return jaccard(a, b)

        def counted_layout(lay, entities, regions):
            self.n["layout_entries"] += len(entities) + len(regions)
            layout_init(lay, entities, regions)

        def counted_unit_regions(sm, unit):
            self.n["placements"] += 1
            return unit_regions(sm, unit)

        monkeypatch.setattr(similarity, "jaccard", counted_jaccard)
        monkeypatch.setattr(model.Layout, "__init__", counted_layout)
        monkeypatch.setattr(SourceModel, "unit_regions", counted_unit_regions)

    @property
    def lookups(self) -> int:
        return self.n["layout_entries"] + self.n["placements"]


def _build_and_answer_paths(n_entities: int, monkeypatch) -> tuple[Counter, int]:
    """Construction's folding, region grouping, dedup and commit; activation's routing and loading;
    self-study's and refinement's per-entity and per-region views. Returns (work, units)."""
    syn = synthetic_model(n_entities, n_entities // 10, seed=2)
    sm, source, units = syn.model, syn.source, syn.units
    sm.units = []
    model._LAYOUTS.clear()
    work = Work(monkeypatch)
    units, _ = fold_regions(sm.regions, units, 3, 0.6)
    sm.units_by_region(units)
    units, _ = dedup(units, place=lambda u: tuple(sm.unit_regions(u)))
    sm.add_all(units)
    live = sm.live_units(source)
    activation.routing_cards(sm, source, live)
    activation.load_regions(sm, live, [r.id for r in sm.regions], 10 ** 9)
    sm.render(live)
    notes = [Note(text="n", evidence_ids=(e.element_ids[0],), entities=(e.key,)) for e in sm.entities]
    groups = notes_by_region(sm, notes)
    views = RegionViews.of(sm, source)
    for rid, group in groups.items():
        select_old_units(sm, source, rid, group, 10 ** 9, views)
        region_cards(sm, source, rid, group, views)
    units_by_entity(sm, source)
    for e in sm.entities:
        resolve_entity(sm, e.name)
    return work.n | Counter(lookups=work.lookups), len(syn.units)


def test_region_lookups_and_dedup_do_linear_work_at_2000_entities(monkeypatch):
    small, _ = _build_and_answer_paths(1000, monkeypatch)
    monkeypatch.undo()
    big, n_big = _build_and_answer_paths(2000, monkeypatch)
    assert n_big > 9000
    # 2,000 entities, 200 regions, 9,441 units. Before the scale work the abstraction input alone (one
    # units_in_region per region) placed 200 x 9,441 units with 2,200 entries examined for each
    # (~4 x 10^9); dedup compared each unit with every kept unit of its role, ~10^7 placements.
    assert big["comparisons"] <= n_big  # c = 1 per unit; measured 0.13
    assert big["lookups"] <= 10 * (n_big + 2000 + 200)  # c = 10 per unit, entity and region; measured 5.3
    assert big["layout_entries"] == 2000 + 200  # the entity and region index is built once
    for key in ("comparisons", "lookups"):  # twice the entities (and units): less than 2.5 times the work
        assert big[key] < 2.5 * small[key], (key, small[key], big[key])
