"""The official shape of SourceLearn's rewrites, with the scripted model: consolidation per entity then
one cross-entity pass per region and one relation pass per CONNECT pair; grounding against all of a
rewrite's evidence; refinement that sees the task's question, replaces at most 4 units and drops what
the model already states; preservation checked 25 meanings a call with no cap."""

from __future__ import annotations

import asyncio

from helpers import SOURCE, make_ctx
from test_selfstudy import (
    GATE,
    NARROW,
    PRESERVE,
    WRITER,
    calls_with,
    ent,
    excerpts_in,
    gate_if,
    proposal,
    route,
    toy_model,
    unit,
    writes,
)

from sourcebench.harness.providers import scripted
from sourcebench.methods.sourcelearn.config import SourceLearnConfig
from sourcebench.methods.sourcelearn.grounding import GateStats, preservation_check
from sourcebench.methods.sourcelearn.model import Scope
from sourcebench.methods.sourcelearn.rewrite import (
    MAX_REPLACE,
    Note,
    RewriteSpec,
    RewriteStats,
    rewrite_region,
)
from sourcebench.methods.sourcelearn.selfstudy.consolidate import consolidate
from sourcebench.methods.sourcelearn.taskguided.diagnose import Claim, TaskNeeds
from sourcebench.methods.sourcelearn.taskguided.refine import RefineStats, refine

COVERAGE = frozenset({"missing"})
SPEC = RewriteSpec(mode="consolidate", origin="self-study", stage="ms_consolidate", ground_stage="ms_ground",
                   preserve_stage="ms_preserve")


def writer_prompts() -> list[str]:
    return ["\n".join(m["content"] for m in c["messages"]) for c in calls_with(WRITER)]


def note(text: str, ids: tuple[str, ...], ents: tuple[str, ...], origin: str = "inspect") -> Note:
    return Note(text=text, evidence_ids=ids, entities=ents, origin=origin)


# -- 1. consolidation per entity -------------------------------------------------------------------------
def test_a_region_of_three_entities_gets_three_entity_rewrites_one_cross_pass_and_one_pair_pass(tmp_path):
    notes = [note("Alice flies for Nordair.", ("people/alice.md#work",), ("Alice",)),
             note("Bob flies for Nordair.", ("people/bob.md#work",), ("Bob",)),
             note("Carol retired in 2020.", ("people/carol.md#work",), ("Carol",)),
             # an inspection note whose evidence spans two entities belongs to the region's cross pass
             note("Alice and Bob share an employer.", ("people/alice.md#work", "people/bob.md#work"), ("Alice",)),
             # a CONNECT note belongs to its pair
             note("Dave works in Oslo.", ("people/dave.md#work", "places/oslo.md#overview"), ("Dave", "Oslo"),
                  origin="study")]
    scripted.set_script(route({WRITER: writes([]), GATE: gate_if(lambda c: True), PRESERVE: lambda p, _: {"lost": []}}))
    stats = RewriteStats()
    ctx = make_ctx(tmp_path)
    asyncio.run(consolidate(ctx.llm, toy_model(), SOURCE, notes, SPEC, GateStats(), stats))
    users = [c["messages"][-1]["content"].split("\n", 1)[0] for c in calls_with(WRITER)]
    assert sorted(users) == sorted(["Entity: Alice (of region people)", "Entity: Bob (of region people)",
                                    "Entity: Carol (of region people)", "Cross-entity structure of region: people",
                                    "Relation between entities: Dave and Oslo (region people)"])
    assert (stats.entity_passes, stats.relation_passes, stats.pair_passes) == (3, 1, 1)
    # an entity pass rewrites the entity's own units only: Bob's detail is not among Alice's current units
    alice = next(p for p in writer_prompts() if "Entity: Alice" in p)
    current = alice.split("Current units:\n", 1)[1].split("\n\n", 1)[0]
    assert "Alice flies for Nordair." in current and "Bob is a pilot" not in current
    assert "Most people of the town" not in current  # the region's pattern: context only
    assert "Most people of the town" in alice.split("Context units", 1)[1]


