"""Self-directed source learning and the shared region rewrite, with the scripted model.

Replies are routed by the JSON schema a call asks for (each SourceLearn call has its own), so a
test dictates exactly what the writer, the gate, the preservation check or the planner says, and
asserts what code makes of it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

from helpers import SOURCE, make_ctx, stage_calls

from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.providers import scripted
from sourcebench.harness.retrieval import HybridIndex
from sourcebench.methods.sourcelearn.config import SourceLearnConfig
from sourcebench.methods.sourcelearn.grounding import GateStats
from sourcebench.methods.sourcelearn.learn_retrieval import expand_code_windows, tiered_search
from sourcebench.methods.sourcelearn.model import Attribute, Entity, Region, Scope, SourceModel, Unit
from sourcebench.methods.sourcelearn.rewrite import (
    Note,
    RewriteSpec,
    RewriteStats,
    apply_rewrite,
    rewrite_region,
)
from sourcebench.methods.sourcelearn.selfstudy import self_learn
from sourcebench.methods.sourcelearn.selfstudy.consolidate import consolidate
from sourcebench.methods.sourcelearn.selfstudy.plan import Action, ProposedAction, validate_actions

# -- a hand-built M0 over the helpers' toy source ------------------------------------------------
PEOPLE = {"Alice": ["people/alice.md#family", "people/alice.md#work"],
          "Bob": ["people/bob.md#family", "people/bob.md#work"],
          "Carol": ["people/carol.md#work"], "Dave": ["people/dave.md#work"]}
PLACES = {"Oslo": ["places/oslo.md#overview"], "Lyon": ["places/lyon.md#overview"]}


def unit(statement: str, role: str, scope: Scope, ids: list[str], **kw: Any) -> Unit:
    return Unit(id=SourceModel.unit_id(statement, role, scope), statement=statement, role=role, scope=scope,
                anchors=SourceModel.stamp(ids, SOURCE), **kw)


def ent(key: str) -> Scope:
    return Scope(kind="entity", keys=[key])


def toy_model() -> SourceModel:
    entities = [Entity(key=k, name=k, region="people", element_ids=v) for k, v in PEOPLE.items()]
    entities += [Entity(key=k, name=k, region="places", element_ids=v) for k, v in PLACES.items()]
    regions = [Region(id="people", title="people", element_ids=[i for v in PEOPLE.values() for i in v],
                      entity_keys=list(PEOPLE)),
               Region(id="places", title="places", element_ids=[i for v in PLACES.values() for i in v],
                      entity_keys=list(PLACES))]
    card = unit("Alice", "card", ent("Alice"), [], attributes=[
        Attribute(name="job", value="pilot", anchor=SourceModel.stamp(["people/alice.md#work"], SOURCE)[0])])
    units = [
        card,
        unit("Alice flies for Nordair.", "detail", ent("Alice"), ["people/alice.md#work"]),
        unit("Bob is a pilot at Nordair.", "detail", ent("Bob"), ["people/bob.md#work"]),
        unit("Most people of the town are Nordair pilots.", "pattern", Scope(kind="region", keys=["people"]),
             ["people/alice.md#work", "people/bob.md#work", "people/carol.md#work"], exceptions=["Dave"]),
        unit("Oslo is a fjord city with a port.", "detail", ent("Oslo"), ["places/oslo.md#overview"]),
    ]
    sm = SourceModel(source_id=SOURCE.id, source_fingerprint=SOURCE.fingerprint, brief="a toy town",
                     regions=regions, entities=entities, units=units)
    sm.record_stage("M0")
    return sm


# -- scripted replies routed by schema -----------------------------------------------------------
WRITER = frozenset({"keep", "units"})
OBSERVE = frozenset({"learned", "observations"})
PLAN = frozenset({"actions"})
GATE = frozenset({"supported", "evidence_ids", "unsupported_parts"})
NARROW = frozenset({"statement"})
PRESERVE = frozenset({"lost"})

Handler = Callable[[str, list[dict[str, str]]], Any]


def is_batch_gate(props: frozenset) -> bool:
    """The rewrite grounder's batch reply: one ``claim_<n>`` key per statement."""
    return bool(props) and all(re.fullmatch(r"claim_\d+", p) for p in props)


def excerpts_in(prompt: str) -> dict[str, str]:
    """The ``[id] title\\ntext`` excerpts of a grounding prompt, by id."""
    body = prompt.split("Source excerpts:\n", 1)[1].split("\n\nClaim", 1)[0]
    return {m.group(1): m.group(2)
            for m in re.finditer(r"^\[([^\]\n]+)\][^\n]*\n(.*?)(?=\n\n\[|\Z)", body, re.DOTALL | re.MULTILINE)}


def best_ids(claim: str, excerpts: dict[str, str]) -> list[str]:
    """The excerpts sharing the most words with a claim (what a grounder would name)."""
    words = set(re.findall(r"[a-z0-9]+", claim.lower())) - {"the", "of", "is", "a", "and", "for", "in"}
    score = {i: len(words & set(re.findall(r"[a-z0-9]+", t.lower()))) for i, t in excerpts.items()}
    top = max(score.values(), default=0)
    return [i for i, v in score.items() if v == top and v > 0] or list(excerpts)[:1]


