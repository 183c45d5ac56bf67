"""Construction of M0 with the scripted model: partition, id checking, batched grounding, folding into
prototypes with exceptions, mechanism merging, the abstraction pass and deduplication."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from helpers import SOURCE, dispatch, make_ctx, stage_calls

from sourcebench.harness.data import Element, Source
from sourcebench.harness.providers import scripted
from sourcebench.methods.sourcelearn.config import SourceLearnConfig
from sourcebench.methods.sourcelearn.construct import (
    construct,
    dedup,
    fold_prototypes,
    is_vague,
    merge_mechanisms,
    render_material,
)
from sourcebench.methods.sourcelearn.model import Attribute, Region, Scope, SourceModel, Unit
from sourcebench.methods.sourcelearn.regions import (
    ProposedBlock,
    block_partition,
    find_entities,
    folder_partition,
    partition,
    validate_blocks,
)


def run(coro):
    return asyncio.run(coro)


# -- scripted replies, keyed on each prompt's own wording -----------------------------------------
def _attr(name, value, eid):
    return {"name": name, "value": value, "element_id": eid}


READINGS = {
    "Alice": {
        "attributes": [_attr("job", "pilot", "people/alice.md#work"), _attr("employer", "Nordair", "people/alice.md#work"),
                       _attr("born_in", "Oslo", "people/alice.md#work"),
                       _attr("pet", "Rex", "people/alice.md#pets"),  # id that does not exist
                       _attr("city", "Oslo", "places/oslo.md#overview")],  # exists, but was not shown
        "mechanisms": [{"statement": "Nordair pilots are scheduled from the Oslo base and fly every weekday morning",
                        "conditions": ["while employed by Nordair"], "element_ids": ["people/alice.md#work"]}],
        "distinctions": [{"statement": "UNGROUNDED Alice is the mother of Carol", "element_ids": ["people/alice.md#family"]}],
        "decisive_details": [{"statement": "Alice keeps a dog", "element_id": "made-up-id"}],
    },
    "Bob": {
        "attributes": [_attr("job", "pilot", "people/bob.md#work"), _attr("employer", "Nordair", "people/bob.md#work"),
                       _attr("born_in", "Lyon", "people/bob.md#work")],
        "mechanisms": [{"statement": "Nordair pilots are scheduled from the Oslo base and fly every weekday morning",
                        "conditions": [], "element_ids": ["people/bob.md#work"]}],
        "distinctions": [], "decisive_details": [],
    },
    "Carol": {
        "attributes": [_attr("job", "pilot", "people/carol.md#work"), _attr("employer", "Nordair", "people/carol.md#work")],
        "mechanisms": [], "distinctions": [],
        "decisive_details": [{"statement": "Carol retired in 2020, so she no longer flies", "element_id": "people/carol.md#work"}],
    },
    "Dave": {
        "attributes": [_attr("job", "baker", "people/dave.md#work")],
        "mechanisms": [], "decisive_details": [],
        "distinctions": [{"statement": "Dave works at the Oslo market while the pilots work for Nordair",
                          "element_ids": ["people/dave.md#work"]}],
    },
}
EMPTY_READING = {"attributes": [], "mechanisms": [], "distinctions": [], "decisive_details": []}


def reading(messages, schema):
    entity = re.search(r"^Entity: (.+)$", messages[-1]["content"], re.MULTILINE).group(1)
    return json.dumps(READINGS.get(entity, EMPTY_READING))


def batch_gate(messages, schema):
    claims = re.findall(r"^(\d+)\. (.*)$", messages[-1]["content"], re.MULTILINE)
    return json.dumps({f"claim_{n}": {"supported": "UNGROUNDED" not in text, "evidence_ids": []}
                       for n, text in claims})


def abstraction(messages, schema):
    lines = {text: int(n) for n, text in re.findall(r"^(\d+)\. (.*)$", messages[-1]["content"], re.MULTILINE)}
    alice = next(n for t, n in lines.items() if t.startswith("(Alice) [card]"))
    bob = next(n for t, n in lines.items() if t.startswith("(Bob) [card]"))
    return json.dumps({"items": [
        {"kind": "shared_rule", "statement": "People employed by Nordair work as pilots",
         "conditions": ["employer is Nordair"], "units": [alice, bob], "replaces": [alice]},
        {"kind": "shared_rule", "statement": "Alice works as a pilot", "conditions": [], "units": [alice],
         "replaces": []},
        {"kind": "distinction", "statement": "Birthplaces vary", "conditions": [], "units": [alice, bob],
         "replaces": []},
    ]})


SCRIPT = dispatch(
    ("For every claim say whether", batch_gate),
    ("Is the claim supported?", json.dumps({"supported": True, "evidence_ids": [], "unsupported_parts": []})),
    ("profile of ONE entity", reading),
    ("numbered units of ONE region", abstraction),
    ("structural map of one region", json.dumps({"about": "People of the toy town and their jobs.",
                                                 "relations": ["Alice is the daughter of Carol", "Bob"]})),
    ("Before reading it entity by entity", json.dumps({"scenarios": ["who works where"],
                                                      "purpose": "Facts about a toy town.", "main_objects": ["people"],
                                                      "reading_questions": ["who employs whom (who works where)"],
                                                      "ignore": []})),
)


@pytest.fixture
def m0(tmp_path):
    scripted.set_script(SCRIPT)
    ctx = make_ctx(tmp_path)
    sm = run(construct(SOURCE, ctx, SourceLearnConfig()))
    return sm, ctx


def by_role(sm, role):
    return [u for u in sm.units if u.role == role]


def card_of(sm, key):
    return next((u for u in by_role(sm, "card") if u.scope.keys == [key]), None)


# -- partition -------------------------------------------------------------------------------------
def test_entities_and_folder_regions_of_a_document_source():
    ents = find_entities(SOURCE)
    assert [e.key for e in ents] == ["Alice", "Bob", "Carol", "Dave", "Oslo", "Lyon"]
    assert ents[0].element_ids == ["people/alice.md#family", "people/alice.md#work"]
    part = folder_partition(SOURCE, ents)
    assert [(r.id, r.entity_keys) for r in part.regions] == [("people", ["Alice", "Bob", "Carol", "Dave"]),
                                                             ("places", ["Oslo", "Lyon"])]
    assert {e.key: e.region for e in part.entities}["Lyon"] == "places"


def test_flat_sources_get_balanced_deterministic_blocks():
    src = Source(id="flat", kind="documents", elements=[
        Element(id=f"P{i:02d}#a", title=f"P{i:02d}", text=f"text {i}", path=f"P{i:02d}", metadata={"entity": f"P{i:02d}"})
        for i in range(51)])
    part = block_partition(src, find_entities(src))
    assert [len(r.entity_keys) for r in part.regions] == [9, 9, 9, 8, 8, 8]
    assert part.regions[0].entity_keys[0] == "P00" and part.regions[-1].entity_keys[-1] == "P50"
    assert sorted(e.region for e in part.entities).count("block-01") == 9


def test_code_entities_are_public_top_level_symbols_and_tests_are_skipped():
    from sourcebench.harness.elements import split_python

    code = "class Foo:\n    def run(self):\n        return 1\n\ndef _hidden():\n    pass\n\ndef helper():\n    return 2\n"
    els = split_python("pkg/mod.py", code) + split_python("pkg/consts.py", "X = 1\n") \
        + split_python("tests/test_mod.py", "def test_x():\n    assert True\n")
    ents = find_entities(Source(id="c", kind="code", elements=els))
    assert [e.key for e in ents] == ["pkg/mod.py#Foo", "pkg/mod.py#helper", "pkg/consts.py"]
    assert ents[0].element_ids == ["pkg/mod.py#Foo", "pkg/mod.py#Foo.run"]


def test_an_oversized_folder_is_split_into_blocks_of_whole_files(tmp_path):
    els = [Element(id=f"big/f{i // 4:02d}.md#s{i}", title=f"S{i}", text=f"section {i}", path=f"big/f{i // 4:02d}.md",
                   metadata={"entity": f"E{i:02d}"}) for i in range(36)]
    els.append(Element(id="small/x.md#a", title="X", text="x", path="small/x.md"))
    src = Source(id="folders", kind="documents", elements=els)
    part = run(partition(src, make_ctx(tmp_path, src), SourceLearnConfig()))
    assert part.stats["folders_split"] == 1 and not scripted.CALLS  # small source: no LLM call
    # 9 files x 4 entities: two files (8 entities) per block, never a file split across blocks
    assert [r.id for r in part.regions] == [f"big/block-{i:02d}" for i in range(1, 6)] + ["small"]
    assert [len(r.entity_keys) for r in part.regions] == [8, 8, 8, 8, 4, 1]
    for r in part.regions:
        files = {eid.split("#")[0] for eid in r.element_ids}
        assert all(sum(1 for e in els if e.path == f and e.id in r.element_ids) == (4 if f.startswith("big") else 1)
                   for f in files)
    assert {e.region for e in part.entities if e.key == "E35"} == {"big/block-05"}


def test_llm_blocks_assign_every_entity_exactly_once():
    ents = find_entities(SOURCE)
    regions, st = validate_blocks([ProposedBlock(title="Crew", description="pilots", entities=[1, 2, 2, 99]),
                                   ProposedBlock(title="Dup", description="", entities=[1])], ents)
    assert [r.entity_keys for r in regions] == [["Alice", "Bob"], ["Carol", "Dave", "Lyon", "Oslo"]]
    assert regions[-1].id == "other" and st == {"duplicate_assignments": 2, "unknown_numbers": 1, "unassigned": 4}


def test_material_is_truncated_deterministically_to_fit():
    els = [Element(id=f"e{i}", title=f"t{i}", text="x" * 1000) for i in range(5)]
    text, shown = render_material(els, 2000)
    assert shown == ["e0", "e1", "e2", "e3"][: len(shown)] and len(text) <= 2000 + 20
    assert render_material(els, 2000) == (text, shown)
    full, all_ids = render_material(els, 100_000)
    assert all_ids == [e.id for e in els] and "x" * 1000 in full


# -- construction ------------------------------------------------------------------------------------
def test_construction_keeps_only_ids_that_were_shown_and_exist(m0):
    sm, _ = m0
    alice = card_of(sm, "Alice")
    assert alice is not None
    names = {a.name for a in alice.attributes}
    assert "pet" not in names and "city" not in names  # invented id; real id of another entity, never shown
    assert not any("keeps a dog" in u.statement for u in sm.units)
    assert sm.history[-1].stats["claims_bad_ids"] == 3
    for u in sm.units:
        for eid in u.element_ids():
            assert SOURCE.element(eid) is not None
        assert not SourceModel.is_stale(u, SOURCE)


def test_ungrounded_claim_is_dropped_by_the_batched_gate(m0):
    sm, ctx = m0
    assert not any("UNGROUNDED" in u.statement for u in sm.units)
    # the second: a negative claim whose excerpt states no denial ("no longer flies"), rejected by code
    assert not any("no longer flies" in u.statement for u in sm.units)
    assert sm.history[-1].stats["claims_ungrounded"] == 2
    assert stage_calls(ctx)["construct_ground"] >= 4  # one batched check per entity with claims


def test_folding_creates_a_prototype_with_exceptions(m0):
    sm, _ = m0
    protos = {u.statement: u for u in by_role(sm, "pattern") if u.scope.kind == "region" and "entities" in u.statement}
    job = next(u for s, u in protos.items() if s.startswith("In people, job is pilot"))
    assert job.scope.keys == ["people"] and job.exceptions == ["Dave"]
    assert "3 of the 4 entities that state it" in job.statement
    assert {a.element_id for a in job.anchors} == {"people/alice.md#work", "people/bob.md#work", "people/carol.md#work"}
    emp = next(u for s, u in protos.items() if s.startswith("In people, employer is Nordair"))
    assert emp.exceptions == []
    assert not any("born_in" in s for s in protos)  # Oslo/Lyon: no value shared by 3
    # folded cells left the cards; the deviating cell stays on its card (it is the exception)
    assert card_of(sm, "Bob") is not None and {a.name for a in card_of(sm, "Bob").attributes} == {"born_in"}
    assert card_of(sm, "Carol") is None  # nothing left on Carol's card
    assert [(a.name, a.value) for a in card_of(sm, "Dave").attributes] == [("job", "baker")]


def test_near_duplicate_mechanisms_merge_into_one_regional_mechanism(m0):
    sm, _ = m0
    mechs = by_role(sm, "mechanism")
    assert len(mechs) == 1
    m = mechs[0]
    assert m.scope.kind == "region" and m.scope.keys == ["people"] and len(m.absorbed) == 2
    assert m.conditions == ["while employed by Nordair"]
    assert {a.element_id for a in m.anchors} == {"people/alice.md#work", "people/bob.md#work"}


def test_abstraction_pass_admits_cross_entity_items(m0):
    """The pass lists the region's entity cards, distinctions and details (4 here: Alice, Bob, Dave's
    cards and Dave's distinction); places has fewer than 4 and gets no call."""
    sm, ctx = m0
    rules = [u for u in by_role(sm, "pattern") if "Nordair work as pilots" in u.statement]
    assert len(rules) == 1 and rules[0].conditions == ["employer is Nordair"]
    assert not any(u.statement == "Alice works as a pilot" for u in sm.units)  # one entity only
    assert not any("Birthplaces vary" in u.statement for u in sm.units)  # vague, no direction
    ab = sm.history[-1].stats["abstraction"]
    assert ab["proposed"] == 3 and ab["accepted"] == 1
    assert ab["replaced"] == 0  # a shared rule may replace statements, never a card
    assert card_of(sm, "Alice") is not None
    assert stage_calls(ctx)["construct_abstract"] == 1  # places has < 4 units: no abstraction call


