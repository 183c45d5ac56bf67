"""Task-guided source learning with the scripted model: the reference stays in diagnosis, failures
refine through the gates, lessons repeat no identifier of their task and do not restate it (one
retry), the policy needs two tasks, protected units survive recalibration, and the variants skip
exactly their stages."""

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

from sourcebench.harness.providers import scripted
from sourcebench.methods.sourcelearn.config import SourceLearnConfig
from sourcebench.methods.sourcelearn.construct import MODELING_INSTRUCTION
from sourcebench.methods.sourcelearn.grounding import GateStats
from sourcebench.methods.sourcelearn.model import SourceModel
from sourcebench.methods.sourcelearn.taskguided import task_learn
from sourcebench.methods.sourcelearn.taskguided.diagnose import (
    Claim,
    TaskNeeds,
    leaks_reference,
    reference_strings,
    source_words,
)
from sourcebench.methods.sourcelearn.taskguided.lessons import (
    Lesson,
    domain_vocabulary,
    identifiers,
    lesson_for,
    repeated_identifiers,
    restated_words,
)
from sourcebench.methods.sourcelearn.taskguided.policy import PolicyStats, Preference, select_preferences
from sourcebench.methods.sourcelearn.taskguided.recalibrate import recalibrate

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
    "mayor": {"kind": "preserve", "lesson": "Keep the mayor of Lyon explicit."},  # restates its task: retried, dropped
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
    assert len(refine_writes) == 2  # one writer call per failed task (g2, g3), whatever regions it touches
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
    assert rec["lesson_outcomes"] == {"kept": 2, "too specific": 1}
    assert stage_calls(ctx)["mt_lesson"] == 4  # the restating lesson was asked once more
    assert mt.policy == [GOOD_PREF]  # the preference cited by one task only was dropped
    assert rec["policy"]["weak_support"] == 1
    policy_prompt = prompts(POLICY)[0]
    assert "Keep the family relations" in policy_prompt and "mayor of Lyon" not in policy_prompt
    # recalibration reread every entity under the policy (Pi0 and Pi1) and wrote through the gates
    assert stage_calls(ctx)["mt_recalibrate"] == 6 + 1
    assert all(GOOD_PREF in p and MODELING_INSTRUCTION in p for p in prompts(OBSERVE))
    assert all(MODELING_INSTRUCTION in p for p in prompts(WRITER) if "REPRESENTATION POLICY" in p)
    recal = [u for u in mt.units if u.origin == "recalibrated"]
    assert [u.statement for u in recal] == ["Bob's father Dave is a baker, unlike the pilots."]
    assert rec["recalibration"]["protected"] == len([u for u in mt.units if u.origin == "task-refine"]) > 0


# -- variants -------------------------------------------------------------------------------------
def test_without_failure_guided_makes_no_refine_calls(tmp_path):
    script()
    mt, ctx = learn(tmp_path, local=False)
    calls = stage_calls(ctx)
    assert "mt_refine" not in calls and calls["mt_lesson"] == 4 and calls["mt_policy"] == 1
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
def test_only_identifier_shaped_tokens_of_the_task_are_banned():
    task = ["Which `max_retries` option of config.yaml sets the eligibility check, per HTTPServer v12?",
            "The 'online application form' asks for eligibility."]
    ids = identifiers(task)
    assert ids == {"max_retries", "config.yaml", "httpserver", "v12", "online application form"}
    # ordinary words never reject a lesson, wherever the source uses them
    assert repeated_identifiers("Keep eligibility rules of every online application explicit.", ids) == []
    assert repeated_identifiers("State the steps of a lifecycle procedure in order, e.g. renewal.", ids) == []
    assert repeated_identifiers("Keep the max_retries option and its default.", ids) == ["max_retries"]
    assert repeated_identifiers("Explain what config.yaml holds.", ids) == ["config.yaml"]
    assert repeated_identifiers("Represent the Online Application Form's fields.", ids) == []  # not quoted here
    assert identifiers(["Bob's father's job is 'pilot'; see e.g. the notes."]) == frozenset()


