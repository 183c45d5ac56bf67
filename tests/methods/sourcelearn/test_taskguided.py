"""Task-guided source learning with the scripted model: the reference stays in diagnosis, failures
refine through the gates, lessons carry no identifiers, the policy needs two tasks, protected units
survive recalibration, and the variants skip exactly their stages."""

from __future__ import annotations

import asyncio
import re

from helpers import GUIDANCE, SOURCE, make_ctx, stage_calls
from test_selfstudy import (
    GATE,
    OBSERVE,
    PRESERVE,
    WRITER,
    calls_with,
    ent,
    gate_if,
    route,
    toy_model,
    unit,
)

from harness.providers import scripted
from methods.sourcelearn.config import SourceLearnConfig
from methods.sourcelearn.grounding import GateStats
from methods.sourcelearn.model import SourceModel
from methods.sourcelearn.taskguided import task_learn
from methods.sourcelearn.taskguided.diagnose import leaks_reference, reference_strings, source_words
from methods.sourcelearn.taskguided.lessons import IdentifierVocab, Lesson
from methods.sourcelearn.taskguided.policy import PolicyStats, Preference, select_preferences
from methods.sourcelearn.taskguided.recalibrate import recalibrate

DIAG = frozenset({"support_ids", "claims"})
COVERAGE = frozenset({"missing"})
LESSON = frozenset({"kind", "lesson"})
POLICY = frozenset({"preferences"})
ANSWER = frozenset()

CLAIMS = {  # what diagnosis "finds" per question; the last claim of each tries to leak the reference
    "mother of Alice": [("The mother of Alice is Carol.", "people/alice.md#family"),
                        ("The job of Carol is pilot.", "people/carol.md#work")],
    "father of Bob": [("The father of Bob is Dave.", "people/bob.md#family"),
                      ("The job of Dave is baker.", "people/dave.md#work")],
    "mayor": [("Bob was born in Lyon.", "people/bob.md#work"), ("The mayor of Lyon is Frank.", "places/lyon.md#overview")],
}
LESSONS = {
    "mother of Alice": {"kind": "relate", "lesson": "Keep the family relations between people explicit."},
    "father of Bob": {"kind": "relate", "lesson": "Represent each kinship relation as an explicit link."},
    "mayor": {"kind": "preserve", "lesson": "Remember who governs Lyon."},  # names the source: rejected
}
GOOD_PREF = "Represent kinship relations between people as explicit links."
WEAK_PREF = "Keep the office holders of every city."


def topic(prompt: str) -> str:
    """Which guidance task a prompt is about, from its question line (excerpts mention everything)."""
    line = next(ln for ln in prompt.splitlines() if ln.startswith(("Question:", "Task:")))
    return next(k for k in CLAIMS if k in line)


def diagnose(prompt: str, _):
    claims = [{"claim": c, "evidence_ids": [i]} for c, i in CLAIMS[topic(prompt)]]
    claims.append({"claim": "The answer to the question is REFSECRET.", "evidence_ids": [claims[0]["evidence_ids"][0]]})
    return {"support_ids": [c["evidence_ids"][0] for c in claims], "claims": claims}


NOTE_LINE = re.compile(r"^\d+\.(?: \[[^\]]*\])? (.*?)(?: -> .*?)?(?: \(units: [^)]*\))? \(evidence: (.*)\)$")


def echo_writer(prompt: str, _):
    """Writes every note straight into a unit (so any leaked text WOULD reach the model)."""
    notes = prompt.split("Notes:\n", 1)[1].split("\n\nSource excerpts:", 1)[0]
    units = []
    for line in notes.splitlines():
        m = NOTE_LINE.match(line)
        if m:
            ent_keys = re.findall(r"^\d+\. \[([^\]]*)\]", line)
            units.append({"statement": m.group(1), "role": "relation", "conditions": [],
                          "scope_keys": ent_keys[0].split(", ")[:1] if ent_keys else [],
                          "element_ids": m.group(2).split(", "), "absorbs": [], "notes": [1]})
    return {"keep": [], "units": units}