def test_maps_brief_and_routing_descriptions(m0):
    sm, ctx = m0
    assert sm.brief.startswith("Facts about a toy town.")
    maps = by_role(sm, "map")
    assert {u.statement for u in maps} >= {"People of the toy town and their jobs.", "Alice is the daughter of Carol"}
    assert "Bob" not in {u.statement for u in maps}  # an echoed name is not a relation
    rel = next(u for u in maps if u.statement.startswith("Alice is"))
    assert {a.element_id for a in rel.anchors} == {"people/alice.md#family", "people/alice.md#work",
                                                   "people/carol.md#work"}
    assert sm.regions[0].description == "People of the toy town and their jobs."
    calls = stage_calls(ctx)
    assert calls["construct_brief"] == 1 and calls["construct_regions"] == 2 and calls["construct_read"] == 6
    assert sm.stage == "M0" and sm.history[-1].stage == "M0"


def test_construction_is_deterministic(tmp_path):
    scripted.set_script(SCRIPT)
    a = run(construct(SOURCE, make_ctx(tmp_path / "a"), SourceLearnConfig(concurrency=1)))
    b = run(construct(SOURCE, make_ctx(tmp_path / "b"), SourceLearnConfig(concurrency=4)))
    assert a.model_dump_json() == b.model_dump_json()