# -- 2. grounding against all of the rewrite's evidence ---------------------------------------------------
def test_a_claim_supported_only_by_evidence_the_writer_did_not_cite_is_grounded(tmp_path):
    def grounder(prompt: str, _):
        claim = prompt.split("Claim:\n", 1)[1].split("\n\n", 1)[0]
        shown = excerpts_in(prompt)
        ok = "works for Nordair" in claim and "people/alice.md#work" in shown
        return {"supported": ok, "evidence_ids": ["people/alice.md#work"] if ok else [], "unsupported_parts": []}

    # the writer cites Alice's family section; only her work section (in the evidence) says it
    scripted.set_script(route({WRITER: writes([proposal("Alice works for Nordair.", ["people/alice.md#family"])]),
                               GATE: grounder, NARROW: lambda p, _: {"statement": ""},
                               PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    gs = GateStats()
    n = note("Alice's employer is Nordair.", ("people/alice.md#work",), ("Alice",))
    res = asyncio.run(rewrite_region(ctx.llm, toy_model(), SOURCE, "people", [n], SPEC, gs))
    new = [u for u in res.units if u.origin == "self-study"]
    assert [u.statement for u in new] == ["Alice works for Nordair."] and gs.accepted == 1
    assert [a.element_id for a in new[0].anchors] == ["people/alice.md#work"]  # the grounder's anchor


def test_the_rewrite_grounds_twenty_statements_a_call(tmp_path):
    many = [proposal(f"Alice flew route {i} for Nordair.", ["people/alice.md#work"]) for i in range(25)]
    scripted.set_script(route({WRITER: writes(many), GATE: gate_if(lambda c: True),
                               PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    n = note("Alice flies routes.", ("people/alice.md#work",), ("Alice",))
    res = asyncio.run(rewrite_region(ctx.llm, toy_model(), SOURCE, "people", [n], SPEC, GateStats()))
    assert len(calls_with(GATE)) == 2  # 20 + 5
    assert sum(u.origin == "self-study" for u in res.units) == 25


def test_preservation_checks_every_old_unit_25_a_call(tmp_path):
    sm = toy_model()
    old = [unit(f"Alice holds licence {i}.", "detail", ent("Alice"), ["people/alice.md#work"]) for i in range(60)]
    scripted.set_script(route({PRESERVE: lambda p, _: {"lost": list(range(1, 26))}}))  # every one, every call
    ctx = make_ctx(tmp_path)
    lost = asyncio.run(preservation_check(ctx.llm, old, sm.units[:1], "ms_preserve"))
    assert len(calls_with(PRESERVE)) == 3 and [u.id for u in lost] == [u.id for u in old]  # 60 of 60, none cut


# -- 3. refinement ----------------------------------------------------------------------------------------
NEEDS = TaskNeeds(task_id="g9", question="QTASK Which airline does Alice fly for?",
                  support_ids=("people/alice.md#work",),
                  claims=(Claim("Alice works for Nordair as a pilot.", ("people/alice.md#work",)),))


def run_refine(tmp_path, sm, writer, cfg=None):
    scripted.set_script(route({COVERAGE: lambda p, _: {"missing": [1]}, WRITER: writer,
                               GATE: gate_if(lambda c: True), NARROW: lambda p, _: {"statement": ""},
                               PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    stats = RefineStats()
    out = asyncio.run(refine(ctx.llm, sm, SOURCE, NEEDS, cfg or SourceLearnConfig(concurrency=1), GateStats(), stats))
    return out, stats


def test_the_refinement_writer_sees_the_task_question_and_the_nearest_units(tmp_path):
    sm = toy_model()
    sm.units += [unit(f"Oslo street {i} has a bakery.", "detail", ent("Oslo"), ["places/oslo.md#overview"])
                 for i in range(20)]  # nothing in common with the needed claim
    run_refine(tmp_path, sm, writes([]))
    [prompt] = writer_prompts()
    assert "QTASK Which airline does Alice fly for?" in prompt
    current = prompt.split("Current units:\n", 1)[1].split("\n\n", 1)[0]
    assert "Alice flies for Nordair." in current and "street" not in current  # not the whole region


def test_refinement_replaces_at_most_four_units(tmp_path):
    sm = toy_model()
    extra = [unit(f"Alice works shift {i} as a Nordair pilot.", "detail", ent("Alice"), ["people/alice.md#work"])
             for i in range(6)]
    sm.units += extra

    def writer(prompt: str, _):
        return {"keep": [], "units": [proposal("Alice works for Nordair as a pilot on six shifts.",
                                               ["people/alice.md#work"], absorbs=[u.id for u in extra])]}

    out, stats = run_refine(tmp_path, sm, writer)
    gone = [u for u in extra if u.id not in {x.id for x in out.units}]
    assert len(gone) == MAX_REPLACE == 4 and stats.rewrite.over_replace == 2
    assert "Alice works for Nordair as a pilot on six shifts." in {u.statement for u in out.units}


def test_a_refinement_proposal_the_model_already_states_is_dropped(tmp_path):
    sm = toy_model()
    sm.units.append(unit("Alice works for Nordair as a pilot.", "detail", ent("Alice"), ["people/alice.md#work"]))
    # the same meaning as a mechanism (a new unit id): the word overlap finds it, entailment confirms it
    out, stats = run_refine(tmp_path, sm, writes([proposal("Alice works for Nordair as a pilot.",
                                                           ["people/alice.md#work"], role="mechanism")]))
    assert stats.rewrite.known == 1 and stats.units_written == 0
    assert [u.id for u in out.units] == [u.id for u in sm.units]


def test_a_replaced_unit_the_new_units_do_not_carry_and_the_source_supports_stays(tmp_path):
    sm = toy_model()
    alice = next(u for u in sm.units if u.statement == "Alice flies for Nordair.")

    def grounder(prompt: str, _):  # the new unit grounds; it does not entail the old one, which the source supports
        ok = "(model unit)" not in prompt
        return {"supported": ok, "evidence_ids": ["people/alice.md#work"] if ok else [], "unsupported_parts": []}

    scripted.set_script(route({COVERAGE: lambda p, _: {"missing": [1]},
                               WRITER: writes([proposal("Alice is a pilot.", ["people/alice.md#work"],
                                                        absorbs=[alice.id])]),
                               GATE: grounder}))
    ctx = make_ctx(tmp_path)
    stats = RefineStats()
    out = asyncio.run(refine(ctx.llm, sm, SOURCE, NEEDS, SourceLearnConfig(concurrency=1), GateStats(), stats))
    assert alice.id in {u.id for u in out.units} and stats.rewrite.not_superseded == 1
    assert "Alice is a pilot." in {u.statement for u in out.units}
    assert Scope(kind="entity", keys=["Alice"]) == next(u for u in out.units if u.statement == "Alice is a pilot.").scope


def test_a_rewrite_whose_required_units_all_fail_grounding_changes_nothing(tmp_path):
    sm = toy_model()
    alice = next(u for u in sm.units if u.statement == "Alice flies for Nordair.")
    scripted.set_script(route({WRITER: writes([proposal("Alice flies gliders.", ["people/alice.md#work"],
                                                        absorbs=[alice.id])]),
                               GATE: gate_if(lambda c: False), NARROW: lambda p, _: {"statement": ""},
                               PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    n = note("Alice flies.", ("people/alice.md#work",), ("Alice",))
    res = asyncio.run(rewrite_region(ctx.llm, sm, SOURCE, "people", [n], SPEC, GateStats()))
    assert not res.committed and res.reason.startswith("refused") and calls_with(PRESERVE) == []


def test_concurrent_entity_rewrites_give_the_same_model_and_gate_counts(tmp_path):
    notes = [note(f"{k} flies for Nordair.", (f"people/{k.lower()}.md#work",), (k,)) for k in ("Alice", "Bob", "Carol")]

    def writer(prompt: str, _):
        key = prompt.split("Entity: ", 1)[1].split(" ", 1)[0]
        return {"keep": [], "units": [proposal(f"{key} is employed by Nordair as a pilot.",
                                               [f"people/{key.lower()}.md#work"], scope=[key]),
                                      proposal(f"{key} REJECTED claim.", [f"people/{key.lower()}.md#work"], scope=[key])]}

    runs = []
    for conc in (1, 4):
        scripted.set_script(route({WRITER: writer, GATE: gate_if(lambda c: "REJECTED" not in c),
                                   NARROW: lambda p, _: {"statement": ""}, PRESERVE: lambda p, _: {"lost": []}}))
        ctx = make_ctx(tmp_path / f"c{conc}")
        gs = GateStats()
        spec = RewriteSpec(mode="consolidate", origin="self-study", stage="ms_consolidate", ground_stage="ms_ground",
                           preserve_stage="ms_preserve", concurrency=conc)
        out, _ = asyncio.run(consolidate(ctx.llm, toy_model(), SOURCE, notes, spec, gs, RewriteStats()))
        runs.append(([u.model_dump() for u in out.units], gs.as_dict()))
    assert runs[0] == runs[1]
    assert runs[0][1]["rejected_statements"] == [f"{k} REJECTED claim." for k in ("Alice", "Bob", "Carol")]