def test_restatement_counts_distinctive_words_and_exempts_the_domain_vocabulary():
    task = ["What is the job of the mother of Alice?", "The mother of Alice is Carol.", "The job of Carol is pilot."]
    # 2 of 4 distinctive content words (mother, alice) repeat the task: more than 0.35
    assert restated_words("Keep the mother of Alice explicit.", task) == ["alice", "mother"]
    assert restated_words("Keep the family relations between people explicit.", task) == []
    # 1 of 3 = 0.33: at most 0.35 is allowed
    assert restated_words("Remember who governs Lyon.", ["Lyon was founded by Romans."]) == []
    questions = ["Is Alice eligible for the benefit?", "When does the benefit of Bob end?", "Who pays the benefit?"]
    common = domain_vocabulary(questions)
    assert common == {"benefit"}
    lesson = "Keep each benefit rule with its exceptions."  # benefit, rule, exception(s), keep, each
    assert restated_words(lesson, ["Which benefit rule applies?"]) == ["benefit", "rule"]
    assert restated_words(lesson, ["Which benefit rule applies?"], common) == []  # 1 of 3 distinctive words


NEEDS = TaskNeeds(task_id="g9", question="Which eligibility rule does the online application of Alice follow?",
                  support_ids=("people/alice.md#work",),
                  claims=(Claim("Alice's online application follows the pilot_licence rule.", ("people/alice.md#work",)),))


def lesson_run(tmp_path, replies, needs=NEEDS, source=SOURCE):
    seen: list[str] = []
    it = iter(replies)

    def reply(prompt, messages):
        seen.append(messages[0]["content"])
        return next(it)

    scripted.set_script(route({LESSON: reply}))
    lesson, why = asyncio.run(lesson_for(make_ctx(tmp_path).llm, needs, [], source, False))
    return lesson, why, seen


def test_an_ordinary_word_does_not_reject_a_lesson(tmp_path):
    """MultiDoc2Dial-like: "eligibility", "online" and "application" name the source's own documents."""
    from sourcebench.harness.data import Element, Source

    source = Source(id="benefits", kind="documents", elements=[
        Element(id="benefits/eligibility.md#online-application", title="Eligibility / Online application",
                path="benefits/eligibility.md", kind="section", metadata={"entity": "Eligibility"},
                text="Applicants must live in the town for a year. Apply with form HB_7 online.")])
    needs = TaskNeeds(task_id="g9", question="Who can get the housing benefit?",
                      support_ids=("benefits/eligibility.md#online-application",),
                      claims=(Claim("Applicants must have lived in the town for a year.",
                                    ("benefits/eligibility.md#online-application",)),))
    text = "Keep every eligibility condition of an online application with the rule that governs it."
    lesson, why, seen = lesson_run(tmp_path, [{"kind": "condition", "lesson": text}], needs, source)
    assert why == "kept" and lesson.text == text and len(seen) == 1
    assert lesson.banned == {"hb_7"}  # the task's identifiers, which the policy may not repeat either


def test_a_restating_lesson_is_retried_with_the_reason_then_dropped(tmp_path):
    restating = {"kind": "preserve", "lesson": "Keep Alice's online application eligibility rule."}
    lesson, why, seen = lesson_run(tmp_path, [restating, restating, {"kind": "none", "lesson": ""}])
    assert lesson is None and why == "too specific" and len(seen) == 2
    assert "refused" not in seen[0]
    assert "refused as too specific" in seen[1] and "the task's own words (alice" in seen[1]
    # a retry that generalises is kept; an identifier is named as the reason
    general = {"kind": "condition", "lesson": "Represent each governing condition next to the rule it limits."}
    lesson, why, seen = lesson_run(tmp_path / "b", [{"kind": "preserve", "lesson": "Keep the pilot_licence rule."},
                                                    general])
    assert why == "kept after retry" and lesson.text == general["lesson"]
    assert "source-specific identifiers (pilot_licence)" in seen[1]