# -- pure folding / dedup ------------------------------------------------------------------------
def _card(key: str, **attrs: str) -> Unit:
    scope = Scope(kind="entity", keys=[key])
    anchor = SourceModel.stamp(["people/alice.md#work"], SOURCE)[0]
    return Unit(id=SourceModel.unit_id(key, "card", scope), statement=key, role="card", scope=scope,
                attributes=[Attribute(name=n, value=v, anchor=anchor) for n, v in attrs.items()])


def _region(n: int) -> Region:
    return Region(id="r", title="r", entity_keys=[f"e{i}" for i in range(n)])


def test_folding_thresholds_three_entities_and_sixty_percent():
    # 3 of 5 = 60%: folds; the 4th entity deviates -> exception; the 5th has no such attribute
    units = [_card("e0", tier="gold"), _card("e1", tier="gold"), _card("e2", tier="Gold "), _card("e3", tier="blue"),
             _card("e4", size="xl")]
    out, st = fold_prototypes(_region(5), units, 3, 0.6)
    protos = [u for u in out if u.role == "pattern"]
    assert st["prototypes"] == 1 and protos[0].exceptions == ["e3"] and st["cells_folded"] == 3
    assert [u.scope.keys[0] for u in out if u.role == "card"] == ["e3", "e4"]
    # 3 of the 6 entities that state it = 50%: below the share, nothing folds
    more = units + [_card("e5", tier="red"), _card("e6", tier="green")]
    out, st = fold_prototypes(_region(7), more, 3, 0.6)
    assert st["prototypes"] == 0 and sum(1 for u in out if u.role == "card") == 7
    # the share counts the entities that state the attribute (official FOLD_SHARE): 3 of 4 folds in a region
    # of 10 where six entities never mention it (3 of 10 = 30% of the region)
    sparse = units[:4] + [_card(f"e{i}", size=f"s{i}") for i in range(4, 10)]
    out, st = fold_prototypes(_region(10), sparse, 3, 0.6)
    protos = [u for u in out if u.role == "pattern"]
    assert st["prototypes"] == 1 and protos[0].exceptions == ["e3"]
    assert protos[0].statement == "In r, tier is gold for 3 of the 4 entities that state it"
    # 2 of 2 = 100% but fewer than 3 entities: nothing folds
    out, st = fold_prototypes(_region(2), units[:2], 3, 0.6)
    assert st["prototypes"] == 0


