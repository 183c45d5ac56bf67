"""Activation: the whole live model when it fits; otherwise routed regions loaded whole, required
first, within the budget; stale units hidden; the budget shrinks for small context windows."""

from __future__ import annotations

import asyncio
import json

from helpers import SOURCE, TEST, answer_ctx, dispatch, make_ctx, make_llm, stage_calls

from sourcebench.harness.data import estimate_tokens
from sourcebench.harness.llm import ModelSpec
from sourcebench.harness.providers import scripted
from sourcebench.methods.sourcelearn.activation import (
    activate,
    effective_budget,
    load_cost,
    m_tokens,
    without_header,
)
from sourcebench.methods.sourcelearn.config import SourceLearnConfig
from sourcebench.methods.sourcelearn.model import Anchor, Entity, Region, Scope, SourceModel, Unit

PEOPLE = [e.id for e in SOURCE.elements if e.path.startswith("people/")]
PLACES = [e.id for e in SOURCE.elements if e.path.startswith("places/")]
ROUTER = "which parts of a source model a question needs"


def run(coro):
    return asyncio.run(coro)


def unit(text: str, keys: list[str], eids: list[str], kind: str = "region", role: str = "detail") -> Unit:
    scope = Scope(kind=kind, keys=keys)  # type: ignore[arg-type]
    return Unit(id=SourceModel.unit_id(text, role, scope), statement=text, role=role, scope=scope,  # type: ignore[arg-type]
                anchors=SourceModel.stamp(eids, SOURCE))


def toy_model(n_people: int = 12) -> SourceModel:
    people = [unit(f"People fact {i}: " + "pilots of Nordair rotate between routes " * 3, ["people"],
                   ["people/alice.md#work"]) for i in range(n_people)]
    places = [unit("Oslo has a port on the fjord", ["Oslo"], ["places/oslo.md#overview"], kind="entity"),
              unit("Lyon lies on two rivers and has no port", ["Lyon"], ["places/lyon.md#overview"], kind="entity")]
    stale = unit("STALE the mayor of Oslo is Zed", ["places"], [])
    stale = stale.model_copy(update={"anchors": [Anchor(element_id="places/oslo.md#overview", fingerprint="0" * 16)]})
    glob = unit("The town has two districts", [], ["places/oslo.md#overview"], kind="source")
    return SourceModel(
        source_id=SOURCE.id, source_fingerprint=SOURCE.fingerprint, brief="A toy town.",
        regions=[Region(id="people", title="people", description="who works where", element_ids=PEOPLE,
                        entity_keys=["Alice", "Bob", "Carol", "Dave"]),
                 Region(id="places", title="places", description="cities and ports", element_ids=PLACES,
                        entity_keys=["Oslo", "Lyon"])],
        entities=[Entity(key="Oslo", name="Oslo", region="places", element_ids=["places/oslo.md#overview"]),
                  Entity(key="Lyon", name="Lyon", region="places", element_ids=["places/lyon.md#overview"])],
        units=people + places + [stale, glob])


def route_reply(required: list[str], optional: list[str]):
    return dispatch((ROUTER, json.dumps({"required": required, "optional": optional})))


def sizes(sm: SourceModel) -> dict[str, int]:
    """What loading each region costs against B (its statements, a quarter of their characters)."""
    live = sm.live_units(SOURCE)
    return {r: load_cost(sm.units_in_region(r, live)) for r in ("people", "places")}


def test_whole_live_model_when_it_fits_and_stale_units_are_hidden(tmp_path):
    sm = toy_model()
    ctx = answer_ctx(make_ctx(tmp_path))
    notes, st = run(activate(sm, SOURCE, TEST[0], ctx, SourceLearnConfig()))
    assert st["mode"] == "all" and not st["router_used"] and not scripted.CALLS
    assert notes == without_header(sm).render(sm.live_units(SOURCE))
    assert "A toy town." not in notes and "Source overview" not in notes  # the reading brief is not shown
    assert "STALE" not in notes and st["n_stale"] == 1 and st["n_live"] == len(sm.units) - 1
    assert "Oslo has a port" in notes and "The town has two districts" in notes