def test_policy_keeps_preferences_backed_by_two_tasks():
    banned = frozenset({"config_file"})
    lessons = [Lesson("g1", "relate", "a", False, banned), Lesson("g2", "relate", "b", True),
               Lesson("g3", "preserve", "c", False), Lesson("g3", "preserve", "d", False)]
    draft = [Preference(text="Backed by one task.", lessons=[3, 4]),
             Preference(text="Backed by two tasks.", lessons=[1, 3]),
             Preference(text="Backed by three tasks.", lessons=[1, 2, 4]),
             Preference(text="Cites nothing real.", lessons=[0, 9]),
             Preference(text="Keep every config_file option, backed twice.", lessons=[1, 2]),
             Preference(text="Keep every eligibility rule, backed twice.", lessons=[1, 2])]
    stats = PolicyStats()
    kept = select_preferences(draft, lessons, min_support=2, max_items=8, stats=stats)
    assert kept == ["Backed by three tasks.", "Backed by two tasks.", "Keep every eligibility rule, backed twice."]
    assert stats.weak_support == 2 and stats.identifier == 1
    assert select_preferences(draft, lessons, 2, 1, PolicyStats()) == ["Backed by three tasks."]


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
    # shown as context, never among the units the writer may rewrite (official ``context_units``)
    current, context = prompts(WRITER)[0].split("Current units:\n", 1)[1].split("Context units", 1)
    assert learned.id not in current and f"[{learned.id}] [protected]" in context
    assert stats["rewrite"]["protected_kept"] == 0 and stats["rewrite"]["entity_passes"] == 1
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


# -- the chain, claim status, no lesson without needed claims, an empty Pi1 --------------------------
STATUS = frozenset({"claims"})


def test_guidance_tasks_form_a_chain_each_seeing_the_units_its_predecessors_added(tmp_path):
    """With concurrency 4 the third task is still answered against the model the first two refined,
    and no call of one task runs between the calls of another."""
    script()  # every task fails: g1 and g2 refine the model before g3 is answered
    ctx = make_ctx(tmp_path)
    mt = asyncio.run(task_learn(toy_model(), SOURCE, GUIDANCE, ctx, SourceLearnConfig(concurrency=4)))
    answers = [i for i, c in enumerate(scripted.CALLS) if not c["schema"]]
    assert len(answers) == 3
    third = "\n".join(m["content"] for m in scripted.CALLS[answers[2]]["messages"])
    learned = [u.statement for u in mt.units if u.origin == "task-refine"]
    assert "The mother of Alice is Carol." in learned and "The father of Bob is Dave." in learned
    # the units as the solver's model notes show them (the raw excerpts state the same facts)
    assert "[relation] The mother of Alice is Carol." in third and "[relation] The father of Bob is Dave." in third
    first = "\n".join(m["content"] for m in scripted.CALLS[answers[0]]["messages"])
    assert "[relation] The mother of Alice is Carol." not in first
    # never two tasks in flight: each task's refinement writes come before the next task's answer
    writes = [i for i, c in enumerate(scripted.CALLS) if c["schema"]
              and frozenset(c["schema"].get("properties", {})) == WRITER]
    g1_writes = [i for i in writes if "mother of Alice is Carol" in scripted.CALLS[i]["messages"][-1]["content"]
                 and i < answers[1]]
    assert g1_writes and all(answers[0] < i < answers[1] for i in g1_writes)
    assert not [i for i in writes if answers[1] < i < answers[2]
                and "mother of Alice is Carol" in scripted.CALLS[i]["messages"][-1]["content"]
                and "TARGETS" in scripted.CALLS[i]["messages"][-1]["content"]]
    # each task's lesson calls fall between its own answer and the next task's
    bounds = [*answers, len(scripted.CALLS)]
    order = [t for t in CLAIMS]
    for i, c in enumerate(scripted.CALLS):
        if c["schema"] and frozenset(c["schema"].get("properties", {})) == LESSON:
            k = order.index(topic("\n".join(m["content"] for m in c["messages"])))
            assert bounds[k] < i < bounds[k + 1]


