"""AWM with the scripted model: induction sees only judged successes, workflows are validated,
the workflow set reaches the test-time prompt, and references never leak."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.data import Answer, Element, Score, Source, Task
from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import Context, LearnContext
from sourcebench.harness.providers import scripted
from sourcebench.methods.awm import (
    AWM,
    AWMState,
    Experience,
    fit_count,
    induction_messages,
    induction_order,
    render_workflows,
)
from tests.methods.toybench import toy_bench

SOURCE = Source(id="toyworld", kind="documents", description="articles about a few people", elements=[
    Element(id="alice#family", title="Alice / Family", text="The mother of Alice is Carol. Alice has a dog named Rex."),
    Element(id="bob#family", title="Bob / Family", text="The father of Bob is Dave. Bob likes chess."),
    Element(id="carol#job", title="Carol / Job", text="The job of Carol is baker. Carol lives in Lyon."),
    Element(id="dave#job", title="Dave / Job", text="The job of Dave is pilot. Dave lives in Oslo."),
    Element(id="erin#hobby", title="Erin / Hobby", text="The hobby of Erin is rowing. Erin is the sister of Bob."),
])

GUIDANCE = [
    Task(id="g1", source_id="toyworld", group="job_of_parent", question="What is the job of the mother of Alice?",
         reference="REFSECRET-1"),
    Task(id="g2", source_id="toyworld", group="job_of_parent", question="What is the job of the father of Bob?",
         reference="REFSECRET-2"),
    Task(id="g3", source_id="toyworld", group="hobby", question="What is the hobby of the sister of Bob?",
         reference="REFSECRET-3"),
    Task(id="g4", source_id="toyworld", group="hobby", question="Where does the dog of Alice sleep?",
         reference="REFSECRET-4"),
]
TEST = Task(id="t1", source_id="toyworld", group="city", question="Where does Dave live?", reference="REFSECRET-T")

GOOD = {"name": "job_of_relative", "description": "Finds the job of a relative of a person.",
        "steps": ["Find the family section of {person} and read who their {relation} is.",
                  "Open the job section of {relative} and answer with the job."]}
INDUCED = {"workflows": [
    GOOD,
    {"name": "one_step", "description": "Too short.", "steps": ["Read the article of {person}."]},
    {"name": "Job of relative", "description": "Repeated name.", "steps": ["a {x}", "b {y}"]},
    {"name": "hobby_of_sibling", "description": "Finds the hobby of a sibling.",
     "steps": ["Find who the {sibling_relation} of {person} is.", "Read the hobby section of {sibling}."]},
]}


def script(induce_reply: str = json.dumps(INDUCED)):
    def reply(messages, schema):
        if schema is not None:
            return induce_reply
        return f"answer-{len(messages[-1]['content'])}"  # deterministic, never a reference

    return reply


def contexts(tmp_path: Path, correct_ids: set[str], window: int | None = None):
    llm = LLM(ModelSpec(name="scripted/unit", max_tokens=64, context_window=window),
              CallCache(tmp_path / "c.sqlite"), UsageLedger())
    store = ArtifactStore(tmp_path / "store")
    embedder = HashEmbedder()
    judged: list[str] = []

    async def judge(task: Task, answer: Answer) -> Score:
        judged.append(task.id)
        ok = task.id in correct_ids
        return Score(value=float(ok), correct=ok, judge="fake")

    workdir = tmp_path / "artifact"
    workdir.mkdir()
    common = {"source": SOURCE, "benchmark": toy_bench(SOURCE, GUIDANCE + [TEST], "AWM"), "embedder": embedder, "store": store, "judge": judge}
    learn = LearnContext(llm=llm.bind("awm", "learn"), workdir=workdir, **common)
    test = Context(llm=llm.bind("awm", "answer"), **common)
    return learn, test, llm, judged


def learn(tmp_path, correct_ids, window=None, **config):
    method = AWM(config)
    lctx, tctx, llm, judged = contexts(tmp_path, correct_ids, window)
    stats = asyncio.run(method.learn(SOURCE, GUIDANCE, lctx))
    return method, stats, lctx, tctx, llm, judged


def induce_calls():
    return [c for c in scripted.CALLS if c["schema"] is not None]


def test_induces_once_from_successful_experiences_only(tmp_path):
    scripted.set_script(script())
    _, stats, _, _, _, judged = learn(tmp_path, {"g1", "g2", "g3"})
    assert sorted(judged) == ["g1", "g2", "g3", "g4"]
    calls = induce_calls()
    assert len(calls) == 1
    prompt = calls[0]["messages"][-1]["content"]
    for t in GUIDANCE[:3]:
        assert t.question in prompt
    assert GUIDANCE[3].question not in prompt
    assert "alice#family" in prompt  # experiences carry the retrieved evidence ids
    assert stats["n_guidance"] == 4 and stats["n_successful"] == 3 and stats["n_experiences_used"] == 3


def test_short_and_duplicate_workflows_are_dropped(tmp_path):
    scripted.set_script(script())
    _, stats, lctx, _, _, _ = learn(tmp_path, {"g1", "g2", "g3"})
    saved = json.loads((lctx.workdir / "workflows.json").read_text())
    assert [w["name"] for w in saved["workflows"]] == ["job_of_relative", "hobby_of_sibling"]
    assert all(len(w["steps"]) >= 2 for w in saved["workflows"])
    assert stats["n_induced"] == 4 and stats["n_workflows"] == 2
    assert stats["n_dropped_short"] == 1 and stats["n_dropped_duplicate"] == 1
    assert saved["stats"] == stats
    assert "## job_of_relative" in (lctx.workdir / "workflows.md").read_text()


def test_workflow_set_reaches_the_test_prompt_next_to_evidence(tmp_path):
    scripted.set_script(script())
    method, _, lctx, tctx, _, _ = learn(tmp_path, {"g1", "g2", "g3"})
    state = method.load(lctx.workdir, tctx)
    assert isinstance(state, AWMState) and len(state.workflows) == 2
    n_before = len(scripted.CALLS)
    ans = asyncio.run(method.answer(TEST, state, tctx))
    assert len(scripted.CALLS) == n_before + 1
    user = scripted.CALLS[-1]["messages"][-1]["content"]
    assert state.notes and state.notes in user
    assert "Open the job section of {relative} and answer with the job." in user
    assert "Source excerpts:" in user and "dave#job" in user
    assert ans.metadata["n_workflows"] == 2 and "dave#job" in ans.evidence_ids


def test_zero_successes_give_an_empty_set_without_an_induce_call(tmp_path):
    scripted.set_script(script())
    method, stats, lctx, tctx, _, _ = learn(tmp_path, set())
    assert not induce_calls()
    assert stats["n_successful"] == 0 and stats["n_workflows"] == 0 and not stats["induce_failed"]
    state = method.load(lctx.workdir, tctx)
    assert state.workflows == [] and state.notes == ""
    asyncio.run(method.answer(TEST, state, tctx))
    assert "Knowledge about the source" not in scripted.CALLS[-1]["messages"][-1]["content"]


def test_reference_never_reaches_induction_or_artifact(tmp_path):
    scripted.set_script(script())
    _, _, lctx, _, _, _ = learn(tmp_path, {"g1", "g2", "g3", "g4"})
    for call in scripted.CALLS:
        assert all("REFSECRET" not in m["content"] for m in call["messages"])
    for f in lctx.workdir.rglob("*"):
        if f.is_file():
            assert "REFSECRET" not in f.read_text()


def test_costs_are_recorded_by_stage(tmp_path):
    scripted.set_script(script())
    _, _, _, _, llm, _ = learn(tmp_path, {"g1"})
    stages = {(r["phase"], r["stage"]): r["calls"] for r in llm.ledger.snapshot()}
    assert stages[("learn", "guidance_answer")] == 4 and stages[("learn", "induce")] == 1


def test_failed_induction_is_recorded_not_raised(tmp_path):
    scripted.set_script(script(induce_reply="not json"))
    _, stats, lctx, _, _, _ = learn(tmp_path, {"g1", "g2"})
    assert stats["induce_failed"] and stats["n_workflows"] == 0 and stats["induce_error"]
    assert json.loads((lctx.workdir / "workflows.json").read_text())["workflows"] == []


def _exp(task_id: str) -> Experience:
    return Experience(task_id, "q " + task_id, [], "a", True)


def test_induction_order_is_a_seeded_permutation_independent_of_input_order():
    exps = [_exp(f"t{i}") for i in range(12)]
    order0 = [e.task_id for e in induction_order(exps, seed=0)]
    assert sorted(order0) == sorted(e.task_id for e in exps)
    assert order0 == [e.task_id for e in induction_order(exps[::-1], seed=0)]
    assert order0 != [e.task_id for e in induction_order(exps, seed=1)]
    assert order0 != [e.task_id for e in exps]


def test_fit_count_keeps_as_many_blocks_as_fit():
    blocks = ["x" * 400] * 5  # 100 tokens each, plus the joining blank line
    fixed = sum(len(m["content"]) for m in induction_messages(SOURCE, [])) // 4
    assert fit_count(SOURCE, blocks, None, 50) == 5
    assert fit_count(SOURCE, blocks, fixed + 50 + 250, 50) == 2
    assert fit_count(SOURCE, blocks, fixed + 10, 50) == 0


def test_truncation_to_the_context_window_is_recorded(tmp_path):
    scripted.set_script(script())
    reserve = 64
    # Room for the instructions, the reply and about one experience, not three.
    window = sum(len(m["content"]) for m in induction_messages(SOURCE, [])) // 4 + reserve + 180
    _, stats, _, _, _, _ = learn(tmp_path, {"g1", "g2", "g3"}, window=window, induce_max_tokens=reserve,
                                 excerpt_chars=40)
    assert stats["n_successful"] == 3 and 0 < stats["n_experiences_used"] < 3
    assert stats["n_truncated"] == 3 - stats["n_experiences_used"]
    prompt = induce_calls()[0]["messages"]
    assert sum(len(m["content"]) for m in prompt) / 4 + reserve <= window
    order = [e.task_id for e in induction_order([_exp(t.id) for t in GUIDANCE[:3]], seed=0)]
    kept = {t.id for t in GUIDANCE if t.question in prompt[-1]["content"]}
    assert kept == set(order[: stats["n_experiences_used"]])  # a prefix of the seeded order


def test_render_is_empty_for_no_workflows():
    assert render_workflows([]) == ""


def test_copies_of_the_format_example_are_dropped():
    from sourcebench.methods.awm import EXAMPLE_NAME, Workflow, clean_workflows

    kept, dropped = clean_workflows([Workflow(name=EXAMPLE_NAME, description="d", steps=["a", "b"]),
                                     Workflow(name="  ", description="d", steps=["a", "b"]),
                                     Workflow(name="ok", description="d", steps=["a {x}", " ", "b {y}"])])
    assert [w.name for w in kept] == ["ok"] and kept[0].steps == ["a {x}", "b {y}"]
    assert dropped["example"] == 1 and dropped["unnamed"] == 1