def _stmt(text: str, role: str = "mechanism", key: str = "e0", n_anchors: int = 1) -> Unit:
    scope = Scope(kind="entity", keys=[key])
    ids = ["people/alice.md#work", "people/bob.md#work", "people/carol.md#work"][:n_anchors]
    return Unit(id=SourceModel.unit_id(text, role, scope), statement=text, role=role, scope=scope,  # type: ignore[arg-type]
                anchors=SourceModel.stamp(ids, SOURCE))


def test_dedup_keeps_the_better_anchored_near_duplicate_of_the_same_role():
    a = _stmt("Orders ship within two days of payment", n_anchors=1)
    b = _stmt("Orders ship within two days of payment.", key="e1", n_anchors=2)
    c = _stmt("Orders ship within two days of payment", role="detail", key="e2")
    d = _stmt("Refunds take a week")
    out, dropped = dedup([a, b, c, d])
    assert dropped == 1 and [u.id for u in out] == [b.id, c.id, d.id]
    assert out[0].absorbed == [a.id]
    # the same statement in two different regions is kept in both
    out, dropped = dedup([a, b], place=lambda u: (u.scope.keys[0],))
    assert dropped == 0 and len(out) == 2


def test_mechanisms_of_one_entity_do_not_merge_into_a_region_unit():
    r = Region(id="r", title="r", entity_keys=["e0", "e1"])
    units = [_stmt("Jobs retry three times on failure"), _stmt("Jobs retry three times on a failure")]
    out, merged = merge_mechanisms(r, units)
    assert merged == 0 and out == units
    units.append(_stmt("Jobs retry three times on failure", key="e1"))
    out, merged = merge_mechanisms(r, units)
    assert merged == 2 and [u.scope.kind for u in out] == ["region"]