def test_claim_status_tells_represented_in_the_model_and_missing(tmp_path):
    from sourcebench.methods.sourcelearn.taskguided.lessons import claim_status

    sm = toy_model()
    bob = next(u for u in sm.units if u.statement == "Bob is a pilot at Nordair.")
    needs = TaskNeeds(task_id="g2", question="What is the job of Bob?", support_ids=("people/bob.md#work",),
                      claims=(Claim("The job of Bob is pilot.", ("people/bob.md#work",)),
                              Claim("The father of Bob is Dave.", ("people/bob.md#family",))))
    scripted.set_script(route({STATUS: lambda p, _: {"claims": [{"claim": 1, "unit_ids": [bob.id]},
                                                                {"claim": 2, "unit_ids": []}]}}))
    llm = make_ctx(tmp_path).llm
    assert asyncio.run(claim_status(llm, sm, SOURCE, needs, set())) == ["in the model", "missing"]
    assert asyncio.run(claim_status(llm, sm, SOURCE, needs, {bob.id})) == ["represented", "missing"]
    prompt = calls_with(STATUS)[0]["messages"][-1]["content"]
    assert f"[{bob.id}]" in prompt  # a unit about the claim's entity is a candidate


def test_the_lesson_prompt_carries_each_claims_status(tmp_path):
    seen: list[str] = []

    def reply(prompt, messages):
        seen.append(messages[-1]["content"])
        return {"kind": "preserve", "lesson": "Keep licence rules with their conditions."}

    scripted.set_script(route({LESSON: reply}))
    asyncio.run(lesson_for(make_ctx(tmp_path).llm, NEEDS, [], SOURCE, False, statuses=["in the model"]))
    assert "follows the pilot_licence rule. (evidence: people/alice.md#work; in the model: in the model)" in seen[0]


def test_a_task_without_needed_claims_yields_no_lesson(tmp_path):
    scripted.set_script(route({LESSON: lambda p, _: {"kind": "preserve", "lesson": "Keep every rule explicit."}}))
    needs = TaskNeeds(task_id="g9", question="What is the job of Alice?", support_ids=("people/alice.md#work",),
                      claims=())
    lesson, why = asyncio.run(lesson_for(make_ctx(tmp_path).llm, needs, [], SOURCE, True))
    assert lesson is None and why == "no_needed_evidence" and not calls_with(LESSON)


def test_an_empty_pi1_builds_no_mt_and_the_artifact_says_so(tmp_path):
    """No preference reaches the support threshold: no recalibration, and the artifact reports mt_built False."""
    from sourcebench.methods.sourcelearn.method import MODEL_FILE, SourceLearn, mt_report_notes

    script(prefs=[{"text": WEAK_PREF, "lessons": [1], "keeps_item": 0}])
    mt, ctx = learn(tmp_path)
    rec = mt.history[-1].stats
    assert mt.policy == [] and "mt_recalibrate" not in stage_calls(ctx)
    assert rec["mt_built"] is False and "empty Pi1" in rec["mt_not_built"]
    # what learn() records under REPORT_NOTES for the leaderboard's per-seed notes
    assert [n[:22] for n in mt_report_notes(mt)] == ["empty Pi1: no MT built"]
    mt.save(tmp_path / MODEL_FILE)
    assert SourceLearn.artifact_stats(tmp_path)["mt_built"] is False
    script()
    full, _ = learn(tmp_path / "full")
    full.save(tmp_path / "full" / MODEL_FILE)
    assert full.history[-1].stats["mt_built"] is True and mt_report_notes(full) == []
    assert SourceLearn.artifact_stats(tmp_path / "full")["mt_built"] is True