def test_routed_regions_load_whole_within_the_budget_and_skip_what_does_not_fit(tmp_path):
    sm = toy_model()
    sz = sizes(sm)
    budget = sz["places"] + 20  # places (+ the global unit) fit; people does not
    assert sz["people"] > budget
    scripted.set_script(route_reply(["places"], ["people"]))
    ctx = answer_ctx(make_ctx(tmp_path))
    notes, st = run(activate(sm, SOURCE, TEST[0], ctx, SourceLearnConfig(budget_tokens=budget)))
    assert st["mode"] == "routed" and st["router_used"] and stage_calls(ctx) == {"route": 1}
    assert st["regions_loaded"] == ["(whole source)", "places"] and st["regions_skipped"] == ["people"]
    assert st["tokens"] <= budget
    assert "Oslo has a port" in notes and "Lyon lies on two rivers" in notes  # the region is whole
    assert "People fact" not in notes  # never a truncated region
    assert "STALE" not in notes
    prompt = scripted.CALLS[0]["messages"][-1]["content"]
    assert TEST[0].question in prompt and "[places] places — cities and ports" in prompt and "Oslo, Lyon" in prompt
    assert "REFSECRET" not in prompt
    schema = json.dumps(scripted.CALLS[0]["schema"])  # the router may only name regions that exist
    assert schema.count('"enum": ["people", "places"]') == 2


def test_a_first_region_larger_than_the_budget_loads_its_units_nearest_the_question(tmp_path):
    """Official Retrieve_M: the first routed block always loads; over the budget, its question-nearest units."""
    sm = toy_model()
    near = unit("Pilots born in a port city fly from its port", ["people"], ["people/alice.md#work"])
    sm.units.append(near)
    sz = sizes(sm)
    budget = sz["people"] // 2
    scripted.set_script(route_reply(["people"], ["places"]))
    notes, st = run(activate(sm, SOURCE, TEST[0], answer_ctx(make_ctx(tmp_path)), SourceLearnConfig(budget_tokens=budget)))
    assert "people" in st["regions_loaded"] and st["tokens"] <= budget
    assert "Pilots born in a port city" in notes  # shares "born" and "port" with the question: chosen first
    assert "People fact 0:" in notes and "People fact 11:" not in notes  # then in model order while they fit
    assert notes.index("People fact 0:") < notes.index("Pilots born in a port city")  # shown in model order


def test_required_regions_come_first(tmp_path):
    sm = toy_model(n_people=3)
    sm.regions.append(Region(id="harbour", title="harbour", element_ids=PLACES))
    sm.units += [unit(f"Harbour rule {i}: " + "ships berth by size and tide " * 6, ["harbour"], PLACES[:1])
                 for i in range(20)]
    sz = sizes(sm)
    budget = sz["people"] + sz["places"] + 40
    assert sm.tokens(sm.live_units(SOURCE)) > budget
    scripted.set_script(route_reply(["people"], ["places", "nowhere"]))
    notes, st = run(activate(sm, SOURCE, TEST[0], answer_ctx(make_ctx(tmp_path)), SourceLearnConfig(budget_tokens=budget)))
    assert st["required"] == ["people"] and st["optional"] == ["places"]  # unknown ids dropped
    assert st["regions_loaded"] == ["(whole source)", "people", "places"]
    assert notes.index("## Region people") < notes.index("## Region places")
    assert "Harbour rule" not in notes and st["tokens"] <= budget


def test_router_failure_falls_back_to_lexical_routing(tmp_path):
    sm = toy_model()
    budget = sizes(sm)["places"] + 20
    scripted.set_script(dispatch((ROUTER, "not json")))
    notes, st = run(activate(sm, SOURCE, TEST[0], answer_ctx(make_ctx(tmp_path)),
                             SourceLearnConfig(budget_tokens=budget)))
    assert st["router_failed"] and "places" in st["regions_loaded"]  # "port" / "city" match the places card
    assert "Oslo has a port" in notes