def route(handlers: dict[frozenset, Handler]) -> Callable:
    """``scripted.set_script`` hook: the handler of the requested schema answers (a dict -> JSON). A batch
    grounding call is answered claim by claim by the GATE handler (each claim with the same excerpts)."""
    def reply(messages: list[dict[str, str]], schema: dict | None) -> str | None:
        props = frozenset() if schema is None else frozenset(schema.get("properties", {}))
        if is_batch_gate(props) and GATE in handlers:
            prompt = "\n".join(m["content"] for m in messages)
            block = prompt.split("Source excerpts:\n", 1)[1].split("\n\nClaims:\n", 1)[0]
            listing = prompt.split("\n\nClaims:\n", 1)[1].split("\n\nJudge every claim", 1)[0]
            out = {}
            for n, line in enumerate(listing.splitlines(), 1):
                claim = re.sub(r"^\d+\. ", "", line)
                v = handlers[GATE](f"Source excerpts:\n{block}\n\nClaim:\n{claim}\n\n", messages)
                v = json.loads(v) if isinstance(v, str) else v
                out[f"claim_{n}"] = {"supported": v["supported"], "evidence_ids": v["evidence_ids"]}
            return json.dumps(out)
        h = handlers.get(props)
        if h is None:
            return None
        out = h("\n".join(m["content"] for m in messages), messages)
        return out if isinstance(out, str) or out is None else json.dumps(out)
    return reply


def gate_if(pred: Callable[[str], bool]) -> Handler:
    """A grounder that supports the claims ``pred`` accepts, naming the excerpts that share most words."""
    def h(prompt: str, _):
        claim = prompt.split("Claim:\n", 1)[1].split("\n\n", 1)[0]
        ok = pred(claim)
        return {"supported": ok, "evidence_ids": best_ids(claim, excerpts_in(prompt)) if ok else [],
                "unsupported_parts": [] if ok else ["all"]}
    return h


def writes(units: list[dict], keep: list[str] = ()) -> Handler:
    return lambda prompt, _: {"keep": list(keep), "units": units}


def proposal(statement: str, ids: list[str], scope: list[str] = ("Alice",), absorbs: list[str] = (),
             role: str = "mechanism", conditions: list[str] = ()) -> dict:
    return {"statement": statement, "role": role, "scope_keys": list(scope), "conditions": list(conditions),
            "element_ids": ids, "absorbs": list(absorbs), "notes": [1]}


def calls_with(props: frozenset) -> list[dict]:
    """Calls that asked for the schema ``props`` (GATE: single and batch grounding calls alike)."""
    def match(c: dict) -> bool:
        got = frozenset(c["schema"].get("properties", {}))
        return got == props or (props == GATE and is_batch_gate(got))
    return [c for c in scripted.CALLS if c["schema"] and match(c)]


NOTE = Note(text="Alice and Bob both fly for Nordair; the employer decides the job.",
            evidence_ids=("people/alice.md#work", "people/bob.md#work"), entities=("Alice",))
NOTE_ALICE = Note(text="Alice flies for Nordair; the employer decides the job.",
                  evidence_ids=("people/alice.md#work",), entities=("Alice",))
SPEC = RewriteSpec(mode="consolidate", origin="self-study", stage="ms_consolidate", ground_stage="ms_ground",
                   preserve_stage="ms_preserve")


def rewrite(tmp_path, sm: SourceModel, notes=(NOTE,), spec: RewriteSpec = SPEC, gate: GateStats | None = None):
    ctx = make_ctx(tmp_path)
    gs = gate if gate is not None else GateStats()
    res = asyncio.run(rewrite_region(ctx.llm, sm, SOURCE, "people", list(notes), spec, gs))
    return res, gs, ctx


def by_statement(units: list[Unit]) -> dict[str, Unit]:
    return {u.statement: u for u in units}


# -- rewrite: grounding, preservation, cards, protection ------------------------------------------
def test_rewrite_rejects_ungrounded_units(tmp_path):
    sm = toy_model()
    scripted.set_script(route({
        WRITER: writes([proposal("Alice flies for Nordair as a pilot.", ["people/alice.md#work"]),
                        proposal("Alice owns a dog called Rex UNGROUNDED.", ["people/alice.md#family"]),
                        proposal("Alice flies gliders on weekends.", ["people/alice.md#hobbies"])]),
        GATE: gate_if(lambda c: "UNGROUNDED" not in c and "gliders" not in c),
        NARROW: lambda p, _: {"statement": ""},
        PRESERVE: lambda p, _: {"lost": []},
    }))
    res, gs, _ = rewrite(tmp_path, sm)
    assert res.committed
    new = [u for u in res.units if u.origin == "self-study"]
    assert [u.statement for u in new] == ["Alice flies for Nordair as a pilot."]
    assert new[0].anchors[0].element_id == "people/alice.md#work"  # where the grounder found it, fingerprinted
    assert new[0].anchors[0].fingerprint == SOURCE.element("people/alice.md#work").fingerprint
    assert gs.rejected == 2 and gs.accepted == 1  # the invented id is no anchor: the grounder judged it unsupported
    assert not any("UNGROUNDED" in u.statement or "gliders" in u.statement for u in res.units)


def test_rewrite_narrows_once_then_accepts(tmp_path):
    sm = toy_model()
    scripted.set_script(route({
        WRITER: writes([proposal("Alice flies for Nordair and UNGROUNDED loves it.", ["people/alice.md#work"])]),
        GATE: gate_if(lambda c: "UNGROUNDED" not in c),
        NARROW: lambda p, _: {"statement": "Alice flies for Nordair."},
        PRESERVE: lambda p, _: {"lost": []},
    }))
    res, gs, _ = rewrite(tmp_path, sm)
    assert gs.narrowed == 1
    assert "Alice flies for Nordair." in by_statement(res.units)
    assert len(calls_with(NARROW)) == 1