def observe_policy(prompt: str, _):
    if "POLICY mode" not in prompt or "entity Bob" not in prompt:
        return {"learned": False, "observations": []}
    return {"learned": True, "observations": [{"note": "Bob's father Dave is a baker, unlike the pilots.",
                                               "evidence_ids": ["people/bob.md#family"], "implication": "relate",
                                               "unit_ids": []}]}


def script(answers: dict[str, str] | None = None, missing=lambda p: [1, 2], lessons=LESSONS, prefs=None):
    answers = answers or {}
    prefs = prefs if prefs is not None else [{"text": GOOD_PREF, "lessons": [1, 2], "keeps_item": 0},
                                             {"text": WEAK_PREF, "lessons": [1, 1], "keeps_item": 0}]
    scripted.set_script(route({
        DIAG: diagnose,
        ANSWER: lambda p, _: answers.get(topic(p), "I don't know."),
        COVERAGE: lambda p, _: {"missing": missing(p)},
        WRITER: echo_writer,
        GATE: gate_if(lambda c: True),
        PRESERVE: lambda p, _: {"lost": []},
        LESSON: lambda p, _: lessons[topic(p)],
        POLICY: lambda p, _: {"preferences": prefs},
        OBSERVE: observe_policy,
    }))


def learn(tmp_path, local=True, cross=True, **cfg):
    ctx = make_ctx(tmp_path)
    m = asyncio.run(task_learn(toy_model(), SOURCE, GUIDANCE, ctx, SourceLearnConfig(concurrency=1, **cfg),
                               local=local, cross=cross))
    return m, ctx


def prompts(props: frozenset | None = None) -> list[str]:
    return ["\n".join(m["content"] for m in c["messages"]) for c in scripted.CALLS
            if props is None or frozenset((c["schema"] or {}).get("properties", {})) == props]


# -- the full pass --------------------------------------------------------------------------------
def test_reference_is_seen_only_by_diagnosis_and_never_stored(tmp_path):
    script()
    mt, _ctx = learn(tmp_path)
    diag = prompts(DIAG)
    assert len(diag) == 3 and all("REFSECRET" in p for p in diag)
    others = [p for c, p in zip(scripted.CALLS, prompts())
              if frozenset((c["schema"] or {}).get("properties", {})) != DIAG]
    assert others and not any("REFSECRET" in p for p in others)
    path = tmp_path / "mt.json"
    mt.save(path)
    assert "REFSECRET" not in path.read_text().upper()
    assert not any("refsecret" in u.statement.lower() for u in mt.units)
    rec = mt.history[-1]
    assert rec.stage == "MT" and rec.stats["claims_dropped_as_leaks"] == 3 and rec.stats["claims"] == 6


def test_failed_tasks_refine_with_protected_grounded_units(tmp_path):
    script(answers={"mother of Alice": "pilot"})  # g1 solved, g2 and g3 failed
    mt, ctx = learn(tmp_path)
    rec = mt.history[-1].stats
    assert rec["solved"] == 1 and rec["refine"]["checked"] == 2 and rec["refine"]["refined_tasks"] == 2
    learned = [u for u in mt.units if u.origin == "task-refine"]
    assert {u.statement for u in learned} >= {"The father of Bob is Dave.", "The mayor of Lyon is Frank."}
    assert "The mother of Alice is Carol." not in {u.statement for u in learned}  # solved: nothing written
    assert all(u.protected and u.anchors for u in learned)
    lyon = next(u for u in learned if "Lyon is Frank" in u.statement)
    assert lyon.anchors[0].element_id == "places/lyon.md#overview"
    assert lyon.anchors[0].fingerprint == SOURCE.element("places/lyon.md#overview").fingerprint
    calls = stage_calls(ctx)
    assert calls["mt_diagnose"] == 3 and calls["mt_answer"] == 3
    # coverage check + writer calls: failed tasks only
    assert len(calls_with(COVERAGE)) == 2
    refine_writes = [p for p in prompts(WRITER) if "TARGETS" in p]
    assert len(refine_writes) == 3  # g2: people; g3: people and places
    # the writer reread the implicated entities' complete text
    assert any("Bob has no siblings" in p for p in refine_writes)