def test_small_context_window_shrinks_the_budget(tmp_path):
    cfg = SourceLearnConfig()
    assert effective_budget(cfg, ModelSpec(name="scripted/x")) == 24000
    small = ModelSpec(name="scripted/x", context_window=8192, max_tokens=256)
    assert effective_budget(cfg, small, evidence_tokens=3000, question="q" * 40) == 8192 - 3000 - 256 - 400 - 10
    assert effective_budget(cfg, small, evidence_tokens=9000) == 0
    assert effective_budget(cfg, small, reply_tokens=64) == 8192 - 64 - 400
    ctx = make_ctx(tmp_path, llm=make_llm(tmp_path, window=1200, max_tokens=256))
    sm = toy_model()
    scripted.set_script(route_reply(["places"], []))
    notes, st = run(activate(sm, SOURCE, TEST[0], answer_ctx(ctx), cfg, evidence_tokens=200))
    assert st["room_tokens"] == 1200 - 200 - 256 - 400 - estimate_tokens(TEST[0].question)
    assert estimate_tokens(notes) <= st["room_tokens"] and st["mode"] == "routed"
    assert st["tokens"] <= st["budget"] < cfg.budget_tokens  # B shrank until the rendered notes fit


def test_exact_token_counts_keep_the_notes_inside_a_small_window(tmp_path):
    """A local model's tokenizer can count 1.5x chars/4 (ids, names): the fit is checked in its tokens."""

    async def count(text: str) -> int:  # a tokenizer that needs 1.5 tokens per estimated one
        return (len(text) * 3) // 8

    sm = toy_model()
    full = without_header(sm).render(sm.live_units(SOURCE))
    evidence = "excerpt words " * 60
    q = TEST[0].question
    # by chars/4 the whole model fits (10 tokens to spare); by the tokenizer's count it does not
    window = estimate_tokens(full) + 10 + estimate_tokens(evidence) + estimate_tokens(q) + 256 + 400
    ctx = answer_ctx(make_ctx(tmp_path, llm=make_llm(tmp_path, window=window, max_tokens=256)))
    cfg = SourceLearnConfig()
    scripted.set_script(route_reply(["places"], ["people"]))
    plain, st0 = run(activate(sm, SOURCE, TEST[0], ctx, cfg, evidence_tokens=estimate_tokens(evidence)))
    assert st0["mode"] == "all" and plain == full  # what an estimate-only provider gets
    ctx.llm.count_tokens = count
    notes, st = run(activate(sm, SOURCE, TEST[0], ctx, cfg, evidence_tokens=estimate_tokens(evidence),
                             evidence_text=evidence))
    room = window - run(count(evidence)) - run(count(q)) - 256 - 400
    assert st["room_tokens"] == room and st["mode"] == "routed"
    assert run(count(notes)) <= room  # the notes fit in the model's own tokens
    assert st["regions_loaded"][:2] == ["(whole source)", "places"] and "Oslo has a port" in notes