def test_rewrite_that_loses_an_old_meaning_keeps_the_old_unit(tmp_path):
    sm = toy_model()
    old = next(u for u in sm.units if u.statement == "Alice flies for Nordair.")
    merged = proposal("Nordair employs the town's pilots.", ["people/alice.md#work", "people/bob.md#work"],
                      scope=[], absorbs=[old.id], role="pattern")
    scripted.set_script(route({WRITER: writes([merged]), GATE: gate_if(lambda c: True),
                               PRESERVE: lambda p, _: {"lost": [n for n in range(1, 9) if f"{n}. [detail] Alice" in p]}}))
    res, _, _ = rewrite(tmp_path, sm)
    got = by_statement(res.units)
    assert "Alice flies for Nordair." in got and got["Alice flies for Nordair."] == old  # restored unchanged
    assert got["Nordair employs the town's pilots."].absorbed == [old.id]
    assert res.stats.restored >= 1


def test_rewrite_drops_an_old_unit_only_when_represented(tmp_path):
    sm = toy_model()
    old = next(u for u in sm.units if u.statement == "Alice flies for Nordair.")
    keep = [u.id for u in sm.units if u.role != "card" and u.id != old.id]
    merged = proposal("Alice is a Nordair pilot.", ["people/alice.md#work"], absorbs=[old.id], role="detail")
    scripted.set_script(route({WRITER: writes([merged], keep=keep), GATE: gate_if(lambda c: True),
                               PRESERVE: lambda p, _: {"lost": []}}))
    res, _, _ = rewrite(tmp_path, sm)
    assert old.id not in {u.id for u in res.units} and res.dropped_ids == [old.id]
    new = by_statement(res.units)["Alice is a Nordair pilot."]
    assert new.origin == "self-study" and new.absorbed == [old.id]
    # the preservation check only saw the one unit that was neither kept nor unchanged
    pres = calls_with(PRESERVE)
    assert len(pres) == 1 and "Alice flies for Nordair." in pres[0]["messages"][-1]["content"]
    assert "Bob is a pilot" not in pres[0]["messages"][-1]["content"].split("NEW region")[0]


def test_failed_writer_or_preservation_call_leaves_region_unchanged(tmp_path):
    sm = toy_model()
    scripted.set_script(route({WRITER: lambda p, _: "not json"}))
    res, _, _ = rewrite(tmp_path, sm)
    assert not res.committed and res.reason == "writer call failed"
    before = sm.model_dump()
    apply_rewrite(sm, res)
    assert sm.model_dump() == before

    scripted.set_script(route({WRITER: writes([proposal("Alice is a pilot.", ["people/alice.md#work"])]),
                               GATE: gate_if(lambda c: True), PRESERVE: lambda p, _: "nope"}))
    res, _, _ = rewrite(tmp_path / "b", sm)
    assert not res.committed and res.reason == "preservation check failed"


def test_cards_are_never_rewritten_and_unchanged_units_are_not_regated(tmp_path):
    sm = toy_model()
    card = next(u for u in sm.units if u.role == "card")
    same = next(u for u in sm.units if u.statement == "Alice flies for Nordair.")
    outside = next(u for u in sm.units if u.statement == "Bob is a pilot at Nordair.")  # not editable here
    scripted.set_script(route({
        WRITER: writes([proposal("Alice's job is pilot at Nordair.", ["people/alice.md#work"], absorbs=[card.id]),
                        proposal(same.statement, ["people/alice.md#work"], role="detail"),
                        proposal(outside.statement, ["people/bob.md#work"], scope=["Bob"], role="detail")]),
        GATE: gate_if(lambda c: True), PRESERVE: lambda p, _: {"lost": []}}))
    res, _, _ = rewrite(tmp_path, sm)
    assert card.id not in res.old_ids  # cards are context, not part of the editable set
    new = by_statement(res.units)["Alice's job is pilot at Nordair."]
    assert new.absorbed == []
    assert by_statement(res.units)[same.statement] == same and res.stats.unchanged == 2
    assert outside.id not in res.old_ids and outside not in res.units
    assert len(calls_with(GATE)) == 1  # only the new statement was gated
    out = sm.copy_deep()
    apply_rewrite(out, res)
    assert next(u for u in out.units if u.id == card.id) == card


def test_protected_units_survive_and_pass_protection_on(tmp_path):
    sm = toy_model()
    prot = unit("Bob was born in Lyon.", "detail", ent("Bob"), ["people/bob.md#work"], protected=True,
                origin="task-refine")
    sm.units.append(prot)
    scripted.set_script(route({WRITER: writes([proposal("Alice is a Nordair pilot.", ["people/alice.md#work"])]),
                               GATE: gate_if(lambda c: True), PRESERVE: lambda p, _: {"lost": []}}))
    res, _, _ = rewrite(tmp_path, sm, notes=(NOTE, Note("x", ("people/bob.md#work",), entities=("Bob",))))
    assert prot in res.units and res.stats.protected_kept == 1

    absorbing = proposal("Bob, a Nordair pilot, was born in Lyon.", ["people/bob.md#work"], scope=["Bob"],
                         absorbs=[prot.id], role="detail")
    scripted.set_script(route({WRITER: writes([absorbing]), GATE: gate_if(lambda c: True),
                               PRESERVE: lambda p, _: {"lost": []}}))
    res, _, _ = rewrite(tmp_path / "b", sm, notes=(NOTE, Note("x", ("people/bob.md#work",), entities=("Bob",))))
    new = by_statement(res.units)["Bob, a Nordair pilot, was born in Lyon."]
    assert prot.id not in {u.id for u in res.units} and new.protected and new.absorbed == [prot.id]