def test_represented_claims_trigger_no_writing(tmp_path):
    script(missing=lambda p: [])
    mt, _ctx = learn(tmp_path, cross=False)
    rec = mt.history[-1].stats["refine"]
    assert rec["checked"] == 3 and rec["already_known"] == 3 and rec["units_written"] == 0
    assert not [p for p in prompts(WRITER) if "TARGETS" in p]
    assert not [u for u in mt.units if u.origin == "task-refine"]


def test_refinement_is_capped_per_task(tmp_path):
    script(answers={"mother of Alice": "pilot", "mayor": "Frank"})  # only g2 fails
    mt, _ = learn(tmp_path, cross=False, max_refine_units=1)
    assert len([u for u in mt.units if u.origin == "task-refine"]) == 1
    assert mt.history[-1].stats["refine"]["rewrite"]["over_cap"] >= 1


def test_lessons_policy_and_recalibration(tmp_path):
    script()
    mt, ctx = learn(tmp_path)
    rec = mt.history[-1].stats
    assert rec["lesson_outcomes"] == {"identifier": 1, "kept": 2}
    assert mt.policy == [GOOD_PREF]  # the preference cited by one task only was dropped
    assert rec["policy"]["weak_support"] == 1
    policy_prompt = prompts(POLICY)[0]
    assert "Keep the family relations" in policy_prompt and "governs Lyon" not in policy_prompt
    # recalibration reread every entity under the policy and wrote through the gates
    assert stage_calls(ctx)["mt_recalibrate"] == 6 + 1
    assert all(GOOD_PREF in p for p in prompts(OBSERVE))
    recal = [u for u in mt.units if u.origin == "recalibrated"]
    assert [u.statement for u in recal] == ["Bob's father Dave is a baker, unlike the pilots."]
    assert rec["recalibration"]["protected"] == len([u for u in mt.units if u.origin == "task-refine"]) > 0


# -- variants -------------------------------------------------------------------------------------
def test_without_failure_guided_makes_no_refine_calls(tmp_path):
    script()
    mt, ctx = learn(tmp_path, local=False)
    calls = stage_calls(ctx)
    assert "mt_refine" not in calls and calls["mt_lesson"] == 3 and calls["mt_policy"] == 1
    assert mt.stage == "MS+Pi1" and mt.policy == [GOOD_PREF]
    assert not [u for u in mt.units if u.origin == "task-refine"]


def test_without_cross_task_makes_no_lesson_policy_or_recalibration_calls(tmp_path):
    script()
    mt, ctx = learn(tmp_path, cross=False)
    calls = stage_calls(ctx)
    assert not {"mt_lesson", "mt_policy", "mt_recalibrate"} & set(calls)
    assert calls["mt_refine"] > 0 and mt.stage == "M_local" and mt.policy == []


def test_input_model_is_not_modified(tmp_path):
    script()
    m = toy_model()
    before = m.model_dump_json()
    asyncio.run(task_learn(m, SOURCE, GUIDANCE, make_ctx(tmp_path), SourceLearnConfig()))
    assert m.model_dump_json() == before


# -- pieces ---------------------------------------------------------------------------------------
def test_lesson_with_a_source_identifier_is_rejected():
    sm = toy_model()
    vocab = IdentifierVocab.build(sm, SOURCE)
    bad = ["Keep what Alice does for a living.",  # entity name
           "Keep every fact of a dave.md file.",  # path component
           "Represent the options of a config_file explicitly.",  # snake_case identifier
           "Explain how the FooBar class behaves.",  # CamelCase identifier
           "Record calls such as registry.lookup explicitly."]  # dotted identifier
    for text in bad:
        assert vocab.offending(text) is not None, text
    assert vocab.offending("Keep the pilot job of each person as a shared rule.") == "pilot"  # a card value
    good = ["Keep the family relations between people explicit.",
            "Represent the governing condition of every exception to a shared rule, e.g. who is excluded.",
            "State the steps of a lifecycle procedure in order."]
    for text in good:
        assert vocab.offending(text) is None, text


