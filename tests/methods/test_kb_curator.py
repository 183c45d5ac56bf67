"""Supervised KB curation with the scripted model: the store's edit tools and their limits, the
two-phase training iteration (gold shown only after the attempt), the frozen store read by the
fixed reader, and the action counts reported per task."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Element, Score, Source, Task
from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import Context, LearnContext
from sourcebench.harness.providers import scripted
from sourcebench.judges.exact_f1 import exact_f1
from sourcebench.methods.kb_curator import KBCurator
from sourcebench.methods.kb_curator.store import Edit, KnowledgeStore, StoreIndex
from sourcebench.methods.kb_curator.tools import Add, DedupGuard, GoldGuard, LinkMany, ToolBox, gold_values

PEOPLE = {"Ada": ("chess", "Ben"), "Ben": ("rowing", "Ada"), "Cy": ("chess", "Dee"), "Dee": ("golf", "Cy"),
          "Eve": ("chess", "Fay"), "Fay": ("golf", "Eve")}


def people_source() -> Source:
    els = []
    for n, (hobby, friend) in PEOPLE.items():
        els.append(Element(id=f"{n}#attributes", title=f"{n} > Attributes", path=n,
                           text=f"## Attributes\nThe hobby of {n} is {hobby}."))
        els.append(Element(id=f"{n}#friends", title=f"{n} > Friends", path=n,
                           text=f"## Friends\nThe friend of {n} is {friend}."))
    return Source(id="people", kind="documents", elements=els)


SOURCE = people_source()
CHESS = Task(id="g-chess", source_id="people", question="Who has the hobby chess?",
             reference=["Ada", "Cy", "Eve", "canary-chess"])
GOLF = Task(id="g-golf", source_id="people", question="Who has the hobby golf?",
            reference=["Dee", "Fay", "canary-golf"])
TEST = Task(id="t-chess", source_id="people", question="Which people play chess?", reference=["Ada", "Cy", "Eve"])


class PeopleBench(Benchmark):
    name = "people"
    answer_instructions = "Reply with the names only, separated by commas."

    def source_ids(self) -> list[str]:
        return ["people"]

    def load_source(self, source_id: str) -> Source:
        return SOURCE

    def load_tasks(self, source_id: str) -> list[Task]:
        return [CHESS, GOLF, TEST]

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        m = exact_f1(answer.text, task.reference)
        return Score(value=m["f1"], correct=bool(m["em"]), details=m, judge="exact_f1")


# -- scripting helpers ------------------------------------------------------------------------------------

READER, CURATOR, KEYS, DEDUP = "looking things up in a knowledge base", "A reader with search", \
    "list the keys the question names", "redundant documents"


def role(messages: list[dict[str, str]]) -> str:
    system = messages[0]["content"]
    for name, marker in (("reader", READER), ("curator", CURATOR), ("keys", KEYS), ("dedup", DEDUP)):
        if marker in system:
            return name
    return "solve"


def act(tool: str, **args: Any) -> str:
    return json.dumps({"action": {"tool": tool, **args}})


def router(reader: Callable[[int, str], str] | None = None, curator: Callable[[int, str], str] | None = None,
           dedup: bool = False, solve: str = "Ada, Cy, Eve") -> Callable:
    """Replies by role; ``reader``/``curator`` get the step number within the current episode (from the
    'Actions used: n' line) and the prompt."""
    def reply(messages, schema):
        r, prompt = role(messages), messages[-1]["content"]
        used = int(prompt.split("Actions used: ")[1].split(" ")[0]) if "Actions used: " in prompt else 0
        if r == "reader":
            return (reader or (lambda n, p: act("answer")))(used, prompt)
        if r == "curator":
            return (curator or (lambda n, p: act("done")))(used, prompt)
        if r == "keys":
            return json.dumps({"keys": "hobby chess", "missing_indexes": "people whose hobby is chess"})
        if r == "dedup":
            return json.dumps({"duplicate": dedup})
        return solve
    return reply


def calls_of(name: str) -> list[dict[str, Any]]:
    return [c for c in scripted.CALLS if role(c["messages"]) == name]


def contexts(tmp_path: Path, cache: str = "c.sqlite") -> tuple[LearnContext, Context, UsageLedger]:
    ledger = UsageLedger()
    llm = LLM(ModelSpec(name="scripted/unit", max_tokens=64), CallCache(tmp_path / cache), ledger)
    bench = PeopleBench()

    async def judge(task: Task, answer: Answer) -> Score:
        return await bench.score(task, answer)

    workdir = tmp_path / "artifact"
    workdir.mkdir(exist_ok=True)
    common = {"source": SOURCE, "benchmark": bench, "embedder": HashEmbedder(), "store": ArtifactStore(tmp_path / "store"),
              "judge": judge, "seed": 0}
    return (LearnContext(llm=llm.bind("kb-curator", "learn"), workdir=workdir, **common),
            Context(llm=llm.bind("kb-curator", "answer"), **common), ledger)


def toolbox(store: KnowledgeStore | None = None) -> ToolBox:
    store = store or KnowledgeStore.from_source(SOURCE)
    return ToolBox(store, StoreIndex(store, HashEmbedder()))


BUILD_INDEX = {
    0: act("add", title="People whose hobby is chess", text="Index of the people whose hobby is chess."),
    1: act("link_many", from_id="kb:0001", to_ids=["Ada#attributes", "Cy#attributes", "Eve#attributes"]),
}


def build_index_curator(n: int, prompt: str) -> str:
    return BUILD_INDEX.get(n, act("done"))


# -- the tools ---------------------------------------------------------------------------------------------


def test_link_many_rejects_41_targets_and_accepts_40():
    store = KnowledgeStore.from_source(SOURCE)
    for i in range(45):
        store.apply(Edit(op="add", doc_id=f"kb:{i + 1:04d}", title=f"note {i}", text=f"note number {i}"))
    tools = toolbox(store)
    ids = [f"kb:{i + 1:04d}" for i in range(1, 45)]
    obs = tools.link_many(LinkMany(tool="link_many", from_id="Ada#friends", to_ids=ids[:41]), "t")
    assert not obs.ok and obs.kind == "reject"
    assert "at most 40 targets, got 41" in obs.text and "nothing was linked" in obs.text
    assert store.docs["Ada#friends"].links == [] and tools.trace == []
    assert tools.counts["rejected_link_limit"] == 1
    ok = tools.link_many(LinkMany(tool="link_many", from_id="Ada#friends", to_ids=ids[:40]), "t")
    assert ok.ok and store.docs["Ada#friends"].links == ids[:40]
    assert [e.op for e in tools.trace] == ["link"]


def test_link_many_rejection_reaches_the_curator_as_its_next_observation(tmp_path):
    too_many = [f"x{i}" for i in range(41)]

    def curator(n, prompt):
        return act("link_many", from_id="Ada#friends", to_ids=too_many) if n == 0 else act("done")

    scripted.set_script(router(curator=curator))
    lctx, _, _ = contexts(tmp_path)
    stats = asyncio.run(KBCurator({"epochs": 1}).learn(SOURCE, [CHESS], lctx))
    second = calls_of("curator")[1]["messages"][-1]["content"]
    assert "rejected: link_many takes at most 40 targets, got 41" in second
    assert stats["rejected"] == {"link_limit": 1} and stats["n_links"] == 0


def test_gold_guard_refuses_documents_that_recite_the_answer():
    guard = GoldGuard(CHESS.reference, CHESS.question)
    assert guard.violates("Chess players: Ada, Cy and Eve.")
    assert not guard.violates("Index of the people whose hobby is chess.")  # 'chess' is in the question
    assert not guard.violates("Adams family")  # whole words only
    assert gold_values({"api_call": "torch.hub.load('x')", "domain": "vision"}) == ["torch.hub.load('x')"]

    async def run():
        tools = toolbox()
        class NoModel:  # the gold guard refuses before any model call could be made
            llm = None

        obs = await tools.add(Add(tool="add", title="chess", text="The players are Ada, Cy, Eve."), "t", guard,
                              DedupGuard(tools.index, NoModel(), threshold=0.01))  # type: ignore[arg-type]
        return tools, obs

    tools, obs = asyncio.run(run())
    assert not obs.ok and "state the answer" in obs.text
    assert tools.counts["rejected_gold"] == 1 and len(tools.store) == len(SOURCE.elements)


def test_delete_cascades_unlink_edit_and_trace_replays_to_the_same_store():
    tools = toolbox()
    store = tools.store
    for e in [Edit(op="add", doc_id="kb:0001", title="chess players", text="Index of chess players."),
              Edit(op="link", doc_id="kb:0001", targets=["Ada#attributes", "Cy#attributes", "Eve#attributes"]),
              Edit(op="link", doc_id="Ben#friends", targets=["Ada#attributes"]),
              Edit(op="edit", doc_id="Cy#friends", text="The friend of Cy is Dee; they met at school."),
              Edit(op="unlink", doc_id="kb:0001", targets=["Eve#attributes"]),
              Edit(op="delete", doc_id="Ada#attributes")]:
        store.apply(e)
        tools.trace.append(e)
    assert store.docs["kb:0001"].links == ["Cy#attributes"]  # Eve unlinked, Ada deleted
    assert store.docs["Ben#friends"].links == []  # the delete removed the inbound link too
    assert store.docs["Cy#friends"].edited and store.docs["Cy#friends"].original_text.startswith("## Friends")
    replayed = KnowledgeStore.from_source(SOURCE)
    for e in tools.trace:
        replayed.apply(e)
    assert replayed.to_json() == store.to_json()
    assert KnowledgeStore.from_json(store.to_json()).to_json() == store.to_json()


def test_entries_are_individually_removable():
    store = KnowledgeStore.from_source(SOURCE)
    store.apply(Edit(op="add", doc_id="kb:0001", title="chess players", text="Index of chess players."))
    store.apply(Edit(op="link", doc_id="kb:0001", targets=["Ada#attributes", "Cy#attributes"]))
    store.apply(Edit(op="edit", doc_id="Dee#friends", text="The friend of Dee is Cy, since childhood."))
    store.apply(Edit(op="delete", doc_id="Fay#friends"))
    ids = {e.id for e in store.entries()}
    assert ids == {"doc:kb:0001", "link:kb:0001->Ada#attributes", "link:kb:0001->Cy#attributes",
                   "edit:Dee#friends", "delete:Fay#friends"}
    no_link = store.without("link:kb:0001->Ada#attributes")
    assert no_link.docs["kb:0001"].links == ["Cy#attributes"] and store.docs["kb:0001"].links[0] == "Ada#attributes"
    assert "kb:0001" not in store.without("doc:kb:0001")
    assert store.without("edit:Dee#friends").docs["Dee#friends"].text == "## Friends\nThe friend of Dee is Cy."
    assert store.without("delete:Fay#friends").docs["Fay#friends"].text == "## Friends\nThe friend of Fay is Eve."
    assert store.coverage() == 2 / 11  # 11 source documents left, 2 reached from the index
    by_id = {e.id: e for e in store.entries()}
    assert by_id["link:kb:0001->Cy#attributes"].description == "chess players -> Cy > Attributes"
    assert by_id["link:kb:0001->Cy#attributes"].text == "kb:0001" and by_id["delete:Fay#friends"].text == ""


def test_near_duplicate_writes_go_to_the_judge_and_are_vetoed(tmp_path):
    copy = SOURCE.elements[0]

    def curator(n, prompt):
        return act("add", title=copy.title, text=copy.text) if n == 0 else act("done")

    scripted.set_script(router(curator=curator, dedup=True))
    lctx, _, _ = contexts(tmp_path)
    stats = asyncio.run(KBCurator({"epochs": 1}).learn(SOURCE, [GOLF], lctx))
    assert len(calls_of("dedup")) == 1 and stats["dedup"] == {"judged": 1, "vetoed": 1}
    assert stats["n_authored"] == 0 and stats["rejected"] == {"duplicate": 1}
    assert "too close to the existing document [Ada#attributes]" in calls_of("curator")[1]["messages"][-1]["content"]


# -- training and reading -----------------------------------------------------------------------------------


def learn(tmp_path: Path, guidance: list[Task], **config: Any) -> tuple[KBCurator, dict, LearnContext, Context, UsageLedger]:
    method = KBCurator({"epochs": 1, **config})
    lctx, tctx, ledger = contexts(tmp_path)
    stats = asyncio.run(method.learn(SOURCE, guidance, lctx))
    return method, stats, lctx, tctx, ledger


def test_gold_is_shown_only_after_the_attempt_and_never_stored(tmp_path):
    scripted.set_script(router(reader=lambda n, p: act("search", query="hobby chess") if n == 0 else act("answer"),
                               curator=build_index_curator))
    _, stats, lctx, _, _ = learn(tmp_path, [CHESS])
    for name in ("reader", "solve"):  # the forward attempt never sees the reference
        assert calls_of(name) and not any("canary-chess" in json.dumps(c["messages"]) for c in calls_of(name))
    backward = calls_of("curator")[0]["messages"][-1]["content"]
    assert "Correct answer: Ada; Cy; Eve; canary-chess" in backward
    assert "F1 of your answer: 0.86 (outcome: partly correct)" in backward
    assert "1. search(query=\"hobby chess\") -> [" in backward  # its own trajectory
    stored = "".join(p.read_text() for p in lctx.workdir.iterdir() if p.suffix in (".json", ".jsonl"))
    assert "canary" not in stored
    assert stats["n_authored"] == 1 and stats["n_links"] == 3 and stats["edits"]["add"] == 1


def test_curated_index_persists_in_the_frozen_store_and_the_reader_uses_it(tmp_path):
    scripted.set_script(router(curator=build_index_curator))
    method, stats, lctx, tctx, _ = learn(tmp_path, [CHESS])
    assert stats["coverage"] == round(3 / 12, 4)
    trace = [json.loads(x) for x in (lctx.workdir / "trace.jsonl").read_text().splitlines()]
    assert [t["op"] for t in trace] == ["add", "link"] and trace[0]["task_id"] == "g-chess"

    state = method.load(lctx.workdir, tctx)  # a fresh load of the written artifact
    assert state.store.docs["kb:0001"].links == ["Ada#attributes", "Cy#attributes", "Eve#attributes"]
    scripted.reset()

    def reader(n, prompt):
        return [act("search", query="people whose hobby is chess"), act("read", doc_id="kb:0001"), act("answer")][n]

    scripted.set_script(router(reader=reader))
    ans = asyncio.run(method.answer(TEST, state, tctx))
    read_prompt = calls_of("reader")[1]["messages"][-1]["content"]
    assert "[kb:0001] People whose hobby is chess" in read_prompt  # the search finds the index document
    assert ans.evidence_ids[0] == "kb:0001"
    solve_prompt = calls_of("solve")[0]["messages"][-1]["content"]
    assert "Linked documents:" in solve_prompt and "[Eve#attributes] Eve > Attributes" in solve_prompt
    assert ans.metadata["actions"] == 3 and ans.metadata["reads"] == 1 and ans.metadata["searches"] == 1
    assert ans.metadata["stop"] == "answer" and not ans.metadata["budget_exhausted"]
    assert {"doc:kb:0001", "link:kb:0001->Eve#attributes"} <= set(ans.metadata["entries_used"])
    # removing the index entry gives a store whose reader can no longer open it
    assert "kb:0001" not in method.without(state, "doc:kb:0001").store
    entries = method.entries(state)
    assert {e.id for e in entries} == {"doc:kb:0001", "link:kb:0001->Ada#attributes", "link:kb:0001->Cy#attributes",
                                       "link:kb:0001->Eve#attributes"}
    # each entry's text occurs in the prompts that showed it (what exposure checks look for)
    prompts = [c["messages"][-1]["content"] for c in scripted.CALLS]
    assert all(any(e.text in p for p in prompts[2:]) for e in entries)
    assert not any(e.text in prompts[0] for e in entries)  # nothing was shown before the first search


def test_reader_budget_counts_every_action_and_answers_at_the_limit(tmp_path):
    scripted.set_script(router(reader=lambda n, p: act("search", query=f"query {n}")))
    method, _, lctx, tctx, ledger = learn(tmp_path, [], reader_budget=4)
    state = method.load(lctx.workdir, tctx)
    ans = asyncio.run(method.answer(TEST, state, tctx))
    assert len(calls_of("reader")) == 4 and len(calls_of("solve")) == 1
    assert ans.metadata["actions"] == 4 and ans.metadata["budget_exhausted"] and ans.metadata["stop"] == "budget"
    assert ans.text == "Ada, Cy, Eve"
    stages = {r["stage"]: r["calls"] for r in ledger.snapshot() if r["phase"] == "answer"}
    assert stages == {"read_step": 4, "answer": 1}
    # the paper's rule instead: a spent budget is an unanswered question
    scripted.CALLS.clear()
    abstain = KBCurator({"reader_budget": 4, "on_exhausted": "abstain"})
    ans2 = asyncio.run(abstain.answer(TEST, state, tctx))
    assert ans2.text == "" and not ans2.failed and not calls_of("solve")


def test_reader_memory_keeps_only_recent_action_result_pairs(tmp_path):
    scripted.set_script(router(reader=lambda n, p: act("search", query=f"marker{n}") if n < 4 else act("answer")))
    method, _, lctx, tctx, _ = learn(tmp_path, [], memory_window=2)
    asyncio.run(method.answer(TEST, method.load(lctx.workdir, tctx), tctx))
    last = calls_of("reader")[-1]["messages"][-1]["content"]
    assert "marker3" in last and "marker2" in last and "marker1" not in last
    assert "(2 earlier action(s) no longer shown)" in last


def test_a_failed_reader_step_is_a_failed_answer(tmp_path):
    scripted.set_script(router(reader=lambda n, p: "not json"))
    method, _, lctx, tctx, _ = learn(tmp_path, [])
    ans = asyncio.run(method.answer(TEST, method.load(lctx.workdir, tctx), tctx))
    assert ans.failed and ans.failure_reason.startswith("reader step failed") and not calls_of("solve")


def test_training_records_forward_f1_actions_and_epochs(tmp_path):
    scripted.set_script(router(curator=build_index_curator))
    _, stats, lctx, _, _ = learn(tmp_path, [CHESS, GOLF], epochs=2)
    rows = [json.loads(x) for x in (lctx.workdir / "training.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 0, 1, 1] and sorted(r["task_id"] for r in rows[:2]) == ["g-chess", "g-golf"]
    assert all(r["forward_actions"] == 1 for r in rows)  # the scripted reader answers at once
    chess = [r for r in rows if r["task_id"] == "g-chess"]
    assert chess[0]["forward_f1"] == 0.8571 and chess[0]["outcome"] == "partly correct"
    assert stats["iterations"] == 4 and stats["per_epoch"]["1"]["forward_actions"] == 1.0
    # every iteration adds an index (the judge says 'not a duplicate'); only the first link_many changes
    # anything, the later ones find every target already linked and are refused as no-ops
    assert stats["n_authored"] == 4 and stats["n_links"] == 3
    assert stats["edits"]["add"] == 4 and stats["edits"]["link"] == 1 and stats["rejected"] == {"no_change": 3}
    assert stats["dedup"] == {"judged": 3}
    assert all(r["backward_actions"] == 3 and r["backward_stop"] == "done" for r in rows)


def test_learning_is_deterministic(tmp_path):
    outs = []
    for run in ("a", "b"):
        scripted.reset()
        scripted.set_script(router(reader=lambda n, p: act("search", query="chess") if n == 0 else act("answer"),
                                   curator=build_index_curator))
        d = tmp_path / run
        d.mkdir()
        method = KBCurator({"epochs": 1})
        lctx, _, _ = contexts(d)
        asyncio.run(method.learn(SOURCE, [CHESS, GOLF], lctx))
        outs.append({p.name: p.read_bytes() for p in lctx.workdir.iterdir()})
    assert outs[0] == outs[1]


def test_learn_more_curates_the_current_store_once_per_new_question(tmp_path):
    """Prequential (online) use: the same curator continues the store; each new question is curated once."""
    scripted.set_script(router(curator=build_index_curator))
    method, _, lctx, tctx, _ = learn(tmp_path, [CHESS], epochs=2)
    state = method.load(lctx.workdir, tctx)
    before = state.store.to_json()
    n_docs = len(state.store.docs)
    more_dir = tmp_path / "more"
    more_dir.mkdir()
    more_ctx = dataclasses.replace(lctx, workdir=more_dir)
    new = asyncio.run(method.learn_more(state, [GOLF], more_ctx))
    rows = [json.loads(x) for x in (more_dir / "training.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["epoch"]) for r in rows] == [("g-golf", 0)]  # once, not once per epoch
    assert len(new.store.docs) == n_docs + 1 and "kb:0001" in new.store  # built on the store it was given
    assert state.store.to_json() == before and len(state.store.docs) == n_docs  # the given state is unchanged
    assert method.load(more_dir, tctx).store.docs.keys() == new.store.docs.keys()  # and the new one is saved


def test_an_endpoint_serving_256_dimension_vectors_for_text_embedding_3_large_builds_and_answers(
        tmp_path, api_env, monkeypatch):
    """The stored vectors are compared with what the endpoint returns, not with the model's native 3,072."""
    from sourcebench.harness.embeddings import get_embedder
    from tests.backends import api_server as backend

    monkeypatch.setitem(backend.EMBED_DIMS, "text-embedding-3-large", 256)  # as a `dimensions` setting would
    emb = get_embedder("openai/text-embedding-3-large", tmp_path / "cache")
    scripted.set_script(router(curator=build_index_curator))
    method = KBCurator({"epochs": 1})
    lctx, tctx, _ = contexts(tmp_path)
    lctx, tctx = dataclasses.replace(lctx, embedder=emb), dataclasses.replace(tctx, embedder=emb)
    asyncio.run(method.learn(SOURCE, [CHESS], lctx))
    state = method.load(lctx.workdir, tctx)  # was: "vectors of dimension 256, but embedder ... gives 3072"

    def reader(n, prompt):
        return [act("search", query="people whose hobby is chess"), act("answer")][n]

    scripted.set_script(router(reader=reader))
    ans = asyncio.run(method.answer(TEST, state, tctx))
    assert not ans.failed and ans.evidence_ids and emb.dim == 256
    assert {c["dimensions"] for c in api_env.stats()["calls"] if c["endpoint"] == "embeddings"} == {256}