def test_refine_mode_caps_changed_units(tmp_path):
    sm = toy_model()
    many = [proposal(f"Fact number {i} about Alice.", ["people/alice.md#work"]) for i in range(6)]
    scripted.set_script(route({WRITER: writes(many), GATE: gate_if(lambda c: True),
                               PRESERVE: lambda p, _: {"lost": []}}))
    spec = RewriteSpec(mode="refine", origin="task-refine", stage="mt_refine", ground_stage="mt_ground",
                       preserve_stage="mt_preserve", max_changed=4, protect_new=True, delta=True)
    res, _, _ = rewrite(tmp_path, sm, spec=spec)
    new = [u for u in res.units if u.origin == "task-refine"]
    assert len(new) == 4 and res.stats.over_cap == 2 and all(u.protected for u in new)
    # refinement adds and replaces: units nobody absorbed stay without a preservation call
    assert {u.id for u in res.units} >= set(res.old_ids) and not calls_with(PRESERVE)
    assert "at most 4 units" in calls_with(WRITER)[0]["messages"][0]["content"]


def test_stale_units_are_neither_shown_nor_rewritten(tmp_path):
    sm = toy_model()
    stale = unit("Alice used to fly gliders.", "detail", ent("Alice"), ["people/alice.md#work"])
    stale.anchors[0].fingerprint = "0" * 16  # the anchored text changed since this unit was written
    sm.units.append(stale)
    scripted.set_script(route({WRITER: writes([]), PRESERVE: lambda p, _: {"lost": []}}))
    res, _, _ = rewrite(tmp_path, sm)
    assert stale.id not in res.old_ids and "gliders" not in calls_with(WRITER)[0]["messages"][-1]["content"]
    out = sm.copy_deep()
    apply_rewrite(out, res)
    assert stale.id in {u.id for u in out.units}  # left for use-time filtering, not silently deleted


# -- planning -------------------------------------------------------------------------------------
def test_validate_actions_checks_keys_arity_and_repeats():
    sm = toy_model()
    taken = {Action("CONNECT", ("Alice", "Bob"), "q").key}
    raw = [ProposedAction(kind="DEEPEN", entities=["alice"], observation=1, question="When does Alice fly?"),
           ProposedAction(kind="DEEPEN", entities=["Alice"], observation=2, question="Again?"),
           ProposedAction(kind="CONNECT", entities=["Bob", "Alice"], observation=1, question="Repeat?"),
           ProposedAction(kind="CONNECT", entities=["Bob", "Bob"], observation=1, question="Self?"),
           ProposedAction(kind="DEEPEN", entities=["Nobody"], observation=1, question="Unknown?"),
           ProposedAction(kind="DEEPEN", entities=["Carol", "Dave"], observation=1, question="Arity?"),
           ProposedAction(kind="CONNECT", entities=["Oslo", "Lyon"], observation=9, question=" Ports? "),
           ProposedAction(kind="DEEPEN", entities=["Dave"], observation=1, question="Over n")]
    refused: list[str] = []
    acts = validate_actions(raw, sm, taken, n=2, n_notes=3, refused=refused)
    assert [(a.kind, a.entities, a.question, a.observation) for a in acts] == [
        ("DEEPEN", ("Alice",), "When does Alice fly?", 1), ("CONNECT", ("Oslo", "Lyon"), "Ports?", 0)]
    assert refused == ["DEEPEN(Alice)", "CONNECT(Bob, Alice)", "CONNECT(Bob, Bob)", "DEEPEN(Nobody)",
                       "DEEPEN(Carol, Dave)"]


def observe_all(prompt: str, _) -> dict:
    """Every inspection finds one gap, citing the first element shown."""
    eid = prompt.split("Source text:\n[", 1)[1].split("]", 1)[0]
    return {"learned": True, "observations": [
        {"note": f"OBSNOTE about {eid}", "evidence_ids": [eid], "implication": "IMPLNOTE", "unit_ids": []}]}