def test_the_budget_counts_statements_and_conditions_not_map_units_or_rendering(tmp_path):
    """Official m_tokens: a quarter of the characters of statements and conditions, maps excluded."""
    sm = toy_model(n_people=2)
    about = unit("The people region lists who works where " * 40, ["people"], PEOPLE, role="map")
    cond = unit("Pilots fly at dawn", ["people"], ["people/bob.md#work"], role="mechanism")
    cond = cond.model_copy(update={"conditions": ["only in summer " * 10]})
    sm.units += [about, cond]
    live = sm.live_units(SOURCE)
    m = m_tokens(live)
    assert m == sum(len(u.statement) // 4 + sum(len(c) for c in u.conditions) // 4 for u in live if u.role != "map")
    assert m_tokens([about]) == 0 and m_tokens([cond]) == len("Pilots fly at dawn") // 4 + 150 // 4
    full = without_header(sm).render(live)
    assert estimate_tokens(full) > m + 100  # the rendering (and the map) is much larger than what B counts
    scripted.set_script(route_reply(["places"], []))
    notes, st = run(activate(sm, SOURCE, TEST[0], answer_ctx(make_ctx(tmp_path)), SourceLearnConfig(budget_tokens=m)))
    assert st["mode"] == "all" and st["tokens"] == m and notes == full and not scripted.CALLS


def test_a_region_whose_entity_the_question_names_is_always_a_candidate(tmp_path):
    sm = toy_model()
    sm.entities.append(Entity(key="Harbourmaster", name="Harbourmaster", region="places",
                              element_ids=["places/oslo.md#overview"]))
    sm.regions.append(Region(id="harbour", title="harbour", element_ids=PLACES))
    sm.units += [unit(f"Harbour rule {i}: " + "ships berth by size and tide " * 6, ["harbour"], PLACES[:1])
                 for i in range(20)]
    budget = sum(sizes(sm).values()) + 20  # people, places and the global unit fit; the harbour does not
    scripted.set_script(route_reply(["people"], []))  # the router misses the named entity's region
    task = TEST[0].model_copy(update={"question": "Whom does the harbourmaster report to?"})
    _, st = run(activate(sm, SOURCE, task, answer_ctx(make_ctx(tmp_path)), SourceLearnConfig(budget_tokens=budget)))
    assert st["required"] == ["people", "places"] and "places" in st["regions_loaded"]
    prompt = scripted.CALLS[0]["messages"][-1]["content"]
    assert "Exact entity matches: Harbourmaster -> [places]" in prompt
    # a name shorter than 6 characters is no hint (official rule): "Oslo" alone adds nothing
    scripted.set_script(route_reply(["people"], []))
    task = TEST[0].model_copy(update={"question": "Who lives in Oslo?"})
    _, st = run(activate(sm, SOURCE, task, answer_ctx(make_ctx(tmp_path / "b")), SourceLearnConfig(budget_tokens=budget)))
    assert st["required"] == ["people"] and st["optional"] == []


def test_the_router_loads_at_most_four_regions(tmp_path):
    sm = toy_model(n_people=3)
    extra = [f"r{i}" for i in range(4)]
    for rid in extra:
        sm.regions.append(Region(id=rid, title=rid, element_ids=PLACES))
        sm.units.append(unit(f"Rule of {rid}: ships berth by size " * 20, [rid], PLACES[:1]))
    scripted.set_script(route_reply(["people", "places", "r0"], ["r1", "r2", "r3"]))
    _, st = run(activate(sm, SOURCE, TEST[0], answer_ctx(make_ctx(tmp_path)), SourceLearnConfig(budget_tokens=400)))
    assert st["required"] + st["optional"] == ["people", "places", "r0", "r1"]
    from sourcebench.methods.sourcelearn.activation import Route

    props = Route.model_json_schema()["properties"]
    assert props["required"]["maxItems"] == props["optional"]["maxItems"] == 4


def test_a_one_region_model_over_the_budget_shows_its_nearest_units_without_routing(tmp_path):
    """Official Retrieve_M, lexical mode: a single region is not routed; maps, then nearest units within B."""
    sm = toy_model()
    sm.units = [u for u in sm.units if sm.unit_regions(u) == ["people"]]
    near = unit("Pilots born in a port city fly from its port", ["people"], ["people/alice.md#work"])
    about = unit("Who works where in the town " * 30, ["people"], PEOPLE, role="map")
    sm.units += [near, about]
    budget = m_tokens([near]) + m_tokens(sm.units[:2])
    notes, st = run(activate(sm, SOURCE, TEST[0], answer_ctx(make_ctx(tmp_path)), SourceLearnConfig(budget_tokens=budget)))
    assert st["mode"] == "lexical" and not scripted.CALLS and st["tokens"] <= budget
    assert "Pilots born in a port city" in notes and "Who works where" in notes  # nearest unit, the map (free)
    assert "People fact 0:" in notes and "People fact 11:" not in notes