def test_vague_statements_need_a_direction():
    assert is_vague("Fees vary between accounts")
    assert not is_vague("Fees are higher for business accounts")
    assert not is_vague("Jobs retry three times")


def test_batch_gate_schema_asks_for_a_verdict_on_every_claim():
    from sourcebench.harness.schema_limits import schema_json
    from sourcebench.methods.sourcelearn.grounding import batch_verdicts

    s = schema_json(batch_verdicts(3))
    assert s["required"] == ["claim_1", "claim_2", "claim_3"] and s["additionalProperties"] is False
    assert batch_verdicts(3) is batch_verdicts(3)  # one class per size (the schema cache keys on it)


def test_reading_material_fits_a_tokenizer_that_cuts_code_finely(tmp_path):
    """chars / 4 budgets overflow a small model's window on indented code; the exact fit does not."""
    from sourcebench.methods.sourcelearn.method import SourceLearnM0

    def tokens(text: str) -> int:  # a token per pair of spaces on top of chars / 4
        return len(text) // 4 + text.count("  ")

    async def count(text: str) -> int:
        return tokens(text)

    body = "def step(state):\n" + "        if state.ready:\n            return state.value\n" * 60
    els = [Element(id=f"pkg/engine.py#part{i}", title=f"Engine / part {i}", text=body, path="pkg/engine.py",
                   kind="section", metadata={"entity": "Engine"}) for i in range(40)]
    source = Source(id="engine", kind="documents", description="one engine module", elements=els)
    window, reply, prompts = 6000, 1500, []  # reply: construct.READ_MAX_TOKENS

    def record(messages, schema):
        prompts.append(tokens("\n".join(m["content"] for m in messages)))
        return json.dumps(EMPTY_READING)

    def learn(name: str, exact: bool) -> dict:
        prompts.clear()
        scripted.set_script(dispatch(("profile of ONE entity", record), ("Before reading it", json.dumps(
            {"purpose": "p", "scenarios": [], "main_objects": [], "reading_questions": [], "ignore": []}))))
        ctx = make_ctx(tmp_path / name, source, window=window)  # its own call cache
        if exact:
            ctx.llm.count_tokens = count
        stats = run(SourceLearnM0(config=SourceLearnConfig()).learn(source, [], ctx))
        assert prompts
        return stats

    assert learn("estimate", exact=False)["chars_per_token"] == 4.0
    assert max(prompts) + reply > window  # chars / 4 overflows the window ...
    stats = learn("exact", exact=True)
    assert max(prompts) + reply <= window  # ... the prompt counted in the model's tokens fits
    assert stats["chars_per_token"] == round(len(body) / tokens(body), 3)  # the source's own ratio, recorded