def test_policy_keeps_preferences_backed_by_two_tasks():
    lessons = [Lesson("g1", "relate", "a", False), Lesson("g2", "relate", "b", True), Lesson("g3", "preserve", "c", False),
               Lesson("g3", "preserve", "d", False)]
    draft = [Preference(text="Backed by one task.", lessons=[3, 4]),
             Preference(text="Backed by two tasks.", lessons=[1, 3]),
             Preference(text="Backed by three tasks.", lessons=[1, 2, 4]),
             Preference(text="Cites nothing real.", lessons=[0, 9]),
             Preference(text="Names Alice, backed twice.", lessons=[1, 2])]
    stats = PolicyStats()
    vocab = IdentifierVocab.build(toy_model(), SOURCE)
    kept = select_preferences(draft, lessons, vocab, min_support=2, max_items=8, stats=stats)
    assert kept == ["Backed by three tasks.", "Backed by two tasks."]  # most broadly supported first
    assert stats.weak_support == 2 and stats.identifier == 1
    assert select_preferences(draft, lessons, vocab, 2, 1, PolicyStats()) == ["Backed by three tasks."]


def test_protected_units_survive_recalibration(tmp_path):
    sm = toy_model()
    learned = unit("Bob's father is Dave.", "relation", ent("Bob"), ["people/bob.md#family"], origin="task-refine")
    sm.units.append(learned)
    scripted.set_script(route({
        OBSERVE: observe_policy,
        WRITER: lambda p, _: {"keep": [], "units": [{
            "statement": "Bob's family: his father Dave is a baker.", "role": "relation", "scope_keys": ["Bob"],
            "conditions": [], "element_ids": ["people/bob.md#family", "people/dave.md#work"], "absorbs": [],
            "notes": [1]}]},
        GATE: gate_if(lambda c: True),
        PRESERVE: lambda p, _: {"lost": []},  # the checker thinks nothing is lost ...
    }))
    ctx = make_ctx(tmp_path)
    out, stats = asyncio.run(recalibrate(ctx.llm, sm, SOURCE, ["Keep kinship links explicit."],
                                         SourceLearnConfig(), GateStats()))
    kept = next(u for u in out.units if u.id == learned.id)  # ... yet the task-learned unit stays
    assert kept.protected and kept.statement == learned.statement
    assert stats["rewrite"]["protected_kept"] == 1
    assert "[protected]" in prompts(WRITER)[0]
    # other (unprotected) units of Bob that were neither kept nor restored were replaced
    assert "Bob's family: his father Dave is a baker." in {u.statement for u in out.units}


def test_empty_policy_skips_recalibration(tmp_path):
    ctx = make_ctx(tmp_path)
    _out, stats = asyncio.run(recalibrate(ctx.llm, toy_model(), SOURCE, [], SourceLearnConfig(), GateStats()))
    assert stats == {"skipped": "empty policy"} and scripted.CALLS == []


def test_reference_leak_rule():
    words = source_words(SOURCE)
    refs = reference_strings({"answer": ["REFSECRET pilot", 42], "x": "Frank"})
    assert refs == ["REFSECRET pilot", "42", "Frank"]
    assert leaks_reference("It is REFSECRET.", refs, "", words)  # a token the source never uses
    assert leaks_reference("The mayor is Frank.", refs, "The job of Dave is baker.", words)  # not in cited text
    assert not leaks_reference("The mayor of Lyon is Frank.", refs, "The mayor of Lyon is Frank.", words)
    assert not leaks_reference("Carol is a pilot.", ["pilot"], "The job of Carol is pilot.", words)


def test_task_learning_is_deterministic(tmp_path):
    def run(folder):
        scripted.reset()
        script()
        return learn(folder)[0].model_dump_json()

    assert run(tmp_path / "a") == run(tmp_path / "b")


def test_saved_model_round_trips(tmp_path):
    script()
    mt, _ = learn(tmp_path)
    mt.save(tmp_path / "m.json")
    assert SourceModel.load(tmp_path / "m.json") == mt