def test_plan_never_repeats_and_stops_after_two_empty_rounds(tmp_path):
    rounds = iter([
        {"actions": [{"kind": "DEEPEN", "entities": ["Alice"], "observation": 1, "question": "QSTUDY one?"},
                     {"kind": "DEEPEN", "entities": ["Alice"], "observation": 1, "question": "QSTUDY dup?"},
                     {"kind": "CONNECT", "entities": ["Alice", "Bob"], "observation": 2, "question": "QSTUDY two?"}]},
        {"actions": [{"kind": "CONNECT", "entities": ["Bob", "Alice"], "observation": 2, "question": "again?"}]},
        {"actions": [{"kind": "DEEPEN", "entities": ["Alice"], "observation": 1, "question": "again?"}]},
        {"actions": [{"kind": "DEEPEN", "entities": ["Carol"], "observation": 1, "question": "never asked"}]},
    ])
    scripted.set_script(route({OBSERVE: observe_all, PLAN: lambda p, _: next(rounds),
                               WRITER: writes([]), PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    ms = asyncio.run(self_learn(toy_model(), SOURCE, ctx, SourceLearnConfig(study_actions=20)))
    rec = ms.history[-1].stats["cycles"][0]
    assert rec["rounds"] == 3 and rec["empty_rounds"] == 2
    assert rec["actions"] == 2 and rec["deepen"] == 1 and rec["connect"] == 1
    study = [c for c in calls_with(OBSERVE) if "STUDY mode" in c["messages"][0]["content"]]
    assert len(study) == 2
    # the second and third planning rounds saw the actions already taken
    plans = calls_with(PLAN)
    assert "DEEPEN(Alice): QSTUDY one?" in plans[1]["messages"][-1]["content"]


def test_a_retry_after_an_empty_round_shows_the_refused_proposals_and_lists_studied_entities_last(tmp_path):
    """A greedy planner asked the same prompt repeats itself; the retry must differ from the refused round."""
    rounds = iter([
        {"actions": [{"kind": "DEEPEN", "entities": ["Alice"], "observation": 1, "question": "QSTUDY one?"}]},
        {"actions": [{"kind": "DEEPEN", "entities": ["Alice"], "observation": 1, "question": "again?"}]},
        {"actions": [{"kind": "DEEPEN", "entities": ["Bob"], "observation": 1, "question": "QSTUDY bob?"}]},
        {"actions": []}, {"actions": []},
    ])
    scripted.set_script(route({OBSERVE: observe_all, PLAN: lambda p, _: next(rounds),
                               WRITER: writes([]), PRESERVE: lambda p, _: {"lost": []}}))
    ms = asyncio.run(self_learn(toy_model(), SOURCE, make_ctx(tmp_path), SourceLearnConfig(study_actions=20)))
    rec = ms.history[-1].stats["cycles"][0]
    # idle, productive, idle, idle: only two CONSECUTIVE idle rounds stop the loop
    assert rec["actions"] == 2 and rec["rounds"] == 5 and rec["empty_rounds"] == 3
    prompts = [c["messages"][-1]["content"] for c in calls_with(PLAN)]
    assert "refused" not in prompts[0] and "refused" not in prompts[1]
    assert "refused (already taken, or not usable): DEEPEN(Alice)." in prompts[2]
    assert "refused" not in prompts[3]  # a round that took an action clears the list
    assert digest_keys(prompts[2])[-1] == "Alice"  # after a refusal the studied entity is listed last
    assert digest_keys(prompts[1])[0] == "Alice"  # otherwise busiest first (Alice has the most observations)


def digest_keys(prompt: str) -> list[str]:
    """The entity keys of a planner prompt's digest, in order."""
    body = prompt.split("Entities with their observations", 1)[1].split("\n\nExisting cross-entity units", 1)[0]
    return [ln[2:].split()[0] for ln in body.splitlines() if ln.startswith("- ") and not ln.startswith("- (")]


def test_one_idle_round_between_productive_ones_does_not_stop_the_study(tmp_path):
    """productive, idle, productive, idle, productive, idle, idle: each productive round resets the idle
    count, so the loop takes all three actions and stops only after two idle rounds in a row (an idle
    round here repeats the last action, refused; a cached reply to an unchanged prompt could not differ)."""
    def act(key: str) -> dict:
        return {"actions": [{"kind": "DEEPEN", "entities": [key], "observation": 1, "question": f"QSTUDY {key}?"}]}
    rounds = iter([act("Alice"), act("Alice"), act("Bob"), act("Bob"), act("Carol"), act("Carol"), {"actions": []}])
    scripted.set_script(route({OBSERVE: observe_all, PLAN: lambda p, _: next(rounds),
                               WRITER: writes([]), PRESERVE: lambda p, _: {"lost": []}}))
    ms = asyncio.run(self_learn(toy_model(), SOURCE, make_ctx(tmp_path), SourceLearnConfig(study_actions=20)))
    rec = ms.history[-1].stats["cycles"][0]
    assert rec["actions"] == 3 and rec["rounds"] == 7 and rec["empty_rounds"] == 4


def test_the_planner_sees_the_per_entity_digest_and_the_cross_entity_units(tmp_path):
    """Per entity: region, units, source size and at most three numbered observations; busiest first."""
    def many_notes(prompt: str, _) -> dict:
        eid = prompt.split("Source text:\n[", 1)[1].split("]", 1)[0]
        n = 3 if eid.startswith("people/bob.md") else 1
        return {"learned": True, "observations": [
            {"note": f"OBSNOTE {k} about {eid}", "evidence_ids": [eid], "implication": "", "unit_ids": []}
            for k in range(n)]}
    sm = toy_model()
    sm.units.append(unit("Oslo and Lyon are twinned ports.", "relation", Scope(kind="pair", keys=["Oslo", "Lyon"]),
                         ["places/oslo.md#overview", "places/lyon.md#overview"]))
    scripted.set_script(route({OBSERVE: many_notes, PLAN: lambda p, _: {"actions": []},
                               WRITER: writes([]), PRESERVE: lambda p, _: {"lost": []}}))
    asyncio.run(self_learn(sm, SOURCE, make_ctx(tmp_path), SourceLearnConfig(study_actions=5,
                                                                              observations_per_question=4)))
    prompt = calls_with(PLAN)[0]["messages"][-1]["content"]
    assert digest_keys(prompt)[0] == "Bob"  # three observations: first
    bob = prompt.split("- Bob ", 1)[1].split("\n- ", 1)[0]
    chars = sum(len(SOURCE.element(i).text) for i in PEOPLE["Bob"])
    assert f"region people; 1 units; {chars:,} source chars; 3 observations]" in bob
    assert bob.count("\n    * ") == 3  # observations numbered, at most three per entity
    cross = prompt.split("Existing cross-entity units:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "- (pair: Oslo, Lyon) Oslo and Lyon are twinned ports." in cross
    assert "- (region: people) Most people of the town are Nordair pilots." in cross
    assert not any("Alice flies" in line for line in cross)  # one entity's unit is not cross-entity
    assert "Observations:\n" not in prompt  # no flat list of notes


def test_study_shows_the_official_units_and_caps_every_source_at_three_hits_per_file(tmp_path):
    from sourcebench.methods.sourcelearn.selfstudy.study import DEEPEN_UNITS, shown_units, study_evidence

    sm = toy_model()
    many = [unit(f"Alice fact number {i} about flying.", "detail", ent("Alice"), ["people/alice.md#work"])
            for i in range(20)]
    sm.units.extend(many)
    deepen = shown_units(sm, SOURCE, Action("DEEPEN", ("Alice",), "Which port does Oslo have?"))
    own = [u for u in deepen if "Alice" in u.scope.keys]
    assert len(own) == DEEPEN_UNITS  # not all 21 of Alice's units
    assert any("Oslo" in u.statement for u in deepen)  # plus the nearest to the question
    connect = shown_units(sm, SOURCE, Action("CONNECT", ("Alice", "Bob"), "Who flies?"))
    assert len([u for u in connect if "Alice" in u.scope.keys]) == 8 and any("Bob" in u.scope.keys for u in connect)
    # a documents source with one long file: the task-time cap is none, the self-study cap is three
    from sourcebench.harness.data import Element, Source

    els = [Element(id=f"harbour.md#s{i}", title=f"Harbour / S{i}", text=f"The harbour crane {i} lifts ships.",
                   path="harbour.md", kind="section") for i in range(6)]
    els.append(Element(id="town.md#s0", title="Town", text="The town has a harbour crane too.", path="town.md",
                       kind="section"))
    docs = Source(id="harbour", kind="documents", description="a harbour", elements=els)
    idx = HybridIndex(docs.elements, HashEmbedder())
    cfg = SourceLearnConfig()

    def from_big(found) -> int:
        return sum(s.element_id.startswith("harbour.md#") for s in found.items)

    assert from_big(tiered_search(idx, docs, "harbour crane ships", 6, cfg)) > 3  # diagnosis: no cap on documents
    assert from_big(tiered_search(idx, docs, "harbour crane ships", 6, cfg, per_file_cap=3)) == 3
    study_found = study_evidence(idx, toy_model(), docs, Action("DEEPEN", ("Alice",), "harbour crane ships"), [], cfg)
    assert from_big(study_found) == 3  # the study retrieval applies the cap of three


def test_inspection_shows_regional_units_and_the_nearest_and_recalibration_skips_unitless_entities(tmp_path):
    scripted.set_script(route({OBSERVE: observe_all, PLAN: lambda p, _: {"actions": []},
                               WRITER: writes([]), PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    from sourcebench.methods.sourcelearn.selfstudy.cycle import CycleStats, inspect_entities

    sm = toy_model()
    asyncio.run(inspect_entities(ctx.llm, sm, SOURCE, SourceLearnConfig(), CycleStats()))
    carol = next(c for c in calls_with(OBSERVE) if "entity Carol" in c["messages"][-1]["content"])
    # Carol has no unit of her own: she still sees the regional pattern of her region
    assert "Most people of the town are Nordair pilots." in carol["messages"][-1]["content"]
    n_review = len(calls_with(OBSERVE))
    asyncio.run(inspect_entities(ctx.llm, sm, SOURCE, SourceLearnConfig(), CycleStats(), mode="policy",
                                 stage="mt_recalibrate", policy=["Keep kinship explicit."]))
    policy_calls = calls_with(OBSERVE)[n_review:]
    with_units = {k for k in PEOPLE | PLACES if any(k in u.scope.keys and u.scope.kind == "entity" for u in sm.units)}
    assert len(policy_calls) == len(with_units) == 3  # Alice, Bob, Oslo: no call for Carol, Dave, Lyon


def test_planner_schema_limits_entity_keys_to_the_listed_ones(tmp_path):
    scripted.set_script(route({OBSERVE: observe_all, PLAN: lambda p, _: {"actions": []},
                               WRITER: writes([]), PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    sm = toy_model()
    asyncio.run(self_learn(sm, SOURCE, ctx, SourceLearnConfig(study_actions=5)))
    schema = calls_with(PLAN)[0]["schema"]

    def enums(node):
        if isinstance(node, dict):
            if "enum" in node:
                yield node["enum"]
            for v in node.values():
                yield from enums(v)
        elif isinstance(node, list):
            for v in node:
                yield from enums(v)

    key_enums = [e for e in enums(schema) if set(e) & {e.key for e in sm.entities}]
    assert key_enums and all(set(e) == {x.key for x in sm.entities} for e in key_enums)
    # at most n actions; DEEPEN with exactly one key, CONNECT with exactly two (what an in-process
    # decoder's grammar enforces: full_schema restores the bounds inspect's schema type drops)
    from sourcebench.harness.schema_limits import full_schema

    actions = full_schema(schema)["properties"]["actions"]
    assert (actions["minItems"], actions["maxItems"]) == (1, SourceLearnConfig().actions_per_round)
    arity = {b["properties"]["kind"]["enum"][0]: (b["properties"]["entities"]["minItems"],
                                                   b["properties"]["entities"]["maxItems"])
             for b in actions["items"]["anyOf"]}
    assert arity == {"DEEPEN": (1, 1), "CONNECT": (2, 2)}
    observe = [c for c in scripted.CALLS if c["schema"] and "observations" in c["schema"].get("properties", {})]
    assert observe and all(full_schema(c["schema"])["properties"]["observations"]["maxItems"]
                           == SourceLearnConfig().observations_per_question == 3 for c in observe)


def test_plan_stops_at_k_actions(tmp_path):
    keys = list(PEOPLE) + list(PLACES)
    fresh = [{"kind": "CONNECT", "entities": [a, b], "observation": 1, "question": f"How do {a} and {b} relate?"}
             for i, a in enumerate(keys) for b in keys[i + 1:]]
    counter = iter(range(100))

    def plan(prompt: str, _):
        r = next(counter)
        return {"actions": fresh[5 * r: 5 * r + 5]}

    scripted.set_script(route({OBSERVE: observe_all, PLAN: plan, WRITER: writes([]),
                               PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    ms = asyncio.run(self_learn(toy_model(), SOURCE, ctx, SourceLearnConfig(study_actions=7, actions_per_round=5)))
    rec = ms.history[-1].stats["cycles"][0]
    assert rec["actions"] == 7 and rec["rounds"] == 2
    assert "Choose up to 2 new actions" in calls_with(PLAN)[1]["messages"][-1]["content"]
    assert stage_calls(ctx)["ms_study"] == 7


def test_tiered_search_takes_a_tier_with_two_hits_else_the_whole_source():
    idx = HybridIndex(SOURCE.elements, HashEmbedder())
    cfg = SourceLearnConfig()
    found = tiered_search(idx, SOURCE, "Oslo port mayor", cfg.deepen_k, cfg, scoped={"people/alice.md"})
    assert found.tier == "scoped" and sorted(s.element_id for s in found.items) == PEOPLE["Alice"]  # scope only
    # one candidate in scope is below INSPECT_MIN_HITS (2): the global top k
    found = tiered_search(idx, SOURCE, "Oslo port mayor", 4, cfg, scoped={"people/dave.md"})
    assert found.tier == "global" and len(found.items) == 4 and found.items[0].element_id == "places/oslo.md#overview"
    # the hint tier comes before the scope
    found = tiered_search(idx, SOURCE, "Oslo port mayor", 4, cfg, hint={"people/bob.md"}, scoped={"people/alice.md"})
    assert found.tier == "hint" and {s.element_id for s in found.items} == set(PEOPLE["Bob"])
    # shown text: the retrieval excerpt
    assert found.items[0].text == SOURCE.element(found.items[0].element_id).text


def test_study_retrieval_ignores_the_task_time_k(tmp_path):
    """A DEEPEN reads DEEPEN_K (12) elements whatever the task-time top_k is; top_k = 0 changes nothing."""
    studied = []

    asked = []

    def observe_study(prompt, _):
        if "STUDY mode" in prompt:
            head, text = prompt.split("Source text:\n", 1)
            studied.append(text)
            asked.append(head)
        return observe_all(prompt, _)

    for k in (8, 0):
        scripted.reset()
        plan_once = iter([{"actions": [{"kind": "DEEPEN", "entities": ["Oslo"], "observation": 1,
                                        "question": "Which port does Oslo have?"}]}])
        scripted.set_script(route({OBSERVE: observe_study, PLAN: lambda p, _, it=plan_once: next(it, {"actions": []}),
                                   WRITER: writes([]), PRESERVE: lambda p, _: {"lost": []}}))
        asyncio.run(self_learn(toy_model(), SOURCE, make_ctx(tmp_path / str(k)), SourceLearnConfig(top_k=k)))
    assert len(studied) == 2 and studied[0] == studied[1]
    shown = re.findall(r"^\[([^\]]+)\]", studied[0], re.MULTILINE)
    assert sorted(shown) == sorted(e.id for e in SOURCE.elements)  # Oslo's file holds 1 hit: global, all 8
    # a DEEPEN's question comes with what inspection already noted about its entity (official)
    assert "Observations already recorded about this entity" in asked[0]
    assert "- OBSNOTE about places/oslo.md#overview" in asked[0] and "OBSNOTE about people" not in asked[0]


CODE_A = """from pkg.b import Widget

LIMIT = 3
UNUSED = 4


def helper():
    return LIMIT


class Main:
    def run(self):
        return Widget(helper())
"""
CODE_B = """class Widget:
    def __init__(self, n):
        self.n = n


def unrelated():
    return 0
"""


def code_source():
    from sourcebench.harness.data import Source
    from sourcebench.harness.elements import split_python

    return Source(id="pkg", kind="code", elements=split_python("pkg/a.py", CODE_A) + split_python("pkg/b.py", CODE_B))


def test_a_code_hit_is_read_as_its_window():
    src = code_source()
    cfg = SourceLearnConfig()
    main, helper = src.element("pkg/a.py#Main"), src.element("pkg/a.py#helper")
    shown = expand_code_windows(src, [main, src.element("pkg/b.py#unrelated")], cfg)
    by_id = {s.element_id: s.text for s in shown}
    assert [s.element_id for s in shown] == ["pkg/a.py#Main", "pkg/b.py#unrelated", "pkg/a.py#helper", "pkg/a.py",
                                             "pkg/b.py#Widget"]
    assert by_id["pkg/a.py#Main"] == main.text and by_id["pkg/a.py#helper"] == helper.text
    assert by_id["pkg/a.py"] == "LIMIT = 3"  # the constant it reaches, not UNUSED
    assert by_id["pkg/b.py#Widget"].startswith("class Widget")  # the class it imports from its package
    # the windows share CODE_WINDOW_CHARS: a cap below the symbol leaves the excerpt
    small = expand_code_windows(src, [main], cfg.model_copy(update={"code_window_chars": 10}))
    assert [(s.element_id, s.text) for s in small] == [("pkg/a.py#Main", main.text)]
    # methods are not expanded (only top-level symbols), and at most CODE_EXPAND_HITS hits are
    run = src.element("pkg/a.py#Main.run")
    assert [s.element_id for s in expand_code_windows(src, [run], cfg)] == ["pkg/a.py#Main.run"]
    none = expand_code_windows(src, [main], cfg.model_copy(update={"code_expand_hits": 0}))
    assert [s.element_id for s in none] == ["pkg/a.py#Main"]


def consolidate_once(tmp_path, units: list[dict], keep=()):
    sm = toy_model()
    keep = list(keep) or [u.id for u in sm.units if u.role != "card" and u.scope.keys != ["Oslo"]]
    scripted.set_script(route({WRITER: writes(units, keep=keep), GATE: gate_if(lambda c: True),
                               PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    stats = RewriteStats()
    out, results = asyncio.run(consolidate(ctx.llm, sm, SOURCE, [NOTE_ALICE], SPEC, GateStats(), stats))
    return sm, out, results[0], stats


def test_a_rewrite_that_neither_improves_structure_nor_uses_a_note_is_not_applied(tmp_path):
    detail = proposal("Alice works for Nordair as one of its pilots.", ["people/alice.md#work"], role="detail")
    sm, out, res, stats = consolidate_once(tmp_path, [{**detail, "notes": []}])
    assert not res.committed and res.reason.startswith("neither improves structure")
    assert out.units == sm.units and stats.unimproved == 1 and stats.committed == 0
    # the same unit drawing on the note is applied
    sm, out, res, stats = consolidate_once(tmp_path / "b", [detail])
    assert res.committed and stats.committed == 1 and stats.unimproved == 0
    assert "Alice works for Nordair as one of its pilots." in {u.statement for u in out.units}
    # and so is a rewrite citing no note that turns an isolated detail into a relational unit
    old = [u.id for u in sm.units if u.role == "detail" and u.scope.keys[0] == "Alice"]
    merged = proposal("Alice flies for Nordair, the employer of the town's pilots.", ["people/alice.md#work"],
                      absorbs=old, role="relation")
    sm, out, res, stats = consolidate_once(tmp_path / "c", [{**merged, "notes": []}],
                                           keep=[u.id for u in sm.units if u.role == "pattern"])
    assert res.committed and not {u.id for u in out.units} & set(old)


# -- the whole cycle ------------------------------------------------------------------------------
def test_self_learn_consolidates_and_never_stores_observations(tmp_path):
    plan_once = iter([{"actions": [{"kind": "DEEPEN", "entities": ["Alice"], "observation": 1,
                                    "question": "QSTUDY when does Alice fly?"}]}])

    def writer(prompt: str, _):
        if "Entity: Alice" not in prompt:
            return {"keep": [], "units": []}
        return {"keep": [], "units": [proposal("Alice flies for Nordair because its pilots are its staff.",
                                               ["people/alice.md#work"])]}

    scripted.set_script(route({OBSERVE: observe_all, PLAN: lambda p, _: next(plan_once, {"actions": []}),
                               WRITER: writer, GATE: gate_if(lambda c: True), PRESERVE: lambda p, _: {"lost": []}}))
    ctx = make_ctx(tmp_path)
    m0 = toy_model()
    ms = asyncio.run(self_learn(m0, SOURCE, ctx, SourceLearnConfig()))
    assert ms is not m0 and m0.stage == "M0" and len(m0.history) == 1  # input untouched
    assert ms.stage == "MS" and ms.history[-1].stats["actions"] == 1
    assert ms.history[-1].stats["observations"] == 6 + 1  # one per entity, one from the study action
    new = [u for u in ms.units if u.origin == "self-study"]
    assert [u.statement for u in new] == ["Alice flies for Nordair because its pilots are its staff."]
    path = tmp_path / "ms.json"
    ms.save(path)
    text = path.read_text()
    assert "OBSNOTE" not in text and "IMPLNOTE" not in text and "QSTUDY" not in text
    assert SourceModel.load(path) == ms
    calls = stage_calls(ctx)
    # one rewrite per entity with notes (six; the study's note joined Alice's), one grounding batch
    assert calls["ms_inspect"] == 6 and calls["ms_consolidate"] == 6 and calls["ms_ground"] == 1
    # inspection reread each entity's complete text next to its units
    insp = [c for c in calls_with(OBSERVE) if "REVIEW mode" in c["messages"][0]["content"]]
    alice = next(c for c in insp if "entity Alice" in c["messages"][-1]["content"])["messages"][-1]["content"]
    assert "Alice has a dog named Rex" in alice and "Alice was born in Oslo" in alice
    assert "Alice flies for Nordair." in alice


def test_zero_cycles_is_a_plain_copy(tmp_path):
    ctx = make_ctx(tmp_path)
    m0 = toy_model()
    ms = asyncio.run(self_learn(m0, SOURCE, ctx, SourceLearnConfig(cycles=0)))
    assert ms is not m0 and ms.units == m0.units and ms.stage == "MS"
    assert scripted.CALLS == []


def test_self_learn_is_deterministic(tmp_path):
    def run(folder):
        scripted.reset()
        ctx = make_ctx(folder)
        return asyncio.run(self_learn(toy_model(), SOURCE, ctx, SourceLearnConfig())).model_dump_json()

    assert run(tmp_path / "a") == run(tmp_path / "b")


def test_inspection_of_a_dense_element_is_cut_to_the_window_in_the_models_tokens(tmp_path):
    """One lock-file-like element (many tokens per character) must not overflow the inspection prompt."""
    from sourcebench.harness.data import Element, Source
    from sourcebench.methods.sourcelearn.selfstudy.observe import OBSERVE_MAX_TOKENS, observe

    def tokens(text: str) -> int:  # a token per pair of spaces on top of chars / 4
        return len(text) // 4 + text.count("  ")

    async def count(text: str) -> int:
        return tokens(text)

    lock = Element(id="uv.lock", title="uv.lock", text='    "pkg" = { version = "1.0"  ,  hash  =  "x" }\n' * 600)
    source = Source(id="dense", kind="code", elements=[lock])
    window, prompts = 6000, []

    def record(messages, schema):
        prompts.append(tokens("\n".join(m["content"] for m in messages)))
        return json.dumps({"learned": False, "observations": []})

    for exact in (False, True):
        scripted.set_script(record)
        ctx = make_ctx(tmp_path / str(exact), source, window=window)
        if exact:
            ctx.llm.count_tokens = count
        asyncio.run(observe(ctx.llm, source, [], ["uv.lock"], ("lock",), mode="review", stage="ms_inspect", max_notes=3,
                            target="the lock file", full_text=True))
    assert prompts[0] + OBSERVE_MAX_TOKENS > window  # chars / 4 overflows ...
    assert prompts[1] + OBSERVE_MAX_TOKENS <= window  # ... the exact count fits