# -- the official reading: budget, excerpts, closure windows, admission, brief -----------------------
def _read_prompts():
    return [c for c in scripted.CALLS if "profile of ONE entity" in c["messages"][0]["content"]]


def test_reading_budget_is_six_entries_in_total_and_attributes_are_unbounded(tmp_path):
    eid = "people/alice.md#work"
    many = {"attributes": [_attr(f"field_{i}", f"value {i}", eid) for i in range(8)],
            "mechanisms": [], "distinctions": [], "decisive_details": []}
    scripted.set_script(dispatch(("For every claim say whether", batch_gate),
                                 ("profile of ONE entity", lambda m, s: json.dumps(
                                     many if "Entity: Alice" in m[-1]["content"] else EMPTY_READING))))
    src = Source(id="one", kind="documents", elements=SOURCE.elements[:2])
    sm = run(construct(src, make_ctx(tmp_path, src), SourceLearnConfig()))
    assert len(card_of(sm, "Alice").attributes) == 8  # was cut to 6 (a per-slot cap applied to attributes)
    call = _read_prompts()[0]
    system = call["messages"][0]["content"]
    assert "mechanisms, distinctions and decisive_details together hold at most 6 entries" in system
    assert "per slot" not in system
    from sourcebench.methods.sourcelearn.construct import reading_schema

    props = reading_schema(6).model_json_schema()["properties"]
    assert props["attributes"]["maxItems"] > 6 and props["mechanisms"]["maxItems"] == 6


def test_a_document_reading_sees_900_character_excerpts(tmp_path):
    long = "A" * 900 + "TAILSECRET" + "B" * 1500
    src = Source(id="doc", kind="documents", elements=[
        Element(id="a.md#s1", title="A / S1", text=long, path="a.md", metadata={"entity": "A"}),
        Element(id="a.md#s2", title="A / S2", text="short section", path="a.md", metadata={"entity": "A"})])
    scripted.set_script(dispatch(("profile of ONE entity", json.dumps(EMPTY_READING))))
    run(construct(src, make_ctx(tmp_path, src), SourceLearnConfig()))
    user = _read_prompts()[0]["messages"][-1]["content"]
    assert "A" * 900 in user and "TAILSECRET" not in user and "short section" in user


def test_document_families_are_read_in_batches_of_whole_files_up_to_60k():
    els = [Element(id=f"d/f{i:02d}.md#s{j}", title=f"F{i} / {j}", text="x" * 2000, path=f"d/f{i:02d}.md",
                   metadata={"entity": "Family"}) for i in range(10) for j in range(10)]
    ents = find_entities(Source(id="fam", kind="documents", elements=els))
    # 100 sections of 900 + 80 excerpt characters: 6 files (58,800) in the first reading, 4 in the second
    assert [len(e.element_ids) for e in ents] == [60, 40]
    assert {i.split("#")[0] for i in ents[0].element_ids} == {f"d/f{i:02d}.md" for i in range(6)}


CODE_A = '''LIMIT = 3
OTHER = 9


def run(x):
    """Run with helper."""
    return helper(x) + LIMIT + Engine().go()


def helper(x):
    return _inner(x) * 2


def _inner(x):
    return x


def unrelated():
    return "UNRELATEDCODE"
'''
CODE_B = '''class Engine:
    def go(self):
        return 1


class Spare:
    pass
'''


