"""HippoRAG 2 with the scripted model (OpenIE and filter replies dictated per passage) and the hash
embedder: graph construction, synonym thresholding, two-hop PPR, dense fallback, save/load, and the
task-time options (matched context budget, gold passages excluded)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Element, Score, Source, Task
from sourcebench.harness.elements import split_file
from sourcebench.harness.embeddings import Embedder, HashEmbedder, l2_normalise
from sourcebench.harness.errors import DataError
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import Context, LearnContext
from sourcebench.harness.providers import scripted
from sourcebench.methods.evidence import context_key, prompt_tokens
from sourcebench.methods.hipporag2 import HippoRAG2
from sourcebench.methods.hipporag2.artifact import load_graph
from sourcebench.methods.hipporag2.graph import (
    build_graph,
    combine_edges,
    passage_embed_text,
    synonym_eligible,
    synonym_links,
)
from sourcebench.methods.hipporag2.openie import extract_all, normalise
from sourcebench.methods.hipporag2.retrieve import HippoRetriever, QuerySettings, recognise

P1 = Element(id="acme#founding", title="Acme / Founding",
             text="Alice Smith founded Acme Corp in 1990. Bob Jones works at Acme Corp.")
P2 = Element(id="bob#home", title="Bob / Home", text="Bob Jones lives in Paris with his cat.")
P3 = Element(id="zeta#products", title="Zeta / Products",
             text="Zeta makes widgets. Who founded the widget trade is unknown; widgets founded nothing.")
P4 = Element(id="misc#notes", title="Misc / Notes", text="Assorted notes without any clear facts.")
SOURCE = Source(id="toy", kind="documents", elements=[P1, P2, P3, P4])

NER = {
    P1.title: ["Alice Smith", "Acme Corp", "1990", "Bob Jones"],
    P2.title: ["Bob Jones", "Paris"],
    P3.title: ["Zeta"],
    P4.title: [],
}
TRIPLES = {
    P1.title: [["Alice Smith", "founded", "Acme Corp"], ["Bob Jones", "works at", "Acme Corp"]],
    P2.title: [["Bob Jones", "lives in", "Paris"]],
    P3.title: [["Zeta", "makes", "widgets"]],
    P4.title: None,  # the triple call fails (invalid JSON twice)
}
FOUNDED = ("alice smith", "founded", "acme corp")
QUESTION = "Who founded Acme Corp?"


class ToyBench(Benchmark):
    name = "toy"

    def source_ids(self) -> list[str]:
        return [SOURCE.id]

    def load_source(self, source_id: str) -> Source:
        return SOURCE

    def load_tasks(self, source_id: str) -> list[Task]:
        return []

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        return Score(value=0.0, correct=False)


def script(kept: list[list[str]] | None = None):
    """NER/triples per passage (found by its title in the last message); the filter keeps ``kept``."""

    def reply(messages, schema):
        props = (schema or {}).get("properties", {})
        last = next((m["content"] for m in reversed(messages) if m["role"] == "user" and "Passage:" in m["content"]), "")
        if "named_entities" in props:
            return json.dumps({"named_entities": next(v for t, v in NER.items() if t in last)})
        if "triples" in props:
            triples = next(v for t, v in TRIPLES.items() if t in last)
            if triples is None:
                return "not json"
            return json.dumps({"triples": [{"subject": s, "relation": r, "object": o} for s, r, o in triples]})
        if "facts" in props:
            return json.dumps({"facts": [{"subject": s, "relation": r, "object": o} for s, r, o in (kept or [])]})
        return "an answer"

    return reply


def contexts(tmp_path: Path, embedder: Embedder | None = None, source: Source = SOURCE):
    llm = LLM(ModelSpec(name="scripted/unit"), CallCache(tmp_path / "c.sqlite"), UsageLedger())
    common = {"source": source, "benchmark": ToyBench(), "embedder": embedder or HashEmbedder(),
              "store": ArtifactStore(tmp_path / "store")}
    workdir = tmp_path / "artifact"
    workdir.mkdir(exist_ok=True)
    learn = LearnContext(llm=llm.bind("hipporag2", "learn"), workdir=workdir, **common)
    test = Context(llm=llm.bind("hipporag2", "answer"), **common)
    return learn, test, llm


def learned(tmp_path: Path, kept=None, **config):
    scripted.set_script(script(kept))
    method = HippoRAG2(config)
    lctx, tctx, llm = contexts(tmp_path)
    stats = asyncio.run(method.learn(SOURCE, [], lctx))
    return method, stats, lctx, tctx, llm


def edge_map(data) -> dict[frozenset[str], float]:
    names = data.entities + data.passage_ids
    return {frozenset((names[a], names[b])): w for (a, b), w in zip(data.edges.tolist(), data.weights.tolist())}


def test_normalise_entities():
    assert normalise("  Bob-Jones's   Café! ") == "bob jones s café"
    assert normalise("__init__") == "init"


def test_graph_nodes_and_edges(tmp_path):
    _, stats, lctx, _, llm = learned(tmp_path)
    data = load_graph(lctx.workdir)
    assert data.entities == sorted(["alice smith", "acme corp", "bob jones", "paris", "zeta", "widgets"])
    assert data.passage_ids == [P1.id, P2.id, P3.id, P4.id]
    assert data.facts == sorted([FOUNDED, ("bob jones", "works at", "acme corp"), ("bob jones", "lives in", "paris"),
                                 ("zeta", "makes", "widgets")])
    # NER-only entities ("1990") are not nodes: entities come from triples, as in the official package
    assert "1990" not in data.entities
    expected = {
        ("acme corp", "alice smith"): 2.0, ("acme corp", "bob jones"): 2.0, ("bob jones", "paris"): 2.0,
        ("widgets", "zeta"): 2.0,
        ("acme corp", P1.id): 1.0, ("alice smith", P1.id): 1.0, ("bob jones", P1.id): 1.0,
        ("bob jones", P2.id): 1.0, ("paris", P2.id): 1.0, ("widgets", P3.id): 1.0, ("zeta", P3.id): 1.0,
    }
    assert edge_map(data) == {frozenset(k): w for k, w in expected.items()}  # no synonym edges among these names, P4 is isolated
    assert data.entity_passage_counts()[data.entities.index("bob jones")] == 2
    assert stats["n_entities"] == 6 and stats["n_facts"] == 4 and stats["n_triples"] == 4
    assert stats["n_synonym_edges"] == 0 and stats["n_passage_edges"] == 7 and stats["n_fact_edges"] == 4
    assert stats["ner_failures"] == 0 and stats["triple_failures"] == 1
    # triple extraction is conditioned on the NER output of the same passage
    tri_calls = [c for c in scripted.CALLS if "triples" in (c["schema"] or {}).get("properties", {})]
    p1_call = next(c for c in tri_calls if P1.title in c["messages"][-1]["content"])
    assert '"Alice Smith", "Acme Corp", "1990", "Bob Jones"' in p1_call["messages"][-1]["content"]
    stages = {(r["stage"], r["status"]): r["calls"] for r in llm.ledger.snapshot()}
    assert stages[("openie_ner", "live")] == 4 and stages[("openie_triples", "live")] == 5  # one retry
    assert [f["stage"] for f in llm.ledger.failures] == ["openie_triples"]
    saved = [json.loads(line) for line in (lctx.workdir / "openie.jsonl").read_text().splitlines()]
    assert saved[3] == {"element_id": P4.id, "entities": [], "triples": [], "ner_failed": False, "triples_failed": True,
                        "chunks": 1, "ner_failed_chunks": 0, "triple_failed_chunks": 1}
    assert stats["openie_chunks"] == 4 and stats["triple_chunk_failures"] == 1 and stats["ner_chunk_failures"] == 0


# -- passages read whole ---------------------------------------------------------------------------------


def chunk_script(marker_triples: dict[str, list[str]]):
    """NER names every marker in the passage text; triples: one per marker found (subject = marker)."""

    def reply(messages, schema):
        props = (schema or {}).get("properties", {})
        last = messages[-1]["content"]
        found = [m for m in marker_triples if m in last]
        if "named_entities" in props:
            return json.dumps({"named_entities": found})
        if "triples" in props:
            return json.dumps({"triples": [{"subject": m, "relation": marker_triples[m][0],
                                            "object": marker_triples[m][1]} for m in found]})
        return json.dumps({"facts": []}) if "facts" in props else "an answer"

    return reply


def openie_prompts() -> list[str]:
    return [c["messages"][-1]["content"] for c in scripted.CALLS
            if "named_entities" in (c["schema"] or {}).get("properties", {})]


def test_a_4000_character_passage_reaches_openie_whole(tmp_path):
    marker = "Mirabel Quince opened the vault."
    scene = Element(id="story#scene-2", title="Scene 2",
                    text=("The hall was quiet and the candles burned low. " * 90)[: 4000 - len(marker)] + marker)
    assert len(scene.text) == 4000 and scene.text.index("Mirabel Quince") > 1200
    source = Source(id="story", kind="documents", elements=[scene])
    scripted.set_script(chunk_script({"Mirabel Quince": ["opened", "the vault"]}))
    scripted.CALLS.clear()
    lctx, _, _ = contexts(tmp_path, source=source)
    stats = asyncio.run(HippoRAG2({}).learn(source, [], lctx))
    assert any("Mirabel Quince opened the vault" in p for p in openie_prompts())  # the later part is read
    assert stats["openie_chunks"] == 1  # 4,000 characters fit one call of 1,000 tokens
    assert load_graph(lctx.workdir).facts == [("mirabel quince", "opened", "the vault")]


def test_a_long_passage_is_read_in_chunks_with_merged_triples(tmp_path):
    part = "Plain words follow here without any marked names at all today. " * 40  # 2,560 characters
    text = "Ada Byron met Tom Kilburn. " + part + "Grace Hopper wrote COBOL. " + part + "Alan Turing cracked Enigma."
    long = Element(id="doc#long", title="Long", text=text)
    source = Source(id="long", kind="documents", elements=[long])
    triples = {"Ada Byron": ["met", "Tom Kilburn"], "Grace Hopper": ["wrote", "COBOL"],
               "Alan Turing": ["cracked", "Enigma"]}
    scripted.set_script(chunk_script(triples))
    scripted.CALLS.clear()
    lctx, _, _ = contexts(tmp_path, source=source)
    stats = asyncio.run(HippoRAG2({"openie_chunk_tokens": 500}).learn(source, [], lctx))  # 2,000 characters a call
    prompts = openie_prompts()
    assert stats["openie_chunks"] == len(prompts) == 3 and all(len(p) <= 2000 + 200 for p in prompts)
    assert all(sum(m in p for p in prompts) == 1 for m in triples)  # every part reaches exactly one call
    data = load_graph(lctx.workdir)
    assert data.facts == sorted({(normalise(s), normalise(r), normalise(o)) for s, (r, o) in triples.items()})
    assert data.passage_ids == [long.id] and stats["n_passages"] == 1


def test_passage_chunks_cover_the_text_exactly():
    from sourcebench.methods.hipporag2.openie import passage_chunks

    text = "short line\n" + "x" * 25 + " tail\n\n" + "word " * 30 + "\nlast"
    chunks = passage_chunks(text, 20)
    assert "".join(chunks) == text and all(len(c) <= 20 for c in chunks)
    assert passage_chunks("abc", 10) == ["abc"]


def test_code_passages_hold_each_line_once(tmp_path):
    code = "import os\n\n\nclass A:\n    x = 1\n\n    def f(self):\n        return os.sep\n\n\ndef g():\n    return 2\n"
    els = split_file("m.py", code)
    assert [e.id for e in els] == ["m.py", "m.py#A", "m.py#A.f", "m.py#g"]
    source = Source(id="code", kind="code", elements=els)
    scripted.set_script(chunk_script({}))
    scripted.CALLS.clear()
    lctx, tctx, _ = contexts(tmp_path, source=source)
    method = HippoRAG2({})
    asyncio.run(method.learn(source, [], lctx))
    data = load_graph(lctx.workdir)
    assert data.passage_ids == ["m.py", "m.py#A", "m.py#A.f", "m.py#g"]
    prompts = openie_prompts()
    assert len(prompts) == 4  # was 4 passages holding the file's lines up to three times
    for line in ("import os", "x = 1", "return os.sep", "return 2"):
        assert sum(line in p for p in prompts) == 1
    state = method.load(lctx.workdir, tctx)  # passages are recomputed from the source and match
    assert [e.text for e in state.elements] == ["import os", "class A:\n    x = 1",
                                                "    def f(self):\n        return os.sep", "def g():\n    return 2"]


def test_ppr_reaches_a_passage_two_hops_from_the_seeds(tmp_path):
    method, _, lctx, tctx, _ = learned(tmp_path, kept=[list(FOUNDED)])
    state = method.load(lctx.workdir, tctx)
    ranking = asyncio.run(state.retriever.rank(QUESTION, tctx.llm))
    assert ranking.mode == "ppr" and ranking.kept_facts == [FOUNDED]
    # both entities of the kept fact are seeds, weighted by fact score / passages mentioning the entity
    fscores = state.retriever.fact_scores(state.retriever.embed_query(QUESTION))
    fscore = fscores[state.retriever.data.facts.index(FOUNDED)]
    assert ranking.seeds == pytest.approx({"alice smith": fscore, "acme corp": fscore})
    order = [state.elements[i].id for i in ranking.passages]
    assert order[0] == P1.id
    assert order.index(P2.id) < order.index(P3.id)
    # the graph, not the dense seed, lifts P2: P3 is closer to the question by dense score ...
    dense = state.retriever.dense_scores(state.retriever.embed_query(QUESTION))
    assert dense[2] > dense[1]
    # ... and without passage seeds P3 (unconnected to the seeds) gets no PageRank at all
    only_graph = HippoRAG2({"passage_node_weight": 0.0}).load(lctx.workdir, tctx)
    r0 = asyncio.run(only_graph.retriever.rank(QUESTION, tctx.llm))
    scores = dict(zip(r0.passages, r0.scores))
    assert scores[1] > 0 and scores[2] == 0 and scores[3] == 0


def test_empty_recognition_falls_back_to_dense_order(tmp_path):
    method, _, lctx, tctx, llm = learned(tmp_path, kept=[])
    state = method.load(lctx.workdir, tctx)
    task = Task(id="t1", source_id="toy", question=QUESTION)
    answer = asyncio.run(method.answer(task, state, tctx))
    emb = HashEmbedder()
    q = emb.embed([QUESTION])[0]
    passages = emb.embed([f"{e.title}\n{e.text}" for e in SOURCE.elements])
    expected = [SOURCE.elements[i].id for i in np.argsort(-(passages @ q), kind="stable")]
    assert answer.evidence_ids == expected
    meta = answer.metadata["hipporag2"]
    assert meta["mode"] == "dense" and meta["kept_facts"] == [] and len(meta["candidate_facts"]) == 4
    assert any(r["stage"] == "recognition_filter" for r in llm.ledger.snapshot())


def test_answer_sends_top_k_ppr_passages(tmp_path):
    method, _, lctx, tctx, _ = learned(tmp_path, kept=[list(FOUNDED)], top_k=2)
    state = method.load(lctx.workdir, tctx)
    answer = asyncio.run(method.answer(Task(id="t1", source_id="toy", question=QUESTION), state, tctx))
    ranking = asyncio.run(state.retriever.rank(QUESTION, tctx.llm))
    assert answer.evidence_ids == [state.elements[i].id for i in ranking.passages[:2]]
    assert answer.metadata["hipporag2"]["mode"] == "ppr"
    solver_prompt = next(c for c in scripted.CALLS if c["schema"] is None)["messages"][-1]["content"]
    assert P1.text in solver_prompt and P3.text not in solver_prompt  # the shared answer prompt got the top 2


def _answer(method: HippoRAG2, lctx, tctx, task: Task) -> Answer:
    return asyncio.run(method.answer(task, method.load(lctx.workdir, tctx), tctx))


def test_matched_budget_reads_further_down_the_passage_ranking(tmp_path):
    method, _, lctx, tctx, _ = learned(tmp_path, kept=[list(FOUNDED)], top_k=1)
    task = Task(id="t1", source_id="toy", question=QUESTION)
    native = _answer(method, lctx, tctx, task)
    assert native.evidence_ids == [P1.id]

    def matched(target: int, task: Task = task) -> Answer:
        path = tmp_path / f"targets-{target}.json"
        path.write_text(json.dumps({"targets": {context_key("toy", 0, "t1"): target}}))
        return _answer(HippoRAG2({"top_k": 1, "match_context_file": str(path)}), lctx, tctx, task)

    everything = matched(10**6)
    state = method.load(lctx.workdir, tctx)
    ranking = asyncio.run(state.retriever.rank(QUESTION, tctx.llm))
    assert everything.evidence_ids == [state.elements[i].id for i in ranking.passages]  # the PPR order
    target = native.context_tokens + 25
    wide = matched(target)
    n = len(wide.evidence_ids)
    assert 1 < n < 4 and wide.evidence_ids == everything.evidence_ids[:n]
    assert native.context_tokens < wide.context_tokens <= target
    one_more = method.evidence(ranking, state, n + 1)
    assert prompt_tokens(tctx, task, one_more) > target  # it stopped just under the target
    assert wide.metadata["matched_target_tokens"] == target
    assert matched(1).evidence_ids == native.evidence_ids  # never below top_k
    lost = matched(target, task.model_copy(update={"id": "other"}))
    assert lost.failed and lost.failure_reason.startswith("match_context") and not lost.evidence_ids


@pytest.mark.parametrize("kept, mode", [([list(FOUNDED)], "ppr"), ([], "dense")])
def test_excluding_gold_drops_gold_passages_from_either_ranking(tmp_path, kept, mode):
    method, _, lctx, tctx, _ = learned(tmp_path, kept=kept, top_k=2)
    task = Task(id="t1", source_id="toy", question=QUESTION, metadata={"gold_element_ids": [P1.id]})
    native = _answer(method, lctx, tctx, task)
    assert native.metadata["hipporag2"]["mode"] == mode and P1.id in native.evidence_ids
    removed = _answer(HippoRAG2({"top_k": 2, "exclude_gold": True}), lctx, tctx, task)
    assert removed.metadata["hipporag2"]["mode"] == mode
    assert len(removed.evidence_ids) == 2 and P1.id not in removed.evidence_ids
    assert P1.text not in scripted.CALLS[-1]["messages"][-1]["content"]
    unlabelled = _answer(HippoRAG2({"exclude_gold": True}), lctx, tctx, task.model_copy(update={"metadata": {}}))
    assert unlabelled.failed and unlabelled.failure_reason.startswith("exclude_gold")


def test_task_time_options_at_their_defaults_leave_the_dumped_config_unchanged():
    dumped = HippoRAG2().config.model_dump()  # hashed into the artifact key
    assert "exclude_gold" not in dumped and "match_context_file" not in dumped


def test_recognition_maps_rewritten_facts_and_caps(tmp_path):
    _, tctx, _ = contexts(tmp_path)
    cands = [FOUNDED, ("bob jones", "works at", "acme corp"), ("bob jones", "lives in", "paris"),
             ("zeta", "makes", "widgets"), ("paris", "is in", "france")]
    kept = [["Alice Smith", "founded", "Acme Corp."], ["bob jones", "lives in", "paris, france"],
            ["alice smith", "founded", "acme corp"], ["zeta", "makes", "widgets"], ["paris", "is in", "france"],
            ["bob jones", "works at", "acme corp"]]
    scripted.set_script(script(kept))
    got = asyncio.run(recognise(tctx.llm, QUESTION, cands, max_keep=4))
    assert got == [0, 2, 3, 4]  # exact after normalisation, closest match, no repeats, at most 4
    scripted.set_script(lambda m, s: "not json")
    assert asyncio.run(recognise(tctx.llm, "another question", cands, max_keep=4)) == []


def test_synonym_links_only_at_cosine_threshold():
    def unit(cos: float, sign: float = 1.0) -> list[float]:
        return [cos, sign * float(np.sqrt(1 - cos * cos)), 0.0]

    emb = l2_normalise(np.array([unit(1.0), unit(0.81), unit(0.79, -1.0), [0.0, 0.0, 1.0]]))
    src, dst, score = synonym_links(emb, np.ones(4, dtype=bool), threshold=0.8)
    assert sorted(zip(src.tolist(), dst.tolist())) == [(0, 1), (1, 0)]
    assert score == pytest.approx([0.81, 0.81], abs=1e-6)
    # at most max_neighbours per entity, most similar first (ties by index); short entities only receive
    same = l2_normalise(np.ones((5, 3)))
    names = ["alpha", "beta", "gamma", "delta", "xy"]
    src, dst, _ = synonym_links(same, synonym_eligible(names), threshold=0.8, max_neighbours=2)
    links = sorted(zip(src.tolist(), dst.tolist()))
    assert links == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1), (3, 0), (3, 1)]
    assert synonym_eligible(["a-b", "a b c", "xyz"]).tolist() == [False, True, True]


class TableEmbedder(Embedder):
    """Fixed vectors for known strings; every other text gets one vector orthogonal to them."""

    name = "table-3"

    def __init__(self, table: dict[str, list[float]]):
        self.table = table

    @property
    def dim(self) -> int:
        return 3

    def _embed_batch(self, texts):
        return np.array([self.table.get(t, [0.0, 0.0, 1.0]) for t in texts], dtype=np.float32)


def test_synonym_edges_in_the_graph(tmp_path):
    from sourcebench.methods.hipporag2.openie import PassageExtraction

    a, b, c = "new york", "new york city", "boston"
    table = {a: [1.0, 0.0, 0.0], b: [0.9, float(np.sqrt(1 - 0.81)), 0.0], c: [0.7, -float(np.sqrt(1 - 0.49)), 0.0]}
    ex = [PassageExtraction("p1", triples=[(a, "is", b)]), PassageExtraction("p2", triples=[(c, "near", a)])]
    elements = [Element(id="p1", title="p1", text="x"), Element(id="p2", title="p2", text="y")]
    data = build_graph(ex, elements, TableEmbedder(table))
    edges = edge_map(data)
    # a<->b: cosine 0.9 replaces the co-occurrence count in both directions -> 2 x 0.9; a<->c: 0.7, no synonym
    assert edges[frozenset((a, b))] == pytest.approx(1.8, abs=1e-5)
    assert edges[frozenset((a, c))] == 2.0
    assert data.stats["n_synonym_edges"] == 1


def test_combine_edges_accounting():
    # fact 0-1 once; synonym link only 0->1 (0.9): replaces the 0->1 count, 1->0 keeps its count
    edges, w = combine_edges(
        4, fact_pairs=np.array([[0, 1], [2, 2]]), syn_src=np.array([0]), syn_dst=np.array([1]),
        syn_score=np.array([0.9]), passage_pairs=np.array([[3, 0], [3, 2]]))
    assert edges.tolist() == [[0, 1], [0, 3], [2, 3]]  # the self-loop triple adds no edge
    assert w.tolist() == pytest.approx([1.9, 1.0, 1.0])


def test_save_load_round_trip_gives_the_same_ranking(tmp_path):
    method, _, lctx, tctx, _ = learned(tmp_path, kept=[list(FOUNDED)])
    extractions = asyncio.run(extract_all(lctx.llm, SOURCE.elements, method._chunk_chars()))  # from the call cache
    fresh = HippoRetriever(build_graph(extractions, SOURCE.elements, HashEmbedder()), HashEmbedder(), QuerySettings())
    loaded = method.load(lctx.workdir, tctx).retriever
    for q in (QUESTION, "Where does Bob Jones live?"):
        r1 = asyncio.run(fresh.rank(q, tctx.llm))
        r2 = asyncio.run(loaded.rank(q, tctx.llm))
        assert r1.passages == r2.passages and r1.scores == pytest.approx(r2.scores, abs=1e-12)
        assert r1.mode == r2.mode == "ppr"
    assert np.array_equal(fresh.data.edges, loaded.data.edges)
    assert np.array_equal(fresh.data.fact_emb, loaded.data.fact_emb)


def test_load_rejects_a_changed_source(tmp_path):
    method, _, lctx, _, _ = learned(tmp_path)
    changed = Source(id="toy", kind="documents", elements=[P1, Element(id=P2.id, title=P2.title, text="Bob moved."), P3, P4])
    _, tctx, _ = contexts(tmp_path, source=changed)
    with pytest.raises(DataError, match="changed"):
        method.load(lctx.workdir, tctx)
    _, tctx2, _ = contexts(tmp_path, embedder=HashEmbedder(dim=64))
    with pytest.raises(DataError, match="embedder"):
        method.load(lctx.workdir, tctx2)


def test_recognition_memory_keeps_up_to_five_facts_as_the_official_link_top_k(tmp_path):
    """Official ``rerank_filter(..., len_after_rerank=link_top_k)`` with ``link_top_k`` 5: all 5 candidates
    may be kept (the filter prompt says so, and nothing after it drops the fifth)."""
    assert HippoRAG2().config.max_kept_facts == 5 and QuerySettings().max_kept_facts == 5
    _, tctx, _ = contexts(tmp_path)
    cands = [FOUNDED, ("bob jones", "works at", "acme corp"), ("bob jones", "lives in", "paris"),
             ("zeta", "makes", "widgets"), ("paris", "is in", "france")]
    scripted.set_script(script([list(c) for c in cands]))
    got = asyncio.run(recognise(tctx.llm, QUESTION, cands, HippoRAG2()._settings().max_kept_facts))
    assert got == [0, 1, 2, 3, 4]
    assert "at most 5 facts" in scripted.CALLS[-1]["messages"][0]["content"]


def test_passages_are_embedded_as_the_official_experiments_give_them_title_then_text():
    """The official package embeds each document string as given; its ``main.py`` passes
    ``f"{title}\\n{text}"`` for every corpus passage, so the title stays in the embedded content."""
    assert passage_embed_text(P2) == "Bob / Home\nBob Jones lives in Paris with his cat."