def test_a_code_entity_is_read_with_its_closure_window(tmp_path):
    from sourcebench.harness.elements import split_python

    code_a = "from pkg.b import Engine\n\n" + CODE_A
    els = split_python("pkg/a.py", code_a) + split_python("pkg/b.py", CODE_B) + split_python("lib/c.py", "X = 1\n")
    src = Source(id="code", kind="code", elements=els)
    scripted.set_script(dispatch(("profile of ONE entity", json.dumps(EMPTY_READING))))
    run(construct(src, make_ctx(tmp_path, src), SourceLearnConfig()))
    user = next(c["messages"][-1]["content"] for c in _read_prompts()
                if "Entity: run\n" in c["messages"][-1]["content"])
    # the entity, what it reaches in its module (transitively), its constant, the class it imports
    for piece in ("def run(x):", "def helper(x):", "def _inner(x):", "LIMIT = 3", "class Engine:",
                  "[pkg/a.py#helper]", "[pkg/b.py#Engine]"):
        assert piece in user, piece
    assert "UNRELATEDCODE" not in user and "OTHER = 9" not in user and "class Spare" not in user
    assert "construct_brief" not in stage_calls(make_ctx(tmp_path, src))  # a code source has no brief
    assert not any("Before reading it entity by entity" in c["messages"][0]["content"] for c in scripted.CALLS)


def test_abstraction_items_are_admitted_mechanically_without_an_llm_gate(m0):
    from sourcebench.methods.sourcelearn.construct import admissible

    assert m0 and not any("Is the claim supported?" in c["messages"][0]["content"]
                   + c["messages"][-1]["content"] for c in scripted.CALLS)
    a1 = Unit(id="a1", statement="s", role="mechanism", scope=Scope(kind="entity", keys=["Alice"]))
    a2 = a1.model_copy(update={"id": "a2"})
    b1 = a1.model_copy(update={"id": "b1", "scope": Scope(kind="entity", keys=["Bob"])})
    assert not admissible("shared_rule", [a1, a2], "Pilots fly on weekdays", "r")  # one entity
    assert admissible("shared_rule", [a1, b1], "Pilots fly on weekdays", "r")
    assert admissible("distinction", [a1, a2], "Alice flies before noon, unlike her training flights", "r")
    assert not admissible("distinction", [a1], "Alice flies before noon", "r")
    assert admissible("exception", [a1], "Alice flies only on Mondays", "r")
    assert not admissible("shared_rule", [a1, b1], "Schedules vary", "r")  # vague


def test_the_document_brief_carries_reading_questions(m0):
    sm, _ = m0
    assert "Reading questions: who employs whom (who works where)." in sm.brief
    brief_call = next(c for c in scripted.CALLS if "Before reading it entity by entity" in c["messages"][0]["content"])
    assert "reading_questions" in brief_call["schema"]["properties"]
    read = _read_prompts()[0]["messages"][0]["content"]
    assert "Reading questions: who employs whom" in read
    maps = [c for c in scripted.CALLS if "structural map of one region" in c["messages"][0]["content"]]
    assert maps and not any("who employs whom" in c["messages"][-1]["content"] for c in maps)


def test_a_large_document_source_gives_each_block_a_soft_token_budget(tmp_path):
    from sourcebench.methods.sourcelearn.regions import block_budgets

    cfg = SourceLearnConfig()
    sizes = {"big": 150_000, "mid": 40_000, "tiny": 1_000}
    els = [Element(id=f"{r}/doc.md#s{i}", title=f"{r} {i}", text="w " * 500, path=f"{r}/doc.md",
                   metadata={"entity": f"{r}-{i // 10}"}) for r, n in sizes.items() for i in range(n // 1000)]
    src = Source(id="large", kind="documents", elements=els)
    part = folder_partition(src, find_entities(src))
    budgets = block_budgets(src, part.regions, cfg)
    # shares of 40,000 tokens by characters (globally: 150/191, 40/191, 1/191), within [1,200, 6,000]
    assert budgets == {"big": 6000, "mid": 6000, "tiny": 1200}
    assert block_budgets(src.model_copy(update={"elements": els[:50]}), part.regions, cfg) == {}  # small source
    assert block_budgets(Source(id="c", kind="code", elements=els), part.regions, cfg) == {}
    scripted.set_script(dispatch(("profile of ONE entity", json.dumps(EMPTY_READING))))
    run(construct(src.model_copy(update={"elements": [e for e in els if e.path != "big/doc.md"]
                                         + [e for e in els if e.path == "big/doc.md"][:100]}),
                  make_ctx(tmp_path, src), cfg))
    system = _read_prompts()[0]["messages"][0]["content"]
    assert "the model of this whole block should stay near" in system
